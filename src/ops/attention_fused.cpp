// The composite fallbacks of the fused attention and its backward (ops/fused.hpp, AttentionCall and
// AttentionBackwardCall): matmul, softmax, matmul on any backend's generic kernels (they materialise the [B, L, S]
// scores; the CPU kernels work on a block of queries at a time).
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

// scale q k^T + mask with the causal mask applied: [N, H, L, S] (a per-problem mask [B, L, S] viewed as [N, H, L, S])
Tensor scores(const Tensor& q, const Tensor& k, const TensorImpl* mask, bool causal, double scale) {
  Tensor s = q.matmul(k.transpose(-2, -1)) * scale;
  if (mask) {
    const Tensor m = borrow(mask);
    s = s + (m.shape()[0] == 1 ? m : m.reshape(s.shape()));
  }
  if (causal) {
    const int64_t L = q.shape()[2], S = k.shape()[2];
    s = s.masked_fill(causal_mask(L, S, q.device()), -std::numeric_limits<double>::infinity());
  }
  return s;
}
}  // namespace

void attention_fallback(FusedCall& call, Device) {
  auto& c = std::get<AttentionCall>(call);
  NoGradGuard no_grad;
  const Tensor q = borrow(c.q), k = borrow(c.k), v = borrow(c.v);
  const Tensor s = scores(q, k, c.mask, c.causal, c.scale);
  if (c.lse) {
    Tensor lse = borrow(c.lse);
    lse.copy_(s.logsumexp(-1).reshape(lse.shape()));
  }
  borrow(c.out).copy_(s.softmax(-1).matmul(v));
}

void attention_backward_fallback(FusedCall& call, Device) {
  auto& c = std::get<AttentionBackwardCall>(call);
  NoGradGuard no_grad;
  const Tensor q = borrow(c.q), k = borrow(c.k), v = borrow(c.v), g = borrow(c.g);
  const Tensor p = scores(q, k, c.mask, c.causal, c.scale).softmax(-1);
  const Tensor dp = g.matmul(v.transpose(-2, -1));
  const Tensor ds = p * (dp - (dp * p).sum({-1}, true));
  if (c.grad_q) borrow(c.grad_q).copy_(ds.matmul(k) * c.scale);
  if (c.grad_k) borrow(c.grad_k).copy_(ds.transpose(-2, -1).matmul(q) * c.scale);
  if (c.grad_v) borrow(c.grad_v).copy_(p.transpose(-2, -1).matmul(g));
}

}  // namespace oxmera::ops
