// Index and assembly ops: index_select, index_add, gather, scatter_add, cat, stack, pad, one_hot, with
// their backward rules (each is the adjoint of another op in this file).
#include <algorithm>
#include <limits>

#include "autograd/node.hpp"
#include "backend/backend.hpp"
#include "ops/device_checks.hpp"
#include "ops/graph_capture.hpp"
#include "ops/ops_internal.hpp"
#include "oxmera/autograd.hpp"

namespace oxmera {
namespace {

using detail::Node;

// An I64 index, every value checked against [0, size) on the host, and its copy on the data's device.
// A CPU index may index data on any device (the spec: index data may be copied to a device by a backend):
// it is validated without touching the device and copied there asynchronously. A device index must be on
// the data's device; validating it reads it back (one synchronisation). Backward nodes keep both copies and
// call the *_checked forms below, so a gradient op neither reads a device index back nor uploads it again.
struct CheckedIndex {
  Tensor host, on_device;
};
Tensor index_select_checked(const Tensor& self, int64_t d, const CheckedIndex& ci);
Tensor index_add_checked(const Tensor& self, int64_t d, const CheckedIndex& ci, const Tensor& src);
Tensor gather_checked(const Tensor& self, int64_t d, const CheckedIndex& ci);
Tensor scatter_add_checked(const Tensor& self, int64_t d, const CheckedIndex& ci, const Tensor& src);
CheckedIndex checked_index(const Tensor& index, int64_t size, const char* op, int64_t dim, const Shape& shape,
                           Device device) {
  detail::check_defined(index, op, "index");
  OXM_CHECK(index.dtype() == DType::I64, DTypeMismatch, op, ": index must be i64, got ", index.dtype(),
            "; cast with .to(DType::I64)");
  OXM_CHECK(index.device().is_cpu() || index.device() == device, DeviceMismatch, op, ": index is on ", index.device(),
            " but self on ", device, "; pass the index on the cpu or on ", device);
  if (index.device() == device && !device.is_cpu() && size > 0 && index.numel() > 0) {
    // A device index on a device with the check kernel: clamped there, and an out-of-range position is reported
    // into the deferred-check word (ops/device_checks.hpp), thrown at the device's next read-back to the host (or
    // after the replay of a graph that captured it) instead of a read-back and a wait here.
    const Tensor idx = index.contiguous();
    Tensor safe = detail::make_empty(idx.shape(), DType::I64, device, op);
    ops::FusedCall call = ops::IndexCheckCall{idx.impl(), safe.impl(), size, {}};
    auto& c = std::get<ops::IndexCheckCall>(call);
    if (ops::fused_supported(call, device)) {
      c.report =
          detail::defer_check(device, idx.numel(), [op, dim, size, shape](int64_t position, int, const char* when) {
            OXM_FAIL(IndexOutOfBounds, op, ": the index at position ", position, " is out of range for dim ", dim,
                     " of size ", size, " (shape ", shape, "; ", when, "; the op used the nearest valid index)");
          });
      if (!c.report.empty()) {
        ops::run_fused(call, device);
        return {safe, safe};
      }
    }
  }
  if (detail::capture_open() && index.device() == device && !device.is_cpu()) {
    // Inside a CUDA graph capture the values are not on the host: the index is clamped on the device (so no kernel
    // reads outside the tensor) and the clamped positions are counted into the graph's error count, which
    // replay() reads afterwards (IndexOutOfBounds). `host` is the device index here (nothing reads it on the host).
    OXM_CHECK(size > 0 || index.numel() == 0, IndexOutOfBounds, op, ": index into dim ", dim, " of size 0 (shape ",
              shape, ")");
    const Tensor idx = index.contiguous();
    const Tensor safe = idx.clamp(0.0, static_cast<double>(size > 0 ? size - 1 : 0));
    detail::count_capture_index_errors(safe.ne(idx).to(DType::I64).sum());
    return {safe, safe};
  }
  Tensor host = index.to(Device::cpu()).contiguous();
  const int64_t* p = host.impl()->ptr<int64_t>();
  for (int64_t i = 0; i < host.numel(); ++i) {
    OXM_CHECK(p[i] >= 0 && p[i] < size, IndexOutOfBounds, op, ": index ", p[i], " (at position ", i,
              ") is out of range for dim ", dim, " of size ", size, " (shape ", shape, ")");
  }
  if (device.is_cpu()) return {host, host};
  return {host, index.device() == device ? index : host.to(device)};
}

void check_same(const Tensor& a, const Tensor& b, const char* op, const char* what) {
  detail::check_defined(b, op, what);
  OXM_CHECK(a.dtype() == b.dtype(), DTypeMismatch, op, ": ", what, " has dtype ", b.dtype(), " but self has ",
            a.dtype());
  OXM_CHECK(a.device() == b.device(), DeviceMismatch, op, ": ", what, " is on ", b.device(), " but self is on ",
            a.device());
}

struct IndexSelectNode final : Node {
  int64_t dim;
  Shape in_shape;
  CheckedIndex index;
  bool release_saved() override {
    const bool had = index.host.defined();
    index = CheckedIndex{};
    return had;
  }
  const char* name() const override { return "index_select"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* g, Tensor* gin) override {
    gin[0] = index_add_checked(zeros(in_shape, g[0].dtype(), g[0].device()), dim, index, g[0]);
  }
};
struct IndexAddNode final : Node {
  int64_t dim;
  CheckedIndex index;
  bool release_saved() override {
    const bool had = index.host.defined();
    index = CheckedIndex{};
    return had;
  }
  const char* name() const override { return "index_add"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* g, Tensor* gin) override {
    if (needs_grad(0)) gin[0] = g[0];
    if (needs_grad(1)) gin[1] = index_select_checked(g[0], dim, index);
  }
};
struct GatherNode final : Node {
  int64_t dim;
  Shape in_shape;
  CheckedIndex index;
  bool release_saved() override {
    const bool had = index.host.defined();
    index = CheckedIndex{};
    return had;
  }
  const char* name() const override { return "gather"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* g, Tensor* gin) override {
    gin[0] = scatter_add_checked(zeros(in_shape, g[0].dtype(), g[0].device()), dim, index, g[0]);
  }
};
struct ScatterAddNode final : Node {
  int64_t dim;
  CheckedIndex index;
  bool release_saved() override {
    const bool had = index.host.defined();
    index = CheckedIndex{};
    return had;
  }
  Shape src_shape;
  const char* name() const override { return "scatter_add"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* g, Tensor* gin) override {
    if (needs_grad(0)) gin[0] = g[0];
    if (needs_grad(1)) {
      // src entries at index positions get the gathered gradient; entries beyond the index's extent were
      // never read, so their gradient is 0 (zero padding at the end of each shorter dim).
      Tensor gs = gather_checked(g[0], dim, index);
      for (int64_t d = 0; d < gs.dim(); ++d)
        if (gs.shape()[d] < src_shape[d]) gs = pad(gs, d, 0, src_shape[d] - gs.shape()[d]);
      gin[1] = gs;
    }
  }
};
struct CatNode final : Node {
  int64_t dim;
  std::vector<int64_t> sizes;
  const char* name() const override { return "cat"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* g, Tensor* gin) override {
    int64_t off = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (needs_grad(i)) gin[i] = g[0].narrow(dim, off, sizes[i]);
      off += sizes[i];
    }
  }
};

// Registers a node with edges to `inputs` on `out`, when any input is being differentiated.
template <class N>
void record(Tensor& out, std::initializer_list<const Tensor*> inputs, N* n) {
  for (const Tensor* t : inputs) n->next.push_back(detail::edge_of(*t));
  detail::set_history(out, n);
}

}  // namespace

Tensor Tensor::index_select(int64_t dim, const Tensor& index) const {
  const char* op = "index_select";
  detail::check_defined(*this, op);
  const auto& x = *impl_;
  OXM_CHECK(!x.shape.empty(), InvalidArgument, op, ": self must have at least one dim");
  const int64_t d = normalize_dim(dim, this->dim(), op);
  detail::check_defined(index, op, "index");
  OXM_CHECK(index.dim() <= 1, InvalidArgument, op, ": index must be 1-d or 0-d, got shape ", index.shape());
  return index_select_checked(*this, d, checked_index(index, x.shape[d], op, dim, x.shape, x.device()));
}
namespace {
Tensor index_select_checked(const Tensor& self, int64_t d, const CheckedIndex& ci) {
  const char* op = "index_select";
  const auto& x = *self.impl();
  const Tensor& idx = ci.on_device;
  Shape out_shape = x.shape;
  out_shape[d] = idx.numel();
  Tensor out = detail::make_empty(out_shape, x.dtype, x.device(), op);
  if (out.numel()) detail::backend_for(x.device(), op).index_select(x, d, *idx.impl(), *out.impl());
  if (detail::needs_tape(self)) {
    auto* n = new IndexSelectNode();
    n->dim = d;
    n->in_shape = x.shape;
    n->index = ci;
    record(out, {&self}, n);
  }
  return out;
}
}  // namespace

Tensor Tensor::index_add(int64_t dim, const Tensor& index, const Tensor& src) const {
  const char* op = "index_add";
  detail::check_defined(*this, op);
  check_same(*this, src, op, "src");
  const auto& x = *impl_;
  OXM_CHECK(!x.shape.empty(), InvalidArgument, op, ": self must have at least one dim");
  const int64_t d = normalize_dim(dim, this->dim(), op);
  detail::check_defined(index, op, "index");
  OXM_CHECK(index.dim() <= 1, InvalidArgument, op, ": index must be 1-d or 0-d, got shape ", index.shape());
  Shape want = x.shape;
  want[d] = index.numel();
  OXM_CHECK(src.shape() == want, ShapeMismatch, op, ": src has shape ", src.shape(), " but self ", x.shape, " with ",
            index.numel(), " indices along dim ", dim, " needs ", want);
  return index_add_checked(*this, d, checked_index(index, x.shape[d], op, dim, x.shape, x.device()), src);
}
namespace {
Tensor index_add_checked(const Tensor& self, int64_t d, const CheckedIndex& ci, const Tensor& src) {
  const char* op = "index_add";
  const Tensor& idx = ci.on_device;
  Tensor out;
  {
    NoGradGuard ng;
    out = self.clone();
  }
  if (idx.numel() && out.numel())
    detail::backend_for(self.device(), op).index_add(*out.impl(), d, *idx.impl(), *src.impl());
  if (detail::needs_tape(self, src)) {
    auto* n = new IndexAddNode();
    n->dim = d;
    n->index = ci;
    record(out, {&self, &src}, n);
  }
  return out;
}
}  // namespace

namespace {
// Shared validation of gather/scatter_add: same rank, index dims within the data's (other than dim).
int64_t check_gather_shapes(const Tensor& self, const Tensor& index, const Tensor* src, int64_t dim, const char* op) {
  detail::check_defined(index, op, "index");
  const int64_t rank = self.dim();
  const int64_t d = normalize_dim(dim, rank, op);
  OXM_CHECK(index.dim() == rank, ShapeMismatch, op, ": index has rank ", index.dim(), " but self has rank ", rank,
            " (shapes ", index.shape(), " and ", self.shape(), ")");
  for (int64_t i = 0; i < rank; ++i) {
    OXM_CHECK(i == d || index.shape()[i] <= self.shape()[i], ShapeMismatch, op, ": index shape ", index.shape(),
              " exceeds self shape ", self.shape(), " at dim ", i);
    if (src) {
      OXM_CHECK(index.shape()[i] <= src->shape()[i], ShapeMismatch, op, ": index shape ", index.shape(),
                " exceeds src shape ", src->shape(), " at dim ", i);
    }
  }
  return d;
}
}  // namespace

Tensor Tensor::gather(int64_t dim, const Tensor& index) const {
  const char* op = "gather";
  detail::check_defined(*this, op);
  const auto& x = *impl_;
  const int64_t d = check_gather_shapes(*this, index, nullptr, dim, op);
  return gather_checked(*this, d, checked_index(index, x.shape.empty() ? 1 : x.shape[d], op, dim, x.shape, x.device()));
}
namespace {
Tensor gather_checked(const Tensor& self, int64_t d, const CheckedIndex& ci) {
  const char* op = "gather";
  const auto& x = *self.impl();
  const Tensor& idx = ci.on_device;
  Tensor out = detail::make_empty(idx.shape(), x.dtype, x.device(), op);
  if (out.numel()) detail::backend_for(x.device(), op).gather(x, d, *idx.impl(), *out.impl());
  if (detail::needs_tape(self)) {
    auto* n = new GatherNode();
    n->dim = d;
    n->in_shape = x.shape;
    n->index = ci;
    record(out, {&self}, n);
  }
  return out;
}
}  // namespace

Tensor Tensor::scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const {
  const char* op = "scatter_add";
  detail::check_defined(*this, op);
  check_same(*this, src, op, "src");
  OXM_CHECK(src.dim() == this->dim(), ShapeMismatch, op, ": src has rank ", src.dim(), " but self has rank ",
            this->dim());
  const auto& x = *impl_;
  const int64_t d = check_gather_shapes(*this, index, &src, dim, op);
  return scatter_add_checked(*this, d,
                             checked_index(index, x.shape.empty() ? 1 : x.shape[d], op, dim, x.shape, x.device()), src);
}
namespace {
Tensor scatter_add_checked(const Tensor& self, int64_t d, const CheckedIndex& ci, const Tensor& src) {
  const char* op = "scatter_add";
  const Tensor& idx = ci.on_device;
  Tensor out;
  {
    NoGradGuard ng;
    out = self.clone();
  }
  if (idx.numel()) detail::backend_for(self.device(), op).scatter_add(*out.impl(), d, *idx.impl(), *src.impl());
  if (detail::needs_tape(self, src)) {
    auto* n = new ScatterAddNode();
    n->dim = d;
    n->index = ci;
    n->src_shape = src.shape();
    record(out, {&self, &src}, n);
  }
  return out;
}
}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  const char* op = "cat";
  OXM_CHECK(!tensors.empty(), InvalidArgument, op, ": needs at least one tensor");
  const Tensor& first = tensors[0];
  detail::check_defined(first, op);
  const int64_t rank = first.dim();
  OXM_CHECK(rank > 0, InvalidArgument, op, ": 0-d tensors cannot be concatenated; unsqueeze them or use stack");
  const int64_t d = normalize_dim(dim, rank, op);
  Shape out_shape = first.shape();
  int64_t total = 0;
  bool any_grad = false;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    check_same(first, t, op, "a tensor");
    OXM_CHECK(t.dim() == rank, ShapeMismatch, op, ": tensor ", i, " has shape ", t.shape(), ", tensor 0 has ",
              first.shape(), " (ranks differ)");
    for (int64_t k = 0; k < rank; ++k)
      OXM_CHECK(k == d || t.shape()[k] == out_shape[k], ShapeMismatch, op, ": tensor ", i, " has shape ", t.shape(),
                " but tensor 0 has ", first.shape(), "; all dims except ", dim, " must match");
    OXM_CHECK(!__builtin_add_overflow(total, t.shape()[d], &total), InvalidArgument, op, ": size overflow");
    any_grad |= detail::needs_tape(t);
  }
  out_shape[d] = total;
  Tensor out = detail::make_empty(out_shape, first.dtype(), first.device(), op);
  {
    NoGradGuard ng;
    int64_t off = 0;
    for (const Tensor& t : tensors) {
      const int64_t n = t.shape()[d];
      if (n > 0 && t.numel() > 0) {
        Tensor dst = out.narrow(d, off, n);
        detail::backend_for(out.device(), op).copy(*t.impl(), *dst.impl());
      }
      off += n;
    }
  }
  if (any_grad) {
    auto* n = new CatNode();
    n->dim = d;
    for (const Tensor& t : tensors) {
      n->sizes.push_back(t.shape()[d]);
      n->next.push_back(detail::edge_of(t));
    }
    detail::set_history(out, n);
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  OXM_CHECK(!tensors.empty(), InvalidArgument, "stack: needs at least one tensor");
  detail::check_defined(tensors[0], "stack");
  const int64_t rank = tensors[0].dim();
  OXM_CHECK(dim >= -rank - 1 && dim <= rank, IndexOutOfBounds, "stack: dim ", dim, " out of range for rank ", rank,
            " inputs (valid: ", -rank - 1, "..", rank, ")");
  const int64_t d = dim < 0 ? dim + rank + 1 : dim;
  std::vector<Tensor> parts;
  parts.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    detail::check_defined(tensors[i], "stack");
    OXM_CHECK(tensors[i].shape() == tensors[0].shape(), ShapeMismatch, "stack: tensor ", i, " has shape ",
              tensors[i].shape(), " but tensor 0 has ", tensors[0].shape());
    parts.push_back(tensors[i].unsqueeze(d));
  }
  return cat(parts, d);
}

Tensor pad(const Tensor& t, int64_t dim, int64_t before, int64_t after, double value) {
  const char* op = "pad";
  detail::check_defined(t, op);
  OXM_CHECK(before >= 0 && after >= 0, InvalidArgument, op, ": padding must be >= 0, got before=", before,
            " after=", after, "; use narrow to crop");
  const int64_t d = normalize_dim(dim, t.dim(), op);
  OXM_CHECK(t.dim() > 0, InvalidArgument, op, ": cannot pad a 0-d tensor");
  Tensor fill = full({1}, value, t.dtype(), t.device());
  Shape sb = t.shape(), sa = t.shape();
  sb[d] = before;
  sa[d] = after;
  std::vector<Tensor> parts;
  if (before) parts.push_back(fill.reshape(Shape(t.dim(), 1)).broadcast_to(sb));
  parts.push_back(t);
  if (after) parts.push_back(fill.reshape(Shape(t.dim(), 1)).broadcast_to(sa));
  return parts.size() == 1 ? t.clone() : cat(parts, d);
}

Tensor one_hot(const Tensor& index, int64_t num_classes, DType dtype) {
  const char* op = "one_hot";
  detail::check_defined(index, op, "index");
  OXM_CHECK(index.dtype() == DType::I64, DTypeMismatch, op, ": index must be i64, got ", index.dtype());
  Tensor host = index.to(Device::cpu()).contiguous();
  const int64_t* p = host.impl()->ptr<int64_t>();
  if (num_classes < 0) {
    OXM_CHECK(num_classes == -1, InvalidArgument, op, ": num_classes must be >= 0 or -1 (infer), got ", num_classes);
    OXM_CHECK(host.numel() > 0, InvalidArgument, op, ": cannot infer num_classes from an empty index");
    const int64_t largest = *std::max_element(p, p + host.numel());
    OXM_CHECK(largest < std::numeric_limits<int64_t>::max(), InvalidArgument, op, ": the index holds ", largest,
              ", too large to infer num_classes from; pass num_classes");
    num_classes = largest + 1;
  }
  Tensor idx = checked_index(host, num_classes, op, -1, Shape{num_classes}, Device::cpu()).host;
  Shape s = index.shape();
  s.push_back(num_classes);
  Tensor out = zeros(s, dtype);
  if (out.numel()) {
    Tensor ones_src = ones(idx.shape(), dtype).unsqueeze(-1);
    out = out.scatter_add(-1, idx.unsqueeze(-1), ones_src);
  }
  return out.to(index.device());
}

}  // namespace oxmera
