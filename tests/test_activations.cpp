// The activation, rounding, classification, remainder and clamp ops beyond what the registry-driven suites check:
// torch's values at known points, parameters other than the defaults (values and gradients), the API forms
// (gelu("tanh"), clamp with tensor bounds), and the typed errors naming the op.
#include <cmath>
#include <limits>

#include "oxmera/nn/functional.hpp"
#include "test_util.hpp"

using namespace oxt;
namespace F = oxmera::nn::functional;

namespace {

Tensor vec(const std::vector<double>& v) { return from_vector<double>(v, {static_cast<int64_t>(v.size())}); }
Tensor leaf(const Shape& s, double lo, double hi, uint64_t seed) {
  return (rand(s, seed, DType::F64) * (hi - lo) + lo).requires_grad_();
}
// Values in +-[0.2, 2]: clear of the kinks at 0.
Tensor leaf_away(const Shape& s, uint64_t seed) {
  return (leaf(s, 0.2, 2.0, seed) * from_vector<double>({1, -1, 1, -1}, {4})).detach().requires_grad_();
}
void expect_gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& in,
                      const std::string& what) {
  GradcheckResult r = gradcheck(f, in);
  EXPECT_TRUE(r.ok) << what << ": " << r.message;
}

}  // namespace

TEST(Activations, GeluIsExactByDefaultAndTanhOnRequest) {
  Tensor one = vec({1.0});
  EXPECT_NEAR(one.gelu().item<double>(), 0.8413447460685429, 1e-15);  // torch.nn.functional.gelu(1.)
  EXPECT_NEAR(one.gelu("none").item<double>(), 0.8413447460685429, 1e-15);
  EXPECT_NEAR(one.gelu("tanh").item<double>(), 0.8411919906082768, 1e-15);  // approximate='tanh'
  EXPECT_NEAR(from_vector<float>({1.f}, {1}).gelu().item<float>(), 0.841345f, 1e-6);
  EXPECT_NEAR(F::gelu(one).item<double>(), 0.8413447460685429, 1e-15);
  EXPECT_NEAR(F::gelu(one, "tanh").item<double>(), 0.8411919906082768, 1e-15);
  EXPECT_OXM_ERROR(one.gelu("Tanh"), InvalidArgument, "gelu: approximate must be");
  Tensor x = leaf_away({3, 4}, 1);
  expect_gradcheck([](const std::vector<Tensor>& v) { return v[0].gelu("tanh"); }, {x}, "gelu tanh");
  expect_gradcheck([](const std::vector<Tensor>& v) { return v[0].gelu(); }, {x}, "gelu");
}

TEST(Activations, ParametersOtherThanTheDefaults) {
  Tensor x = vec({-3, -0.5, 0, 0.25, 2, 30});
  auto expect_fn = [&](const Tensor& got, const std::function<double(double)>& f, const std::string& what) {
    std::vector<double> in = values(x), want;
    for (double v : in) want.push_back(f(v));
    expect_close(values(got), want, 1e-14, 1e-14, what);
  };
  expect_fn(
      x.softplus(), [](double v) { return v > 20 ? v : std::log1p(std::exp(v)); }, "softplus");
  expect_fn(
      x.softplus(2, 1), [](double v) { return 2 * v > 1 ? v : std::log1p(std::exp(2 * v)) / 2; }, "softplus(2, 1)");
  expect_fn(
      x.elu(0.5), [](double v) { return v > 0 ? v : 0.5 * (std::exp(v) - 1); }, "elu(0.5)");
  expect_fn(
      x.leaky_relu(), [](double v) { return v > 0 ? v : 0.01 * v; }, "leaky_relu");
  expect_fn(
      x.leaky_relu(0.2), [](double v) { return v > 0 ? v : 0.2 * v; }, "leaky_relu(0.2)");
  expect_fn(
      x.hardtanh(), [](double v) { return std::clamp(v, -1.0, 1.0); }, "hardtanh");
  expect_fn(
      x.hardtanh(-0.5, 2), [](double v) { return std::clamp(v, -0.5, 2.0); }, "hardtanh(-0.5, 2)");
  expect_fn(
      F::softplus(x, 0.5, 20), [](double v) { return std::log1p(std::exp(0.5 * v)) / 0.5; }, "F::softplus");
  expect_fn(
      F::silu(x), [](double v) { return v / (1 + std::exp(-v)); }, "F::silu");
  expect_fn(
      F::mish(x), [](double v) { return v * std::tanh(std::log1p(std::exp(v))); }, "F::mish");
  expect_fn(
      F::elu(x, 2), [](double v) { return v > 0 ? v : 2 * (std::exp(v) - 1); }, "F::elu");
  expect_fn(
      F::leaky_relu(x, 0.3), [](double v) { return v > 0 ? v : 0.3 * v; }, "F::leaky_relu");
  expect_fn(
      F::hardtanh(x, 0, 1), [](double v) { return std::clamp(v, 0.0, 1.0); }, "F::hardtanh");
  // gradients with the parameters, by finite differences
  Tensor a = leaf_away({3, 4}, 2);
  expect_gradcheck([](const std::vector<Tensor>& v) { return v[0].softplus(2, 1); }, {a}, "softplus(2, 1)");
  expect_gradcheck([](const std::vector<Tensor>& v) { return v[0].elu(0.5); }, {a}, "elu(0.5)");
  expect_gradcheck([](const std::vector<Tensor>& v) { return v[0].leaky_relu(0.2); }, {a}, "leaky_relu(0.2)");
  expect_gradcheck([](const std::vector<Tensor>& v) { return v[0].hardtanh(-0.5, 1.5); }, {a}, "hardtanh");
  // torch's rules at the edges: hardtanh's gradient is 0 at the bounds, elu's at 0 is alpha
  Tensor e = vec({-1, 1, 0.5, 0}).requires_grad_();
  e.hardtanh().sum().backward();
  EXPECT_EQ(e.grad().to_vector<double>(), std::vector<double>({0, 0, 1, 1}));
  Tensor z = vec({0}).requires_grad_();
  z.elu(0.5).sum().backward();
  EXPECT_EQ(z.grad().item<double>(), 0.5);
}

TEST(Activations, BadParametersAreTypedErrors) {
  Tensor x = vec({1});
  EXPECT_OXM_ERROR(x.hardtanh(1, -1), InvalidArgument, "hardtanh: min_val");
  EXPECT_OXM_ERROR(x.softplus(0), InvalidArgument, "softplus: beta");
  EXPECT_OXM_ERROR(from_vector<int64_t>({1}, {1}).silu(), UnsupportedDType, "silu");
  EXPECT_OXM_ERROR(from_vector<int64_t>({1}, {1}).leaky_relu(), UnsupportedDType, "leaky_relu");
  EXPECT_OXM_ERROR(Tensor().erf(), InvalidArgument, "erf");
}

TEST(Rounding, TorchsRulesAndZeroGradients) {
  Tensor x = vec({0.5, 1.5, 2.5, -0.5, -1.5, -2.7, 2.7, -0.0});
  EXPECT_EQ(x.round().to_vector<double>(), std::vector<double>({0, 2, 2, -0.0, -2, -3, 3, -0.0}));  // half to even
  EXPECT_TRUE(std::signbit(x.round().to_vector<double>()[3]));
  EXPECT_EQ(x.floor().to_vector<double>(), std::vector<double>({0, 1, 2, -1, -2, -3, 2, -0.0}));
  EXPECT_EQ(x.ceil().to_vector<double>(), std::vector<double>({1, 2, 3, -0.0, -1, -2, 3, -0.0}));
  EXPECT_EQ(x.trunc().to_vector<double>(), std::vector<double>({0, 1, 2, -0.0, -1, -2, 2, -0.0}));
  Tensor f = from_vector<float>({2.5f, -3.5f, 1e30f}, {3});
  EXPECT_EQ(f.round().to_vector<float>(), std::vector<float>({2.f, -4.f, 1e30f}));
  Tensor i = from_vector<int64_t>({-3, 7}, {2});
  EXPECT_EQ(i.floor().to_vector<int64_t>(), i.to_vector<int64_t>());
  EXPECT_EQ(i.round().to_vector<int64_t>(), i.to_vector<int64_t>());
  Tensor g = vec({0.3, -1.7}).requires_grad_();
  (g.floor() + g.ceil() + g.round() + g.trunc()).sum().backward();
  EXPECT_EQ(g.grad().to_vector<double>(), std::vector<double>({0, 0}));
}

TEST(Classification, MasksOfTheInputDtypeWithoutHistory) {
  for (DType dt : {DType::F32, DType::F64}) {
    Tensor x = from_vector<double>({NAN, INFINITY, -INFINITY, 0.0, -1.5, 1e-310}, {6}).to(dt);
    EXPECT_EQ(x.isnan().dtype(), dt);
    EXPECT_EQ(values(x.isnan()), std::vector<double>({1, 0, 0, 0, 0, 0}));
    EXPECT_EQ(values(x.isinf()), std::vector<double>({0, 1, 1, 0, 0, 0}));
    EXPECT_EQ(values(x.isfinite()), std::vector<double>({0, 0, 0, 1, 1, 1}));
  }
  Tensor i = from_vector<int64_t>({1, -2}, {2});
  EXPECT_EQ(i.isnan().to_vector<int64_t>(), std::vector<int64_t>({0, 0}));
  EXPECT_EQ(i.isinf().to_vector<int64_t>(), std::vector<int64_t>({0, 0}));
  EXPECT_EQ(i.isfinite().to_vector<int64_t>(), std::vector<int64_t>({1, 1}));
  Tensor r = vec({1, NAN}).requires_grad_();
  EXPECT_FALSE(r.isnan().requires_grad());
  EXPECT_EQ(r.isfinite().grad_fn_name(), "");
}

TEST(Remainder, PythonAndCSignRulesWithTorchsGradients) {
  Tensor a = vec({-3, 3, -3, 3, 5.5, -0.0}), b = vec({2, -2, -2, 2, 2, 3});
  EXPECT_EQ(a.remainder(b).to_vector<double>(), std::vector<double>({1, -1, -1, 1, 1.5, -0.0}));
  EXPECT_EQ(remainder(a, b).to_vector<double>(), a.remainder(b).to_vector<double>());
  EXPECT_EQ(a.fmod(b).to_vector<double>(), std::vector<double>({-1, 1, -1, 1, 1.5, -0.0}));
  EXPECT_TRUE(std::isnan(vec({1}).remainder(vec({0})).item<double>()));
  Tensor x = vec({-3.5, 3.5}).requires_grad_(), y = vec({2, -2}).requires_grad_();
  x.remainder(y).sum().backward();
  EXPECT_EQ(x.grad().to_vector<double>(), std::vector<double>({1, 1}));
  EXPECT_EQ(y.grad().to_vector<double>(), std::vector<double>({2, 2}));  // -floor(a / b) = -floor(-1.75)
  Tensor x2 = vec({-3.5, 3.5}).requires_grad_(), y2 = vec({2, -2}).requires_grad_();
  x2.fmod(y2).sum().backward();
  EXPECT_EQ(y2.grad().to_vector<double>(), std::vector<double>({1, 1}));  // -trunc(-1.75)
  // negative divisors by finite differences (the registry's gradcheck draws positive ones)
  Tensor ga = leaf({3, 4}, -3, 3, 5), gb = (leaf({4}, 0.5, 2, 6) * -1).detach().requires_grad_();
  expect_gradcheck([](const std::vector<Tensor>& v) { return v[0].remainder(v[1]); }, {ga, gb}, "remainder b < 0");
  expect_gradcheck([](const std::vector<Tensor>& v) { return v[0].fmod(v[1]); }, {ga, gb}, "fmod b < 0");
}

TEST(Remainder, IntegersFollowPythonAndCAndRefuseAZeroDivisor) {
  auto ints = [](std::vector<int64_t> v) {
    const int64_t n = static_cast<int64_t>(v.size());
    return from_vector<int64_t>(v, Shape{n});
  };
  Tensor a = ints({-7, 7, -7, 7, 0, std::numeric_limits<int64_t>::min()}), b = ints({3, -3, -3, 3, 5, -1});
  EXPECT_EQ(a.remainder(b).to_vector<int64_t>(), (std::vector<int64_t>{2, -2, -1, 1, 0, 0}));  // Python's %
  EXPECT_EQ(a.fmod(b).to_vector<int64_t>(), (std::vector<int64_t>{-1, 1, -1, 1, 0, 0}));       // C's %
  EXPECT_EQ(a.remainder(b).dtype(), DType::I64);
  EXPECT_EQ(ints({10, -10}).remainder(4).to_vector<int64_t>(), (std::vector<int64_t>{2, 2}));
  EXPECT_OXM_ERROR(a.remainder(ints({1, 1, 0, 1, 1, 1})), InvalidArgument, "division by zero");
  EXPECT_OXM_ERROR(a.fmod(0), InvalidArgument, "division by zero");
}

TEST(Clamp, TensorBoundsAsTorch) {
  Tensor x = vec({-2, -0.5, 0.5, 2});
  Tensor lo = vec({-1, 0, 0, 0}), hi = vec({1, 1, 0.25, 3});
  EXPECT_EQ(x.clamp(lo, hi).to_vector<double>(), std::vector<double>({-1, 0, 0.25, 2}));
  EXPECT_EQ(x.clamp(lo, Tensor()).to_vector<double>(), std::vector<double>({-1, 0, 0.5, 2}));
  EXPECT_EQ(x.clamp(Tensor(), hi).to_vector<double>(), std::vector<double>({-2, -0.5, 0.25, 2}));
  EXPECT_EQ(x.clamp_min(lo).to_vector<double>(), x.clamp(lo, Tensor()).to_vector<double>());
  EXPECT_EQ(x.clamp_max(hi).to_vector<double>(), x.clamp(Tensor(), hi).to_vector<double>());
  EXPECT_EQ(x.clamp_min(0.0).to_vector<double>(), std::vector<double>({0, 0, 0.5, 2}));
  EXPECT_EQ(x.clamp_max(0.0).to_vector<double>(), std::vector<double>({-2, -0.5, 0, 0}));
  // lo > hi: hi wins (min(max(x, lo), hi)), as torch
  EXPECT_EQ(vec({0}).clamp(vec({2}), vec({1})).item<double>(), 1.0);
  EXPECT_TRUE(std::isnan(vec({NAN}).clamp(lo.slice(0, 0, 1), hi.slice(0, 0, 1)).item<double>()));
  // broadcast bounds: [2, 4] with [4] and [2, 1]
  Tensor m = from_vector<double>({-2, -1, 1, 2, -2, -1, 1, 2}, {2, 4});
  Tensor r = m.clamp(vec({-1.5, -1.5, -1.5, -1.5}), from_vector<double>({0.5, 1.5}, {2, 1}));
  EXPECT_EQ(r.to_vector<double>(), std::vector<double>({-1.5, -1, 0.5, 0.5, -1.5, -1, 1, 1.5}));
  // gradients: x inside the bounds, each bound where it is the result
  Tensor gx = vec({-2, -0.5, 0.5, 2}).requires_grad_(), glo = vec({-1, 0, 0, 0}).requires_grad_(),
         ghi = vec({1, 1, 0.25, 3}).requires_grad_();
  gx.clamp(glo, ghi).sum().backward();
  EXPECT_EQ(gx.grad().to_vector<double>(), std::vector<double>({0, 0, 0, 1}));
  EXPECT_EQ(glo.grad().to_vector<double>(), std::vector<double>({1, 1, 0, 0}));
  EXPECT_EQ(ghi.grad().to_vector<double>(), std::vector<double>({0, 0, 1, 0}));
  Tensor ca = leaf({3, 4}, -2, 2, 7), cl = leaf({4}, -1.5, -0.1, 8), ch = leaf({3, 1}, 0.1, 1.5, 9);
  expect_gradcheck([](const std::vector<Tensor>& v) { return v[0].clamp(v[1], v[2]); }, {ca, cl, ch}, "clamp");
  expect_gradcheck([](const std::vector<Tensor>& v) { return v[0].t().clamp_min(v[1].unsqueeze(1)); }, {ca, cl},
                   "clamp_min non-contiguous");
  // errors name clamp
  EXPECT_OXM_ERROR(x.clamp(Tensor(), Tensor()), InvalidArgument, "clamp");
  EXPECT_OXM_ERROR(x.clamp(lo.to(DType::F32), hi), DTypeMismatch, "clamp");
  EXPECT_OXM_ERROR(x.clamp(vec({1, 2, 3}), hi), BroadcastIncompatible, "clamp");
  EXPECT_OXM_ERROR(x.clamp_min(Tensor()), InvalidArgument, "clamp_min");
  // empty
  EXPECT_EQ(zeros({0, 3}, DType::F64).clamp(vec({0, 0, 0}), Tensor()).shape(), Shape({0, 3}));
}
