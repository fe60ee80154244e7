#pragma once
// torch.optim-compatible optimizers (torch 1.13 single-tensor formulas), LR schedulers and gradient clipping.
//
//   std::vector<Tensor> params = model.parameters();
//   optim::Adam opt(params, {.lr = 1e-3});
//   optim::CosineAnnealingLR sched(opt, /*T_max=*/100);
//   for (...) { opt.zero_grad(); loss.backward(); optim::clip_grad_norm_(params, 1.0); opt.step(); sched.step(); }
//
// Parameters are shared handles: step() updates the storage the model sees, in place, without recording
// autograd. Parameters whose grad is undefined are skipped. Each parameter's update is one fused pass over
// its memory (Backend::optimizer_step). Parameters must be contiguous f32/f64 leaf tensors (InvalidArgument
// otherwise; make them contiguous before handing them over). State buffers are created lazily on the
// parameter's device with zeros_like.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "oxmera/tensor.hpp"

namespace oxmera::optim {

// The largest step count a loaded optimizer state or checkpoint may hold (2^53: exact as a double, as the bias
// corrections use it, and far from overflowing the next increment).
inline constexpr int64_t kMaxStepCount = int64_t{1} << 53;

// ---- options (field names and defaults as in torch.optim; designated initialisers work)
struct SGDOptions {
  double lr = 1e-2;  // torch requires lr explicitly; 0.01 is only a convenience default
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;  // L2: added to the gradient
  bool nesterov = false;    // needs momentum > 0 and dampening == 0
  bool maximize = false;
};
struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas{0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0;  // L2: added to the gradient
  bool amsgrad = false;
  bool maximize = false;
};
struct AdamWOptions {
  double lr = 1e-3;
  std::pair<double, double> betas{0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;  // decoupled: p *= 1 - lr * weight_decay before the Adam update
  bool amsgrad = false;
  bool maximize = false;
};
struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0;
  double momentum = 0;
  bool centered = false;
  bool maximize = false;
};

// A parameter group: parameters sharing one set of options.
template <class Options>
struct ParamGroup {
  std::vector<Tensor> params;
  Options options{};
};

namespace detail {
// Throw InvalidArgument naming the optimizer and the option.
void validate_options(const SGDOptions& o);
void validate_options(const AdamOptions& o);
void validate_options(const AdamWOptions& o);
void validate_options(const RMSpropOptions& o);
}  // namespace detail

// Type-erased optimizer: what schedulers, training loops and checkpoints need.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient. Options and gradients are validated for all groups
  // before any parameter changes (ShapeMismatch / DTypeMismatch / DeviceMismatch naming the parameter).
  void step();
  // Drops every parameter's gradient (torch's set_to_none=True).
  void zero_grad();

  const char* name() const noexcept { return name_; }  // "SGD", "Adam", "AdamW", "RMSprop"
  virtual size_t num_param_groups() const = 0;
  virtual const std::vector<Tensor>& params(size_t group) const = 0;
  virtual double lr(size_t group) const = 0;
  virtual void set_lr(size_t group, double lr) = 0;

  // Checkpoint state, in group/parameter order, for parameters that have state:
  //   "group{g}.param{i}.step"  I64 scalar (number of updates applied),
  //   "group{g}.param{i}.{buf}" the live buffers (aliases, not copies) named as in torch:
  //     SGD: momentum_buffer; Adam/AdamW: exp_avg, exp_avg_sq, max_exp_avg_sq; RMSprop: square_avg,
  //     momentum_buffer, grad_avg.
  // Hyperparameters are not included (they live in the options).
  std::vector<std::pair<std::string, Tensor>> state_tensors() const;
  // Replaces the whole state with copies of `entries` (as produced by state_tensors()), all or nothing:
  // names, indices, dtypes (DTypeMismatch), shapes (ShapeMismatch), the step entry of each parameter and
  // the buffers the current options need are validated before anything changes. Parameters without
  // entries start fresh. Tensors may be on any device; they are copied to the parameter's device.
  void load_state_tensors(const std::vector<std::pair<std::string, Tensor>>& entries);

  // Per-parameter state, keyed by the parameter's TensorImpl (kept alive by `param`).
  struct ParamState {
    Tensor param;
    int64_t step = 0;
    Tensor buf[3];
  };

 protected:
  explicit Optimizer(const char* name) : name_(name) {}
  // Checks params (defined, f32/f64, contiguous, leaf, not already in a group) before a group is added.
  void check_new_params(const std::vector<Tensor>& params) const;
  virtual void validate_group(size_t group) const = 0;
  // Names of state buffers 0..2 ("" = unused) and which the group's current options need after a step.
  virtual const char* buffer_name(int i) const = 0;
  virtual bool buffer_required(size_t group, int i) const = 0;
  // Applies one update to `param` (grad validated, contiguous; st.step already incremented).
  virtual void update(size_t group, const Tensor& param, const Tensor& grad, ParamState& st) = 0;

  std::unordered_map<const oxmera::detail::TensorImpl*, ParamState> state_;

 private:
  // A step() inside a CUDA graph capture: checks that every update works on existing state and registers the
  // replay hook (optimizer.cpp). `items` are the collected updates (oxmera::detail::OptimizerUpdate).
  void prepare_capture(void* items, const std::vector<size_t>& groups);
  const char* name_;
  // Expires with the optimizer: a graph that captured one of its steps refuses to replay after it is gone.
  std::shared_ptr<char> alive_ = std::make_shared<char>(0);
};

// Optimizer with typed parameter groups.
template <class Options>
class GroupedOptimizer : public Optimizer {
 public:
  using options_type = Options;

  // Groups may be edited (e.g. options.lr); step() re-validates options. Don't swap parameters that have
  // state in and out: state is keyed by the parameter tensor.
  std::vector<ParamGroup<Options>>& param_groups() noexcept { return groups_; }
  const std::vector<ParamGroup<Options>>& param_groups() const noexcept { return groups_; }
  void add_param_group(ParamGroup<Options> group) {
    detail::validate_options(group.options);
    check_new_params(group.params);
    groups_.push_back(std::move(group));
  }

  size_t num_param_groups() const override { return groups_.size(); }
  const std::vector<Tensor>& params(size_t group) const override { return groups_.at(group).params; }
  double lr(size_t group) const override { return groups_.at(group).options.lr; }
  void set_lr(size_t group, double lr) override { groups_.at(group).options.lr = lr; }

 protected:
  GroupedOptimizer(const char* name, std::vector<ParamGroup<Options>> groups);
  void validate_group(size_t group) const override { detail::validate_options(groups_.at(group).options); }

  std::vector<ParamGroup<Options>> groups_;
};

class SGD final : public GroupedOptimizer<SGDOptions> {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options);
  explicit SGD(std::vector<ParamGroup<SGDOptions>> groups);

 protected:
  const char* buffer_name(int i) const override;
  bool buffer_required(size_t group, int i) const override;
  void update(size_t group, const Tensor& param, const Tensor& grad, ParamState& st) override;
};

class Adam final : public GroupedOptimizer<AdamOptions> {
 public:
  Adam(std::vector<Tensor> params, AdamOptions options = {});
  explicit Adam(std::vector<ParamGroup<AdamOptions>> groups);

 protected:
  const char* buffer_name(int i) const override;
  bool buffer_required(size_t group, int i) const override;
  void update(size_t group, const Tensor& param, const Tensor& grad, ParamState& st) override;
};

class AdamW final : public GroupedOptimizer<AdamWOptions> {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  explicit AdamW(std::vector<ParamGroup<AdamWOptions>> groups);

 protected:
  const char* buffer_name(int i) const override;
  bool buffer_required(size_t group, int i) const override;
  void update(size_t group, const Tensor& param, const Tensor& grad, ParamState& st) override;
};

class RMSprop final : public GroupedOptimizer<RMSpropOptions> {
 public:
  RMSprop(std::vector<Tensor> params, RMSpropOptions options = {});
  explicit RMSprop(std::vector<ParamGroup<RMSpropOptions>> groups);

 protected:
  const char* buffer_name(int i) const override;
  bool buffer_required(size_t group, int i) const override;
  void update(size_t group, const Tensor& param, const Tensor& grad, ParamState& st) override;
};

// ---- learning-rate schedulers (torch.optim.lr_scheduler). Construction applies epoch 0 (as torch does);
// each step() advances one epoch and sets every group's lr from the closed form of the base lrs (the group
// lrs at construction). Groups added later are not scheduled.
//
// state_dict() / load_state_dict(): the scheduler's state as strings (floats in exact hex form), keyed
// "<prefix>last_epoch", "<prefix>base_lr.<group>", ..., ready to pass as save_checkpoint's metadata and to
// restore from what load_checkpoint returns. load_state_dict sets the optimizer's lrs to match; a missing or
// malformed entry, or a different number of groups, is InvalidArgument and changes nothing.
class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  void step();
  std::vector<double> get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const noexcept { return last_epoch_; }
  const std::vector<double>& base_lrs() const noexcept { return base_lrs_; }
  std::map<std::string, std::string> state_dict(const std::string& prefix = "lr_scheduler.") const;
  void load_state_dict(const std::map<std::string, std::string>& state, const std::string& prefix = "lr_scheduler.");

 protected:
  explicit LRScheduler(Optimizer& opt);
  void apply();  // sets the lrs for last_epoch_ (derived constructors call it once)
  virtual double lr_at(double base_lr, int64_t epoch) const = 0;

  Optimizer& opt_;
  std::vector<double> base_lrs_, last_lr_;
  int64_t last_epoch_ = 0;
};

// lr = base * gamma^floor(epoch / step_size)
class StepLR final : public LRScheduler {
 public:
  StepLR(Optimizer& opt, int64_t step_size, double gamma = 0.1);

 private:
  double lr_at(double base_lr, int64_t epoch) const override;
  int64_t step_size_;
  double gamma_;
};

// lr = eta_min + (base - eta_min) * (1 + cos(pi * epoch / T_max)) / 2
class CosineAnnealingLR final : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& opt, int64_t T_max, double eta_min = 0);

 private:
  double lr_at(double base_lr, int64_t epoch) const override;
  int64_t t_max_;
  double eta_min_;
};

// torch's LinearLR with end_factor 1: lr = base * (start + (1 - start) * min(epoch, warmup) / warmup)
class LinearWarmup final : public LRScheduler {
 public:
  LinearWarmup(Optimizer& opt, int64_t warmup_steps, double start_factor = 1.0 / 3.0);

 private:
  double lr_at(double base_lr, int64_t epoch) const override;
  int64_t warmup_;
  double start_;
};

struct PlateauOptions {
  enum class Mode { Min, Max } mode = Mode::Min;
  double factor = 0.1;  // new lr = max(lr * factor, min_lr)
  int64_t patience = 10;
  double threshold = 1e-4;
  enum class ThresholdMode { Rel, Abs } threshold_mode = ThresholdMode::Rel;
  int64_t cooldown = 0;
  double min_lr = 0;
  double eps = 1e-8;  // lr changes smaller than this are skipped
};

// Reduces every group's lr by `factor` after `patience` epochs without improvement (torch semantics).
class ReduceLROnPlateau {
 public:
  explicit ReduceLROnPlateau(Optimizer& opt, PlateauOptions options = {});
  void step(double metric);
  std::vector<double> get_last_lr() const { return last_lr_; }
  double best() const noexcept { return best_; }
  int64_t num_bad_epochs() const noexcept { return num_bad_; }
  // As LRScheduler's: best, bad-epoch and cooldown counters, epoch and every group's current lr.
  std::map<std::string, std::string> state_dict(const std::string& prefix = "lr_scheduler.") const;
  void load_state_dict(const std::map<std::string, std::string>& state, const std::string& prefix = "lr_scheduler.");

 private:
  bool is_better(double a) const;
  Optimizer& opt_;
  PlateauOptions o_;
  double best_;
  int64_t num_bad_ = 0, cooldown_counter_ = 0, last_epoch_ = 0;
  std::vector<double> last_lr_;
};

// Scales the defined grads of `params` in place so that their joint norm is at most max_norm (torch's
// clip_grad_norm_: coef = max_norm / (total + 1e-6), clamped to 1). norm_type > 0 or +infinity. Returns
// the total norm before clipping (0 when no parameter has a grad). With every grad on one GPU the per-grad sums are
// combined on the device and read once (one wait per call, not one per parameter). Inside a CUDA graph capture
// (cuda::Graph) the
// norm is computed and applied on the device, as torch does everywhere, and the host cannot know it: the
// return value is NaN there.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);

// ---- template definitions
template <class Options>
GroupedOptimizer<Options>::GroupedOptimizer(const char* name, std::vector<ParamGroup<Options>> groups)
    : Optimizer(name) {
  OXM_CHECK(!groups.empty(), InvalidArgument, name, ": got an empty list of parameter groups");
  groups_.reserve(groups.size());
  for (auto& g : groups) add_param_group(std::move(g));
}

}  // namespace oxmera::optim
