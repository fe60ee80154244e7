// libFuzzer harness: load_idx (include/oxmera/formats.hpp) on arbitrary bytes.
#include "fuzz_common.hpp"
#include "oxmera/formats.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = oxmera_fuzz::write_input(data, size, ".idx");
  return oxmera_fuzz::run_expecting_oxmera_errors([&] {
    // Plain and gzip files alike (the reader decides by the 1f 8b magic).
    const oxmera::Tensor t = oxmera::load_idx(path);
    (void)t.to(oxmera::DType::F64).sum().item<double>();
  });
}
