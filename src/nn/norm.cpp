// BatchNorm1d, GroupNorm and RMSNorm, functional and module forms (composites of differentiable tensor ops).
#include "oxmera/nn/norm.hpp"

#include <limits>
#include <sstream>

#include "nn/repr.hpp"
#include "nn/stacked_batch_norm.hpp"
#include "oxmera/autograd.hpp"
#include "tensor/tensor_impl.hpp"

namespace oxmera::nn {
namespace functional {

Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  const char* op = "group_norm";
  detail::check_defined(x, op);
  OXM_CHECK(is_floating(x.dtype()), UnsupportedDType, op, ": dtype ", x.dtype(), " is not supported (f32, f64)");
  OXM_CHECK(x.dim() >= 2, ShapeMismatch, op, ": expected [N, C, *], got ", x.shape());
  const int64_t N = x.shape()[0], C = x.shape()[1];
  OXM_CHECK(num_groups >= 1 && C % num_groups == 0, InvalidArgument, op, ": ", C,
            " channels are not divisible into num_groups ", num_groups);
  Shape pshape(static_cast<size_t>(x.dim()), 1);
  pshape[1] = C;
  for (const Tensor* p : {&weight, &bias})
    if (p->defined())
      OXM_CHECK(p->shape() == Shape({C}), ShapeMismatch, op, ": weight and bias must be [", C, "], got ", p->shape());
  Tensor xg = x.reshape({N, num_groups, -1});
  Tensor mean = xg.mean({2}, true);
  Tensor xc = xg - mean;
  Tensor var = xc.square().mean({2}, true);
  Tensor y = (xc * (var + eps).rsqrt()).reshape(x.shape());
  if (weight.defined()) y = y * weight.reshape(pshape);
  if (bias.defined()) y = y + bias.reshape(pshape);
  return y;
}

Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, std::optional<double> eps) {
  const char* op = "rms_norm";
  detail::check_defined(x, op);
  OXM_CHECK(is_floating(x.dtype()), UnsupportedDType, op, ": dtype ", x.dtype(), " is not supported (f32, f64)");
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  OXM_CHECK(k >= 1 && x.dim() >= k, ShapeMismatch, op, ": normalized_shape ", normalized_shape, " does not fit input ",
            x.shape());
  for (int64_t i = 0; i < k; ++i)
    OXM_CHECK(x.shape()[x.dim() - k + i] == normalized_shape[i], ShapeMismatch, op, ": input ", x.shape(),
              " does not end with normalized_shape ", normalized_shape);
  if (weight.defined())
    OXM_CHECK(weight.shape() == normalized_shape, ShapeMismatch, op, ": weight must be ", normalized_shape, ", got ",
              weight.shape());
  const double e = eps ? *eps
                       : (x.dtype() == DType::F64 ? std::numeric_limits<double>::epsilon()
                                                  : static_cast<double>(std::numeric_limits<float>::epsilon()));
  Dims dims;
  for (int64_t i = x.dim() - k; i < x.dim(); ++i) dims.push_back(i);
  Tensor y = x * (x.square().mean(dims, true) + e).rsqrt();
  return weight.defined() ? y * weight : y;
}

}  // namespace functional

namespace F = functional;

BatchNorm1d::BatchNorm1d(int64_t c, double e, double m, bool aff, bool track)
    : BatchNorm1d(c, BatchNormOptions{.eps = e, .momentum = m, .affine = aff, .track_running_stats = track}) {}
BatchNorm1d::BatchNorm1d(int64_t c, BatchNormOptions opt)
    : eps(opt.eps),
      momentum(opt.momentum),
      num_features(c),
      affine(opt.affine),
      track_running_stats(opt.track_running_stats),
      replicas_(opt.replicas) {
  OXM_CHECK(c > 0, InvalidArgument, "BatchNorm1d: num_features must be > 0, got ", c);
  F::register_batch_norm_state(*this, "BatchNorm1d", c, opt);
}
std::string BatchNorm1d::extra_repr() const {
  std::ostringstream os;
  os << std::boolalpha << num_features << ", eps=" << py_float(eps) << ", momentum=" << py_float(momentum)
     << ", affine=" << affine << ", track_running_stats=" << track_running_stats;
  if (replicas_ > 0) os << ", replicas=" << replicas_;
  return os.str();
}
Tensor BatchNorm1d::forward(const Tensor& x) {
  check_f32_input(x);
  if (replicas_ > 0) {
    OXM_CHECK((x.dim() == 3 || x.dim() == 4) && x.shape()[0] == replicas_ && x.shape()[2] == num_features,
              ShapeMismatch, "BatchNorm1d with ", replicas_, " replicas: input ", x.shape(), " must be [", replicas_,
              ", N, ", num_features, "] or [", replicas_, ", N, ", num_features,
              ", L] (replica dim first; to give every replica the same input, x.unsqueeze(0).expand({", replicas_,
              ", ...}))");
    Tensor y = F::stacked_batch_norm(x, replicas_, running_mean, running_var, weight, bias,
                                     is_training() || !running_mean.defined(), momentum, eps);
    if (is_training() && num_batches_tracked.defined()) num_batches_tracked.add_(1.0);
    return y;
  }
  OXM_CHECK(x.dim() == 2 || x.dim() == 3, ShapeMismatch, "BatchNorm1d: expected [N, C] or [N, C, L], got ", x.shape());
  OXM_CHECK(x.shape()[1] == num_features, ShapeMismatch, "BatchNorm1d: input has ", x.shape()[1],
            " channels, the layer ", num_features);
  const bool use_batch = is_training() || !running_mean.defined();
  // [N, C, L] as [N, C, L, 1]: batch_norm's 4-d form reduces over N and L.
  Tensor y =
      x.dim() == 3
          ? F::batch_norm(x.unsqueeze(3), running_mean, running_var, weight, bias, use_batch, momentum, eps).squeeze(3)
          : F::batch_norm(x, running_mean, running_var, weight, bias, use_batch, momentum, eps);
  // Counted once the statistics are updated (a failed forward changes no buffer).
  if (is_training() && num_batches_tracked.defined()) num_batches_tracked.add_(1.0);
  return y;
}

GroupNorm::GroupNorm(int64_t groups, int64_t channels, double e, bool affine)
    : GroupNorm(groups, channels, GroupNormOptions{.eps = e, .affine = affine}) {}
GroupNorm::GroupNorm(int64_t groups, int64_t channels, GroupNormOptions opt)
    : num_groups(groups), num_channels(channels), eps(opt.eps), replicas_(opt.replicas) {
  OXM_CHECK(groups > 0 && channels > 0 && channels % groups == 0, InvalidArgument, "GroupNorm: num_channels ", channels,
            " must be divisible by num_groups ", groups, " (both > 0)");
  OXM_CHECK(opt.replicas >= 0, InvalidArgument, "GroupNorm: replicas must be >= 0 (0: not stacked), got ",
            opt.replicas);
  const Shape s = replicas_ > 0 ? Shape{replicas_, channels} : Shape{channels};
  register_parameter("weight", &GroupNorm::weight, opt.affine ? ones(s) : Tensor());
  register_parameter("bias", &GroupNorm::bias, opt.affine ? zeros(s) : Tensor());
}
std::string GroupNorm::extra_repr() const {
  std::ostringstream os;
  os << std::boolalpha << num_groups << ", " << num_channels << ", eps=" << py_float(eps)
     << ", affine=" << weight.defined();
  if (replicas_ > 0) os << ", replicas=" << replicas_;
  return os.str();
}
Tensor GroupNorm::forward(const Tensor& x) {
  check_f32_input(x);
  if (replicas_ > 0) {
    OXM_CHECK(x.dim() >= 3 && x.shape()[0] == replicas_ && x.shape()[2] == num_channels, ShapeMismatch,
              "GroupNorm with ", replicas_, " replicas: input ", x.shape(), " must be [", replicas_, ", N, ",
              num_channels, ", *] (replica dim first; to give every replica the same input, x.unsqueeze(0).expand({",
              replicas_, ", ...}))");
    // The replicas' samples side by side ([R N, C, *]: a view of a contiguous input) through one group norm, then
    // replica r's scale and shift as broadcast ops.
    Shape merged = x.shape();
    merged.erase(0);
    merged[0] = replicas_ * x.shape()[1];
    const Tensor y = F::group_norm(x.reshape(merged), num_groups, Tensor(), Tensor(), eps).reshape(x.shape());
    if (!weight.defined()) return y;
    Shape channels(static_cast<size_t>(x.dim()), 1);  // [R, 1, C, 1, ...]
    channels[0] = replicas_;
    channels[2] = num_channels;
    return y * weight.view(channels) + bias.view(channels);
  }
  OXM_CHECK(x.dim() >= 2 && x.shape()[1] == num_channels, ShapeMismatch, "GroupNorm: expected [N, ", num_channels,
            ", *], got ", x.shape());
  return F::group_norm(x, num_groups, weight, bias, eps);
}

RMSNorm::RMSNorm(Shape shape, std::optional<double> e, bool affine)
    : RMSNorm(std::move(shape), RMSNormOptions{.eps = e, .elementwise_affine = affine}) {}
RMSNorm::RMSNorm(Shape shape, RMSNormOptions opt)
    : normalized_shape(std::move(shape)), eps(opt.eps), replicas_(opt.replicas) {
  OXM_CHECK(!normalized_shape.empty(), InvalidArgument, "RMSNorm: normalized_shape must not be empty");
  OXM_CHECK(opt.replicas >= 0, InvalidArgument, "RMSNorm: replicas must be >= 0 (0: not stacked), got ", opt.replicas);
  Shape s = normalized_shape;
  if (replicas_ > 0) s.insert(0, replicas_);
  register_parameter("weight", &RMSNorm::weight, opt.elementwise_affine ? ones(s) : Tensor());
}
std::string RMSNorm::extra_repr() const {
  std::ostringstream os;
  os << std::boolalpha << "(";
  for (size_t i = 0; i < normalized_shape.size(); ++i) os << (i ? ", " : "") << normalized_shape[i];
  os << (normalized_shape.size() == 1 ? ",)" : ")") << ", eps=" << (eps ? py_float(*eps) : "None")
     << ", elementwise_affine=" << weight.defined();
  if (replicas_ > 0) os << ", replicas=" << replicas_;
  return os.str();
}
Tensor RMSNorm::forward(const Tensor& x) {
  check_f32_input(x);
  if (replicas_ > 0) {
    const int64_t k = static_cast<int64_t>(normalized_shape.size());
    bool fits = x.dim() >= k + 1 && x.shape()[0] == replicas_;
    for (int64_t i = 1; fits && i <= k; ++i)
      fits = x.shape()[static_cast<size_t>(x.dim() - i)] == normalized_shape[static_cast<size_t>(k - i)];
    OXM_CHECK(fits, ShapeMismatch, "RMSNorm with ", replicas_, " replicas and normalized_shape ", normalized_shape,
              ": input ", x.shape(), " must be [", replicas_,
              ", ..., *normalized_shape] (replica dim first; to give every replica the same input, "
              "x.unsqueeze(0).expand({",
              replicas_, ", ...}))");
    const Tensor y = F::rms_norm(x, normalized_shape, Tensor(), eps);
    return weight.defined() ? y * F::replica_view(weight, x.dim()) : y;
  }
  return F::rms_norm(x, normalized_shape, weight, eps);
}

}  // namespace oxmera::nn
