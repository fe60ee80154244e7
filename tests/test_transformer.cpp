// nn::TransformerDecoderLayer, TransformerEncoder, TransformerDecoder, Transformer: torch's names, the deep copies
// of the stacks, clone, the square subsequent mask, typed errors, and a state dict written by torch 1.13 loading by
// name (tests/data/transformer, made by tests/transformer_torch/make_fixture.py). Values and gradients against
// torch: tests/transformer_torch.
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "oxmera/checkpoint.hpp"
#include "oxmera/io.hpp"
#include "oxmera/nn.hpp"
#include "test_util.hpp"

using namespace oxt;
namespace nn = oxmera::nn;

namespace {

const nn::TransformerEncoderLayerOptions kSmall{.dim_feedforward = 16, .dropout = 0.0};

std::vector<std::string> prefixed(const std::string& p, const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const auto& n : names) out.push_back(p + n);
  return out;
}

// torch 1.13: [n for n in torch.nn.TransformerDecoderLayer(8, 2, 16).state_dict()]
const std::vector<std::string> kDecoderLayerKeys{"self_attn.in_proj_weight",
                                                 "self_attn.in_proj_bias",
                                                 "self_attn.out_proj.weight",
                                                 "self_attn.out_proj.bias",
                                                 "multihead_attn.in_proj_weight",
                                                 "multihead_attn.in_proj_bias",
                                                 "multihead_attn.out_proj.weight",
                                                 "multihead_attn.out_proj.bias",
                                                 "linear1.weight",
                                                 "linear1.bias",
                                                 "linear2.weight",
                                                 "linear2.bias",
                                                 "norm1.weight",
                                                 "norm1.bias",
                                                 "norm2.weight",
                                                 "norm2.bias",
                                                 "norm3.weight",
                                                 "norm3.bias"};
const std::vector<std::string> kEncoderLayerKeys{"self_attn.in_proj_weight",
                                                 "self_attn.in_proj_bias",
                                                 "self_attn.out_proj.weight",
                                                 "self_attn.out_proj.bias",
                                                 "linear1.weight",
                                                 "linear1.bias",
                                                 "linear2.weight",
                                                 "linear2.bias",
                                                 "norm1.weight",
                                                 "norm1.bias",
                                                 "norm2.weight",
                                                 "norm2.bias"};

TEST(TransformerDecoderLayer, TorchNamesAndChildren) {
  Generator g(1);
  nn::TransformerDecoderLayer m(8, 2, kSmall, g);
  EXPECT_EQ(m.state_dict().keys(), kDecoderLayerKeys);
  std::vector<std::string> children;
  for (const auto& [name, c] : m.children()) children.push_back(name);
  EXPECT_EQ(children, (std::vector<std::string>{"self_attn", "multihead_attn", "linear1", "dropout", "linear2", "norm1",
                                                "norm2", "norm3", "dropout1", "dropout2", "dropout3"}));
  EXPECT_NE(m.self_attn.get(), m.multihead_attn.get());
  // Through AnyModule (one forward) with the masks by position.
  nn::AnyModule any(std::make_shared<nn::TransformerDecoderLayer>(m));
  const Tensor tgt = randn({4, 3, 8}, 2), mem = randn({6, 3, 8}, 3);
  const Tensor mask = nn::Transformer::generate_square_subsequent_mask(4);
  expect_close(values(any.forward(tgt, mem, mask, Tensor(), Tensor(), Tensor(), false, false)),
               values(m.forward(tgt, mem, mask)), 0, 0, "AnyModule");
}

// tgt_is_causal without a mask is the square subsequent mask; with a mask it is a hint (the mask is used).
TEST(TransformerDecoderLayer, CausalFlagMatchesTheMask) {
  Generator g(2);
  nn::TransformerDecoderLayer m(8, 2, kSmall, g);
  const Tensor tgt = randn({5, 2, 8}, 4), mem = randn({6, 2, 8}, 5);
  const auto masked = values(m.forward(tgt, mem, nn::Transformer::generate_square_subsequent_mask(5)));
  expect_close(values(m.forward(tgt, mem, {}, {}, {}, {}, true)), masked, 1e-6, 1e-6, "tgt_is_causal");
  const auto plain = values(m.forward(tgt, mem));
  bool differs = false;
  for (size_t i = 0; i < plain.size(); ++i) differs = differs || std::abs(plain[i] - masked[i]) > 1e-4;
  EXPECT_TRUE(differs) << "the causal mask changed nothing";
  const Tensor none = zeros({5, 5});  // a float mask of zeros: is_causal is only a hint next to it
  expect_close(values(m.forward(tgt, mem, none, {}, {}, {}, true)), plain, 1e-6, 1e-6, "hint");
}

TEST(TransformerDecoderLayer, TypedErrorsNameTheLayerAndShapes) {
  Generator g(3);
  nn::TransformerDecoderLayer m(8, 2, kSmall, g);
  const Tensor tgt = randn({4, 3, 8}, 1), mem = randn({6, 3, 8}, 2);
  EXPECT_OXM_ERROR(m.forward(tgt, randn({6, 8}, 1)), ShapeMismatch, "TransformerDecoderLayer: tgt and memory");
  EXPECT_OXM_ERROR(m.forward(tgt, randn({6, 8}, 1)), ShapeMismatch, "[6, 8]");
  EXPECT_OXM_ERROR(m.forward(tgt, randn({6, 3, 6}, 1)), ShapeMismatch, "d_model 8");
  EXPECT_OXM_ERROR(m.forward(tgt, randn({6, 2, 8}, 1)), ShapeMismatch, "one batch size");
  EXPECT_OXM_ERROR(m.forward(tgt, mem, zeros({4, 6})), ShapeMismatch,
                   "TransformerDecoderLayer: self_attn (tgt_mask, tgt_key_padding_mask)");
  EXPECT_OXM_ERROR(m.forward(tgt, mem, {}, zeros({4, 5})), ShapeMismatch,
                   "multihead_attn (memory_mask, memory_key_padding_mask): MultiheadAttention: attn_mask");
  EXPECT_OXM_ERROR(m.forward(tgt, mem, {}, {}, {}, ones({3, 4}).to(DType::U8)), ShapeMismatch,
                   "key_padding_mask must be [N, S] = [3, 6]");
  EXPECT_OXM_ERROR(m.forward(tgt.to(DType::F64), mem.to(DType::F64)), DTypeMismatch, "self_attn");
  EXPECT_OXM_ERROR(nn::TransformerDecoderLayer(8, 2, {.activation = "tanh"}), InvalidArgument, "activation");
  EXPECT_OXM_ERROR(nn::TransformerDecoderLayer(8, 3), InvalidArgument, "divisible");
}

TEST(TransformerEncoder, DeepCopiesOfTheLayer) {
  Generator g(4);
  nn::TransformerEncoderLayer proto(8, 2, {.dim_feedforward = 16, .dropout = 0.5}, g);
  nn::TransformerEncoder enc(proto, 3, std::make_shared<nn::LayerNorm>(Shape{8}), g);
  std::vector<std::string> want;
  for (int i = 0; i < 3; ++i) {
    const auto keys = prefixed("layers." + std::to_string(i) + ".", kEncoderLayerKeys);
    want.insert(want.end(), keys.begin(), keys.end());
  }
  want.push_back("norm.weight");
  want.push_back("norm.bias");
  EXPECT_EQ(enc.state_dict().keys(), want);
  // Copies (as torch's deepcopy): the prototype's values, their own storage, reseeded Dropouts.
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE(enc.layer(i).self_attn.get(), proto.self_attn.get());
    EXPECT_NE(enc.layer(i).linear1->weight.impl(), proto.linear1->weight.impl());
    expect_close(values(enc.layer(i).linear1->weight), values(proto.linear1->weight), 0, 0, "copied weights");
  }
  EXPECT_NE(enc.layer(0).dropout->generator.state().s[0], enc.layer(1).dropout->generator.state().s[0]);
  EXPECT_EQ(enc.num_parameters(), 3 * proto.num_parameters() + 16);
  // Writing one layer leaves the others and the prototype alone.
  {
    NoGradGuard ng;
    enc.layer(1).linear1->weight.fill_(0.25);
  }
  EXPECT_NE(values(enc.layer(0).linear1->weight)[0], 0.25);
  EXPECT_NE(values(proto.linear1->weight)[0], 0.25);
  EXPECT_OXM_ERROR(enc.layer(3), IndexOutOfBounds, "TransformerEncoder: layer 3");
  EXPECT_OXM_ERROR(nn::TransformerEncoder(proto, 0), InvalidArgument, "num_layers");

  // No final norm: absent from the state dict, as torch's None.
  nn::TransformerEncoder bare(proto, 2);
  EXPECT_EQ(bare.state_dict().keys().size(), 2 * kEncoderLayerKeys.size());
  EXPECT_EQ(bare.norm, nullptr);

  // The stack is the layers in turn, then the norm; clone copies the whole tree.
  enc.eval();
  const Tensor src = randn({5, 2, 8}, 6);
  Tensor x = src;
  for (int i = 0; i < 3; ++i) x = enc.layer(i).forward(x);
  const auto y = values(enc.forward(src));
  expect_close(y, values(enc.norm->forward(x)), 0, 0, "stack");
  auto copy = nn::clone(std::make_shared<nn::TransformerEncoder>(enc));
  expect_close(values(copy->forward(src)), y, 0, 0, "clone");
  EXPECT_NE(copy->layer(0).linear1->weight.impl(), enc.layer(0).linear1->weight.impl());
  EXPECT_NE(copy->norm.get(), enc.norm.get());
  EXPECT_OXM_ERROR(enc.forward(randn({5, 2, 6}, 1)), ShapeMismatch, "TransformerEncoder: src");
  EXPECT_OXM_ERROR(enc.forward(randn({5, 2, 6}, 1)), ShapeMismatch, "[5, 2, 6]");
}

TEST(TransformerDecoder, StackNamesAndErrors) {
  Generator g(5);
  nn::TransformerDecoder dec(nn::TransformerDecoderLayer(8, 2, kSmall, g), 2, std::make_shared<nn::LayerNorm>(Shape{8}),
                             g);
  auto want = prefixed("layers.0.", kDecoderLayerKeys);
  const auto l1 = prefixed("layers.1.", kDecoderLayerKeys);
  want.insert(want.end(), l1.begin(), l1.end());
  want.push_back("norm.weight");
  want.push_back("norm.bias");
  EXPECT_EQ(dec.state_dict().keys(), want);
  const Tensor tgt = randn({4, 3, 8}, 1), mem = randn({6, 3, 8}, 2);
  const Tensor mask = nn::Transformer::generate_square_subsequent_mask(4);
  Tensor x = tgt;
  for (int i = 0; i < 2; ++i) x = dec.layer(i).forward(x, mem, mask);
  expect_close(values(dec.forward(tgt, mem, mask)), values(dec.norm->forward(x)), 0, 0, "stack");
  EXPECT_OXM_ERROR(dec.forward(tgt, randn({6, 2, 8}, 1)), ShapeMismatch, "TransformerDecoderLayer");
  EXPECT_OXM_ERROR(dec.layer(-1), IndexOutOfBounds, "TransformerDecoder: layer -1");
}

TEST(Transformer, TorchNamesInitAndMask) {
  Generator g(6);
  nn::Transformer t(8, 2, {.num_encoder_layers = 2, .num_decoder_layers = 1, .dim_feedforward = 16}, g);
  std::vector<std::string> want;
  for (int i = 0; i < 2; ++i) {
    const auto keys = prefixed("encoder.layers." + std::to_string(i) + ".", kEncoderLayerKeys);
    want.insert(want.end(), keys.begin(), keys.end());
  }
  want.push_back("encoder.norm.weight");
  want.push_back("encoder.norm.bias");
  const auto dk = prefixed("decoder.layers.0.", kDecoderLayerKeys);
  want.insert(want.end(), dk.begin(), dk.end());
  want.push_back("decoder.norm.weight");
  want.push_back("decoder.norm.bias");
  EXPECT_EQ(t.state_dict().keys(), want);
  // _reset_parameters: xavier_uniform_ per matrix, so the copied layers no longer share values.
  const auto w0 = values(t.encoder->layer(0).linear1->weight), w1 = values(t.encoder->layer(1).linear1->weight);
  EXPECT_NE(w0, w1);
  const double bound = std::sqrt(6.0 / (8 + 16));
  for (double w : w0) EXPECT_LE(std::abs(w), bound);

  const Tensor m = nn::Transformer::generate_square_subsequent_mask(3);
  EXPECT_EQ(m.dtype(), DType::F32);
  EXPECT_EQ(m.shape(), (Shape{3, 3}));
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(values(m), (std::vector<double>{0, -inf, -inf, 0, 0, -inf, 0, 0, 0}));
  EXPECT_EQ(nn::Transformer::generate_square_subsequent_mask(2, DType::F64).dtype(), DType::F64);
  EXPECT_EQ(nn::Transformer::generate_square_subsequent_mask(0).numel(), 0);
  EXPECT_OXM_ERROR(nn::Transformer::generate_square_subsequent_mask(-1), InvalidArgument, "n must be >= 0");
  EXPECT_OXM_ERROR(nn::Transformer::generate_square_subsequent_mask(2, DType::I64), InvalidArgument, "floating");

  const Tensor src = randn({5, 3, 8}, 1), tgt = randn({4, 3, 8}, 2);
  EXPECT_EQ(t.forward(src, tgt).shape(), (Shape{4, 3, 8}));
  EXPECT_OXM_ERROR(t.forward(src, randn({4, 2, 8}, 2)), ShapeMismatch, "Transformer: src and tgt must have one batch");
  EXPECT_OXM_ERROR(t.forward(src, randn({4, 3, 6}, 2)), ShapeMismatch, "d_model 8");
  EXPECT_OXM_ERROR(t.forward(src, tgt, zeros({5, 4})), ShapeMismatch, "attn_mask must be [L, S] = [5, 5]");
}

// nn::save then nn::load into a differently initialised model gives the same outputs (names round-trip).
TEST(Transformer, SaveLoadRoundTrip) {
  Generator g1(7), g2(8);
  const nn::TransformerOptions o{.num_encoder_layers = 1,
                                 .num_decoder_layers = 2,
                                 .dim_feedforward = 16,
                                 .dropout = 0.0,
                                 .batch_first = true,
                                 .norm_first = true};
  nn::Transformer a(8, 2, o, g1), b(8, 2, o, g2);
  const Tensor src = randn({2, 5, 8}, 1), tgt = randn({2, 4, 8}, 2);
  const auto want = values(a.forward(src, tgt));
  const std::string path = ::testing::TempDir() + "oxm_transformer_roundtrip.safetensors";
  nn::save(a, path);
  nn::load(b, path);
  expect_close(values(b.forward(src, tgt)), want, 0, 0, "loaded");
  std::remove(path.c_str());
}

#ifdef OXMERA_TRANSFORMER_DATA_DIR
// torch 1.13's nn.Transformer state_dict, saved as is, loads by name (strict) and gives torch's output.
TEST(Transformer, LoadsTorchStateDictByName) {
  const std::string dir = OXMERA_TRANSFORMER_DATA_DIR;
  nn::Transformer t(
      8, 2,
      {.num_encoder_layers = 2, .num_decoder_layers = 1, .dim_feedforward = 16, .dropout = 0.0, .batch_first = true});
  nn::load(t, dir + "/torch_transformer.safetensors");  // strict: every name must match both ways
  const auto io = load_safetensors(dir + "/torch_transformer_io.safetensors");
  const Tensor out = t.forward(io.at("src"), io.at("tgt"), {}, nn::Transformer::generate_square_subsequent_mask(4), {},
                               io.at("src_key_padding_mask"));
  expect_close(values(out), values(io.at("out")), 1e-5, 1e-5, "torch output");
  // The same file into a model with another layout is refused by name.
  nn::Transformer other(8, 2, {.num_encoder_layers = 1, .num_decoder_layers = 1, .dim_feedforward = 16});
  EXPECT_OXM_ERROR(nn::load(other, dir + "/torch_transformer.safetensors"), Io, "encoder.layers.1");
}
#endif

}  // namespace
