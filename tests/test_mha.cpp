// nn::MultiheadAttention: torch's parameter names and init, the explicit-weights path against the fused one,
// batch_first and unbatched layouts against the seq-first one, AnyModule, dropout, typed errors. Values against
// torch: tests/mha_torch.
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "nn/linear_gelu.hpp"
#include "oxmera/nn.hpp"
#include "test_util.hpp"

using namespace oxt;
namespace nn = oxmera::nn;

namespace {

TEST(MultiheadAttention, TorchNamesAndInit) {
  Generator g(1);
  nn::MultiheadAttention m(8, 2, {}, g);
  EXPECT_EQ(m.state_dict().keys(),
            (std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}));
  EXPECT_EQ(m.in_proj_weight.shape(), (Shape{24, 8}));
  const double bound = std::sqrt(6.0 / (8 + 24));  // xavier_uniform_ over [3E, E]
  for (double w : values(m.in_proj_weight)) EXPECT_LE(std::abs(w), bound);
  for (double b : values(m.in_proj_bias)) EXPECT_EQ(b, 0.0);
  for (double b : values(m.out_proj->bias)) EXPECT_EQ(b, 0.0);
  nn::MultiheadAttention kv(8, 2, {.bias = false, .kdim = 6, .vdim = 5}, g);
  EXPECT_EQ(kv.state_dict().keys(),
            (std::vector<std::string>{"q_proj_weight", "k_proj_weight", "v_proj_weight", "out_proj.weight"}));
  EXPECT_EQ(kv.k_proj_weight.shape(), (Shape{8, 6}));
  EXPECT_EQ(kv.v_proj_weight.shape(), (Shape{8, 5}));
}

TEST(MultiheadAttention, FusedPathMatchesExplicitWeightsAndLayouts) {
  Generator g(2);
  nn::MultiheadAttention m(8, 2, {}, g);
  for (auto& [name, p] : m.named_parameters()) {
    oxmera::NoGradGuard ng;
    p.copy_(randn(p.shape(), 3) * 0.5);
  }
  const Tensor q = randn({5, 3, 8}, 4), k = randn({6, 3, 8}, 5), v = randn({6, 3, 8}, 6);
  const Tensor kpm = (rand({3, 6}, 7) > 0.7).masked_fill(ones({3, 6}).cumsum(1) < 1.5, 0.0).to(DType::U8);
  const Tensor am = (ones({5, 6}).triu(1) > 0.5).to(DType::U8);
  auto grads = [&](bool nw, bool causal) {
    const Tensor qq = q.detach().requires_grad_();
    auto [out, w] = m.forward(qq, k, v, kpm, nw, causal ? Tensor() : am, true, causal);
    EXPECT_EQ(w.defined(), nw);
    m.zero_grad();
    (out * out).sum().backward();
    return std::vector<std::vector<double>>{values(out), values(qq.grad()), values(m.in_proj_weight.grad())};
  };
  const auto a = grads(true, false), b = grads(false, false), c = grads(false, true);
  for (size_t i = 0; i < a.size(); ++i) {
    expect_close(a[i], b[i], 1e-5, 1e-5, "weights vs fused");
    expect_close(a[i], c[i], 1e-5, 1e-5, "attn_mask vs is_causal");
  }
  // batch_first and unbatched: the same numbers in the other layouts
  nn::MultiheadAttention bf(8, 2, {.batch_first = true}, g);
  bf.load_state_dict(m.state_dict());
  auto [y, w] = m.forward(q, k, v);
  auto [yb, wb] = bf.forward(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1));
  EXPECT_EQ(yb.shape(), (Shape{3, 5, 8}));
  EXPECT_EQ(w.shape(), (Shape{3, 5, 6}));
  expect_close(values(yb.transpose(0, 1).contiguous()), values(y), 1e-6, 1e-6, "batch_first");
  expect_close(values(wb), values(w), 1e-6, 1e-6, "batch_first weights");
  auto [yu, wu] = m.forward(q.select(1, 1), k.select(1, 1), v.select(1, 1), {}, true, {}, false);
  EXPECT_EQ(yu.shape(), (Shape{5, 8}));
  EXPECT_EQ(wu.shape(), (Shape{2, 5, 6}));
  expect_close(values(yu), values(y.select(1, 1).contiguous()), 1e-6, 1e-6, "unbatched");
}

// Self-attention (query, key and value one tensor) projects with the whole in_proj_weight at once, and key = value
// projects k and v together: the same outputs, input gradients and parameter gradients as distinct (equal) tensors,
// which take one projection each (that path is the one tests/mha_torch compares with torch), in every layout.
TEST(MultiheadAttention, PackedProjectionsMatchSeparateOnes) {
  for (int layout = 0; layout < 3; ++layout)  // seq-first, batch_first, unbatched
    for (bool self : {true, false}) {
      Generator g(4);
      nn::MultiheadAttention m(8, 2, {.batch_first = layout == 1}, g);
      for (auto& [name, p] : m.named_parameters()) {
        oxmera::NoGradGuard ng;
        p.copy_(randn(p.shape(), 5) * 0.5);
      }
      const Shape qs = layout == 2 ? Shape{5, 8} : (layout == 1 ? Shape{3, 5, 8} : Shape{5, 3, 8});
      const Shape ms = layout == 2 ? Shape{4, 8} : (layout == 1 ? Shape{3, 4, 8} : Shape{4, 3, 8});
      const Tensor xq = randn(qs, 6), xm = self ? xq : randn(ms, 7), gout = randn(qs, 8);
      const std::string what = "layout " + std::to_string(layout) + (self ? " self" : " key = value");
      // shared: one tensor for key and value (and the query when self); else distinct leaves of the same values, whose
      // gradients are summed. Returns the output, the input gradients and the parameter gradients.
      auto run = [&](bool shared) {
        m.zero_grad();
        std::vector<Tensor> leaves;
        auto leaf = [&](const Tensor& x) { return leaves.emplace_back(x.clone().requires_grad_()); };
        Tensor q = leaf(xq), k, v;
        if (self && shared) {
          k = v = q;
        } else if (shared) {
          k = v = leaf(xm);
        } else {
          k = leaf(xm);
          v = leaf(xm);
        }
        auto [out, w] = m.forward(q, k, v, {}, false, {}, true, self);
        (out * gout).sum().backward();
        std::vector<Tensor> r{out};
        if (self)
          r.push_back(shared ? q.grad() : q.grad() + k.grad() + v.grad());
        else
          r.insert(r.end(), {q.grad(), shared ? k.grad() : k.grad() + v.grad()});
        for (auto& [name, p] : m.named_parameters()) r.push_back(p.grad().clone());
        return r;
      };
      // f32 sums of products taken in other groupings (the packed projections): entries up to ~20 differ by an ulp
      // or two of that scale (~2e-6) also where the entry itself is small, hence an absolute 1e-5.
      const std::vector<Tensor> packed = run(true), separate = run(false);
      ASSERT_EQ(packed.size(), separate.size());
      for (size_t i = 0; i < packed.size(); ++i)
        expect_close(values(packed[i]), values(separate[i]), 1e-5, 1e-5, what + ": result " + std::to_string(i));
    }
}

// Self-attention's fused path takes the projection as one input of the attention node (its backward writes the q, k
// and v gradients into one gradient of the projection); with create_graph that gradient is recorded ops, so second
// derivatives through the module are right (f64, both layouts, causal and with a key padding mask).
TEST(MultiheadAttention, PackedSelfAttentionGradgradcheck) {
  for (bool batch_first : {false, true})
    for (bool causal : {false, true}) {
      Generator g(9);
      auto m =
          std::make_shared<nn::MultiheadAttention>(4, 2, nn::MultiheadAttentionOptions{.batch_first = batch_first}, g);
      m->to(DType::F64);
      const Shape xs = batch_first ? Shape{2, 3, 4} : Shape{3, 2, 4};
      const Tensor x = randn(xs, 10, DType::F64).requires_grad_();
      const Tensor kpm = from_vector<uint8_t>({0, 0, 1, 0, 0, 0}, Shape{2, 3});
      auto f = [&](const std::vector<Tensor>& v) {
        return std::get<0>(m->forward(v[0], v[0], v[0], causal ? Tensor() : kpm, false, {}, true, causal)).tanh();
      };
      const std::string what = std::string(batch_first ? "batch_first" : "seq-first") + (causal ? " causal" : " kpm");
      // the recorded (create_graph) gradient equals the fused kernel's (gradgradcheck alone would not see a wrong
      // recorded one: it differentiates that same gradient numerically)
      const Tensor y = f({x});
      const Tensor g_fused = oxmera::autograd::grad({y.sum()}, {x})[0];
      const Tensor g_recorded = oxmera::autograd::grad({f({x}).sum()}, {x}, {}, false, true)[0];
      expect_close(values(g_recorded), values(g_fused), 1e-12, 1e-12, what + ": recorded vs fused gradient");
      GradcheckResult r1 = gradcheck(f, {x});
      EXPECT_TRUE(r1.ok) << what << ": " << r1.message;
      GradcheckResult r2 = gradgradcheck(f, {x});
      EXPECT_TRUE(r2.ok) << what << ": " << r2.message;
    }
}

TEST(MultiheadAttention, AnyModuleAndDropout) {
  Generator g(3);
  auto m = std::make_shared<nn::MultiheadAttention>(4, 2, nn::MultiheadAttentionOptions{.dropout = 0.5}, g);
  nn::AnyModule any(m);
  const Tensor x = randn({3, 2, 4}, 8);
  auto [y, w] = any.forward<std::tuple<Tensor, Tensor>>(x, x, x, Tensor(), true, Tensor(), true, false);
  EXPECT_EQ(y.shape(), (Shape{3, 2, 4}));
  m->eval();
  auto [e1, ew] = m->forward(x, x, x);
  expect_close(values(e1), values(std::get<0>(m->forward(x, x, x, {}, false))), 1e-6, 1e-6, "eval: no dropout");
  m->train();
  const auto d = values(std::get<0>(m->forward(x, x, x, {}, false)));
  const auto e = values(e1);
  bool differs = false;
  for (size_t i = 0; i < d.size(); ++i) differs = differs || std::abs(d[i] - e[i]) > 1e-6;
  EXPECT_TRUE(differs);
}

// Batch of one and unbatched with a key padding mask: the fused path (need_weights = false) as the explicit one.
TEST(MultiheadAttention, KeyPaddingMaskBatchOfOne) {
  Generator g(3);
  nn::MultiheadAttention m(8, 2, {}, g);
  for (const Shape& s : {Shape{5, 1, 8}, Shape{5, 8}}) {
    const Tensor x = randn(s, 4), kpm = s.size() == 3 ? zeros({1, 5}) : zeros({5});
    Tensor pad = kpm.clone();
    {
      NoGradGuard ng;
      pad.narrow(-1, 3, 2).fill_(1.0);
    }
    const Tensor u8 = pad.to(DType::U8);
    expect_close(values(std::get<0>(m.forward(x, x, x, u8, false))), values(std::get<0>(m.forward(x, x, x, u8, true))),
                 1e-6, 1e-6, "fused vs explicit");
  }
}

TEST(MultiheadAttention, TypedErrors) {
  EXPECT_OXM_ERROR(nn::MultiheadAttention(6, 4), InvalidArgument, "divisible");
  nn::MultiheadAttention m(8, 2);
  const Tensor x = randn({5, 3, 8}, 1);
  EXPECT_OXM_ERROR(m.forward(randn({5, 3, 6}, 1), x, x), ShapeMismatch, "embed_dim 8");
  EXPECT_OXM_ERROR(m.forward(x, randn({4, 2, 8}, 1), randn({4, 2, 8}, 1)), ShapeMismatch, "batch size");
  EXPECT_OXM_ERROR(m.forward(x, x, x, ones({3, 4}).to(DType::U8)), ShapeMismatch, "key_padding_mask");
  EXPECT_OXM_ERROR(m.forward(x, x, x, {}, true, ones({5, 4}).to(DType::U8)), ShapeMismatch, "attn_mask");
  EXPECT_OXM_ERROR(m.forward(x, x, x, ones({3, 5}, DType::F64)), DTypeMismatch, "key_padding_mask");
  EXPECT_OXM_ERROR(m.forward(x.to(DType::F64), x, x), DTypeMismatch, "f32");
  EXPECT_OXM_ERROR(m.forward(randn({3, 8}, 1), x, x), ShapeMismatch, "2-d");
}

}  // namespace

namespace {

TEST(TransformerEncoderLayer, TorchNamesCloneAndErrors) {
  Generator g(4);
  nn::TransformerEncoderLayer m(8, 2, {.dim_feedforward = 16, .dropout = 0.0}, g);
  EXPECT_EQ(m.state_dict().keys(),
            (std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
                                      "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight",
                                      "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"}));
  const Tensor x = randn({5, 3, 8}, 9);
  const auto y = values(m.forward(x));
  auto c = nn::clone(std::make_shared<nn::TransformerEncoderLayer>(m));
  expect_close(values(c->forward(x)), y, 0, 0, "clone");
  EXPECT_NE(c->self_attn.get(), m.self_attn.get());
  EXPECT_OXM_ERROR(nn::TransformerEncoderLayer(8, 2, {.activation = "tanh"}), InvalidArgument, "activation");
  EXPECT_OXM_ERROR(m.forward(randn({5, 3, 6}, 1)), ShapeMismatch, "embed_dim 8");
}

}  // namespace

// gelu(linear(x, w, b)) as one fused node (the transformer layers' "gelu" feed-forward): its values and gradients
// are the separate ops' (f32 and f64, 2-d and 3-d inputs, with and without a bias), its gradient is gradchecked and
// gradgradchecked in f64 (create_graph recomputes the pre-activation), and the layers take it.
TEST(LinearGelu, MatchesTheSeparateOpsAndGradgradchecks) {
  namespace F = oxmera::nn::functional;
  for (DType dt : {DType::F32, DType::F64})
    for (bool with_bias : {false, true})
      for (const Shape& xs : {Shape{7, 5}, Shape{3, 4, 5}}) {
        const Tensor x = randn(xs, 1, dt).requires_grad_(), w = randn({6, 5}, 2, dt).requires_grad_(),
                     b = with_bias ? randn({6}, 3, dt).requires_grad_() : Tensor();
        Shape gs = xs;
        gs[gs.size() - 1] = 6;
        const Tensor g = randn(gs, 4, dt);
        const Tensor y1 = F::linear_gelu(x, w, b), y2 = F::gelu(F::linear(x, w, b));
        EXPECT_EQ(y1.grad_fn_name(), xs.size() == 2 ? "linear_gelu" : "reshape");
        const double tl = dt == DType::F64 ? 1e-12 : 2e-6;
        expect_close(values(y1), values(y2), tl, tl, "values");
        std::vector<Tensor> in{x, w};
        if (with_bias) in.push_back(b);
        const auto g1 = oxmera::autograd::grad({(y1 * g).sum()}, in), g2 = oxmera::autograd::grad({(y2 * g).sum()}, in);
        for (size_t i = 0; i < in.size(); ++i)
          expect_close(values(g1[i]), values(g2[i]), 10 * tl, 10 * tl, "gradient " + std::to_string(i));
      }
  const Tensor x = (rand({4, 3}, 5, DType::F64) * 4.0 - 2.0).requires_grad_(),
               w = randn({5, 3}, 6, DType::F64).requires_grad_(), b = randn({5}, 7, DType::F64).requires_grad_();
  auto f = [](const std::vector<Tensor>& v) { return F::linear_gelu(v[0], v[1], v[2]); };
  GradcheckResult r1 = gradcheck(f, {x, w, b});
  EXPECT_TRUE(r1.ok) << r1.message;
  GradcheckResult r2 = gradgradcheck(f, {x, w, b});
  EXPECT_TRUE(r2.ok) << r2.message;
  // no graph to record: the plain ops (no derivative written)
  {
    oxmera::NoGradGuard ng;
    EXPECT_EQ(F::linear_gelu(x, w, b).grad_fn_name(), "");
  }
  // the encoder layer's feed-forward takes the fused node: its gelu output is linear2's input
  nn::TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 16, .dropout = 0.0, .activation = "gelu"});
  const Tensor h = randn({4, 8}, 8);
  EXPECT_EQ(F::feed_forward_in(layer.linear1, "gelu", h).grad_fn_name(), "linear_gelu");
  EXPECT_EQ(F::feed_forward_in(layer.linear1, "relu", h).grad_fn_name(), "relu");
}
