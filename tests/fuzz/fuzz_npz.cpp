// libFuzzer harness: load_npz_from_bytes (include/oxmera/formats.hpp, the in-memory twin of load_npz;
// tests/test_formats.cpp checks they agree) on arbitrary bytes.
#include "fuzz_common.hpp"
#include "oxmera/formats.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return oxmera_fuzz::run_expecting_oxmera_errors([&] {
    for (const auto& [name, t] : oxmera::load_npz_from_bytes(data, size, "the input"))
      (void)t.to(oxmera::DType::F64).sum().item<double>();
  });
}
