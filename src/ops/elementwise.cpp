// Front end of elementwise ops: dtype/device/shape rules, output allocation, dispatch through the op
// table to the backend, and autograd nodes built from the same table's backward rules.
#include "autograd/node.hpp"
#include "backend/backend.hpp"
#include "core/convert.hpp"
#include "ops/op_defs.hpp"
#include "ops/ops_internal.hpp"
#include "oxmera/autograd.hpp"

namespace oxmera {
namespace ops {

const OpInfo* find_op(std::string_view name) noexcept {
  for (auto table : {unary_ops(), binary_ops(), structured_ops()})
    for (const OpInfo& e : table)
      if (name == e.name) return &e;
  return nullptr;
}

// One pass over g's shape: out = Def::grad_a(g, a, b) (side 0) or grad_b; a and b broadcast to g's shape, and
// either may be a 0-d CPU tensor when g is on another device.
Tensor binary_grad(BinaryOp op, int side, const Tensor& g, const Tensor& a, const Tensor& b) {
  const auto& gi = *g.impl();
  const char* name = binary_name(op);
  OXM_CHECK(a.dtype() == gi.dtype && b.dtype() == gi.dtype, InvalidArgument, name, " backward: operands ", a.dtype(),
            " and ", b.dtype(), " do not match the gradient's dtype ", gi.dtype);
  Tensor out = detail::make_empty(gi.shape, gi.dtype, gi.device(), name);
  Tensor av = broadcast_view(a, gi.shape), bv = broadcast_view(b, gi.shape);
  detail::backend_for(gi.device(), name).binary_grad(op, side, gi, *av.impl(), *bv.impl(), *out.impl());
  return out;
}

// One pass over the output: out = Def::grad(g, x, y). g, x and y have one shape, dtype and device.
Tensor unary_grad(UnaryOp op, const Tensor& g, const Tensor& x, const Tensor& y, const OpParams& params) {
  const auto &gi = *g.impl(), &xi = *x.impl(), &yi = *y.impl();
  OXM_CHECK(xi.shape == gi.shape && yi.shape == gi.shape && xi.dtype == gi.dtype && yi.dtype == gi.dtype &&
                xi.device() == gi.device() && yi.device() == gi.device(),
            InvalidArgument, unary_name(op), " backward: gradient ", gi.shape, " ", gi.dtype, " on ", gi.device(),
            " does not match the saved tensors ", xi.shape, " ", xi.dtype, " and ", yi.shape, " ", yi.dtype);
  Tensor out = detail::make_empty(gi.shape, gi.dtype, gi.device(), unary_name(op));
  detail::backend_for(gi.device(), unary_name(op)).unary_grad(op, gi, xi, yi, *out.impl(), params);
  return out;
}

namespace {

using detail::Node;
using detail::SavedTensor;

template <class Def>
struct UnaryNode final : Node {
  SavedTensor x, y;
  bool release_saved() override {
    const bool had = x.defined() || y.defined();
    x.reset();
    y.reset();
    return had;
  }
  OpParams params;
  const char* name() const override { return Def::name; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* gout, Tensor* gin) override {
    const Tensor& g = gout[0];
    Tensor xs, ys;
    if constexpr (Def::saves == Saves::Input || Def::saves == Saves::Both) xs = x.get(Def::name);
    if constexpr (Def::saves == Saves::Output || Def::saves == Saves::Both) ys = y.get(Def::name);
    // create_graph: the same gradient from recorded ops (the fused kernel has no derivative of its own).
    if (grad_enabled()) {
      gin[0] = Def::template grad_graph<Tensor>(g, xs, ys, params);
      return;
    }
    gin[0] = unary_grad(Def::id, g, xs.defined() ? xs : g, ys.defined() ? ys : g, params);
  }
};

// Parameters torch refuses.
template <class Def>
void check_params(const OpParams& p) {
  if constexpr (Def::id == UnaryOp::Hardtanh)
    OXM_CHECK(p.v[0] <= p.v[1], InvalidArgument, "hardtanh: min_val ", p.v[0], " exceeds max_val ", p.v[1]);
  if constexpr (Def::id == UnaryOp::Softplus)
    OXM_CHECK(p.v[0] != 0, InvalidArgument, "softplus: beta must not be 0 (it divides by beta)");
}

template <class Def>
Tensor unary_impl(const Tensor& x, const OpParams& params) {
  detail::check_defined(x, Def::name);
  check_params<Def>(params);
  const auto& xi = *x.impl();
  OXM_CHECK(is_floating(xi.dtype) || (Def::ints && xi.dtype == DType::I64), UnsupportedDType, Def::name, ": dtype ",
            xi.dtype, " is not supported", Def::ints ? " (f32, f64, i64)" : " (f32, f64)",
            "; cast with .to(DType::F32)");
  Tensor out = detail::make_empty(xi.shape, xi.dtype, xi.device(), Def::name);
  detail::backend_for(xi.device(), Def::name).unary(Def::id, xi, *out.impl(), params);
  if constexpr (Def::diff) {
    if (detail::needs_tape(x)) {
      auto* n = new UnaryNode<Def>();
      n->params = params;
      n->next.push_back(detail::edge_of(x));
      if constexpr (Def::saves == Saves::Input || Def::saves == Saves::Both) n->x.save(x, false);
      if constexpr (Def::saves == Saves::Output || Def::saves == Saves::Both) n->y.save(out, true);
      detail::set_history(out, n);
    }
  }
  return out;
}

template <class Def>
struct BinaryNode final : Node {
  static_assert(Def::saves_inputs || (Def::grad_a_reads == 0 && Def::grad_b_reads == 0),
                "a gradient that reads an operand needs the operands saved");
  SavedTensor a, b;
  Shape a_shape, b_shape;
  bool release_saved() override {
    const bool had = a.defined() || b.defined();
    a.reset();
    b.reset();
    return had;
  }
  const char* name() const override { return Def::name; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* gout, Tensor* gin) override {
    const Tensor& g = gout[0];
    Tensor av, bv;
    if constexpr (Def::saves_inputs) {
      av = a.get(Def::name);
      bv = b.get(Def::name);
    }
    const auto op = Def::id;
    if (grad_enabled()) {  // create_graph: recorded ops instead of the fused kernels
      if (needs_grad(0)) {
        if constexpr (Def::grad_a_is_g)
          gin[0] = detail::sum_to(g, a_shape);
        else
          gin[0] = detail::sum_to(Def::template grad_a_graph<Tensor>(g, av, bv), a_shape);
      }
      if (needs_grad(1)) {
        if constexpr (Def::grad_b_is_g)
          gin[1] = detail::sum_to(g, b_shape);
        else
          gin[1] = detail::sum_to(Def::template grad_b_graph<Tensor>(g, av, bv), b_shape);
      }
      return;
    }
    // Operands a gradient does not read are replaced by g (same layout: the kernel's runs stay long).
    auto operand = [&](unsigned reads, unsigned which, const Tensor& t) -> const Tensor& {
      return (reads & which) && t.defined() ? t : g;
    };
    if (needs_grad(0))
      gin[0] = detail::sum_to(Def::grad_a_is_g ? g
                                               : binary_grad(op, 0, g, operand(Def::grad_a_reads, defs::kReadsA, av),
                                                             operand(Def::grad_a_reads, defs::kReadsB, bv)),
                              a_shape);
    if (needs_grad(1))
      gin[1] = detail::sum_to(Def::grad_b_is_g ? g
                                               : binary_grad(op, 1, g, operand(Def::grad_b_reads, defs::kReadsA, av),
                                                             operand(Def::grad_b_reads, defs::kReadsB, bv)),
                              b_shape);
  }
};

}  // namespace

// Validates and broadcasts two operands of a binary-shaped op; returns the output shape. With
// `allow_host_scalar`, a 0-d CPU operand that does not require grad may meet a tensor on another device.
Shape check_binary(const Tensor& a, const Tensor& b, const char* op, bool allow_host_scalar) {
  detail::check_defined(a, op, "first operand");
  detail::check_defined(b, op, "second operand");
  const auto &ai = *a.impl(), &bi = *b.impl();
  OXM_CHECK(ai.dtype == bi.dtype, DTypeMismatch, op, ": operands have dtypes ", ai.dtype, " and ", bi.dtype,
            " (shapes ", ai.shape, " and ", bi.shape, "); oxmera never promotes — cast one with .to(DType::",
            ai.dtype == DType::F64 || bi.dtype == DType::F64 ? "F64" : "F32", ")");
  if (ai.device() != bi.device()) {
    const detail::TensorImpl& s = ai.device().is_cpu() ? ai : bi;
    OXM_CHECK(allow_host_scalar && s.device().is_cpu() && s.shape.empty() && !s.requires_grad, DeviceMismatch, op,
              ": operands are on ", ai.device(), " and ", bi.device(),
              "; move one with .to(Device) (only a 0-d cpu tensor that does not require grad may join a tensor on "
              "another device, as a scalar)");
  }
  return broadcast_shapes(ai.shape, bi.shape, op);
}

// The value of a 0-d CPU tensor as a double, when it converts exactly (an i64 beyond 2^53 does not).
bool host_scalar_value(const detail::TensorImpl& s, double& v) {
  switch (s.dtype) {
    case DType::F32:
      v = *s.ptr<float>();
      return true;
    case DType::F64:
      v = *s.ptr<double>();
      return true;
    case DType::U8:
      v = *s.ptr<uint8_t>();
      return true;
    case DType::I64: {
      const int64_t i = *s.ptr<int64_t>();
      v = static_cast<double>(i);
      return i > -(int64_t{1} << 53) && i < (int64_t{1} << 53);
    }
  }
  return false;
}

Tensor broadcast_view(const Tensor& t, const Shape& shape) {
  const auto& ti = *t.impl();
  if (ti.shape == shape) return t;
  Strides st(shape.size());
  const size_t lead = shape.size() - ti.shape.size();
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) continue;
    st[i] = ti.shape[i - lead] == 1 ? 0 : ti.strides[i - lead];
  }
  return detail::make_view(t, shape, st, ti.offset);
}

template <class Def>
Tensor binary_impl(const Tensor& a, const Tensor& b) {
  Shape shape = check_binary(a, b, Def::name, true);
  const auto &ai = *a.impl(), &bi = *b.impl();
  OXM_CHECK(is_floating(ai.dtype) || (Def::ints && ai.dtype == DType::I64), UnsupportedDType, Def::name, ": dtype ",
            ai.dtype, " is not supported", Def::ints ? " (f32, f64, i64)" : " (f32, f64)");
  const auto op = Def::id;
  if constexpr (Def::int_divisor) {
    if (ai.dtype == DType::I64) {
      bool zero;
      {
        NoGradGuard ng;
        zero = b.eq(scalar_like(0.0, b, Def::name)).any().to(Device::cpu()).template item<int64_t>() != 0;
      }
      OXM_CHECK(!zero, InvalidArgument, Def::name, ": integer division by zero (the divisor of shape ", bi.shape,
                " has a 0 element); torch raises ZeroDivisionError here too — mask the zeros or use floats");
    }
  }
  Tensor out;
  // A 0-d CPU operand with a tensor on another device goes to the kernel by value.
  const Device da = ai.device(), db = bi.device();
  if (da != db) [[unlikely]] {
    const bool scalar_left = da.is_cpu();
    const detail::TensorImpl& ti = scalar_left ? bi : ai;  // the operand on the output's device
    double sv = 0;
    if (!host_scalar_value(scalar_left ? ai : bi, sv))  // an i64 scalar a double cannot hold: upload it
      return binary_impl<Def>(scalar_left ? a.to(db) : a, scalar_left ? b : b.to(da));
    out = detail::make_empty(shape, ti.dtype, ti.device(), Def::name);
    detail::backend_for(ti.device(), Def::name).binary_scalar(op, ti, sv, scalar_left, *out.impl());
  } else {
    out = detail::make_empty(shape, ai.dtype, da, Def::name);
    auto& be = detail::backend_for(da, Def::name);
    if (ai.shape == shape && bi.shape == shape) {
      be.binary(op, ai, bi, *out.impl());
    } else {
      Tensor av = broadcast_view(a, shape), bv = broadcast_view(b, shape);
      be.binary(op, *av.impl(), *bv.impl(), *out.impl());
    }
  }
  if constexpr (Def::diff) {
    if (detail::needs_tape(a, b)) {
      auto* n = new BinaryNode<Def>();
      n->next.push_back(detail::edge_of(a));
      n->next.push_back(detail::edge_of(b));
      n->a_shape = ai.shape;
      n->b_shape = bi.shape;
      if constexpr (Def::saves_inputs) {
        n->a.save(a, false);
        n->b.save(b, false);
      }
      detail::set_history(out, n);
    }
  }
  return out;
}

Tensor unary(UnaryOp op, const Tensor& x) {
  OXM_CHECK(op < UnaryOp::Count, InvalidArgument, "unary: unknown op");
  return unary(op, x, default_params(op));
}
Tensor unary(UnaryOp op, const Tensor& x, const OpParams& params) {
  switch (op) {
#define OXM_X(id, ...) \
  case UnaryOp::id:    \
    return unary_impl<defs::id>(x, params);
    OXMERA_UNARY_OPS(OXM_X)
#undef OXM_X
    default:
      OXM_FAIL(InvalidArgument, "unary: unknown op");
  }
}
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  switch (op) {
#define OXM_X(id, ...) \
  case BinaryOp::id:   \
    return binary_impl<defs::id>(a, b);
    OXMERA_BINARY_OPS(OXM_X)
#undef OXM_X
    default:
      OXM_FAIL(InvalidArgument, "binary: unknown op");
  }
}

// A 0-d CPU tensor holding `v` in the dtype of `like` (scalar forms of binary ops): binary ops take it with a
// tensor on any device and pass it to the kernel by value.
void check_scalar_fits(double v, DType dtype, const char* op) {
  if (is_floating(dtype)) return;
  const bool fits = dtype == DType::U8 ? v > -1.0 && v < 256.0 : v >= -0x1p63 && v < 0x1p63;  // NaN fails both
  OXM_CHECK(fits, InvalidArgument, op, ": the scalar ", v, " cannot be held by a tensor of dtype ", dtype,
            dtype == DType::U8 ? " (range [0, 255])" : " (range [-2^63, 2^63))",
            "; convert the tensor to a floating dtype (.to(DType::F64)) first");
}

Tensor scalar_like(double v, const Tensor& like, const char* op) {
  detail::check_defined(like, op);
  const auto& li = *like.impl();
  check_scalar_fits(v, li.dtype, op);
  Tensor s = detail::make_empty(Shape{}, li.dtype, Device::cpu(), op);
  switch (li.dtype) {
    case DType::F32:
      *s.impl()->ptr<float>() = static_cast<float>(v);
      break;
    case DType::F64:
      *s.impl()->ptr<double>() = v;
      break;
    case DType::I64:
      *s.impl()->ptr<int64_t>() = detail::convert_value<int64_t>(v);
      break;
    case DType::U8:
      *s.impl()->ptr<uint8_t>() = detail::convert_value<uint8_t>(v);
      break;
  }
  return s;
}

// A 0-d tensor holding `v` on like's device (for ops other than binary ones, such as where).
Tensor scalar_on_device_of(double v, const Tensor& like, const char* op) {
  if (like.device().is_cpu()) return scalar_like(v, like, op);
  check_scalar_fits(v, like.dtype(), op);
  Tensor d = detail::make_empty(Shape{}, like.dtype(), like.device(), op);
  detail::backend_for(like.device(), op).fill(*d.impl(), v);
  return d;
}

namespace {
struct WhereNode final : Node {
  SavedTensor mask;
  Shape a_shape, b_shape;
  bool release_saved() override {
    const bool had = mask.defined();
    mask.reset();
    return had;
  }
  const char* name() const override { return "where"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* gout, Tensor* gin) override {
    Tensor m = mask.get("where");
    // A 0-d zero rather than zeros_like(g): no fill and one read stream fewer (the kernel broadcasts it).
    if (needs_grad(0)) gin[0] = detail::sum_to(where(m, gout[0], 0.0), a_shape);
    if (needs_grad(1)) gin[1] = detail::sum_to(where(m, 0.0, gout[0]), b_shape);
  }
};
}  // namespace

}  // namespace ops

using ops::BinaryOp;
using ops::UnaryOp;

// The registry's public methods and free functions (declared in tensor.hpp from the same entries).
#define OXM_X(id, name, api, dtypes, grad, cost, lo, hi, params, ...) \
  OXM_IF_PUBLIC(                                                      \
      api, Tensor Tensor::name(OXM_PARAM_DEF(params))                 \
               const { return ops::unary(UnaryOp::id, *this, OXM_PARAM_VALUES(params)); })
OXMERA_UNARY_OPS(OXM_X)
#undef OXM_X

Tensor Tensor::gelu(std::string_view approximate) const {
  if (approximate == "none") return gelu();
  if (approximate == "tanh") return ops::unary(UnaryOp::GeluTanh, *this);
  OXM_FAIL(InvalidArgument, "gelu: approximate must be \"none\" or \"tanh\", not \"", approximate, "\"");
}
#define OXM_X(id, name, api, ...)                                                                                  \
  OXM_IF_PUBLIC(                                                                                                   \
      api, Tensor Tensor::name(const Tensor& o) const { return ops::binary(BinaryOp::id, *this, o); } Tensor name( \
               const Tensor& a, const Tensor& b) { return ops::binary(BinaryOp::id, a, b); })
OXMERA_BINARY_OPS(OXM_X)
#undef OXM_X

// Scalar forms of the public binary ops: the scalar is a 0-d CPU operand of self's dtype, passed to the kernel
// by value (no device fill). pow(2) and pow(1) take cheaper exact paths.
#define OXM_X(id, name, api, ...)                                                       \
  OXM_IF_PUBLIC(                                                                        \
      api, Tensor Tensor::name(double other) const {                                    \
        if constexpr (BinaryOp::id == BinaryOp::Pow) {                                  \
          if (other == 2.0) return square();                                            \
          if (other == 1.0) return *this * 1.0;                                         \
        }                                                                               \
        return ops::binary(BinaryOp::id, *this, ops::scalar_like(other, *this, #name)); \
      })
OXMERA_BINARY_OPS(OXM_X)
#undef OXM_X
Tensor Tensor::clamp(double lo, double hi) const {
  OXM_CHECK(lo <= hi, InvalidArgument, "clamp: lower bound ", lo, " exceeds upper bound ", hi);
  // where() rather than maximum/minimum: the gradient passes at the bounds themselves (torch's rule),
  // and NaN propagates.
  Tensor lo_t = ops::scalar_on_device_of(lo, *this, "clamp"), hi_t = ops::scalar_on_device_of(hi, *this, "clamp");
  return where(lt(lo_t), lo_t, where(gt(hi_t), hi_t, *this));
}

// Tensor bounds: min(max(x, lo), hi) as two selects, so each bound's gradient is where it is the result and x's
// where lo <= x <= hi (torch's rule); NaN in x propagates (both comparisons are false).
Tensor Tensor::clamp(const Tensor& lo, const Tensor& hi) const {
  detail::check_defined(*this, "clamp");
  OXM_CHECK(lo.defined() || hi.defined(), InvalidArgument,
            "clamp: at least one of the bounds must be given (both are undefined tensors)");
  for (const Tensor* bound : {&lo, &hi})
    if (bound->defined()) ops::check_binary(*this, *bound, "clamp");  // dtype, device and shape, named clamp
  Tensor r = *this;
  if (lo.defined()) r = where(r.lt(lo), lo, r);
  if (hi.defined()) r = where(r.gt(hi), hi, r);
  return r;
}
Tensor Tensor::clamp_min(const Tensor& lo) const {
  detail::check_defined(lo, "clamp_min", "bound");
  return clamp(lo, Tensor());
}
Tensor Tensor::clamp_max(const Tensor& hi) const {
  detail::check_defined(hi, "clamp_max", "bound");
  return clamp(Tensor(), hi);
}
Tensor Tensor::clamp_min(double lo) const {
  detail::check_defined(*this, "clamp_min");
  return clamp_min(ops::scalar_on_device_of(lo, *this, "clamp_min"));
}
Tensor Tensor::clamp_max(double hi) const {
  detail::check_defined(*this, "clamp_max");
  return clamp_max(ops::scalar_on_device_of(hi, *this, "clamp_max"));
}

Tensor operator-(const Tensor& a) { return a.neg(); }
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return a.lt(b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return a.le(b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return a.gt(b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return a.ge(b); }
Tensor operator==(const Tensor& a, const Tensor& b) { return a.eq(b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return a.ne(b); }
Tensor operator<(const Tensor& a, double b) { return a.lt(b); }
Tensor operator<=(const Tensor& a, double b) { return a.le(b); }
Tensor operator>(const Tensor& a, double b) { return a.gt(b); }
Tensor operator>=(const Tensor& a, double b) { return a.ge(b); }
Tensor operator==(const Tensor& a, double b) { return a.eq(b); }
Tensor operator!=(const Tensor& a, double b) { return a.ne(b); }
Tensor operator<(double a, const Tensor& b) { return b.gt(a); }
Tensor operator<=(double a, const Tensor& b) { return b.ge(a); }
Tensor operator>(double a, const Tensor& b) { return b.lt(a); }
Tensor operator>=(double a, const Tensor& b) { return b.le(a); }
Tensor operator==(double a, const Tensor& b) { return b.eq(a); }
Tensor operator!=(double a, const Tensor& b) { return b.ne(a); }
Tensor operator+(const Tensor& a, double b) { return add(a, ops::scalar_like(b, a, "add")); }
Tensor operator-(const Tensor& a, double b) { return sub(a, ops::scalar_like(b, a, "sub")); }
Tensor operator*(const Tensor& a, double b) { return mul(a, ops::scalar_like(b, a, "mul")); }
Tensor operator/(const Tensor& a, double b) { return div(a, ops::scalar_like(b, a, "div")); }
Tensor operator+(double a, const Tensor& b) { return add(ops::scalar_like(a, b, "add"), b); }
Tensor operator-(double a, const Tensor& b) { return sub(ops::scalar_like(a, b, "sub"), b); }
Tensor operator*(double a, const Tensor& b) { return mul(ops::scalar_like(a, b, "mul"), b); }
Tensor operator/(double a, const Tensor& b) { return div(ops::scalar_like(a, b, "div"), b); }

Tensor where(const Tensor& mask, const Tensor& a, const Tensor& b) {
  detail::check_defined(mask, "where", "mask");
  Shape ab = ops::check_binary(a, b, "where");
  const auto& mi = *mask.impl();
  OXM_CHECK(mi.dtype == DType::U8 || mi.dtype == a.dtype(), DTypeMismatch, "where: mask has dtype ", mi.dtype,
            " but the values have dtype ", a.dtype(), "; the mask must be u8 or the values' dtype");
  OXM_CHECK(mi.device() == a.device(), DeviceMismatch, "where: mask is on ", mi.device(), " but the values are on ",
            a.device());
  Shape shape = broadcast_shapes(mi.shape, ab, "where");
  Tensor out = detail::make_empty(shape, a.dtype(), a.device(), "where");
  Tensor mv = ops::broadcast_view(mask, shape), av = ops::broadcast_view(a, shape), bv = ops::broadcast_view(b, shape);
  detail::backend_for(a.device(), "where").where(*mv.impl(), *av.impl(), *bv.impl(), *out.impl());
  if (detail::needs_tape(a, b)) {
    auto* n = new ops::WhereNode();
    n->next.push_back(detail::edge_of(a));
    n->next.push_back(detail::edge_of(b));
    n->a_shape = a.shape();
    n->b_shape = b.shape();
    n->mask.save(mask.impl()->grad_fn ? mask.detach() : mask, false);
    detail::set_history(out, n);
  }
  return out;
}

Tensor where(const Tensor& mask, const Tensor& a, double b) {
  detail::check_defined(a, "where");
  return where(mask, a, ops::scalar_on_device_of(b, a, "where"));
}
Tensor where(const Tensor& mask, double a, const Tensor& b) {
  detail::check_defined(b, "where");
  return where(mask, ops::scalar_on_device_of(a, b, "where"), b);
}
Tensor where(const Tensor& mask, double a, double b) {
  detail::check_defined(mask, "where", "mask");
  const DType dt = is_floating(mask.dtype()) ? mask.dtype() : DType::F32;
  // An i64 mask selects where it is non-zero, as with every other dtype.
  Tensor m = mask.dtype() == DType::I64 ? mask.ne(0.0).to(DType::U8) : mask;
  auto value = [&](double v) {
    Tensor t = detail::make_empty(Shape{}, dt, mask.device(), "where");
    detail::backend_for(mask.device(), "where").fill(*t.impl(), v);
    return t;
  };
  return where(m, value(a), value(b));
}

}  // namespace oxmera
