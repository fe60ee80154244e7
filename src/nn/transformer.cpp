// The transformer stacks: torch's child layout (so state dicts load by name) and torch 1.13's forward math.
#include "oxmera/nn/transformer.hpp"

#include <limits>
#include <string>
#include <utility>

#include "nn/linear_gelu.hpp"
#include "oxmera/error.hpp"
#include "oxmera/nn/functional.hpp"
#include "oxmera/nn/init.hpp"

namespace oxmera::nn {
namespace F = functional;
namespace {

// Inputs of a layer: both 3-d (or both 2-d, unbatched), feature size d_model, one batch size.
void check_pair(const char* op, const char* a_name, const Tensor& a, const char* b_name, const Tensor& b,
                int64_t d_model, bool batch_first) {
  OXM_CHECK(a.defined() && b.defined(), InvalidArgument, op, ": ", a_name, " and ", b_name, " must be defined");
  OXM_CHECK((a.dim() == 2 || a.dim() == 3) && b.dim() == a.dim(), ShapeMismatch, op, ": ", a_name, " and ", b_name,
            " must both be 3-d (", (batch_first ? "[N, T, E] with batch_first" : "[T, N, E]"),
            ") or both 2-d (unbatched [T, E]); got ", a_name, " ", a.shape(), ", ", b_name, " ", b.shape());
  OXM_CHECK(a.shape().back() == d_model && b.shape().back() == d_model, ShapeMismatch, op, ": the feature size of ",
            a_name, " and ", b_name, " must be d_model ", d_model, "; got ", a_name, " ", a.shape(), ", ", b_name, " ",
            b.shape());
  if (a.dim() == 3) {
    const int bd = batch_first ? 0 : 1;
    OXM_CHECK(a.shape()[bd] == b.shape()[bd], ShapeMismatch, op, ": ", a_name, " and ", b_name,
              " must have one batch size (dim ", bd, (batch_first ? ", batch_first" : ""), "); got ", a_name, " ",
              a.shape(), ", ", b_name, " ", b.shape());
  }
}

void check_one(const char* op, const char* name, const Tensor& x, int64_t d_model, bool batch_first) {
  OXM_CHECK(x.defined(), InvalidArgument, op, ": ", name, " must be defined");
  OXM_CHECK((x.dim() == 2 || x.dim() == 3) && x.shape().back() == d_model, ShapeMismatch, op, ": ", name, " must be ",
            (batch_first ? "[N, S, E]" : "[S, N, E]"), " (or unbatched [S, E]) with E = d_model ", d_model, "; got ",
            x.shape());
}

// Runs one attention block, prefixing its errors with the layer and block ("TransformerDecoderLayer:
// multihead_attn (memory_mask / memory_key_padding_mask): ..."): the MultiheadAttention message alone would not
// say which of the layer's masks was wrong.
template <class Fn>
Tensor in_block(const char* op, const char* block, Fn&& fn) {
  try {
    return fn();
  } catch (const Error& e) {
    throw Error(e.kind(), std::string(op) + ": " + block + ": " + e.message());
  }
}

// num_layers deep copies of `layer` in a ModuleList, each copy's Dropouts reseeded from gen.
std::shared_ptr<ModuleList> clones(const char* op, const Module& layer, int64_t num_layers, Generator& gen) {
  OXM_CHECK(num_layers >= 1, InvalidArgument, op, ": num_layers must be >= 1, got ", num_layers);
  auto list = std::make_shared<ModuleList>();
  for (int64_t i = 0; i < num_layers; ++i) {
    ModulePtr copy = layer.clone();
    for (Module* m : copy->modules())
      if (auto* d = dynamic_cast<Dropout*>(m)) d->generator = Generator(gen.next_u64());
    if (auto enc = std::dynamic_pointer_cast<TransformerEncoderLayer>(copy))
      list->push_back(enc);
    else
      list->push_back(std::static_pointer_cast<TransformerDecoderLayer>(copy));
  }
  return list;
}

template <class L>
L& layer_at(const char* op, const ModuleList& list, int64_t i) {
  OXM_CHECK(i >= 0 && i < static_cast<int64_t>(list.size()), IndexOutOfBounds, op, ": layer ", i, " out of range [0, ",
            list.size(), ")");
  return list[i].template get<L>();
}

}  // namespace

// ------------------------------------------------------------------------------- TransformerDecoderLayer

TransformerDecoderLayer::TransformerDecoderLayer(int64_t d, int64_t h, TransformerDecoderLayerOptions opt,
                                                 Generator& gen)
    : d_model(d), options(std::move(opt)) {
  constexpr const char* op = "TransformerDecoderLayer";
  OXM_CHECK(options.activation == "relu" || options.activation == "gelu", InvalidArgument, op,
            ": activation must be \"relu\" or \"gelu\", got \"", options.activation, "\"");
  OXM_CHECK(options.dim_feedforward > 0, InvalidArgument, op, ": dim_feedforward must be positive, got ",
            options.dim_feedforward);
  const MultiheadAttentionOptions mha{.dropout = options.dropout, .batch_first = options.batch_first};
  // Registration order is torch's (state_dict keys in its order).
  register_module("self_attn", &TransformerDecoderLayer::self_attn,
                  std::make_shared<MultiheadAttention>(d, h, mha, gen));
  register_module("multihead_attn", &TransformerDecoderLayer::multihead_attn,
                  std::make_shared<MultiheadAttention>(d, h, mha, gen));
  register_module("linear1", &TransformerDecoderLayer::linear1,
                  std::make_shared<Linear>(d, options.dim_feedforward, true, gen));
  register_module("dropout", &TransformerDecoderLayer::dropout,
                  std::make_shared<Dropout>(options.dropout, gen.next_u64()));
  register_module("linear2", &TransformerDecoderLayer::linear2,
                  std::make_shared<Linear>(options.dim_feedforward, d, true, gen));
  register_module("norm1", &TransformerDecoderLayer::norm1,
                  std::make_shared<LayerNorm>(Shape{d}, options.layer_norm_eps));
  register_module("norm2", &TransformerDecoderLayer::norm2,
                  std::make_shared<LayerNorm>(Shape{d}, options.layer_norm_eps));
  register_module("norm3", &TransformerDecoderLayer::norm3,
                  std::make_shared<LayerNorm>(Shape{d}, options.layer_norm_eps));
  register_module("dropout1", &TransformerDecoderLayer::dropout1,
                  std::make_shared<Dropout>(options.dropout, gen.next_u64()));
  register_module("dropout2", &TransformerDecoderLayer::dropout2,
                  std::make_shared<Dropout>(options.dropout, gen.next_u64()));
  register_module("dropout3", &TransformerDecoderLayer::dropout3,
                  std::make_shared<Dropout>(options.dropout, gen.next_u64()));
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                        const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                        const Tensor& memory_key_padding_mask, bool tgt_is_causal,
                                        bool memory_is_causal) {
  constexpr const char* op = "TransformerDecoderLayer";
  check_pair(op, "tgt", tgt, "memory", memory, d_model, options.batch_first);
  auto sa = [&](const Tensor& x) {
    return dropout1->forward(in_block(op, "self_attn (tgt_mask, tgt_key_padding_mask)", [&] {
      return std::get<0>(self_attn->forward(x, x, x, tgt_key_padding_mask, false, tgt_mask, true, tgt_is_causal));
    }));
  };
  auto mha = [&](const Tensor& x) {
    return dropout2->forward(in_block(op, "multihead_attn (memory_mask, memory_key_padding_mask)", [&] {
      return std::get<0>(multihead_attn->forward(x, memory, memory, memory_key_padding_mask, false, memory_mask, true,
                                                 memory_is_causal));
    }));
  };
  auto ff = [&](const Tensor& x) {
    return dropout3->forward(linear2->forward(dropout->forward(F::feed_forward_in(linear1, options.activation, x))));
  };
  Tensor x = tgt;
  if (options.norm_first) {
    x = x + sa(norm1->forward(x));
    x = x + mha(norm2->forward(x));
    x = x + ff(norm3->forward(x));
  } else {
    x = norm1->forward(x + sa(x));
    x = norm2->forward(x + mha(x));
    x = norm3->forward(x + ff(x));
  }
  return x;
}

// ------------------------------------------------------------------------------------ TransformerEncoder

TransformerEncoder::TransformerEncoder(const TransformerEncoderLayer& encoder_layer, int64_t n,
                                       std::shared_ptr<LayerNorm> final_norm, Generator& gen)
    : num_layers(n) {
  register_module("layers", &TransformerEncoder::layers, clones("TransformerEncoder", encoder_layer, n, gen));
  norm = std::move(final_norm);
  if (norm) register_module("norm", &TransformerEncoder::norm);
}

TransformerEncoderLayer& TransformerEncoder::layer(int64_t i) const {
  return layer_at<TransformerEncoderLayer>("TransformerEncoder", *layers, i);
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask,
                                   bool is_causal) {
  const TransformerEncoderLayer& first = layer(0);
  check_one("TransformerEncoder", "src", src, first.self_attn->embed_dim, first.options.batch_first);
  Tensor x = src;
  for (int64_t i = 0; i < num_layers; ++i) x = layer(i).forward(x, mask, src_key_padding_mask, is_causal);
  return norm ? norm->forward(x) : x;
}

// ------------------------------------------------------------------------------------ TransformerDecoder

TransformerDecoder::TransformerDecoder(const TransformerDecoderLayer& decoder_layer, int64_t n,
                                       std::shared_ptr<LayerNorm> final_norm, Generator& gen)
    : num_layers(n) {
  register_module("layers", &TransformerDecoder::layers, clones("TransformerDecoder", decoder_layer, n, gen));
  norm = std::move(final_norm);
  if (norm) register_module("norm", &TransformerDecoder::norm);
}

TransformerDecoderLayer& TransformerDecoder::layer(int64_t i) const {
  return layer_at<TransformerDecoderLayer>("TransformerDecoder", *layers, i);
}

Tensor TransformerDecoder::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                   const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                   const Tensor& memory_key_padding_mask, bool tgt_is_causal, bool memory_is_causal) {
  Tensor x = tgt;
  for (int64_t i = 0; i < num_layers; ++i)
    x = layer(i).forward(x, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask, tgt_is_causal,
                         memory_is_causal);
  return norm ? norm->forward(x) : x;
}

// ------------------------------------------------------------------------------------------- Transformer

Transformer::Transformer(int64_t d, int64_t h, TransformerOptions opt, Generator& gen)
    : d_model(d), nhead(h), options(std::move(opt)) {
  const TransformerEncoderLayerOptions layer_opt{.dim_feedforward = options.dim_feedforward,
                                                 .dropout = options.dropout,
                                                 .activation = options.activation,
                                                 .layer_norm_eps = options.layer_norm_eps,
                                                 .batch_first = options.batch_first,
                                                 .norm_first = options.norm_first};
  register_module(
      "encoder", &Transformer::encoder,
      std::make_shared<TransformerEncoder>(TransformerEncoderLayer(d, h, layer_opt, gen), options.num_encoder_layers,
                                           std::make_shared<LayerNorm>(Shape{d}, options.layer_norm_eps), gen));
  register_module(
      "decoder", &Transformer::decoder,
      std::make_shared<TransformerDecoder>(TransformerDecoderLayer(d, h, layer_opt, gen), options.num_decoder_layers,
                                           std::make_shared<LayerNorm>(Shape{d}, options.layer_norm_eps), gen));
  // torch's _reset_parameters: the copies would otherwise all start with the same weights.
  for (Tensor& p : parameters())
    if (p.dim() > 1) init::xavier_uniform_(p, gen);
}

Tensor Transformer::forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask, const Tensor& tgt_mask,
                            const Tensor& memory_mask, const Tensor& src_key_padding_mask,
                            const Tensor& tgt_key_padding_mask, const Tensor& memory_key_padding_mask,
                            bool src_is_causal, bool tgt_is_causal, bool memory_is_causal) {
  check_pair("Transformer", "src", src, "tgt", tgt, d_model, options.batch_first);
  const Tensor memory = encoder->forward(src, src_mask, src_key_padding_mask, src_is_causal);
  return decoder->forward(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
                          tgt_is_causal, memory_is_causal);
}

Tensor Transformer::generate_square_subsequent_mask(int64_t n, DType dtype) {
  OXM_CHECK(n >= 0, InvalidArgument, "Transformer::generate_square_subsequent_mask: n must be >= 0, got ", n);
  OXM_CHECK(is_floating(dtype), InvalidArgument,
            "Transformer::generate_square_subsequent_mask: dtype must be floating (f32 or f64), got ", dtype);
  return where(ones({n, n}, dtype).triu(1) > 0.5, -std::numeric_limits<double>::infinity(), zeros({}, dtype));
}

}  // namespace oxmera::nn
