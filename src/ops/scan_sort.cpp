// Scans (cumsum, cumprod) and sorting (sort, argsort, topk) along a dim. The per-row work is a fused call
// (ops/fused.hpp: Scan, CumprodBackward, SortIndices) on a contiguous tensor: the device's kernel where it offers
// one (CUDA), else the host loop of the fallback (the CPU's own path, a round trip elsewhere). Sorting computes
// only the indices that way; the values are a gather on the tensor's device, so their gradient is gather's (a
// scatter_add to the selected positions), as torch's.

#include <algorithm>
#include <numeric>
#include <vector>

#include "autograd/node.hpp"
#include "backend/common/scan_math.hpp"
#include "ops/fused.hpp"
#include "ops/ops_internal.hpp"
#include "oxmera/autograd.hpp"

namespace oxmera {
namespace {

using ops::CumprodBackwardCall;
using ops::FusedCall;
using ops::RowsAlongDim;
using ops::run_fused;
using ops::ScanCall;
using ops::SortIndicesCall;

void check_values(const Tensor& x, const char* op) {
  detail::check_defined(x, op);
  OXM_CHECK(x.dtype() != DType::U8, UnsupportedDType, op, ": dtype u8 is not supported (f32, f64, i64)");
}

int64_t dim_of(const Tensor& x, int64_t dim, const char* op) {
  const int64_t d = normalize_dim(dim, x.dim(), op);
  return x.dim() == 0 ? 0 : d;
}

// The rows along dim d of a contiguous tensor of this shape.
RowsAlongDim rows_around(const Shape& s, int64_t d) {
  RowsAlongDim r;
  for (int64_t k = 0; k < static_cast<int64_t>(s.size()); ++k) {
    if (k < d) r.outer *= s[k];
    if (k == d) r.n = s[k];
    if (k > d) r.inner *= s[k];
  }
  return r;
}

// A contiguous copy on x's device (or x itself) that records nothing.
Tensor plain_contiguous(const Tensor& x) { return x.detach().contiguous(); }

// Inclusive scan along dim d (reverse: from the end): the device's kernel or the host loop (ops/fused.hpp).
Tensor scan(const Tensor& x, int64_t d, bool product, bool reverse) {
  const Tensor src = plain_contiguous(x);
  Tensor out = empty(src.shape(), src.dtype(), src.device());
  if (src.numel() == 0) return out;
  FusedCall call = ScanCall{src.impl(), out.impl(), rows_around(src.shape(), d), product, reverse};
  run_fused(call, src.device());
  return out;
}

struct CumsumNode final : detail::Node {
  int64_t dim = 0;
  const char* name() const override { return "cumsum"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* gout, Tensor* gin) override {
    // The reverse prefix sum; under create_graph the same from recorded ops.
    gin[0] = grad_enabled() ? gout[0].flip({dim}).cumsum(dim).flip({dim}) : scan(gout[0], dim, false, true);
  }
};

struct CumprodNode final : detail::Node {
  int64_t dim = 0;
  detail::SavedTensor x;
  bool release_saved() override {
    const bool had = x.defined();
    x.reset();
    return had;
  }
  const char* name() const override { return "cumprod"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* gout, Tensor* gin) override {
    if (grad_enabled()) {
      // create_graph: dx_i = sum_{j >= i} g_j prod_{k <= j, k != i} x_k from recorded ops, exact with zeros in x
      // (the fused kernel's zero-aware form has no derivative of its own). O(n^2) per row along dim: the
      // higher-order path only.
      Tensor xs = x.get(name()).transpose(dim, -1), g = gout[0].transpose(dim, -1);
      const int64_t n = xs.size(-1);
      Tensor on_diag = eye(n, xs.dtype(), xs.device());
      Shape square;  // xs's shape with n inserted before the last dim
      for (int64_t d = 0; d + 1 < xs.dim(); ++d) square.push_back(xs.size(d));
      square.push_back(n);
      square.push_back(n);
      Tensor m = where(on_diag, 1.0, xs.unsqueeze(-2).broadcast_to(square));  // [.., i, k]: x_k, 1 at k == i
      Tensor later = ones({n, n}, xs.dtype(), xs.device()).triu();            // j >= i
      gin[0] = (m.cumprod(-1) * later * g.unsqueeze(-2)).sum({-1}).transpose(dim, -1);
      return;
    }
    const Tensor xs = plain_contiguous(x.get(name())), g = plain_contiguous(gout[0]);
    Tensor gx = empty(xs.shape(), xs.dtype(), xs.device());
    if (xs.numel() > 0) {
      FusedCall call = CumprodBackwardCall{xs.impl(), g.impl(), gx.impl(), rows_around(xs.shape(), dim)};
      run_fused(call, xs.device());
    }
    gin[0] = gx;
  }
};

Tensor scan_op(const Tensor& x, int64_t dim, bool product) {
  const char* op = product ? "cumprod" : "cumsum";
  check_values(x, op);
  const int64_t d = dim_of(x, dim, op);
  Tensor out = scan(x, d, product, false);
  if (is_floating(x.dtype()) && detail::needs_tape(x)) {
    detail::Node* n = nullptr;
    if (product) {
      auto* c = new CumprodNode();
      c->dim = d;
      c->x.save(x, false);
      n = c;
    } else {
      auto* c = new CumsumNode();
      c->dim = d;
      n = c;
    }
    n->next.push_back(detail::edge_of(x));
    detail::set_history(out, n);
  }
  return out;
}

// The i64 indices of a stable sort along d; NaN is the largest value (last ascending, first descending).
Tensor sort_indices(const Tensor& x, int64_t d, bool descending) {
  const Tensor src = plain_contiguous(x);
  Tensor idx = empty(src.shape(), DType::I64, src.device());
  if (src.numel() == 0) return idx;
  FusedCall call = SortIndicesCall{src.impl(), idx.impl(), rows_around(src.shape(), d), descending};
  run_fused(call, src.device());
  return idx;
}

// topk on the CPU: the first k positions of each row in stable sorted order by std::partial_sort, O(n log k)
// rather than a whole sort (ties broken by position, which is what a stable sort's first k are).
Tensor topk_indices_host(const Tensor& x, int64_t d, int64_t k, bool largest) {
  const Tensor src = plain_contiguous(x);
  Shape out_shape = src.shape();
  if (!out_shape.empty()) out_shape[static_cast<size_t>(d)] = k;
  Tensor idx = empty(out_shape, DType::I64);
  const RowsAlongDim r = rows_around(src.shape(), d);
  if (idx.numel() == 0) return idx;
  auto run = [&](auto zero) {
    using T = decltype(zero);
    const T* xp = src.data_ptr<T>();
    int64_t* ip = idx.data_ptr<int64_t>();
    std::vector<int64_t> order(static_cast<size_t>(r.n));
    for (int64_t o = 0; o < r.outer; ++o)
      for (int64_t i = 0; i < r.inner; ++i) {
        const T* row = xp + o * r.n * r.inner + i;
        std::iota(order.begin(), order.end(), int64_t{0});
        std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
          const T va = row[a * r.inner], vb = row[b * r.inner];
          if (detail::sorts_before(va, vb, largest)) return true;
          return !detail::sorts_before(vb, va, largest) && a < b;
        });
        for (int64_t j = 0; j < k; ++j) ip[(o * k + j) * r.inner + i] = order[static_cast<size_t>(j)];
      }
  };
  if (src.dtype() == DType::F32) run(float{});
  if (src.dtype() == DType::F64) run(double{});
  if (src.dtype() == DType::I64) run(int64_t{});
  return idx;
}

Tensor gather_along(const Tensor& x, int64_t d, const Tensor& idx) {
  if (x.dim() == 0) return x.clone();
  return x.gather(d, idx);
}

}  // namespace

Tensor Tensor::cumsum(int64_t dim) const { return scan_op(*this, dim, false); }
Tensor Tensor::cumprod(int64_t dim) const { return scan_op(*this, dim, true); }

std::tuple<Tensor, Tensor> Tensor::sort(int64_t dim, bool descending) const {
  check_values(*this, "sort");
  const int64_t d = dim_of(*this, dim, "sort");
  Tensor idx = sort_indices(*this, d, descending);
  return {gather_along(*this, d, idx), idx};
}

Tensor Tensor::argsort(int64_t dim, bool descending) const {
  check_values(*this, "argsort");
  return sort_indices(*this, dim_of(*this, dim, "argsort"), descending);
}

std::tuple<Tensor, Tensor> Tensor::topk(int64_t k, int64_t dim, bool largest, bool sorted) const {
  check_values(*this, "topk");
  const int64_t d = dim_of(*this, dim, "topk");
  const int64_t n = this->dim() == 0 ? 1 : size(d);
  OXM_CHECK(k >= 0 && k <= n, InvalidArgument, "topk: k = ", k, " is out of range for dim ", dim, " of shape ", shape(),
            " (0..", n, ")");
  OXM_CHECK(this->dim() > 0 || k == 1, InvalidArgument, "topk: a 0-d tensor has one element; k must be 1, got ", k);
  static_cast<void>(sorted);  // always sorted: a valid answer for sorted = false too
  Tensor idx;
  if (device().is_cpu() && this->dim() > 0) {
    idx = topk_indices_host(*this, d, k, largest);
  } else {
    idx = sort_indices(*this, d, largest);
    if (this->dim() > 0) idx = idx.narrow(d, 0, k).contiguous();
  }
  return {gather_along(*this, d, idx), idx};
}

}  // namespace oxmera
