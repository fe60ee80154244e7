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

// scale q k^T + mask with the causal mask applied: [N, H, L, S] (the mask an [N, H, L, S] view, maybe broadcast)
Tensor scores(const Tensor& q, const Tensor& k, const Tensor& mask, bool causal, double scale) {
  Tensor s = q.matmul(k.transpose(-2, -1)) * scale;
  if (mask.defined()) s = s + mask;
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
  const Tensor s = scores(q, k, c.mask ? borrow(c.mask) : Tensor(), c.causal, c.scale);
  if (c.lse) {
    Tensor lse = borrow(c.lse);
    lse.copy_(s.logsumexp(-1).reshape(lse.shape()));
  }
  const Tensor p = s.softmax(-1);
  if (c.probs) {
    Tensor probs = borrow(c.probs);
    probs.copy_(p.reshape(probs.shape()));
  }
  borrow(c.out).copy_(p.matmul(v));
}

std::array<Tensor, 3> attention_backward_composite(const Tensor& q, const Tensor& k, const Tensor& v,
                                                   const Tensor& mask, bool causal, double scale, const Tensor& g,
                                                   const std::array<bool, 3>& want, const Tensor& probs) {
  const Tensor p = probs.defined() ? probs.reshape({q.size(0), q.size(1), q.size(2), k.size(2)})
                                   : scores(q, k, mask, causal, scale).softmax(-1);
  const Tensor dp = g.matmul(v.transpose(-2, -1));
  const Tensor ds = p * (dp - (dp * p).sum({-1}, true));
  std::array<Tensor, 3> out;
  if (want[0]) out[0] = ds.matmul(k) * scale;
  if (want[1]) out[1] = ds.transpose(-2, -1).matmul(q) * scale;
  if (want[2]) out[2] = p.transpose(-2, -1).matmul(g);
  return out;
}

void attention_backward_fallback(FusedCall& call, Device) {
  auto& c = std::get<AttentionBackwardCall>(call);
  NoGradGuard no_grad;
  TensorImpl* dst[3] = {c.grad_q, c.grad_k, c.grad_v};
  const std::array<Tensor, 3> grads = attention_backward_composite(
      borrow(c.q), borrow(c.k), borrow(c.v), c.mask ? borrow(c.mask) : Tensor(), c.causal, c.scale, borrow(c.g),
      {dst[0] != nullptr, dst[1] != nullptr, dst[2] != nullptr}, c.probs ? borrow(c.probs) : Tensor());
  for (int i = 0; i < 3; ++i)
    if (dst[i]) borrow(dst[i]).copy_(grads[i]);
}

}  // namespace oxmera::ops
