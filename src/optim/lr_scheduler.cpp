// LR schedulers (torch.optim.lr_scheduler closed forms) and clip_grad_norm_.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <numbers>

#include "ops/fused.hpp"
#include "ops/graph_capture.hpp"
#include "oxmera/autograd.hpp"
#include "oxmera/optim.hpp"

namespace oxmera::optim {

// ---------------------------------------------------------------- scheduler state as strings
namespace {
std::string exact(double v) {  // hex float: round-trips every double exactly
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}
const std::string& entry(const std::map<std::string, std::string>& state, const std::string& key, const char* who) {
  auto it = state.find(key);
  OXM_CHECK(it != state.end(), InvalidArgument, who, "::load_state_dict: no entry '", key,
            "' (was the state saved by this scheduler type, with this prefix and number of groups?)");
  return it->second;
}
double read_double(const std::map<std::string, std::string>& state, const std::string& key, const char* who) {
  const std::string& s = entry(state, key, who);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  OXM_CHECK(!s.empty() && end == s.c_str() + s.size(), InvalidArgument, who, "::load_state_dict: entry '", key,
            "' is not a number: '", s, "'");
  return v;
}
int64_t read_int(const std::map<std::string, std::string>& state, const std::string& key, const char* who) {
  const std::string& s = entry(state, key, who);
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  OXM_CHECK(!s.empty() && end == s.c_str() + s.size(), InvalidArgument, who, "::load_state_dict: entry '", key,
            "' is not an integer: '", s, "'");
  return static_cast<int64_t>(v);
}
void check_groups(const std::map<std::string, std::string>& state, const std::string& prefix, size_t groups,
                  const char* who) {
  const int64_t saved = read_int(state, prefix + "groups", who);
  OXM_CHECK(saved == static_cast<int64_t>(groups), InvalidArgument, who, "::load_state_dict: the state has ", saved,
            " parameter groups but the optimizer has ", groups);
}
}  // namespace

std::map<std::string, std::string> LRScheduler::state_dict(const std::string& prefix) const {
  std::map<std::string, std::string> s = {{prefix + "last_epoch", std::to_string(last_epoch_)},
                                          {prefix + "groups", std::to_string(base_lrs_.size())}};
  for (size_t g = 0; g < base_lrs_.size(); ++g) s[prefix + "base_lr." + std::to_string(g)] = exact(base_lrs_[g]);
  return s;
}

void LRScheduler::load_state_dict(const std::map<std::string, std::string>& state, const std::string& prefix) {
  const char* who = "LRScheduler";
  check_groups(state, prefix, base_lrs_.size(), who);
  const int64_t epoch = read_int(state, prefix + "last_epoch", who);
  OXM_CHECK(epoch >= 0, InvalidArgument, who, "::load_state_dict: last_epoch must be >= 0, got ", epoch);
  std::vector<double> base(base_lrs_.size());
  for (size_t g = 0; g < base.size(); ++g) base[g] = read_double(state, prefix + "base_lr." + std::to_string(g), who);
  base_lrs_ = std::move(base);  // everything parsed: commit
  last_epoch_ = epoch;
  apply();
}

// ---------------------------------------------------------------- LRScheduler
LRScheduler::LRScheduler(Optimizer& opt) : opt_(opt) {
  for (size_t g = 0; g < opt.num_param_groups(); ++g) base_lrs_.push_back(opt.lr(g));
}

void LRScheduler::apply() {
  last_lr_.resize(base_lrs_.size());
  const size_t n = std::min(base_lrs_.size(), opt_.num_param_groups());
  for (size_t g = 0; g < base_lrs_.size(); ++g) {
    last_lr_[g] = lr_at(base_lrs_[g], last_epoch_);
    if (g < n) opt_.set_lr(g, last_lr_[g]);
  }
}

void LRScheduler::step() {
  ++last_epoch_;
  apply();
}

StepLR::StepLR(Optimizer& opt, int64_t step_size, double gamma)
    : LRScheduler(opt), step_size_(step_size), gamma_(gamma) {
  OXM_CHECK(step_size > 0, InvalidArgument, "StepLR: step_size must be > 0, got ", step_size);
  apply();
}
double StepLR::lr_at(double base, int64_t epoch) const {
  return base * std::pow(gamma_, static_cast<double>(epoch / step_size_));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, int64_t T_max, double eta_min)
    : LRScheduler(opt), t_max_(T_max), eta_min_(eta_min) {
  OXM_CHECK(T_max > 0, InvalidArgument, "CosineAnnealingLR: T_max must be > 0, got ", T_max);
  apply();
}
double CosineAnnealingLR::lr_at(double base, int64_t epoch) const {
  const double c = std::cos(std::numbers::pi * static_cast<double>(epoch) / static_cast<double>(t_max_));
  return eta_min_ + (base - eta_min_) * (1 + c) / 2;
}

LinearWarmup::LinearWarmup(Optimizer& opt, int64_t warmup_steps, double start_factor)
    : LRScheduler(opt), warmup_(warmup_steps), start_(start_factor) {
  OXM_CHECK(warmup_steps > 0, InvalidArgument, "LinearWarmup: warmup_steps must be > 0, got ", warmup_steps);
  OXM_CHECK(start_factor > 0 && start_factor <= 1, InvalidArgument,
            "LinearWarmup: start_factor must be in (0, 1], got ", start_factor);
  apply();
}
double LinearWarmup::lr_at(double base, int64_t epoch) const {
  const double t = static_cast<double>(std::min(epoch, warmup_));
  return base * (start_ + (1.0 - start_) * t / static_cast<double>(warmup_));
}

// ---------------------------------------------------------------- ReduceLROnPlateau
ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& opt, PlateauOptions options) : opt_(opt), o_(options) {
  OXM_CHECK(o_.factor < 1.0 && o_.factor >= 0, InvalidArgument, "ReduceLROnPlateau: factor must be in [0, 1), got ",
            o_.factor);
  OXM_CHECK(o_.patience >= 0 && o_.cooldown >= 0 && o_.min_lr >= 0 && o_.threshold >= 0, InvalidArgument,
            "ReduceLROnPlateau: patience, cooldown, min_lr and threshold must be >= 0");
  best_ = o_.mode == PlateauOptions::Mode::Min ? std::numeric_limits<double>::infinity()
                                               : -std::numeric_limits<double>::infinity();
  for (size_t g = 0; g < opt.num_param_groups(); ++g) last_lr_.push_back(opt.lr(g));
}

bool ReduceLROnPlateau::is_better(double a) const {
  const bool rel = o_.threshold_mode == PlateauOptions::ThresholdMode::Rel;
  if (o_.mode == PlateauOptions::Mode::Min) return rel ? a < best_ * (1 - o_.threshold) : a < best_ - o_.threshold;
  return rel ? a > best_ * (o_.threshold + 1) : a > best_ + o_.threshold;
}

void ReduceLROnPlateau::step(double metric) {
  ++last_epoch_;
  if (is_better(metric)) {
    best_ = metric;
    num_bad_ = 0;
  } else {
    ++num_bad_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_ = 0;  // bad epochs in cooldown don't count
  }
  if (num_bad_ > o_.patience) {
    for (size_t g = 0; g < opt_.num_param_groups(); ++g) {
      const double old_lr = opt_.lr(g), new_lr = std::max(old_lr * o_.factor, o_.min_lr);
      if (old_lr - new_lr > o_.eps) opt_.set_lr(g, new_lr);
    }
    cooldown_counter_ = o_.cooldown;
    num_bad_ = 0;
  }
  last_lr_.clear();
  for (size_t g = 0; g < opt_.num_param_groups(); ++g) last_lr_.push_back(opt_.lr(g));
}

std::map<std::string, std::string> ReduceLROnPlateau::state_dict(const std::string& prefix) const {
  std::map<std::string, std::string> s = {{prefix + "last_epoch", std::to_string(last_epoch_)},
                                          {prefix + "best", exact(best_)},
                                          {prefix + "num_bad_epochs", std::to_string(num_bad_)},
                                          {prefix + "cooldown_counter", std::to_string(cooldown_counter_)},
                                          {prefix + "groups", std::to_string(opt_.num_param_groups())}};
  for (size_t g = 0; g < opt_.num_param_groups(); ++g) s[prefix + "lr." + std::to_string(g)] = exact(opt_.lr(g));
  return s;
}

void ReduceLROnPlateau::load_state_dict(const std::map<std::string, std::string>& state, const std::string& prefix) {
  const char* who = "ReduceLROnPlateau";
  check_groups(state, prefix, opt_.num_param_groups(), who);
  const int64_t epoch = read_int(state, prefix + "last_epoch", who);
  const double best = read_double(state, prefix + "best", who);
  const int64_t bad = read_int(state, prefix + "num_bad_epochs", who);
  const int64_t cooldown = read_int(state, prefix + "cooldown_counter", who);
  std::vector<double> lrs(opt_.num_param_groups());
  for (size_t g = 0; g < lrs.size(); ++g) lrs[g] = read_double(state, prefix + "lr." + std::to_string(g), who);
  last_epoch_ = epoch;  // everything parsed: commit
  best_ = best;
  num_bad_ = bad;
  cooldown_counter_ = cooldown;
  for (size_t g = 0; g < lrs.size(); ++g) opt_.set_lr(g, lrs[g]);
  last_lr_ = lrs;
}

// ---------------------------------------------------------------- clip_grad_norm_
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  OXM_CHECK(norm_type > 0, InvalidArgument, "clip_grad_norm_: norm_type must be > 0 or +inf, got ", norm_type);
  OXM_CHECK(!std::isnan(max_norm), InvalidArgument, "clip_grad_norm_: max_norm is NaN");
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.defined() && p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return 0.0;
  const bool inf = std::isinf(norm_type);
  if (oxmera::detail::capture_open()) {
    // No host read inside a capture: torch's computation, on the device (per-grad norms, their norm, the
    // clamped coefficient as a 0-d tensor multiplied into every grad).
    const auto norm_of = [&](const Tensor& a) {  // of non-negative values
      return inf                ? a.max()
             : norm_type == 1.0 ? a.sum()
             : norm_type == 2.0 ? (a * a).sum().sqrt()
                                : a.pow(norm_type).sum().pow(1.0 / norm_type);
    };
    std::vector<Tensor> norms;
    for (const Tensor& g : grads)
      if (g.numel() != 0) norms.push_back(norm_of(g.abs()));
    if (norms.empty()) return 0.0;
    const Tensor total = norm_of(stack(norms));
    const Tensor coef = (max_norm / (total + 1e-6)).clamp_max(1.0);
    for (Tensor& g : grads) g.mul_(coef);
    return std::numeric_limits<double>::quiet_NaN();
  }
  // The norm from the combined sum of |g|^p (the max for inf), and the clipping coefficient.
  const auto total_of = [&](double acc) {
    return inf || norm_type == 1.0 ? acc : norm_type == 2.0 ? std::sqrt(acc) : std::pow(acc, 1.0 / norm_type);
  };
  const auto coef_of = [&](double total) { return std::min(max_norm / (total + 1e-6), 1.0); };
  // Grads on one device: every grad's sum (or max) stays there (the fused TensorListNorm: one pass per grad on the
  // CPU, a few launches for the list on CUDA, else one op per grad), they are combined there and the host reads the
  // one combined value (one wait, where reading each grad's sum would wait once per parameter); the scaling is
  // TensorListScale (one pass per grad on the CPU, one launch per 24 grads on CUDA, else a mul_ per grad). On the
  // CPU the sums are kept in f64.
  bool one_device = true;
  for (const Tensor& g : grads) one_device = one_device && g.device() == grads[0].device();
  if (one_device) {
    const Device dev = grads[0].device();
    std::vector<oxmera::detail::TensorImpl*> list;
    for (const Tensor& g : grads) list.push_back(g.impl());
    Tensor sums = empty({static_cast<int64_t>(list.size())}, dev.is_cpu() ? DType::F64 : grads[0].dtype(), dev);
    ops::FusedCall norms = ops::TensorListNormCall{list.data(), list.size(), norm_type, sums.impl()};
    ops::run_fused(norms, dev);
    const double total = total_of((inf ? sums.max() : sums.sum()).to(Device::cpu()).to(DType::F64).item<double>());
    const double coef = coef_of(total);
    if (!(coef == 1.0)) {
      ops::FusedCall scale = ops::TensorListScaleCall{list.data(), list.size(), coef};
      ops::run_fused(scale, dev);
    }
    return total;
  }
  double acc = 0;  // max |g| for inf, else sum |g|^p
  for (const Tensor& g : grads) {
    if (g.numel() == 0) continue;
    Tensor a = g.abs();
    if (inf) {
      acc = std::max(acc, a.max().to(DType::F64).item<double>());
      if (std::isnan(acc)) break;
    } else {
      Tensor s = norm_type == 1.0 ? a.sum() : norm_type == 2.0 ? (a * a).sum() : a.pow(norm_type).sum();
      acc += s.to(DType::F64).item<double>();
    }
  }
  const double total = total_of(acc);
  const double coef = coef_of(total);
  // torch multiplies unconditionally; by 1 is the identity, so skip that.
  if (!(coef == 1.0))
    for (Tensor& g : grads) g.mul_(coef);
  return total;
}

}  // namespace oxmera::optim
