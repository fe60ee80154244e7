// scaled_dot_product_attention: argument checks, the fused op (ops/fused.hpp, AttentionCall) with its autograd
// node, and the composite used for dropout, a mask that needs a gradient, and backends without the kernel.
#include "oxmera/nn/attention.hpp"

#include <array>
#include <cmath>
#include <limits>

#include "autograd/node.hpp"
#include "nn/attention_policy.hpp"
#include "nn/packed_attention.hpp"
#include "ops/fused.hpp"
#include "ops/ops_internal.hpp"
#include "oxmera/autograd.hpp"
#include "oxmera/nn/functional.hpp"

namespace oxmera::nn::functional {
namespace {

constexpr const char* kOp = "scaled_dot_product_attention";
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

struct Checked {
  double scale = 1;
  Tensor mask;  // additive, q's dtype, or undefined
};

Checked check_args(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask, double dropout_p,
                   bool is_causal, std::optional<double> scale) {
  detail::check_defined(q, kOp, "query");
  detail::check_defined(k, kOp, "key");
  detail::check_defined(v, kOp, "value");
  OXM_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), ShapeMismatch, kOp,
            ": query, key and value need the same number of dims (>= 2): [..., L, E], [..., S, E], [..., S, Ev]; got ",
            q.shape(), ", ", k.shape(), ", ", v.shape());
  const int64_t n = q.dim();
  for (int64_t d = 0; d + 2 < n; ++d)
    OXM_CHECK(q.shape()[d] == k.shape()[d] && q.shape()[d] == v.shape()[d], ShapeMismatch, kOp,
              ": query, key and value need the same leading (batch, head) dims; got ", q.shape(), ", ", k.shape(), ", ",
              v.shape());
  OXM_CHECK(q.shape()[n - 1] == k.shape()[n - 1], ShapeMismatch, kOp,
            ": query [..., L, E] and key [..., S, E] need one E; got ", q.shape(), " and ", k.shape());
  OXM_CHECK(k.shape()[n - 2] == v.shape()[n - 2], ShapeMismatch, kOp,
            ": key [..., S, E] and value [..., S, Ev] need one S; got ", k.shape(), " and ", v.shape());
  OXM_CHECK(is_floating(q.dtype()) && k.dtype() == q.dtype() && v.dtype() == q.dtype(), DTypeMismatch, kOp,
            ": query, key and value need one float dtype; got ", q.dtype(), ", ", k.dtype(), ", ", v.dtype());
  OXM_CHECK(k.device() == q.device() && v.device() == q.device(), DeviceMismatch, kOp,
            ": query, key and value must be on one device");
  OXM_CHECK(dropout_p >= 0 && dropout_p < 1, InvalidArgument, kOp, ": dropout_p must be in [0, 1), got ", dropout_p);
  OXM_CHECK(!(is_causal && attn_mask.defined()), InvalidArgument, kOp,
            ": pass either attn_mask or is_causal, not both (fold the causal mask into attn_mask)");
  Checked c;
  c.scale = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.shape()[n - 1]));
  if (attn_mask.defined()) {
    const int64_t L = q.shape()[n - 2], S = k.shape()[n - 2];
    Shape want = q.shape();
    want[static_cast<size_t>(n - 1)] = S;
    bool fits = attn_mask.dim() <= n;
    for (int64_t i = 1; fits && i <= attn_mask.dim(); ++i) {
      const int64_t m = attn_mask.shape()[attn_mask.dim() - i], w = want[static_cast<size_t>(n - i)];
      fits = m == 1 || m == w;
    }
    (void)L;
    OXM_CHECK(fits, ShapeMismatch, kOp, ": attn_mask ", attn_mask.shape(), " does not broadcast to the scores ", want,
              " ([..., L, S] for query ", q.shape(), ", key ", k.shape(), ")");
    OXM_CHECK(attn_mask.device() == q.device(), DeviceMismatch, kOp, ": attn_mask must be on the query's device");
    if (attn_mask.dtype() == DType::U8) {
      c.mask = where(attn_mask, zeros({}, q.dtype(), q.device()), full({}, kNegInf, q.dtype(), q.device()));
    } else {
      OXM_CHECK(attn_mask.dtype() == q.dtype(), DTypeMismatch, kOp, ": a float attn_mask must have the query's dtype ",
                q.dtype(), ", got ", attn_mask.dtype(), " (or pass a bool (u8) mask: nonzero = attend)");
      c.mask = attn_mask;
    }
  }
  return c;
}

Tensor composite(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double dropout_p,
                 bool is_causal, double scale, Generator* gen) {
  Tensor s = q.matmul(k.transpose(-2, -1)) * scale;
  if (mask.defined()) s = s + mask;
  if (is_causal) {
    const int64_t L = q.shape()[q.dim() - 2], S = k.shape()[k.dim() - 2];
    s = s.masked_fill(ops::causal_mask(L, S, q.device()), kNegInf);
  }
  Tensor p = s.softmax(-1);
  if (dropout_p > 0) p = dropout(p, dropout_p, true, gen ? *gen : default_generator());
  return p.matmul(v);
}

// x [..., T, E] as the kernels' 4-d view [N, H, T, E]: a view for 2- to 4-d inputs with a unit stride along the last
// dim (the heads of a packed projection stay in place), a copy otherwise.
Tensor as_4d(const Tensor& x) {
  const int64_t n = x.dim();
  Tensor y = n == 4   ? x
             : n == 3 ? x.unsqueeze(1)
             : n == 2 ? x.unsqueeze(0).unsqueeze(0)
                      : x.reshape({-1, x.size(n - 3), x.size(n - 2), x.size(n - 1)});
  return y.stride(3) == 1 || y.size(3) == 1 ? y : y.contiguous();
}

// q, k and v of self-attention as views of one projection [N, T, 3 * H * hd] (batch first) or [T, N, 3 * H * hd],
// which they tile: q the first H * hd features, k the next, v the last (MultiheadAttention's in_proj layout).
struct PackedHeads {
  int64_t H = 1;
  bool batch_first = true;
  std::array<Tensor, 3> views(const Tensor& p) const {
    const int64_t a = p.size(0), b = p.size(1), hd = p.size(2) / (3 * H);
    const Tensor r = batch_first ? p.reshape({a, b, 3, H, hd}).permute({2, 0, 3, 1, 4})   // [3, N, H, T, hd]
                                 : p.reshape({a, b, 3, H, hd}).permute({2, 1, 3, 0, 4});  // [3, N, H, T, hd]
    return {r.select(0, 0), r.select(0, 1), r.select(0, 2)};
  }
  // The inverse, differentiably (create_graph): three [N, H, T, hd] gradients as one of the projection's shape.
  Tensor join(const std::array<Tensor, 3>& g, const Shape& shape) const {
    const Tensor s = stack({g[0], g[1], g[2]}, 0);  // [3, N, H, T, hd]
    return (batch_first ? s.permute({1, 3, 0, 2, 4}) : s.permute({3, 1, 0, 2, 4})).reshape(shape);
  }
};

// Saves q, k, v (the kernels' 4-d views), the additive mask and, for small problems, the weights P. Without
// create_graph the backward is the fused AttentionBackward op (the CPU's kernel reads the kept weights or recomputes
// them block by block; elsewhere the composite fallback).
// With create_graph the weights come from a recorded softmax of the re-attached inputs, so the gradient is itself
// differentiable (the composite's double backward).
struct AttentionNode final : detail::Node {
  detail::SavedTensor q, k, v;
  // Packed self-attention: the one input is the projection (saved here, q, k, v undefined); the backward writes the
  // three gradients straight into one gradient of the projection's shape, which they tile (no zero fill, no adds).
  detail::SavedTensor packed;
  PackedHeads layout;
  Tensor mask;
  // The forward's weights P [N H, L, S] (attention_keep_probs_max_bytes), or undefined: the fused backward reads them
  // instead of recomputing them. Not an input's value: the version checks of q, k, v (or the projection) cover it.
  Tensor probs;
  bool causal = false;
  double scale = 1;
  bool release_saved() override {
    const bool had = q.defined() || packed.defined();
    q.reset();
    k.reset();
    v.reset();
    packed.reset();
    mask = Tensor();
    probs = Tensor();
    return had;
  }
  const char* name() const override { return kOp; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* gout, Tensor* gin) override {
    // The output was recorded in its [N, L, H, Ev] layout: its gradient is viewed back as [N, H, L, Ev].
    const Tensor g = gout[0].permute({0, 2, 1, 3});
    if (packed.defined()) return apply_packed(g, gin);
    const Tensor qv = q.get(name()), kv = k.get(name()), vv = v.get(name());
    if (!grad_enabled()) {
      const Tensor g4 = as_4d(g);  // the kernels' unit last stride
      for (int i = 0; i < 3; ++i)
        if (needs_grad(i)) {
          const Tensor& like = i == 0 ? qv : i == 1 ? kv : vv;
          gin[i] = detail::make_empty(like.shape(), like.dtype(), like.device(), kOp);
        }
      ops::FusedCall call = ops::AttentionBackwardCall{qv.impl(),
                                                       kv.impl(),
                                                       vv.impl(),
                                                       mask.defined() ? mask.impl() : nullptr,
                                                       causal,
                                                       scale,
                                                       g4.impl(),
                                                       gin[0].defined() ? gin[0].impl() : nullptr,
                                                       gin[1].defined() ? gin[1].impl() : nullptr,
                                                       gin[2].defined() ? gin[2].impl() : nullptr,
                                                       probs.defined() ? probs.impl() : nullptr};
      ops::run_fused(call, qv.device());
      return;
    }
    const std::array<Tensor, 3> grads = ops::attention_backward_composite(
        qv, kv, vv, mask, causal, scale, g, {needs_grad(0), needs_grad(1), needs_grad(2)});
    for (int i = 0; i < 3; ++i) gin[i] = grads[i];
  }
  void apply_packed(const Tensor& g, Tensor* gin) {
    const Tensor p = packed.get(name());
    const std::array<Tensor, 3> in = layout.views(p);
    if (!grad_enabled()) {
      const Tensor gp = detail::make_empty(p.shape(), p.dtype(), p.device(), kOp);
      const std::array<Tensor, 3> out = layout.views(gp);
      const Tensor g4 = as_4d(g);
      ops::FusedCall call = ops::AttentionBackwardCall{in[0].impl(),
                                                       in[1].impl(),
                                                       in[2].impl(),
                                                       mask.defined() ? mask.impl() : nullptr,
                                                       causal,
                                                       scale,
                                                       g4.impl(),
                                                       out[0].impl(),
                                                       out[1].impl(),
                                                       out[2].impl(),
                                                       probs.defined() ? probs.impl() : nullptr};
      ops::run_fused(call, p.device());
      gin[0] = gp;
      return;
    }
    gin[0] = layout.join(
        ops::attention_backward_composite(in[0], in[1], in[2], mask, causal, scale, g, {true, true, true}), p.shape());
  }
};

detail::Edge edge_or_none(const Tensor& t) { return t.requires_grad() ? detail::edge_of(t) : detail::Edge{}; }

}  // namespace

Tensor scaled_dot_product_attention_composite(const Tensor& q, const Tensor& k, const Tensor& v,
                                              const Tensor& attn_mask, double dropout_p, bool is_causal,
                                              std::optional<double> scale, Generator* gen) {
  const Checked c = check_args(q, k, v, attn_mask, dropout_p, is_causal, scale);
  return composite(q, k, v, c.mask, dropout_p, is_causal, c.scale, gen);
}

namespace {

// The fused path's operands: q, k, v as the kernels' 4-d views and the mask as an [N, H, L, S] view; `fused` false
// where the composite runs instead (dropout, a mask that needs a gradient, empty operands, no kernel on the device,
// or scores small enough for the composite's threshold).
struct FusedOperands {
  bool fused = false;
  Tensor q4, k4, v4, m4;
};

FusedOperands fused_operands(const Tensor& q, const Tensor& k, const Tensor& v, const Checked& c, double dropout_p,
                             bool is_causal) {
  FusedOperands f;
  const bool mask_grad = c.mask.defined() && c.mask.requires_grad() && grad_enabled();
  if (dropout_p > 0 || mask_grad || q.numel() == 0 || k.numel() == 0 || v.numel() == 0) return f;
  const int64_t n = q.dim();
  const int64_t L = q.shape()[n - 2], E = q.shape()[n - 1], S = k.shape()[n - 2];
  const int64_t B = q.numel() / (L * E);
  const double score_bytes = static_cast<double>(B) * static_cast<double>(L) * static_cast<double>(S) *
                             static_cast<double>(itemsize(q.dtype()));
  f.q4 = as_4d(q), f.k4 = as_4d(k), f.v4 = as_4d(v);
  {
    // Where the backend has no kernel the fallback would materialise the scores as the composite does, and its
    // backward would recompute them: the composite is taken instead.
    ops::FusedCall probe =
        ops::AttentionCall{f.q4.impl(), f.k4.impl(), f.v4.impl(), nullptr, is_causal, c.scale, nullptr, nullptr};
    if (!ops::fused_supported(probe, q.device()) ||
        score_bytes <= static_cast<double>(detail::attention_composite_max_score_bytes.load(std::memory_order_relaxed)))
      return f;
  }
  // The mask as the kernels' [N, H, L, S] view of the scores' shape: a broadcast view (stride 0 where it is shared
  // by batches, heads or queries), not expanded; only a mask without a unit stride along the keys (a transposed
  // one, or one broadcast over them) is copied first, at its own size.
  if (c.mask.defined()) {
    Tensor m = c.mask.detach();
    if (m.dim() == 0 || m.shape().back() != S || m.stride(m.dim() - 1) != 1) {
      Shape own = m.dim() == 0 ? Shape{S} : m.shape();
      own[own.size() - 1] = S;
      m = m.expand(own).contiguous();
    }
    Shape full_shape = q.shape();
    full_shape[static_cast<size_t>(n - 1)] = S;
    f.m4 = as_4d(m.expand(full_shape));
  }
  f.fused = true;
  return f;
}

// The fused forward: the output written in [N, L, H, Ev] order (MultiheadAttention's out projection reads it back as
// [N, L, H * Ev] without a copy); the caller records the node on it and returns its [N, H, L, Ev] view. With
// `record`, the weights P are kept in *probs for the node when they are small enough and the backend takes them.
Tensor fused_forward(const FusedOperands& f, bool is_causal, double scale, bool record, Tensor* probs) {
  const int64_t N = f.q4.size(0), H = f.q4.size(1), L = f.q4.size(2), Ev = f.v4.size(3), S = f.k4.size(2);
  Tensor out = detail::make_empty({N, L, H, Ev}, f.q4.dtype(), f.q4.device(), kOp);
  const Tensor out4 = out.permute({0, 2, 1, 3});
  NoGradGuard no_grad;
  ops::AttentionCall c{f.q4.impl(), f.k4.impl(), f.v4.impl(), f.m4.defined() ? f.m4.impl() : nullptr,
                       is_causal,   scale,       out4.impl(), nullptr};
  if (record) {
    const double bytes = static_cast<double>(N * H) * static_cast<double>(L) * static_cast<double>(S) *
                         static_cast<double>(itemsize(f.q4.dtype()));
    if (bytes <= static_cast<double>(detail::attention_keep_probs_max_bytes.load(std::memory_order_relaxed))) {
      Tensor p = detail::make_empty({N * H, L, S}, f.q4.dtype(), f.q4.device(), kOp);
      ops::AttentionCall with = c;
      with.probs = p.impl();
      ops::FusedCall probe = with;
      if (ops::fused_supported(probe, f.q4.device())) {
        c = with;
        *probs = std::move(p);
      }
    }
  }
  ops::FusedCall call = c;
  ops::run_fused(call, f.q4.device());
  return out;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                                    double dropout_p, bool is_causal, std::optional<double> scale, Generator* gen) {
  const Checked c = check_args(q, k, v, attn_mask, dropout_p, is_causal, scale);
  const FusedOperands f = fused_operands(q, k, v, c, dropout_p, is_causal);
  if (!f.fused) return composite(q, k, v, c.mask, dropout_p, is_causal, c.scale, gen);
  const bool record = grad_enabled() && (f.q4.requires_grad() || f.k4.requires_grad() || f.v4.requires_grad());
  Tensor probs;
  Tensor out = fused_forward(f, is_causal, c.scale, record, &probs);
  if (record) {
    auto* node = new AttentionNode();
    node->probs = std::move(probs);
    node->next.push_back(edge_or_none(f.q4));
    node->next.push_back(edge_or_none(f.k4));
    node->next.push_back(edge_or_none(f.v4));
    node->q.save(f.q4, false);
    node->k.save(f.k4, false);
    node->v.save(f.v4, false);
    node->mask = f.m4;
    node->causal = is_causal;
    node->scale = c.scale;
    detail::set_history(out, node);
  }
  const int64_t n = q.dim();
  Shape out_shape = q.shape();
  out_shape[static_cast<size_t>(n - 1)] = v.shape()[n - 1];
  const Tensor result = out.permute({0, 2, 1, 3});
  return n == 4 ? result : result.reshape(out_shape);
}

Tensor packed_self_attention(const Tensor& projection, int64_t num_heads, bool batch_first, const Tensor& attn_mask,
                             double dropout_p, bool is_causal, Generator* gen) {
  const PackedHeads layout{num_heads, batch_first};
  const std::array<Tensor, 3> qkv = layout.views(projection);
  const Checked c = check_args(qkv[0], qkv[1], qkv[2], attn_mask, dropout_p, is_causal, std::nullopt);
  const FusedOperands f = fused_operands(qkv[0], qkv[1], qkv[2], c, dropout_p, is_causal);
  if (!f.fused) return composite(qkv[0], qkv[1], qkv[2], c.mask, dropout_p, is_causal, c.scale, gen);
  const bool record = grad_enabled() && projection.requires_grad();
  Tensor probs;
  Tensor out = fused_forward(f, is_causal, c.scale, record, &probs);
  if (record) {
    auto* node = new AttentionNode();
    node->probs = std::move(probs);
    node->next.push_back(detail::edge_of(projection));
    node->packed.save(projection, false);
    node->layout = layout;
    node->mask = f.m4;
    node->causal = is_causal;
    node->scale = c.scale;
    detail::set_history(out, node);
  }
  return out.permute({0, 2, 1, 3});
}

}  // namespace oxmera::nn::functional
