// autograd::functional (torch.autograd.functional): vjp, jvp, hvp, vhp, jacobian and hessian against closed forms,
// finite differences and each other; multi-input forms, unused inputs, create_graph, and the typed errors.
#include <gtest/gtest.h>

#include <cmath>

#include "oxmera/oxmera.hpp"
#include "test_util.hpp"

using namespace oxmera;
namespace fx = oxmera::autograd::functional;

namespace {

Tensor f64(const std::vector<double>& v, const Shape& s) { return from_vector<double>(v, s); }

// The row-major values of diag(d).
std::vector<double> la_diag(const Tensor& d) {
  std::vector<double> v = d.to_vector<double>(), m(v.size() * v.size(), 0.0);
  for (size_t i = 0; i < v.size(); ++i) m[i * v.size() + i] = v[i];
  return m;
}

TEST(AutogradFunctional, HessianOfASumOfCubesIsDiagonalSixX) {
  const std::vector<double> xv = {0.5, -1.25, 2.0};
  Tensor x = f64(xv, Shape{3});
  Tensor h = fx::hessian([](const Tensor& t) { return (t * t * t).sum(); }, x);
  ASSERT_EQ(h.shape(), (Shape{3, 3}));
  std::vector<double> want(9, 0.0);
  for (int i = 0; i < 3; ++i) want[i * 4] = 6 * xv[i];
  oxt::expect_close(h.to_vector<double>(), want, 0, 1e-12, "hessian of sum(x^3)");
  EXPECT_FALSE(h.requires_grad());
  // A matrix input: the Hessian is input.shape + input.shape.
  Tensor m = f64({1, 2, 3, 4}, Shape{2, 2});
  Tensor hm = fx::hessian([](const Tensor& t) { return (t * t * t).sum(); }, m);
  ASSERT_EQ(hm.shape(), (Shape{2, 2, 2, 2}));
  std::vector<double> hv = hm.to_vector<double>();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_DOUBLE_EQ(hv[i * 4 + j], i == j ? 6.0 * (i + 1) : 0.0) << i << "," << j;
}

TEST(AutogradFunctional, JacobianOfAMatmulHasTorchsShapesAndClosedForm) {
  Generator gen(7);
  const int64_t m = 2, k = 3, n = 4;
  Tensor a = randn({m, k}, gen, DType::F64), b = randn({k, n}, gen, DType::F64);
  std::vector<Tensor> j = fx::jacobian([](const std::vector<Tensor>& v) { return v[0].matmul(v[1]); }, {a, b});
  ASSERT_EQ(j.size(), 2u);
  ASSERT_EQ(j[0].shape(), (Shape{m, n, m, k}));
  ASSERT_EQ(j[1].shape(), (Shape{m, n, k, n}));
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  std::vector<double> ja = j[0].to_vector<double>(), jb = j[1].to_vector<double>();
  // d(AB)[i,c] / dA[p,q] = [i == p] B[q,c];  d(AB)[i,c] / dB[p,q] = A[i,p] [c == q].
  for (int64_t i = 0; i < m; ++i)
    for (int64_t c = 0; c < n; ++c) {
      for (int64_t p = 0; p < m; ++p)
        for (int64_t q = 0; q < k; ++q)
          EXPECT_DOUBLE_EQ(ja[((i * n + c) * m + p) * k + q], i == p ? bv[q * n + c] : 0.0);
      for (int64_t p = 0; p < k; ++p)
        for (int64_t q = 0; q < n; ++q)
          EXPECT_DOUBLE_EQ(jb[((i * n + c) * k + p) * n + q], c == q ? av[i * k + p] : 0.0);
    }
  // A scalar output: the Jacobian is the gradient, shaped like the input.
  Tensor g = fx::jacobian([](const Tensor& t) { return (t * t).sum(); }, a);
  ASSERT_EQ(g.shape(), a.shape());
  oxt::expect_close(g.to_vector<double>(), (a * 2.0).to_vector<double>(), 0, 1e-14, "jacobian of a scalar");
}

TEST(AutogradFunctional, JvpMatchesFiniteDifferencesAndTheJacobian) {
  Generator gen(9);
  Tensor x = randn({5}, gen, DType::F64), v = randn({5}, gen, DType::F64);
  auto f = [](const Tensor& t) { return t.sin() * t.sum() + t.tanh().cumsum(0); };
  auto [out, jv] = fx::jvp(f, x, v);
  oxt::expect_close(out.to_vector<double>(), f(x).to_vector<double>(), 0, 1e-15, "jvp output");
  EXPECT_FALSE(out.requires_grad());
  EXPECT_FALSE(jv.requires_grad());
  const double e = 1e-6;
  Tensor fd = (f(x + v * e) - f(x - v * e)) / (2 * e);
  oxt::expect_close(jv.to_vector<double>(), fd.to_vector<double>(), 1e-7, 1e-8, "jvp vs central differences");
  Tensor j = fx::jacobian(f, x);
  oxt::expect_close(jv.to_vector<double>(), j.matmul(v).to_vector<double>(), 1e-13, 1e-13, "jvp vs J v");
}

TEST(AutogradFunctional, VjpOfElementwiseAndMultiInputForms) {
  Tensor x = f64({1, -2, 3}, Shape{3}), v = f64({0.5, 1, -1}, Shape{3});
  auto [out, g] = fx::vjp([](const Tensor& t) { return t * t; }, x, v);
  oxt::expect_close(out.to_vector<double>(), {1, 4, 9}, 0, 0, "vjp output");
  oxt::expect_close(g.to_vector<double>(), {1, -4, -6}, 0, 1e-15, "vjp = 2 x v");
  // Two inputs, a scalar output: v may be omitted; the gradient of sum(a * b) is (b, a).
  Tensor a = f64({1, 2}, Shape{2}), b = f64({3, 4}, Shape{2});
  auto [s, gs] = fx::vjp([](const std::vector<Tensor>& t) { return (t[0] * t[1]).sum(); }, {a, b});
  EXPECT_DOUBLE_EQ(s.item<double>(), 11.0);
  ASSERT_EQ(gs.size(), 2u);
  oxt::expect_close(gs[0].to_vector<double>(), {3, 4}, 0, 0, "d/da");
  oxt::expect_close(gs[1].to_vector<double>(), {1, 2}, 0, 0, "d/db");
}

TEST(AutogradFunctional, HvpAndVhpOfATwoInputFunctionMatchItsHessianBlocks) {
  // f(a, b) = sum(a^2 b): d2/da2 = diag(2b), d2/da db = diag(2a), d2/db2 = 0.
  Tensor a = f64({0.5, -1, 2}, Shape{3}), b = f64({1.5, 0.25, -3}, Shape{3});
  Tensor va = f64({1, 2, -1}, Shape{3}), vb = f64({-0.5, 1, 0.75}, Shape{3});
  auto f = [](const std::vector<Tensor>& t) { return (t[0] * t[0] * t[1]).sum(); };
  auto [out, hv] = fx::hvp(f, {a, b}, {va, vb});
  auto [out2, vh] = fx::vhp(f, {a, b}, {va, vb});
  EXPECT_DOUBLE_EQ(out.item<double>(), (a * a * b).sum().item<double>());
  Tensor want_a = 2.0 * b * va + 2.0 * a * vb, want_b = 2.0 * a * va;
  for (const auto* r : {&hv, &vh}) {
    ASSERT_EQ(r->size(), 2u);
    oxt::expect_close((*r)[0].to_vector<double>(), want_a.to_vector<double>(), 0, 1e-14, "(H v)_a");
    oxt::expect_close((*r)[1].to_vector<double>(), want_b.to_vector<double>(), 0, 1e-14, "(H v)_b");
  }
  std::vector<std::vector<Tensor>> h = fx::hessian(f, {a, b});
  ASSERT_EQ(h.size(), 2u);
  ASSERT_EQ(h[0][1].shape(), (Shape{3, 3}));
  oxt::expect_close(h[0][0].to_vector<double>(), la_diag(2.0 * b), 0, 1e-14, "H_aa");
  oxt::expect_close(h[0][1].to_vector<double>(), la_diag(2.0 * a), 0, 1e-14, "H_ab");
  oxt::expect_close(h[1][0].to_vector<double>(), la_diag(2.0 * a), 0, 1e-14, "H_ba");
  oxt::expect_close(h[1][1].to_vector<double>(), std::vector<double>(9, 0.0), 0, 0, "H_bb");
  // H v from the blocks.
  Tensor hv_a = h[0][0].matmul(va) + h[0][1].matmul(vb);
  oxt::expect_close(hv[0].to_vector<double>(), hv_a.to_vector<double>(), 0, 1e-14, "hvp vs hessian");
}

TEST(AutogradFunctional, UnusedInputsGetZeros) {
  Tensor a = f64({1, 2}, Shape{2}), unused = f64({5, 6, 7}, Shape{3});
  auto f = [](const std::vector<Tensor>& t) { return (t[0] * t[0]).sum(); };
  auto [o, g] = fx::vjp(f, {a, unused});
  oxt::expect_close(g[1].to_vector<double>(), {0, 0, 0}, 0, 0, "vjp of an unused input");
  auto [o2, hv] = fx::hvp(f, {a, unused}, {ones_like(a), ones_like(unused)});
  oxt::expect_close(hv[0].to_vector<double>(), {2, 2}, 0, 0, "hvp of the used input");
  oxt::expect_close(hv[1].to_vector<double>(), {0, 0, 0}, 0, 0, "hvp of the unused input");
  std::vector<std::vector<Tensor>> h = fx::hessian(f, {a, unused});
  ASSERT_EQ(h[1][1].shape(), (Shape{3, 3}));
  oxt::expect_close(h[0][1].to_vector<double>(), std::vector<double>(6, 0.0), 0, 0, "H_a,unused");
  // A function of no input at all: a zero Jacobian and jvp.
  auto c = [](const Tensor& t) { return ones_like(t) * 3.0; };
  oxt::expect_close(fx::jacobian(c, a).to_vector<double>(), std::vector<double>(4, 0.0), 0, 0, "constant jacobian");
  oxt::expect_close(fx::jvp(c, a, a).second.to_vector<double>(), {0, 0}, 0, 0, "constant jvp");
}

TEST(AutogradFunctional, CreateGraphResultsDifferentiateAgainAndOtherwiseLeaveInputsAlone) {
  Tensor x = f64({0.5, -1.5}, Shape{2}).requires_grad_(true);
  auto cube = [](const Tensor& t) { return (t * t * t).sum(); };
  // Without create_graph nothing is connected to x, and x.grad is untouched.
  Tensor h = fx::hessian(cube, x);
  EXPECT_FALSE(h.requires_grad());
  EXPECT_FALSE(x.grad().defined());
  // With it: d/dx sum(H) = d/dx sum(6x) = 6 (a third derivative).
  Tensor hc = fx::hessian(cube, x, true);
  ASSERT_TRUE(hc.requires_grad());
  Tensor d3 = autograd::grad({hc.sum()}, {x})[0];
  oxt::expect_close(d3.to_vector<double>(), {6, 6}, 0, 1e-14, "third derivative through hessian");
  // hvp with v = x: H x = 6 x^2, differentiated through x in both places: d/dx sum(6 x^2) = 12 x.
  auto [o, hv] = fx::hvp(cube, x, x, true);
  ASSERT_TRUE(hv.requires_grad());
  Tensor d = autograd::grad({hv.sum()}, {x})[0];
  oxt::expect_close(d.to_vector<double>(), {6.0, -18.0}, 0, 1e-13, "d/dx sum(H(x) x)");
  // jvp with create_graph: J v of sin at x, differentiated w.r.t. x: d/dx sum(cos(x) v) = -sin(x) v.
  Tensor v = f64({2, 3}, Shape{2});
  auto [o2, jv] = fx::jvp([](const Tensor& t) { return t.sin(); }, x, v, true);
  ASSERT_TRUE(o2.requires_grad());
  Tensor dj = autograd::grad({jv.sum()}, {x})[0];
  oxt::expect_close(dj.to_vector<double>(), {-std::sin(0.5) * 2, -std::sin(-1.5) * 3}, 0, 1e-14, "d/dx jvp");
}

TEST(AutogradFunctional, BadArgumentsAreTypedErrors) {
  Tensor x = f64({1, 2, 3}, Shape{3});
  auto sq = [](const Tensor& t) { return t * t; };
  auto total = [](const Tensor& t) { return (t * t).sum(); };
  EXPECT_OXM_ERROR(fx::vjp(sq, x), InvalidArgument, "one-element output");
  EXPECT_OXM_ERROR(fx::vjp(sq, x, f64({1, 2}, Shape{2})), ShapeMismatch, "v[0] has shape");
  EXPECT_OXM_ERROR(fx::jvp(sq, x), InvalidArgument, "every input has one element");
  EXPECT_OXM_ERROR(fx::hvp(sq, x, x), ShapeMismatch, "one-element tensor");
  EXPECT_OXM_ERROR(fx::hessian(sq, x), ShapeMismatch, "hessian");
  EXPECT_OXM_ERROR(fx::vhp(total, x, x.to(DType::F32)), DTypeMismatch, "dtype");
  EXPECT_OXM_ERROR(fx::jacobian(total, from_vector<int64_t>({1, 2}, Shape{2})), UnsupportedDType, "f32 and f64");
  EXPECT_OXM_ERROR(fx::hvp([](const std::vector<Tensor>& t) { return (t[0] * t[1]).sum(); }, {x, x}, {x}),
                   InvalidArgument, "1 tensors in v for 2 inputs");
}

TEST(AutogradFunctional, SingleElementInputsNeedNoV) {
  Tensor x = f64({0.7}, Shape{});
  auto [o, jv] = fx::jvp([](const Tensor& t) { return t.exp(); }, x);
  EXPECT_NEAR(jv.item<double>(), std::exp(0.7), 1e-15);
  auto [o2, hv] = fx::hvp([](const Tensor& t) { return t.exp(); }, x);
  EXPECT_NEAR(hv.item<double>(), std::exp(0.7), 1e-15);
  EXPECT_NEAR(fx::hessian([](const Tensor& t) { return t.sin(); }, x).item<double>(), -std::sin(0.7), 1e-15);
}

}  // namespace
