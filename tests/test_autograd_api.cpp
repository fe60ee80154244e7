// Autograd as researchers use it (issue #14, first part): graph lifetime (retain_graph, a second backward through
// a freed graph is an error), autograd::grad, tensor hooks and post-accumulate hooks.
#include "test_util.hpp"

using namespace oxmera;
using oxt::expect_close;
using oxt::values;

namespace {
Tensor leaf(std::vector<double> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return from_vector(v, {n}).requires_grad_();
}
}  // namespace

TEST(AutogradApi, SecondBackwardThroughAFreedGraphIsAnError) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = (x * x).sum();
  y.backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{2, 4, 6}));
  EXPECT_OXM_ERROR(y.backward(), InvalidArgument, "retain_graph = true");
  // With retain_graph the second backward accumulates, as in torch.
  Tensor z = (x * x).sum();
  x.zero_grad();
  z.backward(Tensor(), true);
  z.backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{4, 8, 12}));
  EXPECT_OXM_ERROR(z.backward(), InvalidArgument, "second time");
  // A graph whose nodes saved nothing may be run again (torch's rule: only freed saved tensors are an error).
  Tensor w = (x + 1.0).sum();
  x.zero_grad();
  w.backward();
  w.backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{2, 2, 2}));
}

TEST(AutogradApi, BackwardTakesAGradientForNonScalarOutputs) {
  Tensor x = leaf({1, 2});
  Tensor y = x * 3.0;
  y.backward(from_vector<double>({1, 10}, {2}), false);
  EXPECT_EQ(values(x.grad()), (std::vector<double>{3, 30}));
  EXPECT_OXM_ERROR((x * 2.0).backward(Tensor(), false), ShapeMismatch, "one-element");
  x.zero_grad();
  (x * x).sum().backward(Tensor(), false, true);  // create_graph: .grad = 2x with a history
  EXPECT_TRUE(x.grad().requires_grad());
  // That history refers back to x (x -> .grad -> its graph -> x): a reference cycle, as in torch; dropping the
  // gradient breaks it (the sanitizer build's leak check holds this test to it).
  x.zero_grad();
}

TEST(AutogradApi, GradReturnsGradientsWithoutTouchingDotGrad) {
  Tensor x = leaf({1, 2, 3}), w = leaf({0.5, -1, 2});
  Tensor h = (x * w).tanh();
  Tensor y = (h * h).sum();
  std::vector<Tensor> g = autograd::grad({y}, {x, h}, {}, true);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());
  // dy/dh = 2h; dy/dx = 2h (1 - h^2) w
  const auto hv = values(h.detach()), wv = values(w.detach());
  std::vector<double> gx, gh;
  for (size_t i = 0; i < 3; ++i) {
    gh.push_back(2 * hv[i]);
    gx.push_back(2 * hv[i] * (1 - hv[i] * hv[i]) * wv[i]);
  }
  oxt::expect_close(values(g[0]), gx, 1e-12, 1e-12, "dy/dx");
  oxt::expect_close(values(g[1]), gh, 1e-12, 1e-12, "dy/dh");
  // The same as backward() gives.
  y.backward();
  oxt::expect_close(values(x.grad()), gx, 1e-12, 1e-12, "backward");
}

TEST(AutogradApi, GradOfSeveralOutputsAddsTheirContributions) {
  Tensor x = leaf({1, 2});
  Tensor a = x * x, b = x * 5.0;
  auto g = autograd::grad({a, b}, {x}, {from_vector<double>({1, 1}, {2}), from_vector<double>({2, 0}, {2})});
  EXPECT_EQ(values(g[0]), (std::vector<double>{2 + 10, 4}));
  // An output that is also computed from another output: the gradient flows through both.
  Tensor u = leaf({3});
  Tensor v = u * 2.0;
  Tensor s = v * v;
  auto gv = autograd::grad({s.sum(), v.sum()}, {u});
  EXPECT_EQ(values(gv[0]), (std::vector<double>{2 * 2 * 6.0 + 2}));
  // An input that is an output: its seed is its gradient.
  auto gi = autograd::grad({u}, {u});
  EXPECT_EQ(values(gi[0]), (std::vector<double>{1}));
}

TEST(AutogradApi, GradRunsOnlyWhatItNeedsAndChecksItsArguments) {
  Tensor a = leaf({1}), b = leaf({2}), c = leaf({3}), d = leaf({4});
  Tensor e = c * 2.0;
  int e_hook_calls = 0;
  e.register_hook([&](const Tensor&) { ++e_hook_calls; });
  Tensor z = (a * b + e * d).sum();
  auto g = autograd::grad({z}, {a}, {}, true);
  EXPECT_EQ(values(g[0]), (std::vector<double>{2}));
  EXPECT_EQ(e_hook_calls, 0);  // the c*2 branch is not needed for dz/da
  auto g2 = autograd::grad({z}, {a, c}, {}, true);
  EXPECT_EQ(values(g2[1]), (std::vector<double>{8}));
  EXPECT_EQ(e_hook_calls, 1);
  Tensor unused = leaf({7});
  EXPECT_OXM_ERROR(autograd::grad({z}, {unused}, {}, true), InvalidArgument, "allow_unused");
  auto g3 = autograd::grad({z}, {a, unused}, {}, true, false, true);
  EXPECT_TRUE(g3[0].defined());
  EXPECT_FALSE(g3[1].defined());
  EXPECT_OXM_ERROR(autograd::grad({z}, {from_vector<double>({1}, {1})}, {}, true), InvalidArgument,
                   "does not require grad");
  EXPECT_TRUE(autograd::grad({z}, {a}, {}, true, true)[0].defined());  // create_graph keeps the graph too
  // Without retain_graph the graph is freed: a later backward through it is an error.
  autograd::grad({z}, {a});
  EXPECT_OXM_ERROR(z.backward(), InvalidArgument, "second time");
}

TEST(AutogradApi, HooksObserveReplaceAndAreRemovable) {
  Tensor x = leaf({1, 2});
  auto h1 = x.register_hook([](const Tensor& g) { return g * 2.0; });
  std::vector<double> seen;
  x.register_hook([&](const Tensor& g) { seen = values(g); });
  (x * 3.0).sum().backward();
  EXPECT_EQ(seen, (std::vector<double>{6, 6}));  // after the first hook doubled it
  EXPECT_EQ(values(x.grad()), (std::vector<double>{6, 6}));
  EXPECT_TRUE(h1.active());
  h1.remove();
  EXPECT_FALSE(h1.active());
  x.zero_grad();
  (x * 3.0).sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{3, 3}));
  // On a non-leaf: the replaced gradient flows on to the inputs.
  Tensor y = leaf({1, 1});
  Tensor h = y * 2.0;
  h.register_hook([](const Tensor& g) { return g * 10.0; });
  (h * h).sum().backward();
  EXPECT_EQ(values(y.grad()), (std::vector<double>{80, 80}));  // d/dy = 2h * 10 * 2
  // Hooks also run in autograd::grad.
  Tensor q = leaf({1});
  q.register_hook([](const Tensor& g) { return g + 100.0; });
  EXPECT_EQ(values(autograd::grad({(q * 1.0).sum()}, {q})[0]), (std::vector<double>{101}));
  // A hook returning another shape is an error; so is a hook on a tensor without grad.
  Tensor r = leaf({1, 2});
  r.register_hook([](const Tensor& g) { return g.sum(); });
  EXPECT_OXM_ERROR((r * 1.0).sum().backward(), InvalidArgument, "gradient hook");
  EXPECT_OXM_ERROR(from_vector<double>({1}, {1}).register_hook([](const Tensor& g) { return g; }), InvalidArgument,
                   "register_hook");
}

TEST(AutogradApi, PostAccumulateGradHookRunsOncePerBackwardWithTheFinalGrad) {
  Tensor x = leaf({1, 2});
  int calls = 0;
  std::vector<double> seen;
  auto handle = x.register_post_accumulate_grad_hook([&](Tensor& p) {
    ++calls;
    seen = values(p.grad());
  });
  (x * x + x * 3.0 + x).sum().backward();  // x reaches the loss along three paths
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, (std::vector<double>{2 + 3 + 1, 4 + 3 + 1}));
  x.sum().backward();  // x's own sum: one path
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(seen, (std::vector<double>{7, 9}));
  handle.remove();
  x.sum().backward();
  EXPECT_EQ(calls, 2);
  Tensor h = x * 2.0;
  EXPECT_OXM_ERROR(h.register_post_accumulate_grad_hook([](Tensor&) {}), InvalidArgument, "leaves");
  // A parameter of an MLP: each one's hook runs once, after its gradient is complete.
  Tensor w1 = randn({3, 4}, 1, DType::F64).requires_grad_(), w2 = randn({4, 2}, 2, DType::F64).requires_grad_();
  std::vector<std::string> order;
  w1.register_post_accumulate_grad_hook([&](Tensor&) { order.push_back("w1"); });
  w2.register_post_accumulate_grad_hook([&](Tensor&) { order.push_back("w2"); });
  randn({5, 3}, 3, DType::F64).matmul(w1).tanh().matmul(w2).square().sum().backward();
  EXPECT_EQ(order, (std::vector<std::string>{"w2", "w1"}));
}

// Gradient buffers are summed in place when nothing else holds them (a view's backward adds into the buffer its
// input's other views filled: q, k and v of one qkv). Whatever a hook, a retained gradient, the seed or
// autograd::grad hands out must keep its values while the rest of the backward runs.
TEST(AutogradApi, InPlaceGradientSumsLeaveEveryHandedOutGradientIntact) {
  Tensor x = from_vector<double>({1, 2, 3, 4, 5, 6}, {3, 2}).requires_grad_();
  for (int variant = 0; variant < 4; ++variant) {
    x.zero_grad();
    Tensor y = x * 2.0;  // a node whose output gradient is summed from three views and one whole use
    std::vector<Tensor> seen;
    if (variant == 1) y.retain_grad();
    Tensor a = y.select(0, 0), b = y.select(0, 1), c = y.select(0, 2);
    if (variant == 2) b.register_hook([&](const Tensor& g) { seen.push_back(g); });
    Tensor seed_like = from_vector<double>({7, 11}, {2});
    Tensor loss = (a * 3.0).sum() + (b * 5.0).sum() + (c * seed_like).sum() + y.sum();
    if (variant == 3) {
      std::vector<Tensor> gy = autograd::grad({loss}, {y, x});
      EXPECT_EQ(values(gy[0]), (std::vector<double>{4, 4, 6, 6, 8, 12}));
      EXPECT_EQ(values(gy[1]), (std::vector<double>{8, 8, 12, 12, 16, 24}));
      continue;
    }
    loss.backward();
    EXPECT_EQ(values(x.grad()), (std::vector<double>{8, 8, 12, 12, 16, 24})) << variant;
    EXPECT_EQ(values(seed_like), (std::vector<double>{7, 11}));
    if (variant == 1) {
      EXPECT_EQ(values(y.grad()), (std::vector<double>{4, 4, 6, 6, 8, 12}));
    }
    if (variant == 2) {
      ASSERT_EQ(seen.size(), 1u);
      EXPECT_EQ(values(seen[0]), (std::vector<double>{5, 5}));
    }
  }
  // The same sums under create_graph (out of place, recorded): the second derivative of sum(select(y)^2).
  x.zero_grad();
  Tensor y = x * x;
  Tensor l = y.select(0, 0).square().sum() + y.select(0, 1).sum() + y.sum();
  std::vector<Tensor> g = autograd::grad({l}, {x}, {}, true, true);
  EXPECT_TRUE(g[0].requires_grad());
  g[0].sum().backward();
  // d/dx of (4x^3 + 2x) on row 0, (2x + 2x) on row 1, 2x on row 2: 12x^2 + 2, 4, 2.
  EXPECT_EQ(values(x.grad()), (std::vector<double>{14, 50, 4, 4, 2, 2}));
}

// The heads of a packed projection ([N, T, 3, H, D] viewed as [3, N, H, T, D], one select each): their backward fills a
// buffer laid out as the permuted input, so the gradient comes back through the permute contiguous (no copy in the
// reshape to [N, T, 3 H D]) and the later selects add into it in place; values as without views. The leaf's .grad
// stays contiguous however the gradient arrives.
TEST(AutogradApi, ViewsOfAPermutedInputGetAGradientInItsLayout) {
  const Tensor x = randn({2, 5, 3 * 2 * 4}, 1, DType::F64).requires_grad_();
  const Tensor y = x * 1.0;
  const Tensor heads = y.reshape({2, 5, 3, 2, 4}).permute({2, 0, 3, 1, 4});  // [3, N, H, T, D]
  const Tensor g = randn({3, 2, 2, 5, 4}, 2, DType::F64);
  Tensor loss = zeros({}, DType::F64);
  for (int64_t i = 0; i < 3; ++i) loss = loss + (heads.select(0, i) * g.select(0, i)).sum();
  const std::vector<Tensor> got = autograd::grad({loss}, {heads, y}, {}, true);
  EXPECT_FALSE(got[0].is_contiguous()) << "laid out as the permuted input";
  EXPECT_TRUE(got[0].permute({1, 3, 0, 2, 4}).is_contiguous());
  EXPECT_TRUE(got[1].is_contiguous());
  expect_close(values(got[0]), values(g), 0, 0, "the three heads' gradients");
  expect_close(values(got[1]), values(g.permute({1, 3, 0, 2, 4}).contiguous().reshape({2, 5, 24})), 0, 0, "y");
  loss.backward();
  EXPECT_TRUE(x.grad().is_contiguous());
  expect_close(values(x.grad()), values(got[1]), 0, 0, "x.grad");
}

// A weight shared by several products (a recurrence's W_hh, used through its transpose at every step, and directly)
// has its gradient summed by accumulating GEMMs into the buffer: the same values as separate copies of the weight,
// and a hook on the transposed view receives the sum of its three contributions.
TEST(AutogradApi, SharedWeightGradientsAccumulateInsideTheProducts) {
  Generator gen(5);
  const Tensor w0 = randn({4, 3}, gen, DType::F64);
  const Tensor a1 = randn({5, 3}, gen, DType::F64), a2 = randn({5, 3}, gen, DType::F64),
               a3 = randn({5, 3}, gen, DType::F64), b = randn({3, 2}, gen, DType::F64);
  for (int hooked = 0; hooked < 2; ++hooked) {
    Tensor w = w0.clone().requires_grad_();
    Tensor wt = w.t();
    std::vector<Tensor> seen;
    if (hooked) wt.register_hook([&](const Tensor& g) { seen.push_back(g); });
    Tensor h = a1.matmul(wt).tanh();                 // [5, 4]
    h = (h + a2.matmul(wt)).tanh() + a3.matmul(wt);  // wt used three times
    (h.square().sum() + h.matmul(w).matmul(b).sum()).backward();
    // The reference: one copy of the weight per use.
    std::vector<Tensor> ws;
    for (int i = 0; i < 4; ++i) ws.push_back(w0.clone().requires_grad_());
    Tensor r = a1.matmul(ws[0].t()).tanh();
    r = (r + a2.matmul(ws[1].t())).tanh() + a3.matmul(ws[2].t());
    (r.square().sum() + r.matmul(ws[3]).matmul(b).sum()).backward();
    Tensor expect = ws[0].grad() + ws[1].grad() + ws[2].grad() + ws[3].grad();
    oxt::expect_close(values(w.grad()), values(expect), 1e-12, 1e-12,
                      "shared weight, hooked " + std::to_string(hooked));
    if (hooked) {
      ASSERT_EQ(seen.size(), 1u);
      Tensor three = ws[0].grad() + ws[1].grad() + ws[2].grad();
      oxt::expect_close(values(seen[0].t()), values(three), 1e-12, 1e-12, "the hook's gradient of w.t()");
    }
  }
}
