// Loss functions composed of differentiable tensor ops, and a fused cross entropy (class targets without
// class weights); see include/oxmera/nn/loss.hpp for the contract.
#include "oxmera/nn/loss.hpp"

#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "autograd/node.hpp"
#include "ops/device_checks.hpp"
#include "ops/fused.hpp"
#include "ops/graph_capture.hpp"
#include "ops/ops_internal.hpp"
#include "oxmera/autograd.hpp"
#include "oxmera/error.hpp"

namespace oxmera::nn {
namespace {

void check_defined(const Tensor& t, const char* op, const char* what) {
  OXM_CHECK(t.defined(), InvalidArgument, op, ": ", what, " is an undefined tensor");
}

void check_float_input(const Tensor& x, const char* op, const char* what) {
  check_defined(x, op, what);
  OXM_CHECK(is_floating(x.dtype()), UnsupportedDType, op, ": ", what, " must be f32 or f64, got ", x.dtype(),
            " (shape ", x.shape(), "); cast with .to(DType::F32)");
}

// `t` (named `what`) must have x's dtype and device.
void check_like(const Tensor& x, const Tensor& t, const char* op, const char* xname, const char* what) {
  check_defined(t, op, what);
  OXM_CHECK(t.dtype() == x.dtype(), DTypeMismatch, op, ": ", what, " has dtype ", t.dtype(), " (shape ", t.shape(),
            ") but ", xname, " has dtype ", x.dtype(), " (shape ", x.shape(),
            "); cast with .to(DType::", x.dtype() == DType::F64 ? "F64" : "F32", ")");
  OXM_CHECK(t.device() == x.device(), DeviceMismatch, op, ": ", what, " is on ", t.device(), " but ", xname, " is on ",
            x.device());
}

// Applies the reduction; Mean over no elements is EmptyReduction (torch returns NaN).
Tensor reduce(const Tensor& loss, Reduction r, const char* op, const Shape& input_shape) {
  switch (r) {
    case Reduction::None:
      return loss;
    case Reduction::Sum:
      return loss.sum();
    case Reduction::Mean:
      OXM_CHECK(loss.numel() > 0, EmptyReduction, op, ": reduction 'mean' over zero elements (input shape ",
                input_shape, ") is undefined (torch returns NaN); use Reduction::Sum or skip empty batches");
      return loss.mean();
  }
  OXM_FAIL(InvalidArgument, op, ": unknown reduction");
}

// Class targets read and validated on the host: `marked` holds each target, or -1 where it equals
// ignore_index; `kept` counts the others.
struct HostTargets {
  std::vector<int64_t> marked;
  int64_t kept = 0;
  int64_t class_dim = 0;
  int64_t num_classes = 0;
  Shape shape;  // the target's shape (the input's without its class dim)
};

HostTargets read_class_targets(const Tensor& input, const Tensor& target, int64_t ignore_index, const char* op,
                               const char* xname, bool read_values = true) {
  check_defined(target, op, "target");
  const Shape& xs = input.shape();
  OXM_CHECK(input.dim() >= 1, ShapeMismatch, op, ": ", xname, " must have shape [N, C], [N, C, d1, ...] or [C], got ",
            xs);
  OXM_CHECK(target.dtype() == DType::I64, DTypeMismatch, op, ": class targets must be i64, got ", target.dtype(),
            " (target shape ", target.shape(), ", ", xname, " shape ", xs, "); cast with .to(DType::I64)",
            is_floating(target.dtype()) && std::string(op) == "cross_entropy"
                ? " or pass class probabilities of the logits' shape and dtype"
                : "");
  // Class targets are index data: on the input's device, or on the CPU for any device (validated there with no
  // device read-back, then copied over).
  OXM_CHECK(target.device() == input.device() || target.device().is_cpu(), DeviceMismatch, op, ": target is on ",
            target.device(), " but ", xname, " is on ", input.device(), "; keep class targets on the cpu or on ",
            input.device());
  HostTargets h;
  h.class_dim = input.dim() == 1 ? 0 : 1;
  h.num_classes = xs[h.class_dim];
  h.shape = xs;
  h.shape.erase(h.class_dim);
  OXM_CHECK(target.shape() == h.shape, ShapeMismatch, op, ": target shape ", target.shape(), " does not match ", xname,
            " shape ", xs, "; expected a target of shape ", h.shape, " (", xname, " without its class dim ",
            h.class_dim, ")");
  // (device_class_targets and device_checked_targets check the values on the device.)
  if (detail::capture_open() || !read_values) return h;
  h.marked = target.to(Device::cpu()).to_vector<int64_t>();
  for (size_t i = 0; i < h.marked.size(); ++i) {
    const int64_t t = h.marked[i];
    if (t == ignore_index) {
      h.marked[i] = -1;
      continue;
    }
    OXM_CHECK(t >= 0 && t < h.num_classes, IndexOutOfBounds, op, ": target ", t, " (at flat position ", i,
              " of target shape ", target.shape(), ") is out of range for ", h.num_classes, " classes (", xname,
              " shape ", xs, "); class targets must be in [0, ", h.num_classes, ") or equal ignore_index (",
              ignore_index, ")");
    ++h.kept;
  }
  return h;
}

// Class targets for the composite (op-built) losses. `safe` replaces ignored targets by 0 (so gather stays in
// range), `keep` is a u8 mask of the targets that count.
struct ClassTargets {
  Tensor safe;
  Tensor keep;
  int64_t kept = 0;  // -1: counted on the device (kept_count), inside a CUDA graph capture
  int64_t class_dim = 0;
  int64_t num_classes = 0;
  Tensor kept_count;  // i64 scalar on the device, when kept is -1
  Tensor bad;         // u8: a kept target out of [0, num_classes) (device-checked targets only)
};

// Inside a CUDA graph capture the targets cannot be read on the host (a replay brings new ones): they are checked
// on the device instead. An out-of-range class target turns its loss term into NaN (a replayed step cannot
// throw, and NaN is what any later check sees), and the mean's denominator is counted there (no kept target:
// 0 / 0 = NaN, torch's answer).
ClassTargets device_class_targets(const Tensor& input, const Tensor& target, int64_t ignore_index, const char* op,
                                  const char* xname) {
  const HostTargets h = read_class_targets(input, target, ignore_index, op, xname);  // metadata only, in a capture
  OXM_CHECK(target.device() == input.device(), DeviceMismatch, op, ": class targets on ", target.device(),
            " inside a CUDA graph capture: they would be copied from the host once, at the capture; keep them in a "
            "static tensor on ",
            input.device());
  ClassTargets ct;
  ct.kept = -1;
  ct.class_dim = h.class_dim;
  ct.num_classes = h.num_classes;
  const Tensor t = target.contiguous();
  const Tensor keep = t.ne(static_cast<double>(ignore_index));  // 1 / 0 in i64
  ct.keep = keep.to(DType::U8);
  ct.safe = t.clamp(0.0, static_cast<double>(h.num_classes > 0 ? h.num_classes - 1 : 0));
  ct.bad = keep.gt(ct.safe.eq(t)).to(DType::U8);  // kept, and changed by the clamp
  ct.kept_count = keep.sum();
  return ct;
}

ClassTargets class_targets(const Tensor& input, const Tensor& target, int64_t ignore_index, const char* op,
                           const char* xname) {
  if (detail::capture_open()) return device_class_targets(input, target, ignore_index, op, xname);
  HostTargets h = read_class_targets(input, target, ignore_index, op, xname);
  ClassTargets ct;
  ct.kept = h.kept;
  ct.class_dim = h.class_dim;
  ct.num_classes = h.num_classes;
  std::vector<uint8_t> keep(h.marked.size());
  for (size_t i = 0; i < h.marked.size(); ++i) {
    keep[i] = h.marked[i] >= 0;
    if (h.marked[i] < 0) h.marked[i] = 0;
  }
  ct.safe = from_vector<int64_t>(h.marked, h.shape).to(input.device());
  ct.keep = from_vector<uint8_t>(keep, h.shape).to(input.device());
  return ct;
}

// The empty-mean error shared by every class-target loss.
[[noreturn]] void fail_empty_mean(const char* op, const Shape& xs, int64_t targets) {
  OXM_FAIL(EmptyReduction, op, ": reduction 'mean' over zero targets (input shape ", xs, ", ", targets,
           " targets, all of them equal to ignore_index or none at all) is undefined (torch returns NaN); use "
           "Reduction::Sum or skip such batches");
}

// Class targets on the logits' device, checked there by the fused IndexCheck (ignore_index -> -1, the kept ones
// counted on the device) with an out-of-range target reported at the device's next read-back, as device indices
// are (ops/device_checks.hpp): no read-back of the targets. Empty when the device has no such kernel.
struct DeviceTargets {
  Tensor marked;  // i64 [R]: the target, or -1 where it equals ignore_index
  Tensor kept;    // i64 [1]: how many are not ignored, minus one
};
std::optional<DeviceTargets> device_checked_targets(const Tensor& target, const HostTargets& h, int64_t ignore_index,
                                                    const char* op, const Shape& xs, bool check_empty) {
  const Device dev = target.device();
  if (dev.is_cpu() || h.num_classes < 1 || target.numel() == 0) return std::nullopt;
  const Tensor t = target.contiguous().reshape({-1});
  Tensor marked = detail::make_empty(t.shape(), DType::I64, dev, op);
  Tensor kept = full({1}, -1.0, DType::I64, dev);  // the count minus one: negative when nothing is kept
  ops::FusedCall call = ops::IndexCheckCall{t.impl(), marked.impl(), h.num_classes, {}, ignore_index, kept.impl()};
  auto& c = std::get<ops::IndexCheckCall>(call);
  if (!ops::fused_supported(call, dev)) return std::nullopt;
  c.report = detail::defer_check(
      dev, t.numel(),
      [op, C = h.num_classes, ignore_index, ts = target.shape(), xs](int64_t position, int, const char* when) {
        OXM_FAIL(IndexOutOfBounds, op, ": the target at flat position ", position, " of target shape ", ts,
                 " is out of range for ", C, " classes (logits shape ", xs, "; ", when,
                 "; its loss used the nearest class); class targets must be in [0, ", C, ") or equal ignore_index (",
                 ignore_index, ")");
      });
  if (c.report.empty()) return std::nullopt;
  ops::run_fused(call, dev);
  if (check_empty) {
    // A mean over no kept target is EmptyReduction, as on the host: the count minus one checked as an index into
    // [0, INT64_MAX), so a count of 0 is reported (at the next read-back) by the same kernel.
    Tensor unused = detail::make_empty({1}, DType::I64, dev, op);
    ops::FusedCall empty = ops::IndexCheckCall{kept.impl(), unused.impl(), std::numeric_limits<int64_t>::max(), {}};
    auto& e = std::get<ops::IndexCheckCall>(empty);
    e.report = detail::defer_check(dev, 1, [op, xs, R = target.numel()](int64_t, int, const char* when) {
      OXM_FAIL(EmptyReduction, op, ": reduction 'mean' over zero targets (input shape ", xs, ", ", R,
               " targets, all of them equal to ignore_index; ", when,
               "; the loss is NaN) is undefined (torch returns NaN); use Reduction::Sum or skip such batches");
    });
    if (!e.report.empty()) ops::run_fused(empty, dev);
  }
  return DeviceTargets{marked, kept};
}

// The fused cross entropy (the fused ops CrossEntropy / CrossEntropyBackward: two launches on a GPU where the
// composite takes about twenty; a backend without the kernels runs their op-built fallbacks). Its node keeps the
// logits, each row's log-sum-exp and the marked targets.
struct CrossEntropyNode final : detail::Node {
  detail::SavedTensor logits;
  Tensor target, lse;
  double label_smoothing = 0, scale = 1;
  bool release_saved() override {
    const bool had = logits.defined() || target.defined() || lse.defined();
    logits.reset();
    target = Tensor();
    lse = Tensor();
    return had;
  }
  const char* name() const override { return "cross_entropy"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* gout, Tensor* gin) override {
    Tensor x = logits.get("cross_entropy");
    if (grad_enabled()) {
      // create_graph: the kernel's gradient from recorded ops, scale * g_r * (softmax(x)_rc - q_rc) with the
      // smoothed target distribution q = (1 - ls) onehot(t) + ls / C, and 0 in ignored rows. The softmax is taken
      // of the re-attached logits (not the saved lse) so the gradient knows how it depends on them.
      const int64_t C = x.size(1);
      const Tensor safe = maximum(target, scalar(0, DType::I64));
      const Tensor keep = target.ge(scalar(0, DType::I64)).to(x.dtype()).unsqueeze(1);
      const Tensor classes = arange(C, DType::I64, x.device()).unsqueeze(0);
      Tensor q = classes.eq(safe.unsqueeze(1)).to(x.dtype()) * (1.0 - label_smoothing);
      if (label_smoothing != 0) q = q + label_smoothing / static_cast<double>(C);
      gin[0] = (x.softmax(1) - q) * keep * (gout[0] * scale).unsqueeze(1);
      return;
    }
    const auto& xi = *x.impl();
    Tensor gx = detail::make_empty(xi.shape, xi.dtype, xi.device(), "cross_entropy backward");
    ops::FusedCall call = ops::CrossEntropyBackwardCall{
        &xi, target.impl(), lse.impl(), gout[0].impl(), label_smoothing, scale, gx.impl()};
    ops::run_fused(call, xi.device());
    gin[0] = gx;
  }
};

// logits: [N, C] or [C] with N, C >= 1; class targets; no class weight.
Tensor fused_cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& o) {
  const char* op = "cross_entropy";
  HostTargets h = read_class_targets(logits, target, o.ignore_index, op, "logits", /*read_values=*/false);
  Tensor x = logits.dim() == 1 ? logits.unsqueeze(0) : logits;
  const auto& xi = *x.impl();
  const int64_t R = xi.shape[0];
  // Targets on the logits' device: checked and counted there; the mean divides by the count on the device (no kept
  // target: NaN, and EmptyReduction at the next read-back).
  const std::optional<DeviceTargets> on_device =
      target.device() == logits.device()
          ? device_checked_targets(target, h, o.ignore_index, op, logits.shape(), o.reduction == Reduction::Mean)
          : std::nullopt;
  if (!on_device) h = read_class_targets(logits, target, o.ignore_index, op, "logits");
  double scale = 1.0;
  if (o.reduction == Reduction::Mean && !on_device) {
    if (h.kept == 0) fail_empty_mean(op, logits.shape(), R);
    scale = 1.0 / static_cast<double>(h.kept);
  }
  Tensor marked = on_device ? on_device->marked : from_vector<int64_t>(h.marked, Shape{R}).to(xi.device());
  Tensor rows = detail::make_empty(Shape{R}, xi.dtype, xi.device(), op);
  Tensor lse = detail::make_empty(Shape{R}, xi.dtype, xi.device(), op);
  ops::FusedCall call = ops::CrossEntropyCall{&xi, marked.impl(), o.label_smoothing, scale, rows.impl(), lse.impl()};
  ops::run_fused(call, xi.device());
  if (detail::needs_tape(x)) {
    auto* n = new CrossEntropyNode();
    n->next.push_back(detail::edge_of(x));
    n->logits.save(x, false);
    n->target = marked;
    n->lse = lse;
    n->label_smoothing = o.label_smoothing;
    n->scale = scale;
    detail::set_history(rows, n);
  }
  if (o.reduction == Reduction::None) return rows.reshape(h.shape);
  if (o.reduction == Reduction::Mean && on_device)
    return rows.sum() / (on_device->kept + int64_t{1}).to(xi.dtype).reshape({});
  return rows.sum();
}

void check_class_weight(const Tensor& input, const Tensor& weight, int64_t num_classes, const char* op,
                        const char* xname) {
  check_like(input, weight, op, xname, "weight");
  OXM_CHECK(weight.dim() == 1 && weight.size(0) == num_classes, ShapeMismatch, op, ": weight must have shape [",
            num_classes, "] (one entry per class of ", xname, " shape ", input.shape(), "), got ", weight.shape());
}

// The weight as a [1, C, 1, ...] view broadcasting against an input of `rank` with classes at `class_dim`.
Tensor weight_view(const Tensor& weight, int64_t rank, int64_t class_dim) {
  Shape s(static_cast<size_t>(rank), 1);
  s[class_dim] = weight.size(0);
  return weight.reshape(s);
}

// Mean denominator of nll/cross_entropy: the total weight of the kept targets (their count without weight).
// Zero is EmptyReduction (torch returns NaN).
Tensor class_mean_denominator(const ClassTargets& ct, const Tensor& picked_weight, const Tensor& zero, const char* op,
                              const Shape& xs) {
  if (ct.kept < 0)  // counted on the device: no host check of a zero count (0 / 0 is NaN there)
    return picked_weight.defined() ? where(ct.keep, picked_weight, zero).sum() : ct.kept_count.to(zero.dtype());
  if (ct.kept == 0) fail_empty_mean(op, xs, ct.safe.numel());
  if (!picked_weight.defined()) return full({}, static_cast<double>(ct.kept), zero.dtype(), zero.device());
  Tensor denom = where(ct.keep, picked_weight, zero).sum();
  OXM_CHECK(denom.to(DType::F64).item<double>() != 0.0, EmptyReduction, op,
            ": reduction 'mean' divides by the total class weight of the targets, which is 0 (input shape ", xs, ", ",
            ct.kept, " non-ignored targets); torch returns NaN here; use Reduction::Sum or nonzero weights");
  return denom;
}

// Shared body of nll_loss and cross_entropy on class targets; `logp` are log-probabilities.
Tensor nll_core(const Tensor& logp, const ClassTargets& ct, const Tensor& weight, Reduction r, double label_smoothing,
                const char* op, const Shape& xs) {
  OXM_CHECK(ct.num_classes > 0 || ct.safe.numel() == 0, ShapeMismatch, op, ": input shape ", xs, " has 0 classes but ",
            ct.safe.numel(), " targets");
  const int64_t cd = ct.class_dim;
  Tensor zero = zeros({}, logp.dtype(), logp.device());
  Tensor picked_weight;  // weight[t] per target (where not ignored)
  if (weight.defined()) picked_weight = weight.index_select(0, ct.safe.flatten()).reshape(ct.safe.shape());
  Tensor picked = logp.gather(cd, ct.safe.unsqueeze(cd)).squeeze(cd);
  Tensor el = where(ct.keep, weight.defined() ? -(picked * picked_weight) : -picked, zero);
  if (ct.bad.defined()) el = where(ct.bad, std::numeric_limits<double>::quiet_NaN(), el);
  Tensor denom;
  if (r == Reduction::Mean) denom = class_mean_denominator(ct, picked_weight, zero, op, xs);
  Tensor nll = r == Reduction::None ? el : r == Reduction::Sum ? el.sum() : el.sum() / denom;
  if (!(label_smoothing > 0.0)) return nll;
  // torch 1.13 cross_entropy_loss_label_smoothing: the smoothing term is -sum_c w_c log p_c per target, zeroed
  // for ignored targets, reduced with the same denominator as the nll term.
  Tensor smooth = weight.defined() ? -(logp * weight_view(weight, logp.dim(), cd)).sum({cd}) : -logp.sum({cd});
  smooth = where(ct.keep, smooth, zero);
  Tensor sred = r == Reduction::None ? smooth : r == Reduction::Sum ? smooth.sum() : smooth.sum() / denom;
  return (1.0 - label_smoothing) * nll + sred * (label_smoothing / static_cast<double>(ct.num_classes));
}

}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  const char* op = "mse_loss";
  check_float_input(input, op, "input");
  check_like(input, target, op, "input", "target");
  OXM_CHECK(input.shape() == target.shape(), ShapeMismatch, op, ": input shape ", input.shape(), " and target shape ",
            target.shape(),
            " differ (torch would broadcast with a warning); reshape or "
            "broadcast_to explicitly");
  return reduce((input - target).square(), reduction, op, input.shape());
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const Tensor& weight, Reduction reduction,
                int64_t ignore_index) {
  const char* op = "nll_loss";
  check_float_input(log_probs, op, "log_probs");
  ClassTargets ct = class_targets(log_probs, target, ignore_index, op, "log_probs");
  if (weight.defined()) check_class_weight(log_probs, weight, ct.num_classes, op, "log_probs");
  return nll_core(log_probs, ct, weight, reduction, 0.0, op, log_probs.shape());
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& o) {
  const char* op = "cross_entropy";
  check_float_input(logits, op, "logits");
  check_defined(target, op, "target");
  const Shape& xs = logits.shape();
  OXM_CHECK(o.label_smoothing >= 0.0 && o.label_smoothing <= 1.0, InvalidArgument, op,
            ": label_smoothing must be in [0, 1], got ", o.label_smoothing);
  OXM_CHECK(logits.dim() >= 1, ShapeMismatch, op, ": logits must have shape [N, C], [N, C, d1, ...] or [C], got ", xs);
  const int64_t cd = logits.dim() == 1 ? 0 : 1;
  const int64_t num_classes = xs[cd];
  if (o.weight.defined()) check_class_weight(logits, o.weight, num_classes, op, "logits");

  if (is_floating(target.dtype()) && target.shape() == xs) {
    // Class probabilities (torch's cross_entropy_loss_prob_target).
    check_like(logits, target, op, "logits", "target (class probabilities)");
    OXM_CHECK(o.ignore_index < 0, InvalidArgument, op, ": ignore_index (", o.ignore_index,
              ") is not supported for class-probability targets; leave it negative (default -100)");
    Tensor p = o.label_smoothing > 0.0
                   ? target * (1.0 - o.label_smoothing) + o.label_smoothing / static_cast<double>(num_classes)
                   : target;
    Tensor logp = logits.log_softmax(cd);
    Tensor prod = logp * p;
    if (o.weight.defined()) prod = prod * weight_view(o.weight, logits.dim(), cd);
    switch (o.reduction) {
      case Reduction::None:
        return -prod.sum({cd});
      case Reduction::Sum:
        return -prod.sum();
      case Reduction::Mean:
        OXM_CHECK(logits.numel() > 0, EmptyReduction, op, ": reduction 'mean' over zero elements (logits shape ", xs,
                  ") is undefined (torch returns NaN); use Reduction::Sum or skip empty batches");
        return -prod.sum() / static_cast<double>(logits.numel() / num_classes);
    }
    OXM_FAIL(InvalidArgument, op, ": unknown reduction");
  }
  // (Inside a CUDA graph capture the targets are checked on the device, by the composite below.)
  if (!o.weight.defined() && logits.dim() <= 2 && logits.numel() > 0 && !detail::capture_open())
    return fused_cross_entropy(logits, target, o);
  ClassTargets ct = class_targets(logits, target, o.ignore_index, op, "logits");
  if (ct.num_classes == 0 || ct.safe.numel() == 0) {
    // Nothing to softmax over (log_softmax of an empty tensor is never needed).
    return nll_core(logits, ct, o.weight, o.reduction, o.label_smoothing, op, xs);
  }
  return nll_core(logits.log_softmax(cd), ct, o.weight, o.reduction, o.label_smoothing, op, xs);
}

namespace {
// weight / pos_weight must broadcast to the input's shape without enlarging it.
void check_broadcasts_to(const Tensor& x, const Tensor& w, const char* op, const char* what) {
  check_like(x, w, op, "input", what);
  bool ok = w.dim() <= x.dim();
  for (int64_t i = 1; ok && i <= w.dim(); ++i) {
    const int64_t a = w.size(-i), b = x.size(-i);
    ok = a == b || a == 1;
  }
  OXM_CHECK(ok, ShapeMismatch, op, ": ", what, " shape ", w.shape(), " does not broadcast to the input shape ",
            x.shape());
}
}  // namespace

Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target, const Tensor& weight,
                                        const Tensor& pos_weight, Reduction reduction) {
  const char* op = "binary_cross_entropy_with_logits";
  check_float_input(logits, op, "input");
  check_like(logits, target, op, "input", "target");
  OXM_CHECK(target.shape() == logits.shape(), ShapeMismatch, op, ": target shape ", target.shape(),
            " must equal the input shape ", logits.shape());
  if (weight.defined()) check_broadcasts_to(logits, weight, op, "weight");
  if (pos_weight.defined()) check_broadcasts_to(logits, pos_weight, op, "pos_weight");
  const Tensor& x = logits;
  const Tensor& t = target;
  Tensor loss;
  if (pos_weight.defined()) {
    // m = max(-x, 0) only shifts the log-sum-exp; the expression's derivative in m is exactly 0: detached.
    Tensor m = (-x).relu().detach();
    Tensor lse = ((-m).exp() + (-x - m).exp()).log();  // log(1 + exp(-x)) - m, never overflowing
    Tensor log_weight = (pos_weight - 1.0) * t + 1.0;
    loss = (1.0 - t) * x + log_weight * (lse + m);
  } else {
    loss = ops::binary(ops::BinaryOp::BceLogits, x, t);  // the same formula per element, one pass each way
  }
  if (weight.defined()) loss = loss * weight;
  return reduce(loss, reduction, op, logits.shape());
}

}  // namespace oxmera::nn
