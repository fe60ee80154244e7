// libtorch-style indexing: Tensor::index({Slice(...), 2, None, Ellipsis, idx}) and index_put_. Basic indices
// (integers, slices, None, Ellipsis) become views; tensor indices (advanced indexing) become one index_select on
// the indexed dims flattened into one, so the gradient is index_select's (an index_add) and every backend runs it.
#include <numeric>
#include <span>

#include "autograd/node.hpp"
#include "backend/backend.hpp"
#include "ops/ops_internal.hpp"
#include "oxmera/autograd.hpp"

namespace oxmera {

using indexing::TensorIndex;
using Kind = TensorIndex::Kind;

namespace {

// What the basic indices leave: a view of self, and the advanced (tensor) indices with the view dim each indexes.
struct Indexed {
  Tensor view;
  std::vector<int64_t> dims;   // increasing
  std::vector<Tensor> tensor;  // I64, same device as self
};

// True when a float tensor holds only 0 and 1: a comparison's result, used as a mask (x.index({x > 0})).
bool is_zero_one(const Tensor& t) {
  if (t.numel() == 0) return true;
  NoGradGuard ng;
  Tensor bad = t.ne(0.0) * t.ne(1.0);
  return bad.sum().to(Device::cpu()).to(DType::F64).item<double>() == 0.0;
}

// The positions where a k-dim mask is non-zero, as k I64 index tensors of length nnz (row-major order).
std::vector<Tensor> nonzero_indices(const Tensor& mask, Device device) {
  Tensor m = mask.to(Device::cpu()).to(DType::F64).contiguous();
  const std::vector<double> v = m.to_vector<double>();
  const int64_t k = m.dim();
  std::vector<std::vector<int64_t>> coords(static_cast<size_t>(k));
  Shape shape = m.shape();
  std::vector<int64_t> pos(static_cast<size_t>(k), 0);
  for (size_t flat = 0; flat < v.size(); ++flat) {
    if (v[flat] != 0.0)
      for (int64_t d = 0; d < k; ++d) coords[d].push_back(pos[d]);
    for (int64_t d = k - 1; d >= 0; --d) {  // advance the row-major position
      if (++pos[d] < shape[d]) break;
      pos[d] = 0;
    }
  }
  std::vector<Tensor> out;
  for (auto& c : coords) {
    const int64_t n = static_cast<int64_t>(c.size());
    out.push_back(from_vector(c, {n}).to(device));
  }
  return out;
}

Indexed apply_basic(const Tensor& self, std::span<const TensorIndex> indices, const char* op) {
  detail::check_defined(self, op);
  // Dims each index consumes: integers, slices and I64 tensors one, masks their rank, None none.
  int64_t consumed = 0, ellipses = 0;
  for (const auto& ix : indices) {
    if (ix.kind() == Kind::Integer || ix.kind() == Kind::Slice) ++consumed;
    if (ix.kind() == Kind::Ellipsis) ++ellipses;
    if (ix.kind() == Kind::Tensor) {
      const Tensor& t = ix.tensor();
      detail::check_defined(t, op, "index tensor");
      consumed += t.dtype() == DType::I64 ? 1 : t.dim();
    }
  }
  OXM_CHECK(ellipses <= 1, InvalidArgument, op, ": at most one Ellipsis may appear, got ", ellipses);
  OXM_CHECK(consumed <= self.dim(), IndexOutOfBounds, op, ": ", consumed, " dims indexed but the tensor has shape ",
            self.shape(), " (", self.dim(), " dims)");
  Indexed r{self, {}, {}};
  int64_t d = 0;  // the view's dim the next index applies to
  for (size_t i = 0; i < indices.size(); ++i) {
    const TensorIndex& ix = indices[i];
    Tensor& v = r.view;
    switch (ix.kind()) {
      case Kind::Integer: {
        const int64_t size = v.size(d), at = ix.integer();
        OXM_CHECK(at >= -size && at < size, IndexOutOfBounds, op, ": index ", at, " (position ", i,
                  ") is out of range for a dim of size ", size, " (tensor shape ", self.shape(), ")");
        v = v.select(d, at);
        break;
      }
      case Kind::Slice: {
        const auto& s = ix.slice();
        OXM_CHECK(s.step >= 1, InvalidArgument, op, ": Slice step must be >= 1, got ", s.step, " (position ", i,
                  "); use flip for reversed order");
        const int64_t size = v.size(d);
        // Python's rule: negative ends count from the back, then ends clamp to [0, size].
        auto clampend = [size](std::optional<int64_t> e, int64_t dflt) {
          if (!e) return dflt;
          int64_t x = *e < 0 ? *e + size : *e;
          return std::clamp<int64_t>(x, 0, size);
        };
        const int64_t start = clampend(s.start, 0), stop = std::max(start, clampend(s.stop, size));
        v = v.slice(d, start, stop, s.step);
        ++d;
        break;
      }
      case Kind::None:
        v = v.unsqueeze(d);
        ++d;
        break;
      case Kind::Ellipsis:
        d += self.dim() - consumed;
        break;
      case Kind::Tensor: {
        const Tensor& t = ix.tensor();
        OXM_CHECK(t.device() == self.device(), DeviceMismatch, op, ": index tensor is on ", t.device(),
                  " but the tensor is on ", self.device());
        if (t.dtype() == DType::I64) {
          r.dims.push_back(d);
          r.tensor.push_back(t.detach());
          ++d;
          break;
        }
        OXM_CHECK(t.dtype() == DType::U8 || (is_floating(t.dtype()) && is_zero_one(t)), DTypeMismatch, op,
                  ": index tensor at position ", i, " has dtype ", t.dtype(),
                  "; index with I64 indices or a mask (U8, or a comparison's 0/1 result)");
        const int64_t k = t.dim();
        OXM_CHECK(k > 0, InvalidArgument, op, ": a 0-d mask at position ", i, " is not supported; use where()");
        for (int64_t j = 0; j < k; ++j)
          OXM_CHECK(t.size(j) == v.size(d + j), ShapeMismatch, op, ": mask of shape ", t.shape(), " at position ", i,
                    " does not match the indexed dims of shape ", v.shape(), " starting at dim ", d);
        for (Tensor& idx : nonzero_indices(t, self.device())) {
          r.dims.push_back(d++);
          r.tensor.push_back(idx);
        }
        break;
      }
    }
  }
  return r;
}

// The advanced part, set up for one index_select: `flat` is the view with the indexed dims moved to the front
// and merged into one; `linear` the combined I64 index (shape B, the index tensors' broadcast shape).
struct Advanced {
  Tensor permuted;    // the view, indexed dims first (a view of self)
  Shape merged;       // {N, rest...}: the shape `permuted` is reshaped to
  Tensor linear;      // shape B
  Shape batch;        // B
  Shape rest;         // the dims not indexed, in order
  int64_t place = 0;  // where B goes in the result (0 unless the indexed dims were adjacent)
};

Advanced plan_advanced(const Indexed& ix, const char* op) {
  const Tensor& v = ix.view;
  const int64_t rank = v.dim();
  Advanced a;
  Shape batch;
  for (const Tensor& t : ix.tensor) batch = broadcast_shapes(batch, t.shape(), op);
  a.batch = batch;
  Dims order;
  for (int64_t d : ix.dims) order.push_back(d);
  int64_t n = 1;
  for (int64_t d : ix.dims) n *= v.size(d);
  a.merged.push_back(n);
  for (int64_t d = 0; d < rank; ++d) {
    if (std::find(ix.dims.begin(), ix.dims.end(), d) != ix.dims.end()) continue;
    order.push_back(d);
    a.rest.push_back(v.size(d));
    a.merged.push_back(v.size(d));
  }
  a.permuted = v.permute(order);
  bool adjacent = true;
  for (size_t k = 1; k < ix.dims.size(); ++k) adjacent = adjacent && ix.dims[k] == ix.dims[k - 1] + 1;
  a.place = adjacent ? ix.dims[0] : 0;
  // linear = sum_k wrap(idx_k) * (product of the sizes of the later indexed dims); integer, no history.
  NoGradGuard ng;
  Tensor linear;
  int64_t scale = 1;
  for (size_t k = ix.dims.size(); k-- > 0;) {
    const int64_t size = v.size(ix.dims[k]);
    Tensor t = ix.tensor[k];
    if (t.numel()) {
      const int64_t lo = t.min().to(Device::cpu()).item<int64_t>(), hi = t.max().to(Device::cpu()).item<int64_t>();
      OXM_CHECK(lo >= -size && hi < size, IndexOutOfBounds, op, ": index ", lo < -size ? lo : hi,
                " is out of range for a dim of size ", size, " (indexed dim ", ix.dims[k], " of shape ", v.shape(),
                ")");
      if (lo < 0) t = t + t.lt(0.0) * static_cast<double>(size);
    }
    Tensor term = scale == 1 ? t : t * static_cast<double>(scale);
    linear = linear.defined() ? linear + term : term;
    scale *= size;
  }
  a.linear = linear.broadcast_to(batch);
  return a;
}

// t with its dims [from, from + count) moved to start at dim `to` of the result (the other dims keep their order):
// index() puts the broadcast index dims where torch does, index_put_ takes its values back to the front.
Tensor move_dims(const Tensor& t, int64_t from, int64_t count, int64_t to) {
  if (from == to) return t;
  Dims rest, order;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (d < from || d >= from + count) rest.push_back(d);
  for (int64_t i = 0; i < to; ++i) order.push_back(rest[i]);
  for (int64_t k = 0; k < count; ++k) order.push_back(from + k);
  for (size_t i = static_cast<size_t>(to); i < rest.size(); ++i) order.push_back(rest[i]);
  return t.permute(order);
}

Shape concat(const Shape& a, const Shape& b) {
  Shape s = a;
  for (int64_t x : b) s.push_back(x);
  return s;
}

Tensor index_impl(const Tensor& self, std::span<const TensorIndex> indices) {
  Indexed ix = apply_basic(self, indices, "index");
  if (ix.dims.empty()) return ix.view;
  Advanced a = plan_advanced(ix, "index");
  Tensor flat = a.permuted.reshape(a.merged);
  Tensor picked = flat.index_select(0, a.linear.reshape({-1}));
  return move_dims(picked.reshape(concat(a.batch, a.rest)), 0, static_cast<int64_t>(a.batch.size()), a.place);
}

Tensor& index_put_impl(Tensor& self, std::span<const TensorIndex> indices, const Tensor& values_in, bool accumulate) {
  const char* op = "index_put_";
  detail::check_defined(values_in, op, "values");
  OXM_CHECK(!(grad_enabled() && values_in.requires_grad()), NotImplemented, op,
            ": the values require grad, but in-place ops are not recorded by autograd; build the result out of place "
            "(where, index_add, masked_fill) or write under NoGradGuard");
  OXM_CHECK(values_in.device() == self.device(), DeviceMismatch, op, ": values are on ", values_in.device(),
            " but the tensor is on ", self.device());
  OXM_CHECK(!(grad_enabled() && self.requires_grad()), InvalidArgument, op,
            ": in-place update of a tensor that requires grad while grad mode is on would corrupt its gradient; "
            "wrap the update in NoGradGuard or build the result out of place");
  NoGradGuard ng;
  Tensor values = values_in.to(self.dtype());
  Indexed ix = apply_basic(self, indices, op);
  if (ix.dims.empty()) {
    if (accumulate)
      ix.view.add_(values);
    else
      ix.view.copy_(values);
    return self;
  }
  Advanced a = plan_advanced(ix, op);
  Shape result_shape;  // what index() returns: rest[:place], batch, rest[place:]
  for (int64_t d = 0; d < a.place; ++d) result_shape.push_back(a.rest[d]);
  for (int64_t x : a.batch) result_shape.push_back(x);
  for (size_t d = static_cast<size_t>(a.place); d < a.rest.size(); ++d) result_shape.push_back(a.rest[d]);
  OXM_CHECK(broadcast_shapes(result_shape, values.shape(), op) == result_shape, ShapeMismatch, op, ": values of shape ",
            values.shape(), " do not broadcast to the indexed shape ", result_shape);
  const int64_t k = a.batch.product();
  if (k == 0 || a.merged[0] == 0) return self;
  // values as rows [K, rest...] in the order of the linear index
  Tensor rows = move_dims(values.broadcast_to(result_shape), a.place, static_cast<int64_t>(a.batch.size()), 0)
                    .contiguous()
                    .reshape(concat({k}, a.rest));
  Tensor lin = a.linear.reshape({-1});
  Tensor flat = a.permuted.contiguous().reshape(a.merged);
  Tensor updated;
  if (accumulate) {
    updated = flat.index_add(0, lin, rows);
  } else {
    // Last write wins: for each of the N rows, which value row (if any) lands there.
    const std::vector<int64_t> l = lin.to(Device::cpu()).contiguous().to_vector<int64_t>();
    const int64_t n = a.merged[0];
    std::vector<int64_t> source(static_cast<size_t>(n), 0);
    std::vector<uint8_t> hit(static_cast<size_t>(n), 0);
    for (int64_t j = 0; j < k; ++j) {
      source[l[j]] = j;
      hit[l[j]] = 1;
    }
    Shape mask_shape(a.merged.size(), 1);
    mask_shape[0] = n;
    Tensor mask = from_vector(hit, mask_shape).to(self.device());
    Tensor src = from_vector(source, {n}).to(self.device());
    updated = where(mask, rows.index_select(0, src), flat);
  }
  a.permuted.copy_(updated.reshape(a.permuted.shape()));
  return self;
}

}  // namespace

Tensor Tensor::index(std::initializer_list<TensorIndex> indices) const {
  return index_impl(*this, std::span<const TensorIndex>(indices.begin(), indices.size()));
}
Tensor Tensor::index(const std::vector<TensorIndex>& indices) const { return index_impl(*this, indices); }
Tensor& Tensor::index_put_(std::initializer_list<TensorIndex> indices, const Tensor& values, bool accumulate) {
  return index_put_impl(*this, std::span<const TensorIndex>(indices.begin(), indices.size()), values, accumulate);
}
Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, const Tensor& values, bool accumulate) {
  return index_put_impl(*this, indices, values, accumulate);
}
Tensor& Tensor::index_put_(std::initializer_list<TensorIndex> indices, double value) {
  detail::check_defined(*this, "index_put_");
  return index_put_impl(*this, std::span<const TensorIndex>(indices.begin(), indices.size()),
                        ops::scalar_on_device_of(value, *this, "index_put_"), false);
}
Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, double value) {
  detail::check_defined(*this, "index_put_");
  return index_put_impl(*this, indices, ops::scalar_on_device_of(value, *this, "index_put_"), false);
}

}  // namespace oxmera
