// libFuzzer harness: load_csv_from_string (include/oxmera/formats.hpp, the in-memory twin of load_csv;
// tests/test_formats.cpp checks they agree). Byte 0 picks the options (delimiter, header,
// missing values as NaN, F32/F64); the rest is the file.
#include <string_view>

#include "fuzz_common.hpp"
#include "oxmera/formats.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint8_t head = size > 0 ? data[0] : 0;
  oxmera::CsvOptions options;
  const char delimiters[] = {',', ';', '\t', ' '};
  options.delimiter = delimiters[head % 4];
  options.has_header = (head & 4) != 0;
  options.missing_as_nan = (head & 8) != 0;
  options.dtype = (head & 16) != 0 ? oxmera::DType::F64 : oxmera::DType::F32;
  const std::string_view text(reinterpret_cast<const char*>(data) + (size > 0 ? 1 : 0), size > 0 ? size - 1 : 0);
  return oxmera_fuzz::run_expecting_oxmera_errors([&] {
    const oxmera::CsvTable table = oxmera::load_csv_from_string(text, options, "the input");
    (void)table.values.to(oxmera::DType::F64).sum().item<double>();
  });
}
