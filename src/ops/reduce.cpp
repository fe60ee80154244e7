// Reductions, arg-reductions and softmax: shape rules, the empty-extent contract and backward rules.
#include <cmath>
#include <limits>

#include "autograd/node.hpp"
#include "backend/backend.hpp"
#include "ops/fused.hpp"
#include "ops/ops_internal.hpp"
#include "oxmera/autograd.hpp"

namespace oxmera {
namespace ops {

uint64_t reduce_mask(const Dims& dims, int64_t rank, const char* op) {
  OXM_CHECK(rank <= 64, NotImplemented, op, ": reductions support tensors of rank <= 64, got rank ", rank);
  if (dims.empty()) return rank == 64 ? ~uint64_t{0} : (uint64_t{1} << rank) - 1;
  uint64_t mask = 0;
  for (int64_t d : dims) {
    int64_t nd = rank == 0 ? normalize_dim(d, 0, op) : normalize_dim(d, rank, op);
    if (rank == 0) continue;
    OXM_CHECK(!(mask >> nd & 1), InvalidArgument, op, ": dim ", d, " appears more than once in ", dims);
    mask |= uint64_t{1} << nd;
  }
  return mask;
}

namespace {

enum class RKind { Sum, Mean, Max, Min };

const char* rkind_name(RKind k) {
  switch (k) {
    case RKind::Sum:
      return "sum";
    case RKind::Mean:
      return "mean";
    case RKind::Max:
      return "max";
    case RKind::Min:
      return "min";
  }
  return "?";
}

struct ReduceNode final : detail::Node {
  RKind kind;
  Shape in_shape, keep_shape;
  uint64_t mask = 0;
  double inv_count = 1.0;
  detail::SavedTensor x, y_keep;
  bool release_saved() override {
    const bool had = x.defined() || y_keep.defined();
    x.reset();
    y_keep.reset();
    return had;
  }
  const char* name() const override { return rkind_name(kind); }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* gout, Tensor* gin) override {
    Tensor g = gout[0].reshape(keep_shape);
    switch (kind) {
      case RKind::Sum:
        gin[0] = g.broadcast_to(in_shape);
        break;
      case RKind::Mean:
        gin[0] = (g * inv_count).broadcast_to(in_shape);
        break;
      case RKind::Max:
      case RKind::Min: {
        // Ties split the gradient evenly.
        Tensor xin = x.get(name());
        Tensor hit = xin.eq(y_keep.get(name()));
        Dims dims;
        for (size_t d = 0; d < in_shape.size(); ++d)
          if (mask >> d & 1) dims.push_back(static_cast<int64_t>(d));
        Tensor count = hit.sum(dims, true);
        gin[0] = hit * (g / count);
        break;
      }
    }
  }
};

Tensor reduce_impl(RKind kind, const Tensor& x, const Dims& dims, bool keepdim) {
  const char* op = rkind_name(kind);
  detail::check_defined(x, op);
  const auto& xi = *x.impl();
  OXM_CHECK(is_floating(xi.dtype) || (xi.dtype == DType::I64 && kind != RKind::Mean), UnsupportedDType, op, ": dtype ",
            xi.dtype, " is not supported", kind == RKind::Mean ? " (f32, f64)" : " (f32, f64, i64)");
  const int64_t rank = static_cast<int64_t>(xi.shape.size());
  const uint64_t mask = reduce_mask(dims, rank, op);
  Shape keep = xi.shape, squeezed;
  int64_t count = 1;
  for (int64_t d = 0; d < rank; ++d) {
    if (mask >> d & 1) {
      count *= xi.shape[d];
      keep[d] = 1;
    } else {
      squeezed.push_back(xi.shape[d]);
    }
  }
  const int64_t out_numel = keep.product();
  if (count == 0 && out_numel > 0) {
    OXM_CHECK(kind != RKind::Mean, EmptyReduction, "mean: reducing dims ", dims.empty() ? Dims{} : dims, " of shape ",
              xi.shape, " covers zero elements; the mean of nothing is undefined (use sum, or check for empty input)");
    OXM_CHECK(kind == RKind::Sum || is_floating(xi.dtype), EmptyReduction, op, ": reducing an empty extent of ",
              "shape ", xi.shape, " has no identity for dtype i64");
  }
  Tensor out = detail::make_empty(keep, xi.dtype, xi.device(), op);
  auto& be = detail::backend_for(xi.device(), op);
  ReduceOp rop = kind == RKind::Max ? ReduceOp::Max : kind == RKind::Min ? ReduceOp::Min : ReduceOp::Sum;
  be.reduce(rop, xi, *out.impl(), mask);
  const double inv = count > 0 ? 1.0 / static_cast<double>(count) : 1.0;
  if (kind == RKind::Mean && count != 1) be.binary_scalar(BinaryOp::Mul, *out.impl(), inv, false, *out.impl());
  Tensor result = keepdim ? out : detail::make_view(out, squeezed, contiguous_strides(squeezed), 0);
  if (is_floating(xi.dtype) && detail::needs_tape(x)) {
    auto* n = new ReduceNode();
    n->kind = kind;
    n->in_shape = xi.shape;
    n->keep_shape = keep;
    n->mask = mask;
    n->inv_count = inv;
    n->next.push_back(detail::edge_of(x));
    if (kind == RKind::Max || kind == RKind::Min) {
      n->x.save(x, false);
      n->y_keep.save(out, true);
    }
    detail::set_history(result, n);
  }
  return result;
}

Tensor arg_impl(ArgReduceOp op, const Tensor& x, int64_t dim, bool keepdim) {
  const char* name = op == ArgReduceOp::Argmax ? "argmax" : "argmin";
  detail::check_defined(x, name);
  const auto& xi = *x.impl();
  OXM_CHECK(xi.dtype != DType::U8, UnsupportedDType, name, ": dtype u8 is not supported");
  const int64_t rank = static_cast<int64_t>(xi.shape.size());
  const int64_t d = normalize_dim(dim, rank, name);
  Shape keep = xi.shape, squeezed = xi.shape;
  if (rank > 0) {
    OXM_CHECK(xi.shape[d] > 0, EmptyReduction, name, ": dim ", dim, " of shape ", xi.shape,
              " is empty; there is no index to return");
    keep[d] = 1;
    squeezed.erase(d);
  }
  Tensor out = detail::make_empty(keep, DType::I64, xi.device(), name);
  if (out.numel() > 0) {
    bool ok = detail::backend_for(xi.device(), name).arg_reduce(op, xi, *out.impl(), rank > 0 ? d : 0);
    OXM_CHECK(ok, InvalidArgument, name, ": input of shape ", xi.shape,
              " contains NaN; there is no well-defined index (mask NaNs first)");
  }
  return keepdim ? out : detail::make_view(out, squeezed, contiguous_strides(squeezed), 0);
}

struct SoftmaxNode final : detail::Node {
  bool log = false;
  int64_t dim = 0;
  detail::SavedTensor y;
  bool release_saved() override {
    const bool had = y.defined();
    y.reset();
    return had;
  }
  const char* name() const override { return log ? "log_softmax" : "softmax"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* gout, Tensor* gin) override {
    Tensor yv = y.get(name());
    const Tensor& g = gout[0];
    if (!grad_enabled() && yv.numel() > 0) {
      // Not recorded (no create_graph): the fused gradient (one pass for the row sums, one for the result).
      gin[0] = detail::make_empty(yv.shape(), yv.dtype(), yv.device(), name());
      FusedCall call = SoftmaxBackwardCall{yv.impl(), g.impl(), gin[0].impl(), dim, log};
      run_fused(call, yv.device());
      return;
    }
    if (log)
      gin[0] = g - yv.exp() * g.sum({dim}, true);
    else
      gin[0] = yv * (g - (g * yv).sum({dim}, true));
  }
};

Tensor softmax_impl(const Tensor& x, int64_t dim, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  detail::check_defined(x, name);
  const auto& xi = *x.impl();
  OXM_CHECK(is_floating(xi.dtype), UnsupportedDType, name, ": dtype ", xi.dtype, " is not supported (f32, f64)");
  const int64_t rank = static_cast<int64_t>(xi.shape.size());
  const int64_t d = normalize_dim(dim, rank, name);
  Tensor out = detail::make_empty(xi.shape, xi.dtype, xi.device(), name);
  if (xi.numel > 0) detail::backend_for(xi.device(), name).softmax(xi, *out.impl(), rank > 0 ? d : 0, log);
  if (detail::needs_tape(x)) {
    auto* n = new SoftmaxNode();
    n->log = log;
    n->dim = d;
    n->next.push_back(detail::edge_of(x));
    n->y.save(out, true);
    detail::set_history(out, n);
  }
  return out;
}

}  // namespace
}  // namespace ops

Tensor Tensor::sum(const Dims& dims, bool keepdim) const {
  return ops::reduce_impl(ops::RKind::Sum, *this, dims, keepdim);
}
Tensor Tensor::mean(const Dims& dims, bool keepdim) const {
  return ops::reduce_impl(ops::RKind::Mean, *this, dims, keepdim);
}
Tensor Tensor::max(const Dims& dims, bool keepdim) const {
  return ops::reduce_impl(ops::RKind::Max, *this, dims, keepdim);
}
Tensor Tensor::min(const Dims& dims, bool keepdim) const {
  return ops::reduce_impl(ops::RKind::Min, *this, dims, keepdim);
}
Tensor Tensor::argmax(int64_t dim, bool keepdim) const {
  return ops::arg_impl(ops::ArgReduceOp::Argmax, *this, dim, keepdim);
}
Tensor Tensor::argmin(int64_t dim, bool keepdim) const {
  return ops::arg_impl(ops::ArgReduceOp::Argmin, *this, dim, keepdim);
}
Tensor Tensor::softmax(int64_t dim) const { return ops::softmax_impl(*this, dim, false); }
Tensor Tensor::log_softmax(int64_t dim) const { return ops::softmax_impl(*this, dim, true); }

Tensor Tensor::logsumexp(int64_t dim, bool keepdim) const {
  detail::check_defined(*this, "logsumexp");
  OXM_CHECK(is_floating(dtype()), UnsupportedDType, "logsumexp: dtype ", dtype(), " of shape ", shape(),
            " is not supported (f32, f64); convert first with .to(DType::F32) (torch promotes integers to float)");
  Tensor m = max({dim}, true).detach();
  // Rows that are entirely -inf: shift by 0 so the result is -inf rather than NaN.
  Tensor finite = m.abs().lt(ops::scalar_like(std::numeric_limits<double>::infinity(), m, "logsumexp"));
  m = where(finite, m, zeros_like(m));
  Tensor r = (*this - m).exp().sum({dim}, true).log() + m;
  return keepdim ? r : r.squeeze(dim);
}

}  // namespace oxmera
