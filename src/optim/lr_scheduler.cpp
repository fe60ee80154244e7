// LR schedulers (torch.optim.lr_scheduler closed forms) and clip_grad_norm_.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "oxmera/autograd.hpp"
#include "oxmera/optim.hpp"

namespace oxmera::optim {

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
  const double total = inf ? acc : (norm_type == 1.0 ? acc : norm_type == 2.0 ? std::sqrt(acc)
                                                                              : std::pow(acc, 1.0 / norm_type));
  const double coef = std::min(max_norm / (total + 1e-6), 1.0);
  // torch multiplies unconditionally; by 1 is the identity, so skip that.
  if (!(coef == 1.0))
    for (Tensor& g : grads) g.mul_(coef);
  return total;
}

}  // namespace oxmera::optim
