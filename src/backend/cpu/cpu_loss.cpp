// Fused cross entropy over rows (class targets): one pass computes each row's log-sum-exp and loss, one pass
// its gradient. The per-row math is the composite log_softmax + gather's (max-shifted, sums in f64).
#include <cmath>
#include <limits>

#include "backend/cpu/cpu_index.hpp"
#include "backend/cpu/parallel.hpp"

namespace oxmera::detail {
namespace {

constexpr int64_t kGrain = 4096;  // elements per thread before going parallel

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
      T mx = -std::numeric_limits<T>::infinity();
      for (int64_t c = 0; c < C; ++c) {
        const T v = row[c * sc];
        mx = (v > mx || v != v) ? v : mx;  // NaN is sticky
      }
      if (mx == -std::numeric_limits<T>::infinity()) mx = 0;  // all -inf: avoid inf - inf
      double sum = 0, xsum = 0;
      for (int64_t c = 0; c < C; ++c) {
        sum += std::exp(row[c * sc] - mx);
        xsum += row[c * sc];
      }
      const T l = static_cast<T>(std::log(sum)) + mx;
      ep[r] = l;
      const int64_t t = tp[r * ts];
      if (t < 0) {
        lp[r] = T(0);
        continue;
      }
      const T picked = row[t * sc] - l;  // log p of the target class
      T v = -picked;
      if (ls > 0)
        v = static_cast<T>((1.0 - ls) * -static_cast<double>(picked) -
                           ls / static_cast<double>(C) * (xsum - static_cast<double>(C) * l));
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
      for (int64_t c = 0; c < C; ++c) orow[c] = gr * (std::exp(row[c * sc] - l) - uniform);
      orow[t] -= gr * on_target;
    }
  });
}

}  // namespace

void cpu_cross_entropy(const TensorImpl& x, const TensorImpl& target, double label_smoothing, double scale,
                       TensorImpl& loss, TensorImpl& lse) {
  if (x.dtype == DType::F32) return cross_entropy_typed<float>(x, target, label_smoothing, scale, loss, lse);
  if (x.dtype == DType::F64) return cross_entropy_typed<double>(x, target, label_smoothing, scale, loss, lse);
  OXM_FAIL(UnsupportedDType, "cross_entropy: dtype ", x.dtype, " is not supported (f32, f64)");
}

void cpu_cross_entropy_backward(const TensorImpl& x, const TensorImpl& target, const TensorImpl& lse,
                                const TensorImpl& g, double label_smoothing, double scale, TensorImpl& grad_x) {
  if (x.dtype == DType::F32)
    return cross_entropy_backward_typed<float>(x, target, lse, g, label_smoothing, scale, grad_x);
  if (x.dtype == DType::F64)
    return cross_entropy_backward_typed<double>(x, target, lse, g, label_smoothing, scale, grad_x);
  OXM_FAIL(UnsupportedDType, "cross_entropy backward: dtype ", x.dtype, " is not supported (f32, f64)");
}

}  // namespace oxmera::detail
