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
//   ref      a plain f64 C++ expression in x (unary) or a, b (binary): the tests' independent reference
//   torch    a Python expression in x or a, b: what the parity suite runs in PyTorch
//   doc      one line for the API reference and the bindings
#include <cstdint>
#include <span>
#include <string_view>

// X(Id, name, api, dtypes, grad, cost, lo, hi, ref, torch, doc)
#define OXMERA_UNARY_OPS(X)                                                                                          \
  X(Neg, neg, Public, FloatInt, Grad, Cheap, -3, 3, -x, "torch.neg(x)", "negation")                                  \
  X(Exp, exp, Public, Float, Grad, Costly, -3, 3, std::exp(x), "torch.exp(x)", "e^x")                                \
  X(Log, log, Public, Float, Grad, Costly, 0.1, 5, std::log(x), "torch.log(x)", "natural logarithm")                 \
  X(Abs, abs, Public, FloatInt, Grad, Cheap, -3, 3, std::fabs(x), "torch.abs(x)", "absolute value")                  \
  X(Sqrt, sqrt, Public, Float, Grad, Costly, 0.1, 5, std::sqrt(x), "torch.sqrt(x)", "square root")                   \
  X(Rsqrt, rsqrt, Public, Float, Grad, Costly, 0.1, 5, 1.0 / std::sqrt(x), "torch.rsqrt(x)", "1 / sqrt(x)")          \
  X(Sin, sin, Public, Float, Grad, Costly, -3, 3, std::sin(x), "torch.sin(x)", "sine")                               \
  X(Cos, cos, Public, Float, Grad, Costly, -3, 3, std::cos(x), "torch.cos(x)", "cosine")                             \
  X(Tanh, tanh, Public, Float, Grad, Costly, -3, 3, std::tanh(x), "torch.tanh(x)", "hyperbolic tangent")             \
  X(Relu, relu, Public, FloatInt, Grad, Cheap, -3, 3, x > 0 ? x : 0.0, "torch.relu(x)", "max(x, 0); NaN propagates") \
  X(Gelu, gelu, Public, Float, Grad, Costly, -3, 3,                                                                  \
    0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))),                                     \
    "torch.nn.functional.gelu(x, approximate='tanh')", "GELU, tanh approximation")                                   \
  X(Sigmoid, sigmoid, Public, Float, Grad, Costly, -6, 6, 1 / (1 + std::exp(-x)), "torch.sigmoid(x)",                \
    "logistic function 1 / (1 + e^-x), stable for large |x|")                                                        \
  X(Square, square, Public, FloatInt, Grad, Cheap, -3, 3, x* x, "torch.square(x)", "x * x")                          \
  X(Reciprocal, reciprocal, Public, Float, Grad, Costly, 0.2, 5, 1 / x, "torch.reciprocal(x)", "1 / x")              \
  X(Log1p, log1p, Public, Float, Grad, Costly, -0.5, 3, std::log1p(x), "torch.log1p(x)", "log(1 + x), exact near 0") \
  X(Expm1, expm1, Public, Float, Grad, Costly, -3, 3, std::expm1(x), "torch.expm1(x)", "e^x - 1, exact near 0")      \
  X(Sign, sign, Public, FloatInt, Grad, Cheap, -3, 3, x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0), "torch.sign(x)",           \
    "-1, 0 or 1 (NaN propagates); its gradient is 0, as in torch")

// X(Id, name, api, dtypes, grad, cost, alo, ahi, blo, bhi, ref, torch, doc)
#define OXMERA_BINARY_OPS(X)                                                                                  \
  X(Add, add, Public, FloatInt, Grad, Cheap, -2, 2, -2, 2, a + b, "a + b", "a + b (also operator+)")          \
  X(Sub, sub, Public, FloatInt, Grad, Cheap, -2, 2, -2, 2, a - b, "a - b", "a - b (also operator-)")          \
  X(Mul, mul, Public, FloatInt, Grad, Cheap, -2, 2, -2, 2, a* b, "a * b", "a * b (also operator*)")           \
  X(Div, div, Public, Float, Grad, Cheap, -2, 2, 0.5, 2, a / b, "a / b", "a / b (also operator/)")            \
  X(Pow, pow, Public, Float, Grad, Costly, 0.5, 2, -1.5, 2, std::pow(a, b), "torch.pow(a, b)",                \
    "a^b; the gradients are 0 where b == 0 (for a) and where a == 0 (for b), as in torch")                    \
  X(Maximum, maximum, Public, FloatInt, Grad, Cheap, -2, 2, -2, 2,                                            \
    std::isnan(a) || std::isnan(b) ? NAN : (a > b ? a : b), "torch.maximum(a, b)",                            \
    "elementwise maximum; NaN propagates; ties split the gradient evenly")                                    \
  X(Minimum, minimum, Public, FloatInt, Grad, Cheap, -2, 2, -2, 2,                                            \
    std::isnan(a) || std::isnan(b) ? NAN : (a < b ? a : b), "torch.minimum(a, b)",                            \
    "elementwise minimum; NaN propagates; ties split the gradient evenly")                                    \
  X(BceLogits, bce_with_logits, Internal, Float, Grad, Costly, -4, 4, 0, 1,                                   \
    (1 - b) * a + std::log1p(std::exp(-std::fabs(a))) + (a < 0 ? -a : 0.0),                                   \
    "torch.nn.functional.binary_cross_entropy_with_logits(*torch.broadcast_tensors(a, b), reduction='none')", \
    "binary cross entropy of logit a against target b, per element (nn::binary_cross_entropy_with_logits)")   \
  X(Eq, eq, Public, FloatInt, NoGrad, Cheap, -2, 2, -2, 2, double(a == b), "torch.eq(a, b)", "a == b as 0/1") \
  X(Ne, ne, Public, FloatInt, NoGrad, Cheap, -2, 2, -2, 2, double(a != b), "torch.ne(a, b)", "a != b as 0/1") \
  X(Lt, lt, Public, FloatInt, NoGrad, Cheap, -2, 2, -2, 2, double(a < b), "torch.lt(a, b)", "a < b as 0/1")   \
  X(Le, le, Public, FloatInt, NoGrad, Cheap, -2, 2, -2, 2, double(a <= b), "torch.le(a, b)", "a <= b as 0/1") \
  X(Gt, gt, Public, FloatInt, NoGrad, Cheap, -2, 2, -2, 2, double(a > b), "torch.gt(a, b)", "a > b as 0/1")   \
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
  bool costly;            // transcendental (elementwise ops)
  double lo[2], hi[2];    // the input domain tests draw from, per operand (elementwise ops)
  const char* reference;  // the f64 reference expression (elementwise ops), as written in the registry
  const char* torch;      // the PyTorch expression (elementwise) or function (others)
  const char* doc;
};

namespace registry_detail {
inline constexpr bool kPublic_Public = true, kPublic_Internal = false;
inline constexpr bool kInts_FloatInt = true, kInts_Float = false;
inline constexpr bool kGrad_Grad = true, kGrad_NoGrad = false;
inline constexpr bool kCostly_Costly = true, kCostly_Cheap = false;
}  // namespace registry_detail

#define OXM_REGISTRY_FACTS(api, dtypes, grad)                                                \
  oxmera::ops::registry_detail::kPublic_##api, oxmera::ops::registry_detail::kInts_##dtypes, \
      oxmera::ops::registry_detail::kGrad_##grad

inline constexpr OpInfo kUnaryOps[] = {
#define OXM_X(id, name, api, dtypes, grad, cost, lo, hi, ref, torch, doc) \
  {#name,                                                                 \
   OpKind::Unary,                                                         \
   static_cast<uint8_t>(UnaryOp::id),                                     \
   OXM_REGISTRY_FACTS(api, dtypes, grad),                                 \
   registry_detail::kCostly_##cost,                                       \
   {lo, lo},                                                              \
   {hi, hi},                                                              \
   #ref,                                                                  \
   torch,                                                                 \
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
inline constexpr std::span<const OpInfo> binary_ops() { return kBinaryOps; }
inline constexpr std::span<const OpInfo> structured_ops() { return kStructuredOps; }
// The entry called `name` (elementwise first), or null.
const OpInfo* find_op(std::string_view name) noexcept;

// Generic entry points of the elementwise ops (what the methods call): dtype, device and broadcasting checks,
// the backend kernel, and the autograd node.
Tensor unary(UnaryOp op, const Tensor& x);
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);

}  // namespace ops
}  // namespace oxmera

// Helpers for generated declarations: OXM_IF_PUBLIC(api, tokens) keeps the tokens for Public entries only.
#define OXM_IF_PUBLIC_Public(...) __VA_ARGS__
#define OXM_IF_PUBLIC_Internal(...)
#define OXM_IF_PUBLIC(api, ...) OXM_IF_PUBLIC_##api(__VA_ARGS__)
