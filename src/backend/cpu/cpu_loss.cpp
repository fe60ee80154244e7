// Fused cross entropy over rows (class targets): one pass computes each row's log-sum-exp and loss, one pass
// its gradient. The per-row math is the composite log_softmax + gather's (max-shifted, sums in f64). Compiled once
// per ISA level with the kernels (CMakeLists.txt), so the exponentials are vm::exp's SIMD code.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/parallel.hpp"
#include "backend/cpu/vec_math.hpp"
#include "tensor/tensor_impl.hpp"

#ifndef OXM_ISA
#define OXM_ISA isa_base
#endif

namespace oxmera::detail::OXM_ISA {
namespace {

constexpr int64_t kGrain = 4096;  // elements per thread before going parallel

// Max of a row. No NaN test: a NaN never wins the comparison, but its exp makes the row's sum, and so its loss,
// NaN (as a NaN max would). Contiguous rows in a 64-byte vector type (GCC leaves the same loop on an array scalar).
template <class T>
struct Vec64;
template <>
struct Vec64<float> {
  using type = float __attribute__((vector_size(64)));
};
template <>
struct Vec64<double> {
  using type = double __attribute__((vector_size(64)));
};

template <class T>
T row_max(const T* row, int64_t C, int64_t sc) {
  T mx = -std::numeric_limits<T>::infinity();
  int64_t c = 0;
  if (sc == 1) {
    constexpr int W = 64 / sizeof(T);
    using V = typename Vec64<T>::type;
    V lanes = V{} - std::numeric_limits<T>::infinity();
    for (; c + W <= C; c += W) {
      V v;
      std::memcpy(&v, row + c, sizeof v);
      lanes = v > lanes ? v : lanes;
    }
    for (int j = 0; j < W; ++j) mx = lanes[j] > mx ? lanes[j] : mx;
  }
  for (; c < C; ++c) mx = row[c * sc] > mx ? row[c * sc] : mx;
  return mx;
}

// sum_c e^(row_c - mx) in f64: contiguous rows through vectorised exps summed in 64 bytes of T lanes, flushed into
// the f64 sum every 16 per lane (f32 lanes keep a row of any length near an f64 sum's rounding).
template <class T>
double row_sum_exp(const T* row, int64_t C, int64_t sc, T mx) {
  double sum = 0;
  int64_t c = 0;
  if (sc == 1) {
    constexpr int W = 64 / sizeof(T);
    while (c + W <= C) {
      T part[W] = {};
      const int64_t stop = std::min(C - C % W, c + 16 * W);
      for (; c < stop; c += W)
        for (int j = 0; j < W; ++j) part[j] += vm::exp(row[c + j] - mx);
      double s = 0;
      for (int j = 0; j < W; ++j) s += static_cast<double>(part[j]);
      sum += s;
    }
  }
  for (; c < C; ++c) sum += static_cast<double>(vm::exp(row[c * sc] - mx));
  return sum;
}

template <class T>
void cross_entropy_typed(const TensorImpl& x, const TensorImpl& target, double ls, double scale, TensorImpl& loss,
                         TensorImpl& lse) {
  const int64_t R = x.shape[0], C = x.shape[1], sr = x.strides[0], sc = x.strides[1];
  const T* xp = x.ptr<T>();
  const int64_t* tp = target.ptr<int64_t>();
  const int64_t ts = target.strides[0];
  T* lp = loss.ptr<T>();
  T* ep = lse.ptr<T>();
  parallel_for(R, std::max<int64_t>(kGrain / std::max<int64_t>(C, 1), 1), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* row = xp + r * sr;
      T mx = row_max(row, C, sc);
      if (mx == -std::numeric_limits<T>::infinity()) mx = 0;  // all -inf: avoid inf - inf
      const T l = static_cast<T>(std::log(row_sum_exp(row, C, sc, mx))) + mx;
      ep[r] = l;
      const int64_t t = tp[r * ts];
      if (t < 0) {
        lp[r] = T(0);
        continue;
      }
      const T picked = row[t * sc] - l;  // log p of the target class
      T v = -picked;
      if (ls > 0) {
        double xsum = 0;
        for (int64_t c = 0; c < C; ++c) xsum += row[c * sc];
        v = static_cast<T>((1.0 - ls) * -static_cast<double>(picked) -
                           ls / static_cast<double>(C) * (xsum - static_cast<double>(C) * l));
      }
      lp[r] = static_cast<T>(scale * v);
    }
  });
}

template <class T>
void cross_entropy_backward_typed(const TensorImpl& x, const TensorImpl& target, const TensorImpl& lse,
                                  const TensorImpl& g, double ls, double scale, TensorImpl& gx) {
  const int64_t R = x.shape[0], C = x.shape[1], sr = x.strides[0], sc = x.strides[1];
  const T* xp = x.ptr<T>();
  const int64_t* tp = target.ptr<int64_t>();
  const int64_t ts = target.strides[0], gs = g.strides[0];
  const T* ep = lse.ptr<T>();
  const T* gp = g.ptr<T>();
  T* op = gx.ptr<T>();
  const T on_target = static_cast<T>(1.0 - ls), uniform = static_cast<T>(ls / static_cast<double>(C));
  parallel_for(R, std::max<int64_t>(kGrain / std::max<int64_t>(C, 1), 1), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      T* orow = op + r * C;
      const int64_t t = tp[r * ts];
      if (t < 0) {
        for (int64_t c = 0; c < C; ++c) orow[c] = T(0);
        continue;
      }
      const T* row = xp + r * sr;
      const T l = ep[r], gr = static_cast<T>(scale * static_cast<double>(gp[r * gs]));
      // d loss_r / d x_rc = (1 - ls)(p_c - [c == t]) + ls (p_c - 1/C) = p_c - (1 - ls)[c == t] - ls/C
      if (sc == 1) {
        for (int64_t c = 0; c < C; ++c) orow[c] = gr * (vm::exp(row[c] - l) - uniform);
      } else {
        for (int64_t c = 0; c < C; ++c) orow[c] = gr * (vm::exp(row[c * sc] - l) - uniform);
      }
      orow[t] -= gr * on_target;
    }
  });
}

}  // namespace

void cross_entropy(const TensorImpl& x, const TensorImpl& target, double label_smoothing, double scale,
                   TensorImpl& loss, TensorImpl& lse) {
  if (x.dtype == DType::F32) return cross_entropy_typed<float>(x, target, label_smoothing, scale, loss, lse);
  if (x.dtype == DType::F64) return cross_entropy_typed<double>(x, target, label_smoothing, scale, loss, lse);
  OXM_FAIL(UnsupportedDType, "cross_entropy: dtype ", x.dtype, " is not supported (f32, f64)");
}

void cross_entropy_backward(const TensorImpl& x, const TensorImpl& target, const TensorImpl& lse, const TensorImpl& g,
                            double label_smoothing, double scale, TensorImpl& grad_x) {
  if (x.dtype == DType::F32)
    return cross_entropy_backward_typed<float>(x, target, lse, g, label_smoothing, scale, grad_x);
  if (x.dtype == DType::F64)
    return cross_entropy_backward_typed<double>(x, target, lse, g, label_smoothing, scale, grad_x);
  OXM_FAIL(UnsupportedDType, "cross_entropy backward: dtype ", x.dtype, " is not supported (f32, f64)");
}

}  // namespace oxmera::detail::OXM_ISA
