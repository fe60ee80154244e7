#pragma once
#include <array>
// Shared helpers of the op front ends.
#include "ops/op_defs.hpp"

namespace oxmera::ops {

// ops::unary / ops::binary (the generic entry points) are declared in oxmera/op_registry.hpp.
// The backward of unary op `op` in one kernel (see defs::*::grad); x, y: what the op saves, else g.
Tensor unary_grad(UnaryOp op, const Tensor& g, const Tensor& x, const Tensor& y, const OpParams& params = {});
// One operand's gradient of binary op `op` in one kernel (see defs::*::grad_a / grad_b).
Tensor binary_grad(BinaryOp op, int side, const Tensor& g, const Tensor& a, const Tensor& b);
Shape check_binary(const Tensor& a, const Tensor& b, const char* op, bool allow_host_scalar = false);
Tensor broadcast_view(const Tensor& t, const Shape& shape);
// A 0-d CPU tensor of like's dtype: a scalar operand for binary ops on any device (passed by value).
// InvalidArgument when an integer dtype cannot hold the scalar v (NaN, or outside its range; a fraction is
// truncated, as torch does): what would otherwise be an undefined float -> integer conversion.
void check_scalar_fits(double v, DType dtype, const char* op);
Tensor scalar_like(double v, const Tensor& like, const char* op);
// A 0-d tensor on like's device (one fill on a GPU), for ops that take no host scalar (where).
Tensor scalar_on_device_of(double v, const Tensor& like, const char* op);
// t itself when BLAS can read its last two dims (one of their strides is 1, leading dims fit 32 bits), else a
// contiguous copy made without recording it (callers record their own node on t).
Tensor gemm_compatible(const Tensor& t);
// The causal mask of attention scores [L, S] on `device`: u8, 1 where key j is in query i's future (j > i), the
// entries masked_fill sets to -inf. Built on the host and copied over (no kernel: one upload on a GPU, an allocation
// and a fill loop on the CPU), in place of ones().triu(1) > 0.5 (three kernels and the same upload).
Tensor causal_mask(int64_t L, int64_t S, Device device);
// The gradients of softmax(scale q k^T + mask) v by the composite's formulas (q, k, v, g 4-d [N, H, T, *]; mask
// undefined or an additive [Bm, L, S], Bm = 1 or N H): recompute the weights P, dS = P (g v^T - rowsum(P g v^T)),
// then scale dS k, scale dS^T q, P^T g, each only where `want` says (undefined otherwise). Differentiable under
// grad mode; both the AttentionBackward fallback and the attention node's create_graph path. `probs` (the forward's
// P, [N H, L, S], or undefined): read instead of recomputing P (the fallback only; not differentiable in q, k).
std::array<Tensor, 3> attention_backward_composite(const Tensor& q, const Tensor& k, const Tensor& v,
                                                   const Tensor& mask, bool causal, double scale, const Tensor& g,
                                                   const std::array<bool, 3>& want, const Tensor& probs = Tensor());
// Reduction mask over `dims` (empty = all) of a rank-`rank` tensor; duplicate dims are an error.
uint64_t reduce_mask(const Dims& dims, int64_t rank, const char* op);

}  // namespace oxmera::ops
