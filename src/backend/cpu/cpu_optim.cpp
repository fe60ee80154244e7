// Fused optimizer updates on the CPU: one pass over each parameter's memory, computing the whole torch 1.13
// single-tensor update per element. Arithmetic is done in the parameter's dtype in torch's operation order
// (scalars rounded to that dtype as torch does), so f32 results track torch.optim to a few ulps. Compiled
// once per ISA level with cpu_kernels.cpp (the loops vectorise: options that would branch per element are
// template parameters or exact identities, e.g. AdamW's decay factor is 1 for Adam).
#include <cmath>
#include <type_traits>

#include "backend/backend.hpp"
#include "backend/cpu/parallel.hpp"

#ifndef OXM_ISA
#define OXM_ISA isa_base
#endif

namespace oxmera::detail::OXM_ISA {
namespace {

constexpr int64_t kGrain = 32768;

// torch.maximum semantics: NaN propagates.
template <class T>
inline T nan_max(T a, T b) {
  return (a != a || a > b) ? a : b;
}

template <class T>
void sgd(const OptimizerStep& s, T* p, const T* g, T* buf, int64_t n) {
  const T wd = static_cast<T>(s.weight_decay), mom = static_cast<T>(s.momentum);
  const T damp1 = static_cast<T>(1.0 - s.dampening), neg_lr = static_cast<T>(-s.lr);
  const bool use_wd = s.weight_decay != 0, use_mom = s.momentum != 0, first = s.first_step;
  const bool nesterov = s.nesterov, maximize = s.maximize;
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      T d = maximize ? -g[i] : g[i];
      if (use_wd) d = d + wd * p[i];
      if (use_mom) {
        const T m = first ? d : buf[i] * mom + damp1 * d;
        buf[i] = m;
        d = nesterov ? d + mom * m : m;
      }
      p[i] = p[i] + neg_lr * d;
    }
  });
}

// Adam (L2 weight decay) and AdamW (decoupled: p *= 1 - lr * wd first; the factor is exactly 1 for Adam).
template <class T, bool L2, bool AmsGrad>
void adam_loop(T* p, const T* g, T* m, T* v, T* vmax, int64_t b, int64_t e, T sign, T decay, T wd, T b1, T b2, T omb1,
               T omb2, T bc2_sqrt, T eps, T neg_step_size) {
  for (int64_t i = b; i < e; ++i) {
    T grad = sign * g[i];  // -g exactly when maximizing
    T pi = p[i] * decay;
    if constexpr (L2) grad = grad + wd * pi;
    const T mi = m[i] * b1 + omb1 * grad;
    const T vi = v[i] * b2 + omb2 * grad * grad;
    m[i] = mi;
    v[i] = vi;
    T denom_sq = vi;
    if constexpr (AmsGrad) {
      denom_sq = nan_max(vmax[i], vi);
      vmax[i] = denom_sq;
    }
    const T denom = std::sqrt(denom_sq) / bc2_sqrt + eps;
    p[i] = pi + neg_step_size * mi / denom;
  }
}

template <class T>
void adam(const OptimizerStep& s, T* p, const T* g, T* m, T* v, T* vmax, int64_t n) {
  const bool decoupled = s.kind == OptimizerStep::Kind::AdamW;
  const double step = static_cast<double>(s.step);
  const double bc1 = 1.0 - std::pow(s.beta1, step), bc2 = 1.0 - std::pow(s.beta2, step);
  const T b1 = static_cast<T>(s.beta1), b2 = static_cast<T>(s.beta2);
  const T omb1 = static_cast<T>(1.0 - s.beta1), omb2 = static_cast<T>(1.0 - s.beta2);
  const T neg_step_size = static_cast<T>(-(s.lr / bc1)), bc2_sqrt = static_cast<T>(std::sqrt(bc2));
  const T eps = static_cast<T>(s.eps), wd = static_cast<T>(s.weight_decay);
  const T decay = decoupled ? static_cast<T>(1.0 - s.lr * s.weight_decay) : T(1);
  const T sign = s.maximize ? T(-1) : T(1);
  const bool use_l2 = !decoupled && s.weight_decay != 0, amsgrad = s.amsgrad;
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    auto run = [&](auto l2, auto ams) {
      adam_loop<T, decltype(l2)::value, decltype(ams)::value>(p, g, m, v, vmax, b, e, sign, decay, wd, b1, b2, omb1,
                                                              omb2, bc2_sqrt, eps, neg_step_size);
    };
    using Y = std::true_type;
    using N = std::false_type;
    if (use_l2)
      amsgrad ? run(Y{}, Y{}) : run(Y{}, N{});
    else
      amsgrad ? run(N{}, Y{}) : run(N{}, N{});
  });
}

template <class T, bool WeightDecay, bool Centered, bool Momentum>
void rmsprop_loop(T* p, const T* g, T* sq, T* buf, T* gavg, int64_t b, int64_t e, T sign, T wd, T alpha, T oma, T eps,
                  T mom, T neg_lr) {
  for (int64_t i = b; i < e; ++i) {
    T grad = sign * g[i];  // -g exactly when maximizing
    if constexpr (WeightDecay) grad = grad + wd * p[i];
    const T si = sq[i] * alpha + oma * grad * grad;
    sq[i] = si;
    T avg;
    if constexpr (Centered) {
      const T ga = gavg[i] * alpha + oma * grad;
      gavg[i] = ga;
      avg = std::sqrt(si + T(-1) * ga * ga);
    } else {
      avg = std::sqrt(si);
    }
    avg = avg + eps;
    if constexpr (Momentum) {
      const T bi = buf[i] * mom + grad / avg;
      buf[i] = bi;
      p[i] = p[i] + neg_lr * bi;
    } else {
      p[i] = p[i] + neg_lr * grad / avg;
    }
  }
}

template <class T>
void rmsprop(const OptimizerStep& s, T* p, const T* g, T* sq, T* buf, T* gavg, int64_t n) {
  const T alpha = static_cast<T>(s.alpha), oma = static_cast<T>(1.0 - s.alpha);
  const T eps = static_cast<T>(s.eps), wd = static_cast<T>(s.weight_decay);
  const T mom = static_cast<T>(s.momentum), neg_lr = static_cast<T>(-s.lr);
  const T sign = s.maximize ? T(-1) : T(1);
  const int flags = (s.weight_decay != 0 ? 4 : 0) | (s.centered ? 2 : 0) | (s.momentum > 0 ? 1 : 0);
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    auto run = [&](auto f) {
      constexpr int F = decltype(f)::value;
      rmsprop_loop<T, (F & 4) != 0, (F & 2) != 0, (F & 1) != 0>(p, g, sq, buf, gavg, b, e, sign, wd, alpha, oma, eps,
                                                                mom, neg_lr);
    };
    switch (flags) {
      case 0:
        return run(std::integral_constant<int, 0>{});
      case 1:
        return run(std::integral_constant<int, 1>{});
      case 2:
        return run(std::integral_constant<int, 2>{});
      case 3:
        return run(std::integral_constant<int, 3>{});
      case 4:
        return run(std::integral_constant<int, 4>{});
      case 5:
        return run(std::integral_constant<int, 5>{});
      case 6:
        return run(std::integral_constant<int, 6>{});
      default:
        return run(std::integral_constant<int, 7>{});
    }
  });
}

template <class T>
T* state_ptr(TensorImpl* t, const TensorImpl& param, const char* what) {
  OXM_CHECK(t != nullptr, InvalidArgument, "optimizer_step: missing state buffer ", what);
  OXM_CHECK(t->contiguous && t->dtype == param.dtype && t->numel == param.numel, InvalidArgument,
            "optimizer_step: state buffer ", what, " must be contiguous with the parameter's shape and dtype");
  return t->ptr<T>();
}

template <class T>
void run(const OptimizerStep& s, TensorImpl& param, const TensorImpl& grad, TensorImpl* s0, TensorImpl* s1,
         TensorImpl* s2) {
  const int64_t n = param.numel;
  T* p = param.ptr<T>();
  const T* g = grad.ptr<T>();
  switch (s.kind) {
    case OptimizerStep::Kind::SGD:
      sgd<T>(s, p, g, s.momentum != 0 ? state_ptr<T>(s0, param, "momentum_buffer") : nullptr, n);
      break;
    case OptimizerStep::Kind::Adam:
    case OptimizerStep::Kind::AdamW:
      adam<T>(s, p, g, state_ptr<T>(s0, param, "exp_avg"), state_ptr<T>(s1, param, "exp_avg_sq"),
              s.amsgrad ? state_ptr<T>(s2, param, "max_exp_avg_sq") : nullptr, n);
      break;
    case OptimizerStep::Kind::RMSprop:
      rmsprop<T>(s, p, g, state_ptr<T>(s0, param, "square_avg"),
                 s.momentum > 0 ? state_ptr<T>(s1, param, "momentum_buffer") : nullptr,
                 s.centered ? state_ptr<T>(s2, param, "grad_avg") : nullptr, n);
      break;
  }
}

}  // namespace

void optimizer_step(const OptimizerStep& s, TensorImpl& param, const TensorImpl& grad, TensorImpl* s0, TensorImpl* s1,
                    TensorImpl* s2) {
  OXM_CHECK(param.contiguous && grad.contiguous && grad.dtype == param.dtype && grad.numel == param.numel,
            InvalidArgument, "optimizer_step: param and grad must be contiguous with one shape and dtype");
  if (param.numel == 0) return;
  switch (param.dtype) {
    case DType::F32: return run<float>(s, param, grad, s0, s1, s2);
    case DType::F64: return run<double>(s, param, grad, s0, s1, s2);
    default: OXM_FAIL(UnsupportedDType, "optimizer_step: parameters must be f32 or f64, got ", param.dtype);
  }
}

}  // namespace oxmera::detail::OXM_ISA
