// Optimizers (against torch 1.13's formulas written out below), LR schedulers and clip_grad_norm_.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <numbers>

#include "tensor/tensor_impl.hpp"
#include "test_util.hpp"

namespace {
using namespace oxt;
using oxmera::optim::Adam;
using oxmera::optim::AdamOptions;
using oxmera::optim::AdamW;
using oxmera::optim::AdamWOptions;
using oxmera::optim::Optimizer;
using oxmera::optim::ParamGroup;
using oxmera::optim::RMSprop;
using oxmera::optim::RMSpropOptions;
using oxmera::optim::SGD;
using oxmera::optim::SGDOptions;
namespace optim = oxmera::optim;

Tensor param(const std::vector<double>& v) {
  return from_vector<double>(v, {static_cast<int64_t>(v.size())}).requires_grad_();
}
Tensor param_f32(const std::vector<float>& v) {
  return from_vector<float>(v, {static_cast<int64_t>(v.size())}).requires_grad_();
}
// Deterministic gradient for step t (1-based) of a parameter of n elements.
std::vector<double> grad_at(int t, size_t n) {
  std::vector<double> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = std::sin(0.7 * static_cast<double>(i) + 1.3 * t) * (1.0 + 0.25 * i);
  return g;
}
const std::vector<double> kInit = {1.0, -2.0, 0.5, 3.0, -0.25};

// ---- reference formulas (torch 1.13 single-tensor), one element at a time, in f64
struct Ref {
  std::vector<double> p, b0, b1, b2;
  int step = 0;
  explicit Ref(std::vector<double> init)
      : p(std::move(init)), b0(p.size(), 0.0), b1(p.size(), 0.0), b2(p.size(), 0.0) {}
};

void ref_sgd(Ref& r, const std::vector<double>& g, const SGDOptions& o) {
  ++r.step;
  for (size_t i = 0; i < r.p.size(); ++i) {
    double d = o.maximize ? -g[i] : g[i];
    if (o.weight_decay != 0) d = d + o.weight_decay * r.p[i];
    if (o.momentum != 0) {
      r.b0[i] = r.step == 1 ? d : r.b0[i] * o.momentum + (1 - o.dampening) * d;
      d = o.nesterov ? d + o.momentum * r.b0[i] : r.b0[i];
    }
    r.p[i] = r.p[i] - o.lr * d;
  }
}

template <class O>
void ref_adam(Ref& r, const std::vector<double>& g, const O& o, bool decoupled) {
  ++r.step;
  const auto [b1, b2] = o.betas;
  const double bc1 = 1 - std::pow(b1, r.step), bc2 = 1 - std::pow(b2, r.step);
  for (size_t i = 0; i < r.p.size(); ++i) {
    double grad = o.maximize ? -g[i] : g[i];
    if (decoupled)
      r.p[i] *= 1 - o.lr * o.weight_decay;
    else if (o.weight_decay != 0)
      grad += o.weight_decay * r.p[i];
    r.b0[i] = b1 * r.b0[i] + (1 - b1) * grad;         // exp_avg
    r.b1[i] = b2 * r.b1[i] + (1 - b2) * grad * grad;  // exp_avg_sq
    double v = r.b1[i];
    if (o.amsgrad) v = r.b2[i] = std::max(r.b2[i], r.b1[i]);
    const double denom = std::sqrt(v) / std::sqrt(bc2) + o.eps;  // eps after the bias correction
    r.p[i] -= (o.lr / bc1) * r.b0[i] / denom;
  }
}

void ref_rmsprop(Ref& r, const std::vector<double>& g, const RMSpropOptions& o) {
  ++r.step;
  for (size_t i = 0; i < r.p.size(); ++i) {
    double grad = o.maximize ? -g[i] : g[i];
    if (o.weight_decay != 0) grad += o.weight_decay * r.p[i];
    r.b0[i] = o.alpha * r.b0[i] + (1 - o.alpha) * grad * grad;  // square_avg
    double avg;
    if (o.centered) {
      r.b2[i] = o.alpha * r.b2[i] + (1 - o.alpha) * grad;  // grad_avg
      avg = std::sqrt(r.b0[i] - r.b2[i] * r.b2[i]) + o.eps;
    } else {
      avg = std::sqrt(r.b0[i]) + o.eps;
    }
    if (o.momentum > 0) {
      r.b1[i] = o.momentum * r.b1[i] + grad / avg;
      r.p[i] -= o.lr * r.b1[i];
    } else {
      r.p[i] -= o.lr * grad / avg;
    }
  }
}

// Runs `steps` steps of opt on one f64 parameter and the reference alongside, comparing after each.
void run_against(Optimizer& opt, Tensor& p, const std::function<void(Ref&, const std::vector<double>&)>& ref, int steps,
                 const std::string& what) {
  Ref r(values(p));
  for (int t = 1; t <= steps; ++t) {
    auto g = grad_at(t, r.p.size());
    p.set_grad(from_vector<double>(g, p.shape()));
    opt.step();
    ref(r, g);
    expect_close(values(p), r.p, 1e-13, 1e-15, what + " step " + std::to_string(t));
  }
}

// ---------------------------------------------------------------- hand-computed single steps
TEST(OptimSGD, PlainStepByHand) {
  Tensor p = param({1.0, 2.0, -3.0});
  SGD opt({p}, {.lr = 0.1});
  p.set_grad(from_vector<double>({0.5, -1.0, 2.0}, {3}));
  opt.step();
  expect_close(values(p), {0.95, 2.1, -3.2}, 0, 1e-15, "sgd");
}

TEST(OptimSGD, MomentumByHand) {
  // buf1 = g1; buf2 = 0.9 buf1 + (1 - 0.5) g2; p -= lr buf
  Tensor p = param({1.0});
  SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.5});
  p.set_grad(from_vector<double>({2.0}, {1}));
  opt.step();
  EXPECT_DOUBLE_EQ(values(p)[0], 1.0 - 0.1 * 2.0);
  p.set_grad(from_vector<double>({1.0}, {1}));
  opt.step();
  EXPECT_DOUBLE_EQ(values(p)[0], 0.8 - 0.1 * (0.9 * 2.0 + 0.5 * 1.0));
}

TEST(OptimAdam, FirstStepIsLrTimesSign) {
  // After one step m_hat = g, v_hat = g^2, so the update is lr * g / (|g| + eps).
  Tensor p = param({1.0, -1.0});
  Adam opt({p}, {.lr = 0.01, .eps = 0});
  p.set_grad(from_vector<double>({3.0, -0.2}, {2}));
  opt.step();
  expect_close(values(p), {0.99, -0.99}, 1e-15, 0, "adam first step");
}

// ---------------------------------------------------------------- option sweeps against the formulas
TEST(OptimSGD, OptionsMatchFormulas) {
  const std::vector<SGDOptions> cfgs = {
      {.lr = 0.1},
      {.lr = 0.1, .momentum = 0.9},
      {.lr = 0.05, .momentum = 0.8, .dampening = 0.3},
      {.lr = 0.05, .momentum = 0.9, .nesterov = true},
      {.lr = 0.1, .weight_decay = 0.01},
      {.lr = 0.1, .momentum = 0.5, .weight_decay = 0.1, .nesterov = true, .maximize = true},
      {.lr = 0.1, .maximize = true},
  };
  for (size_t c = 0; c < cfgs.size(); ++c) {
    Tensor p = param(kInit);
    SGD opt({p}, cfgs[c]);
    run_against(
        opt, p, [&](Ref& r, const std::vector<double>& g) { ref_sgd(r, g, cfgs[c]); }, 6,
        "sgd cfg " + std::to_string(c));
  }
}

TEST(OptimAdam, OptionsMatchFormulas) {
  const std::vector<AdamOptions> cfgs = {
      {},
      {.lr = 0.01, .betas = {0.8, 0.99}, .eps = 1e-6},
      {.lr = 0.01, .weight_decay = 0.1},
      {.lr = 0.01, .amsgrad = true},
      {.lr = 0.01, .weight_decay = 0.05, .amsgrad = true, .maximize = true},
      {.lr = 0.02, .betas = {0.0, 0.0}},
  };
  for (size_t c = 0; c < cfgs.size(); ++c) {
    Tensor p = param(kInit);
    Adam opt({p}, cfgs[c]);
    run_against(
        opt, p, [&](Ref& r, const std::vector<double>& g) { ref_adam(r, g, cfgs[c], false); }, 7,
        "adam cfg " + std::to_string(c));
  }
}

TEST(OptimAdamW, OptionsMatchFormulas) {
  const std::vector<AdamWOptions> cfgs = {
      {},
      {.lr = 0.01, .weight_decay = 0.1},
      {.lr = 0.01, .weight_decay = 0},
      {.lr = 0.01, .amsgrad = true},
      {.lr = 0.01, .betas = {0.5, 0.9}, .weight_decay = 0.2, .amsgrad = true, .maximize = true},
  };
  for (size_t c = 0; c < cfgs.size(); ++c) {
    Tensor p = param(kInit);
    AdamW opt({p}, cfgs[c]);
    run_against(
        opt, p, [&](Ref& r, const std::vector<double>& g) { ref_adam(r, g, cfgs[c], true); }, 7,
        "adamw cfg " + std::to_string(c));
  }
}

TEST(OptimAdamW, DecayIsDecoupled) {
  // With a zero gradient Adam's update vanishes (m = 0), AdamW still shrinks the parameter by lr * wd.
  Tensor p = param({2.0});
  AdamW opt({p}, {.lr = 0.1, .weight_decay = 0.5});
  p.set_grad(zeros({1}, DType::F64));
  opt.step();
  EXPECT_DOUBLE_EQ(values(p)[0], 2.0 * (1 - 0.1 * 0.5));
}

TEST(OptimRMSprop, OptionsMatchFormulas) {
  const std::vector<RMSpropOptions> cfgs = {
      {},
      {.lr = 0.01, .alpha = 0.9, .eps = 1e-6},
      {.lr = 0.01, .weight_decay = 0.1},
      {.lr = 0.01, .momentum = 0.9},
      {.lr = 0.01, .centered = true},
      {.lr = 0.01, .alpha = 0.95, .weight_decay = 0.05, .momentum = 0.5, .centered = true, .maximize = true},
  };
  for (size_t c = 0; c < cfgs.size(); ++c) {
    Tensor p = param(kInit);
    RMSprop opt({p}, cfgs[c]);
    run_against(
        opt, p, [&](Ref& r, const std::vector<double>& g) { ref_rmsprop(r, g, cfgs[c]); }, 7,
        "rmsprop cfg " + std::to_string(c));
  }
}

TEST(OptimAdam, LargeParameterUsesParallelPathCorrectly) {
  const int64_t n = 100003;  // above the 32K grain, odd split
  std::vector<float> init(n);
  for (int64_t i = 0; i < n; ++i) init[i] = static_cast<float>(std::cos(0.001 * i));
  Tensor p = param_f32(init), q = param_f32(init);
  Adam a({p}, {.lr = 0.01, .amsgrad = true});
  Adam b({q}, {.lr = 0.01, .amsgrad = true});
  const int threads = get_num_threads();
  for (int t = 1; t <= 3; ++t) {
    Tensor g = randn({n}, 100 + t);
    p.set_grad(g);
    q.set_grad(g.clone());
    set_num_threads(1);
    a.step();
    set_num_threads(std::max(threads, 2));
    b.step();
  }
  set_num_threads(threads);
  EXPECT_EQ(p.to_vector<float>(), q.to_vector<float>());
}

// ---------------------------------------------------------------- groups
TEST(OptimGroups, PlainConstructorIsTheOneGroupCase) {
  auto run = [](bool grouped) {
    std::vector<Tensor> ps = {param_f32({1.f, 2.f, 3.f}), param_f32({-0.5f, 0.25f})};
    AdamOptions o{.lr = 0.05, .weight_decay = 0.01, .amsgrad = true};
    std::unique_ptr<Adam> opt =
        grouped ? std::make_unique<Adam>(std::vector<ParamGroup<AdamOptions>>{{ps, o}}) : std::make_unique<Adam>(ps, o);
    for (int t = 1; t <= 5; ++t) {
      for (auto& p : ps) p.set_grad(from_vector<double>(grad_at(t, p.numel()), p.shape()).to(DType::F32));
      opt->step();
    }
    std::vector<float> out;
    for (auto& p : ps)
      for (float v : p.to_vector<float>()) out.push_back(v);
    return out;
  };
  EXPECT_EQ(run(false), run(true));
}

TEST(OptimGroups, PerGroupLearningRatesAndLaterChanges) {
  Tensor a = param({1.0}), b = param({1.0});
  SGD opt(std::vector<ParamGroup<SGDOptions>>{{{a}, {.lr = 0.1}}, {{b}, {.lr = 0.01}}});
  ASSERT_EQ(opt.num_param_groups(), 2u);
  a.set_grad(ones({1}, DType::F64));
  b.set_grad(ones({1}, DType::F64));
  opt.step();
  EXPECT_DOUBLE_EQ(values(a)[0], 0.9);
  EXPECT_DOUBLE_EQ(values(b)[0], 0.99);
  opt.param_groups()[1].options.lr = 0.5;
  opt.set_lr(0, 0.0);
  opt.step();
  EXPECT_DOUBLE_EQ(values(a)[0], 0.9);
  EXPECT_DOUBLE_EQ(values(b)[0], 0.49);
  Tensor c = param({2.0});
  opt.add_param_group({{c}, {.lr = 1.0, .weight_decay = 0.5}});
  c.set_grad(ones({1}, DType::F64));
  opt.step();
  EXPECT_DOUBLE_EQ(values(c)[0], 2.0 - (1.0 + 0.5 * 2.0));
}

TEST(OptimGroups, ParamsWithoutGradAreSkippedAndGetNoState) {
  Tensor a = param({1.0, 2.0}), b = param({3.0});
  Adam opt({a, b}, {.lr = 0.1});
  a.set_grad(ones({2}, DType::F64));
  opt.step();
  EXPECT_EQ(values(b), std::vector<double>{3.0});
  auto st = opt.state_tensors();
  for (auto& [name, t] : st) EXPECT_EQ(name.find("param1"), std::string::npos) << name;
  EXPECT_EQ(st.size(), 3u);  // step, exp_avg, exp_avg_sq of param0
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
  std::vector<double> before = values(a);
  opt.step();  // nothing has a grad: no change, no step count increase
  EXPECT_EQ(values(a), before);
  EXPECT_EQ(opt.state_tensors()[0].second.item<int64_t>(), 1);
}

TEST(OptimGroups, UpdatesSharedStorageInPlaceAndBumpsVersion) {
  Tensor p = param({1.0, 2.0});
  Tensor alias = p.detach();
  Tensor y = (p * p).sum();  // saves p
  SGD opt({p}, {.lr = 0.1});
  p.set_grad(ones({2}, DType::F64));
  opt.step();
  EXPECT_EQ(values(alias), (std::vector<double>{0.9, 1.9}));
  EXPECT_FALSE(p.grad_fn_name().size());
  EXPECT_OXM_ERROR(y.backward(), InvalidArgument, "");
}

// ---------------------------------------------------------------- validation
TEST(OptimValidation, OptionsAreChecked) {
  Tensor p = param({1.0});
  EXPECT_OXM_ERROR(SGD({p}, {.lr = -1}), InvalidArgument, "SGD: invalid lr");
  EXPECT_OXM_ERROR(SGD({p}, {.lr = 0.1, .momentum = -0.1}), InvalidArgument, "SGD: invalid momentum");
  EXPECT_OXM_ERROR(SGD({p}, {.lr = 0.1, .nesterov = true}), InvalidArgument, "SGD: nesterov");
  EXPECT_OXM_ERROR(SGD({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}), InvalidArgument,
                   "SGD: nesterov");
  EXPECT_OXM_ERROR(Adam({p}, {.betas = {1.0, 0.9}}), InvalidArgument, "Adam: invalid betas.first");
  EXPECT_OXM_ERROR(Adam({p}, {.betas = {0.9, -0.1}}), InvalidArgument, "Adam: invalid betas.second");
  EXPECT_OXM_ERROR(Adam({p}, {.eps = -1e-8}), InvalidArgument, "Adam: invalid eps");
  EXPECT_OXM_ERROR(AdamW({p}, {.lr = -0.1}), InvalidArgument, "AdamW: invalid lr");
  EXPECT_OXM_ERROR(AdamW({p}, {.weight_decay = -1}), InvalidArgument, "AdamW: invalid weight_decay");
  EXPECT_OXM_ERROR(RMSprop({p}, {.alpha = -0.5}), InvalidArgument, "RMSprop: invalid alpha");
  EXPECT_OXM_ERROR(RMSprop({p}, {.eps = -1}), InvalidArgument, "RMSprop: invalid eps");
  // Options edited later are re-validated by step(), before anything changes.
  SGD opt({p}, {.lr = 0.1});
  p.set_grad(ones({1}, DType::F64));
  opt.param_groups()[0].options.lr = -3;
  EXPECT_OXM_ERROR(opt.step(), InvalidArgument, "SGD: invalid lr");
  EXPECT_EQ(values(p), std::vector<double>{1.0});
}

TEST(OptimValidation, ParamsAreChecked) {
  Tensor p = param({1.0, 2.0});
  EXPECT_OXM_ERROR(Adam(std::vector<Tensor>{}), InvalidArgument, "empty");
  EXPECT_OXM_ERROR(Adam({p, p}), InvalidArgument, "more than once");
  EXPECT_OXM_ERROR(Adam({Tensor()}), InvalidArgument, "undefined");
  EXPECT_OXM_ERROR(Adam({arange(3)}), UnsupportedDType, "Adam: parameter 0");
  Tensor m = from_vector<double>({1, 2, 3, 4}, {2, 2}).requires_grad_();
  EXPECT_OXM_ERROR(SGD({m.detach().t()}, {}), InvalidArgument, "not contiguous");
  EXPECT_OXM_ERROR(SGD({m * 2.0}, {}), InvalidArgument, "not a leaf");
  SGD opt({p}, {});
  EXPECT_OXM_ERROR(opt.add_param_group({{p}, {}}), InvalidArgument, "more than once");
}

TEST(OptimValidation, GradMismatchIsTypedAndChangesNothing) {
  Tensor a = param({1.0, 2.0}), b = param({1.0, 2.0});
  SGD opt({a, b}, {.lr = 0.1});
  a.set_grad(ones({2}, DType::F64));
  // set_grad validates, so reach a bad grad through the internals (as a buggy backend could).
  oxmera::detail::impl_of(b).grad = ones({3}, DType::F64);
  EXPECT_OXM_ERROR(opt.step(), ShapeMismatch, "SGD.step: group 0 parameter 1");
  oxmera::detail::impl_of(b).grad = ones({2}, DType::F32);
  EXPECT_OXM_ERROR(opt.step(), DTypeMismatch, "SGD.step: group 0 parameter 1");
  EXPECT_EQ(values(a), (std::vector<double>{1.0, 2.0}));
}

// ---------------------------------------------------------------- checkpoint state
template <class Opt, class O>
void check_state_round_trip(const O& options, const std::vector<std::string>& expect_names) {
  std::vector<Tensor> ps = {param_f32({1.f, -2.f, 3.f}), param_f32({0.5f, 0.25f})};
  Opt opt(ps, options);
  auto feed = [&](int t) {
    for (auto& p : ps) p.set_grad(from_vector<double>(grad_at(t, p.numel()), p.shape()).to(DType::F32));
  };
  for (int t = 1; t <= 3; ++t) {
    feed(t);
    opt.step();
  }
  std::vector<std::pair<std::string, Tensor>> saved;
  for (auto& [n, t] : opt.state_tensors()) saved.emplace_back(n, t.clone());
  std::vector<std::string> names;
  for (auto& e : saved) names.push_back(e.first);
  EXPECT_EQ(names, expect_names);
  std::vector<Tensor> snap = {ps[0].detach().clone(), ps[1].detach().clone()};
  for (int t = 4; t <= 6; ++t) {
    feed(t);
    opt.step();
  }
  // Fresh optimizer over fresh params restored to the snapshot: the continuation is bit-identical.
  std::vector<Tensor> qs = {snap[0].clone().requires_grad_(), snap[1].clone().requires_grad_()};
  Opt opt2(qs, options);
  opt2.load_state_tensors(saved);
  for (int t = 4; t <= 6; ++t) {
    for (auto& q : qs) q.set_grad(from_vector<double>(grad_at(t, q.numel()), q.shape()).to(DType::F32));
    opt2.step();
  }
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(ps[i].to_vector<float>(), qs[i].to_vector<float>());
}

TEST(OptimState, RoundTripContinuesBitIdentically) {
  check_state_round_trip<SGD>(
      SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true},
      {"group0.param0.step", "group0.param0.momentum_buffer", "group0.param1.step", "group0.param1.momentum_buffer"});
  check_state_round_trip<Adam>(
      AdamOptions{.lr = 0.01, .amsgrad = true},
      {"group0.param0.step", "group0.param0.exp_avg", "group0.param0.exp_avg_sq", "group0.param0.max_exp_avg_sq",
       "group0.param1.step", "group0.param1.exp_avg", "group0.param1.exp_avg_sq", "group0.param1.max_exp_avg_sq"});
  check_state_round_trip<AdamW>(AdamWOptions{.lr = 0.01},
                                {"group0.param0.step", "group0.param0.exp_avg", "group0.param0.exp_avg_sq",
                                 "group0.param1.step", "group0.param1.exp_avg", "group0.param1.exp_avg_sq"});
  check_state_round_trip<RMSprop>(
      RMSpropOptions{.lr = 0.01, .momentum = 0.5, .centered = true},
      {"group0.param0.step", "group0.param0.square_avg", "group0.param0.momentum_buffer", "group0.param0.grad_avg",
       "group0.param1.step", "group0.param1.square_avg", "group0.param1.momentum_buffer", "group0.param1.grad_avg"});
}

TEST(OptimState, BadLoadsAreTypedAndChangeNothing) {
  Tensor p = param({1.0, 2.0});
  Adam opt({p}, {.lr = 0.1});
  p.set_grad(ones({2}, DType::F64));
  opt.step();
  auto good = opt.state_tensors();
  auto before = values(good[1].second);
  auto with = [&](size_t i, std::string name, Tensor t) {
    auto e = good;
    if (i < e.size())
      e[i] = {std::move(name), std::move(t)};
    else
      e.emplace_back(std::move(name), std::move(t));
    return e;
  };
  EXPECT_OXM_ERROR(opt.load_state_tensors(with(1, "group0.param0.exp_avg", zeros({3}, DType::F64))), ShapeMismatch,
                   "exp_avg");
  EXPECT_OXM_ERROR(opt.load_state_tensors(with(1, "group0.param0.exp_avg", zeros({2}))), DTypeMismatch, "exp_avg");
  EXPECT_OXM_ERROR(opt.load_state_tensors(with(9, "group0.param0.nope", zeros({2}, DType::F64))), InvalidArgument,
                   "no state buffer 'nope'");
  EXPECT_OXM_ERROR(opt.load_state_tensors(with(9, "group1.param0.step", scalar(1, DType::I64))), IndexOutOfBounds,
                   "group1.param0.step");
  EXPECT_OXM_ERROR(opt.load_state_tensors(with(9, "grp0.param0.step", scalar(1, DType::I64))), InvalidArgument,
                   "bad name");
  EXPECT_OXM_ERROR(opt.load_state_tensors(with(9, "group0.param0.exp_avg", zeros({2}, DType::F64))), InvalidArgument,
                   "duplicate");
  EXPECT_OXM_ERROR(opt.load_state_tensors({good[0], good[1]}), InvalidArgument, "exp_avg_sq");
  EXPECT_OXM_ERROR(opt.load_state_tensors({good[1], good[2]}), InvalidArgument, "no step entry");
  auto now = opt.state_tensors();
  ASSERT_EQ(now.size(), good.size());
  EXPECT_TRUE(now[1].second.is_same(good[1].second));  // the live buffers were not replaced
  EXPECT_EQ(values(now[1].second), before);
  opt.load_state_tensors({});  // an empty state is valid: everything starts fresh
  EXPECT_TRUE(opt.state_tensors().empty());
}

// ---------------------------------------------------------------- schedulers
TEST(OptimSched, StepLRClosedForm) {
  Tensor a = param({1.0}), b = param({1.0});
  SGD opt(std::vector<ParamGroup<SGDOptions>>{{{a}, {.lr = 0.1}}, {{b}, {.lr = 1.0}}});
  optim::StepLR s(opt, 3, 0.5);
  for (int e = 0; e < 10; ++e) {
    if (e) s.step();
    EXPECT_DOUBLE_EQ(opt.lr(0), 0.1 * std::pow(0.5, e / 3)) << e;
    EXPECT_DOUBLE_EQ(opt.lr(1), 1.0 * std::pow(0.5, e / 3)) << e;
    EXPECT_EQ(s.get_last_lr(), (std::vector<double>{opt.lr(0), opt.lr(1)}));
  }
  EXPECT_OXM_ERROR(optim::StepLR(opt, 0), InvalidArgument, "step_size");
}

TEST(OptimSched, CosineAnnealingClosedForm) {
  Tensor a = param({1.0});
  Adam opt({a}, {.lr = 0.1});
  optim::CosineAnnealingLR s(opt, 10, 0.001);
  for (int e = 0; e <= 25; ++e) {
    if (e) s.step();
    const double want = 0.001 + (0.1 - 0.001) * (1 + std::cos(std::numbers::pi * e / 10)) / 2;
    EXPECT_NEAR(opt.lr(0), want, 1e-15) << e;
  }
}

TEST(OptimSched, LinearWarmupClosedForm) {
  Tensor a = param({1.0});
  AdamW opt({a}, {.lr = 0.3});
  optim::LinearWarmup s(opt, 4, 0.25);
  const double want[] = {0.075, 0.13125, 0.1875, 0.24375, 0.3, 0.3, 0.3};
  for (int e = 0; e < 7; ++e) {
    if (e) s.step();
    EXPECT_NEAR(opt.lr(0), want[e], 1e-15) << e;
    EXPECT_EQ(s.last_epoch(), e);
  }
  EXPECT_OXM_ERROR(optim::LinearWarmup(opt, 3, 0.0), InvalidArgument, "start_factor");
}

TEST(OptimSched, ReduceLROnPlateauFollowsTorch) {
  Tensor a = param({1.0});
  SGD opt({a}, {.lr = 1.0});
  optim::ReduceLROnPlateau s(opt, {.factor = 0.5, .patience = 2, .cooldown = 1, .min_lr = 0.2});
  // metric: improves, then plateaus. torch: reduce when bad epochs > patience, then cooldown.
  const double metrics[] = {10, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9};
  const double lr[] = {1, 1, 1, 1, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25, 0.2};
  for (int e = 0; e < 13; ++e) {
    s.step(metrics[e]);
    EXPECT_DOUBLE_EQ(s.get_last_lr()[0], lr[e]) << e;
  }
  // 1e-4 relative threshold: 9 * (1 - 1e-4) is not beaten by 8.9995, is by 8.999.
  EXPECT_EQ(s.best(), 9.0);
  s.step(8.9995);
  EXPECT_EQ(s.best(), 9.0);
  s.step(8.999);
  EXPECT_EQ(s.best(), 8.999);
  EXPECT_OXM_ERROR(optim::ReduceLROnPlateau(opt, {.factor = 1.0}), InvalidArgument, "factor");
}

// A scheduler's state survives a checkpoint (through its metadata): the resumed run sets the same lrs as
// the uninterrupted one, bit for bit; bad states are refused without changing anything.
TEST(OptimSched, StateDictRoundTripsThroughACheckpoint) {
  const std::string path = "sched_state_" + std::to_string(::getpid()) + ".safetensors";
  nn::Linear model(2, 1);
  Tensor w = model.parameters()[0];
  Adam opt(model.parameters(), {.lr = 0.3});
  optim::CosineAnnealingLR cos(opt, 7, 0.01);
  for (int e = 0; e < 3; ++e) cos.step();
  save_checkpoint(path, model, opt, 3, {}, cos.state_dict());
  nn::Linear model2(2, 1);
  Adam opt2(model2.parameters(), {.lr = 0.05});  // another base lr: the state overrides it
  optim::CosineAnnealingLR cos2(opt2, 7, 0.01);
  std::map<std::string, std::string> md;
  EXPECT_EQ(load_checkpoint(path, model2, opt2, {}, &md), 3);
  cos2.load_state_dict(md);
  EXPECT_EQ(cos2.last_epoch(), 3);
  EXPECT_EQ(opt2.lr(0), opt.lr(0));
  for (int e = 0; e < 6; ++e) {
    cos.step();
    cos2.step();
    EXPECT_EQ(opt2.lr(0), opt.lr(0)) << e;
  }
  std::remove(path.c_str());

  SGD sgd({param({1.0})}, {.lr = 1.0});
  optim::ReduceLROnPlateau p(sgd, {.factor = 0.5, .patience = 1, .cooldown = 2});
  for (double m : {5.0, 4.0, 4.0, 4.0, 4.0}) p.step(m);
  SGD sgd2({param({1.0})}, {.lr = 1.0});
  optim::ReduceLROnPlateau p2(sgd2, {.factor = 0.5, .patience = 1, .cooldown = 2});
  p2.load_state_dict(p.state_dict("plateau."), "plateau.");
  EXPECT_EQ(p2.best(), p.best());
  EXPECT_EQ(sgd2.lr(0), sgd.lr(0));
  for (double m : {4.0, 4.0, 3.0, 3.0, 3.0, 3.0}) {
    p.step(m);
    p2.step(m);
    EXPECT_EQ(sgd2.lr(0), sgd.lr(0));
    EXPECT_EQ(p2.num_bad_epochs(), p.num_bad_epochs());
  }

  auto bad = cos.state_dict();
  bad.erase("lr_scheduler.base_lr.0");
  const double before = opt2.lr(0);
  EXPECT_OXM_ERROR(cos2.load_state_dict(bad), InvalidArgument, "no entry 'lr_scheduler.base_lr.0'");
  bad = cos.state_dict();
  bad["lr_scheduler.last_epoch"] = "three";
  EXPECT_OXM_ERROR(cos2.load_state_dict(bad), InvalidArgument, "not an integer");
  bad = cos.state_dict();
  bad["lr_scheduler.groups"] = "2";
  EXPECT_OXM_ERROR(cos2.load_state_dict(bad), InvalidArgument, "2 parameter groups");
  EXPECT_EQ(opt2.lr(0), before);  // nothing changed
}

// ---------------------------------------------------------------- clip_grad_norm_
TEST(OptimClip, TwoNormScalesAllGrads) {
  Tensor a = param({3.0, 0.0}), b = param({4.0}), c = param({7.0});
  a.set_grad(from_vector<double>({3.0, 0.0}, {2}));
  b.set_grad(from_vector<double>({4.0}, {1}));  // c has no grad: ignored
  double total = optim::clip_grad_norm_({a, b, c}, 1.0);
  EXPECT_DOUBLE_EQ(total, 5.0);
  const double coef = 1.0 / (5.0 + 1e-6);
  expect_close(values(a.grad()), {3.0 * coef, 0.0}, 1e-15, 0, "a");
  expect_close(values(b.grad()), {4.0 * coef}, 1e-15, 0, "b");
  EXPECT_FALSE(c.grad().defined());
  // Under the limit: unchanged.
  EXPECT_NEAR(optim::clip_grad_norm_({a, b}, 10.0), 5.0 * coef, 1e-15);
  expect_close(values(b.grad()), {4.0 * coef}, 1e-15, 0, "b unchanged");
}

TEST(OptimClip, InfAndOneNorms) {
  Tensor a = param({1.0, -6.0}), b = param({2.0});
  a.set_grad(from_vector<double>({1.0, -6.0}, {2}));
  b.set_grad(from_vector<double>({2.0}, {1}));
  EXPECT_DOUBLE_EQ(optim::clip_grad_norm_({a, b}, 3.0, INFINITY), 6.0);
  expect_close(values(a.grad()), {3.0 / (6 + 1e-6), -18.0 / (6 + 1e-6)}, 1e-15, 0, "inf");
  Tensor f = param_f32({1.f, -2.f, 3.f});
  f.set_grad(from_vector<float>({1.f, -2.f, 3.f}, {3}));
  EXPECT_NEAR(optim::clip_grad_norm_({f}, 100.0, 1.0), 6.0, 1e-6);
  EXPECT_NEAR(optim::clip_grad_norm_({f}, 100.0, 3.0), std::cbrt(36.0), 1e-5);
  EXPECT_EQ(optim::clip_grad_norm_({param({1.0})}, 1.0), 0.0);
  EXPECT_OXM_ERROR(optim::clip_grad_norm_({f}, 1.0, 0.0), InvalidArgument, "norm_type");
}

// ---------------------------------------------------------------- convergence
// Minimises 0.5 * sum(a_i (x_i - c_i)^2) through autograd; every optimizer must reach c.
template <class Opt, class O>
void converges(const O& options, int steps, double tol, const char* what) {
  const std::vector<double> a = {1.0, 4.0, 0.5, 2.0}, c = {1.0, -2.0, 3.0, 0.5};
  Tensor x = param({0.0, 0.0, 0.0, 0.0});
  Tensor at = from_vector<double>(a, {4}), ct = from_vector<double>(c, {4});
  Opt opt({x}, options);
  for (int t = 0; t < steps; ++t) {
    opt.zero_grad();
    Tensor d = x - ct;
    ((d * d * at).sum() * 0.5).backward();
    opt.step();
  }
  expect_close(values(x), c, 0, tol, what);
}

TEST(OptimConvergence, QuadraticBowl) {
  converges<SGD>(SGDOptions{.lr = 0.1}, 500, 1e-6, "sgd");
  converges<SGD>(SGDOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true}, 300, 1e-6, "sgd nesterov");
  converges<Adam>(AdamOptions{.lr = 0.05}, 2000, 1e-3, "adam");
  converges<Adam>(AdamOptions{.lr = 0.05, .amsgrad = true}, 2000, 1e-3, "adam amsgrad");
  converges<AdamW>(AdamWOptions{.lr = 0.05, .weight_decay = 0}, 2000, 1e-3, "adamw");
  converges<RMSprop>(RMSpropOptions{.lr = 0.01}, 2000, 1e-2, "rmsprop");
  converges<RMSprop>(RMSpropOptions{.lr = 0.005, .momentum = 0.5, .centered = true}, 2000, 1e-2, "rmsprop centered");
}

}  // namespace
