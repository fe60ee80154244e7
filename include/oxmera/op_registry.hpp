#pragma once
// THE OP REGISTRY: every op's facts in one place.
//
// Elementwise ops are one X-macro entry each (below). The entry is the op: it generates the `UnaryOp` /
// `BinaryOp` enum value, the Tensor method and free function, the facts every backend's kernel table and the
// autograd node read (dtypes, differentiable, cost class), and every test: the f64 reference, the input domain
// the tests draw from and the torch expression the parity suite compares with. The per-element math of the
// forward and of the backward lives next to it in src/ops/op_defs.hpp as `ops::defs::<Id>` (host and device
// compilable). Adding an elementwise op is one entry here plus its math there; see docs/ARCHITECTURE.md.
//
// Ops with their own shape rules (reductions, softmax, index ops, matmul-like ops, fused ops) are entries of
// OXMERA_STRUCTURED_OPS: their facts are here, their front ends in src/ops/, and the conformance suite
// (tests/conformance/) has one case builder per entry.
//
// The column tokens are plain identifiers so that macros, tools and the bindings can read them:
//   dtypes   Float (f32, f64) | FloatInt (also i64)
//   grad     Grad (differentiable: defs::<Id>::grad / grad_a / grad_b is its backward) | NoGrad
//   cost     Cheap | Costly (transcendental: the CPU forks at a smaller grain)
//   api      Public (a Tensor method x.name(...) and, for binary ops, a free function name(a, b)) | Internal
//   lo, hi   the input domain tests draw from (binary ops: one pair per operand)
//   params   (unary) the op's scalar parameters with their defaults, torch's: NoParams | Param1(name, default) |
//            Param2(name, default, name, default). They become the method's defaulted arguments
//            (x.softplus(beta = 1.0, threshold = 20.0)), reach the kernels by value (ops::OpParams), and are in
//            scope, by name, in the ref and torch expressions
//   ref      a plain f64 C++ expression in x (unary) or a, b (binary): the tests' independent reference
//   torch    a Python expression in x or a, b: what the parity suite runs in PyTorch
//   doc      one line for the API reference and the bindings
#include <cstdint>
#include <span>
#include <string_view>

// X(Id, name, api, dtypes, grad, cost, lo, hi, params, ref, torch, doc)
#define OXMERA_UNARY_OPS(X)                                                                                           \
  X(Neg, neg, Public, FloatInt, Grad, Cheap, -3, 3, NoParams, -x, "torch.neg(x)", "negation")                         \
  X(Exp, exp, Public, Float, Grad, Costly, -3, 3, NoParams, std::exp(x), "torch.exp(x)", "e^x")                       \
  X(Log, log, Public, Float, Grad, Costly, 0.1, 5, NoParams, std::log(x), "torch.log(x)", "natural logarithm")        \
  X(Abs, abs, Public, FloatInt, Grad, Cheap, -3, 3, NoParams, std::fabs(x), "torch.abs(x)", "absolute value")         \
  X(Sqrt, sqrt, Public, Float, Grad, Costly, 0.1, 5, NoParams, std::sqrt(x), "torch.sqrt(x)", "square root")          \
  X(Rsqrt, rsqrt, Public, Float, Grad, Costly, 0.1, 5, NoParams, 1.0 / std::sqrt(x), "torch.rsqrt(x)", "1 / sqrt(x)") \
  X(Sin, sin, Public, Float, Grad, Costly, -3, 3, NoParams, std::sin(x), "torch.sin(x)", "sine")                      \
  X(Cos, cos, Public, Float, Grad, Costly, -3, 3, NoParams, std::cos(x), "torch.cos(x)", "cosine")                    \
  X(Tanh, tanh, Public, Float, Grad, Costly, -3, 3, NoParams, std::tanh(x), "torch.tanh(x)", "hyperbolic tangent")    \
  X(Relu, relu, Public, FloatInt, Grad, Cheap, -3, 3, NoParams, x > 0 ? x : 0.0, "torch.relu(x)",                     \
    "max(x, 0); NaN propagates")                                                                                      \
  X(Gelu, gelu, Public, Float, Grad, Costly, -3, 3, NoParams, 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))),           \
    "torch.nn.functional.gelu(x)", "GELU, exact: x Phi(x) (torch's default); x.gelu(\"tanh\") is gelu_tanh")          \
  X(GeluTanh, gelu_tanh, Internal, Float, Grad, Costly, -3, 3, NoParams,                                              \
    0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))),                                      \
    "torch.nn.functional.gelu(x, approximate='tanh')", "GELU, tanh approximation (x.gelu(\"tanh\"))")                 \
  X(Sigmoid, sigmoid, Public, Float, Grad, Costly, -6, 6, NoParams, 1 / (1 + std::exp(-x)), "torch.sigmoid(x)",       \
    "logistic function 1 / (1 + e^-x), stable for large |x|")                                                         \
  X(Square, square, Public, FloatInt, Grad, Cheap, -3, 3, NoParams, x* x, "torch.square(x)", "x * x")                 \
  X(Reciprocal, reciprocal, Public, Float, Grad, Costly, 0.2, 5, NoParams, 1 / x, "torch.reciprocal(x)", "1 / x")     \
  X(Log1p, log1p, Public, Float, Grad, Costly, -0.5, 3, NoParams, std::log1p(x), "torch.log1p(x)",                    \
    "log(1 + x), exact near 0")                                                                                       \
  X(Expm1, expm1, Public, Float, Grad, Costly, -3, 3, NoParams, std::expm1(x), "torch.expm1(x)",                      \
    "e^x - 1, exact near 0")                                                                                          \
  X(Sign, sign, Public, FloatInt, Grad, Cheap, -3, 3, NoParams, x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0), "torch.sign(x)",  \
    "-1, 0 or 1 (NaN propagates); its gradient is 0, as in torch")                                                    \
  X(Erf, erf, Public, Float, Grad, Costly, -3, 3, NoParams, std::erf(x), "torch.erf(x)", "error function")            \
  X(Erfc, erfc, Public, Float, Grad, Costly, -3, 3, NoParams, std::erfc(x), "torch.erfc(x)",                          \
    "complementary error function 1 - erf(x), exact for large x")                                                     \
  X(Silu, silu, Public, Float, Grad, Costly, -6, 6, NoParams, x / (1 + std::exp(-x)), "torch.nn.functional.silu(x)",  \
    "SiLU (swish): x sigmoid(x)")                                                                                     \
  X(Mish, mish, Public, Float, Grad, Costly, -6, 6, NoParams, x* std::tanh(std::log1p(std::exp(x))),                  \
    "torch.nn.functional.mish(x)", "Mish: x tanh(softplus(x))")                                                       \
  X(Softplus, softplus, Public, Float, Grad, Costly, -3, 3, Param2(beta, 1.0, threshold, 20.0),                       \
    beta* x > threshold ? x : std::log1p(std::exp(beta * x)) / beta,                                                  \
    "torch.nn.functional.softplus(x, beta=beta, threshold=threshold)",                                                \
    "log(1 + e^(beta x)) / beta, x itself where beta x > threshold")                                                  \
  X(Elu, elu, Public, Float, Grad, Costly, -3, 3, Param1(alpha, 1.0), x > 0 ? x : alpha * std::expm1(x),              \
    "torch.nn.functional.elu(x, alpha=alpha)", "ELU: x for x > 0, alpha (e^x - 1) otherwise")                         \
  X(LeakyRelu, leaky_relu, Public, Float, Grad, Cheap, -3, 3, Param1(negative_slope, 0.01),                           \
    x > 0 ? x : negative_slope * x, "torch.nn.functional.leaky_relu(x, negative_slope=negative_slope)",               \
    "x for x > 0, negative_slope x otherwise")                                                                        \
  X(Hardtanh, hardtanh, Public, Float, Grad, Cheap, -3, 3, Param2(min_val, -1.0, max_val, 1.0),                       \
    x < min_val ? min_val : (x > max_val ? max_val : x),                                                              \
    "torch.nn.functional.hardtanh(x, min_val=min_val, max_val=max_val)",                                              \
    "x clamped to [min_val, max_val]; the gradient passes strictly inside, as in torch")                              \
  X(Floor, floor, Public, FloatInt, Grad, Cheap, -3, 3, NoParams, std::floor(x), "torch.floor(x)",                    \
    "round down; gradient 0, as in torch")                                                                            \
  X(Ceil, ceil, Public, FloatInt, Grad, Cheap, -3, 3, NoParams, std::ceil(x), "torch.ceil(x)",                        \
    "round up; gradient 0, as in torch")                                                                              \
  X(Round, round, Public, FloatInt, Grad, Cheap, -3, 3, NoParams, std::nearbyint(x), "torch.round(x)",                \
    "round half to even, as torch; gradient 0")                                                                       \
  X(Trunc, trunc, Public, FloatInt, Grad, Cheap, -3, 3, NoParams, std::trunc(x), "torch.trunc(x)",                    \
    "round toward zero; gradient 0, as in torch")                                                                     \
  X(IsNan, isnan, Public, FloatInt, NoGrad, Cheap, -3, 3, NoParams, double(std::isnan(x)), "torch.isnan(x)",          \
    "x is NaN, as a 0/1 mask of x's dtype (as the comparisons); not differentiable")                                  \
  X(IsInf, isinf, Public, FloatInt, NoGrad, Cheap, -3, 3, NoParams, double(std::isinf(x)), "torch.isinf(x)",          \
    "x is +-inf, as a 0/1 mask of x's dtype; not differentiable")                                                     \
  X(IsFinite, isfinite, Public, FloatInt, NoGrad, Cheap, -3, 3, NoParams, double(std::isfinite(x)),                   \
    "torch.isfinite(x)", "x is neither NaN nor +-inf, as a 0/1 mask of x's dtype; not differentiable")

// X(Id, name, api, dtypes, grad, cost, alo, ahi, blo, bhi, ref, torch, doc)
#define OXMERA_BINARY_OPS(X)                                                                                           \
  X(Add, add, Public, FloatInt, Grad, Cheap, -2, 2, -2, 2, a + b, "a + b", "a + b (also operator+)")                   \
  X(Sub, sub, Public, FloatInt, Grad, Cheap, -2, 2, -2, 2, a - b, "a - b", "a - b (also operator-)")                   \
  X(Mul, mul, Public, FloatInt, Grad, Cheap, -2, 2, -2, 2, a* b, "a * b", "a * b (also operator*)")                    \
  X(Div, div, Public, Float, Grad, Cheap, -2, 2, 0.5, 2, a / b, "a / b", "a / b (also operator/)")                     \
  X(Pow, pow, Public, Float, Grad, Costly, 0.5, 2, -1.5, 2, std::pow(a, b), "torch.pow(a, b)",                         \
    "a^b; the gradients are 0 where b == 0 (for a) and where a == 0 (for b), as in torch")                             \
  X(Maximum, maximum, Public, FloatInt, Grad, Cheap, -2, 2, -2, 2,                                                     \
    std::isnan(a) || std::isnan(b) ? NAN : (a > b ? a : b), "torch.maximum(a, b)",                                     \
    "elementwise maximum; NaN propagates; ties split the gradient evenly")                                             \
  X(Minimum, minimum, Public, FloatInt, Grad, Cheap, -2, 2, -2, 2,                                                     \
    std::isnan(a) || std::isnan(b) ? NAN : (a < b ? a : b), "torch.minimum(a, b)",                                     \
    "elementwise minimum; NaN propagates; ties split the gradient evenly")                                             \
  X(Remainder, remainder, Public, FloatInt, Grad, Costly, -3, 3, 0.5, 2,                                               \
    std::fmod(a, b) + (std::fmod(a, b) != 0 && ((std::fmod(a, b) < 0) != (b < 0)) ? b : 0.0), "torch.remainder(a, b)", \
    "a - b floor(a / b): the sign of b (Python's %), as torch.remainder; i64: a zero divisor is an error")             \
  X(Fmod, fmod, Public, FloatInt, Grad, Costly, -3, 3, 0.5, 2, std::fmod(a, b), "torch.fmod(a, b)",                    \
    "a - b trunc(a / b): the sign of a (C's fmod), as torch.fmod; i64: a zero divisor is an error")                    \
  X(BceLogits, bce_with_logits, Internal, Float, Grad, Costly, -4, 4, 0, 1,                                            \
    (1 - b) * a + std::log1p(std::exp(-std::fabs(a))) + (a < 0 ? -a : 0.0),                                            \
    "torch.nn.functional.binary_cross_entropy_with_logits(*torch.broadcast_tensors(a, b), reduction='none')",          \
    "binary cross entropy of logit a against target b, per element (nn::binary_cross_entropy_with_logits)")            \
  X(Eq, eq, Public, FloatInt, NoGrad, Cheap, -2, 2, -2, 2, double(a == b), "torch.eq(a, b)", "a == b as 0/1")          \
  X(Ne, ne, Public, FloatInt, NoGrad, Cheap, -2, 2, -2, 2, double(a != b), "torch.ne(a, b)", "a != b as 0/1")          \
  X(Lt, lt, Public, FloatInt, NoGrad, Cheap, -2, 2, -2, 2, double(a < b), "torch.lt(a, b)", "a < b as 0/1")            \
  X(Le, le, Public, FloatInt, NoGrad, Cheap, -2, 2, -2, 2, double(a <= b), "torch.le(a, b)", "a <= b as 0/1")          \
  X(Gt, gt, Public, FloatInt, NoGrad, Cheap, -2, 2, -2, 2, double(a > b), "torch.gt(a, b)", "a > b as 0/1")            \
  X(Ge, ge, Public, FloatInt, NoGrad, Cheap, -2, 2, -2, 2, double(a >= b), "torch.ge(a, b)", "a >= b as 0/1")

// Ops with their own front end. X(Id, name, kind, dtypes, grad, torch, doc); kind: Reduction | Index | Matmul |
// Layout | Fused. `torch` is the PyTorch function the parity suite and the conformance suite model them on.
#define OXMERA_STRUCTURED_OPS(X)                                                                                    \
  X(Sum, sum, Reduction, FloatInt, Grad, "torch.sum", "sum over dims (all when none), keepdim")                     \
  X(Mean, mean, Reduction, Float, Grad, "torch.mean", "mean over dims")                                             \
  X(Max, max, Reduction, FloatInt, Grad, "torch.amax", "maximum over dims; ties split the gradient evenly")         \
  X(Min, min, Reduction, FloatInt, Grad, "torch.amin", "minimum over dims; ties split the gradient evenly")         \
  X(Argmax, argmax, Reduction, FloatInt, NoGrad, "torch.argmax", "index of the first maximum along a dim (i64)")    \
  X(Argmin, argmin, Reduction, FloatInt, NoGrad, "torch.argmin", "index of the first minimum along a dim (i64)")    \
  X(Softmax, softmax, Reduction, Float, Grad, "torch.softmax", "softmax along a dim")                               \
  X(LogSoftmax, log_softmax, Reduction, Float, Grad, "torch.log_softmax", "log-softmax along a dim")                \
  X(Logsumexp, logsumexp, Reduction, Float, Grad, "torch.logsumexp", "log of the sum of exponentials along a dim")  \
  X(Where, where, Index, FloatInt, Grad, "torch.where", "mask != 0 ? a : b with broadcasting")                      \
  X(IndexSelect, index_select, Index, FloatInt, Grad, "torch.index_select", "rows of a dim picked by an index")     \
  X(IndexAdd, index_add, Index, FloatInt, Grad, "torch.index_add", "adds src at indexed positions of a dim")        \
  X(Gather, gather, Index, FloatInt, Grad, "torch.gather", "out[p] = x[p with p[dim] = index[p]]")                  \
  X(ScatterAdd, scatter_add, Index, FloatInt, Grad, "torch.scatter_add", "adds src[p] at p with p[dim] = index[p]") \
  X(Matmul, matmul, Matmul, Float, Grad, "torch.matmul", "matrix product with batch broadcasting")                  \
  X(Copy, contiguous, Layout, FloatInt, Grad, "torch.Tensor.contiguous", "strided copy into a contiguous tensor")   \
  X(Cast, to, Layout, FloatInt, Grad, "torch.Tensor.to", "dtype conversion (differentiable between floats)")        \
  X(CrossEntropy, cross_entropy, Fused, Float, Grad, "torch.nn.functional.cross_entropy",                           \
    "log-softmax + NLL of class targets in one pass (label smoothing, ignore_index)")                               \
  X(Conv2d, conv2d, Fused, Float, Grad, "torch.nn.functional.conv2d", "2-d convolution through im2col + matmul")    \
  X(Tril, tril, Layout, FloatInt, Grad, "torch.tril", "lower triangle of the last two dims (diagonal offset)")      \
  X(Triu, triu, Layout, FloatInt, Grad, "torch.triu", "upper triangle of the last two dims (diagonal offset)")      \
  X(MaskedFill, masked_fill, Index, FloatInt, Grad, "torch.Tensor.masked_fill",                                     \
    "value where a broadcast mask is nonzero (scalar or 0-d tensor value); zero gradient there")                    \
  X(Cumsum, cumsum, Reduction, FloatInt, Grad, "torch.cumsum", "inclusive prefix sums along a dim")                 \
  X(Cumprod, cumprod, Reduction, FloatInt, Grad, "torch.cumprod",                                                   \
    "inclusive prefix products along a dim; gradient exact with zeros in the input")                                \
  X(Sort, sort, Index, FloatInt, Grad, "torch.sort",                                                                \
    "stable sort along a dim: values and i64 indices; NaN sorts as the largest")                                    \
  X(Argsort, argsort, Index, FloatInt, NoGrad, "torch.argsort", "the i64 indices of a stable sort along a dim")     \
  X(Topk, topk, Index, FloatInt, Grad, "torch.topk", "the k largest (or smallest) along a dim, values and indices") \
  X(Chunk, chunk, Layout, FloatInt, Grad, "torch.chunk", "views: n pieces of ceil(size / n) along a dim")           \
  X(Split, split, Layout, FloatInt, Grad, "torch.split", "views of a given size, or of given sizes, along a dim")   \
  X(Unbind, unbind, Layout, FloatInt, Grad, "torch.unbind", "views: the slices along a dim, dim removed")           \
  X(Var, var, Reduction, Float, Grad, "torch.var", "variance over dims with a correction (default 1), keepdim")     \
  X(Std, std, Reduction, Float, Grad, "torch.std", "standard deviation over dims with a correction, keepdim")       \
  X(Norm, norm, Reduction, Float, Grad, "torch.norm",                                                               \
    "vector p-norm over dims (p = 0, 1, 2, inf, -inf or any p > 0); the 2-norm's gradient at 0 is 0")               \
  X(Repeat, repeat, Layout, FloatInt, Grad, "torch.Tensor.repeat", "the tensor repeated along each dim")            \
  X(Tile, tile, Layout, FloatInt, Grad, "torch.tile", "repeat with the repeats padded with leading 1s")             \
  X(Flip, flip, Layout, FloatInt, Grad, "torch.flip", "reverses the order along dims (a copy)")                     \
  X(Roll, roll, Layout, FloatInt, Grad, "torch.roll", "circular shift along dims, or of the flattened tensor")      \
  X(Any, any, Reduction, FloatInt, NoGrad, "torch.any", "whether any element is nonzero, over dims (0/1 mask)")     \
  X(All, all, Reduction, FloatInt, NoGrad, "torch.all", "whether every element is nonzero, over dims (0/1 mask)")

namespace oxmera {
class Tensor;
namespace ops {

enum class UnaryOp : uint8_t {
#define OXM_X(id, ...) id,
  OXMERA_UNARY_OPS(OXM_X)
#undef OXM_X
      Count
};
enum class BinaryOp : uint8_t {
#define OXM_X(id, ...) id,
  OXMERA_BINARY_OPS(OXM_X)
#undef OXM_X
      Count
};
enum class StructuredOp : uint8_t {
#define OXM_X(id, ...) id,
  OXMERA_STRUCTURED_OPS(OXM_X)
#undef OXM_X
      Count
};

enum class OpKind : uint8_t { Unary, Binary, Reduction, Index, Matmul, Layout, Fused };

// One registry entry's facts at run time (for tools, the bindings and the tests).
struct OpInfo {
  const char* name;
  OpKind kind;
  uint8_t id;      // the UnaryOp / BinaryOp / StructuredOp value
  bool is_public;  // has a Tensor method (and, binary ops, a free function) of this name
  bool ints;       // accepts i64 as well as f32 / f64
  bool differentiable;
  bool costly;      // transcendental (elementwise ops)
  uint8_t nparams;  // scalar parameters (unary ops; 0-2)
  const char* param_names[2];
  double param_defaults[2];
  double lo[2], hi[2];    // the input domain tests draw from, per operand (elementwise ops)
  const char* reference;  // the f64 reference expression (elementwise ops), as written in the registry
  const char* torch;      // the PyTorch expression (elementwise) or function (others)
  const char* doc;
};

// The values of a unary op's scalar parameters (the registry's `params` column, in order), passed to the kernels
// by value. Unused slots are 0.
struct OpParams {
  double v[2] = {0, 0};
};

namespace registry_detail {
inline constexpr bool kPublic_Public = true, kPublic_Internal = false;
inline constexpr bool kInts_FloatInt = true, kInts_Float = false;
inline constexpr bool kGrad_Grad = true, kGrad_NoGrad = false;
inline constexpr bool kCostly_Costly = true, kCostly_Cheap = false;
}  // namespace registry_detail

// The params column as OpInfo fields (count, names, defaults) and as OpParams of the defaults.
#define OXM_PARAM_INFO_NoParams \
  0, {nullptr, nullptr}, { 0, 0 }
#define OXM_PARAM_INFO_Param1(a, da) \
  1, {#a, nullptr}, { da, 0 }
#define OXM_PARAM_INFO_Param2(a, da, b, db) \
  2, {#a, #b}, { da, db }
#define OXM_PARAM_INFO(params) OXM_PARAM_INFO_##params

#define OXM_REGISTRY_FACTS(api, dtypes, grad)                                                \
  oxmera::ops::registry_detail::kPublic_##api, oxmera::ops::registry_detail::kInts_##dtypes, \
      oxmera::ops::registry_detail::kGrad_##grad

inline constexpr OpInfo kUnaryOps[] = {
#define OXM_X(id, name, api, dtypes, grad, cost, lo, hi, params, ref, torch, doc) \
  {#name,                                                                         \
   OpKind::Unary,                                                                 \
   static_cast<uint8_t>(UnaryOp::id),                                             \
   OXM_REGISTRY_FACTS(api, dtypes, grad),                                         \
   registry_detail::kCostly_##cost,                                               \
   OXM_PARAM_INFO(params),                                                        \
   {lo, lo},                                                                      \
   {hi, hi},                                                                      \
   #ref,                                                                          \
   torch,                                                                         \
   doc},
    OXMERA_UNARY_OPS(OXM_X)
#undef OXM_X
};
inline constexpr OpInfo kBinaryOps[] = {
#define OXM_X(id, name, api, dtypes, grad, cost, alo, ahi, blo, bhi, ref, torch, doc) \
  {#name,                                                                             \
   OpKind::Binary,                                                                    \
   static_cast<uint8_t>(BinaryOp::id),                                                \
   OXM_REGISTRY_FACTS(api, dtypes, grad),                                             \
   registry_detail::kCostly_##cost,                                                   \
   0,                                                                                 \
   {nullptr, nullptr},                                                                \
   {0, 0},                                                                            \
   {alo, blo},                                                                        \
   {ahi, bhi},                                                                        \
   #ref,                                                                              \
   torch,                                                                             \
   doc},
    OXMERA_BINARY_OPS(OXM_X)
#undef OXM_X
};
inline constexpr OpInfo kStructuredOps[] = {
#define OXM_X(id, name, kind, dtypes, grad, torch, doc) \
  {#name,                                               \
   OpKind::kind,                                        \
   static_cast<uint8_t>(StructuredOp::id),              \
   OXM_REGISTRY_FACTS(Public, dtypes, grad),            \
   false,                                               \
   0,                                                   \
   {nullptr, nullptr},                                  \
   {0, 0},                                              \
   {0, 0},                                              \
   {0, 0},                                              \
   "",                                                  \
   torch,                                               \
   doc},
    OXMERA_STRUCTURED_OPS(OXM_X)
#undef OXM_X
};

constexpr const OpInfo& info(UnaryOp op) { return kUnaryOps[static_cast<int>(op)]; }
constexpr const OpInfo& info(BinaryOp op) { return kBinaryOps[static_cast<int>(op)]; }
constexpr const OpInfo& info(StructuredOp op) { return kStructuredOps[static_cast<int>(op)]; }
inline constexpr std::span<const OpInfo> unary_ops() { return kUnaryOps; }
// A unary op's parameters at their defaults (torch's).
constexpr OpParams default_params(UnaryOp op) {
  return OpParams{{info(op).param_defaults[0], info(op).param_defaults[1]}};
}
inline constexpr std::span<const OpInfo> binary_ops() { return kBinaryOps; }
inline constexpr std::span<const OpInfo> structured_ops() { return kStructuredOps; }
// The entry called `name` (elementwise first), or null.
const OpInfo* find_op(std::string_view name) noexcept;

// Generic entry points of the elementwise ops (what the methods call): dtype, device and broadcasting checks,
// the backend kernel, and the autograd node.
Tensor unary(UnaryOp op, const Tensor& x);  // with the op's default parameters
Tensor unary(UnaryOp op, const Tensor& x, const OpParams& params);
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);

}  // namespace ops
}  // namespace oxmera

// Helpers for generated declarations: OXM_IF_PUBLIC(api, tokens) keeps the tokens for Public entries only.
#define OXM_IF_PUBLIC_Public(...) __VA_ARGS__
#define OXM_IF_PUBLIC_Internal(...)
#define OXM_IF_PUBLIC(api, ...) OXM_IF_PUBLIC_##api(__VA_ARGS__)
// A unary entry's params column as a method's parameter list with torch's defaults (OXM_PARAM_DECL), as the
// same list without defaults (OXM_PARAM_DEF), as the OpParams of the arguments (OXM_PARAM_VALUES), and as
// local constants holding the defaults (OXM_PARAM_LOCALS, for the tests' reference expressions).
#define OXM_PARAM_DECL_NoParams
#define OXM_PARAM_DECL_Param1(a, da) double a = da
#define OXM_PARAM_DECL_Param2(a, da, b, db) double a = da, double b = db
#define OXM_PARAM_DECL(params) OXM_PARAM_DECL_##params
#define OXM_PARAM_DEF_NoParams
#define OXM_PARAM_DEF_Param1(a, da) double a
#define OXM_PARAM_DEF_Param2(a, da, b, db) double a, double b
#define OXM_PARAM_DEF(params) OXM_PARAM_DEF_##params
#define OXM_PARAM_VALUES_NoParams \
  oxmera::ops::OpParams {}
#define OXM_PARAM_VALUES_Param1(a, da) \
  oxmera::ops::OpParams {              \
    { a, 0 }                           \
  }
#define OXM_PARAM_VALUES_Param2(a, da, b, db) \
  oxmera::ops::OpParams {                     \
    { a, b }                                  \
  }
#define OXM_PARAM_VALUES(params) OXM_PARAM_VALUES_##params
#define OXM_PARAM_LOCALS_NoParams
#define OXM_PARAM_LOCALS_Param1(a, da) [[maybe_unused]] const double a = da;
#define OXM_PARAM_LOCALS_Param2(a, da, b, db) [[maybe_unused]] const double a = da, b = db;
#define OXM_PARAM_LOCALS(params) OXM_PARAM_LOCALS_##params
