#pragma once
// The transformer stacks of torch.nn: TransformerDecoderLayer, TransformerEncoder, TransformerDecoder and
// Transformer, with torch's child and parameter names (a torch state_dict loads by name) and torch 1.13's
// forward math. The is_causal flags are torch 2.x's: without the matching mask they apply the causal mask
// (key j <= query i); with a mask they are a hint only and the mask is used as given.
#include <cstdint>
#include <memory>
#include <string>

#include "oxmera/nn/attention.hpp"
#include "oxmera/nn/layers.hpp"
#include "oxmera/nn/module.hpp"
#include "oxmera/random.hpp"
#include "oxmera/tensor.hpp"

namespace oxmera::nn {

// The decoder layer takes the encoder layer's options (dim_feedforward, dropout, activation, layer_norm_eps,
// batch_first, norm_first), as torch's constructors take the same arguments.
using TransformerDecoderLayerOptions = TransformerEncoderLayerOptions;

// torch.nn.TransformerDecoderLayer: children self_attn, multihead_attn, linear1, dropout, linear2, norm1, norm2,
// norm3, dropout1, dropout2, dropout3 (torch's order). Post-norm:
//   x = norm1(x + sa(x)), x = norm2(x + mha(x, memory)), x = norm3(x + ff(x));
// norm_first: x = x + sa(norm1(x)), x = x + mha(norm2(x), memory), x = x + ff(norm3(x)).
// tgt [T, N, E] and memory [S, N, E] ([N, T, E] / [N, S, E] with batch_first; unbatched [T, E] / [S, E]).
// tgt_mask / tgt_key_padding_mask go to self_attn, memory_mask / memory_key_padding_mask to multihead_attn, as
// MultiheadAttention's attn_mask / key_padding_mask (U8 true = not allowed, or float added). Errors name the
// layer, the attention block and the shapes.
class TransformerDecoderLayer : public Cloneable<TransformerDecoderLayer> {
 public:
  TransformerDecoderLayer(int64_t d_model, int64_t nhead, TransformerDecoderLayerOptions options = {},
                          Generator& gen = default_generator());
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {}, const Tensor& memory_mask = {},
                 const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {},
                 bool tgt_is_causal = false, bool memory_is_causal = false);
  std::string name() const override { return "TransformerDecoderLayer"; }

  int64_t d_model;
  TransformerDecoderLayerOptions options;
  std::shared_ptr<MultiheadAttention> self_attn, multihead_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<Dropout> dropout, dropout1, dropout2, dropout3;
  std::shared_ptr<LayerNorm> norm1, norm2, norm3;
};

// torch.nn.TransformerEncoder: children layers (a ModuleList "layers.0" ... "layers.N-1" of deep copies of
// encoder_layer, as torch's copy.deepcopy: every layer starts with encoder_layer's weights) and, when given, the
// final LayerNorm "norm" (held, not copied). Each copy's Dropouts are reseeded from `gen`, so the layers draw
// different masks in training mode (torch's all draw from one global stream). forward passes mask,
// src_key_padding_mask and is_causal to every layer, then applies norm. Unlike torch 1.13 in eval mode under
// no_grad, padded positions are not turned into zeros (no nested-tensor fast path): the output is the same
// math as training mode.
class TransformerEncoder : public Cloneable<TransformerEncoder> {
 public:
  TransformerEncoder(const TransformerEncoderLayer& encoder_layer, int64_t num_layers,
                     std::shared_ptr<LayerNorm> norm = nullptr, Generator& gen = default_generator());
  Tensor forward(const Tensor& src, const Tensor& mask = {}, const Tensor& src_key_padding_mask = {},
                 bool is_causal = false);
  std::string name() const override { return "TransformerEncoder"; }
  TransformerEncoderLayer& layer(int64_t i) const;  // IndexOutOfBounds outside [0, num_layers)

  int64_t num_layers;
  std::shared_ptr<ModuleList> layers;
  std::shared_ptr<LayerNorm> norm;  // null: no final norm (absent from the state dict, as torch's None)
};

// torch.nn.TransformerDecoder: layers (deep copies of decoder_layer, Dropouts reseeded as above) and the optional
// final LayerNorm "norm". forward passes the masks and causal flags to every layer, then applies norm.
class TransformerDecoder : public Cloneable<TransformerDecoder> {
 public:
  TransformerDecoder(const TransformerDecoderLayer& decoder_layer, int64_t num_layers,
                     std::shared_ptr<LayerNorm> norm = nullptr, Generator& gen = default_generator());
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {}, const Tensor& memory_mask = {},
                 const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {},
                 bool tgt_is_causal = false, bool memory_is_causal = false);
  std::string name() const override { return "TransformerDecoder"; }
  TransformerDecoderLayer& layer(int64_t i) const;  // IndexOutOfBounds outside [0, num_layers)

  int64_t num_layers;
  std::shared_ptr<ModuleList> layers;
  std::shared_ptr<LayerNorm> norm;
};

struct TransformerOptions {
  int64_t num_encoder_layers = 6, num_decoder_layers = 6;
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  std::string activation = "relu";  // "relu" or "gelu"
  double layer_norm_eps = 1e-5;
  bool batch_first = false;
  bool norm_first = false;
};

// torch.nn.Transformer: children encoder (TransformerEncoder with a final LayerNorm) and decoder
// (TransformerDecoder with a final LayerNorm), as torch builds them; then, as torch's _reset_parameters, every
// parameter with more than one dimension is re-initialised xavier_uniform_ from `gen` (so the layers differ).
// forward(src, tgt, ...) = decoder(tgt, encoder(src, src_mask, src_key_padding_mask, src_is_causal), tgt_mask,
// memory_mask, tgt_key_padding_mask, memory_key_padding_mask, tgt_is_causal, memory_is_causal).
class Transformer : public Cloneable<Transformer> {
 public:
  explicit Transformer(int64_t d_model = 512, int64_t nhead = 8, TransformerOptions options = {},
                       Generator& gen = default_generator());
  Tensor forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask = {}, const Tensor& tgt_mask = {},
                 const Tensor& memory_mask = {}, const Tensor& src_key_padding_mask = {},
                 const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {},
                 bool src_is_causal = false, bool tgt_is_causal = false, bool memory_is_causal = false);
  std::string name() const override { return "Transformer"; }
  // [n, n] float mask: 0 on and below the diagonal, -inf above (torch's generate_square_subsequent_mask), for
  // tgt_mask. InvalidArgument for n < 0 or a non-floating dtype.
  static Tensor generate_square_subsequent_mask(int64_t n, DType dtype = DType::F32);

  int64_t d_model, nhead;
  TransformerOptions options;
  std::shared_ptr<TransformerEncoder> encoder;
  std::shared_ptr<TransformerDecoder> decoder;
};

}  // namespace oxmera::nn
