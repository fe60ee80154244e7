#pragma once
// Attention: the functional scaled_dot_product_attention (a fused op on backends that offer it, the
// matmul / softmax composite elsewhere).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include "oxmera/nn/layers.hpp"
#include "oxmera/nn/module.hpp"
#include "oxmera/random.hpp"
#include "oxmera/tensor.hpp"

namespace oxmera::nn::functional {

// torch.nn.functional.scaled_dot_product_attention (torch 2.x): q [..., L, E], k [..., S, E], v [..., S, Ev]
// (one float dtype, the same leading dims) -> [..., L, Ev] = softmax(q k^T * scale + mask) v with scale
// 1 / sqrt(E) by default. attn_mask broadcasts to [..., L, S]: a bool (U8, as comparisons give) mask keeps the
// positions where it is true, a float mask (q's dtype) is added to the scores. is_causal keeps key j <= query i (with
// no attn_mask). dropout_p > 0 drops attention weights with `gen` (default_generator() when null) through the composite
// path.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask = {},
                                    double dropout_p = 0.0, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt, Generator* gen = nullptr);

// The same through ordinary ops only (matmul, softmax, matmul), whatever the backend offers: the reference the
// fused path is tested against, and what create_graph's double backward differentiates.
Tensor scaled_dot_product_attention_composite(const Tensor& q, const Tensor& k, const Tensor& v,
                                              const Tensor& attn_mask = {}, double dropout_p = 0.0,
                                              bool is_causal = false, std::optional<double> scale = std::nullopt,
                                              Generator* gen = nullptr);

}  // namespace oxmera::nn::functional

namespace oxmera::nn {

struct MultiheadAttentionOptions {
  double dropout = 0.0;  // on the attention weights, in training mode
  bool bias = true;      // in_proj_bias and out_proj.bias
  bool batch_first = false;
  int64_t kdim = 0, vdim = 0;  // key / value feature sizes; 0: embed_dim
};

// torch.nn.MultiheadAttention (without add_bias_kv / add_zero_attn), with torch's parameter names and
// initialisation so a torch state_dict loads by name: in_proj_weight [3E, E] (or q_proj_weight [E, E],
// k_proj_weight [E, kdim], v_proj_weight [E, vdim] when kdim or vdim differ from E), in_proj_bias [3E], and the
// child Linear out_proj. Inputs [L, N, E] ([N, L, E] with batch_first) or unbatched [L, E]; f32.
// forward returns (output [L, N, E], weights [N, L, S] averaged over heads or [N, H, L, S]); the weights are
// undefined with need_weights = false, which runs the fused scaled_dot_product_attention. As torch's MHA (and
// unlike scaled_dot_product_attention) a bool (U8) mask is true where attention is NOT allowed:
// key_padding_mask [N, S] (true = ignore that key; or float, added), attn_mask [L, S] or [N * H, L, S] (U8 or
// float, added). is_causal without attn_mask applies the causal mask (key j <= query i); with an attn_mask it
// is a hint only (the mask is used as given), as torch.
class MultiheadAttention : public Cloneable<MultiheadAttention> {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions options = {},
                     Generator& gen = default_generator());
  std::tuple<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                     const Tensor& key_padding_mask = {}, bool need_weights = true,
                                     const Tensor& attn_mask = {}, bool average_attn_weights = true,
                                     bool is_causal = false);
  std::string name() const override { return "MultiheadAttention"; }
  std::string extra_repr() const override;

  int64_t embed_dim, num_heads, kdim, vdim;
  MultiheadAttentionOptions options;
  Tensor in_proj_weight, q_proj_weight, k_proj_weight, v_proj_weight, in_proj_bias;
  std::shared_ptr<Linear> out_proj;
};

struct TransformerEncoderLayerOptions {
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  std::string activation = "relu";  // "relu" or "gelu"
  double layer_norm_eps = 1e-5;
  bool batch_first = false;
  bool norm_first = false;
};

// torch.nn.TransformerEncoderLayer with torch's child names (self_attn, linear1, dropout, linear2, norm1, norm2,
// dropout1, dropout2), so a torch state_dict loads by name. Post-norm: x = norm1(x + sa(x)), x = norm2(x + ff(x));
// norm_first: x = x + sa(norm1(x)), x = x + ff(norm2(x)). src_mask / src_key_padding_mask as MultiheadAttention's
// attn_mask / key_padding_mask; the attention runs with need_weights = false (the fused kernel). The dropouts draw
// from generators seeded from `gen`.
class TransformerEncoderLayer : public Cloneable<TransformerEncoderLayer> {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerEncoderLayerOptions options = {},
                          Generator& gen = default_generator());
  Tensor forward(const Tensor& src, const Tensor& src_mask = {}, const Tensor& src_key_padding_mask = {},
                 bool is_causal = false);
  std::string name() const override { return "TransformerEncoderLayer"; }

  TransformerEncoderLayerOptions options;
  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<Dropout> dropout, dropout1, dropout2;
  std::shared_ptr<LayerNorm> norm1, norm2;
};

}  // namespace oxmera::nn
