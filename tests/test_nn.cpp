// nn: functional forms against direct f64 loops and gradcheck; modules' contracts; convergence.
#include <oxmera/nn.hpp>

#include "test_util.hpp"

using namespace oxt;
namespace F = oxmera::nn::functional;
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
}

// Direct convolution: out[n, o, y, z] = b[o] + sum_{c in group, i, j} w[o, c, i, j] x[n, g*Cg + c, y*s - p + i*d, ...]
std::vector<double> conv_ref(const Tensor& x, const Tensor& w, const Tensor& b, Pair s, Pair p, Pair d, int64_t G,
                             Shape* out_shape) {
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  const int64_t O = w.shape()[0], Cg = w.shape()[1], KH = w.shape()[2], KW = w.shape()[3];
  const int64_t OH = (H + 2 * p[0] - d[0] * (KH - 1) - 1) / s[0] + 1,
                OW = (W + 2 * p[1] - d[1] * (KW - 1) - 1) / s[1] + 1;
  *out_shape = {N, O, OH, OW};
  auto xv = values(x), wv = values(w);
  std::vector<double> bv = b.defined() ? values(b) : std::vector<double>(O, 0.0);
  std::vector<double> out(static_cast<size_t>(N * O * OH * OW));
  const int64_t Og = O / G;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t y = 0; y < OH; ++y)
        for (int64_t z = 0; z < OW; ++z) {
          double acc = bv[o];
          const int64_t g = o / Og;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t i = 0; i < KH; ++i)
              for (int64_t j = 0; j < KW; ++j) {
                int64_t h = y * s[0] - p[0] + i * d[0], ww = z * s[1] - p[1] + j * d[1];
                if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
                acc += wv[((o * Cg + c) * KH + i) * KW + j] * xv[((n * C + g * Cg + c) * H + h) * W + ww];
              }
          out[((n * O + o) * OH + y) * OW + z] = acc;
        }
  (void)C;
  return out;
}
}  // namespace

TEST(Conv2d, AgainstDirectLoopWithStridePaddingDilationGroups) {
  struct Case {
    Shape x, w;
    Pair s, p, d;
    int64_t g;
  };
  const std::vector<Case> cases = {{{2, 3, 7, 6}, {4, 3, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1},
                                   {{1, 2, 8, 8}, {3, 2, 3, 2}, {2, 1}, {1, 2}, {1, 1}, 1},
                                   {{2, 4, 9, 9}, {6, 2, 3, 3}, {1, 2}, {2, 1}, {2, 1}, 2},
                                   {{1, 4, 5, 5}, {4, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 4},
                                   {{3, 1, 4, 4}, {2, 1, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1}};
  uint64_t seed = 1;
  for (const auto& c : cases) {
    Tensor x = u64(c.x, ++seed, false), w = u64(c.w, ++seed, false), b = u64({c.w[0]}, ++seed, false);
    Shape so;
    auto want = conv_ref(x, w, b, c.s, c.p, c.d, c.g, &so);
    Tensor y = F::conv2d(x, w, b, c.s, c.p, c.d, c.g);
    ASSERT_EQ(y.shape(), so);
    expect_close(values(y), want, 1e-12, 1e-12, "conv2d " + c.x.str() + " * " + c.w.str());
    // f32 through the module path's kernel.
    Tensor y32 = F::conv2d(x.to(DType::F32), w.to(DType::F32), b.to(DType::F32), c.s, c.p, c.d, c.g);
    expect_close(values(y32), want, 1e-5, 1e-5, "conv2d f32");
  }
  Tensor x = u64({1, 2, 5, 5}, 40), w = u64({4, 1, 3, 3}, 41), b = u64({4}, 42);
  expect_gc(
      [](const std::vector<Tensor>& v) {
        return F::conv2d(v[0], v[1], v[2], {2, 1}, {1, 1}, {1, 2}, 2);
      },
      {x, w, b}, "conv2d groups/stride/dilation");
  EXPECT_OXM_ERROR(F::conv2d(x, u64({4, 3, 3, 3}, 1, false)), ShapeMismatch, "channels");
  EXPECT_OXM_ERROR(F::conv2d(x, u64({3, 1, 3, 3}, 1, false), {}, {1, 1}, {0, 0}, {1, 1}, 2), InvalidArgument,
                   "divisible");
  EXPECT_OXM_ERROR(F::conv2d(x, u64({4, 2, 7, 7}, 1, false)), InvalidArgument, "smaller than");
  EXPECT_OXM_ERROR(F::conv2d(u64({2, 5, 5}, 1, false), w), ShapeMismatch, "4-d");
}

TEST(Unfold, MatchesTorchLayout) {
  Tensor x = arange(0.0, 16.0, 1.0, DType::F64).reshape({1, 1, 4, 4});
  Tensor cols = F::unfold(x, {2, 2}, {1, 1}, {0, 0}, {2, 2});
  EXPECT_EQ(cols.shape(), Shape({1, 4, 4}));
  // Row (i, j) of the kernel, column = window position.
  EXPECT_EQ(cols.to_vector<double>(), std::vector<double>({0, 2, 8, 10, 1, 3, 9, 11, 4, 6, 12, 14, 5, 7, 13, 15}));
  Tensor t = u64({2, 3, 5, 4}, 3);
  expect_gc(
      [](const std::vector<Tensor>& v) {
        return F::unfold(v[0].transpose(2, 3), {2, 3}, {1, 1}, {1, 0}, {1, 2});
      },
      {t}, "unfold (strided input)");
}

TEST(Pooling, MaxAndAvgAgainstLoops) {
  Tensor x = u64({2, 3, 6, 5}, 7, false);
  auto xv = values(x);
  Tensor mp = F::max_pool2d(x, {2, 2});
  ASSERT_EQ(mp.shape(), Shape({2, 3, 3, 2}));
  Tensor ap = F::avg_pool2d(x, {3, 2}, {1, 1}, {1, 1});
  ASSERT_EQ(ap.shape(), Shape({2, 3, 6, 6}));
  Tensor ap2 = F::avg_pool2d(x, {3, 2}, {1, 1}, {1, 1}, false);
  auto mv = values(mp), av = values(ap), av2 = values(ap2);
  for (int64_t nc = 0; nc < 6; ++nc) {
    for (int64_t y = 0; y < 3; ++y)
      for (int64_t z = 0; z < 2; ++z) {
        double m = -INFINITY;
        for (int i = 0; i < 2; ++i)
          for (int j = 0; j < 2; ++j) m = std::max(m, xv[nc * 30 + (2 * y + i) * 5 + 2 * z + j]);
        EXPECT_EQ(mv[nc * 6 + y * 2 + z], m);
      }
    for (int64_t y = 0; y < 6; ++y)
      for (int64_t z = 0; z < 6; ++z) {
        double s = 0;
        int cnt = 0;
        for (int i = 0; i < 3; ++i)
          for (int j = 0; j < 2; ++j) {
            int64_t h = y - 1 + i, w = z - 1 + j;
            if (h < 0 || h >= 6 || w < 0 || w >= 5) continue;
            s += xv[nc * 30 + h * 5 + w];
            ++cnt;
          }
        EXPECT_NEAR(av[nc * 36 + y * 6 + z], s / 6.0, 1e-12);
        EXPECT_NEAR(av2[nc * 36 + y * 6 + z], s / cnt, 1e-12);
      }
  }
  Tensor g = u64({1, 2, 4, 5}, 8);
  expect_gc(
      [](const std::vector<Tensor>& v) {
        return F::max_pool2d(v[0], {2, 2}, {1, 2}, {1, 1});
      },
      {g}, "max_pool2d");
  expect_gc(
      [](const std::vector<Tensor>& v) {
        return F::avg_pool2d(v[0], {2, 3}, {2, 1}, {1, 1}, false);
      },
      {g}, "avg_pool2d");
  EXPECT_OXM_ERROR(F::max_pool2d(x, {2, 2}, {0, 0}, {2, 2}), InvalidArgument, "half the kernel");
}

// torch's max_pool2d(return_indices=True) rule as a loop: the first in-image tap of the window is held and a later
// one (row-major) replaces it when greater or NaN; index h * W + w; a window without in-image taps: -inf, -1.
void max_pool_ref(const Tensor& x, Pair k, Pair s, Pair p, Pair d, std::vector<double>& out, std::vector<int64_t>& idx,
                  Shape& shape) {
  if (s[0] == 0 && s[1] == 0) s = k;  // torch's default stride
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  const int64_t OH = (H + 2 * p[0] - d[0] * (k[0] - 1) - 1) / s[0] + 1,
                OW = (W + 2 * p[1] - d[1] * (k[1] - 1) - 1) / s[1] + 1;
  shape = {N, C, OH, OW};
  const std::vector<double> xv = values(x.contiguous());
  out.clear();
  idx.clear();
  for (int64_t nc = 0; nc < N * C; ++nc)
    for (int64_t y = 0; y < OH; ++y)
      for (int64_t z = 0; z < OW; ++z) {
        double best = -INFINITY;
        int64_t at = -1;
        for (int64_t i = 0; i < k[0]; ++i)
          for (int64_t j = 0; j < k[1]; ++j) {
            const int64_t h = y * s[0] - p[0] + i * d[0], w = z * s[1] - p[1] + j * d[1];
            if (h < 0 || h >= H || w < 0 || w >= W) continue;
            const double v = xv[static_cast<size_t>(nc * H * W + h * W + w)];
            if (at < 0 || v > best || std::isnan(v)) {
              best = v;
              at = h * W + w;
            }
          }
        out.push_back(best);
        idx.push_back(at);
      }
}

TEST(Pooling, MaxPool2dWithIndicesFollowsTorchsRule) {
  struct Case {
    Shape shape;
    Pair k, s, p, d;
  };
  const std::vector<Case> cases = {{{2, 3, 6, 5}, {2, 2}, {0, 0}, {0, 0}, {1, 1}},
                                   {{1, 2, 7, 6}, {3, 2}, {2, 1}, {1, 1}, {1, 1}},
                                   {{2, 2, 9, 8}, {3, 3}, {1, 2}, {1, 1}, {2, 2}},
                                   {{1, 2, 5, 7}, {2, 4}, {3, 1}, {1, 2}, {1, 1}},
                                   {{1, 1, 1, 3}, {2, 2}, {1, 1}, {1, 1}, {2, 1}}};
  for (DType dt : {DType::F32, DType::F64})
    for (const Case& c : cases)
      for (int kind = 0; kind < 3; ++kind) {  // distinct values, ties, ties with NaN and -inf
        std::vector<double> v = values(rand(c.shape, 31, DType::F64) * 6.0 - 3.0);
        for (size_t i = 0; i < v.size(); ++i) {
          if (kind > 0) v[i] = std::round(v[i]);
          if (kind == 2 && i % 5 == 2) v[i] = NAN;
          if (kind == 2 && i % 7 == 4) v[i] = -INFINITY;
        }
        Tensor x = from_vector<double>(v, c.shape).to(dt).requires_grad_();
        const std::string what = std::string(dt == DType::F64 ? "f64" : "f32") + " " + std::to_string(c.shape[2]) +
                                 "x" + std::to_string(c.shape[3]) + " kind " + std::to_string(kind);
        std::vector<double> want;
        std::vector<int64_t> want_idx;
        Shape shape;
        max_pool_ref(x.detach(), c.k, c.s, c.p, c.d, want, want_idx, shape);
        auto [out, idx] = F::max_pool2d_with_indices(x, c.k, c.s, c.p, c.d);
        ASSERT_EQ(out.shape(), shape) << what;
        ASSERT_EQ(idx.dtype(), DType::I64);
        EXPECT_FALSE(idx.requires_grad());
        const std::vector<double> got = values(out);
        for (size_t i = 0; i < want.size(); ++i) {
          if (std::isnan(want[i]))
            EXPECT_TRUE(std::isnan(got[i])) << what << " at " << i;
          else
            EXPECT_EQ(got[i], want[i]) << what << " at " << i;
        }
        EXPECT_EQ(idx.to_vector<int64_t>(), want_idx) << what;
        EXPECT_EQ(bits(F::max_pool2d(x, c.k, c.s, c.p, c.d)), bits(out)) << what;
        // The gradient: each output's seed at its index (empty windows: nowhere), summed where windows overlap.
        Tensor gy = rand(shape, 32, DType::F64).to(dt);
        (out * gy).sum().backward();
        const int64_t HW = c.shape[2] * c.shape[3], L = shape[2] * shape[3];
        std::vector<double> gx(static_cast<size_t>(x.numel()), 0.0);
        const std::vector<double> gv = values(gy);
        for (size_t l = 0; l < want_idx.size(); ++l)
          if (want_idx[l] >= 0) gx[static_cast<size_t>(static_cast<int64_t>(l) / L * HW + want_idx[l])] += gv[l];
        expect_close(values(x.grad()), gx, 1e-6, 1e-6, "max_pool2d gradient " + what);
      }
}

TEST(Pooling, MaxPool2dGradcheckEmptyBatchAndErrors) {
  Tensor g = u64({2, 2, 6, 5}, 33);
  expect_gc(
      [](const std::vector<Tensor>& v) {
        return F::max_pool2d(v[0], {3, 2}, {2, 1}, {1, 1}, {1, 2});
      },
      {g}, "max_pool2d dilation");
  expect_gc(
      [](const std::vector<Tensor>& v) {
        return F::max_pool2d(v[0].transpose(2, 3), {2, 3}, {1, 1});
      },
      {g}, "max_pool2d strided input, overlapping windows");
  // create_graph: the gradient is recorded (a scatter by the indices), so gradgradcheck sees the seed's path.
  GradcheckResult r = gradgradcheck(
      [](const std::vector<Tensor>& v) {
        return F::max_pool2d(v[0], {2, 2}, {1, 2}, {1, 1}).square();
      },
      {g});
  EXPECT_TRUE(r.ok) << r.message;
  // Windows entirely in the padding (-inf outputs): no gradient, with and without create_graph.
  for (bool create_graph : {false, true}) {
    Tensor w = u64({1, 1, 1, 3}, 34);
    Tensor y = F::max_pool2d(w, {2, 2}, {1, 1}, {1, 1}, {2, 2});
    ASSERT_EQ(y.shape(), Shape({1, 1, 1, 3}));
    Tensor seed = ones_like(y).requires_grad_(create_graph);  // the recorded gradient depends on it
    std::vector<Tensor> gw = autograd::grad({y}, {w}, {seed}, false, create_graph);
    EXPECT_EQ(values(gw[0]), std::vector<double>(3, 0.0));
    EXPECT_EQ(gw[0].requires_grad(), create_graph);
  }
  // An empty batch: an empty output, and a zero gradient of x's shape.
  Tensor e = zeros({0, 3, 6, 6}, DType::F64).requires_grad_();
  auto [eo, ei] = F::max_pool2d_with_indices(e, {2, 2});
  EXPECT_EQ(eo.shape(), Shape({0, 3, 3, 3}));
  EXPECT_EQ(ei.shape(), Shape({0, 3, 3, 3}));
  eo.sum().backward();
  EXPECT_EQ(e.grad().shape(), e.shape());
  // Writing the returned indices in place before backward is an error (they are saved), as in torch.
  Tensor x = u64({1, 1, 4, 4}, 35);
  auto [y, yi] = F::max_pool2d_with_indices(x, {2, 2});
  yi.fill_(0.0);
  EXPECT_OXM_ERROR(y.sum().backward(), InvalidArgument, "max_pool2d");
  Tensor f = u64({1, 1, 4, 4}, 36, false);
  EXPECT_OXM_ERROR(F::max_pool2d(f.reshape({4, 4}), {2, 2}), ShapeMismatch, "max_pool2d");
  EXPECT_OXM_ERROR(F::max_pool2d(f.to(DType::I64), {2, 2}), UnsupportedDType, "max_pool2d");
  EXPECT_OXM_ERROR(F::max_pool2d(f, {0, 2}), InvalidArgument, "kernel size");
  EXPECT_OXM_ERROR(F::max_pool2d(f, {2, 2}, {1, -1}), InvalidArgument, "stride");
  EXPECT_OXM_ERROR(F::max_pool2d(f, {2, 2}, {1, 1}, {0, 0}, {1, 0}), InvalidArgument, "dilation");
  EXPECT_OXM_ERROR(F::max_pool2d(f, {2, 2}, {1, 1}, {0, 2}), InvalidArgument, "half the kernel");
  EXPECT_OXM_ERROR(F::max_pool2d(f, {5, 2}), InvalidArgument, "smaller than the kernel");
}

TEST(Norms, LayerNormAndBatchNorm) {
  Tensor x = u64({4, 3, 5}, 11, false);
  Tensor w = u64({5}, 12, false), b = u64({5}, 13, false);
  Tensor y = F::layer_norm(x, {5}, w, b);
  auto xv = values(x), yv = values(y), wv = values(w), bv = values(b);
  for (int64_t r = 0; r < 12; ++r) {
    double m = 0, v = 0;
    for (int k = 0; k < 5; ++k) m += xv[r * 5 + k] / 5;
    for (int k = 0; k < 5; ++k) v += (xv[r * 5 + k] - m) * (xv[r * 5 + k] - m) / 5;
    for (int k = 0; k < 5; ++k)
      EXPECT_NEAR(yv[r * 5 + k], (xv[r * 5 + k] - m) / std::sqrt(v + 1e-5) * wv[k] + bv[k], 1e-12);
  }
  Tensor xg = u64({3, 2, 4}, 14), wg = u64({2, 4}, 15), bg = u64({2, 4}, 16);
  expect_gc(
      [](const std::vector<Tensor>& v) {
        return F::layer_norm(v[0], {2, 4}, v[1], v[2]);
      },
      {xg, wg, bg}, "layer_norm");

  Tensor bx = u64({4, 2, 3, 3}, 17);
  Tensor rm = zeros({2}, DType::F64), rv = ones({2}, DType::F64);
  Tensor out = F::batch_norm(bx.detach(), rm, rv, {}, {}, true, 0.1, 1e-5);
  auto bxv = values(bx);
  for (int c = 0; c < 2; ++c) {
    double m = 0, v = 0;
    int n = 0;
    for (int i = 0; i < 4; ++i)
      for (int k = 0; k < 9; ++k, ++n) m += bxv[(i * 2 + c) * 9 + k];
    m /= n;
    for (int i = 0; i < 4; ++i)
      for (int k = 0; k < 9; ++k) v += std::pow(bxv[(i * 2 + c) * 9 + k] - m, 2);
    EXPECT_NEAR(values(rm)[c], 0.1 * m, 1e-12);
    EXPECT_NEAR(values(rv)[c], 0.9 + 0.1 * v / (n - 1), 1e-12);  // unbiased for the running variance
    EXPECT_NEAR(values(out)[(0 * 2 + c) * 9], (bxv[c * 9] - m) / std::sqrt(v / n + 1e-5), 1e-9);
  }
  Tensor bw = u64({2}, 18), bb = u64({2}, 19);
  expect_gc([](const std::vector<Tensor>& v) { return F::batch_norm(v[0], {}, {}, v[1], v[2], true); }, {bx, bw, bb},
            "batch_norm training");
  Tensor ev = F::batch_norm(bx.detach(), rm, rv, {}, {}, false);
  EXPECT_NEAR(values(ev)[0], (bxv[0] - values(rm)[0]) / std::sqrt(values(rv)[0] + 1e-5), 1e-12);
}

TEST(Modules, LinearParametersNamesAndDTypes) {
  Generator gen(3);
  auto net = std::make_shared<nn::Sequential>(
      std::initializer_list<nn::ModulePtr>{std::make_shared<nn::Linear>(4, 8, true, gen), std::make_shared<nn::Tanh>(),
                                           std::make_shared<nn::Linear>(8, 2, false, gen)});
  auto named = net->named_parameters();
  ASSERT_EQ(named.size(), 3u);
  EXPECT_EQ(named[0].first, "0.weight");
  EXPECT_EQ(named[1].first, "0.bias");
  EXPECT_EQ(named[2].first, "2.weight");
  EXPECT_EQ(named[0].second.shape(), Shape({8, 4}));
  for (auto& p : net->parameters()) {
    EXPECT_TRUE(p.requires_grad());
    EXPECT_EQ(p.dtype(), DType::F32);
  }
  // Default init bounds: U(+-1/sqrt(fan_in)).
  EXPECT_LE(named[0].second.abs().max().item<float>(), 0.5f);
  Tensor x = randn({5, 4}, 1);
  Tensor y = (*net)(x);
  EXPECT_EQ(y.shape(), Shape({5, 2}));
  auto& l0 = static_cast<nn::Linear&>((*net)[0]);
  expect_close(values(nn::functional::linear(x, l0.weight, l0.bias)), values(x.matmul(l0.weight.t()) + l0.bias), 0, 0,
               "linear");
  y.sum().backward();
  EXPECT_TRUE(l0.weight.grad().defined());
  EXPECT_TRUE(named[0].second.grad().defined());  // same handle as the module's member
  net->zero_grad();
  EXPECT_FALSE(l0.weight.grad().defined());
  EXPECT_OXM_ERROR((*net)(x.to(DType::F64)), DTypeMismatch, "Linear: input has dtype f64");
  EXPECT_OXM_ERROR(nn::Linear(0, 2), InvalidArgument, "in_features");
  EXPECT_OXM_ERROR((*net)(randn({5, 3}, 1)), ShapeMismatch, "linear");
  net->eval();
  EXPECT_FALSE((*net)[2].is_training());
  net->train();
  EXPECT_TRUE((*net)[2].is_training());
  net->to(Device::cpu());
  if (!device_available(Device::cuda())) EXPECT_OXM_ERROR(net->to(Device::cuda()), BackendUnavailable, "cuda");
  // Same seed, same initial parameters.
  Generator g1(9), g2(9);
  EXPECT_EQ(nn::Linear(3, 3, true, g1).weight.to_vector<float>(), nn::Linear(3, 3, true, g2).weight.to_vector<float>());
}

TEST(Modules, EmbeddingDropoutBatchNormLayerNorm) {
  Generator gen(5);
  nn::Embedding emb(10, 3, gen);
  Tensor idx = from_vector<int64_t>({1, 7, 1}, {3});
  Tensor e = emb(idx);
  EXPECT_EQ(e.shape(), Shape({3, 3}));
  e.sum().backward();
  auto gv = emb.weight.grad().to_vector<float>();
  EXPECT_EQ(gv[3], 2.0f);  // row 1 used twice
  EXPECT_EQ(gv[0], 0.0f);
  EXPECT_OXM_ERROR(emb(from_vector<int64_t>({10}, {1})), IndexOutOfBounds, "index 10");
  EXPECT_OXM_ERROR(emb(ones({2})), DTypeMismatch, "i64");

  nn::Dropout drop(0.25, 42);
  Tensor ones_x = ones({100000});
  Tensor d = drop(ones_x);
  double frac_zero = (d.eq(zeros_like(d))).mean().item<float>();
  EXPECT_NEAR(frac_zero, 0.25, 0.01);
  EXPECT_NEAR(d.mean().item<float>(), 1.0, 0.02);  // inverted: expectation preserved
  drop.eval();
  EXPECT_TRUE(drop(ones_x).is_same(ones_x));
  nn::Dropout a(0.5, 1), b(0.5, 1);
  EXPECT_EQ(a(ones({64})).to_vector<float>(), b(ones({64})).to_vector<float>());

  nn::BatchNorm2d bn(3);
  EXPECT_EQ(bn.named_buffers().size(), 3u);  // running_mean, running_var, num_batches_tracked
  EXPECT_EQ(bn.named_buffers()[0].first, "running_mean");
  Tensor x = randn({4, 3, 2, 2}, 6) * 3.0 + 1.0;
  Tensor yb = bn(x);
  EXPECT_NEAR(yb.mean().item<float>(), 0.0, 1e-5);
  EXPECT_GT(bn.running_mean.abs().sum().item<float>(), 0.0f);
  bn.eval();
  Tensor ye = bn(x);
  EXPECT_FALSE(ye.to_vector<float>() == yb.to_vector<float>());

  nn::LayerNorm ln({2, 2});
  EXPECT_NEAR(ln(x).mean({2, 3}).abs().max().item<float>(), 0.0, 1e-5);
}

TEST(Init, BoundsAndStatistics) {
  Generator gen(1);
  Tensor w = empty({256, 128});
  nn::init::kaiming_uniform_(w, gen, 0.0, nn::init::FanMode::FanIn, nn::init::Nonlinearity::ReLU);
  double bound = std::sqrt(2.0) * std::sqrt(3.0 / 128);
  EXPECT_LE(w.abs().max().item<float>(), bound);
  EXPECT_GT(w.abs().max().item<float>(), 0.9 * bound);
  nn::init::xavier_normal_(w, gen);
  double sd = std::sqrt((w * w).mean().item<float>());
  EXPECT_NEAR(sd, std::sqrt(2.0 / (256 + 128)), 0.005);
  nn::init::kaiming_normal_(w, gen, 0.0, nn::init::FanMode::FanOut, nn::init::Nonlinearity::ReLU);
  EXPECT_NEAR(std::sqrt((w * w).mean().item<float>()), std::sqrt(2.0 / 256), 0.005);
  nn::init::zeros_(w);
  EXPECT_EQ(w.abs().sum().item<float>(), 0.0f);
  nn::init::ones_(w);
  EXPECT_EQ(w.sum().item<float>(), 256.0f * 128.0f);
  Tensor v = empty({3});
  EXPECT_OXM_ERROR(nn::init::xavier_uniform_(v, gen), InvalidArgument, "at least 2 dims");
  auto [fi, fo] = nn::init::fan_in_and_fan_out(empty({8, 4, 3, 3}));
  EXPECT_EQ(fi, 36);
  EXPECT_EQ(fo, 72);
}

namespace {
// Plain SGD over module parameters (the optim module has its own tests).
void sgd_step(nn::Module& m, double lr) {
  NoGradGuard ng;
  for (auto& p : m.parameters())
    if (p.grad().defined()) p.add_(p.grad(), -lr);
}
Tensor xent(const Tensor& logits, const Tensor& targets) {
  return -(logits.log_softmax(1) * one_hot(targets, logits.shape()[1])).sum({1}).mean();
}
}  // namespace

TEST(Convergence, XorWithAnMlp) {
  Generator gen(11);
  nn::Sequential net{std::make_shared<nn::Linear>(2, 8, true, gen), std::make_shared<nn::Tanh>(),
                     std::make_shared<nn::Linear>(8, 2, true, gen)};
  Tensor x = from_vector<float>({0, 0, 0, 1, 1, 0, 1, 1}, {4, 2});
  Tensor t = from_vector<int64_t>({0, 1, 1, 0}, {4});
  double first = 0, last = 0;
  for (int it = 0; it < 500; ++it) {
    Tensor loss = xent(net(x), t);
    if (it == 0) first = loss.item<float>();
    last = loss.item<float>();
    net.zero_grad();
    loss.backward();
    sgd_step(net, 0.5);
  }
  EXPECT_LT(last, 0.05);
  EXPECT_LT(last, first / 10);
  NoGradGuard ng;
  EXPECT_EQ(net(x).argmax(1).to_vector<int64_t>(), t.to_vector<int64_t>());
}

TEST(Convergence, SmallCnnLearnsASyntheticImageTask) {
  // 8x8 images with a bright 2x2 blob in the left (class 0) or right (class 1) half, plus noise.
  const int64_t n = 64;
  Generator data_gen(21);
  std::vector<float> pix(static_cast<size_t>(n * 64));
  std::vector<int64_t> cls(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    cls[i] = i % 2;
    int64_t r = static_cast<int64_t>(data_gen.next_double() * 7), c = static_cast<int64_t>(data_gen.next_double() * 3);
    if (cls[i]) c += 4;
    for (int64_t k = 0; k < 64; ++k) pix[i * 64 + k] = static_cast<float>(0.1 * data_gen.next_normal());
    for (int dy = 0; dy < 2; ++dy)
      for (int dx = 0; dx < 2; ++dx) pix[i * 64 + (r + dy) * 8 + c + dx] += 1.0f;
  }
  Tensor x = from_vector(pix, {n, 1, 8, 8});
  Tensor t = from_vector(cls, {n});
  Generator gen(22);
  nn::Conv2dOptions co;
  co.padding = {1, 1};
  nn::Sequential net{std::make_shared<nn::Conv2d>(1, 4, Pair{3, 3}, co, gen), std::make_shared<nn::ReLU>(),
                     std::make_shared<nn::MaxPool2d>(Pair{2, 2}), std::make_shared<nn::Flatten>(),
                     std::make_shared<nn::Linear>(4 * 4 * 4, 2, true, gen)};
  double first = 0, last = 0;
  for (int it = 0; it < 150; ++it) {
    Tensor loss = xent(net(x), t);
    if (it == 0) first = loss.item<float>();
    last = loss.item<float>();
    net.zero_grad();
    loss.backward();
    sgd_step(net, 0.3);
  }
  EXPECT_LT(last, first / 10) << "first " << first << " last " << last;
}
