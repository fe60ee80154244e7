// matmul at any rank >= 2 with NumPy batch broadcasting; broadcast batches are stride-0 views, never copies.
#include <algorithm>
#include <climits>

#include "autograd/node.hpp"
#include "backend/backend.hpp"
#include "ops/fused.hpp"
#include "ops/ops_internal.hpp"
#include "oxmera/autograd.hpp"

namespace oxmera {
namespace {

// Without create_graph, adds lhs [m, k] x rhs [k, n] into the gradient buffer of edge e with one accumulating
// GEMM, when that buffer already holds a dense [m, n] matrix (row- or column-major) that nothing else references:
// a weight used at every step of a recurrence (W_hh) gets its gradient summed inside the GEMMs, not by one add
// pass per step. False: nothing was added (the caller returns the product as usual).
bool accumulate_product_into_buffer(const detail::Edge& e, const Tensor& lhs, const Tensor& rhs) {
  if (grad_enabled() || !e.node || lhs.dim() != 2 || rhs.dim() != 2) return false;
  detail::Node& c = *e.node;
  if (e.output_nr >= c.grad_buffer.size() || !c.grad_buffer[e.output_nr].defined()) return false;
  const Tensor& slot = c.grad_buffer[e.output_nr];
  const detail::TensorImpl& S = *slot.impl();
  const int64_t m = lhs.size(0), n = rhs.size(1);
  if (S.refcount.load() != 1 || S.storage->refcount.load() != 1 || S.grad_fn || S.shape != Shape{m, n} ||
      S.dtype != lhs.dtype() || S.device() != lhs.device() || m <= 1 || n <= 1 || lhs.size(1) == 0)
    return false;
  const bool row_major = S.strides[1] == 1 && S.strides[0] == n;
  const bool col_major = S.strides[0] == 1 && S.strides[1] == m;
  if (!row_major && !col_major) return false;
  // out (row-major, the buffer's memory) += x w^T: the product itself, or its transpose rhs^T lhs^T.
  const Tensor out = row_major ? slot : slot.t();
  const Tensor x = ops::gemm_compatible(row_major ? lhs : rhs.t());
  const Tensor w = ops::gemm_compatible(row_major ? rhs.t() : lhs);
  ops::FusedCall call = ops::LinearCall{x.impl(), w.impl(), nullptr, out.impl(), true};
  ops::run_fused(call, S.device());
  return true;
}

struct MatmulNode final : detail::Node {
  detail::SavedTensor a, b;
  Shape a_shape, b_shape;
  bool release_saved() override {
    const bool had = a.defined() || b.defined();
    a.reset();
    b.reset();
    return had;
  }
  const char* name() const override { return "matmul"; }
  bool differentiable_backward() const override { return true; }
  bool a_column_major = false, b_column_major = false;
  void apply(Tensor* gout, Tensor* gin) override {
    const Tensor& g = gout[0];
    // A column-major operand (a transposed view, as Linear's weight.t()) gets its gradient as the transpose of
    // a row-major product: same GEMM cost, and the leaf behind the view receives a contiguous gradient (no
    // copy when it is accumulated).
    const bool plain = a_shape.size() == 2 && b_shape.size() == 2;  // no broadcast batch to sum over
    if (needs_grad(0)) {
      Tensor B = b.get("matmul");
      if (!(plain && accumulate_product_into_buffer(next[0], g, B.t())))
        gin[0] = a_column_major ? B.matmul(g.t()).t() : detail::sum_to(g.matmul(B.t()), a_shape);
    }
    if (needs_grad(1)) {
      Tensor A = a.get("matmul");
      if (!(plain && accumulate_product_into_buffer(next[1], A.t(), g)))
        gin[1] = b_column_major ? g.t().matmul(A).t() : detail::sum_to(A.t().matmul(g), b_shape);
    }
  }
  // A 2-d operand of a 2-d product stored column by column.
  static bool column_major_matrix(const detail::TensorImpl& t, const detail::TensorImpl& other) {
    return t.shape.size() == 2 && other.shape.size() == 2 && t.shape[0] > 1 && t.shape[1] > 1 && t.strides[0] == 1 &&
           t.strides[1] == t.shape[0];
  }
};

}  // namespace

// BLAS needs one of the two matrix strides to be 1; anything else is copied (never the broadcast batch).
Tensor ops::gemm_compatible(const Tensor& t) {
  const auto& ti = *t.impl();
  const size_t r = ti.shape.size();
  const int64_t rows = ti.shape[r - 2], cols = ti.shape[r - 1];
  const int64_t rs = ti.strides[r - 2], cs = ti.strides[r - 1];
  bool row_major = (cs == 1 || cols == 1) && (rs >= cols || rows == 1);
  bool col_major = (rs == 1 || rows == 1) && (cs >= rows || cols == 1);
  // BLAS leading dimensions are 32-bit: a view whose row (or column) stride exceeds that is copied.
  const int64_t ld = row_major ? (rows == 1 ? cols : std::max(rs, cols)) : (cols == 1 ? rows : std::max(cs, rows));
  if ((row_major || col_major) && ld <= INT_MAX) return t;
  NoGradGuard ng;
  return t.contiguous();
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  detail::check_defined(a, "matmul", "first operand");
  detail::check_defined(b, "matmul", "second operand");
  OXM_CHECK(a.dtype() == b.dtype(), DTypeMismatch, "matmul: operands have dtypes ", a.dtype(), " and ", b.dtype(),
            " (shapes ", a.shape(), " and ", b.shape(), "); cast one with .to(DType)");
  OXM_CHECK(a.device() == b.device(), DeviceMismatch, "matmul: operands are on ", a.device(), " and ", b.device());
  const auto &ai = *a.impl(), &bi = *b.impl();
  const size_t ra = ai.shape.size(), rb = bi.shape.size();
  OXM_CHECK(ra >= 1 && rb >= 1, InvalidArgument, "matmul: operands need rank >= 1, got shapes ", ai.shape, " and ",
            bi.shape, "; multiply by a 0-d tensor with * instead");
  if (ra == 1 || rb == 1) {
    // torch's vector forms: a 1-d left operand is a [1, k] row, a 1-d right operand a [k, 1] column, and
    // the added dim is removed from the result (vector . vector is a 0-d dot product).
    const int64_t ka = ai.shape[ra - 1], kb = rb == 1 ? bi.shape[0] : bi.shape[rb - 2];
    OXM_CHECK(ka == kb, ShapeMismatch, "matmul: inner dimensions differ: ", ai.shape, " x ", bi.shape, " (", ka, " vs ",
              kb, ")");
    Tensor r = matmul(ra == 1 ? a.unsqueeze(0) : a, rb == 1 ? b.unsqueeze(-1) : b);
    if (rb == 1) r = r.squeeze(-1);
    if (ra == 1) r = r.squeeze(rb == 1 ? -1 : -2);
    return r;
  }
  OXM_CHECK(is_floating(ai.dtype), UnsupportedDType, "matmul: dtype ", ai.dtype, " is not supported (f32, f64)");
  const int64_t m = ai.shape[ra - 2], k = ai.shape[ra - 1], k2 = bi.shape[rb - 2], n = bi.shape[rb - 1];
  OXM_CHECK(k == k2, ShapeMismatch, "matmul: inner dimensions differ: ", ai.shape, " x ", bi.shape, " (", k, " vs ", k2,
            ")");
  if (ra >= 3 && rb == 2) {
    // [..., m, k] x [k, n] is one [(...) m, k] x [k, n] product, as torch folds it: one GEMM instead of one per
    // batch, and the backward's b gradient is one GEMM too (not a batched product and a sum over the batch).
    Shape out_shape = ai.shape;
    out_shape[ra - 1] = n;
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < ra; ++d) rows *= ai.shape[d];
    return matmul(a.reshape({rows, k}), b).view(out_shape);
  }
  OXM_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX, NotImplemented, "matmul: matrix dims above 2^31-1 (",
            ai.shape, " x ", bi.shape, ") are not supported");
  Shape batch = broadcast_shapes(Shape(ai.shape.data(), ra - 2), Shape(bi.shape.data(), rb - 2), "matmul");
  Shape out_shape = batch, a_full = batch, b_full = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  a_full.push_back(m);
  a_full.push_back(k);
  b_full.push_back(k);
  b_full.push_back(n);
  Tensor out = detail::make_empty(out_shape, ai.dtype, ai.device(), "matmul");
  Tensor av = ops::broadcast_view(ops::gemm_compatible(a), a_full);
  Tensor bv = ops::broadcast_view(ops::gemm_compatible(b), b_full);
  if (out.numel() > 0) {
    auto& be = detail::backend_for(ai.device(), "matmul");
    if (k == 1) {
      // An outer product: out[..., i, j] = a[..., i, 0] * b[..., 0, j], exactly what GEMM computes.
      Tensor ab = ops::broadcast_view(av, out_shape), bb = ops::broadcast_view(bv, out_shape);
      be.binary(ops::BinaryOp::Mul, *ab.impl(), *bb.impl(), *out.impl());
    } else {
      be.matmul(*av.impl(), *bv.impl(), *out.impl());
    }
  }
  if (detail::needs_tape(a, b)) {
    auto* node = new MatmulNode();
    node->next.push_back(detail::edge_of(a));
    node->next.push_back(detail::edge_of(b));
    node->a_shape = ai.shape;
    node->b_shape = bi.shape;
    node->a_column_major = MatmulNode::column_major_matrix(ai, bi);
    node->b_column_major = MatmulNode::column_major_matrix(bi, ai);
    if (node->needs_grad(1)) node->a.save(a, false);
    if (node->needs_grad(0)) node->b.save(b, false);
    detail::set_history(out, node);
  }
  return out;
}

Tensor Tensor::matmul(const Tensor& o) const { return oxmera::matmul(*this, o); }

}  // namespace oxmera
