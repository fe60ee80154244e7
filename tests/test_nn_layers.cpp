// Conv1d, ConvTranspose2d, AdaptiveAvgPool2d, BatchNorm1d, GroupNorm, RMSNorm, Embedding(padding_idx), the
// activation modules and Module::to(DType): f64 references, gradcheck, errors. Torch parity: tests/layers_torch.
#include <oxmera/nn.hpp>

#include "test_util.hpp"

using namespace oxt;
namespace F = oxmera::nn::functional;
namespace nn = oxmera::nn;
using oxmera::nn::Pair;

namespace {
Tensor u64(const Shape& s, uint64_t seed, bool grad = true) {
  Tensor t = rand(s, seed, DType::F64) * 2.0 - 1.0;
  return grad ? t.requires_grad_() : t;
}
void expect_gc(const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& in,
               const std::string& what) {
  GradcheckResult r = gradcheck(f, in);
  EXPECT_TRUE(r.ok) << what << ": " << r.message;
  GradcheckResult r2 = gradgradcheck(f, in);
  EXPECT_TRUE(r2.ok) << what << " (second order): " << r2.message;
}
void expect_close(const Tensor& a, const std::vector<double>& ref, double tol, const std::string& what) {
  auto v = values(a);
  ASSERT_EQ(v.size(), ref.size()) << what;
  for (size_t i = 0; i < v.size(); ++i) ASSERT_NEAR(v[i], ref[i], tol) << what << " at " << i;
}
}  // namespace

TEST(ConvTranspose2d, MatchesDirectScatterAndGradchecks) {
  // out[n, g*og + o, y*s - p + i*d, z*s - p + j*d] += x[n, c, y, z] w[c, o, i, j], c in group g.
  const int64_t N = 2, C = 4, H = 3, W = 2, G = 2, og = 3, KH = 2, KW = 3;
  const Pair s{2, 1}, p{1, 0}, op{1, 0}, d{1, 2};
  Tensor x = u64({N, C, H, W}, 1), w = u64({C, og, KH, KW}, 2), b = u64({og * G}, 3);
  Tensor y = F::conv_transpose2d(x, w, b, s, p, op, G, d);
  const int64_t OH = (H - 1) * s[0] - 2 * p[0] + d[0] * (KH - 1) + op[0] + 1;
  const int64_t OW = (W - 1) * s[1] - 2 * p[1] + d[1] * (KW - 1) + op[1] + 1;
  ASSERT_EQ(y.shape(), Shape({N, og * G, OH, OW}));
  auto xv = values(x), wv = values(w), bv = values(b);
  std::vector<double> ref(static_cast<size_t>(N * og * G * OH * OW));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < og * G; ++o)
      for (int64_t a = 0; a < OH * OW; ++a) ref[static_cast<size_t>((n * og * G + o) * OH * OW + a)] = bv[o];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t yy = 0; yy < H; ++yy)
        for (int64_t zz = 0; zz < W; ++zz)
          for (int64_t o = 0; o < og; ++o)
            for (int64_t i = 0; i < KH; ++i)
              for (int64_t j = 0; j < KW; ++j) {
                const int64_t r = yy * s[0] - p[0] + i * d[0], q = zz * s[1] - p[1] + j * d[1];
                if (r < 0 || r >= OH || q < 0 || q >= OW) continue;
                const int64_t oc = (c / (C / G)) * og + o;
                ref[static_cast<size_t>(((n * og * G + oc) * OH + r) * OW + q)] +=
                    xv[static_cast<size_t>(((n * C + c) * H + yy) * W + zz)] *
                    wv[static_cast<size_t>(((c * og + o) * KH + i) * KW + j)];
              }
  expect_close(y, ref, 1e-12, "conv_transpose2d");
  expect_gc([&](const std::vector<Tensor>& t) { return F::conv_transpose2d(t[0], t[1], t[2], s, p, op, G, d); },
            {x, w, b}, "conv_transpose2d");
}

TEST(ConvTranspose2d, Errors) {
  Tensor x = u64({1, 4, 3, 3}, 1, false), w = u64({4, 2, 2, 2}, 2, false);
  EXPECT_OXM_ERROR(F::conv_transpose2d(x, u64({3, 2, 2, 2}, 2, false)), ShapeMismatch, "");
  EXPECT_OXM_ERROR(F::conv_transpose2d(x, w, {}, {1, 1}, {0, 0}, {1, 1}), InvalidArgument,
                   "");  // output_padding >= stride
  EXPECT_OXM_ERROR(F::conv_transpose2d(x, w, {}, {1, 1}, {0, 0}, {0, 0}, 3), InvalidArgument, "");
  EXPECT_OXM_ERROR(F::conv_transpose2d(x.to(DType::F32), w), DTypeMismatch, "");
  EXPECT_OXM_ERROR(F::conv_transpose2d(u64({4, 3}, 1, false), w), ShapeMismatch, "");
  EXPECT_OXM_ERROR(nn::ConvTranspose2d(4, 3, {2, 2}, {.groups = 2}), InvalidArgument, "");
}

TEST(Conv1d, MatchesConv2dAndGradchecks) {
  Tensor x = u64({2, 4, 7}, 4), w = u64({6, 2, 3}, 5), b = u64({6}, 6);
  Tensor y = F::conv1d(x, w, b, 2, 1, 2, 2);
  Tensor ref = F::conv2d(x.unsqueeze(2), w.unsqueeze(2), b, {1, 2}, {0, 1}, {1, 2}, 2).squeeze(2);
  expect_close(y, values(ref), 1e-14, "conv1d");
  expect_gc([](const std::vector<Tensor>& t) { return F::conv1d(t[0], t[1], t[2], 2, 1, 2, 2); }, {x, w, b}, "conv1d");
  EXPECT_EQ(F::conv1d(u64({4, 7}, 4, false), w, b, 1, 0, 1, 2).shape(), Shape({6, 5}));
  EXPECT_OXM_ERROR(F::conv1d(u64({2, 3, 7}, 4, false), w, b, 1, 0, 1, 2), InvalidArgument, "");
  EXPECT_OXM_ERROR(F::conv1d(u64({2, 4, 7, 1}, 4, false), w), ShapeMismatch, "");
}

TEST(AdaptiveAvgPool2d, TorchWindowsNonDivisible) {
  const int64_t H = 5, W = 7, OH = 3, OW = 4;
  Tensor x = u64({2, 3, H, W}, 7);
  Tensor y = F::adaptive_avg_pool2d(x, {OH, OW});
  ASSERT_EQ(y.shape(), Shape({2, 3, OH, OW}));
  auto xv = values(x);
  std::vector<double> ref;
  for (int64_t nc = 0; nc < 6; ++nc)
    for (int64_t i = 0; i < OH; ++i)
      for (int64_t j = 0; j < OW; ++j) {
        const int64_t h0 = (i * H) / OH, h1 = ((i + 1) * H + OH - 1) / OH;
        const int64_t w0 = (j * W) / OW, w1 = ((j + 1) * W + OW - 1) / OW;
        double acc = 0;
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t q = w0; q < w1; ++q) acc += xv[static_cast<size_t>((nc * H + h) * W + q)];
        ref.push_back(acc / static_cast<double>((h1 - h0) * (w1 - w0)));
      }
  expect_close(y, ref, 1e-14, "adaptive_avg_pool2d");
  expect_gc(
      [](const std::vector<Tensor>& t) {
        return F::adaptive_avg_pool2d(t[0], {3, 4});
      },
      {x}, "adaptive_avg_pool2d");
  EXPECT_OXM_ERROR(F::adaptive_avg_pool2d(u64({5, 7}, 1, false), {2, 2}), ShapeMismatch, "");
  EXPECT_OXM_ERROR(F::adaptive_avg_pool2d(x, {0, 2}), InvalidArgument, "");
}

TEST(GroupNormRMSNorm, ReferenceAndGradcheck) {
  Tensor x = u64({2, 6, 5}, 8), w = u64({6}, 9), b = u64({6}, 10);
  Tensor y = F::group_norm(x, 3, w, b, 1e-5);
  auto xv = values(x), wv = values(w), bv = values(b);
  std::vector<double> ref(xv.size());
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t g = 0; g < 3; ++g) {
      double m = 0, v = 0;
      const size_t base = static_cast<size_t>((n * 6 + g * 2) * 5);
      for (size_t i = 0; i < 10; ++i) m += xv[base + i] / 10;
      for (size_t i = 0; i < 10; ++i) v += (xv[base + i] - m) * (xv[base + i] - m) / 10;
      for (size_t i = 0; i < 10; ++i) {
        const size_t c = static_cast<size_t>(g * 2) + i / 5;
        ref[base + i] = (xv[base + i] - m) / std::sqrt(v + 1e-5) * wv[c] + bv[c];
      }
    }
  expect_close(y, ref, 1e-12, "group_norm");
  expect_gc([](const std::vector<Tensor>& t) { return F::group_norm(t[0], 3, t[1], t[2]); }, {x, w, b}, "group_norm");
  EXPECT_OXM_ERROR(F::group_norm(x, 4, w, b), InvalidArgument, "");
  EXPECT_OXM_ERROR(F::group_norm(x, 3, u64({5}, 1, false), b), ShapeMismatch, "");

  Tensor rw = u64({5}, 11);
  Tensor r = F::rms_norm(x, {5}, rw);
  std::vector<double> rref(xv.size());
  auto rwv = values(rw);
  for (size_t row = 0; row < 12; ++row) {
    double ms = 0;
    for (size_t i = 0; i < 5; ++i) ms += xv[row * 5 + i] * xv[row * 5 + i] / 5;
    for (size_t i = 0; i < 5; ++i)
      rref[row * 5 + i] = xv[row * 5 + i] / std::sqrt(ms + std::numeric_limits<double>::epsilon()) * rwv[i];
  }
  expect_close(r, rref, 1e-12, "rms_norm");
  expect_gc([](const std::vector<Tensor>& t) { return F::rms_norm(t[0], {6, 5}, {}, 1e-3); }, {x}, "rms_norm");
  expect_gc([](const std::vector<Tensor>& t) { return F::rms_norm(t[0], {5}, t[1]); }, {x, rw}, "rms_norm w");
  EXPECT_OXM_ERROR(F::rms_norm(x, {6}), ShapeMismatch, "");
  EXPECT_OXM_ERROR(F::rms_norm(x, {5}, u64({6}, 1, false)), ShapeMismatch, "");
}

TEST(BatchNorm1d, ThreeDimsMatchPerChannelStatistics) {
  nn::BatchNorm1d bn(3);
  bn.to(DType::F64);
  Tensor x = u64({4, 3, 5}, 12, false);
  Tensor y = bn.forward(x);
  auto xv = values(x), yv = values(y);
  for (int64_t c = 0; c < 3; ++c) {
    double m = 0, v = 0;
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t l = 0; l < 5; ++l) m += xv[static_cast<size_t>((n * 3 + c) * 5 + l)] / 20;
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t l = 0; l < 5; ++l) {
        const double d = xv[static_cast<size_t>((n * 3 + c) * 5 + l)] - m;
        v += d * d / 20;
      }
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t l = 0; l < 5; ++l) {
        const size_t i = static_cast<size_t>((n * 3 + c) * 5 + l);
        EXPECT_NEAR(yv[i], (xv[i] - m) / std::sqrt(v + 1e-5), 1e-12);
      }
    EXPECT_NEAR(values(bn.running_mean)[static_cast<size_t>(c)], 0.1 * m, 1e-12);
  }
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);
  EXPECT_EQ(bn.forward(u64({4, 3}, 13, false)).shape(), Shape({4, 3}));
  EXPECT_OXM_ERROR(bn.forward(u64({4, 2, 5}, 1, false)), ShapeMismatch, "");
  EXPECT_OXM_ERROR(bn.forward(u64({4, 3, 5, 1}, 1, false)), ShapeMismatch, "");
}

TEST(EmbeddingPadding, RowZeroedAndNoGradient) {
  Generator gen(3);
  nn::Embedding old(5, 3, gen);  // the old constructor still compiles
  nn::Embedding e(5, 3, {.padding_idx = -1}, gen);
  ASSERT_TRUE(e.padding_idx.has_value());
  EXPECT_EQ(*e.padding_idx, 4);
  for (double v : values(e.weight.narrow(0, 4, 1))) EXPECT_EQ(v, 0.0);
  Tensor idx = from_vector(std::vector<int64_t>{4, 1, 4, 0}, {2, 2});
  e.forward(idx).sum().backward();
  auto g = values(e.weight.grad());
  for (int64_t j = 0; j < 3; ++j) {
    EXPECT_EQ(g[static_cast<size_t>(4 * 3 + j)], 0.0);
    EXPECT_EQ(g[static_cast<size_t>(1 * 3 + j)], 1.0);
  }
  EXPECT_OXM_ERROR(nn::Embedding(5, 3, {.padding_idx = 5}), InvalidArgument, "");
}

TEST(ActivationModules, MatchFunctionalAndDefaultsCompile) {
  Tensor x = u64({3, 4}, 14, false).to(DType::F32);
  nn::GELU gelu_default;  // default-constructible as before
  EXPECT_EQ(values(gelu_default.forward(x)), values(F::gelu(x)));
  EXPECT_EQ(values(nn::GELU("tanh").forward(x)), values(F::gelu(x, "tanh")));
  EXPECT_EQ(values(nn::SiLU().forward(x)), values(F::silu(x)));
  EXPECT_EQ(values(nn::Mish().forward(x)), values(F::mish(x)));
  EXPECT_EQ(values(nn::Softplus(2.0, 1.0).forward(x)), values(F::softplus(x, 2.0, 1.0)));
  EXPECT_EQ(values(nn::ELU(0.5).forward(x)), values(F::elu(x, 0.5)));
  EXPECT_EQ(values(nn::LeakyReLU(0.2).forward(x)), values(F::leaky_relu(x, 0.2)));
  EXPECT_EQ(values(nn::Hardtanh(-0.5, 0.5).forward(x)), values(F::hardtanh(x, -0.5, 0.5)));
  EXPECT_EQ(values(nn::Softmax(1).forward(x)), values(x.softmax(1)));
  EXPECT_EQ(values(nn::LogSoftmax(0).forward(x)), values(x.log_softmax(0)));
  EXPECT_EQ(values(nn::Identity().forward(x)), values(x));
  EXPECT_OXM_ERROR(nn::GELU("fast"), InvalidArgument, "");
  EXPECT_OXM_ERROR(nn::Hardtanh(1.0, -1.0), InvalidArgument, "");
  EXPECT_OXM_ERROR(nn::SiLU().forward(x.to(DType::F64)), DTypeMismatch, "");
}

TEST(ModuleToDType, F64ModelRunsAndMismatchStillThrows) {
  Generator gen(5);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Conv1d>(2, 4, 3, nn::Conv1dOptions{}, gen), std::make_shared<nn::BatchNorm1d>(4),
      std::make_shared<nn::SiLU>(), std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(12, 2, true, gen)});
  Tensor x32 = u64({3, 2, 5}, 15, false).to(DType::F32);
  Tensor y32 = model->forward(x32);
  EXPECT_OXM_ERROR(model->forward(x32.to(DType::F64)), DTypeMismatch, "");
  auto params = model->parameters();
  model->to(DType::F64);
  for (auto& [n, t] : model->state_dict()) {
    if (n.find("num_batches_tracked") == std::string::npos) {
      EXPECT_EQ(t.dtype(), DType::F64) << n;
    }
  }
  EXPECT_EQ(model->state_dict().at("1.num_batches_tracked").dtype(), DType::I64);
  EXPECT_EQ(params[0].dtype(), DType::F64);  // handles held elsewhere see the conversion
  model->eval();
  Tensor y64 = model->forward(x32.to(DType::F64));
  EXPECT_EQ(y64.dtype(), DType::F64);
  EXPECT_OXM_ERROR(model->forward(x32), DTypeMismatch, "");
  y64.sum().backward();
  EXPECT_EQ(params[0].grad().dtype(), DType::F64);
  model->to(DType::F32);
  EXPECT_EQ(model->forward(x32).dtype(), DType::F32);
  EXPECT_OXM_ERROR(model->to(DType::I64), InvalidArgument, "");
}

// Stacked replicas (issue #15 item 2): a Linear with R replicas is R independent layers in one module — replica r
// starts where a plain Linear built from generator r would (with the same ReplicaGenerators across layers: where
// R separately seeded models would), and its outputs and gradients are that layer's on replica r's inputs.
TEST(LinearReplicas, EqualRSeparatelySeededModels) {
  constexpr int64_t R = 3;
  nn::ReplicaGenerators gens(R, 40);
  nn::Linear l1(5, 4, {.replicas = R, .replica_generators = &gens});
  nn::Linear l2(4, 2, {.bias = true, .replicas = R, .replica_generators = &gens});
  EXPECT_EQ(l1.weight.shape(), Shape({R, 4, 5}));
  EXPECT_EQ(l1.bias.shape(), Shape({R, 4}));
  EXPECT_EQ(l1.replicas(), R);
  EXPECT_EQ(l1.extra_repr(), "in_features=5, out_features=4, bias=true, replicas=3");
  const Tensor x = randn({R, 2, 6, 5}, 7);  // [R, ..., in]: the middle dims are kept
  const Tensor y = l2.forward(l1.forward(x).tanh());
  ASSERT_EQ(y.shape(), Shape({R, 2, 6, 2}));
  y.square().sum().backward();
  for (int64_t r = 0; r < R; ++r) {
    Generator g(40 + static_cast<uint64_t>(r));
    nn::Linear a(5, 4, true, g), b(4, 2, true, g);  // the model replica r stands for
    EXPECT_EQ(values(a.weight), values(l1.weight.select(0, r))) << r;
    EXPECT_EQ(values(b.bias), values(l2.bias.select(0, r))) << r;
    const Tensor yr = b.forward(a.forward(x.select(0, r)).tanh());
    oxt::expect_close(values(yr), values(y.select(0, r)), 1e-6, 1e-6, "replica output");
    yr.square().sum().backward();
    oxt::expect_close(values(a.weight.grad()), values(l1.weight.grad().select(0, r)), 1e-5, 1e-5, "weight grad");
    oxt::expect_close(values(b.bias.grad()), values(l2.bias.grad().select(0, r)), 1e-5, 1e-5, "bias grad");
  }
  // Without generators every replica draws in turn from the constructor's generator; no bias; f64 gradcheck.
  Generator g(3);
  nn::Linear nb(3, 2, {.bias = false, .replicas = 2}, g);
  EXPECT_FALSE(nb.bias.defined());
  Generator g2(3);
  nn::Linear first(3, 2, false, g2), second(3, 2, false, g2);
  EXPECT_EQ(values(nb.weight.select(0, 1)), values(second.weight));
  nb.to(DType::F64);
  const Tensor xin = u64({2, 4, 3}, 9);
  GradcheckResult r = gradcheck([&](const std::vector<Tensor>& in) { return nb.forward(in[0]); }, {xin});
  EXPECT_TRUE(r.ok) << r.message;
}

// F::linear with a stacked weight [R, out, in] (one fused op, one node) against one F::linear per replica: values
// and the gradients of x, weight and bias, for a 4-d input, a broadcast input (one [M, in] for every replica) and
// no bias; f64 gradcheck and gradgradcheck through the broadcast input.
TEST(LinearReplicas, StackedFunctionalLinearEqualsOneLinearPerReplica) {
  constexpr int64_t R = 3;
  for (int variant = 0; variant < 3; ++variant) {
    const bool shared = variant == 1, with_bias = variant != 2;
    Tensor x0 = shared ? u64({5, 4}, 1) : u64({R, 2, 5, 4}, 1);
    Tensor w = u64({R, 6, 4}, 2), b = with_bias ? u64({R, 6}, 3) : Tensor();
    const Tensor x = shared ? x0.unsqueeze(0).expand({R, 5, 4}) : x0;
    const Tensor y = F::linear(x, w, b);
    ASSERT_EQ(y.shape(), shared ? Shape({R, 5, 6}) : Shape({R, 2, 5, 6})) << variant;
    const Tensor up = u64(y.shape(), 4, false);
    (y * up).sum().backward();
    const Tensor gx = x0.grad(), gw = w.grad(), gb = with_bias ? b.grad() : Tensor();
    x0.zero_grad();
    w.zero_grad();
    if (with_bias) b.zero_grad();
    Tensor ref_sum = zeros({}, DType::F64);
    for (int64_t r = 0; r < R; ++r) {
      const Tensor yr = F::linear(x.select(0, r), w.select(0, r), with_bias ? b.select(0, r) : Tensor());
      EXPECT_EQ(values(yr), values(y.select(0, r))) << "replica " << r << " variant " << variant;
      ref_sum = ref_sum + (yr * up.select(0, r)).sum();
    }
    ref_sum.backward();
    oxt::expect_close(values(gx), values(x0.grad()), 1e-12, 1e-12, "x grad");
    oxt::expect_close(values(gw), values(w.grad()), 1e-12, 1e-12, "weight grad");
    if (with_bias) oxt::expect_close(values(gb), values(b.grad()), 1e-12, 1e-12, "bias grad");
  }
  const Tensor x = u64({4, 3}, 5), w = u64({2, 3, 3}, 6), b = u64({2, 3}, 7);
  auto f = [](const std::vector<Tensor>& in) {
    return F::linear(in[0].unsqueeze(0).expand({2, 4, 3}), in[1], in[2]).tanh();
  };
  GradcheckResult r1 = gradcheck(f, {x, w, b});
  EXPECT_TRUE(r1.ok) << r1.message;
  GradcheckResult r2 = gradgradcheck(f, {x, w, b});
  EXPECT_TRUE(r2.ok) << r2.message;
  // typed errors name the stacked shapes
  EXPECT_OXM_ERROR(F::linear(u64({3, 4, 3}, 1, false), w), ShapeMismatch, "needs input [2, ..., 3]");
  EXPECT_OXM_ERROR(F::linear(u64({2, 4, 3}, 1, false), w, u64({3}, 1, false)), ShapeMismatch, "needs bias [2, 3]");
  EXPECT_OXM_ERROR(F::linear(u64({2, 4, 3}, 1, false).to(DType::F32), w), DTypeMismatch, "");
  EXPECT_OXM_ERROR(F::linear(u64({2, 4, 3}, 1, false), u64({1, 2, 3, 3}, 1, false)), ShapeMismatch,
                   "[replicas, out, in]");
}

// LayerNorm with stacked replicas: weight and bias [R, *normalized_shape] (ones and zeros), replica r of the input
// normalised and then scaled and shifted by replica r's parameters — equal, values and gradients, to R separate
// LayerNorms holding the same (here randomised) parameters; f64 gradcheck; typed errors.
// Conv2d with replicas: one grouped convolution over the replicas' channels; built from ReplicaGenerators it starts
// where R separately seeded layers do, and its outputs and gradients are theirs (groups, stride, padding, dilation).
TEST(Conv2dReplicas, EqualRSeparatelySeededLayers) {
  constexpr int64_t R = 3;
  const nn::Conv2dOptions base{.stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}, .groups = 2};
  nn::ReplicaGenerators gens(R, 40);
  nn::Conv2dOptions opt = base;
  opt.replicas = R;
  opt.replica_generators = &gens;
  nn::Conv2d conv(4, 6, {3, 2}, opt);
  EXPECT_EQ(conv.weight.shape(), Shape({R, 6, 2, 3, 2}));
  EXPECT_EQ(conv.bias.shape(), Shape({R, 6}));
  EXPECT_EQ(conv.replicas(), R);
  EXPECT_EQ(conv.extra_repr(),
            "4, 6, kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2, replicas=3");
  const Tensor x = randn({R, 2, 4, 7, 6}, 41).requires_grad_();
  const Tensor y = conv.forward(x);
  ASSERT_EQ(y.shape(), Shape({R, 2, 6, 4, 4}));
  const Tensor up = randn(y.shape(), 42);
  (y * up).sum().backward();
  for (int64_t r = 0; r < R; ++r) {
    Generator g(40 + static_cast<uint64_t>(r));
    nn::Conv2d one(4, 6, {3, 2}, base, g);
    EXPECT_EQ(values(one.weight), values(conv.weight.select(0, r))) << "replica " << r << "'s initial weight";
    EXPECT_EQ(values(one.bias), values(conv.bias.select(0, r))) << "replica " << r << "'s initial bias";
    const Tensor xr = x.select(0, r).detach().requires_grad_();
    const Tensor yr = one.forward(xr);
    oxt::expect_close(values(yr), values(y.select(0, r)), 1e-5, 1e-5, "replica output");
    (yr * up.select(0, r)).sum().backward();
    oxt::expect_close(values(one.weight.grad()), values(conv.weight.grad().select(0, r)), 1e-5, 1e-5, "weight grad");
    oxt::expect_close(values(one.bias.grad()), values(conv.bias.grad().select(0, r)), 1e-5, 1e-5, "bias grad");
    oxt::expect_close(values(xr.grad()), values(x.grad().select(0, r)), 1e-5, 1e-5, "input grad");
  }
  // a shared input as a broadcast view; no bias; f64 gradcheck
  nn::Conv2d nb(2, 3, {2, 2}, {.bias = false, .replicas = 2});
  EXPECT_FALSE(nb.bias.defined());
  const Tensor shared = randn({1, 2, 4, 4}, 43);
  const Tensor ys = nb.forward(shared.unsqueeze(0).expand({2, 1, 2, 4, 4}));
  for (int64_t r = 0; r < 2; ++r) {
    const Tensor want = nn::functional::conv2d(shared, nb.weight.select(0, r), {});
    oxt::expect_close(values(ys.select(0, r)), values(want), 1e-5, 1e-5, "shared input");
  }
  nb.to(DType::F64);
  GradcheckResult gc =
      gradcheck([&](const std::vector<Tensor>& in) { return nb.forward(in[0]); }, {u64({2, 1, 2, 3, 3}, 44)});
  EXPECT_TRUE(gc.ok) << gc.message;
  EXPECT_OXM_ERROR(conv.forward(randn({2, 4, 7, 6}, 1)), ShapeMismatch, "replica dim first");
  EXPECT_OXM_ERROR(conv.forward(randn({R, 2, 5, 7, 6}, 1)), ShapeMismatch, "must be [3, N, 4, H, W]");
  EXPECT_OXM_ERROR(nn::Conv2d(2, 2, {1, 1}, {.replicas = -1}), InvalidArgument, "replicas must be >= 0");
  nn::ReplicaGenerators two(2, 1);
  EXPECT_OXM_ERROR(nn::Conv2d(2, 2, {1, 1}, {.replicas = 3, .replica_generators = &two}), InvalidArgument,
                   "2 generators for 3 replicas");
}

TEST(LayerNormReplicas, EqualRSeparateLayers) {
  constexpr int64_t R = 3;
  nn::LayerNorm ln(Shape{2, 5}, {.eps = 1e-4, .replicas = R});
  EXPECT_EQ(ln.weight.shape(), Shape({R, 2, 5}));
  EXPECT_EQ(ln.replicas(), R);
  EXPECT_EQ(values(ln.weight), std::vector<double>(30, 1.0));
  EXPECT_EQ(values(ln.bias), std::vector<double>(30, 0.0));
  EXPECT_EQ(ln.extra_repr(), "(2, 5), eps=0.0001, elementwise_affine=true, replicas=3");
  {
    NoGradGuard ng;
    ln.weight.copy_(randn({R, 2, 5}, 1));
    ln.bias.copy_(randn({R, 2, 5}, 2));
  }
  const Tensor x = randn({R, 4, 2, 5}, 3);
  const Tensor y = ln.forward(x);
  ASSERT_EQ(y.shape(), x.shape());
  const Tensor up = randn(y.shape(), 4);
  (y * up).sum().backward();
  for (int64_t r = 0; r < R; ++r) {
    nn::LayerNorm one(Shape{2, 5}, 1e-4);
    {
      NoGradGuard ng;
      one.weight.copy_(ln.weight.select(0, r));
      one.bias.copy_(ln.bias.select(0, r));
    }
    const Tensor yr = one.forward(x.select(0, r));
    oxt::expect_close(values(yr), values(y.select(0, r)), 1e-6, 1e-6, "replica output");
    (yr * up.select(0, r)).sum().backward();
    oxt::expect_close(values(one.weight.grad()), values(ln.weight.grad().select(0, r)), 1e-5, 1e-5, "weight grad");
    oxt::expect_close(values(one.bias.grad()), values(ln.bias.grad().select(0, r)), 1e-5, 1e-5, "bias grad");
  }
  nn::LayerNorm plain(Shape{3}, {.elementwise_affine = false, .replicas = 2});
  EXPECT_FALSE(plain.weight.defined());
  nn::LayerNorm ln64(Shape{3}, {.replicas = 2});
  {
    NoGradGuard ng;
    ln64.weight.copy_(randn({2, 3}, 5));
  }
  ln64.to(DType::F64);
  GradcheckResult g =
      gradcheck([&](const std::vector<Tensor>& in) { return ln64.forward(in[0]); }, {u64({2, 4, 3}, 6)});
  EXPECT_TRUE(g.ok) << g.message;
  EXPECT_OXM_ERROR(ln.forward(randn({4, 2, 5}, 1)), ShapeMismatch, "replica dim first");
  EXPECT_OXM_ERROR(ln.forward(randn({R, 4, 5, 2}, 1)), ShapeMismatch, "[3, ..., *normalized_shape]");
  EXPECT_OXM_ERROR(nn::LayerNorm(Shape{3}, {.replicas = -1}), InvalidArgument, "replicas must be >= 0");
}

// BatchNorm1d / BatchNorm2d with stacked replicas: [R, C] parameters and running statistics initialised as torch's,
// replica r normalised by its own batch's statistics and keeping its own running ones, equal to R separate layers
// over two training steps and in eval mode (outputs, running statistics, input and parameter gradients); the
// positional constructors unchanged; f64 gradcheck; typed errors.
TEST(BatchNormReplicas, EqualRSeparateLayers) {
  constexpr int64_t R = 3, C = 4;
  for (int kind = 0; kind < 3; ++kind) {  // BatchNorm2d [R, N, C, H, W], BatchNorm1d [R, N, C, L], [R, N, C]
    const Shape xs = kind == 0 ? Shape{R, 5, C, 2, 3} : kind == 1 ? Shape{R, 5, C, 6} : Shape{R, 7, C};
    const std::string what = kind == 0 ? "2d" : kind == 1 ? "1d [N, C, L]" : "1d [N, C]";
    auto make = [&](int64_t replicas) -> std::shared_ptr<nn::Module> {
      const nn::BatchNormOptions o{.eps = 1e-3, .momentum = 0.2, .replicas = replicas};
      if (kind == 0) return std::make_shared<nn::BatchNorm2d>(C, o);
      return std::make_shared<nn::BatchNorm1d>(C, o);
    };
    auto stacked = make(R);
    auto params = stacked->named_parameters();
    auto buffers = stacked->named_buffers();
    ASSERT_EQ(params.size(), 2u) << what;
    EXPECT_EQ(params[0].second.shape(), Shape({R, C})) << what;
    EXPECT_EQ(buffers[0].first, "running_mean");
    EXPECT_EQ(buffers[0].second.shape(), Shape({R, C})) << what;
    EXPECT_EQ(values(buffers[1].second), std::vector<double>(R * C, 1.0)) << what;  // running_var
    {
      NoGradGuard ng;
      params[0].second.copy_(randn({R, C}, 1));
      params[1].second.copy_(randn({R, C}, 2));
    }
    std::vector<std::shared_ptr<nn::Module>> ones;
    for (int64_t r = 0; r < R; ++r) {
      ones.push_back(make(0));
      NoGradGuard ng;
      ones[r]->named_parameters()[0].second.copy_(params[0].second.select(0, r));
      ones[r]->named_parameters()[1].second.copy_(params[1].second.select(0, r));
    }
    for (int step = 0; step < 3; ++step) {  // two training steps, then eval (the running statistics)
      const bool train = step < 2;
      stacked->train(train);
      const Tensor x = (randn(xs, 10 + step) * 2.0 + 1.0).requires_grad_();
      const Tensor y = stacked->forward(x);
      ASSERT_EQ(y.shape(), xs) << what;
      const Tensor up = randn(xs, 20 + step);
      const Tensor gx = autograd::grad({(y * up).sum()}, {x})[0];
      for (int64_t r = 0; r < R; ++r) {
        ones[r]->train(train);
        const Tensor xr = x.detach().select(0, r).clone().requires_grad_();
        const Tensor yr = ones[r]->forward(xr);
        const std::string at = what + " step " + std::to_string(step) + " replica " + std::to_string(r);
        oxt::expect_close(values(yr), values(y.select(0, r)), 1e-5, 1e-5, at + " output");
        const Tensor gr = autograd::grad({(yr * up.select(0, r)).sum()}, {xr})[0];
        oxt::expect_close(values(gr), values(gx.select(0, r)), 1e-5, 1e-5, at + " input grad");
        oxt::expect_close(values(ones[r]->named_buffers()[0].second), values(buffers[0].second.select(0, r)), 1e-6,
                          1e-6, at + " running_mean");
        oxt::expect_close(values(ones[r]->named_buffers()[1].second), values(buffers[1].second.select(0, r)), 1e-6,
                          1e-6, at + " running_var");
      }
    }
    EXPECT_EQ(values(buffers[2].second), std::vector<double>{2.0}) << what;  // num_batches_tracked: one counter
    // parameter gradients, replica by replica
    stacked->train(true);
    const Tensor x = randn(xs, 30);
    const Tensor up = randn(xs, 31);
    (stacked->forward(x) * up).sum().backward();
    for (int64_t r = 0; r < R; ++r) {
      ones[r]->train(true);
      (ones[r]->forward(x.select(0, r)) * up.select(0, r)).sum().backward();
      for (size_t p = 0; p < 2; ++p)
        oxt::expect_close(values(ones[r]->named_parameters()[p].second.grad()),
                          values(params[p].second.grad().select(0, r)), 1e-4, 1e-5, what + " parameter grad");
    }
  }
  nn::BatchNorm2d bn(C, {.replicas = 2});
  EXPECT_EQ(bn.replicas(), 2);
  EXPECT_EQ(bn.extra_repr(), "4, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true, replicas=2");
  nn::BatchNorm2d positional(C, 1e-3, 0.3, false);  // the positional constructor, unchanged
  EXPECT_FALSE(positional.weight.defined());
  EXPECT_EQ(positional.replicas(), 0);
  nn::BatchNorm1d untracked(C, {.track_running_stats = false, .replicas = 2});
  EXPECT_FALSE(untracked.running_mean.defined());
  untracked.to(DType::F64);
  GradcheckResult g =
      gradcheck([&](const std::vector<Tensor>& in) { return untracked.forward(in[0]); }, {u64({2, 5, C}, 6)});
  EXPECT_TRUE(g.ok) << g.message;
  EXPECT_OXM_ERROR(bn.forward(randn({5, C, 2, 2}, 1)), ShapeMismatch, "replica dim first");
  EXPECT_OXM_ERROR(bn.forward(randn({3, 5, C, 2, 2}, 1)), ShapeMismatch, "[2, N, 4, H, W]");
  EXPECT_OXM_ERROR(nn::BatchNorm1d(C, {.replicas = -1}), InvalidArgument, "replicas must be >= 0");
}

// GroupNorm and RMSNorm with stacked replicas: [R, C] / [R, *normalized_shape] parameters initialised as torch's,
// replica r normalised as the plain layer and scaled (and shifted) by its own parameters: outputs, input and
// parameter gradients equal to R separate layers; the positional constructors unchanged; f64 gradcheck; typed errors.
TEST(GroupNormRMSNormReplicas, EqualRSeparateLayers) {
  constexpr int64_t R = 3;
  for (int kind = 0; kind < 2; ++kind) {
    const Shape xs = kind == 0 ? Shape{R, 4, 6, 5} : Shape{R, 4, 2, 5};
    auto make = [&](int64_t replicas) -> std::shared_ptr<nn::Module> {
      if (kind == 0)
        return std::make_shared<nn::GroupNorm>(2, 6, nn::GroupNormOptions{.eps = 1e-3, .replicas = replicas});
      return std::make_shared<nn::RMSNorm>(Shape{2, 5}, nn::RMSNormOptions{.eps = 1e-4, .replicas = replicas});
    };
    const std::string what = kind == 0 ? "GroupNorm" : "RMSNorm";
    auto stacked = make(R);
    auto params = stacked->named_parameters();
    ASSERT_EQ(params.size(), kind == 0 ? 2u : 1u) << what;
    EXPECT_EQ(params[0].second.shape(), kind == 0 ? Shape({R, 6}) : Shape({R, 2, 5})) << what;
    EXPECT_EQ(values(params[0].second), std::vector<double>(kind == 0 ? 18 : 30, 1.0)) << what;
    {
      NoGradGuard ng;
      for (size_t p = 0; p < params.size(); ++p) params[p].second.copy_(randn(params[p].second.shape(), 1 + p));
    }
    const Tensor x = (randn(xs, 10) * 2.0 + 0.5).requires_grad_();
    const Tensor y = stacked->forward(x);
    ASSERT_EQ(y.shape(), xs) << what;
    const Tensor up = randn(xs, 11);
    (y * up).sum().backward();
    for (int64_t r = 0; r < R; ++r) {
      auto one = make(0);
      auto mine = one->named_parameters();
      {
        NoGradGuard ng;
        for (size_t p = 0; p < mine.size(); ++p) mine[p].second.copy_(params[p].second.select(0, r));
      }
      const Tensor xr = x.detach().select(0, r).clone().requires_grad_();
      const Tensor yr = one->forward(xr);
      const std::string at = what + " replica " + std::to_string(r);
      oxt::expect_close(values(yr), values(y.select(0, r)), 1e-5, 1e-5, at + " output");
      (yr * up.select(0, r)).sum().backward();
      oxt::expect_close(values(xr.grad()), values(x.grad().select(0, r)), 1e-5, 1e-5, at + " input grad");
      for (size_t p = 0; p < mine.size(); ++p)
        oxt::expect_close(values(mine[p].second.grad()), values(params[p].second.grad().select(0, r)), 1e-4, 1e-5,
                          at + " parameter grad");
    }
  }
  nn::GroupNorm gn(2, 6, {.replicas = 2});
  EXPECT_EQ(gn.replicas(), 2);
  EXPECT_EQ(gn.extra_repr(), "2, 6, eps=1e-05, affine=true, replicas=2");
  nn::GroupNorm positional(2, 6, 1e-3, false);
  EXPECT_FALSE(positional.weight.defined());
  nn::RMSNorm rms(Shape{3}, {.replicas = 2});
  EXPECT_EQ(rms.extra_repr(), "(3,), eps=None, elementwise_affine=true, replicas=2");
  nn::RMSNorm rms_positional(Shape{3}, 1e-6);
  EXPECT_EQ(rms_positional.replicas(), 0);
  {
    NoGradGuard ng;
    gn.weight.copy_(randn({2, 6}, 3));
    rms.weight.copy_(randn({2, 3}, 4));
  }
  gn.to(DType::F64);
  rms.to(DType::F64);
  GradcheckResult g1 =
      gradcheck([&](const std::vector<Tensor>& in) { return gn.forward(in[0]); }, {u64({2, 3, 6, 2}, 5)});
  EXPECT_TRUE(g1.ok) << g1.message;
  GradcheckResult g2 =
      gradcheck([&](const std::vector<Tensor>& in) { return rms.forward(in[0]); }, {u64({2, 4, 3}, 6)});
  EXPECT_TRUE(g2.ok) << g2.message;
  EXPECT_OXM_ERROR(gn.forward(u64({3, 6, 2}, 1, false)), ShapeMismatch, "replica dim first");
  EXPECT_OXM_ERROR(rms.forward(u64({2, 4, 5}, 1, false)), ShapeMismatch, "[2, ..., *normalized_shape]");
  EXPECT_OXM_ERROR(nn::GroupNorm(2, 6, {.replicas = -1}), InvalidArgument, "replicas must be >= 0");
  EXPECT_OXM_ERROR(nn::RMSNorm(Shape{3}, {.replicas = -1}), InvalidArgument, "replicas must be >= 0");
}

// Embedding with stacked replicas: table r drawn from generator(r) (as Embedding(V, D, Generator(seed + r))), replica
// r of the indices looks up in table r only; shared indices as a broadcast view; padding_idx per table (zero, no
// gradient); an index valid for the stacked storage but not for its own table is an error, not another replica's row.
TEST(EmbeddingReplicas, EqualRSeparatelySeededTables) {
  constexpr int64_t R = 3, V = 6, D = 4;
  nn::ReplicaGenerators gens(R, 70);
  nn::Embedding emb(V, D, {.padding_idx = 2, .replicas = R, .replica_generators = &gens});
  EXPECT_EQ(emb.weight.shape(), Shape({R, V, D}));
  EXPECT_EQ(emb.extra_repr(), "6, 4, padding_idx=2, replicas=3");
  const Tensor idx = from_vector(std::vector<int64_t>{0, 2, 5, 1, 2, 2, 4, 3, 0, 5, 5, 1, 2, 0, 3, 4, 1, 1}, {R, 2, 3});
  const Tensor y = emb.forward(idx);
  ASSERT_EQ(y.shape(), Shape({R, 2, 3, D}));
  const Tensor up = randn(y.shape(), 5);
  (y * up).sum().backward();
  for (int64_t r = 0; r < R; ++r) {
    Generator g(70 + static_cast<uint64_t>(r));
    nn::Embedding one(V, D, {.padding_idx = 2}, g);
    EXPECT_EQ(values(one.weight), values(emb.weight.select(0, r))) << r;
    const Tensor yr = one.forward(idx.select(0, r));
    EXPECT_EQ(values(yr), values(y.select(0, r))) << r;
    (yr * up.select(0, r)).sum().backward();
    oxt::expect_close(values(one.weight.grad()), values(emb.weight.grad().select(0, r)), 1e-6, 1e-6, "table grad");
  }
  // the same indices for every replica
  const Tensor shared = from_vector(std::vector<int64_t>{1, 4}, {2});
  const Tensor ys = emb.forward(shared.unsqueeze(0).expand({R, 2}));
  for (int64_t r = 0; r < R; ++r)
    EXPECT_EQ(values(ys.select(0, r)), values(emb.weight.select(0, r).index_select(0, shared))) << r;
  EXPECT_OXM_ERROR(emb.forward(from_vector(std::vector<int64_t>{0, 1, 6}, {R, 1})), IndexOutOfBounds, "");
  EXPECT_OXM_ERROR(emb.forward(from_vector(std::vector<int64_t>{0, 1}, {2, 1})), ShapeMismatch, "replica dim first");
  EXPECT_OXM_ERROR(nn::Embedding(V, D, {.replicas = 2, .replica_generators = &gens}), InvalidArgument,
                   "3 generators for 2 replicas");
}

TEST(LinearReplicas, TypedErrorsSayWhatToDo) {
  nn::ReplicaGenerators gens(2, 1);
  nn::Linear l(3, 2, {.replicas = 2, .replica_generators = &gens});
  EXPECT_OXM_ERROR(l.forward(randn({4, 3}, 1)), ShapeMismatch, "replica dim first");
  EXPECT_OXM_ERROR(l.forward(randn({3, 5, 3}, 1)), ShapeMismatch, "[2, ..., 3]");
  EXPECT_OXM_ERROR(nn::Linear(3, 2, {.replicas = 3, .replica_generators = &gens}), InvalidArgument,
                   "2 generators for 3 replicas");
  EXPECT_OXM_ERROR(nn::Linear(3, 2, {.replicas = -1}), InvalidArgument, "replicas must be >= 0");
  EXPECT_OXM_ERROR(nn::ReplicaGenerators(0, 1), InvalidArgument, "replicas");
  // the same input for every replica: a broadcast view, no copy
  const Tensor x = randn({5, 3}, 2);
  const Tensor y = l.forward(x.unsqueeze(0).expand({2, 5, 3}));
  EXPECT_EQ(y.shape(), Shape({2, 5, 2}));
}
