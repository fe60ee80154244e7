// libFuzzer harness: load_npz (include/oxmera/formats.hpp) on arbitrary bytes.
#include "fuzz_common.hpp"
#include "oxmera/formats.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = oxmera_fuzz::write_input(data, size, ".npz");
  return oxmera_fuzz::run_expecting_oxmera_errors([&] {
    for (const auto& [name, t] : oxmera::load_npz(path)) (void)t.to(oxmera::DType::F64).sum().item<double>();
  });
}
