// Backward rules checked by finite differences (gradcheck in f64) for every differentiable op in the op
// table, plus the engine's contract: accumulation, detach, no-grad, deep graphs, saved-tensor versions.
#include "ops/op_defs.hpp"
#include "ops/ops_internal.hpp"
#include "test_util.hpp"

using namespace oxt;

namespace {

Tensor uniform_leaf(const Shape& s, double lo, double hi, uint64_t seed) {
  return (rand(s, seed, DType::F64) * (hi - lo) + lo).requires_grad_();
}

void expect_gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& in,
                      const std::string& what, const GradcheckOptions& opt = {}) {
  GradcheckResult r = gradcheck(f, in, opt);
  EXPECT_TRUE(r.ok) << what << ": " << r.message;
}

}  // namespace

// Every differentiable entry of the op registry (the conformance suite gradchecks its generated cases too).
TEST(Gradcheck, EveryDifferentiableUnaryOp) {
  int checked = 0;
  for (const ops::OpInfo& op : ops::unary_ops()) {
    if (!op.differentiable) continue;
    const std::string name = op.name;
    const auto id = static_cast<ops::UnaryOp>(op.id);
    // Positive domains as they are; others kept clear of the relu/abs/sign kinks at 0.
    Tensor x =
        op.lo[0] > 0
            ? uniform_leaf({3, 4}, std::max(op.lo[0], 0.3), std::min(op.hi[0], 2.0), 11)
            : (uniform_leaf({3, 4}, 0.2, 2.0, 12) * from_vector<double>({1, -1, 1, -1}, {4})).detach().requires_grad_();
    expect_gradcheck([&](const std::vector<Tensor>& v) { return ops::unary(id, v[0]); }, {x}, name);
    expect_gradcheck([&](const std::vector<Tensor>& v) { return ops::unary(id, v[0].t()); }, {x},
                     name + " (transposed)");
    ++checked;
  }
  int differentiable = 0;
  for (const ops::OpInfo& op : ops::unary_ops()) differentiable += op.differentiable;
  EXPECT_EQ(checked, differentiable);
  EXPECT_GE(checked, 30);
}

TEST(Gradcheck, EveryDifferentiableBinaryOpWithBroadcasting) {
  int checked = 0;
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 4}, {3, 4}}, {{3, 1, 4}, {2, 4}}, {{4}, {}}, {{2, 1}, {1, 3}}};
  for (const ops::OpInfo& op : ops::binary_ops()) {
    if (!op.differentiable) continue;
    const std::string name = op.name;
    const auto id = static_cast<ops::BinaryOp>(op.id);
    for (const auto& [sa, sb] : shapes) {
      Tensor a = uniform_leaf(sa, 0.5, 2.0, 21), b = uniform_leaf(sb, 0.6, 2.5, 22);
      if (id == ops::BinaryOp::BceLogits) b = uniform_leaf(sb, 0.1, 0.9, 22);  // targets in (0, 1)
      expect_gradcheck([&](const std::vector<Tensor>& v) { return ops::binary(id, v[0], v[1]); }, {a, b},
                       name + " " + sa.str() + " x " + sb.str());
    }
    ++checked;
  }
  EXPECT_EQ(checked, 10);
}

TEST(Gradcheck, MaxMinTiesSplitEvenly) {
  Tensor a = from_vector<double>({1, 2, 3}, {3}).requires_grad_();
  Tensor b = from_vector<double>({1, 5, 0}, {3}).requires_grad_();
  maximum(a, b).sum().backward();
  EXPECT_EQ(a.grad().to_vector<double>(), std::vector<double>({0.5, 0, 1}));
  EXPECT_EQ(b.grad().to_vector<double>(), std::vector<double>({0.5, 1, 0}));
  Tensor x = from_vector<double>({2, 7, 7, 1}, {4}).requires_grad_();
  x.max().backward();
  EXPECT_EQ(x.grad().to_vector<double>(), std::vector<double>({0, 0.5, 0.5, 0}));
  Tensor r = from_vector<double>({-1, 0, 2}, {3}).requires_grad_();
  r.relu().sum().backward();
  EXPECT_EQ(r.grad().to_vector<double>(), std::vector<double>({0, 0, 1}));  // relu'(0) = 0
}

TEST(Gradcheck, ReductionsSoftmaxMatmul) {
  Tensor x = uniform_leaf({3, 4, 5}, -1, 1, 31);
  for (const Dims& d : {Dims{}, Dims{0}, Dims{1, 2}, Dims{-1}}) {
    for (bool keep : {false, true}) {
      expect_gradcheck([&](const std::vector<Tensor>& v) { return v[0].sum(d, keep); }, {x}, "sum " + d.str());
      expect_gradcheck([&](const std::vector<Tensor>& v) { return v[0].mean(d, keep); }, {x}, "mean " + d.str());
      expect_gradcheck([&](const std::vector<Tensor>& v) { return v[0].max(d, keep); }, {x}, "max " + d.str());
      expect_gradcheck([&](const std::vector<Tensor>& v) { return v[0].min(d, keep); }, {x}, "min " + d.str());
    }
  }
  for (int64_t d : {0, 1, 2}) {
    expect_gradcheck([&](const std::vector<Tensor>& v) { return v[0].softmax(d); }, {x}, "softmax");
    expect_gradcheck([&](const std::vector<Tensor>& v) { return v[0].log_softmax(d); }, {x}, "log_softmax");
    expect_gradcheck([&](const std::vector<Tensor>& v) { return v[0].logsumexp(d); }, {x}, "logsumexp");
  }
  const std::vector<std::pair<Shape, Shape>> mm = {
      {{3, 4}, {4, 2}}, {{2, 1, 3, 4}, {5, 4, 2}}, {{3, 4}, {2, 4, 5}}, {{2, 3, 4}, {4, 1}},
      {{4}, {4, 2}},    {{2, 3, 4}, {4}},          {{4}, {4}},          {{4}, {3, 4, 2}}};  // vector forms
  for (const auto& [sa, sb] : mm) {
    Tensor a = uniform_leaf(sa, -1, 1, 41), b = uniform_leaf(sb, -1, 1, 42);
    expect_gradcheck([](const std::vector<Tensor>& v) { return v[0].matmul(v[1]); }, {a, b},
                     "matmul " + sa.str() + " x " + sb.str());
  }
  Tensor a = uniform_leaf({4, 3}, -1, 1, 43), b = uniform_leaf({4, 2}, -1, 1, 44);
  expect_gradcheck([](const std::vector<Tensor>& v) { return v[0].t().matmul(v[1]); }, {a, b}, "matmul transposed");
}

TEST(Gradcheck, ViewsWhereCasts) {
  Tensor x = uniform_leaf({3, 4}, -1, 1, 51);
  auto check = [&](const std::string& what, std::function<Tensor(const Tensor&)> f, const GradcheckOptions& opt = {}) {
    expect_gradcheck([&](const std::vector<Tensor>& v) { return f(v[0]); }, {x}, what, opt);
  };
  check("reshape", [](const Tensor& t) { return t.reshape({2, 6}) * from_vector<double>({1, 2, 3, 4, 5, 6}, {6}); });
  check("transpose-reshape", [](const Tensor& t) { return t.t().reshape({12}).sin(); });
  check("permute", [](const Tensor& t) { return t.unsqueeze(0).permute({2, 0, 1}).exp(); });
  check("narrow", [](const Tensor& t) { return t.narrow(1, 1, 2).square(); });
  check("slice step", [](const Tensor& t) { return t.slice(1, 0, 4, 2).square(); });
  check("select", [](const Tensor& t) { return t.select(0, -1).exp(); });
  check("squeeze/flatten", [](const Tensor& t) { return t.unsqueeze(1).squeeze(1).flatten().cos(); });
  check("broadcast_to", [](const Tensor& t) { return t.unsqueeze(0).broadcast_to({2, 3, 4}).square(); });
  check("contiguous/clone", [](const Tensor& t) { return t.t().contiguous().clone().tanh(); });
  // Through f32 the function is quantised at ~1e-7, so finite differences need a larger step.
  GradcheckOptions coarse;
  coarse.eps = 1e-3;
  coarse.rtol = 1e-3;
  check(
      "cast f32 round trip", [](const Tensor& t) { return t.to(DType::F32).to(DType::F64) * 2.0; }, coarse);
  check("where", [](const Tensor& t) { return where(t.gt(zeros_like(t)), t.square(), t.exp()); });
  check("clamp", [](const Tensor& t) { return t.clamp(-0.5, 0.5); });
  // At the bounds the gradient passes (torch's rule); pow with exponent 0 has gradient 0 even at x = 0.
  Tensor c = from_vector<double>({-1, 0, 0.5, 1, 2}, {5}).requires_grad_();
  c.clamp(0, 1).sum().backward();
  EXPECT_EQ(c.grad().to_vector<double>(), std::vector<double>({0, 1, 1, 1, 0}));
  Tensor z = from_vector<double>({0, 2}, {2}).requires_grad_();
  z.pow(0.0).sum().backward();
  EXPECT_EQ(z.grad().to_vector<double>(), std::vector<double>({0, 0}));
  check("pow scalar", [](const Tensor& t) { return (t.abs() + 0.5).pow(1.7); });
  check("scalar forms", [](const Tensor& t) { return (2.0 - t) / 3.0 + 1.0 / (t.square() + 1.0); });
}

TEST(Autograd, AccumulationDetachNoGrad) {
  Tensor w = from_vector<double>({1, 2}, {2}).requires_grad_();
  EXPECT_TRUE(w.is_leaf());
  EXPECT_FALSE(w.grad().defined());
  (w * 3.0).sum().backward();
  (w * w).sum().backward();  // accumulates: 3 + 2w
  EXPECT_EQ(w.grad().to_vector<double>(), std::vector<double>({5, 7}));
  w.zero_grad();
  EXPECT_FALSE(w.grad().defined());
  Tensor y = w * 2.0;
  EXPECT_FALSE(y.is_leaf());
  EXPECT_EQ(y.grad_fn_name(), "mul");
  Tensor d = y.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.shares_storage(y));
  {
    NoGradGuard ng;
    EXPECT_FALSE(grad_enabled());
    Tensor z = w * 2.0;
    EXPECT_FALSE(z.requires_grad());
  }
  EXPECT_TRUE(grad_enabled());
  // The same gradient flowing into two leaves must not be shared between them.
  Tensor a = ones({2}, DType::F64).requires_grad_(), b = ones({2}, DType::F64).requires_grad_();
  (a + b).sum().backward();
  {
    NoGradGuard ng;
    a.grad().mul_(5.0);
  }
  EXPECT_EQ(b.grad().to_vector<double>(), std::vector<double>({1, 1}));
  // A leaf used twice in one graph receives the sum.
  Tensor c = from_vector<double>({3}, {1}).requires_grad_();
  (c * c + c).sum().backward();
  EXPECT_EQ(c.grad().item<double>(), 7.0);
}

TEST(Autograd, SeedsAndErrors) {
  Tensor x = from_vector<double>({1, 2, 3}, {3}).requires_grad_();
  Tensor y = x * 2.0;
  EXPECT_OXM_ERROR(y.backward(), ShapeMismatch, "seed");
  y.backward(from_vector<double>({1, 0, 2}, {3}));
  EXPECT_EQ(x.grad().to_vector<double>(), std::vector<double>({2, 0, 4}));
  EXPECT_OXM_ERROR(y.backward(ones({2}, DType::F64)), ShapeMismatch, "seed shape");
  EXPECT_OXM_ERROR(y.backward(ones({3})), DTypeMismatch, "seed dtype");
  EXPECT_OXM_ERROR(ones({1}).backward(), InvalidArgument, "requires_grad_");
  EXPECT_OXM_ERROR(ones({2}, DType::I64).requires_grad_(), UnsupportedDType, "i64");
  EXPECT_OXM_ERROR(y.requires_grad_(false), InvalidArgument, "detach");
  // A leaf can be the root.
  Tensor s = from_vector<double>({4}, {1}).requires_grad_();
  s.backward();
  EXPECT_EQ(s.grad().item<double>(), 1.0);
}

TEST(Autograd, InPlaceChangeOfSavedTensorIsDetected) {
  Tensor w = from_vector<double>({1, 2}, {2}).requires_grad_();
  Tensor x = from_vector<double>({3, 4}, {2});
  Tensor y = (w * x).sum();
  x.add_(ones({2}, DType::F64));  // x was saved by mul
  EXPECT_OXM_ERROR(y.backward(), InvalidArgument, "modified in place");
}

TEST(Autograd, DeepChainRunsAndFreesWithoutRecursion) {
  Tensor x = from_vector<double>({1.0}, {1}).requires_grad_();
  Tensor y = x;
  const int n = 100000;
  for (int i = 0; i < n; ++i) y = y * 1.00001;
  y.sum().backward();
  EXPECT_NEAR(x.grad().item<double>(), std::pow(1.00001, n), 1e-9);
  y = Tensor();  // frees the 100k-node graph iteratively
  Tensor z = x;
  for (int i = 0; i < n; ++i) z = (z + 1.0).relu();
  z = Tensor();
  SUCCEED();
}

TEST(Autograd, NonDifferentiableOpsCutTheGraph) {
  Tensor x = from_vector<double>({1, -2}, {2}).requires_grad_();
  EXPECT_FALSE(x.gt(zeros_like(x)).requires_grad());
  EXPECT_FALSE(x.argmax(0).requires_grad());
  Tensor sg = x.sign();  // differentiable with a zero gradient, as in torch
  EXPECT_TRUE(sg.requires_grad());
  sg.sum().backward();
  EXPECT_EQ(x.grad().to_vector<double>(), std::vector<double>({0, 0}));
  EXPECT_FALSE(x.to(DType::I64).requires_grad());
}

TEST(Gradcheck, ReportsAWrongGradient) {
  // A function whose tape disagrees with its values: detach hides the dependence of one factor.
  Tensor x = uniform_leaf({3}, 0.5, 1.5, 61);
  GradcheckResult r = gradcheck([](const std::vector<Tensor>& v) { return v[0] * v[0].detach(); }, {x});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.message.find("FAILED"), std::string::npos);
  EXPECT_EQ(r.worst_input, 0);
}

#include <thread>

TEST(Threads, IndependentGraphsOnEightThreadsMatchSerialBits) {
  // Each thread builds and differentiates its own graphs (sharing one read-only input): results must equal
  // the single-threaded ones bit for bit (allocator, tape teardown and grad mode are per-thread safe).
  Tensor shared_x = randn({64, 16}, 99);
  auto work = [&](uint64_t seed) {
    Tensor w = randn({16, 8}, seed).requires_grad_();
    Tensor b = zeros({8}).requires_grad_();
    for (int it = 0; it < 30; ++it) {
      Tensor y = (shared_x.matmul(w) + b).tanh().square().mean();
      w.zero_grad();
      b.zero_grad();
      y.backward();
      NoGradGuard ng;
      w.add_(w.grad(), -0.1);
      b.add_(b.grad(), -0.1);
    }
    return w.to_vector<float>();
  };
  std::vector<std::vector<float>> serial, parallel(8);
  for (uint64_t s = 0; s < 8; ++s) serial.push_back(work(s + 1));
  std::vector<std::thread> threads;
  for (uint64_t s = 0; s < 8; ++s) threads.emplace_back([&, s] { parallel[s] = work(s + 1); });
  for (auto& t : threads) t.join();
  for (size_t s = 0; s < 8; ++s) EXPECT_EQ(parallel[s], serial[s]) << "thread " << s;
}

// retain_grad: a non-leaf's full gradient (all consumers) lands in .grad and accumulates across backward
// calls; leaves are unaffected; a retained tensor destroyed before backward is simply skipped.
TEST(Autograd, RetainGradOnNonLeaves) {
  Tensor x = from_vector<double>({1, 2, 3}, {3}).requires_grad_();
  Tensor y = x * 2.0;
  EXPECT_FALSE(y.retains_grad());
  y.retain_grad();
  y.retain_grad();  // idempotent
  EXPECT_TRUE(y.retains_grad());
  Tensor z = (y * y).sum() + y.sum();  // two consumers of y: dz/dy = 2y + 1
  z.retain_grad();                     // the root too
  z.backward(Tensor(), /*retain_graph=*/true);
  EXPECT_EQ(y.grad().to_vector<double>(), std::vector<double>({5, 9, 13}));
  EXPECT_EQ(z.grad().to_vector<double>(), std::vector<double>({1}));
  EXPECT_EQ(x.grad().to_vector<double>(), std::vector<double>({10, 18, 26}));
  z.backward();  // accumulates, as leaves do (the first backward retained the graph)
  EXPECT_EQ(y.grad().to_vector<double>(), std::vector<double>({10, 18, 26}));
  x.retain_grad();  // a leaf: no-op
  EXPECT_FALSE(x.retains_grad());
  EXPECT_OXM_ERROR(from_vector<double>({1}, {1}).retain_grad(), InvalidArgument, "does not require grad");
  // a multi-output node: only the retained output gets a .grad
  Tensor a = from_vector<double>({2, 1, 1, 3}, {2, 2}).requires_grad_();
  auto e = oxmera::linalg::eigh(a);
  e.eigenvalues.retain_grad();
  e.eigenvalues.sum().backward();
  EXPECT_EQ(e.eigenvalues.grad().to_vector<double>(), std::vector<double>({1, 1}));
  EXPECT_FALSE(e.eigenvectors.grad().defined());
  // destroyed before backward: nothing is written, nothing dangles (ASan builds check)
  Tensor w = from_vector<double>({1, 2}, {2}).requires_grad_();
  Tensor total;
  {
    Tensor mid = w.exp();
    mid.retain_grad();
    total = mid.sum();
  }
  total.backward();
  EXPECT_TRUE(w.grad().defined());
}
