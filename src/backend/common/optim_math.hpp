#pragma once
// The optimizer updates of every backend, per element: torch 1.13's single-tensor formulas in torch's operation
// order, arithmetic in the parameter's dtype with the scalars rounded to it on the host as torch rounds them
// (the *_scalars functions), so f32 results track torch.optim to a few ulps (tests/optim_torch). The CPU
// (cpu_optim.cpp, compiled per ISA level with -ffp-contract=off) runs them in vectorised loops, the CUDA
// kernel (cuda_index.cu) one element per thread.
//
// An option that picks a formula is a bool argument of the element function rather than a field it reads: the
// CPU passes compile-time constants (its loops' template parameters), so the inlined loop body has no branch
// per element and vectorises; the CUDA kernel passes each parameter's flags. Adam and RMSprop take the
// gradient element already negated when maximizing: the CPU multiplies by `sign` (+-1, branch-free), CUDA
// selects -g; the value is the same. The expressions are the CUDA kernel's own (nvcc contracts multiply-adds
// into FMAs by default, so a rewritten expression could change a GPU's bits).
#include <cmath>
#include <cstdint>

#include "core/host_device.hpp"
#include "ops/fused.hpp"  // OptimizerStep

namespace oxmera::detail::optim_math {

// torch.maximum semantics: NaN propagates.
template <class T>
OXM_HD inline T nan_max(T a, T b) {
  return (a != a || a > b) ? a : b;
}

// ---------------------------------------------------------------- SGD (momentum buffer: buf)
template <class T>
struct SgdScalars {
  T wd, mom, damp1, neg_lr;
  bool use_wd, use_mom, first, nesterov, maximize;
};
template <class T>
inline SgdScalars<T> sgd_scalars(const OptimizerStep& s) {
  SgdScalars<T> c;
  c.wd = static_cast<T>(s.weight_decay);
  c.mom = static_cast<T>(s.momentum);
  c.damp1 = static_cast<T>(1.0 - s.dampening);
  c.neg_lr = static_cast<T>(-s.lr);
  c.use_wd = s.weight_decay != 0;
  c.use_mom = s.momentum != 0;
  c.first = s.first_step;
  c.nesterov = s.nesterov;
  c.maximize = s.maximize;
  return c;
}
template <class T>
OXM_HD inline void sgd_element(const SgdScalars<T>& c, bool use_wd, bool use_mom, bool first, bool nesterov,
                               bool maximize, int64_t i, T* p, const T* g, T* buf) {
  T d = maximize ? -g[i] : g[i];
  if (use_wd) d = d + c.wd * p[i];
  if (use_mom) {
    const T m = first ? d : buf[i] * c.mom + c.damp1 * d;
    buf[i] = m;
    d = nesterov ? d + c.mom * m : m;
  }
  p[i] = p[i] + c.neg_lr * d;
}

// ---------------------------------------------------------------- Adam / AdamW (m: exp_avg, v: exp_avg_sq,
// vmax: max_exp_avg_sq). Adam's weight decay is L2 (added to the gradient), AdamW's decoupled (p *= decay first).
template <class T>
struct AdamScalars {
  T sign, decay, wd, b1, b2, omb1, omb2, bc2_sqrt, eps, neg_step_size;
  bool maximize, l2, decoupled, amsgrad;
};
// The step-dependent scalars (bias corrections), in double as torch computes them on the host; also run on a
// GPU when the step count lives in device memory (a captured step, OptimizerUpdate::step_count).
template <class T>
OXM_HD inline void adam_bias_corrections(AdamScalars<T>& c, double lr, double beta1, double beta2, int64_t step_count) {
  const double step = static_cast<double>(step_count);
  const double bc1 = 1.0 - std::pow(beta1, step), bc2 = 1.0 - std::pow(beta2, step);
  c.bc2_sqrt = static_cast<T>(std::sqrt(bc2));
  c.neg_step_size = static_cast<T>(-(lr / bc1));
}
template <class T>
inline AdamScalars<T> adam_scalars(const OptimizerStep& s) {
  AdamScalars<T> c;
  c.decoupled = s.kind == OptimizerStep::Kind::AdamW;
  c.l2 = !c.decoupled && s.weight_decay != 0;
  c.amsgrad = s.amsgrad;
  c.maximize = s.maximize;
  c.sign = s.maximize ? T(-1) : T(1);
  c.decay = c.decoupled ? static_cast<T>(1.0 - s.lr * s.weight_decay) : T(1);
  c.wd = static_cast<T>(s.weight_decay);
  c.b1 = static_cast<T>(s.beta1);
  c.b2 = static_cast<T>(s.beta2);
  c.omb1 = static_cast<T>(1.0 - s.beta1);
  c.omb2 = static_cast<T>(1.0 - s.beta2);
  c.eps = static_cast<T>(s.eps);
  adam_bias_corrections(c, s.lr, s.beta1, s.beta2, s.step);
  return c;
}
// decay: multiply p by c.decay first (AdamW; c.decay is exactly 1 for Adam, so the CPU always multiplies).
template <class T>
OXM_HD inline void adam_element(const AdamScalars<T>& c, bool decay, bool l2, bool amsgrad, T grad, int64_t i, T* p,
                                T* m, T* v, T* vmax) {
  T pi = p[i];
  if (decay) pi = pi * c.decay;
  if (l2) grad = grad + c.wd * pi;
  const T mi = m[i] * c.b1 + c.omb1 * grad;
  const T vi = v[i] * c.b2 + c.omb2 * grad * grad;
  m[i] = mi;
  v[i] = vi;
  T denom_sq = vi;
  if (amsgrad) {
    denom_sq = nan_max(vmax[i], vi);
    vmax[i] = denom_sq;
  }
  const T denom = std::sqrt(denom_sq) / c.bc2_sqrt + c.eps;
  p[i] = pi + c.neg_step_size * mi / denom;
}

// ---------------------------------------------------------------- RMSprop (sq: square_avg, buf: momentum buffer,
// gavg: grad_avg)
template <class T>
struct RmspropScalars {
  T sign, wd, alpha, oma, eps, mom, neg_lr;
  bool maximize, weight_decay, centered, momentum;
};
template <class T>
inline RmspropScalars<T> rmsprop_scalars(const OptimizerStep& s) {
  RmspropScalars<T> c;
  c.maximize = s.maximize;
  c.sign = s.maximize ? T(-1) : T(1);
  c.wd = static_cast<T>(s.weight_decay);
  c.alpha = static_cast<T>(s.alpha);
  c.oma = static_cast<T>(1.0 - s.alpha);
  c.eps = static_cast<T>(s.eps);
  c.mom = static_cast<T>(s.momentum);
  c.neg_lr = static_cast<T>(-s.lr);
  c.weight_decay = s.weight_decay != 0;
  c.centered = s.centered;
  c.momentum = s.momentum > 0;
  return c;
}
template <class T>
OXM_HD inline void rmsprop_element(const RmspropScalars<T>& c, bool weight_decay, bool centered, bool momentum, T grad,
                                   int64_t i, T* p, T* sq, T* buf, T* gavg) {
  if (weight_decay) grad = grad + c.wd * p[i];
  const T si = sq[i] * c.alpha + c.oma * grad * grad;
  sq[i] = si;
  T avg;
  if (centered) {
    const T ga = gavg[i] * c.alpha + c.oma * grad;
    gavg[i] = ga;
    avg = std::sqrt(si + T(-1) * ga * ga);
  } else {
    avg = std::sqrt(si);
  }
  avg = avg + c.eps;
  if (momentum) {
    const T bi = buf[i] * c.mom + grad / avg;
    buf[i] = bi;
    p[i] = p[i] + c.neg_lr * bi;
  } else {
    p[i] = p[i] + c.neg_lr * grad / avg;
  }
}

// ---------------------------------------------------------------- clip_grad_norm_'s per-tensor terms
// The term of element x in a p-norm's inner sum (|x|^p in x's dtype; kind: 0 general p, 1 for p = 1, 2 for p = 2,
// 3 for p = +inf, where the terms are combined by nan_max instead of added).
inline int norm_kind(double p) { return std::isinf(p) ? 3 : p == 1.0 ? 1 : p == 2.0 ? 2 : 0; }
template <class T>
OXM_HD inline T norm_term(T x, int kind, T p) {
  const T a = x < T(0) ? -x : x;
  return kind == 2 ? x * x : kind == 0 ? std::pow(a, p) : a;
}

}  // namespace oxmera::detail::optim_math
