// libFuzzer harness: load_safetensors_with_metadata_from_bytes (include/oxmera/io.hpp, the in-memory twin of
// load_safetensors_with_metadata; tests/test_formats.cpp checks they agree) on arbitrary bytes.
#include "fuzz_common.hpp"
#include "oxmera/io.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return oxmera_fuzz::run_expecting_oxmera_errors([&] {
    const oxmera::SafetensorsFile file = oxmera::load_safetensors_with_metadata_from_bytes(data, size, "the input");
    // Touch every loaded tensor: a lying header must not give a tensor whose storage is short.
    for (const auto& [name, tensor] : file.tensors) (void)tensor.to(oxmera::DType::F64).sum().item<double>();
  });
}
