#pragma once
// How a BLAS-style GEMM sees one matrix operand of a strided tensor: row-major with a leading dimension,
// possibly transposed. Shared by the CPU (OpenBLAS) and CUDA (cuBLAS) matmul kernels.
#include <algorithm>
#include <cstdint>

namespace oxmera::detail {

struct MatLayout {
  bool trans;
  int64_t ld;
};
// rows x cols with strides (rs, cs); the tensor layer guarantees one of them is 1 (or the dim has size 1).
// Internal linkage on purpose: cpu_kernels.cpp is compiled once per ISA, and a shared inline definition
// would let the linker hand the AVX-512 copy to the baseline kernels.
static inline MatLayout mat_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  if (cs == 1 || cols == 1) return {false, rows == 1 ? std::max<int64_t>(cols, 1) : std::max(rs, cols)};
  return {true, cols == 1 ? std::max<int64_t>(rows, 1) : std::max(cs, rows)};
}

}  // namespace oxmera::detail
