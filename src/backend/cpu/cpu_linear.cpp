#include "backend/cpu/cpu_linear.hpp"

#include <algorithm>

#include "backend/cpu/blas.hpp"
#include "backend/mat_layout.hpp"
#include "oxmera/error.hpp"

namespace oxmera::detail {
namespace {

template <class T>
void linear_t(const ops::LinearCall& c) {
  const int64_t m = c.out->shape[0], n = c.out->shape[1], k = c.x->shape[1];
  if (m == 0 || n == 0) return;
  T* out = reinterpret_cast<T*>(c.out->byte_ptr());
  const T* bias = c.bias ? reinterpret_cast<const T*>(c.bias->byte_ptr()) : nullptr;
  if (c.accumulate) {
    // out keeps its values; a bias (not used by the engine) is added as rows before the product.
    if (bias)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) out[i * n + j] += bias[j];
  } else if (bias) {
    for (int64_t i = 0; i < m; ++i) std::copy(bias, bias + n, out + i * n);
  } else {
    std::fill(out, out + m * n, T(0));
  }
  if (k == 0) return;
  // weight^T as the right operand: [K, N] with strides (weight.strides[1], weight.strides[0]).
  const MatLayout la = mat_layout(m, k, c.x->strides[0], c.x->strides[1]);
  const MatLayout lb = mat_layout(k, n, c.weight->strides[1], c.weight->strides[0]);
  const GemmArgs g{la.trans, lb.trans, m, n, k, la.ld, lb.ld, n};
  const T* x = reinterpret_cast<const T*>(c.x->byte_ptr());
  const T* w = reinterpret_cast<const T*>(c.weight->byte_ptr());
  if constexpr (std::is_same_v<T, float>)
    sgemm(g, 1.0f, x, w, 1.0f, out);
  else
    dgemm(g, 1.0, x, w, 1.0, out);
}

}  // namespace

void cpu_linear(const ops::LinearCall& c) {
  switch (c.out->dtype) {
    case DType::F32:
      return linear_t<float>(c);
    case DType::F64:
      return linear_t<double>(c);
    default:
      OXM_FAIL(UnsupportedDType, "linear: dtype ", c.out->dtype, " is not supported (f32, f64)");
  }
}

}  // namespace oxmera::detail
