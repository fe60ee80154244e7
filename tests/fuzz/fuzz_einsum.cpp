// libFuzzer harness: einsum (include/oxmera/einsum.hpp) with a fuzzed spec and small fuzzed operand shapes.
// Layout of an input: byte 0 → operand count (1-3) and dtype; per operand one rank byte (0-4) and one byte per
// dim (size 0-4); the rest (at most 64 bytes) is the spec string.
#include <vector>

#include "fuzz_common.hpp"
#include "oxmera/einsum.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size_t pos = 0;
  auto next = [&]() -> uint8_t { return pos < size ? data[pos++] : 0; };
  const uint8_t head = next();
  const int operand_count = 1 + head % 3;
  const oxmera::DType dtypes[] = {oxmera::DType::F32, oxmera::DType::F64, oxmera::DType::I64};
  const oxmera::DType dtype = dtypes[(head / 3) % 3];
  std::vector<oxmera::Tensor> operands;
  for (int i = 0; i < operand_count; ++i) {
    const int rank = next() % 5;
    oxmera::Shape shape;
    int64_t numel = 1;
    for (int d = 0; d < rank; ++d) {
      shape.push_back(next() % 5);
      numel *= shape.back();
    }
    // Distinct small values (exact in every dtype) so a wrong lowering would at least be visible when debugging.
    operands.push_back(oxmera::arange(numel, oxmera::DType::I64).to(dtype).reshape(shape));
  }
  const size_t spec_size = std::min<size_t>(size - std::min(pos, size), 64);
  const std::string spec(reinterpret_cast<const char*>(data) + std::min(pos, size), spec_size);
  return oxmera_fuzz::run_expecting_oxmera_errors([&] {
    const oxmera::Tensor result = oxmera::einsum(spec, operands);
    if (result.numel() <= 4096) (void)result.to(oxmera::DType::F64).sum().item<double>();
  });
}
