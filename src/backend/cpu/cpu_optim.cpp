// Fused optimizer updates on the CPU: one pass over each parameter's memory, computing the whole torch 1.13
// single-tensor update per element with the per-element math every backend shares (backend/common/
// optim_math.hpp). Compiled once per ISA level with cpu_kernels.cpp, with -ffp-contract=off (torch's separate
// multiply and add). The loops vectorise: the options that pick a formula are template parameters, and
// maximize is a multiplication by +-1.
#include <cmath>
#include <type_traits>

#include "backend/backend.hpp"
#include "backend/common/optim_math.hpp"
#include "backend/cpu/parallel.hpp"

#ifndef OXM_ISA
#define OXM_ISA isa_base
#endif

namespace oxmera::detail::OXM_ISA {
namespace {

namespace om = optim_math;
constexpr int64_t kGrain = 32768;
using Yes = std::true_type;
using No = std::false_type;

// The loops take the scalars by value: a local copy that no store through p can alias stays in registers.
template <class T>
void sgd_loop(const om::SgdScalars<T> c, T* p, const T* g, T* buf, int64_t b, int64_t e) {
  for (int64_t i = b; i < e; ++i)
    om::sgd_element(c, c.use_wd, c.use_mom, c.first, c.nesterov, c.maximize, i, p, g, buf);
}

template <class T>
void sgd(const OptimizerStep& s, T* p, const T* g, T* buf, int64_t n) {
  const om::SgdScalars<T> c = om::sgd_scalars<T>(s);
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) { sgd_loop(c, p, g, buf, b, e); });
}

// Adam and AdamW share one loop: AdamW's p *= decay is an exact identity for Adam (decay 1).
template <class T, bool L2, bool AmsGrad>
void adam_loop(const om::AdamScalars<T> c, T* p, const T* g, T* m, T* v, T* vmax, int64_t b, int64_t e) {
  for (int64_t i = b; i < e; ++i) om::adam_element(c, true, L2, AmsGrad, c.sign * g[i], i, p, m, v, vmax);
}

template <class T>
void adam(const OptimizerStep& s, T* p, const T* g, T* m, T* v, T* vmax, int64_t n) {
  const om::AdamScalars<T> c = om::adam_scalars<T>(s);
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    auto run = [&](auto l2, auto ams) {
      adam_loop<T, decltype(l2)::value, decltype(ams)::value>(c, p, g, m, v, vmax, b, e);
    };
    if (c.l2)
      c.amsgrad ? run(Yes{}, Yes{}) : run(Yes{}, No{});
    else
      c.amsgrad ? run(No{}, Yes{}) : run(No{}, No{});
  });
}

template <class T, bool WeightDecay, bool Centered, bool Momentum>
void rmsprop_loop(const om::RmspropScalars<T> c, T* p, const T* g, T* sq, T* buf, T* gavg, int64_t b, int64_t e) {
  for (int64_t i = b; i < e; ++i)
    om::rmsprop_element(c, WeightDecay, Centered, Momentum, c.sign * g[i], i, p, sq, buf, gavg);
}

template <class T>
void rmsprop(const OptimizerStep& s, T* p, const T* g, T* sq, T* buf, T* gavg, int64_t n) {
  const om::RmspropScalars<T> c = om::rmsprop_scalars<T>(s);
  const int flags = (c.weight_decay ? 4 : 0) | (c.centered ? 2 : 0) | (c.momentum ? 1 : 0);
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    auto run = [&](auto f) {
      constexpr int F = decltype(f)::value;
      rmsprop_loop<T, (F & 4) != 0, (F & 2) != 0, (F & 1) != 0>(c, p, g, sq, buf, gavg, b, e);
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
    case DType::F32:
      return run<float>(s, param, grad, s0, s1, s2);
    case DType::F64:
      return run<double>(s, param, grad, s0, s1, s2);
    default:
      OXM_FAIL(UnsupportedDType, "optimizer_step: parameters must be f32 or f64, got ", param.dtype);
  }
}

}  // namespace oxmera::detail::OXM_ISA
