// libFuzzer harness: load_idx_from_bytes (include/oxmera/formats.hpp, the in-memory twin of load_idx;
// tests/test_formats.cpp checks they agree) on arbitrary bytes.
#include "fuzz_common.hpp"
#include "oxmera/formats.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return oxmera_fuzz::run_expecting_oxmera_errors([&] {
    // Plain and gzip files alike (the reader decides by the 1f 8b magic).
    const oxmera::Tensor t = oxmera::load_idx_from_bytes(data, size, "the input");
    (void)t.to(oxmera::DType::F64).sum().item<double>();
  });
}
