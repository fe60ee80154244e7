// Optimizer bookkeeping (groups, validation, lazily created state, checkpoint state) around the fused op
// OptimizerSteps (a backend kernel, or per-parameter tensor ops where the backend offers none).
#include <cmath>
#include <map>
#include <unordered_set>

#include "ops/fused.hpp"
#include "ops/graph_capture.hpp"
#include "oxmera/autograd.hpp"
#include "oxmera/optim.hpp"
#include "tensor/tensor_impl.hpp"

namespace oxmera::optim {

using oxmera::detail::OptimizerStep;
using oxmera::detail::TensorImpl;

namespace {

void check_lr_eps_wd(const char* opt, double lr, double eps, double wd) {
  // Finite too (torch only checks >= 0): an infinite lr, eps or decay turns every weight to inf or NaN.
  OXM_CHECK(std::isfinite(lr) && lr >= 0, InvalidArgument, opt, ": invalid lr ", lr, " (must be finite and >= 0)");
  OXM_CHECK(std::isfinite(eps) && eps >= 0, InvalidArgument, opt, ": invalid eps ", eps, " (must be finite and >= 0)");
  OXM_CHECK(std::isfinite(wd) && wd >= 0, InvalidArgument, opt, ": invalid weight_decay ", wd,
            " (must be finite and >= 0)");
}

void check_betas(const char* opt, std::pair<double, double> b) {
  OXM_CHECK(b.first >= 0 && b.first < 1, InvalidArgument, opt, ": invalid betas.first ", b.first,
            " (must be in [0, 1))");
  OXM_CHECK(b.second >= 0 && b.second < 1, InvalidArgument, opt, ": invalid betas.second ", b.second,
            " (must be in [0, 1))");
}

// Lazily creates a zero state buffer like torch (zeros_like on the parameter's device).
// Updates collected during Optimizer::step (on its thread) and run together: one backend call per device, so
// a GPU updates a whole parameter list in one launch. update() is only reached from step(), which collects.
struct PendingUpdates {
  std::vector<oxmera::detail::OptimizerUpdate> items;
  std::vector<Tensor> keep;  // the gradients (possibly contiguous copies) until the updates have run
};
thread_local PendingUpdates* t_pending = nullptr;

// Points submit() at `p` for its lifetime (Optimizer::step, and a replay hook's probe of the captured updates).
struct Collect {
  explicit Collect(PendingUpdates* p) { t_pending = p; }
  ~Collect() { t_pending = nullptr; }
};

void submit(const char* op, const OptimizerStep& s, const Tensor& param, const Tensor& grad, TensorImpl* s0,
            TensorImpl* s1, TensorImpl* s2) {
  OXM_CHECK(t_pending != nullptr, InvalidArgument, op, ": an update outside Optimizer::step()");
  t_pending->items.push_back({s, param.impl(), grad.impl(), {s0, s1, s2}});
  t_pending->keep.push_back(grad);
}

// Runs the updates, one fused OptimizerSteps call per run of one device; `done` counts the updates of the calls
// that returned. A call that throws is taken to have updated none of its list (the kernels and the fallback
// check the whole list first; what could fail after that is an out-of-memory inside the op-built fallback).
void run_pending(const PendingUpdates& p, size_t& done) {
  size_t begin = 0;
  while (begin < p.items.size()) {
    const Device dev = p.items[begin].param->device();
    size_t end = begin + 1;
    while (end < p.items.size() && p.items[end].param->device() == dev) ++end;
    ops::FusedCall call = ops::OptimizerStepsCall{p.items.data() + begin, end - begin};
    ops::run_fused(call, dev);
    done = end;
    begin = end;
  }
}

TensorImpl* buffer(Tensor& buf, const Tensor& param) {
  if (!buf.defined()) buf = zeros_like(param);
  return buf.impl();
}

Tensor fresh_copy(const Tensor& t, Device device) {
  Tensor d = t.detach().to(device);
  return d.shares_storage(t) ? d.clone() : d.contiguous();
}

}  // namespace

namespace detail {
void validate_options(const SGDOptions& o) {
  check_lr_eps_wd("SGD", o.lr, 0, o.weight_decay);
  OXM_CHECK(o.momentum >= 0, InvalidArgument, "SGD: invalid momentum ", o.momentum, " (must be >= 0)");
  OXM_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), InvalidArgument,
            "SGD: nesterov requires momentum > 0 and dampening == 0 (got momentum ", o.momentum, ", dampening ",
            o.dampening, ")");
}
void validate_options(const AdamOptions& o) {
  check_lr_eps_wd("Adam", o.lr, o.eps, o.weight_decay);
  check_betas("Adam", o.betas);
}
void validate_options(const AdamWOptions& o) {
  check_lr_eps_wd("AdamW", o.lr, o.eps, o.weight_decay);
  check_betas("AdamW", o.betas);
}
void validate_options(const RMSpropOptions& o) {
  check_lr_eps_wd("RMSprop", o.lr, o.eps, o.weight_decay);
  OXM_CHECK(o.momentum >= 0, InvalidArgument, "RMSprop: invalid momentum ", o.momentum, " (must be >= 0)");
  OXM_CHECK(o.alpha >= 0, InvalidArgument, "RMSprop: invalid alpha ", o.alpha, " (must be >= 0)");
}
}  // namespace detail

// ---------------------------------------------------------------- Optimizer
void Optimizer::check_new_params(const std::vector<Tensor>& params) const {
  std::unordered_set<const TensorImpl*> seen;
  for (size_t g = 0; g < num_param_groups(); ++g)
    for (const Tensor& p : this->params(g)) seen.insert(p.impl());
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    OXM_CHECK(p.defined(), InvalidArgument, name_, ": parameter ", i, " is an undefined tensor");
    OXM_CHECK(is_floating(p.dtype()), UnsupportedDType, name_, ": parameter ", i, " has dtype ", p.dtype(),
              "; only f32 and f64 tensors can be optimized");
    OXM_CHECK(p.is_leaf(), InvalidArgument, name_, ": parameter ", i,
              " is not a leaf tensor; optimize the leaf (or a .detach()ed copy with requires_grad_())");
    OXM_CHECK(p.is_contiguous(), InvalidArgument, name_, ": parameter ", i, " of shape ", p.shape(),
              " is not contiguous; pass a contiguous tensor (e.g. .contiguous().detach().requires_grad_())");
    OXM_CHECK(seen.insert(p.impl()).second, InvalidArgument, name_, ": parameter ", i,
              " appears more than once (in this or another parameter group)");
  }
}

void Optimizer::step() {
  NoGradGuard no_grad;
  const size_t ng = num_param_groups();
  // Validate everything first so that a bad group or gradient leaves every parameter untouched.
  for (size_t g = 0; g < ng; ++g) {
    validate_group(g);
    const auto& ps = params(g);
    for (size_t i = 0; i < ps.size(); ++i) {
      const Tensor& p = ps[i];
      OXM_CHECK(p.defined() && p.is_contiguous(), InvalidArgument, name_, ".step: group ", g, " parameter ", i,
                " is undefined or not contiguous");
      const Tensor grad = p.grad();
      if (!grad.defined()) continue;
      OXM_CHECK(grad.dtype() == p.dtype(), DTypeMismatch, name_, ".step: group ", g, " parameter ", i, " has dtype ",
                p.dtype(), " but its grad has dtype ", grad.dtype());
      OXM_CHECK(grad.shape() == p.shape(), ShapeMismatch, name_, ".step: group ", g, " parameter ", i, " has shape ",
                p.shape(), " but its grad has shape ", grad.shape());
      OXM_CHECK(grad.device() == p.device(), DeviceMismatch, name_, ".step: group ", g, " parameter ", i, " is on ",
                p.device(), " but its grad is on ", grad.device());
    }
  }
  PendingUpdates pending;
  // What to undo if an update fails: the step counts advanced and the state buffers created for it.
  struct Undo {
    const TensorImpl* key;
    bool created;  // the state entry itself is new
    bool had[3];
  };
  std::vector<Undo> undo;
  std::vector<size_t> groups;  // each update's group (one submit per update)
  size_t done = 0;
  try {
    {
      Collect collect(&pending);
      for (size_t g = 0; g < ng; ++g) {
        for (const Tensor& p : params(g)) {
          Tensor grad = p.grad();
          if (!grad.defined()) continue;  // torch skips parameters without a gradient
          if (!grad.is_contiguous()) grad = grad.contiguous();
          ParamState& st = state_[p.impl()];
          const bool created = !st.param.defined();
          if (created) st.param = p;
          undo.push_back({p.impl(), created, {st.buf[0].defined(), st.buf[1].defined(), st.buf[2].defined()}});
          ++st.step;
          groups.push_back(g);
          update(g, p, grad, st);
        }
      }
    }
    // In-place writes, visible to autograd's saved-tensor checks (bumped first: if a backend fails part-way,
    // a parameter it did update is never left with its old version).
    const bool capturing = oxmera::detail::capture_open();
    if (capturing) {
      for (size_t i = 0; i < undo.size(); ++i) {
        const Undo& u = undo[i];
        const ParamState& st = state_.at(u.key);
        for (int b = 0; b < 3; ++b)
          OXM_CHECK(!u.created && (u.had[b] || !st.buf[b].defined()), InvalidArgument, name_, ".step: group ",
                    groups[i], "'s parameter of shape ", st.param.shape(), " has no ",
                    st.buf[b].defined() ? buffer_name(b) : "state",
                    " yet, and a CUDA graph must not create optimizer state (the zeros it starts from would be "
                    "written again at every replay); run one step before the capture (torch's warm-up)");
      }
      prepare_capture(&pending.items, groups);
    }
    for (const auto& u : pending.items) ++u.param->storage->version;
    run_pending(pending, done);
    if (capturing)  // nothing ran: each replay advances the counts (the hook prepare_capture registered)
      for (const Undo& u : undo) --state_.at(u.key).step;
  } catch (...) {
    // Updates that ran keep their step and state (undo[i] belongs to pending.items[i]: one submit per update).
    for (size_t i = done; i < undo.size(); ++i) {
      const Undo& u = undo[i];
      if (u.created) {
        state_.erase(u.key);
        continue;
      }
      ParamState& st = state_[u.key];
      --st.step;
      for (int b = 0; b < 3; ++b)
        if (!u.had[b]) st.buf[b] = Tensor();
    }
    throw;
  }
}

namespace {
// The first hyperparameter that differs between a captured update and the same update now, or null.
const char* changed_option(const OptimizerStep& was, const OptimizerStep& now, double& a, double& b) {
  const struct {
    const char* name;
    double was, now;
  } fields[] = {{"lr", was.lr, now.lr},
                {"weight_decay", was.weight_decay, now.weight_decay},
                {"momentum", was.momentum, now.momentum},
                {"dampening", was.dampening, now.dampening},
                {"nesterov", double(was.nesterov), double(now.nesterov)},
                {"betas.first", was.beta1, now.beta1},
                {"betas.second", was.beta2, now.beta2},
                {"eps", was.eps, now.eps},
                {"amsgrad", double(was.amsgrad), double(now.amsgrad)},
                {"alpha", was.alpha, now.alpha},
                {"centered", double(was.centered), double(now.centered)},
                {"maximize", double(was.maximize), double(now.maximize)}};
  for (const auto& f : fields)
    if (!(f.was == f.now)) {
      a = f.was;
      b = f.now;
      return f.name;
    }
  return nullptr;
}
}  // namespace

void Optimizer::prepare_capture(void* items_ptr, const std::vector<size_t>& groups) {
  auto& items = *static_cast<std::vector<oxmera::detail::OptimizerUpdate>*>(items_ptr);
  struct Entry {
    size_t group;
    Tensor param, grad;
    OptimizerStep step;
    const TensorImpl* buf[3];
    int64_t count_index;  // into counts, or -1
  };
  std::vector<Entry> entries;
  int64_t counted = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& u = items[i];
    OXM_CHECK(u.param->device().kind() != DeviceKind::CPU, InvalidArgument, name_,
              ".step: a parameter on the CPU inside a CUDA graph capture (CPU work runs once, at the capture, and "
              "a replay would not repeat it); capture a model whose parameters are all on the GPU");
    const bool adam = u.step.kind == OptimizerStep::Kind::Adam || u.step.kind == OptimizerStep::Kind::AdamW;
    entries.push_back(
        {groups[i], Tensor(), Tensor(), u.step, {u.state[0], u.state[1], u.state[2]}, adam ? counted++ : -1});
    entries.back().param = state_.at(u.param).param;
    entries.back().grad = entries.back().param.grad();
  }
  // Adam's bias corrections follow the step count: the counts live in device memory (allocated by the capture,
  // so the graph's), the kernel reads them, and the hook writes them before every replay.
  Tensor counts;
  std::vector<Tensor> count_views;  // the one-element views the updates point at, kept alive by the hook
  if (counted) {
    counts = empty(Shape{counted}, DType::I64, items.front().param->device());
    for (size_t i = 0; i < items.size(); ++i)
      if (entries[i].count_index >= 0) {
        count_views.push_back(counts.narrow(0, entries[i].count_index, 1));
        items[i].step_count = count_views.back().impl();
      }
  }
  std::weak_ptr<char> alive = alive_;
  oxmera::detail::add_replay_hook([this, alive, entries = std::move(entries), counts, count_views] {
    const auto owner = alive.lock();
    OXM_CHECK(owner != nullptr, InvalidArgument,
              "cuda::Graph::replay: the optimizer whose step this graph captured no longer exists; reset() the "
              "graph (or capture again with the new optimizer)");
    // Everything the graph baked in must still hold: the state buffers it updates and the hyperparameters.
    for (const Entry& e : entries) {
      auto it = state_.find(e.param.impl());
      bool same = it != state_.end() && e.group < num_param_groups();
      for (int b = 0; same && b < 3; ++b) same = it->second.buf[b].impl() == e.buf[b];
      OXM_CHECK(same, InvalidArgument, "cuda::Graph::replay: ", name_, "'s state for a parameter of shape ",
                e.param.shape(), " (group ", e.group,
                ") was replaced or dropped since the capture (load_state_tensors, new groups); the graph would "
                "update the old buffers: capture again");
      validate_group(e.group);
      PendingUpdates scratch;
      {
        Collect collect(&scratch);
        ParamState probe = it->second;
        ++probe.step;
        update(e.group, e.param, e.grad, probe);
      }
      double was = 0, now = 0;
      const char* changed = changed_option(e.step, scratch.items.at(0).step, was, now);
      OXM_CHECK(changed == nullptr, InvalidArgument, "cuda::Graph::replay: ", name_, " group ", e.group, "'s ",
                changed ? changed : "", " is ", now, " but the graph was captured with ", was,
                "; a replay would still use ", was,
                ". Capture again after changing hyperparameters (an lr "
                "schedule needs a capture per value, or a step outside the graph)");
    }
    std::vector<int64_t> values(static_cast<size_t>(counts.defined() ? counts.numel() : 0));
    for (const Entry& e : entries) {
      ParamState& st = state_.at(e.param.impl());
      ++st.step;
      if (e.count_index >= 0) values[static_cast<size_t>(e.count_index)] = st.step;
    }
    if (!values.empty()) oxmera::detail::copy_host_into(counts, values.data(), values.size() * sizeof(int64_t));
  });
}

void Optimizer::zero_grad() {
  for (size_t g = 0; g < num_param_groups(); ++g)
    for (const Tensor& p : params(g))
      if (p.defined()) p.impl()->grad = Tensor();
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state_tensors() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t g = 0; g < num_param_groups(); ++g) {
    const auto& ps = params(g);
    for (size_t i = 0; i < ps.size(); ++i) {
      auto it = state_.find(ps[i].impl());
      if (it == state_.end()) continue;
      const std::string prefix = "group" + std::to_string(g) + ".param" + std::to_string(i) + ".";
      out.emplace_back(prefix + "step", from_vector<int64_t>({it->second.step}, Shape{}));
      for (int b = 0; b < 3; ++b)
        if (it->second.buf[b].defined()) out.emplace_back(prefix + buffer_name(b), it->second.buf[b]);
    }
  }
  return out;
}

namespace {
// Parses "group{g}.param{i}.{rest}"; false when the name has another form.
bool parse_state_name(const std::string& s, size_t& g, size_t& i, std::string& rest) {
  auto number = [&](size_t& pos, size_t& v) {
    size_t start = pos;
    v = 0;
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9' && pos - start < 9) v = v * 10 + (s[pos++] - '0');
    return pos > start;
  };
  if (s.rfind("group", 0) != 0) return false;
  size_t pos = 5;
  if (!number(pos, g) || s.compare(pos, 6, ".param") != 0) return false;
  pos += 6;
  if (!number(pos, i) || pos >= s.size() || s[pos] != '.') return false;
  rest = s.substr(pos + 1);
  return !rest.empty();
}
}  // namespace

void Optimizer::load_state_tensors(const std::vector<std::pair<std::string, Tensor>>& entries) {
  NoGradGuard no_grad;
  struct Pending {
    bool has_step = false;
    int64_t step = 0;
    Tensor buf[3];
  };
  std::map<std::pair<size_t, size_t>, Pending> pending;
  for (const auto& [key, t] : entries) {
    size_t g = 0, i = 0;
    std::string rest;
    OXM_CHECK(parse_state_name(key, g, i, rest), InvalidArgument, name_, ".load_state_tensors: bad name '", key,
              "' (expected group{g}.param{i}.{buffer})");
    OXM_CHECK(g < num_param_groups() && i < params(g).size(), IndexOutOfBounds, name_, ".load_state_tensors: '", key,
              "' names a parameter that does not exist (", num_param_groups(), " groups)");
    OXM_CHECK(t.defined(), InvalidArgument, name_, ".load_state_tensors: '", key, "' is an undefined tensor");
    const Tensor& p = params(g)[i];
    Pending& pe = pending[{g, i}];
    if (rest == "step") {
      OXM_CHECK(!pe.has_step, InvalidArgument, name_, ".load_state_tensors: duplicate '", key, "'");
      OXM_CHECK(t.dtype() == DType::I64, DTypeMismatch, name_, ".load_state_tensors: '", key, "' must be i64, got ",
                t.dtype());
      OXM_CHECK(t.numel() == 1, ShapeMismatch, name_, ".load_state_tensors: '", key,
                "' must hold one element, got shape ", t.shape());
      pe.step = t.to(Device::cpu()).reshape(Shape{}).item<int64_t>();
      OXM_CHECK(pe.step >= 0 && pe.step <= kMaxStepCount, InvalidArgument, name_, ".load_state_tensors: '", key,
                "' is ", pe.step,
                ", outside [0, 2^53] (a step count beyond that overflows the next step() and exceeds "
                "what the bias corrections can represent)");
      pe.has_step = true;
      continue;
    }
    int b = 0;
    while (b < 3 && rest != buffer_name(b)) ++b;
    OXM_CHECK(b < 3 && !rest.empty(), InvalidArgument, name_, ".load_state_tensors: '", key, "': ", name_,
              " has no state buffer '", rest, "'");
    OXM_CHECK(!pe.buf[b].defined(), InvalidArgument, name_, ".load_state_tensors: duplicate '", key, "'");
    OXM_CHECK(t.dtype() == p.dtype(), DTypeMismatch, name_, ".load_state_tensors: '", key, "' has dtype ", t.dtype(),
              " but the parameter has dtype ", p.dtype());
    OXM_CHECK(t.shape() == p.shape(), ShapeMismatch, name_, ".load_state_tensors: '", key, "' has shape ", t.shape(),
              " but the parameter has shape ", p.shape());
    // A running average of squares (Adam's exp_avg_sq, RMSprop's square_avg) is never negative or NaN; one that is
    // would turn the weights to NaN at the next step() with no error (found by the checkpoint fuzzer's corpus).
    if (rest.find("sq") != std::string::npos || rest == "square_avg") {
      NoGradGuard ng;
      const Tensor d = t.detach();
      const double bad =
          t.numel() ? (d.lt(0.0).to(DType::F64).sum() + d.isnan().to(DType::F64).sum()).item<double>() : 0;
      OXM_CHECK(bad == 0, InvalidArgument, name_, ".load_state_tensors: '", key, "' has ", bad,
                " negative or NaN entries; a running average of squares cannot (the file is corrupt)");
    }
    pe.buf[b] = t;
  }
  for (const auto& [gi, pe] : pending) {
    OXM_CHECK(pe.has_step, InvalidArgument, name_, ".load_state_tensors: group", gi.first, ".param", gi.second,
              " has buffers but no step entry");
    for (int b = 0; b < 3; ++b)
      OXM_CHECK(pe.step == 0 || !buffer_required(gi.first, b) || pe.buf[b].defined(), InvalidArgument, name_,
                ".load_state_tensors: group", gi.first, ".param", gi.second, " lacks '", buffer_name(b),
                "', which the current options need");
  }
  // Everything is valid: build the new state (copies, never aliases of the caller's tensors), then swap.
  std::unordered_map<const TensorImpl*, ParamState> next;
  for (const auto& [gi, pe] : pending) {
    const Tensor& p = params(gi.first)[gi.second];
    ParamState st;
    st.param = p;
    st.step = pe.step;
    for (int b = 0; b < 3; ++b)
      if (pe.buf[b].defined()) st.buf[b] = fresh_copy(pe.buf[b], p.device());
    next.emplace(p.impl(), std::move(st));
  }
  state_.swap(next);
}

// ---------------------------------------------------------------- SGD
SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : GroupedOptimizer("SGD", {ParamGroup<SGDOptions>{std::move(params), options}}) {
  OXM_CHECK(!groups_[0].params.empty(), InvalidArgument, "SGD: got an empty parameter list");
}
SGD::SGD(std::vector<ParamGroup<SGDOptions>> groups) : GroupedOptimizer("SGD", std::move(groups)) {}
const char* SGD::buffer_name(int i) const { return i == 0 ? "momentum_buffer" : ""; }
bool SGD::buffer_required(size_t, int) const { return false; }  // absent momentum buffer = first step
void SGD::update(size_t group, const Tensor& param, const Tensor& grad, ParamState& st) {
  const SGDOptions& o = groups_[group].options;
  OptimizerStep s;
  s.kind = OptimizerStep::Kind::SGD;
  s.lr = o.lr;
  s.weight_decay = o.weight_decay;
  s.momentum = o.momentum;
  s.dampening = o.dampening;
  s.nesterov = o.nesterov;
  s.maximize = o.maximize;
  s.step = st.step;
  TensorImpl* buf = nullptr;
  if (o.momentum != 0) {
    s.first_step = !st.buf[0].defined();
    buf = buffer(st.buf[0], param);
  }
  submit("SGD.step", s, param, grad, buf, nullptr, nullptr);
}

// ---------------------------------------------------------------- Adam / AdamW
namespace {
template <class O>
void adam_update(OptimizerStep::Kind kind, const O& o, const Tensor& param, const Tensor& grad,
                 Optimizer::ParamState& st, const char* op) {
  OptimizerStep s;
  s.kind = kind;
  s.lr = o.lr;
  s.weight_decay = o.weight_decay;
  s.beta1 = o.betas.first;
  s.beta2 = o.betas.second;
  s.eps = o.eps;
  s.amsgrad = o.amsgrad;
  s.maximize = o.maximize;
  s.step = st.step;
  TensorImpl* m = buffer(st.buf[0], param);
  TensorImpl* v = buffer(st.buf[1], param);
  TensorImpl* vmax = o.amsgrad ? buffer(st.buf[2], param) : nullptr;
  submit(op, s, param, grad, m, v, vmax);
}
const char* adam_buffer_name(int i) {
  static const char* const names[3] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return names[i];
}
}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : GroupedOptimizer("Adam", {ParamGroup<AdamOptions>{std::move(params), options}}) {
  OXM_CHECK(!groups_[0].params.empty(), InvalidArgument, "Adam: got an empty parameter list");
}
Adam::Adam(std::vector<ParamGroup<AdamOptions>> groups) : GroupedOptimizer("Adam", std::move(groups)) {}
const char* Adam::buffer_name(int i) const { return adam_buffer_name(i); }
bool Adam::buffer_required(size_t group, int i) const { return i < 2 || groups_[group].options.amsgrad; }
void Adam::update(size_t group, const Tensor& param, const Tensor& grad, ParamState& st) {
  adam_update(OptimizerStep::Kind::Adam, groups_[group].options, param, grad, st, "Adam.step");
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : GroupedOptimizer("AdamW", {ParamGroup<AdamWOptions>{std::move(params), options}}) {
  OXM_CHECK(!groups_[0].params.empty(), InvalidArgument, "AdamW: got an empty parameter list");
}
AdamW::AdamW(std::vector<ParamGroup<AdamWOptions>> groups) : GroupedOptimizer("AdamW", std::move(groups)) {}
const char* AdamW::buffer_name(int i) const { return adam_buffer_name(i); }
bool AdamW::buffer_required(size_t group, int i) const { return i < 2 || groups_[group].options.amsgrad; }
void AdamW::update(size_t group, const Tensor& param, const Tensor& grad, ParamState& st) {
  adam_update(OptimizerStep::Kind::AdamW, groups_[group].options, param, grad, st, "AdamW.step");
}

// ---------------------------------------------------------------- RMSprop
RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions options)
    : GroupedOptimizer("RMSprop", {ParamGroup<RMSpropOptions>{std::move(params), options}}) {
  OXM_CHECK(!groups_[0].params.empty(), InvalidArgument, "RMSprop: got an empty parameter list");
}
RMSprop::RMSprop(std::vector<ParamGroup<RMSpropOptions>> groups) : GroupedOptimizer("RMSprop", std::move(groups)) {}
const char* RMSprop::buffer_name(int i) const {
  static const char* const names[3] = {"square_avg", "momentum_buffer", "grad_avg"};
  return names[i];
}
bool RMSprop::buffer_required(size_t group, int i) const {
  const RMSpropOptions& o = groups_[group].options;
  return i == 0 || (i == 1 && o.momentum > 0) || (i == 2 && o.centered);
}
void RMSprop::update(size_t group, const Tensor& param, const Tensor& grad, ParamState& st) {
  const RMSpropOptions& o = groups_[group].options;
  OptimizerStep s;
  s.kind = OptimizerStep::Kind::RMSprop;
  s.lr = o.lr;
  s.weight_decay = o.weight_decay;
  s.alpha = o.alpha;
  s.eps = o.eps;
  s.momentum = o.momentum;
  s.centered = o.centered;
  s.maximize = o.maximize;
  s.step = st.step;
  TensorImpl* sq = buffer(st.buf[0], param);
  TensorImpl* buf = o.momentum > 0 ? buffer(st.buf[1], param) : nullptr;
  TensorImpl* gavg = o.centered ? buffer(st.buf[2], param) : nullptr;
  submit("RMSprop.step", s, param, grad, sq, buf, gavg);
}

}  // namespace oxmera::optim
