// Higher-order gradients (create_graph = true): the engine records backward rules, saved tensors come back with
// their histories, and the results match closed forms, finite differences of first derivatives, and each other.
#include <gtest/gtest.h>

#include <cmath>

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

TEST(HigherOrder, KernelOnlyBackwardRefusesCreateGraphWithATypedError) {
  Tensor logits = from_vector<double>({0.1, 0.2, -0.3, 0.4, 0.0, 0.5}, Shape{2, 3}).requires_grad_(true);
  Tensor target = from_vector<int64_t>({0, 2}, Shape{2});
  Tensor loss = nn::cross_entropy(logits, target);
  EXPECT_OXM_ERROR(autograd::grad({loss}, {logits}, {}, false, true), NotImplemented, "cross_entropy");
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
