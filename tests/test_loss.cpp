// oxmera::nn losses: values against plain f64 loops (every reduction, weights, label smoothing, ignore_index,
// extreme logits), gradients by gradcheck in f64, module forms, and the typed errors.
#include <oxmera/nn/loss.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "test_util.hpp"

namespace {
using namespace oxt;
using nn::Reduction;

constexpr Reduction kReductions[] = {Reduction::Mean, Reduction::Sum, Reduction::None};
constexpr DType kFloats[] = {DType::F32, DType::F64};
const char* rname(Reduction r) { return r == Reduction::Mean ? "mean" : r == Reduction::Sum ? "sum" : "none"; }

std::vector<double> reduce_ref(const std::vector<double>& el, Reduction r, double denom) {
  if (r == Reduction::None) return el;
  double s = 0;
  for (double v : el) s += v;
  return {r == Reduction::Sum ? s : s / denom};
}

// Layout of an [N, C, rest...] (or [C]) input: element (n, c, r) at (n * C + c) * R + r.
struct Layout {
  int64_t N = 1, C = 1, R = 1;
  explicit Layout(const Shape& s) {
    if (s.size() == 1) {
      C = s[0];
      return;
    }
    N = s[0];
    C = s[1];
    for (size_t i = 2; i < s.size(); ++i) R *= s[i];
  }
  int64_t at(int64_t n, int64_t c, int64_t r) const { return (n * C + c) * R + r; }
};

std::vector<double> log_softmax_ref(const std::vector<double>& x, const Layout& L) {
  std::vector<double> out(x.size());
  for (int64_t n = 0; n < L.N; ++n)
    for (int64_t r = 0; r < L.R; ++r) {
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t c = 0; c < L.C; ++c) mx = std::max(mx, x[L.at(n, c, r)]);
      double s = 0;
      for (int64_t c = 0; c < L.C; ++c) s += std::exp(x[L.at(n, c, r)] - mx);
      for (int64_t c = 0; c < L.C; ++c) out[L.at(n, c, r)] = x[L.at(n, c, r)] - mx - std::log(s);
    }
  return out;
}

// torch's cross entropy on class targets applied to log-probabilities (label_smoothing 0 is nll_loss).
std::vector<double> class_loss_ref(const std::vector<double>& logp, const Layout& L, const std::vector<int64_t>& t,
                                   const std::vector<double>& w, Reduction red, int64_t ignore, double ls) {
  std::vector<double> nll(t.size(), 0.0), smooth(t.size(), 0.0);
  double denom = 0;
  for (int64_t n = 0; n < L.N; ++n)
    for (int64_t r = 0; r < L.R; ++r) {
      const size_t i = static_cast<size_t>(n * L.R + r);
      if (t[i] == ignore) continue;
      const double wt = w.empty() ? 1.0 : w[t[i]];
      nll[i] = -wt * logp[L.at(n, t[i], r)];
      for (int64_t c = 0; c < L.C; ++c) smooth[i] -= (w.empty() ? 1.0 : w[c]) * logp[L.at(n, c, r)];
      denom += wt;
    }
  auto a = reduce_ref(nll, red, denom), b = reduce_ref(smooth, red, denom);
  for (size_t i = 0; i < a.size(); ++i) a[i] = (1 - ls) * a[i] + b[i] * ls / static_cast<double>(L.C);
  return a;
}

std::vector<double> bce_ref(const std::vector<double>& x, const std::vector<double>& t, const std::vector<double>& w,
                            const std::vector<double>& pw, int64_t last, Reduction red) {
  std::vector<double> el(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double sp = std::max(-x[i], 0.0) + std::log1p(std::exp(-std::abs(x[i])));  // softplus(-x)
    const double lw = pw.empty() ? 1.0 : 1.0 + (pw[i % last] - 1.0) * t[i];
    el[i] = ((1 - t[i]) * x[i] + lw * sp) * (w.empty() ? 1.0 : w[i % last]);
  }
  return reduce_ref(el, red, static_cast<double>(x.size()));
}

std::vector<int64_t> random_classes(int64_t n, int64_t C, uint64_t seed) {
  auto u = values(rand({n}, seed, DType::F64));
  std::vector<int64_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[i] = std::min<int64_t>(C - 1, static_cast<int64_t>(u[i] * C));
  return t;
}

double tol(DType d) { return d == DType::F32 ? 2e-5 : 1e-12; }

void expect_gc(const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& in,
               const std::string& what) {
  GradcheckResult r = gradcheck(f, in);
  EXPECT_TRUE(r.ok) << what << ": " << r.message;
}

// ------------------------------------------------------------------------------------------------ mse

TEST(Loss, MseMatchesReference) {
  for (DType dt : kFloats)
    for (Reduction red : kReductions) {
      Tensor x = randn({3, 5}, 1, dt), t = randn({3, 5}, 2, dt);
      auto xv = values(x), tv = values(t);
      std::vector<double> el(xv.size());
      for (size_t i = 0; i < el.size(); ++i) el[i] = (xv[i] - tv[i]) * (xv[i] - tv[i]);
      Tensor got = nn::mse_loss(x, t, red);
      EXPECT_EQ(got.dtype(), dt);
      EXPECT_EQ(got.shape(), red == Reduction::None ? x.shape() : Shape{});
      expect_close(values(got), reduce_ref(el, red, 15.0), tol(dt), tol(dt), std::string("mse ") + rname(red));
      expect_close(values(nn::MSELoss(red)(x, t)), values(got), 0, 0, "MSELoss module");
    }
}

TEST(Loss, MseGradcheck) {
  for (Reduction red : kReductions) {
    Tensor x = randn({4, 3}, 3, DType::F64).requires_grad_(), t = randn({4, 3}, 4, DType::F64).requires_grad_();
    expect_gc([&](const std::vector<Tensor>& v) { return nn::mse_loss(v[0], v[1], red); }, {x, t},
              std::string("mse ") + rname(red));
  }
}

// ------------------------------------------------------------------------------------------------ nll / ce

struct ClassCase {
  Shape shape;
  int64_t ignore;
  bool weighted;
  double ls;
};

std::vector<ClassCase> class_cases() {
  std::vector<ClassCase> cs;
  for (Shape s : {Shape{6, 4}, Shape{3, 5, 2, 3}, Shape{5}})
    for (int64_t ign : {int64_t{-100}, int64_t{1}})
      for (bool w : {false, true})
        for (double ls : {0.0, 0.1, 0.4}) cs.push_back({s, ign, w, ls});
  return cs;
}

// Targets of the class case, with some -100 entries (ignored only when ignore == -100) and some 1s.
std::vector<int64_t> case_targets(const ClassCase& c, const Layout& L, uint64_t seed) {
  auto t = random_classes(L.N * L.R, L.C, seed);
  if (c.shape.size() > 1) {
    t[0] = 0;
    t[1 % t.size()] = 1;
    if (c.ignore == -100 && t.size() > 3) t[3] = -100;
  } else {
    t[0] = 2;
  }
  return t;
}

Shape target_shape(const Shape& s) {
  if (s.size() == 1) return {};
  Shape t = s;
  t.erase(1);
  return t;
}

TEST(Loss, NllMatchesReference) {
  for (DType dt : kFloats)
    for (const ClassCase& c : class_cases()) {
      if (c.ls != 0.0) continue;
      Layout L(c.shape);
      auto tv = case_targets(c, L, 7);
      Tensor logp = randn(c.shape, 11, dt).log_softmax(c.shape.size() == 1 ? 0 : 1);
      Tensor t = from_vector(tv, target_shape(c.shape));
      Tensor w = c.weighted ? rand({L.C}, 12, dt) + 0.2 : Tensor();
      std::vector<double> wv = c.weighted ? values(w) : std::vector<double>{};
      for (Reduction red : kReductions) {
        std::string what = "nll " + c.shape.str() + " " + rname(red) + " ignore " + std::to_string(c.ignore) +
                           (c.weighted ? " weighted" : "");
        Tensor got = nn::nll_loss(logp, t, w, red, c.ignore);
        EXPECT_EQ(got.shape(), red == Reduction::None ? t.shape() : Shape{}) << what;
        expect_close(values(got), class_loss_ref(values(logp), L, tv, wv, red, c.ignore, 0.0), tol(dt), tol(dt), what);
        expect_close(values(nn::NLLLoss(w, red, c.ignore)(logp, t)), values(got), 0, 0, what + " module");
      }
    }
}

TEST(Loss, CrossEntropyMatchesReference) {
  for (DType dt : kFloats)
    for (const ClassCase& c : class_cases()) {
      Layout L(c.shape);
      auto tv = case_targets(c, L, 8);
      Tensor x = randn(c.shape, 21, dt) * 3.0;
      Tensor t = from_vector(tv, target_shape(c.shape));
      nn::CrossEntropyOptions o;
      if (c.weighted) o.weight = rand({L.C}, 22, dt) + 0.2;
      o.label_smoothing = c.ls;
      o.ignore_index = c.ignore;
      std::vector<double> wv = c.weighted ? values(o.weight) : std::vector<double>{};
      auto logp = log_softmax_ref(values(x), L);
      for (Reduction red : kReductions) {
        o.reduction = red;
        std::string what = "cross_entropy " + c.shape.str() + " " + rname(red) + " ignore " + std::to_string(c.ignore) +
                           (c.weighted ? " weighted" : "") + " ls " + std::to_string(c.ls);
        if (red == Reduction::Mean && std::all_of(tv.begin(), tv.end(), [&](int64_t v) { return v == c.ignore; })) {
          EXPECT_OXM_ERROR(nn::cross_entropy(x, t, o), EmptyReduction, "cross_entropy");
          continue;
        }
        Tensor got = nn::cross_entropy(x, t, o);
        EXPECT_EQ(got.dtype(), dt);
        expect_close(values(got), class_loss_ref(logp, L, tv, wv, red, c.ignore, c.ls), tol(dt), tol(dt), what);
        expect_close(values(nn::CrossEntropyLoss(o)(x, t)), values(got), 0, 0, what + " module");
      }
    }
}

// Without class weights, cross_entropy of [N, C] / [C] logits runs a fused kernel pair; with weights of 1 it takes
// the op-built path. Both must agree, values and gradients, also for non-contiguous logits.
TEST(Loss, FusedCrossEntropyMatchesTheComposite) {
  for (DType dt : kFloats)
    for (bool transposed : {false, true})
      for (double ls : {0.0, 0.3})
        for (int64_t ignore : {int64_t{-100}, int64_t{2}})
          for (Reduction red : kReductions) {
            Tensor base = transposed ? (randn({6, 9}, 61, dt) * 3.0).t() : randn({9, 6}, 61, dt) * 3.0;
            Tensor t = from_vector<int64_t>({2, 0, 5, 2, 1, 3, 4, 2, 0}, {9});
            nn::CrossEntropyOptions o;
            o.label_smoothing = ls;
            o.ignore_index = ignore;
            o.reduction = red;
            Tensor xf = base.detach().requires_grad_(), xc = base.detach().requires_grad_();
            Tensor fused = nn::cross_entropy(xf, t, o);
            o.weight = ones({6}, dt);
            Tensor composite = nn::cross_entropy(xc, t, o);
            const std::string what = std::string("fused ") + dtype_name(dt) + (transposed ? " transposed" : "") +
                                     " ls " + std::to_string(ls) + " ignore " + std::to_string(ignore) + " " +
                                     rname(red);
            ASSERT_EQ(fused.shape(), composite.shape()) << what;
            expect_close(values(fused), values(composite), tol(dt), tol(dt), what);
            (fused * rand(fused.shape(), 62, dt)).sum().backward();
            (composite * rand(composite.shape(), 62, dt)).sum().backward();
            expect_close(values(xf.grad()), values(xc.grad()), tol(dt), tol(dt), what + " grad");
          }
  // [C] logits give a 0-d loss for Reduction::None, as the composite does.
  Tensor x = randn({5}, 63);
  nn::CrossEntropyOptions o;
  o.reduction = Reduction::None;
  EXPECT_EQ(nn::cross_entropy(x, scalar(3.0, DType::I64), o).shape(), Shape{});
}

TEST(Loss, CrossEntropyExtremeLogits) {
  for (DType dt : kFloats) {
    std::vector<double> xv = {1000, -1000, 0, 1000, -1000, -1000, 1000, 500, 0, 0, 3, -3};
    Tensor x = from_vector(xv, {3, 4}).to(dt).requires_grad_();
    Tensor t = from_vector<int64_t>({1, 0, 3}, {3});
    nn::CrossEntropyOptions o;
    o.label_smoothing = 0.2;
    o.reduction = Reduction::None;
    Tensor got = nn::cross_entropy(x, t, o);
    Layout L({3, 4});
    expect_close(values(got), class_loss_ref(log_softmax_ref(xv, L), L, {1, 0, 3}, {}, Reduction::None, -100, 0.2),
                 tol(dt), tol(dt), std::string("extreme logits ") + dtype_name(dt));
    got.sum().backward();
    for (double g : values(x.grad())) EXPECT_TRUE(std::isfinite(g));
  }
}

TEST(Loss, CrossEntropyProbabilityTargets) {
  for (DType dt : kFloats)
    for (Shape s : {Shape{5, 3}, Shape{2, 4, 3}, Shape{4}})
      for (bool weighted : {false, true})
        for (double ls : {0.0, 0.3})
          for (Reduction red : kReductions) {
            Layout L(s);
            Tensor x = randn(s, 31, dt), p = rand(s, 32, dt);
            nn::CrossEntropyOptions o;
            if (weighted) o.weight = rand({L.C}, 33, dt) + 0.5;
            o.label_smoothing = ls;
            o.reduction = red;
            auto lp = log_softmax_ref(values(x), L), pv = values(p);
            std::vector<double> wv = weighted ? values(o.weight) : std::vector<double>{};
            std::vector<double> el(static_cast<size_t>(L.N * L.R), 0.0);
            for (int64_t n = 0; n < L.N; ++n)
              for (int64_t r = 0; r < L.R; ++r)
                for (int64_t c = 0; c < L.C; ++c) {
                  const double q = pv[L.at(n, c, r)] * (1 - ls) + ls / static_cast<double>(L.C);
                  el[n * L.R + r] -= (weighted ? wv[c] : 1.0) * q * lp[L.at(n, c, r)];
                }
            std::string what = "cross_entropy probs " + s.str() + " " + rname(red);
            expect_close(values(nn::cross_entropy(x, p, o)), reduce_ref(el, red, static_cast<double>(L.N * L.R)),
                         tol(dt), tol(dt), what);
          }
}

TEST(Loss, IgnoredTargetsGetNoGradient) {
  Tensor x = randn({4, 3}, 41, DType::F64).requires_grad_();
  Tensor t = from_vector<int64_t>({2, -100, 0, -100}, {4});
  nn::CrossEntropyOptions o;
  o.label_smoothing = 0.3;
  o.weight = from_vector<double>({0.5, 1.0, 2.0}, {3});
  nn::cross_entropy(x, t, o).backward();
  auto g = values(x.grad());
  for (int64_t c = 0; c < 3; ++c) {
    EXPECT_EQ(g[3 + c], 0.0);
    EXPECT_EQ(g[9 + c], 0.0);
    EXPECT_NE(g[c], 0.0);
  }
}

TEST(Loss, ClassLossGradcheck) {
  Tensor w = from_vector<double>({0.3, 1.7, 0.9, 1.2}, {4});
  for (Shape s : {Shape{5, 4}, Shape{2, 4, 3}, Shape{4}}) {
    Layout L(s);
    auto tv = random_classes(L.N * L.R, 4, 51);
    if (tv.size() > 2) tv[1] = -100;
    Tensor t = from_vector(tv, target_shape(s));
    for (Reduction red : kReductions) {
      Tensor x = randn(s, 52, DType::F64).requires_grad_();
      for (bool weighted : {false, true})
        for (double ls : {0.0, 0.25}) {
          nn::CrossEntropyOptions o;
          if (weighted) o.weight = w;
          o.label_smoothing = ls;
          o.reduction = red;
          expect_gc([&](const std::vector<Tensor>& v) { return nn::cross_entropy(v[0], t, o); }, {x},
                    "cross_entropy " + s.str() + " " + rname(red));
        }
      Tensor lp = randn(s, 53, DType::F64).log_softmax(s.size() == 1 ? 0 : 1).detach().requires_grad_();
      expect_gc([&](const std::vector<Tensor>& v) { return nn::nll_loss(v[0], t, w, red); }, {lp},
                "nll_loss " + s.str() + " " + rname(red));
      Tensor p = rand(s, 54, DType::F64).requires_grad_();
      nn::CrossEntropyOptions o;
      o.weight = w;
      o.label_smoothing = 0.1;
      o.reduction = red;
      expect_gc([&](const std::vector<Tensor>& v) { return nn::cross_entropy(v[0], v[1], o); }, {x, p},
                "cross_entropy probabilities " + s.str() + " " + rname(red));
    }
  }
}

// ------------------------------------------------------------------------------------------------ bce

TEST(Loss, BceWithLogitsMatchesReference) {
  for (DType dt : kFloats)
    for (bool weighted : {false, true})
      for (bool pos : {false, true})
        for (Reduction red : kReductions) {
          Tensor x = randn({4, 5}, 61, dt) * 4.0, t = rand({4, 5}, 62, dt);
          Tensor w = weighted ? rand({5}, 63, dt) + 0.1 : Tensor();
          Tensor pw = pos ? rand({5}, 64, dt) * 3.0 + 0.1 : Tensor();
          Tensor got = nn::binary_cross_entropy_with_logits(x, t, w, pw, red);
          auto want = bce_ref(values(x), values(t), weighted ? values(w) : std::vector<double>{},
                              pos ? values(pw) : std::vector<double>{}, 5, red);
          std::string what = std::string("bce ") + dtype_name(dt) + " " + rname(red);
          expect_close(values(got), want, tol(dt), tol(dt), what);
          expect_close(values(nn::BCEWithLogitsLoss(w, red, pw)(x, t)), values(got), 0, 0, what + " module");
        }
}

TEST(Loss, BceWithLogitsIsStableAtLargeLogits) {
  for (DType dt : kFloats) {
    std::vector<double> xv = {1000, -1000, 1000, -1000, 0, 88, -88, 745};
    std::vector<double> tv = {1, 0, 0, 1, 0.5, 0.25, 1, 0};
    Tensor x = from_vector(xv, {8}).to(dt).requires_grad_(), t = from_vector(tv, {8}).to(dt);
    Tensor pw = full({8}, 3.0, dt);
    Tensor got = nn::binary_cross_entropy_with_logits(x, t, {}, pw, Reduction::None);
    expect_close(values(got), bce_ref(xv, tv, {}, std::vector<double>(8, 3.0), 8, Reduction::None), tol(dt), 1e-6,
                 std::string("bce extreme ") + dtype_name(dt));
    got.sum().backward();
    auto g = values(x.grad());
    // d/dx = (1 - t) - lw * sigmoid(-x), lw = 1 + 2t
    for (size_t i = 0; i < xv.size(); ++i) {
      const double s = 1.0 / (1.0 + std::exp(xv[i]));
      EXPECT_NEAR(g[i], (1 - tv[i]) - (1 + 2 * tv[i]) * s, 1e-6) << i;
    }
  }
}

TEST(Loss, BceWithLogitsGradcheck) {
  for (Reduction red : kReductions) {
    std::vector<double> xv = {0.0, 1.5, -2.0, 0.3, -0.7, 3.0};
    Tensor x = from_vector(xv, {2, 3}).requires_grad_(), t = rand({2, 3}, 71, DType::F64).requires_grad_();
    Tensor w = from_vector<double>({0.5, 2.0}, {2, 1}), pw = from_vector<double>({0.5, 1.0, 4.0}, {3});
    expect_gc(
        [&](const std::vector<Tensor>& v) { return nn::binary_cross_entropy_with_logits(v[0], v[1], w, pw, red); },
        {x, t}, std::string("bce ") + rname(red));
    expect_gc(
        [&](const std::vector<Tensor>& v) { return nn::binary_cross_entropy_with_logits(v[0], v[1], {}, {}, red); },
        {x, t}, std::string("bce plain ") + rname(red));
  }
}

// ------------------------------------------------------------------------------------------------ empties

TEST(Loss, EmptyBatches) {
  Tensor x = zeros({0, 4}, DType::F64).requires_grad_();
  Tensor t = zeros({0}, DType::I64);
  nn::CrossEntropyOptions o;
  o.reduction = Reduction::Sum;
  Tensor s = nn::cross_entropy(x, t, o);
  EXPECT_EQ(s.item<double>(), 0.0);
  o.reduction = Reduction::None;
  EXPECT_EQ(nn::cross_entropy(x, t, o).shape(), Shape{0});
  EXPECT_OXM_ERROR(nn::cross_entropy(x, t), EmptyReduction, "cross_entropy");
  EXPECT_OXM_ERROR(nn::nll_loss(x, t), EmptyReduction, "nll_loss");
  EXPECT_OXM_ERROR(nn::mse_loss(x, x), EmptyReduction, "mse_loss");
  EXPECT_OXM_ERROR(nn::binary_cross_entropy_with_logits(x, x), EmptyReduction, "binary_cross_entropy_with_logits");
  EXPECT_EQ(nn::mse_loss(x, x, Reduction::Sum).item<double>(), 0.0);
  o.reduction = Reduction::Mean;
  EXPECT_OXM_ERROR(nn::cross_entropy(x, zeros({0, 4}, DType::F64), o), EmptyReduction, "cross_entropy");
  // all targets ignored / zero total weight: torch returns NaN, oxmera says why
  Tensor y = randn({3, 4}, 81, DType::F64);
  Tensor ign = full({3}, -100, DType::I64);
  EXPECT_OXM_ERROR(nn::cross_entropy(y, ign), EmptyReduction, "ignore_index");
  EXPECT_EQ(nn::nll_loss(y, ign, {}, Reduction::Sum).item<double>(), 0.0);
  o.weight = from_vector<double>({0, 1, 1, 1}, {4});
  EXPECT_OXM_ERROR(nn::cross_entropy(y, zeros({3}, DType::I64), o), EmptyReduction, "weight");
}

// ------------------------------------------------------------------------------------------------ errors

TEST(Loss, Errors) {
  Tensor x = randn({3, 4}, 91);
  Tensor t = from_vector<int64_t>({0, 1, 2}, {3});
  // dtypes
  EXPECT_OXM_ERROR(nn::nll_loss(x, t.to(DType::F32)), DTypeMismatch, "nll_loss: class targets must be i64, got f32");
  EXPECT_OXM_ERROR(nn::cross_entropy(x, t.to(DType::F32)), DTypeMismatch, "cross_entropy");
  EXPECT_OXM_ERROR(nn::cross_entropy(t, t), UnsupportedDType, "cross_entropy: logits must be f32 or f64, got i64");
  EXPECT_OXM_ERROR(nn::cross_entropy(x, randn({3, 4}, 1, DType::F64)), DTypeMismatch, "f64");
  EXPECT_OXM_ERROR(nn::mse_loss(x, x.to(DType::F64)), DTypeMismatch, "mse_loss: target has dtype f64");
  EXPECT_OXM_ERROR(nn::nll_loss(x, t, ones({4}, DType::F64)), DTypeMismatch, "nll_loss: weight has dtype f64");
  EXPECT_OXM_ERROR(nn::binary_cross_entropy_with_logits(x, x, {}, ones({4}, DType::F64)), DTypeMismatch, "pos_weight");
  // class indices
  EXPECT_OXM_ERROR(nn::cross_entropy(x, from_vector<int64_t>({0, 4, 1}, {3})), IndexOutOfBounds,
                   "cross_entropy: target 4 (at flat position 1");
  EXPECT_OXM_ERROR(nn::nll_loss(x, from_vector<int64_t>({0, 1, -1}, {3})), IndexOutOfBounds, "target -1");
  EXPECT_OXM_ERROR(nn::nll_loss(x, from_vector<int64_t>({0, 1, -100}, {3}), {}, Reduction::Mean, 3), IndexOutOfBounds,
                   "target -100");
  // shapes
  EXPECT_OXM_ERROR(nn::cross_entropy(x, from_vector<int64_t>({0, 1}, {2})), ShapeMismatch, "target shape [2]");
  EXPECT_OXM_ERROR(nn::nll_loss(randn({2, 4, 3}, 1), zeros({2, 4}, DType::I64)), ShapeMismatch, "[2, 3]");
  EXPECT_OXM_ERROR(nn::cross_entropy(scalar(1.0), zeros({}, DType::I64)), ShapeMismatch, "cross_entropy");
  nn::CrossEntropyOptions o;
  o.weight = ones({3});
  EXPECT_OXM_ERROR(nn::cross_entropy(x, t, o), ShapeMismatch, "weight must have shape [4]");
  EXPECT_OXM_ERROR(nn::mse_loss(x, randn({4, 3}, 2)), ShapeMismatch, "mse_loss: input shape [3, 4]");
  EXPECT_OXM_ERROR(nn::mse_loss(x, randn({1, 4}, 2)), ShapeMismatch, "mse_loss");
  EXPECT_OXM_ERROR(nn::binary_cross_entropy_with_logits(x, randn({3}, 2)), ShapeMismatch, "target shape [3]");
  EXPECT_OXM_ERROR(nn::binary_cross_entropy_with_logits(x, x, ones({3})), ShapeMismatch, "weight shape [3]");
  EXPECT_OXM_ERROR(nn::binary_cross_entropy_with_logits(x, x, {}, ones({2, 3, 4})), ShapeMismatch, "pos_weight");
  // options and undefined tensors
  o = {};
  o.label_smoothing = 1.5;
  EXPECT_OXM_ERROR(nn::cross_entropy(x, t, o), InvalidArgument, "label_smoothing");
  o = {};
  o.ignore_index = 0;
  EXPECT_OXM_ERROR(nn::cross_entropy(x, rand({3, 4}, 3), o), InvalidArgument, "ignore_index");
  EXPECT_OXM_ERROR(nn::mse_loss(Tensor(), x), InvalidArgument, "mse_loss: input is an undefined tensor");
  EXPECT_OXM_ERROR(nn::nll_loss(x, Tensor()), InvalidArgument, "target");
}

}  // namespace
