// nn::MultiheadAttention: torch's parameter layout and the math of torch's multi_head_attention_forward
// (explicit softmax when the weights are wanted, the fused scaled_dot_product_attention otherwise).
#include <cmath>
#include <limits>
#include <sstream>
#include <utility>
#include <vector>

#include "nn/linear_gelu.hpp"
#include "nn/packed_attention.hpp"
#include "ops/ops_internal.hpp"
#include "oxmera/error.hpp"
#include "oxmera/nn/attention.hpp"
#include "oxmera/nn/functional.hpp"
#include "oxmera/nn/init.hpp"

namespace oxmera::nn {
namespace F = functional;
namespace {

constexpr const char* kOp = "MultiheadAttention";
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// A mask as an additive float mask of dtype `dt`: U8 true -> -inf (torch MHA: true = not allowed).
Tensor additive(const Tensor& m, DType dt, const char* what) {
  if (m.dtype() == DType::U8) return where(m, kNegInf, zeros({}, dt, m.device()));
  OXM_CHECK(m.dtype() == dt, DTypeMismatch, kOp, ": ", what, " must be bool (u8, true = not allowed) or ", dt, ", got ",
            m.dtype());
  return m;
}

}  // namespace

MultiheadAttention::MultiheadAttention(int64_t e, int64_t h, MultiheadAttentionOptions opt, Generator& gen)
    : embed_dim(e), num_heads(h), kdim(opt.kdim ? opt.kdim : e), vdim(opt.vdim ? opt.vdim : e), options(opt) {
  OXM_CHECK(e > 0 && h > 0, InvalidArgument, kOp, ": embed_dim and num_heads must be positive, got ", e, ", ", h);
  OXM_CHECK(e % h == 0, InvalidArgument, kOp, ": embed_dim (", e, ") must be divisible by num_heads (", h, ")");
  OXM_CHECK(opt.kdim >= 0 && opt.vdim >= 0, InvalidArgument, kOp, ": kdim and vdim must be >= 0 (0: embed_dim)");
  OXM_CHECK(opt.dropout >= 0 && opt.dropout < 1, InvalidArgument, kOp, ": dropout must be in [0, 1), got ",
            opt.dropout);
  // Registration order is torch's, so state_dict() lists the same keys in the same order.
  if (kdim == e && vdim == e) {
    register_parameter("in_proj_weight", &MultiheadAttention::in_proj_weight, empty({3 * e, e}));
    init::xavier_uniform_(in_proj_weight, gen);
  } else {
    register_parameter("q_proj_weight", &MultiheadAttention::q_proj_weight, empty({e, e}));
    register_parameter("k_proj_weight", &MultiheadAttention::k_proj_weight, empty({e, kdim}));
    register_parameter("v_proj_weight", &MultiheadAttention::v_proj_weight, empty({e, vdim}));
    init::xavier_uniform_(q_proj_weight, gen);
    init::xavier_uniform_(k_proj_weight, gen);
    init::xavier_uniform_(v_proj_weight, gen);
  }
  register_parameter("in_proj_bias", &MultiheadAttention::in_proj_bias, opt.bias ? zeros({3 * e}) : Tensor());
  register_module("out_proj", &MultiheadAttention::out_proj, std::make_shared<Linear>(e, e, opt.bias, gen));
  if (opt.bias) init::zeros_(out_proj->bias);
}

std::string MultiheadAttention::extra_repr() const {
  std::ostringstream os;
  os << "embed_dim=" << embed_dim << ", num_heads=" << num_heads;
  return os.str();
}

std::tuple<Tensor, Tensor> MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                                       const Tensor& key_padding_mask, bool need_weights,
                                                       const Tensor& attn_mask, bool average_attn_weights,
                                                       bool is_causal) {
  check_f32_input(query);
  check_f32_input(key);
  check_f32_input(value);
  const int64_t E = embed_dim, H = num_heads, hd = E / H;
  OXM_CHECK((query.dim() == 2 || query.dim() == 3) && key.dim() == query.dim() && value.dim() == query.dim(),
            ShapeMismatch, kOp, ": query, key and value must all be 3-d ([L, N, E], [N, L, E] with batch_first) or ",
            "all 2-d (unbatched [L, E]); got ", query.shape(), ", ", key.shape(), ", ", value.shape());
  const bool unbatched = query.dim() == 2;
  // Everything below works on torch's seq-first layout [L, N, E].
  Tensor q = unbatched ? query.unsqueeze(1) : (options.batch_first ? query.transpose(0, 1) : query);
  Tensor k = unbatched ? key.unsqueeze(1) : (options.batch_first ? key.transpose(0, 1) : key);
  Tensor v = unbatched ? value.unsqueeze(1) : (options.batch_first ? value.transpose(0, 1) : value);
  const int64_t L = q.shape()[0], N = q.shape()[1], S = k.shape()[0];
  OXM_CHECK(q.shape()[2] == E && k.shape()[2] == kdim && v.shape()[2] == vdim, ShapeMismatch, kOp,
            ": feature sizes must be embed_dim ", E, " (query), kdim ", kdim, " (key), vdim ", vdim, " (value); got ",
            query.shape(), ", ", key.shape(), ", ", value.shape());
  OXM_CHECK(k.shape()[1] == N && v.shape()[1] == N && v.shape()[0] == S, ShapeMismatch, kOp,
            ": key and value need the query's batch size and one sequence length; got query ", query.shape(), ", key ",
            key.shape(), ", value ", value.shape(), (options.batch_first ? " (batch_first)" : ""));

  // Additive mask broadcasting to the scores [N, H, L, S] (undefined when there is none).
  Tensor mask;
  bool causal = false;
  if (attn_mask.defined()) {
    OXM_CHECK(attn_mask.device() == query.device(), DeviceMismatch, kOp, ": attn_mask must be on the query's device");
    const bool two = attn_mask.dim() == 2 && attn_mask.shape()[0] == L && attn_mask.shape()[1] == S;
    const bool three =
        attn_mask.dim() == 3 && attn_mask.shape()[0] == N * H && attn_mask.shape()[1] == L && attn_mask.shape()[2] == S;
    OXM_CHECK(two || three, ShapeMismatch, kOp, ": attn_mask must be [L, S] = [", L, ", ", S,
              "] or [N * num_heads, L, S] = [", N * H, ", ", L, ", ", S, "]; got ", attn_mask.shape());
    mask = additive(attn_mask, q.dtype(), "attn_mask");
    if (three) mask = mask.reshape({N, H, L, S});
  } else if (is_causal) {
    causal = true;
  }
  if (key_padding_mask.defined()) {
    OXM_CHECK(key_padding_mask.device() == query.device(), DeviceMismatch, kOp,
              ": key_padding_mask must be on the query's device");
    const bool ok = unbatched ? (key_padding_mask.dim() == 1 && key_padding_mask.shape()[0] == S)
                              : (key_padding_mask.dim() == 2 && key_padding_mask.shape()[0] == N &&
                                 key_padding_mask.shape()[1] == S);
    OXM_CHECK(ok, ShapeMismatch, kOp, ": key_padding_mask must be ", (unbatched ? "[S]" : "[N, S]"), " = [",
              (unbatched ? "" : std::to_string(N) + ", "), S, "]; got ", key_padding_mask.shape());
    Tensor kpm = additive(key_padding_mask, q.dtype(), "key_padding_mask").reshape({N, 1, 1, S});
    if (causal) {  // one mask for both: fold the causal mask in
      mask = where(ops::causal_mask(L, S, q.device()), kNegInf, zeros({}, q.dtype(), q.device()));
      causal = false;
    }
    mask = mask.defined() ? mask + kpm : kpm;
  }

  // In-projection: rows [0, E) of in_proj_weight give q, [E, 2E) k, [2E, 3E) v (torch's layout). The projections run
  // on the inputs as given, batch-first [N, T, E] or seq-first [T, N, E] (a linear treats every row alike, so nothing
  // is transposed and copied first); `heads` views a projection [.., T, .., c * E] as c tensors [N, H, T, hd].
  // Self-attention (query, key and value one tensor) projects once with the whole [3E, E] weight, as torch does,
  // and key = value (cross-attention on a memory) projects k and v together: one GEMM and one backward instead of
  // three, no per-projection input copy.
  const bool bf = !unbatched && options.batch_first;
  const Tensor qin = unbatched ? query.unsqueeze(1) : query;
  const Tensor kin = unbatched ? key.unsqueeze(1) : key;
  const Tensor vin = unbatched ? value.unsqueeze(1) : value;
  auto heads = [&](const Tensor& x, int64_t T, int64_t c) -> std::vector<Tensor> {
    const Tensor r = bf ? x.reshape({N, T, c, H, hd}).permute({2, 0, 3, 1, 4})   // [c, N, H, T, hd]
                        : x.reshape({T, N, c, H, hd}).permute({2, 1, 3, 0, 4});  // [c, N, H, T, hd]
    std::vector<Tensor> out;
    for (int64_t i = 0; i < c; ++i) out.push_back(r.select(0, i));
    return out;
  };
  auto rows = [&](int64_t first, int64_t count) {  // in_proj_weight / in_proj_bias rows [first E, (first + count) E)
    return std::pair{in_proj_weight.narrow(0, first * E, count * E),
                     in_proj_bias.defined() ? in_proj_bias.narrow(0, first * E, count * E) : Tensor()};
  };
  Tensor qh, kh, vh, packed;  // packed: self-attention's one projection [.., L, .., 3E]
  if (in_proj_weight.defined() && query.is_same(key) && key.is_same(value)) {
    packed = F::linear(qin, in_proj_weight, in_proj_bias);
    if (need_weights) {  // else packed_self_attention takes the heads of the projection itself
      const std::vector<Tensor> qkv = heads(packed, L, 3);
      qh = qkv[0], kh = qkv[1], vh = qkv[2];
    }
  } else if (in_proj_weight.defined()) {
    const auto [wq, bq] = rows(0, 1);
    qh = heads(F::linear(qin, wq, bq), L, 1)[0];
    if (key.is_same(value)) {
      const auto [wkv, bkv] = rows(1, 2);
      const std::vector<Tensor> kv = heads(F::linear(kin, wkv, bkv), S, 2);
      kh = kv[0], vh = kv[1];
    } else {
      const auto [wk, bk] = rows(1, 1);
      const auto [wv, bv] = rows(2, 1);
      kh = heads(F::linear(kin, wk, bk), S, 1)[0];
      vh = heads(F::linear(vin, wv, bv), S, 1)[0];
    }
  } else {
    const Tensor bq = in_proj_bias.defined() ? in_proj_bias.narrow(0, 0, E) : Tensor();
    const Tensor bk = in_proj_bias.defined() ? in_proj_bias.narrow(0, E, E) : Tensor();
    const Tensor bv = in_proj_bias.defined() ? in_proj_bias.narrow(0, 2 * E, E) : Tensor();
    qh = heads(F::linear(qin, q_proj_weight, bq), L, 1)[0];
    kh = heads(F::linear(kin, k_proj_weight, bk), S, 1)[0];
    vh = heads(F::linear(vin, v_proj_weight, bv), S, 1)[0];
  }
  const double p = is_training() ? options.dropout : 0.0;

  Tensor ctx, weights;  // ctx [N, H, L, hd]
  if (need_weights) {
    Tensor s = (qh * (1.0 / std::sqrt(static_cast<double>(hd)))).matmul(kh.transpose(-2, -1));
    if (mask.defined()) s = s + mask;
    if (causal) s = s.masked_fill(ops::causal_mask(L, S, q.device()), kNegInf);
    Tensor w = s.softmax(-1);
    weights = w;
    if (p > 0) w = F::dropout(w, p, true, default_generator());
    ctx = w.matmul(vh);
    if (average_attn_weights) weights = weights.mean(Dims{1});
    if (unbatched) weights = weights.squeeze(0);
  } else if (packed.defined()) {
    ctx = F::packed_self_attention(packed, H, bf, mask, p, causal);
  } else {
    ctx = F::scaled_dot_product_attention(qh, kh, vh, mask, p, causal);
  }
  // [N, H, L, hd] -> the input's layout, [N, L, E] or [L, N, E]
  Tensor out = bf ? out_proj->forward(ctx.permute({0, 2, 1, 3}).reshape({N, L, E}))
                  : out_proj->forward(ctx.permute({2, 0, 1, 3}).reshape({L, N, E}));
  if (unbatched) out = out.squeeze(1);
  return {out, weights};
}

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d, int64_t h, TransformerEncoderLayerOptions opt,
                                                 Generator& gen)
    : options(std::move(opt)) {
  constexpr const char* op = "TransformerEncoderLayer";
  OXM_CHECK(options.activation == "relu" || options.activation == "gelu", InvalidArgument, op,
            ": activation must be \"relu\" or \"gelu\", got \"", options.activation, "\"");
  OXM_CHECK(options.dim_feedforward > 0, InvalidArgument, op, ": dim_feedforward must be positive, got ",
            options.dim_feedforward);
  // Registration order is torch's (state_dict keys in its order).
  register_module(
      "self_attn", &TransformerEncoderLayer::self_attn,
      std::make_shared<MultiheadAttention>(
          d, h, MultiheadAttentionOptions{.dropout = options.dropout, .batch_first = options.batch_first}, gen));
  register_module("linear1", &TransformerEncoderLayer::linear1,
                  std::make_shared<Linear>(d, options.dim_feedforward, true, gen));
  register_module("dropout", &TransformerEncoderLayer::dropout,
                  std::make_shared<Dropout>(options.dropout, gen.next_u64()));
  register_module("linear2", &TransformerEncoderLayer::linear2,
                  std::make_shared<Linear>(options.dim_feedforward, d, true, gen));
  register_module("norm1", &TransformerEncoderLayer::norm1,
                  std::make_shared<LayerNorm>(Shape{d}, options.layer_norm_eps));
  register_module("norm2", &TransformerEncoderLayer::norm2,
                  std::make_shared<LayerNorm>(Shape{d}, options.layer_norm_eps));
  register_module("dropout1", &TransformerEncoderLayer::dropout1,
                  std::make_shared<Dropout>(options.dropout, gen.next_u64()));
  register_module("dropout2", &TransformerEncoderLayer::dropout2,
                  std::make_shared<Dropout>(options.dropout, gen.next_u64()));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask,
                                        bool is_causal) {
  auto sa = [&](const Tensor& x) {
    return dropout1->forward(
        std::get<0>(self_attn->forward(x, x, x, src_key_padding_mask, false, src_mask, true, is_causal)));
  };
  auto ff = [&](const Tensor& x) {
    return dropout2->forward(linear2->forward(dropout->forward(F::feed_forward_in(linear1, options.activation, x))));
  };
  Tensor x = src;
  if (options.norm_first) {
    x = x + sa(norm1->forward(x));
    x = x + ff(norm2->forward(x));
  } else {
    x = norm1->forward(x + sa(x));
    x = norm2->forward(x + ff(x));
  }
  return x;
}

}  // namespace oxmera::nn
