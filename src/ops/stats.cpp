// Statistics and predicates over dims: var / std, norm, any / all, and max / min along a dim with indices.
// Compositions of reductions and elementwise ops (so every backend runs them); the 2-norm has its own backward
// node for torch's zero gradient at 0.
#include <cmath>

#include "autograd/node.hpp"
#include "ops/ops_internal.hpp"
#include "oxmera/autograd.hpp"

namespace oxmera {
namespace {

void check_float(const Tensor& x, const char* op) {
  detail::check_defined(x, op);
  OXM_CHECK(is_floating(x.dtype()), UnsupportedDType, op, ": dtype ", x.dtype(), " is not supported (f32, f64)");
}

// Number of elements the reduction over `dims` combines into each result.
int64_t reduced_count(const Tensor& x, const Dims& dims, const char* op) {
  const uint64_t mask = ops::reduce_mask(dims, x.dim(), op);
  int64_t count = 1;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (mask >> d & 1) count *= x.size(d);
  return count;
}

Tensor variance(const Tensor& x, const Dims& dims, double correction, bool keepdim, const char* op) {
  check_float(x, op);
  OXM_CHECK(std::isfinite(correction), InvalidArgument, op, ": correction must be finite, got ", correction);
  const int64_t count = reduced_count(x, dims, op);
  // torch: an empty extent gives NaN (with a warning), not an error.
  if (count == 0) return x.sum(dims, keepdim) * NAN;
  Tensor centred = x - x.mean(dims, true);
  return (centred * centred).sum(dims, keepdim) / std::max(0.0, static_cast<double>(count) - correction);
}

// sqrt(sum x^2) whose gradient g * x / y is 0 where y == 0 (torch's subgradient), not NaN.
struct Norm2Node final : detail::Node {
  Shape keep_shape;
  Dims dims;
  detail::SavedTensor x, y_keep;
  bool release_saved() override {
    const bool had = x.defined() || y_keep.defined();
    x.reset();
    y_keep.reset();
    return had;
  }
  const char* name() const override { return "norm"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* gout, Tensor* gin) override {
    // create_graph: the norm again from x, with history (the saved one is a constant).
    Tensor y = grad_enabled() ? (x.get(name()) * x.get(name())).sum(dims, true).sqrt() : y_keep.get(name());
    Tensor q = gout[0].reshape(keep_shape) / y;
    q = where(y.eq(ops::scalar_like(0.0, y, "norm")), ops::scalar_on_device_of(0.0, y, "norm"), q);
    gin[0] = q * x.get(name());
  }
};

Tensor norm2(const Tensor& x, const Dims& dims, bool keepdim) {
  Tensor y_keep;
  {
    NoGradGuard no_grad;
    y_keep = (x * x).sum(dims, true).sqrt();
  }
  Shape out_shape;
  const uint64_t mask = ops::reduce_mask(dims, x.dim(), "norm");
  for (int64_t d = 0; d < x.dim(); ++d)
    if (!(mask >> d & 1)) out_shape.push_back(x.size(d));
  Tensor out = keepdim ? y_keep.detach() : y_keep.detach().reshape(out_shape);
  if (detail::needs_tape(x)) {
    out = out.clone();  // a fresh tensor that holds the node
    auto* n = new Norm2Node();
    n->keep_shape = y_keep.shape();
    n->dims = dims;
    n->next.push_back(detail::edge_of(x));
    n->x.save(x, false);
    n->y_keep.save(y_keep, false);  // no history of its own: a plain constant
    detail::set_history(out, n);
  }
  return out;
}

Tensor any_all(const Tensor& x, const Dims& dims, bool keepdim, bool any, const char* op) {
  detail::check_defined(x, op);
  OXM_CHECK(x.dtype() != DType::U8, UnsupportedDType, op, ": dtype u8 is not supported (f32, f64, i64)");
  Tensor xd = x.detach();
  Tensor zero = ops::scalar_like(0.0, xd, op);
  // NaN != 0, so NaN counts as true, as in torch. Counting (not max) gives the right answer on empty extents.
  Tensor count = (any ? xd.ne(zero) : xd.eq(zero)).sum(dims, keepdim);
  return any ? count.gt(zero) : count.eq(zero);
}

std::tuple<Tensor, Tensor> extreme_with_indices(const Tensor& x, int64_t dim, bool keepdim, bool is_max) {
  const char* op = is_max ? "max" : "min";
  detail::check_defined(x, op);
  if (x.dim() == 0) {
    normalize_dim(dim, 0, op);
    return {x.clone(), zeros({}, DType::I64, x.device())};
  }
  const int64_t d = normalize_dim(dim, x.dim(), op);
  Tensor idx = is_max ? x.argmax(d, true) : x.argmin(d, true);
  // gather: the gradient reaches the selected element only, as torch's max(dim) / min(dim).
  Tensor values = x.gather(d, idx);
  if (!keepdim) return {values.squeeze(d), idx.squeeze(d)};
  return {values, idx};
}

}  // namespace

Tensor Tensor::var(const Dims& dims, double correction, bool keepdim) const {
  return variance(*this, dims, correction, keepdim, "var");
}
Tensor Tensor::std(const Dims& dims, double correction, bool keepdim) const {
  return variance(*this, dims, correction, keepdim, "std").sqrt();
}

Tensor Tensor::norm(double p, const Dims& dims, bool keepdim) const {
  check_float(*this, "norm");
  OXM_CHECK(!std::isnan(p), InvalidArgument, "norm: p is NaN");
  if (p == 2) return norm2(*this, dims, keepdim);
  if (p == 1) return abs().sum(dims, keepdim);
  if (std::isinf(p)) {
    // As torch: an empty extent has no maximum, unless the result is empty too.
    const int64_t count = reduced_count(*this, dims, "norm");
    const int64_t out_numel = count > 0 ? numel() / count : detach().sum(dims).numel();
    OXM_CHECK(count > 0 || out_numel == 0, EmptyReduction, "norm: the ", p, "-norm over dims ", dims, " of shape ",
              shape(), " covers zero elements and has no value");
    return p > 0 ? abs().max(dims, keepdim) : abs().min(dims, keepdim);
  }
  if (p == 0) return detach().ne(ops::scalar_like(0.0, *this, "norm")).sum(dims, keepdim);
  return abs().pow(p).sum(dims, keepdim).pow(1.0 / p);
}

Tensor Tensor::any(const Dims& dims, bool keepdim) const { return any_all(*this, dims, keepdim, true, "any"); }
Tensor Tensor::all(const Dims& dims, bool keepdim) const { return any_all(*this, dims, keepdim, false, "all"); }

std::tuple<Tensor, Tensor> Tensor::max_with_indices(int64_t dim, bool keepdim) const {
  return extreme_with_indices(*this, dim, keepdim, true);
}
std::tuple<Tensor, Tensor> Tensor::min_with_indices(int64_t dim, bool keepdim) const {
  return extreme_with_indices(*this, dim, keepdim, false);
}

}  // namespace oxmera
