// Zero-copy views (and their backward rules), contiguous/clone, dtype and device conversion, in-place ops.
#include <algorithm>
#include <numeric>
#include <optional>

#include "autograd/node.hpp"
#include "backend/backend.hpp"
#include "ops/device_checks.hpp"
#include "ops/graph_capture.hpp"
#include "ops/ops_internal.hpp"
#include "oxmera/autograd.hpp"

namespace oxmera {
namespace {

using detail::Node;

struct ReshapeNode final : Node {
  Shape in_shape;
  const char* name() const override { return "reshape"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* g, Tensor* gin) override { gin[0] = g[0].reshape(in_shape); }
};
struct PermuteNode final : Node {
  Dims inverse;
  const char* name() const override { return "permute"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* g, Tensor* gin) override { gin[0] = g[0].permute(inverse); }
};
struct ExpandNode final : Node {
  Shape in_shape;
  const char* name() const override { return "broadcast_to"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* g, Tensor* gin) override { gin[0] = detail::sum_to(g[0], in_shape); }
};
// Where a slice / select / diagonal view took its elements from.
struct ViewPlace {
  enum Kind : uint8_t { Slice, Select, Diagonal } kind = Slice;
  int64_t dim = 0, start = 0, end = 0, step = 1;  // Diagonal: dim = dim1, end = dim2, start = offset
  Tensor of(const Tensor& t) const {
    switch (kind) {
      case Select:
        return t.select(dim, start);
      case Diagonal:
        return t.diagonal(start, dim, end);
      default:
        return t.slice(dim, start, end, step);
    }
  }
};
// The backward of a view's backward: the gradient embedded in zeros is read back through the same view.
struct EmbedNode final : Node {
  ViewPlace place;
  const char* name() const override { return "view_backward"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* g, Tensor* gin) override { gin[0] = place.of(g[0]); }
};
// The order of a non-contiguous input's dims from the largest stride to the smallest when it is a dense permuted
// view (e.g. the heads of a packed q/k/v projection); empty when it is contiguous, not dense, or in order.
Dims dense_permutation(const detail::TensorImpl& t) {
  if (t.contiguous) return {};
  Dims order = detail::dense_order(t.shape, t.strides);
  for (size_t i = 0; i < order.size(); ++i)
    if (order[i] != static_cast<int64_t>(i)) return order;
  return {};
}

// Zeros of in_shape with g written at `place`; recorded (as EmbedNode) when g has history (create_graph). With a
// layout (dense_permutation of the view's input) the zeros are laid out as the input was, as torch's empty_like
// does, so the gradient flows back through the input's own permute as a contiguous tensor (a packed projection's
// reshape then needs no copy).
Tensor embed(const Tensor& g, const Shape& in_shape, const ViewPlace& place, const Dims& layout) {
  Tensor z;
  {
    NoGradGuard ng;
    if (layout.empty()) {
      z = zeros(in_shape, g.dtype(), g.device());
    } else {
      Shape permuted(in_shape.size());
      Dims inverse(layout.size());
      for (size_t i = 0; i < layout.size(); ++i) {
        permuted[i] = in_shape[layout[i]];
        inverse[static_cast<size_t>(layout[i])] = static_cast<int64_t>(i);
      }
      z = zeros(permuted, g.dtype(), g.device()).permute(inverse);
    }
    place.of(z).copy_(g);
  }
  if (detail::needs_tape(g)) {
    auto* n = new EmbedNode();
    n->place = place;
    n->next.push_back(detail::edge_of(g));
    detail::set_history(z, n);
  }
  return z;
}
// slice / select / diagonal: the gradient embedded in zeros of the input's shape at the view's place.
struct ViewNode final : Node {
  Shape in_shape;
  ViewPlace place;
  Dims layout;  // dense_permutation of the input (empty: contiguous zeros)
  const char* name() const override {
    return place.kind == ViewPlace::Select ? "select" : place.kind == ViewPlace::Diagonal ? "diagonal" : "slice";
  }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* g, Tensor* gin) override {
    if (detail::add_into_view_of_buffer(next[0], in_shape, g[0], [this](const Tensor& t) { return place.of(t); }))
      return;  // gin[0] stays undefined: the buffer already holds this contribution
    gin[0] = embed(g[0], in_shape, place, layout);
  }
};
struct IdentityNode final : Node {
  const char* name_;
  explicit IdentityNode(const char* n) : name_(n) {}
  const char* name() const override { return name_; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* g, Tensor* gin) override { gin[0] = g[0]; }
};
struct CastNode final : Node {
  DType in_dtype;
  Device in_device;
  const char* name() const override { return "to"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* g, Tensor* gin) override { gin[0] = g[0].to(in_dtype).to(in_device); }
};

// Records a single-input node for `out` when `in` is being differentiated.
template <class N>
void record(Tensor& out, const Tensor& in, N* n) {
  n->next.push_back(detail::edge_of(in));
  detail::set_history(out, n);
}

// Strides for viewing (shape, strides) as new_shape without copying, if possible (same rule as NumPy).
std::optional<Strides> view_strides(const Shape& shape, const Strides& strides, const Shape& new_shape) {
  Strides out(new_shape.size());
  // No elements, or one (a 0-d tensor has no dims to walk): any strides address it.
  if (shape.product() <= 1) return contiguous_strides(new_shape);
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = strides.empty() ? 1 : strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= shape[d];
    if (d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

Shape infer_shape(const Shape& req, int64_t numel, const char* op, const Shape& from) {
  Shape s = req;
  int64_t infer = -1, prod = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      OXM_CHECK(infer < 0, InvalidArgument, op, ": only one dimension can be -1, got ", req);
      infer = static_cast<int64_t>(i);
    } else {
      OXM_CHECK(s[i] >= 0, InvalidArgument, op, ": invalid size ", s[i], " in ", req);
      OXM_CHECK(!__builtin_mul_overflow(prod, s[i], &prod), InvalidArgument, op, ": shape ", req, " overflows");
    }
  }
  if (infer >= 0) {
    OXM_CHECK(prod != 0 && numel % prod == 0, ShapeMismatch, op, ": cannot infer -1 in ", req, " for ", numel,
              " elements (from shape ", from, ")");
    s[infer] = numel / prod;
    prod *= s[infer];
  }
  OXM_CHECK(prod == numel, ShapeMismatch, op, ": shape ", req, " has ", prod, " elements but the tensor ", from,
            " has ", numel);
  // A zero-size shape's layout must fit too (its strides are computed); with no zero dim it is numel, which fits.
  if (numel == 0) checked_numel(s, op);
  return s;
}

Tensor view_impl(const Tensor& self, const Shape& req, bool allow_copy, const char* op) {
  detail::check_defined(self, op);
  const auto& t = *self.impl();
  Shape s = infer_shape(req, t.numel, op, t.shape);
  if (s == t.shape) return self;
  auto st = view_strides(t.shape, t.strides, s);
  Tensor out;
  if (st) {
    out = detail::make_view(self, s, *st, t.offset);
  } else {
    OXM_CHECK(allow_copy, InvalidArgument, op, ": a tensor of shape ", t.shape, " with strides ", t.strides,
              " cannot be viewed as ", s, " without copying; use reshape (or contiguous().view)");
    NoGradGuard ng;
    Tensor c = self.contiguous();
    out = detail::make_view(c, s, contiguous_strides(s), c.impl()->offset);  // a contiguous c may start at an offset
  }
  if (detail::needs_tape(self)) {
    auto* n = new ReshapeNode();
    n->in_shape = t.shape;
    record(out, self, n);
  }
  return out;
}

Tensor slice_impl(const Tensor& self, int64_t dim, int64_t start, int64_t end, int64_t step, bool select,
                  const char* op) {
  detail::check_defined(self, op);
  const auto& t = *self.impl();
  const int64_t rank = static_cast<int64_t>(t.shape.size());
  OXM_CHECK(rank > 0, InvalidArgument, op, ": cannot slice a 0-d tensor");
  const int64_t d = normalize_dim(dim, rank, op);
  const int64_t size = t.shape[d];
  Shape shape = t.shape;
  Strides strides = t.strides;
  int64_t offset = t.offset;
  if (select) {
    OXM_CHECK(start >= -size && start < size, IndexOutOfBounds, op, ": index ", start, " is out of range for dim ", dim,
              " of size ", size, " (shape ", t.shape, ")");
    if (start < 0) start += size;
    offset += start * t.strides[d];
    shape.erase(d);
    strides.erase(d);
    end = start + 1;
  } else {
    OXM_CHECK(step >= 1, InvalidArgument, op, ": step must be >= 1, got ", step);
    int64_t s0 = start < 0 ? start + size : start, e0 = end < 0 ? end + size : end;
    OXM_CHECK(s0 >= 0 && s0 <= size && e0 >= 0 && e0 <= size, IndexOutOfBounds, op, ": range [", start, ", ", end,
              ") is out of bounds for dim ", dim, " of size ", size, " (shape ", t.shape, ")");
    OXM_CHECK(s0 <= e0, InvalidArgument, op, ": reversed range [", start, ", ", end, ") on dim ", dim,
              "; start must not exceed end");
    start = s0;
    end = e0;
    offset += size > 0 ? start * t.strides[d] : 0;
    shape[d] = (end - start + step - 1) / step;
    strides[d] = t.strides[d] * step;
  }
  Tensor out = detail::make_view(self, shape, strides, offset);
  if (detail::needs_tape(self)) {
    auto* n = new ViewNode();
    n->in_shape = t.shape;
    n->place = {select ? ViewPlace::Select : ViewPlace::Slice, d, start, end, step};
    n->layout = dense_permutation(t);
    record(out, self, n);
  }
  return out;
}

void check_inplace(const Tensor& self, const char* op) {
  detail::check_defined(self, op);
  OXM_CHECK(!(grad_enabled() && self.impl()->requires_grad), InvalidArgument, op,
            ": in-place update of a tensor that requires grad while grad mode is on would corrupt its gradient; "
            "wrap the update in NoGradGuard (as optimizers do) or use the out-of-place op");
  // A broadcast view (stride 0 over more than one element) would be written once per alias, racing.
  const auto& t = *self.impl();
  for (size_t d = 0; d < t.shape.size(); ++d)
    OXM_CHECK(t.strides[d] != 0 || t.shape[d] <= 1, InvalidArgument, op, ": the tensor (shape ", t.shape, ", strides ",
              t.strides, ") is a broadcast view whose elements share memory along dim ", d,
              "; write into a contiguous tensor instead (.contiguous() or .clone())");
}

}  // namespace

Tensor Tensor::reshape(const Shape& shape) const { return view_impl(*this, shape, true, "reshape"); }
Tensor Tensor::view(const Shape& shape) const { return view_impl(*this, shape, false, "view"); }

Tensor Tensor::permute(const Dims& order) const {
  detail::check_defined(*this, "permute");
  const auto& t = *impl_;
  const int64_t rank = static_cast<int64_t>(t.shape.size());
  OXM_CHECK(static_cast<int64_t>(order.size()) == rank, InvalidArgument, "permute: order ", order,
            " must list each of the ", rank, " dims of shape ", t.shape, " once");
  Shape shape(order.size());
  Strides strides(order.size());
  Dims inverse(order.size());
  uint64_t seen = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    int64_t d = normalize_dim(order[i], rank, "permute");
    OXM_CHECK(!(seen >> d & 1), InvalidArgument, "permute: dim ", order[i], " repeated in ", order);
    seen |= uint64_t{1} << d;
    shape[i] = t.shape[d];
    strides[i] = t.strides[d];
    inverse[d] = static_cast<int64_t>(i);
  }
  Tensor out = detail::make_view(*this, shape, strides, t.offset);
  if (detail::needs_tape(*this)) {
    auto* n = new PermuteNode();
    n->inverse = inverse;
    record(out, *this, n);
  }
  return out;
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  const int64_t rank = dim();
  if (rank < 2) {
    normalize_dim(d0, rank, "transpose");
    normalize_dim(d1, rank, "transpose");
    return *this;
  }
  Dims order(static_cast<size_t>(rank));
  std::iota(order.begin(), order.end(), 0);
  std::swap(order[normalize_dim(d0, rank, "transpose")], order[normalize_dim(d1, rank, "transpose")]);
  return permute(order);
}
Tensor Tensor::t() const { return dim() < 2 ? *this : transpose(-2, -1); }

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  OXM_CHECK(length >= 0, InvalidArgument, "narrow: length must be >= 0, got ", length);
  detail::check_defined(*this, "narrow");
  int64_t nd = normalize_dim(d, dim(), "narrow");
  int64_t size = dim() > 0 ? impl_->shape[nd] : 1;
  int64_t s = start < 0 ? start + size : start;
  OXM_CHECK(s >= 0 && s <= size && length <= size - s, IndexOutOfBounds, "narrow: start ", start, " with length ",
            length, " exceeds dim ", d, " of size ", size, " (shape ", shape(), ")");
  return slice_impl(*this, d, s, s + length, 1, false, "narrow");
}
Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  return slice_impl(*this, d, start, end, step, false, "slice");
}
Tensor Tensor::select(int64_t d, int64_t index) const { return slice_impl(*this, d, index, 0, 1, true, "select"); }

Tensor Tensor::diagonal(int64_t offset, int64_t dim1, int64_t dim2) const {
  detail::check_defined(*this, "diagonal");
  const auto& t = *impl_;
  const int64_t rank = static_cast<int64_t>(t.shape.size());
  OXM_CHECK(rank >= 2, InvalidArgument, "diagonal: needs at least 2 dims, got shape ", t.shape);
  const int64_t d1 = normalize_dim(dim1, rank, "diagonal"), d2 = normalize_dim(dim2, rank, "diagonal");
  OXM_CHECK(d1 != d2, InvalidArgument, "diagonal: dim1 and dim2 are the same dim (", dim1, ", ", dim2, ")");
  int64_t len = offset >= 0 ? std::min(t.shape[d1], t.shape[d2] - offset) : std::min(t.shape[d1] + offset, t.shape[d2]);
  len = std::max<int64_t>(len, 0);
  int64_t off = t.offset;
  if (len > 0) off += offset >= 0 ? offset * t.strides[d2] : -offset * t.strides[d1];
  Shape shape;
  Strides strides;
  for (int64_t d = 0; d < rank; ++d) {
    if (d == d1 || d == d2) continue;
    shape.push_back(t.shape[d]);
    strides.push_back(t.strides[d]);
  }
  shape.push_back(len);
  strides.push_back(t.strides[d1] + t.strides[d2]);
  Tensor out = detail::make_view(*this, shape, strides, off);
  if (detail::needs_tape(*this)) {
    auto* n = new ViewNode();
    n->in_shape = t.shape;
    n->place = {ViewPlace::Diagonal, d1, offset, d2, 1};
    record(out, *this, n);
  }
  return out;
}

Tensor Tensor::unsqueeze(int64_t d) const {
  detail::check_defined(*this, "unsqueeze");
  const auto& t = *impl_;
  const int64_t rank = static_cast<int64_t>(t.shape.size());
  OXM_CHECK(d >= -rank - 1 && d <= rank, IndexOutOfBounds, "unsqueeze: dim ", d, " out of range for rank ", rank,
            " (valid: ", -rank - 1, "..", rank, ")");
  if (d < 0) d += rank + 1;
  Shape s = t.shape;
  s.insert(static_cast<size_t>(d), 1);
  return reshape(s);
}
Tensor Tensor::squeeze() const {
  detail::check_defined(*this, "squeeze");
  Shape s;
  for (int64_t v : impl_->shape)
    if (v != 1) s.push_back(v);
  return reshape(s);
}
Tensor Tensor::squeeze(int64_t d) const {
  detail::check_defined(*this, "squeeze");
  const int64_t rank = dim();
  if (rank == 0) {
    normalize_dim(d, 0, "squeeze");
    return *this;
  }
  int64_t nd = normalize_dim(d, rank, "squeeze");
  if (impl_->shape[nd] != 1) return *this;
  Shape s = impl_->shape;
  s.erase(nd);
  return reshape(s);
}
Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  detail::check_defined(*this, "flatten");
  const int64_t rank = dim();
  if (rank == 0) return reshape({1});
  int64_t s = normalize_dim(start_dim, rank, "flatten"), e = normalize_dim(end_dim, rank, "flatten");
  OXM_CHECK(s <= e, InvalidArgument, "flatten: start_dim ", start_dim, " comes after end_dim ", end_dim);
  Shape out;
  int64_t prod = 1;
  for (int64_t i = 0; i < rank; ++i) {
    if (i < s || i > e) {
      out.push_back(impl_->shape[i]);
    } else {
      prod *= impl_->shape[i];
      if (i == e) out.push_back(prod);
    }
  }
  return reshape(out);
}

Tensor Tensor::broadcast_to(const Shape& shape) const {
  detail::check_defined(*this, "broadcast_to");
  const auto& t = *impl_;
  if (t.shape == shape) return *this;
  OXM_CHECK(shape.size() >= t.shape.size(), BroadcastIncompatible, "broadcast_to: cannot broadcast ", t.shape,
            " to fewer dims ", shape);
  Shape b = broadcast_shapes(t.shape, shape, "broadcast_to");
  OXM_CHECK(b == shape, BroadcastIncompatible, "broadcast_to: cannot broadcast ", t.shape, " to ", shape);
  checked_numel(shape, "broadcast_to");
  Tensor out = ops::broadcast_view(*this, shape);
  if (detail::needs_tape(*this)) {
    auto* n = new ExpandNode();
    n->in_shape = t.shape;
    record(out, *this, n);
  }
  return out;
}

Tensor Tensor::contiguous() const {
  detail::check_defined(*this, "contiguous");
  if (impl_->contiguous) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  detail::check_defined(*this, "clone");
  const auto& t = *impl_;
  Tensor out = detail::make_empty(t.shape, t.dtype, t.device(), "clone");
  if (t.numel) detail::backend_for(t.device(), "clone").copy(t, *out.impl());
  if (detail::needs_tape(*this)) record(out, *this, new IdentityNode("clone"));
  return out;
}

Tensor Tensor::to(DType dtype) const {
  detail::check_defined(*this, "to");
  const auto& t = *impl_;
  if (t.dtype == dtype) return *this;
  Tensor out = detail::make_empty(t.shape, dtype, t.device(), "to");
  if (t.numel) detail::backend_for(t.device(), "to").copy(t, *out.impl());
  if (is_floating(dtype) && detail::needs_tape(*this)) {
    auto* n = new CastNode();
    n->in_dtype = t.dtype;
    n->in_device = t.device();
    record(out, *this, n);
  }
  return out;
}

Tensor Tensor::to(Device device) const { return to(device, false); }

Tensor Tensor::to(Device device, bool non_blocking) const {
  detail::check_defined(*this, "to");
  const auto& t = *impl_;
  if (t.device() == device) return *this;
  auto& dst_be = detail::backend_for(device, "to");
  OXM_CHECK(device.is_cpu() || t.dtype != DType::F64, UnsupportedDType, "to(", device,
            "): f64 tensors live on the CPU only; cast with .to(DType::F32) first");
  Tensor src = t.device().is_cpu() ? contiguous() : *this;
  Tensor out = detail::make_empty(t.shape, t.dtype, device, "to");
  const size_t bytes = static_cast<size_t>(t.numel) * itemsize(t.dtype);
  if (bytes) {
    if (detail::capture_open()) {
      if (t.device().is_cpu())
        detail::refuse_in_capture("to",
                                  "copies host memory to the device (new data, or random numbers, which are "
                                  "drawn on the host): copy it into a static device tensor before replay()");
      else
        detail::refuse_in_capture("to",
                                  "reads device memory on the host (item(), printing, to(Device::cpu())): the "
                                  "captured work has not run; read the result after replay()");
    }
    if (t.device().is_cpu()) {
      // Asynchronous only from a block the target's own backend pinned (its stream-ordered free keeps it).
      if (non_blocking && src.impl()->storage->pinned_by == device.kind())
        dst_be.copy_from_pinned_host(out.impl()->storage->data, src.impl()->byte_ptr(), bytes);
      else
        dst_be.copy_from_host(out.impl()->storage->data, src.impl()->byte_ptr(), bytes);
    } else {
      Tensor c = src.contiguous();
      auto& src_be = detail::backend_for(t.device(), "to");
      if (device.is_cpu()) {
        src_be.copy_to_host(out.impl()->storage->data, c.impl()->byte_ptr(), bytes);
      } else {  // between two devices: through the host
        Tensor host = detail::make_empty(t.shape, t.dtype, Device::cpu(), "to");
        src_be.copy_to_host(host.impl()->storage->data, c.impl()->byte_ptr(), bytes);
        dst_be.copy_from_host(out.impl()->storage->data, host.impl()->storage->data, bytes);
      }
      detail::run_deferred_checks(t.device());  // the device's results are on the host: its pending checks too
    }
  }
  if (detail::needs_tape(*this)) {
    auto* n = new CastNode();
    n->in_dtype = t.dtype;
    n->in_device = t.device();
    record(out, *this, n);
  }
  return out;
}

Tensor Tensor::pin_memory() const {
  detail::check_defined(*this, "pin_memory");
  const auto& t = *impl_;
  OXM_CHECK(t.device().is_cpu(), DeviceMismatch, "pin_memory: only CPU tensors can be pinned, this one is on ",
            t.device());
  if (t.storage->pinned_by != DeviceKind::CPU) return *this;
  const size_t bytes = static_cast<size_t>(t.numel) * itemsize(t.dtype);
  auto* o = detail::new_impl();
  Tensor out(o);
  o->storage = detail::allocate_pinned_storage(bytes, "pin_memory");
  o->shape = t.shape;
  o->strides = contiguous_strides(t.shape);
  o->numel = t.numel;
  o->dtype = t.dtype;
  o->contiguous = true;
  if (t.numel) detail::cpu_backend().copy(t, *o);
  if (detail::needs_tape(*this)) record(out, *this, new IdentityNode("pin_memory"));
  return out;
}

bool Tensor::is_pinned() const {
  detail::check_defined(*this, "is_pinned");
  return impl_->storage->pinned_by != DeviceKind::CPU;
}

// ---------------------------------------------------------------- in-place
Tensor& Tensor::zero_() { return fill_(0.0); }
Tensor& Tensor::fill_(double value) {
  check_inplace(*this, "fill_");
  ops::check_scalar_fits(value, dtype(), "fill_");
  if (impl_->numel) detail::backend_for(device(), "fill_").fill(*impl_, value);
  ++impl_->storage->version;
  return *this;
}
Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace(*this, "copy_");
  detail::check_defined(src, "copy_", "source");
  OXM_CHECK(src.device() == device(), DeviceMismatch, "copy_: source is on ", src.device(),
            " but the destination is on ", device(), "; move it with .to(Device) first");
  Tensor s = src.broadcast_to(shape());
  if (impl_->numel) detail::backend_for(device(), "copy_").copy(*s.impl(), *impl_);
  ++impl_->storage->version;
  return *this;
}
namespace {
// self = op(self, o) in one kernel pass; o broadcasts to self's shape (never the other way: self's shape is fixed).
Tensor& binary_inplace(Tensor& self, ops::BinaryOp op, const Tensor& o, const char* name) {
  check_inplace(self, name);
  NoGradGuard ng;
  ops::check_binary(self, o, name);
  OXM_CHECK(broadcast_shapes(self.shape(), o.shape(), name) == self.shape(), ShapeMismatch, name,
            ": the operand of shape ", o.shape(), " does not broadcast to the shape ", self.shape(),
            " of the tensor updated in place");
  // An operand that overlaps self (x.mul_(x.t())) would be read after it was written: take a copy first.
  Tensor src = o.shares_storage(self) && !o.is_same(self) ? o.clone() : o;
  Tensor b = src.broadcast_to(self.shape());
  auto& t = *self.impl();
  if (t.numel) detail::backend_for(self.device(), name).binary(op, t, *b.impl(), t);
  ++t.storage->version;
  return self;
}
Tensor& scalar_inplace(Tensor& self, ops::BinaryOp op, double s, const char* name) {
  check_inplace(self, name);
  ops::check_scalar_fits(s, self.dtype(), name);
  auto& t = *self.impl();
  OXM_CHECK(!(op == ops::BinaryOp::Div && t.dtype == DType::I64), UnsupportedDType, name,
            ": integer division in place would truncate; convert with .to(DType::F64) first");
  if (t.numel) detail::backend_for(self.device(), name).binary_scalar(op, t, s, false, t);
  ++t.storage->version;
  return self;
}
}  // namespace

Tensor& Tensor::add_(const Tensor& o, double alpha) {
  detail::check_defined(o, "add_", "operand");
  if (alpha == 1.0) return binary_inplace(*this, ops::BinaryOp::Add, o, "add_");
  NoGradGuard ng;
  return binary_inplace(*this, ops::BinaryOp::Add, o * alpha, "add_");
}
Tensor& Tensor::sub_(const Tensor& o, double alpha) {
  detail::check_defined(o, "sub_", "operand");
  if (alpha == 1.0) return binary_inplace(*this, ops::BinaryOp::Sub, o, "sub_");
  NoGradGuard ng;
  return binary_inplace(*this, ops::BinaryOp::Sub, o * alpha, "sub_");
}
Tensor& Tensor::mul_(const Tensor& o) { return binary_inplace(*this, ops::BinaryOp::Mul, o, "mul_"); }
Tensor& Tensor::div_(const Tensor& o) { return binary_inplace(*this, ops::BinaryOp::Div, o, "div_"); }
Tensor& Tensor::add_(double s) { return scalar_inplace(*this, ops::BinaryOp::Add, s, "add_"); }
Tensor& Tensor::sub_(double s) { return scalar_inplace(*this, ops::BinaryOp::Sub, s, "sub_"); }
Tensor& Tensor::mul_(double s) { return scalar_inplace(*this, ops::BinaryOp::Mul, s, "mul_"); }
Tensor& Tensor::div_(double s) { return scalar_inplace(*this, ops::BinaryOp::Div, s, "div_"); }

}  // namespace oxmera
