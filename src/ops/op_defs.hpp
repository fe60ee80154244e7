#pragma once
// THE MATH OF THE OP REGISTRY. Each elementwise entry of include/oxmera/op_registry.hpp has its per-element
// math here, as `defs::<Id>` deriving from its registry facts (UnaryEntry / BinaryEntry: id, name, dtypes,
// differentiable, cost): the forward and the per-element backward, host and device compilable, so every
// backend's kernel runs the same code and a forward or a backward is one pass over memory (one launch on a GPU).
// Each differentiable def also writes its gradient with recorded ops (grad_graph, grad_a_graph, grad_b_graph; Tn is
// Tensor), which a backward with create_graph = true runs instead, so higher-order gradients exist.
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/host_device.hpp"
#include "oxmera/op_registry.hpp"
#include "oxmera/tensor.hpp"

namespace oxmera::ops {

// What the backward rule of a unary op reads: the input x, the output y, both, or neither.
enum class Saves : uint8_t { None, Input, Output, Both };

// The registry facts of an op, inherited by its math: defs::Exp::name is "exp", defs::Exp::id is UnaryOp::Exp.
template <UnaryOp Op>
struct UnaryEntry {
  static constexpr UnaryOp id = Op;
  static constexpr const char* name = info(Op).name;
  static constexpr bool ints = info(Op).ints, diff = info(Op).differentiable, costly = info(Op).costly;
  static constexpr int nparams = info(Op).nparams;
};
template <BinaryOp Op>
struct BinaryEntry {
  static constexpr BinaryOp id = Op;
  static constexpr const char* name = info(Op).name;
  static constexpr bool ints = info(Op).ints, diff = info(Op).differentiable, costly = info(Op).costly;
  // An integer b == 0 has no result (a float one gives NaN): the front end refuses it before the kernel runs.
  static constexpr bool int_divisor = false;
};

// The elementary functions the math calls, as a policy: every def is `fwd<T, M = Math>` (and its gradients), so
// the same formula runs with the C library's (host) or the device's functions (Math, what the CUDA kernels use),
// or with the CPU's vectorisable ones (VecMath in src/backend/cpu/vec_math.hpp), which the CPU kernels pass.
struct Math {
#define OXM_MATH_FN(fn)     \
  template <class T>        \
  OXM_HD static T fn(T x) { \
    return std::fn(x);      \
  }
  OXM_MATH_FN(exp)
  OXM_MATH_FN(log)
  OXM_MATH_FN(tanh)
  OXM_MATH_FN(erf)
  OXM_MATH_FN(erfc)
  OXM_MATH_FN(sin)
  OXM_MATH_FN(cos)
  OXM_MATH_FN(log1p)
  OXM_MATH_FN(expm1)
#undef OXM_MATH_FN
  template <class T>
  OXM_HD static T pow(T a, T b) {
    return std::pow(a, b);
  }
  // e^x where it is added to 1 (sigmoid, silu): a policy may return anything in [0, 2^-124] where e^x is below that.
  template <class T>
  OXM_HD static T exp_in_sum(T x) {
    return std::exp(x);
  }
  // Phi(x), the standard normal CDF, and gauss = e^(-x^2/2) (gelu and its gradient): one function so that a policy
  // computes both together; erfc(-x / sqrt 2) / 2 keeps the lower tail's relative accuracy (1 + erf would not).
  template <class T>
  OXM_HD static T normal_cdf(T x, T& gauss) {
    gauss = std::exp(T(-0.5) * x * x);
    return T(0.5) * std::erfc(x * T(-0.70710678118654752440));
  }
  // log(1 + e^-a) for a >= 0 (softplus's tail): one function so that a policy can specialise the narrow range.
  template <class T>
  OXM_HD static T log1p_exp_neg(T a) {
    return std::log1p(std::exp(-a));
  }
};

namespace defs {

template <class T>
OXM_HD inline T nan_v() {
  return std::numeric_limits<T>::quiet_NaN();
}
template <class T>
OXM_HD inline bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return v != v;
  return false;
}

// i64 arithmetic wraps on overflow (two's complement, as torch's does in practice and LIMITATIONS states),
// computed in unsigned so it is defined behaviour; floats are untouched.
template <class T>
OXM_HD constexpr bool wraps() {
  return std::is_integral_v<T> && std::is_signed_v<T>;
}
#define OXM_WRAPPING(a, op, b) \
  static_cast<T>(static_cast<std::make_unsigned_t<T>>(a) op static_cast<std::make_unsigned_t<T>>(b))

// ---------------------------------------------------------------- unary
// Each def: saves (what its backward reads), fwd(x), and grad(g, x, y): the input's gradient element from the
// output's gradient g, the input x and the output y (the ones `saves` names; the others are unspecified). Both run in
// every backend's kernels, so a unary backward is one pass (one launch).
struct Neg : UnaryEntry<UnaryOp::Neg> {
  static constexpr Saves saves = Saves::None;
  // The same gradient from recorded ops (Tn = Tensor; a template, so only the autograd node instantiates it, never
  // an ISA-specific or CUDA object): what create_graph = true runs, itself differentiable.
  template <class Tn>
  static Tn grad_graph([[maybe_unused]] const Tn& g, [[maybe_unused]] const Tn& x, [[maybe_unused]] const Tn& y,
                       [[maybe_unused]] const OpParams& p) {
    return -g;
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T x) {
    if constexpr (wraps<T>())
      return OXM_WRAPPING(0, -, x);
    else
      return -x;
  }
  template <class T, class M = Math>
  OXM_HD static T grad(T g, T, T) {
    return -g;
  }
};
struct Exp : UnaryEntry<UnaryOp::Exp> {
  static constexpr Saves saves = Saves::Output;
  template <class Tn>
  static Tn grad_graph([[maybe_unused]] const Tn& g, [[maybe_unused]] const Tn& x, [[maybe_unused]] const Tn& y,
                       [[maybe_unused]] const OpParams& p) {
    return g * y;
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T x) {
    return M::exp(x);
  }
  template <class T, class M = Math>
  OXM_HD static T grad(T g, T, T y) {
    return g * y;
  }
};
struct Log : UnaryEntry<UnaryOp::Log> {
  static constexpr Saves saves = Saves::Input;
  template <class Tn>
  static Tn grad_graph([[maybe_unused]] const Tn& g, [[maybe_unused]] const Tn& x, [[maybe_unused]] const Tn& y,
                       [[maybe_unused]] const OpParams& p) {
    return g / x;
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T x) {
    return M::log(x);
  }
  template <class T, class M = Math>
  OXM_HD static T grad(T g, T x, T) {
    return g / x;
  }
};
struct Abs : UnaryEntry<UnaryOp::Abs> {
  static constexpr Saves saves = Saves::Input;
  template <class Tn>
  static Tn grad_graph([[maybe_unused]] const Tn& g, [[maybe_unused]] const Tn& x, [[maybe_unused]] const Tn& y,
                       [[maybe_unused]] const OpParams& p) {
    return g * x.sign();
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T x) {
    if constexpr (wraps<T>())
      return x < T(0) ? OXM_WRAPPING(0, -, x) : x;
    else
      return x < T(0) ? -x : x;
  }
  template <class T, class M = Math>
  OXM_HD static T grad(T g, T x, T) {  // g * sign(x) (0 at 0, NaN for NaN)
    if (is_nan(x)) return x;
    return g * (x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0)));
  }
};
struct Sqrt : UnaryEntry<UnaryOp::Sqrt> {
  static constexpr Saves saves = Saves::Output;
  template <class Tn>
  static Tn grad_graph([[maybe_unused]] const Tn& g, [[maybe_unused]] const Tn& x, [[maybe_unused]] const Tn& y,
                       [[maybe_unused]] const OpParams& p) {
    return g / (2.0 * y);
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T x) {
    return std::sqrt(x);
  }
  template <class T, class M = Math>
  OXM_HD static T grad(T g, T, T y) {
    return g / (T(2) * y);
  }
};
struct Rsqrt : UnaryEntry<UnaryOp::Rsqrt> {
  static constexpr Saves saves = Saves::Both;
  template <class Tn>
  static Tn grad_graph([[maybe_unused]] const Tn& g, [[maybe_unused]] const Tn& x, [[maybe_unused]] const Tn& y,
                       [[maybe_unused]] const OpParams& p) {
    return g * -0.5 * y / x;
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T x) {
    return T(1) / std::sqrt(x);
  }
  template <class T, class M = Math>
  OXM_HD static T grad(T g, T x, T y) {
    return g * T(-0.5) * y / x;
  }
};
struct Sin : UnaryEntry<UnaryOp::Sin> {
  static constexpr Saves saves = Saves::Input;
  template <class Tn>
  static Tn grad_graph([[maybe_unused]] const Tn& g, [[maybe_unused]] const Tn& x, [[maybe_unused]] const Tn& y,
                       [[maybe_unused]] const OpParams& p) {
    return g * x.cos();
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T x) {
    return M::sin(x);
  }
  template <class T, class M = Math>
  OXM_HD static T grad(T g, T x, T) {
    return g * M::cos(x);
  }
};
struct Cos : UnaryEntry<UnaryOp::Cos> {
  static constexpr Saves saves = Saves::Input;
  template <class Tn>
  static Tn grad_graph([[maybe_unused]] const Tn& g, [[maybe_unused]] const Tn& x, [[maybe_unused]] const Tn& y,
                       [[maybe_unused]] const OpParams& p) {
    return -(g * x.sin());
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T x) {
    return M::cos(x);
  }
  template <class T, class M = Math>
  OXM_HD static T grad(T g, T x, T) {
    return -(g * M::sin(x));
  }
};
struct Tanh : UnaryEntry<UnaryOp::Tanh> {
  static constexpr Saves saves = Saves::Output;
  template <class Tn>
  static Tn grad_graph([[maybe_unused]] const Tn& g, [[maybe_unused]] const Tn& x, [[maybe_unused]] const Tn& y,
                       [[maybe_unused]] const OpParams& p) {
    return g * (1.0 - y * y);
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T x) {
    return M::tanh(x);
  }
  template <class T, class M = Math>
  OXM_HD static T grad(T g, T, T y) {
    return g * (T(1) - y * y);
  }
};
struct Relu : UnaryEntry<UnaryOp::Relu> {
  static constexpr Saves saves = Saves::Output;
  template <class Tn>
  static Tn grad_graph([[maybe_unused]] const Tn& g, [[maybe_unused]] const Tn& x, [[maybe_unused]] const Tn& y,
                       [[maybe_unused]] const OpParams& p) {
    return g * y.gt(0.0);  // a mask: NaN in g still propagates
  }
  // NaN propagates (x > 0 is false for NaN, so keep x explicitly).
  template <class T, class M = Math>
  OXM_HD static T fwd(T x) {
    return (x > T(0) || is_nan(x)) ? x : T(0);
  }
  // relu'(0) = 0: the mask y > 0.
  template <class T, class M = Math>
  OXM_HD static T grad(T g, T, T y) {
    return y > T(0) ? g : g * T(0);
  }
};
// GELU, exact (torch's default): x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)); d/dx = Phi(x) + x phi(x).
struct Gelu : UnaryEntry<UnaryOp::Gelu> {
  static constexpr Saves saves = Saves::Input;
  template <class Tn>
  static Tn grad_graph([[maybe_unused]] const Tn& g, [[maybe_unused]] const Tn& x, [[maybe_unused]] const Tn& y,
                       [[maybe_unused]] const OpParams& p) {
    return g * (0.5 * (1.0 + (x * 0.70710678118654752440).erf()) + x * (x * x * -0.5).exp() * 0.39894228040143267794);
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T x) {
    T gauss;
    return x * M::normal_cdf(x, gauss);
  }
  template <class T, class M = Math>
  OXM_HD static T grad(T g, T x, T) {
    // e^(-x^2/2) once: the pdf's, and the one the CDF's tail needs.
    T gauss;
    const T cdf = M::normal_cdf(x, gauss);
    const T pdf = gauss * T(0.39894228040143267794);
    return g * (cdf + x * pdf);
  }
};
// tanh approximation (torch's approximate='tanh'): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
struct GeluTanh : UnaryEntry<UnaryOp::GeluTanh> {
  static constexpr Saves saves = Saves::Input;
  template <class Tn>
  static Tn grad_graph([[maybe_unused]] const Tn& g, [[maybe_unused]] const Tn& x, [[maybe_unused]] const Tn& y,
                       [[maybe_unused]] const OpParams& p) {
    const double k = 0.7978845608028654, c = 0.044715;
    const Tn x2 = x * x, th = (k * (x + c * x2 * x)).tanh();
    return g * (0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * (k * (1.0 + 3.0 * c * x2)));
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T x) {
    const T k = T(0.7978845608028654), c = T(0.044715);
    return T(0.5) * x * (T(1) + M::tanh(k * (x + c * x * x * x)));
  }
  template <class T, class M = Math>
  OXM_HD static T grad(T g, T x, T) {
    const T k = T(0.7978845608028654), c = T(0.044715);
    const T x2 = x * x;
    const T th = M::tanh(k * (x + c * x2 * x));
    return g * (T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * (k * (T(1) + T(3.0 * 0.044715) * x2)));
  }
};
struct Sigmoid : UnaryEntry<UnaryOp::Sigmoid> {
  static constexpr Saves saves = Saves::Output;
  template <class Tn>
  static Tn grad_graph([[maybe_unused]] const Tn& g, [[maybe_unused]] const Tn& x, [[maybe_unused]] const Tn& y,
                       [[maybe_unused]] const OpParams& p) {
    return g * y * (1.0 - y);
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T x) {
    // torch's formula (and its values): e^-x overflowing to inf gives 0, so below about -88.7 (f32) the result is 0
    // where the exact value is subnormal, as in torch. No select: half the time of the stable two-branch form.
    return T(1) / (T(1) + M::exp_in_sum(-x));
  }
  template <class T, class M = Math>
  OXM_HD static T grad(T g, T, T y) {
    return g * y * (T(1) - y);
  }
};
struct Square : UnaryEntry<UnaryOp::Square> {
  static constexpr Saves saves = Saves::Input;
  template <class Tn>
  static Tn grad_graph([[maybe_unused]] const Tn& g, [[maybe_unused]] const Tn& x, [[maybe_unused]] const Tn& y,
                       [[maybe_unused]] const OpParams& p) {
    return g * (2.0 * x);
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T x) {
    return x * x;
  }
  template <class T, class M = Math>
  OXM_HD static T grad(T g, T x, T) {
    return g * (T(2) * x);
  }
};
struct Reciprocal : UnaryEntry<UnaryOp::Reciprocal> {
  static constexpr Saves saves = Saves::Output;
  template <class Tn>
  static Tn grad_graph([[maybe_unused]] const Tn& g, [[maybe_unused]] const Tn& x, [[maybe_unused]] const Tn& y,
                       [[maybe_unused]] const OpParams& p) {
    return -(g * y * y);
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T x) {
    return T(1) / x;
  }
  template <class T, class M = Math>
  OXM_HD static T grad(T g, T, T y) {
    return -(g * y * y);
  }
};
struct Log1p : UnaryEntry<UnaryOp::Log1p> {
  static constexpr Saves saves = Saves::Input;
  template <class Tn>
  static Tn grad_graph([[maybe_unused]] const Tn& g, [[maybe_unused]] const Tn& x, [[maybe_unused]] const Tn& y,
                       [[maybe_unused]] const OpParams& p) {
    return g / (1.0 + x);
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T x) {
    return M::log1p(x);
  }
  template <class T, class M = Math>
  OXM_HD static T grad(T g, T x, T) {
    return g / (T(1) + x);
  }
};
struct Expm1 : UnaryEntry<UnaryOp::Expm1> {
  static constexpr Saves saves = Saves::Output;
  template <class Tn>
  static Tn grad_graph([[maybe_unused]] const Tn& g, [[maybe_unused]] const Tn& x, [[maybe_unused]] const Tn& y,
                       [[maybe_unused]] const OpParams& p) {
    return g * (y + 1.0);
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T x) {
    return M::expm1(x);
  }
  template <class T, class M = Math>
  OXM_HD static T grad(T g, T, T y) {
    return g * (y + T(1));
  }
};
struct Sign : UnaryEntry<UnaryOp::Sign> {
  static constexpr Saves saves = Saves::None;
  template <class Tn>
  static Tn grad_graph([[maybe_unused]] const Tn& g, [[maybe_unused]] const Tn& x, [[maybe_unused]] const Tn& y,
                       [[maybe_unused]] const OpParams& p) {
    return zeros_like(g);
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T x) {
    if (is_nan(x)) return x;
    return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
  }
  template <class T, class M = Math>
  OXM_HD static T grad(T, T, T) {
    return T(0);
  }
};

struct Erf : UnaryEntry<UnaryOp::Erf> {
  static constexpr Saves saves = Saves::Input;
  template <class Tn>
  static Tn grad_graph([[maybe_unused]] const Tn& g, [[maybe_unused]] const Tn& x, [[maybe_unused]] const Tn& y,
                       [[maybe_unused]] const OpParams& p) {
    return g * (1.12837916709551257390 * (-(x * x)).exp());
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T x) {
    return M::erf(x);
  }
  template <class T, class M = Math>
  OXM_HD static T grad(T g, T x, T) {
    return g * (T(1.12837916709551257390) * M::exp(-(x * x)));
  }
};
struct Erfc : UnaryEntry<UnaryOp::Erfc> {
  static constexpr Saves saves = Saves::Input;
  template <class Tn>
  static Tn grad_graph([[maybe_unused]] const Tn& g, [[maybe_unused]] const Tn& x, [[maybe_unused]] const Tn& y,
                       [[maybe_unused]] const OpParams& p) {
    return -(g * (1.12837916709551257390 * (-(x * x)).exp()));
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T x) {
    return M::erfc(x);
  }
  template <class T, class M = Math>
  OXM_HD static T grad(T g, T x, T) {
    return -(g * (T(1.12837916709551257390) * M::exp(-(x * x))));
  }
};
// x sigmoid(x); d/dx = s (1 + x (1 - s)).
struct Silu : UnaryEntry<UnaryOp::Silu> {
  static constexpr Saves saves = Saves::Input;
  template <class Tn>
  static Tn grad_graph([[maybe_unused]] const Tn& g, [[maybe_unused]] const Tn& x, [[maybe_unused]] const Tn& y,
                       [[maybe_unused]] const OpParams& p) {
    const Tn s = x.sigmoid();
    return g * (s * (1.0 + x * (1.0 - s)));
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T x) {
    return x * Sigmoid::fwd<T, M>(x);
  }
  template <class T, class M = Math>
  OXM_HD static T grad(T g, T x, T) {
    const T s = Sigmoid::fwd<T, M>(x);
    return g * (s * (T(1) + x * (T(1) - s)));
  }
};
// log(1 + e^x) without overflow: max(x, 0) + log1p(e^-|x|).
template <class T, class M>
OXM_HD inline T softplus_stable(T x) {
  const T a = x < T(0) ? -x : x;
  return (x > T(0) ? x : T(0)) + M::log1p_exp_neg(a);
}
// x tanh(softplus(x)); d/dx = t + x sigmoid(x) (1 - t^2), t = tanh(softplus(x)) (torch's formula).
struct Mish : UnaryEntry<UnaryOp::Mish> {
  static constexpr Saves saves = Saves::Input;
  template <class Tn>
  static Tn grad_graph([[maybe_unused]] const Tn& g, [[maybe_unused]] const Tn& x, [[maybe_unused]] const Tn& y,
                       [[maybe_unused]] const OpParams& p) {
    const Tn t = x.softplus().tanh();
    return g * (t + x * x.sigmoid() * (1.0 - t * t));
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T x) {
    return x * M::tanh(softplus_stable<T, M>(x));
  }
  template <class T, class M = Math>
  OXM_HD static T grad(T g, T x, T) {
    const T t = M::tanh(softplus_stable<T, M>(x));
    return g * (t + x * Sigmoid::fwd<T, M>(x) * (T(1) - t * t));
  }
};
// Parameterised ops: fwd(x, params) and grad(g, x, y, params), params.v in the registry's order.
// softplus(beta, threshold): x where beta x > threshold (torch's linear region), else log(1 + e^(beta x)) / beta;
// d/dx = sigmoid(beta x) (1 in the linear region).
struct Softplus : UnaryEntry<UnaryOp::Softplus> {
  static constexpr Saves saves = Saves::Input;
  template <class Tn>
  static Tn grad_graph([[maybe_unused]] const Tn& g, [[maybe_unused]] const Tn& x, [[maybe_unused]] const Tn& y,
                       [[maybe_unused]] const OpParams& p) {
    const Tn bx = x * p.v[0];
    return where(bx.gt(p.v[1]), g, g * bx.sigmoid());
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T x, const OpParams& p) {
    const T beta = T(p.v[0]), bx = beta * x;
    const T soft = softplus_stable<T, M>(bx) / beta;
    return bx > T(p.v[1]) ? x : soft;
  }
  template <class T, class M = Math>
  OXM_HD static T grad(T g, T x, T, const OpParams& p) {
    const T bx = T(p.v[0]) * x;
    const T s = g * Sigmoid::fwd<T, M>(bx);
    return bx > T(p.v[1]) ? g : s;
  }
};
// elu(alpha): x for x > 0, alpha (e^x - 1) otherwise; d/dx = alpha e^x for x <= 0 (torch's rule at 0).
struct Elu : UnaryEntry<UnaryOp::Elu> {
  static constexpr Saves saves = Saves::Input;
  template <class Tn>
  static Tn grad_graph([[maybe_unused]] const Tn& g, [[maybe_unused]] const Tn& x, [[maybe_unused]] const Tn& y,
                       [[maybe_unused]] const OpParams& p) {
    // exp of min(x, 0): the branch where() discards must stay finite (its zero gradient times inf is NaN).
    return where(x.gt(0.0), g, g * (p.v[0] * x.clamp_max(0.0).exp()));
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T x, const OpParams& p) {
    const T neg = T(p.v[0]) * M::expm1(x);
    return x > T(0) ? x : neg;
  }
  template <class T, class M = Math>
  OXM_HD static T grad(T g, T x, T, const OpParams& p) {
    const T neg = g * (T(p.v[0]) * M::exp(x));
    return x > T(0) ? g : neg;
  }
};
struct LeakyRelu : UnaryEntry<UnaryOp::LeakyRelu> {
  static constexpr Saves saves = Saves::Input;
  template <class Tn>
  static Tn grad_graph([[maybe_unused]] const Tn& g, [[maybe_unused]] const Tn& x, [[maybe_unused]] const Tn& y,
                       [[maybe_unused]] const OpParams& p) {
    return where(x.gt(0.0), g, g * p.v[0]);
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T x, const OpParams& p) {
    return x > T(0) ? x : x * T(p.v[0]);
  }
  template <class T, class M = Math>
  OXM_HD static T grad(T g, T x, T, const OpParams& p) {
    return x > T(0) ? g : g * T(p.v[0]);
  }
};
// hardtanh(min_val, max_val): NaN propagates; the gradient is 0 at and beyond the bounds (torch's rule).
struct Hardtanh : UnaryEntry<UnaryOp::Hardtanh> {
  static constexpr Saves saves = Saves::Input;
  template <class Tn>
  static Tn grad_graph([[maybe_unused]] const Tn& g, [[maybe_unused]] const Tn& x, [[maybe_unused]] const Tn& y,
                       [[maybe_unused]] const OpParams& p) {
    return where(x.le(p.v[0]) + x.ge(p.v[1]), 0.0, g);
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T x, const OpParams& p) {
    const T lo = T(p.v[0]), hi = T(p.v[1]);
    return x < lo ? lo : (x > hi ? hi : x);
  }
  template <class T, class M = Math>
  OXM_HD static T grad(T g, T x, T, const OpParams& p) {
    return (x <= T(p.v[0]) || x >= T(p.v[1])) ? T(0) : g;
  }
};
// Rounding: integers are their own result; the gradient is 0 (torch's).
#define OXM_ROUNDING(Name, fn)                                                 \
  struct Name : UnaryEntry<UnaryOp::Name> {                                    \
    static constexpr Saves saves = Saves::None;                                \
    template <class T, class M = Math>                                         \
    OXM_HD static T fwd(T x) {                                                 \
      if constexpr (std::is_integral_v<T>)                                     \
        return x;                                                              \
      else                                                                     \
        return fn(x);                                                          \
    }                                                                          \
    template <class T, class M = Math>                                         \
    OXM_HD static T grad(T, T, T) {                                            \
      return T(0);                                                             \
    }                                                                          \
    template <class Tn>                                                        \
    static Tn grad_graph(const Tn& g, const Tn&, const Tn&, const OpParams&) { \
      return zeros_like(g);                                                    \
    }                                                                          \
  };
OXM_ROUNDING(Floor, std::floor)
OXM_ROUNDING(Ceil, std::ceil)
OXM_ROUNDING(Round, std::nearbyint)  // half to even in the default rounding mode, as torch.round
OXM_ROUNDING(Trunc, std::trunc)
#undef OXM_ROUNDING
// Classification: masks of x's dtype holding 0 or 1, as the comparisons; not differentiable.
#define OXM_CLASSIFY(Name, float_expr, int_value) \
  struct Name : UnaryEntry<UnaryOp::Name> {       \
    static constexpr Saves saves = Saves::None;   \
    template <class T, class M = Math>            \
    OXM_HD static T fwd(T x) {                    \
      if constexpr (std::is_integral_v<T>)        \
        return T(int_value);                      \
      else                                        \
        return (float_expr) ? T(1) : T(0);        \
    }                                             \
    template <class T, class M = Math>            \
    OXM_HD static T grad(T, T, T) {               \
      return T(0);                                \
    }                                             \
  };
OXM_CLASSIFY(IsNan, x != x, 0)
OXM_CLASSIFY(IsInf, x == std::numeric_limits<T>::infinity() || x == -std::numeric_limits<T>::infinity(), 0)
OXM_CLASSIFY(IsFinite, x - x == T(0), 1)  // x - x is NaN for NaN and +-inf
#undef OXM_CLASSIFY

// ---------------------------------------------------------------- binary
// Each def: saves_inputs (its gradients read a and b), fwd(a, b), and the gradients of both
// operands elementwise, grad_a(g, a, b) and grad_b(g, a, b), from the output's gradient g (before reduction
// to the operands' shapes): one pass (one launch) each. `*_is_g`: that gradient is g itself (no kernel);
// `grad_*_reads`: which operands it reads (kReadsA | kReadsB; the kernel gets g in place of the others, so
// an unread broadcast operand does not break up the kernel's runs).
inline constexpr unsigned kReadsA = 1, kReadsB = 2;
struct Add : BinaryEntry<BinaryOp::Add> {
  static constexpr bool saves_inputs = false, grad_a_is_g = true, grad_b_is_g = true;
  static constexpr unsigned grad_a_reads = 0, grad_b_reads = 0;
  template <class T, class M = Math>
  OXM_HD static T fwd(T a, T b) {
    if constexpr (wraps<T>())
      return OXM_WRAPPING(a, +, b);
    else
      return a + b;
  }
  template <class T, class M = Math>
  OXM_HD static T grad_a(T g, T, T) {
    return g;
  }
  template <class T, class M = Math>
  OXM_HD static T grad_b(T g, T, T) {
    return g;
  }
};
struct Sub : BinaryEntry<BinaryOp::Sub> {
  static constexpr bool saves_inputs = false, grad_a_is_g = true, grad_b_is_g = false;
  static constexpr unsigned grad_a_reads = 0, grad_b_reads = 0;
  template <class Tn>
  static Tn grad_b_graph(const Tn& g, [[maybe_unused]] const Tn& a, [[maybe_unused]] const Tn& b) {
    return -g;
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T a, T b) {
    if constexpr (wraps<T>())
      return OXM_WRAPPING(a, -, b);
    else
      return a - b;
  }
  template <class T, class M = Math>
  OXM_HD static T grad_a(T g, T, T) {
    return g;
  }
  template <class T, class M = Math>
  OXM_HD static T grad_b(T g, T, T) {
    return -g;
  }
};
struct Mul : BinaryEntry<BinaryOp::Mul> {
  static constexpr bool saves_inputs = true, grad_a_is_g = false, grad_b_is_g = false;
  static constexpr unsigned grad_a_reads = kReadsB, grad_b_reads = kReadsA;
  template <class Tn>
  static Tn grad_a_graph(const Tn& g, [[maybe_unused]] const Tn& a, [[maybe_unused]] const Tn& b) {
    return g * b;
  }
  template <class Tn>
  static Tn grad_b_graph(const Tn& g, [[maybe_unused]] const Tn& a, [[maybe_unused]] const Tn& b) {
    return g * a;
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T a, T b) {
    if constexpr (wraps<T>())
      return OXM_WRAPPING(a, *, b);
    else
      return a * b;
  }
  template <class T, class M = Math>
  OXM_HD static T grad_a(T g, T, T b) {
    return g * b;
  }
  template <class T, class M = Math>
  OXM_HD static T grad_b(T g, T a, T) {
    return g * a;
  }
};
struct Div : BinaryEntry<BinaryOp::Div> {
  static constexpr bool saves_inputs = true, grad_a_is_g = false, grad_b_is_g = false;
  static constexpr unsigned grad_a_reads = kReadsB, grad_b_reads = kReadsA | kReadsB;
  template <class Tn>
  static Tn grad_a_graph(const Tn& g, [[maybe_unused]] const Tn& a, [[maybe_unused]] const Tn& b) {
    return g / b;
  }
  template <class Tn>
  static Tn grad_b_graph(const Tn& g, [[maybe_unused]] const Tn& a, [[maybe_unused]] const Tn& b) {
    return -((g / b) * a / b);
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T a, T b) {
    return a / b;
  }
  template <class T, class M = Math>
  OXM_HD static T grad_a(T g, T, T b) {
    return g / b;
  }
  template <class T, class M = Math>
  OXM_HD static T grad_b(T g, T a, T b) {
    return -((g / b) * a / b);
  }
};
struct Pow : BinaryEntry<BinaryOp::Pow> {
  static constexpr bool saves_inputs = true, grad_a_is_g = false, grad_b_is_g = false;
  static constexpr unsigned grad_a_reads = kReadsA | kReadsB, grad_b_reads = kReadsA | kReadsB;
  template <class Tn>
  static Tn grad_a_graph(const Tn& g, [[maybe_unused]] const Tn& a, [[maybe_unused]] const Tn& b) {
    return where(b.eq(0.0), 0.0, g * (b * a.pow(b - 1.0)));
  }
  template <class Tn>
  static Tn grad_b_graph(const Tn& g, [[maybe_unused]] const Tn& a, [[maybe_unused]] const Tn& b) {
    return where(a.eq(0.0), 0.0, g * a.pow(b) * a.log());
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T a, T b) {
    return M::pow(a, b);
  }
  // d/da a^b = b a^(b-1); defined as 0 where b == 0 (else 0 * inf = NaN at a == 0), as torch does.
  template <class T, class M = Math>
  OXM_HD static T grad_a(T g, T a, T b) {
    return b == T(0) ? g * T(0) : g * (b * M::pow(a, b - T(1)));
  }
  // d/db a^b = a^b log a; defined as 0 where a == 0 (the limit for b > 0), as torch does.
  template <class T, class M = Math>
  OXM_HD static T grad_b(T g, T a, T b) {
    return g * M::pow(a, b) * (a == T(0) ? T(0) : M::log(a));
  }
};
// maximum / minimum. Ties split the gradient evenly (w = 1/2); NaN sends it to b, as the masks a > b (a < b)
// and a == b are both false.
template <bool IsMax>
struct Extremum : BinaryEntry<IsMax ? BinaryOp::Maximum : BinaryOp::Minimum> {
  static constexpr bool saves_inputs = true, grad_a_is_g = false, grad_b_is_g = false;
  static constexpr unsigned grad_a_reads = kReadsA | kReadsB, grad_b_reads = kReadsA | kReadsB;
  // Ties split evenly; NaN sends the gradient to b (both masks false), as the kernel.
  template <class Tn>
  static Tn grad_a_graph(const Tn& g, const Tn& a, const Tn& b) {
    return g * ((IsMax ? a.gt(b) : a.lt(b)) + 0.5 * a.eq(b));
  }
  template <class Tn>
  static Tn grad_b_graph(const Tn& g, const Tn& a, const Tn& b) {
    return g * (1.0 - ((IsMax ? a.gt(b) : a.lt(b)) + 0.5 * a.eq(b)));
  }
  template <class T, class M = Math>
  OXM_HD static bool a_wins(T a, T b) {
    return IsMax ? a > b : a < b;
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T a, T b) {
    if (is_nan(a) || is_nan(b)) return nan_v<T>();
    return a_wins(a, b) ? a : b;
  }
  template <class T, class M = Math>
  OXM_HD static T w(T a, T b) {
    return (a_wins(a, b) ? T(1) : T(0)) + T(0.5) * (a == b ? T(1) : T(0));
  }
  template <class T, class M = Math>
  OXM_HD static T grad_a(T g, T a, T b) {
    return g * w(a, b);
  }
  template <class T, class M = Math>
  OXM_HD static T grad_b(T g, T a, T b) {
    return g * (T(1) - w(a, b));
  }
};
using Maximum = Extremum<true>;
using Minimum = Extremum<false>;
// remainder: the sign of b (Python's %), torch's formula; d/da = 1, d/db = -floor(a / b).
struct Remainder : BinaryEntry<BinaryOp::Remainder> {
  static constexpr bool int_divisor = true;
  static constexpr bool saves_inputs = true, grad_a_is_g = true, grad_b_is_g = false;
  static constexpr unsigned grad_a_reads = 0, grad_b_reads = kReadsA | kReadsB;
  template <class Tn>
  static Tn grad_b_graph(const Tn& g, [[maybe_unused]] const Tn& a, [[maybe_unused]] const Tn& b) {
    return -(g * (a / b).floor());
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T a, T b) {
    T r;
    if constexpr (std::is_integral_v<T>)
      r = b == T(-1) ? T(0) : a % b;  // INT64_MIN % -1 traps; every a % -1 is 0
    else
      r = std::fmod(a, b);
    return (r != T(0) && ((r < T(0)) != (b < T(0)))) ? r + b : r;
  }
  template <class T, class M = Math>
  OXM_HD static T grad_a(T g, T, T) {
    return g;
  }
  template <class T, class M = Math>
  OXM_HD static T grad_b(T g, T a, T b) {
    return -(g * std::floor(a / b));
  }
};
// fmod: the sign of a (C's); d/da = 1, d/db = -trunc(a / b).
struct Fmod : BinaryEntry<BinaryOp::Fmod> {
  static constexpr bool int_divisor = true;
  static constexpr bool saves_inputs = true, grad_a_is_g = true, grad_b_is_g = false;
  static constexpr unsigned grad_a_reads = 0, grad_b_reads = kReadsA | kReadsB;
  template <class Tn>
  static Tn grad_b_graph(const Tn& g, [[maybe_unused]] const Tn& a, [[maybe_unused]] const Tn& b) {
    return -(g * (a / b).trunc());
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T a, T b) {
    if constexpr (std::is_integral_v<T>)
      return b == T(-1) ? T(0) : a % b;
    else
      return std::fmod(a, b);
  }
  template <class T, class M = Math>
  OXM_HD static T grad_a(T g, T, T) {
    return g;
  }
  template <class T, class M = Math>
  OXM_HD static T grad_b(T g, T a, T b) {
    return -(g * std::trunc(a / b));
  }
};
// Binary cross entropy of a logit x against a target t: (1 - t) x + log(1 + exp(-x)), with the log term as
// m + log(exp(-m) + exp(-x - m)), m = max(-x, 0), so it never overflows. nn::binary_cross_entropy_with_logits
// runs on it (no Tensor method); d/dx = sigmoid(x) - t, d/dt = -x.
struct BceLogits : BinaryEntry<BinaryOp::BceLogits> {
  static constexpr bool saves_inputs = true, grad_a_is_g = false, grad_b_is_g = false;
  static constexpr unsigned grad_a_reads = kReadsA | kReadsB, grad_b_reads = kReadsA;
  template <class Tn>
  static Tn grad_a_graph(const Tn& g, [[maybe_unused]] const Tn& a, [[maybe_unused]] const Tn& b) {
    return g * (a.sigmoid() - b);
  }
  template <class Tn>
  static Tn grad_b_graph(const Tn& g, [[maybe_unused]] const Tn& a, [[maybe_unused]] const Tn& b) {
    return -(g * a);
  }
  template <class T, class M = Math>
  OXM_HD static T fwd(T x, T t) {
    const T m = -x > T(0) ? -x : T(0);
    return (T(1) - t) * x + m + M::log(M::exp(-m) + M::exp(-x - m));
  }
  template <class T, class M = Math>
  OXM_HD static T grad_a(T g, T x, T t) {
    return g * (Sigmoid::fwd<T, M>(x) - t);
  }
  template <class T, class M = Math>
  OXM_HD static T grad_b(T g, T x, T) {
    return -(g * x);
  }
};
#define OXM_COMPARISON(Name, expr)                                                        \
  struct Name : BinaryEntry<BinaryOp::Name> {                                             \
    static constexpr bool saves_inputs = false, grad_a_is_g = false, grad_b_is_g = false; \
    template <class T, class M = Math>                                                    \
    OXM_HD static T fwd(T a, T b) {                                                       \
      return (expr) ? T(1) : T(0);                                                        \
    }                                                                                     \
    template <class T, class M = Math>                                                    \
    OXM_HD static T grad_a(T, T, T) {                                                     \
      return T(0);                                                                        \
    }                                                                                     \
    template <class T, class M = Math>                                                    \
    OXM_HD static T grad_b(T, T, T) {                                                     \
      return T(0);                                                                        \
    }                                                                                     \
  };
OXM_COMPARISON(Eq, a == b)
OXM_COMPARISON(Ne, a != b)
OXM_COMPARISON(Lt, a < b)
OXM_COMPARISON(Le, a <= b)
OXM_COMPARISON(Gt, a > b)
OXM_COMPARISON(Ge, a >= b)
#undef OXM_COMPARISON

}  // namespace defs

// Every registry entry has its math: a missing defs::<Id>, or one that does not derive from its own entry, fails
// to compile here.
#define OXM_X(id, ...) static_assert(std::is_base_of_v<UnaryEntry<UnaryOp::id>, defs::id>, #id " math");
OXMERA_UNARY_OPS(OXM_X)
#undef OXM_X
#define OXM_X(id, ...) static_assert(std::is_base_of_v<BinaryEntry<BinaryOp::id>, defs::id>, #id " math");
OXMERA_BINARY_OPS(OXM_X)
#undef OXM_X

// A unary def's forward and gradient with its parameters (ignored by ops without): what every kernel calls.
template <class Def, class T, class M = Math>
OXM_HD inline T unary_fwd(T x, const OpParams& p) {
  if constexpr (Def::nparams > 0)
    return Def::template fwd<T, M>(x, p);
  else
    return Def::template fwd<T, M>(x);
}
template <class Def, class T, class M = Math>
OXM_HD inline T unary_grad_of(T g, T x, T y, const OpParams& p) {
  if constexpr (Def::nparams > 0)
    return Def::template grad<T, M>(g, x, y, p);
  else
    return Def::template grad<T, M>(g, x, y);
}

// Reductions over a set of dims. Sum and Mean share kernels (Mean divides by the count).
enum class ReduceOp : uint8_t { Sum, Max, Min };
enum class ArgReduceOp : uint8_t { Argmax, Argmin };

constexpr const char* unary_name(UnaryOp op) noexcept { return op < UnaryOp::Count ? info(op).name : "?"; }
constexpr const char* binary_name(BinaryOp op) noexcept { return op < BinaryOp::Count ? info(op).name : "?"; }

#undef OXM_WRAPPING

}  // namespace oxmera::ops
