// libFuzzer harness: load_safetensors_with_metadata (include/oxmera/io.hpp) on arbitrary bytes.
#include "fuzz_common.hpp"
#include "oxmera/io.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = oxmera_fuzz::write_input(data, size, ".safetensors");
  return oxmera_fuzz::run_expecting_oxmera_errors([&] {
    const oxmera::SafetensorsFile file = oxmera::load_safetensors_with_metadata(path);
    // Touch every loaded tensor: a lying header must not give a tensor whose storage is short.
    for (const auto& [name, tensor] : file.tensors) (void)tensor.to(oxmera::DType::F64).sum().item<double>();
  });
}
