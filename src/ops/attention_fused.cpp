// The composite fallback of the fused attention (ops/fused.hpp, AttentionCall): matmul, softmax, matmul on any
// backend's generic kernels (it materialises the [B, L, S] scores; the CPU kernel tiles them).
#include <limits>

#include "ops/fused.hpp"
#include "ops/ops_internal.hpp"
#include "oxmera/autograd.hpp"
#include "oxmera/tensor.hpp"

namespace oxmera::ops {
namespace {
Tensor borrow(const TensorImpl* p) {
  auto* q = const_cast<TensorImpl*>(p);
  detail::retain(q);
  return Tensor(q);
}
}  // namespace

void attention_fallback(FusedCall& call, Device) {
  auto& c = std::get<AttentionCall>(call);
  NoGradGuard no_grad;
  const Tensor q = borrow(c.q), k = borrow(c.k), v = borrow(c.v);
  Tensor s = q.matmul(k.transpose(1, 2)) * c.scale;
  if (c.mask) s = s + borrow(c.mask);
  if (c.causal) {
    const int64_t L = q.shape()[1], S = k.shape()[1];
    s = s.masked_fill(causal_mask(L, S, q.device()), -std::numeric_limits<double>::infinity());
  }
  borrow(c.lse).copy_(s.logsumexp(-1));
  borrow(c.out).copy_(s.softmax(-1).matmul(v));
}

}  // namespace oxmera::ops
