#pragma once
// THE MATH OF THE OP REGISTRY. Each elementwise entry of include/oxmera/op_registry.hpp has its per-element
// math here, as `defs::<Id>` deriving from its registry facts (UnaryEntry / BinaryEntry: id, name, dtypes,
// differentiable, cost): the forward and the per-element backward, host and device compilable, so every
// backend's kernel runs the same code and a forward or a backward is one pass over memory (one launch on a GPU).
// Gradients are not themselves recorded (no higher-order gradients; docs/LIMITATIONS.md).
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
};
template <BinaryOp Op>
struct BinaryEntry {
  static constexpr BinaryOp id = Op;
  static constexpr const char* name = info(Op).name;
  static constexpr bool ints = info(Op).ints, diff = info(Op).differentiable, costly = info(Op).costly;
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

// ---------------------------------------------------------------- unary
// Each def: saves (what its backward reads), fwd(x), and grad(g, x, y): the input's gradient element from the
// output's gradient g, the input x and the output y (the ones `saves` names; the others are unspecified). Both run in
// every backend's kernels, so a unary backward is one pass (one launch).
struct Neg : UnaryEntry<UnaryOp::Neg> {
  static constexpr Saves saves = Saves::None;
  template <class T>
  OXM_HD static T fwd(T x) {
    return -x;
  }
  template <class T>
  OXM_HD static T grad(T g, T, T) {
    return -g;
  }
};
struct Exp : UnaryEntry<UnaryOp::Exp> {
  static constexpr Saves saves = Saves::Output;
  template <class T>
  OXM_HD static T fwd(T x) {
    return std::exp(x);
  }
  template <class T>
  OXM_HD static T grad(T g, T, T y) {
    return g * y;
  }
};
struct Log : UnaryEntry<UnaryOp::Log> {
  static constexpr Saves saves = Saves::Input;
  template <class T>
  OXM_HD static T fwd(T x) {
    return std::log(x);
  }
  template <class T>
  OXM_HD static T grad(T g, T x, T) {
    return g / x;
  }
};
struct Abs : UnaryEntry<UnaryOp::Abs> {
  static constexpr Saves saves = Saves::Input;
  template <class T>
  OXM_HD static T fwd(T x) {
    return x < T(0) ? -x : x;
  }
  template <class T>
  OXM_HD static T grad(T g, T x, T);  // g * sign(x), defined after Sign
};
struct Sqrt : UnaryEntry<UnaryOp::Sqrt> {
  static constexpr Saves saves = Saves::Output;
  template <class T>
  OXM_HD static T fwd(T x) {
    return std::sqrt(x);
  }
  template <class T>
  OXM_HD static T grad(T g, T, T y) {
    return g / (T(2) * y);
  }
};
struct Rsqrt : UnaryEntry<UnaryOp::Rsqrt> {
  static constexpr Saves saves = Saves::Both;
  template <class T>
  OXM_HD static T fwd(T x) {
    return T(1) / std::sqrt(x);
  }
  template <class T>
  OXM_HD static T grad(T g, T x, T y) {
    return g * T(-0.5) * y / x;
  }
};
struct Sin : UnaryEntry<UnaryOp::Sin> {
  static constexpr Saves saves = Saves::Input;
  template <class T>
  OXM_HD static T fwd(T x) {
    return std::sin(x);
  }
  template <class T>
  OXM_HD static T grad(T g, T x, T) {
    return g * std::cos(x);
  }
};
struct Cos : UnaryEntry<UnaryOp::Cos> {
  static constexpr Saves saves = Saves::Input;
  template <class T>
  OXM_HD static T fwd(T x) {
    return std::cos(x);
  }
  template <class T>
  OXM_HD static T grad(T g, T x, T) {
    return -(g * std::sin(x));
  }
};
struct Tanh : UnaryEntry<UnaryOp::Tanh> {
  static constexpr Saves saves = Saves::Output;
  template <class T>
  OXM_HD static T fwd(T x) {
    return std::tanh(x);
  }
  template <class T>
  OXM_HD static T grad(T g, T, T y) {
    return g * (T(1) - y * y);
  }
};
struct Relu : UnaryEntry<UnaryOp::Relu> {
  static constexpr Saves saves = Saves::Output;
  // NaN propagates (x > 0 is false for NaN, so keep x explicitly).
  template <class T>
  OXM_HD static T fwd(T x) {
    return (x > T(0) || is_nan(x)) ? x : T(0);
  }
  // relu'(0) = 0: the mask y > 0.
  template <class T>
  OXM_HD static T grad(T g, T, T y) {
    return y > T(0) ? g : g * T(0);
  }
};
struct Gelu : UnaryEntry<UnaryOp::Gelu> {
  // tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  static constexpr Saves saves = Saves::Input;
  template <class T>
  OXM_HD static T fwd(T x) {
    const T k = T(0.7978845608028654), c = T(0.044715);
    return T(0.5) * x * (T(1) + std::tanh(k * (x + c * x * x * x)));
  }
  template <class T>
  OXM_HD static T grad(T g, T x, T) {
    const T k = T(0.7978845608028654), c = T(0.044715);
    const T x2 = x * x;
    const T th = std::tanh(k * (x + c * x2 * x));
    return g * (T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * (k * (T(1) + T(3.0 * 0.044715) * x2)));
  }
};
struct Sigmoid : UnaryEntry<UnaryOp::Sigmoid> {
  static constexpr Saves saves = Saves::Output;
  template <class T>
  OXM_HD static T fwd(T x) {
    // Stable for large |x|.
    if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
    T e = std::exp(x);
    return e / (T(1) + e);
  }
  template <class T>
  OXM_HD static T grad(T g, T, T y) {
    return g * y * (T(1) - y);
  }
};
struct Square : UnaryEntry<UnaryOp::Square> {
  static constexpr Saves saves = Saves::Input;
  template <class T>
  OXM_HD static T fwd(T x) {
    return x * x;
  }
  template <class T>
  OXM_HD static T grad(T g, T x, T) {
    return g * (T(2) * x);
  }
};
struct Reciprocal : UnaryEntry<UnaryOp::Reciprocal> {
  static constexpr Saves saves = Saves::Output;
  template <class T>
  OXM_HD static T fwd(T x) {
    return T(1) / x;
  }
  template <class T>
  OXM_HD static T grad(T g, T, T y) {
    return -(g * y * y);
  }
};
struct Log1p : UnaryEntry<UnaryOp::Log1p> {
  static constexpr Saves saves = Saves::Input;
  template <class T>
  OXM_HD static T fwd(T x) {
    return std::log1p(x);
  }
  template <class T>
  OXM_HD static T grad(T g, T x, T) {
    return g / (T(1) + x);
  }
};
struct Expm1 : UnaryEntry<UnaryOp::Expm1> {
  static constexpr Saves saves = Saves::Output;
  template <class T>
  OXM_HD static T fwd(T x) {
    return std::expm1(x);
  }
  template <class T>
  OXM_HD static T grad(T g, T, T y) {
    return g * (y + T(1));
  }
};
struct Sign : UnaryEntry<UnaryOp::Sign> {
  static constexpr Saves saves = Saves::None;
  template <class T>
  OXM_HD static T fwd(T x) {
    if (is_nan(x)) return x;
    return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
  }
  template <class T>
  OXM_HD static T grad(T, T, T) {
    return T(0);
  }
};

template <class T>
OXM_HD inline T Abs::grad(T g, T x, T) {
  return g * Sign::fwd(x);
}

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
  template <class T>
  OXM_HD static T fwd(T a, T b) {
    return a + b;
  }
  template <class T>
  OXM_HD static T grad_a(T g, T, T) {
    return g;
  }
  template <class T>
  OXM_HD static T grad_b(T g, T, T) {
    return g;
  }
};
struct Sub : BinaryEntry<BinaryOp::Sub> {
  static constexpr bool saves_inputs = false, grad_a_is_g = true, grad_b_is_g = false;
  static constexpr unsigned grad_a_reads = 0, grad_b_reads = 0;
  template <class T>
  OXM_HD static T fwd(T a, T b) {
    return a - b;
  }
  template <class T>
  OXM_HD static T grad_a(T g, T, T) {
    return g;
  }
  template <class T>
  OXM_HD static T grad_b(T g, T, T) {
    return -g;
  }
};
struct Mul : BinaryEntry<BinaryOp::Mul> {
  static constexpr bool saves_inputs = true, grad_a_is_g = false, grad_b_is_g = false;
  static constexpr unsigned grad_a_reads = kReadsB, grad_b_reads = kReadsA;
  template <class T>
  OXM_HD static T fwd(T a, T b) {
    return a * b;
  }
  template <class T>
  OXM_HD static T grad_a(T g, T, T b) {
    return g * b;
  }
  template <class T>
  OXM_HD static T grad_b(T g, T a, T) {
    return g * a;
  }
};
struct Div : BinaryEntry<BinaryOp::Div> {
  static constexpr bool saves_inputs = true, grad_a_is_g = false, grad_b_is_g = false;
  static constexpr unsigned grad_a_reads = kReadsB, grad_b_reads = kReadsA | kReadsB;
  template <class T>
  OXM_HD static T fwd(T a, T b) {
    return a / b;
  }
  template <class T>
  OXM_HD static T grad_a(T g, T, T b) {
    return g / b;
  }
  template <class T>
  OXM_HD static T grad_b(T g, T a, T b) {
    return -((g / b) * a / b);
  }
};
struct Pow : BinaryEntry<BinaryOp::Pow> {
  static constexpr bool saves_inputs = true, grad_a_is_g = false, grad_b_is_g = false;
  static constexpr unsigned grad_a_reads = kReadsA | kReadsB, grad_b_reads = kReadsA | kReadsB;
  template <class T>
  OXM_HD static T fwd(T a, T b) {
    return std::pow(a, b);
  }
  // d/da a^b = b a^(b-1); defined as 0 where b == 0 (else 0 * inf = NaN at a == 0), as torch does.
  template <class T>
  OXM_HD static T grad_a(T g, T a, T b) {
    return b == T(0) ? g * T(0) : g * (b * std::pow(a, b - T(1)));
  }
  // d/db a^b = a^b log a; defined as 0 where a == 0 (the limit for b > 0), as torch does.
  template <class T>
  OXM_HD static T grad_b(T g, T a, T b) {
    return g * std::pow(a, b) * (a == T(0) ? T(0) : std::log(a));
  }
};
// maximum / minimum. Ties split the gradient evenly (w = 1/2); NaN sends it to b, as the masks a > b (a < b)
// and a == b are both false.
template <bool IsMax>
struct Extremum : BinaryEntry<IsMax ? BinaryOp::Maximum : BinaryOp::Minimum> {
  static constexpr bool saves_inputs = true, grad_a_is_g = false, grad_b_is_g = false;
  static constexpr unsigned grad_a_reads = kReadsA | kReadsB, grad_b_reads = kReadsA | kReadsB;
  template <class T>
  OXM_HD static bool a_wins(T a, T b) {
    return IsMax ? a > b : a < b;
  }
  template <class T>
  OXM_HD static T fwd(T a, T b) {
    if (is_nan(a) || is_nan(b)) return nan_v<T>();
    return a_wins(a, b) ? a : b;
  }
  template <class T>
  OXM_HD static T w(T a, T b) {
    return (a_wins(a, b) ? T(1) : T(0)) + T(0.5) * (a == b ? T(1) : T(0));
  }
  template <class T>
  OXM_HD static T grad_a(T g, T a, T b) {
    return g * w(a, b);
  }
  template <class T>
  OXM_HD static T grad_b(T g, T a, T b) {
    return g * (T(1) - w(a, b));
  }
};
using Maximum = Extremum<true>;
using Minimum = Extremum<false>;
// Binary cross entropy of a logit x against a target t: (1 - t) x + log(1 + exp(-x)), with the log term as
// m + log(exp(-m) + exp(-x - m)), m = max(-x, 0), so it never overflows. nn::binary_cross_entropy_with_logits
// runs on it (no Tensor method); d/dx = sigmoid(x) - t, d/dt = -x.
struct BceLogits : BinaryEntry<BinaryOp::BceLogits> {
  static constexpr bool saves_inputs = true, grad_a_is_g = false, grad_b_is_g = false;
  static constexpr unsigned grad_a_reads = kReadsA | kReadsB, grad_b_reads = kReadsA;
  template <class T>
  OXM_HD static T fwd(T x, T t) {
    const T m = -x > T(0) ? -x : T(0);
    return (T(1) - t) * x + m + std::log(std::exp(-m) + std::exp(-x - m));
  }
  template <class T>
  OXM_HD static T grad_a(T g, T x, T t) {
    return g * (Sigmoid::fwd(x) - t);
  }
  template <class T>
  OXM_HD static T grad_b(T g, T x, T) {
    return -(g * x);
  }
};
#define OXM_COMPARISON(Name, expr)                                                        \
  struct Name : BinaryEntry<BinaryOp::Name> {                                             \
    static constexpr bool saves_inputs = false, grad_a_is_g = false, grad_b_is_g = false; \
    template <class T>                                                                    \
    OXM_HD static T fwd(T a, T b) {                                                       \
      return (expr) ? T(1) : T(0);                                                        \
    }                                                                                     \
    template <class T>                                                                    \
    OXM_HD static T grad_a(T, T, T) {                                                     \
      return T(0);                                                                        \
    }                                                                                     \
    template <class T>                                                                    \
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

// Reductions over a set of dims. Sum and Mean share kernels (Mean divides by the count).
enum class ReduceOp : uint8_t { Sum, Max, Min };
enum class ArgReduceOp : uint8_t { Argmax, Argmin };

constexpr const char* unary_name(UnaryOp op) noexcept { return op < UnaryOp::Count ? info(op).name : "?"; }
constexpr const char* binary_name(BinaryOp op) noexcept { return op < BinaryOp::Count ? info(op).name : "?"; }

}  // namespace oxmera::ops
