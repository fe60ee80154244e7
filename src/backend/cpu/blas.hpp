#pragma once
// GEMM provider: OpenBLAS loaded at run time (dlopen), after choosing its kernel family from this CPU's
// features, so users get AVX-512/AVX2 kernels without setting OPENBLAS_CORETYPE. When OpenBLAS is
// missing, a portable blocked kernel is used (correct, slower) and blas_name() says so.
#include <cstdint>

namespace oxmera::detail {

struct GemmArgs {
  // C[m,n] = alpha * op(A)[m,k] @ op(B)[k,n] + beta * C, row-major with leading dims.
  bool trans_a, trans_b;
  int64_t m, n, k;
  int64_t lda, ldb, ldc;
};
void sgemm(const GemmArgs& g, float alpha, const float* a, const float* b, float beta, float* c);
void dgemm(const GemmArgs& g, double alpha, const double* a, const double* b, double beta, double* c);
bool blas_available();
void blas_set_threads(int n);

}  // namespace oxmera::detail
