// Higher-order gradients (create_graph = true): the engine records backward rules, saved tensors come back with
// their histories, and the results match closed forms, finite differences of first derivatives, and each other.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "autograd/node.hpp"
#include "oxmera/oxmera.hpp"
#include "test_util.hpp"

using namespace oxmera;

namespace {

Tensor scalar64(double v) { return from_vector<double>({v}, Shape{}).requires_grad_(true); }

TEST(HigherOrder, DerivativesOfACubeToThirdOrder) {
  Tensor x = scalar64(1.5);
  Tensor y = x * x * x;
  Tensor d1 = autograd::grad({y}, {x}, {}, false, true)[0];
  EXPECT_NEAR(d1.item<double>(), 3 * 1.5 * 1.5, 1e-12);
  ASSERT_TRUE(d1.requires_grad());
  Tensor d2 = autograd::grad({d1}, {x}, {}, false, true)[0];
  EXPECT_NEAR(d2.item<double>(), 6 * 1.5, 1e-12);
  Tensor d3 = autograd::grad({d2}, {x}, {}, false, true)[0];
  EXPECT_NEAR(d3.item<double>(), 6.0, 1e-12);
}

TEST(HigherOrder, TranscendentalChainsMatchClosedForms) {
  // d2/dx2 tanh(x) = -2 tanh(x) (1 - tanh^2); d2/dx2 exp(sin x) = exp(sin x)(cos^2 x - sin x).
  const double v = 0.7;
  Tensor x = scalar64(v);
  Tensor g = autograd::grad({x.tanh()}, {x}, {}, false, true)[0];
  Tensor h = autograd::grad({g}, {x}, {})[0];
  const double t = std::tanh(v);
  EXPECT_NEAR(h.item<double>(), -2 * t * (1 - t * t), 1e-12);
  Tensor x2 = scalar64(v);
  Tensor g2 = autograd::grad({x2.sin().exp()}, {x2}, {}, false, true)[0];
  Tensor h2 = autograd::grad({g2}, {x2}, {})[0];
  EXPECT_NEAR(h2.item<double>(), std::exp(std::sin(v)) * (std::cos(v) * std::cos(v) - std::sin(v)), 1e-12);
}

TEST(HigherOrder, BackwardWithCreateGraphGivesADifferentiableGrad) {
  Tensor x = from_vector<double>({0.5, -1.0, 2.0}, Shape{3}).requires_grad_(true);
  Tensor y = (x * x * x).sum();
  y.backward(Tensor(), false, true);
  Tensor g = x.grad();
  ASSERT_TRUE(g.defined());
  EXPECT_TRUE(g.requires_grad()) << "create_graph: .grad has a history";
  oxt::expect_close(g.to_vector<double>(), {0.75, 3.0, 12.0}, 1e-12, 1e-12, "first derivative");
  x.zero_grad();
  g.sum().backward();  // d/dx sum(3x^2) = 6x
  oxt::expect_close(x.grad().to_vector<double>(), {3.0, -6.0, 12.0}, 1e-12, 1e-12, "second derivative");
}

TEST(HigherOrder, HessianVectorProductOfAnMlpLossMatchesFiniteDifferences) {
  Generator gen(3);
  Tensor X = randn({8, 2}, gen, DType::F64);
  Tensor W1 = (randn({2, 6}, gen, DType::F64) * 0.7).requires_grad_(true);
  Tensor W2 = (randn({6, 1}, gen, DType::F64) * 0.7).requires_grad_(true);
  Tensor v1 = randn({2, 6}, gen, DType::F64), v2 = randn({6, 1}, gen, DType::F64);
  auto loss = [&](const Tensor& a, const Tensor& b) { return X.matmul(a).tanh().matmul(b).sigmoid().square().mean(); };
  std::vector<Tensor> g = autograd::grad({loss(W1, W2)}, {W1, W2}, {}, false, true);
  Tensor gv = (g[0] * v1).sum() + (g[1] * v2).sum();
  std::vector<Tensor> hv = autograd::grad({gv}, {W1, W2});
  // (grad(w + e v) - grad(w - e v)) / 2e
  const double e = 1e-5;
  auto grads_at = [&](double s) {
    Tensor a = (W1.detach() + v1 * s).requires_grad_(true), b = (W2.detach() + v2 * s).requires_grad_(true);
    return autograd::grad({loss(a, b)}, {a, b});
  };
  std::vector<Tensor> gp = grads_at(e), gm = grads_at(-e);
  for (int i = 0; i < 2; ++i) {
    Tensor fd = (gp[i] - gm[i]) / (2 * e);
    oxt::expect_close(hv[i].to_vector<double>(), fd.to_vector<double>(), 1e-6, 1e-8, "Hv block");
  }
}

TEST(HigherOrder, GradgradcheckPassesOnCompositions) {
  Generator gen(5);
  Tensor a = randn({3, 4}, gen, DType::F64).requires_grad_(true);
  Tensor b = randn({4, 2}, gen, DType::F64).requires_grad_(true);
  auto f = [](const std::vector<Tensor>& v) {
    Tensor h = v[0].matmul(v[1]).gelu();
    return h.softmax(1).log() + h.slice(0, 1, 3).sum({0}, true).sin() + h.diagonal().sum();
  };
  GradcheckResult r = gradgradcheck(f, {a, b});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(HigherOrder, GradgradcheckDetectsAWrongSecondDerivative) {
  // A custom-looking op whose first derivative is right but whose backward drops its dependence on x: a
  // hook replacing the gradient by a detached copy makes the second derivative wrong, and gradgradcheck says so.
  Tensor x = from_vector<double>({0.3, -0.4}, Shape{2}).requires_grad_(true);
  auto f = [](const std::vector<Tensor>& v) {
    Tensor y = v[0] * 1.0;
    if (y.requires_grad()) y.register_hook([](const Tensor& g) { return g.detach() + g * 0.0; });
    return (y * y * y).sum();
  };
  EXPECT_TRUE(gradcheck(f, {x}).ok);
  GradcheckResult r = gradgradcheck(f, {x});
  EXPECT_FALSE(r.ok) << r.message;
}

TEST(HigherOrder, GradgradcheckOfConv2dThroughUnfold) {
  Generator gen(11);
  Tensor x = randn({1, 2, 4, 4}, gen, DType::F64).requires_grad_(true);
  Tensor w = randn({2, 2, 3, 3}, gen, DType::F64).requires_grad_(true);
  auto f = [](const std::vector<Tensor>& v) { return nn::functional::conv2d(v[0], v[1], {}, {1, 1}, {1, 1}).tanh(); };
  GradcheckResult r = gradgradcheck(f, {x, w});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(HigherOrder, GradgradcheckOfFusedLayerNorm) {
  // layer_norm runs the fused kernels; with create_graph its backward is recorded ops (x, weight and bias).
  Generator gen(12);
  Tensor x = randn({3, 2, 4}, gen, DType::F64).requires_grad_(true);
  Tensor w = randn({2, 4}, gen, DType::F64).requires_grad_(true),
         b = randn({2, 4}, gen, DType::F64).requires_grad_(true);
  auto f = [](const std::vector<Tensor>& v) { return nn::functional::layer_norm(v[0], {2, 4}, v[1], v[2]).tanh(); };
  GradcheckResult r = gradgradcheck(f, {x, w, b});
  EXPECT_TRUE(r.ok) << r.message;
  auto g = [](const std::vector<Tensor>& v) { return nn::functional::layer_norm(v[0], {4}).square(); };
  r = gradgradcheck(g, {x});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(HigherOrder, GradgradcheckOfFusedLinear) {
  // linear is one fused node (the GEMM written over the bias rows); with create_graph its backward is recorded
  // matmuls and a sum. A 3-d input (folded into rows), a 1-d one, with and without a bias, a transposed weight.
  Generator gen(13);
  Tensor x = randn({2, 3, 4}, gen, DType::F64).requires_grad_(true);
  Tensor v = randn({4}, gen, DType::F64).requires_grad_(true);
  Tensor w = randn({5, 4}, gen, DType::F64).requires_grad_(true);
  Tensor wt = randn({4, 5}, gen, DType::F64).requires_grad_(true);
  Tensor b = randn({5}, gen, DType::F64).requires_grad_(true);
  auto f = [](const std::vector<Tensor>& a) { return nn::functional::linear(a[0], a[1], a[2]).tanh(); };
  GradcheckResult r = gradgradcheck(f, {x, w, b});
  EXPECT_TRUE(r.ok) << r.message;
  r = gradgradcheck(f, {v, w, b});
  EXPECT_TRUE(r.ok) << r.message;
  auto g = [](const std::vector<Tensor>& a) { return nn::functional::linear(a[0], a[1].t()).square(); };
  r = gradgradcheck(g, {x, wt});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(HigherOrder, MamlInnerStepDifferentiatesThroughTheUpdate) {
  // theta' = theta - a dL/dtheta; outer = L(theta'); d outer / d theta = (I - a H) dL/dtheta(theta').
  // For L(t) = sum(t^4)/4: dL = t^3, H = diag(3 t^2).
  const double a = 0.1;
  Tensor th = from_vector<double>({0.5, -1.2}, Shape{2}).requires_grad_(true);
  auto L = [](const Tensor& t) { return (t * t * t * t).sum() / 4.0; };
  Tensor g = autograd::grad({L(th)}, {th}, {}, false, true)[0];
  Tensor th2 = th - a * g;
  Tensor outer_g = autograd::grad({L(th2)}, {th})[0];
  std::vector<double> want;
  for (double t : {0.5, -1.2}) {
    const double t2 = t - a * t * t * t;
    want.push_back((1 - a * 3 * t * t) * t2 * t2 * t2);
  }
  oxt::expect_close(outer_g.to_vector<double>(), want, 1e-12, 1e-12, "MAML meta-gradient");
}

TEST(HigherOrder, CreateGraphKeepsTheGraphForAnotherBackward) {
  Tensor x = scalar64(2.0);
  Tensor y = x.exp();
  Tensor g = autograd::grad({y}, {x}, {}, false, true)[0];
  // torch's retain_graph default is create_graph: the first graph survives, for g's backward and another.
  EXPECT_NEAR(autograd::grad({g}, {x}, {}, true)[0].item<double>(), std::exp(2.0), 1e-12);
  EXPECT_NEAR(autograd::grad({y}, {x})[0].item<double>(), std::exp(2.0), 1e-12);
  // That one did not retain: g's graph goes through exp's freed output now, which is an error, as in torch.
  EXPECT_OXM_ERROR(autograd::grad({g}, {x}), InvalidArgument, "second time");
}

// A node whose rule is a kernel of its own (differentiable_backward() false, the default): no built-in op has one
// any more, so the refusal is pinned down with a test-local node.
struct KernelOnlyDoubleNode final : detail::Node {
  const char* name() const override { return "kernel_only_double"; }
  void apply(Tensor* gout, Tensor* gin) override {
    NoGradGuard ng;
    gin[0] = gout[0] * 2.0;
  }
};

TEST(HigherOrder, KernelOnlyBackwardRefusesCreateGraphWithATypedError) {
  Tensor x = from_vector<double>({0.1, 0.2}, Shape{2}).requires_grad_(true);
  Tensor y;
  {
    NoGradGuard ng;
    y = x * 2.0;
  }
  auto* n = new KernelOnlyDoubleNode();
  n->next.push_back(detail::edge_of(x));
  detail::set_history(y, n);
  Tensor loss = (y * y).sum();
  EXPECT_OXM_ERROR(autograd::grad({loss}, {x}, {}, true, true), NotImplemented, "kernel_only_double");
  oxt::expect_close(autograd::grad({loss}, {x})[0].to_vector<double>(), {0.8, 1.6}, 1e-12, 1e-12, "first order");
}

// ---------------------------------------------------------------- losses
// The fused cross entropy's create_graph rule gives the kernel's first derivative, and its Hessian-vector
// product w.r.t. the logits is the closed form scale * g_r * (p (.) v - p (p . v)) per kept row.
TEST(HigherOrderLoss, FusedCrossEntropyHessianVectorProductMatchesTheClosedForm) {
  Generator gen(21);
  Tensor x = randn({5, 4}, gen, DType::F64).requires_grad_(true);
  Tensor target = from_vector<int64_t>({1, 3, -1, 0, 2}, Shape{5});
  Tensor v = randn({5, 4}, gen, DType::F64);
  for (double ls : {0.0, 0.2}) {
    for (nn::Reduction red : {nn::Reduction::Mean, nn::Reduction::Sum}) {
      nn::CrossEntropyOptions o;
      o.label_smoothing = ls;
      o.ignore_index = -1;
      o.reduction = red;
      const std::string tag = "ls " + std::to_string(ls) + (red == nn::Reduction::Mean ? " mean" : " sum");
      Tensor first = autograd::grad({nn::cross_entropy(x, target, o)}, {x})[0];  // the kernel
      Tensor g = autograd::grad({nn::cross_entropy(x, target, o)}, {x}, {}, false, true)[0];
      ASSERT_TRUE(g.requires_grad()) << tag;
      oxt::expect_close(g.to_vector<double>(), first.to_vector<double>(), 1e-12, 1e-14, tag + " first derivative");
      Tensor hv = autograd::grad({(g * v).sum()}, {x})[0];
      Tensor p = x.detach().softmax(1);
      Tensor keep = from_vector<double>({1, 1, 0, 1, 1}, Shape{5, 1});
      const double scale = red == nn::Reduction::Mean ? 0.25 : 1.0;  // 4 kept rows
      Tensor want = (p * v - p * (p * v).sum({1}, true)) * keep * scale;
      oxt::expect_close(hv.to_vector<double>(), want.to_vector<double>(), 1e-10, 1e-12, tag + " Hv");
    }
  }
}

TEST(HigherOrderLoss, GradgradcheckOfEveryLoss) {
  Generator gen(22);
  Tensor x = randn({4, 3}, gen, DType::F64).requires_grad_(true);
  Tensor t = from_vector<int64_t>({2, 0, 1, 1}, Shape{4});
  Tensor w = (rand({3}, gen, DType::F64) + 0.5).requires_grad_(true);
  auto check = [](const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& in,
                  const std::string& what) {
    GradcheckResult r = gradgradcheck(f, in);
    EXPECT_TRUE(r.ok) << what << ": " << r.message;
  };
  for (nn::Reduction red : {nn::Reduction::Mean, nn::Reduction::Sum, nn::Reduction::None}) {
    const std::string tag = red == nn::Reduction::Mean ? " mean" : red == nn::Reduction::Sum ? " sum" : " none";
    nn::CrossEntropyOptions o;
    o.reduction = red;
    o.label_smoothing = 0.15;
    o.ignore_index = 0;
    check([&](const std::vector<Tensor>& v) { return nn::cross_entropy(v[0], t, o); }, {x},
          "fused cross_entropy, label smoothing and ignore_index" + tag);
    check(
        [&](const std::vector<Tensor>& v) {
          nn::CrossEntropyOptions ow = o;
          ow.weight = v[1];
          return nn::cross_entropy(v[0], t, ow);
        },
        {x, w}, "weighted cross_entropy" + tag);
    check([&](const std::vector<Tensor>& v) { return nn::nll_loss(v[0].log_softmax(1), t, v[1], red, 2); }, {x, w},
          "nll_loss with weight and ignore_index" + tag);
    Tensor y = randn({4, 3}, gen, DType::F64).requires_grad_(true);
    check([&](const std::vector<Tensor>& v) { return nn::mse_loss(v[0].tanh(), v[1], red); }, {x, y}, "mse_loss" + tag);
    Tensor bt = rand({4, 3}, gen, DType::F64);
    Tensor pw = (rand({3}, gen, DType::F64) + 0.5).requires_grad_(true);
    check([&](const std::vector<Tensor>& v) { return nn::binary_cross_entropy_with_logits(v[0], bt, v[1], {}, red); },
          {x, w}, "bce with logits, weight" + tag);
    check([&](const std::vector<Tensor>& v) { return nn::binary_cross_entropy_with_logits(v[0], bt, {}, v[1], red); },
          {x, pw}, "bce with logits, pos_weight" + tag);
  }
  // The fused path's one-row form, and the composite paths: class probabilities and [N, C, d] logits.
  Tensor x1 = randn({5}, gen, DType::F64).requires_grad_(true);
  check([&](const std::vector<Tensor>& v) { return nn::cross_entropy(v[0], scalar(3, DType::I64)); }, {x1},
        "cross_entropy [C]");
  Tensor probs = rand({4, 3}, gen, DType::F64).softmax(1);
  nn::CrossEntropyOptions ls;
  ls.label_smoothing = 0.1;
  check([&](const std::vector<Tensor>& v) { return nn::cross_entropy(v[0], probs, ls); }, {x},
        "cross_entropy class probabilities");
  Tensor x3 = randn({2, 3, 2}, gen, DType::F64).requires_grad_(true);
  Tensor t3 = from_vector<int64_t>({0, 2, 1, 1}, Shape{2, 2});
  check([&](const std::vector<Tensor>& v) { return nn::cross_entropy(v[0], t3, ls); }, {x3}, "cross_entropy [N, C, d]");
}

TEST(HigherOrder, FirstOrderGradientsHaveNoHistory) {
  Tensor x = from_vector<double>({0.5, 1.5}, Shape{2}).requires_grad_(true);
  Tensor g = autograd::grad({x.tanh().sum()}, {x})[0];
  EXPECT_FALSE(g.requires_grad());
  (x.exp().sum()).backward();
  EXPECT_FALSE(x.grad().requires_grad());
}

}  // namespace
namespace {
// Found by the second-derivative conformance run: reshaping a one-element view that starts at an offset read the
// storage's first element (a first-order gradient through cat + sum was wrong).
TEST(Views, ReshapeOfAOneElementViewAtAnOffsetKeepsItsElement) {
  Tensor seed = from_vector<double>({1, 2, 3, 4, 10}, Shape{5});
  Tensor t = seed.narrow(0, 4, 1).reshape({});
  EXPECT_EQ(t.reshape({1}).item<double>(), 10.0);
  EXPECT_EQ(t.reshape({1, 1}).broadcast_to({2, 3}).sum().item<double>(), 60.0);
  Tensor w = from_vector<double>({1, 2, 3, 4}, Shape{4}).requires_grad_(true);
  cat({w, w.sum().reshape({1})}, 0).backward(seed);
  oxt::expect_close(w.grad().to_vector<double>(), {11, 12, 13, 14}, 0, 0, "gradient through cat and sum");
}
}  // namespace
