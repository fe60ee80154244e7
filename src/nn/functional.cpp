// nn functional ops. unfold is the fused op Im2col with its own backward (Col2im); max_pool2d the fused MaxPool2d
// with its own backward (a scatter by the saved indices); linear and layer_norm fused ops too; everything else is
// composed from differentiable tensor ops.
#include "oxmera/nn/functional.hpp"

#include <climits>
#include <cmath>
#include <limits>
#include <memory>

#include "autograd/node.hpp"
#include "nn/linear_gelu.hpp"
#include "ops/fused.hpp"
#include "ops/graph_capture.hpp"
#include "ops/ops_internal.hpp"
#include "oxmera/autograd.hpp"

namespace oxmera::nn::functional {
namespace {

Tensor unfold_impl(const Tensor& x, const detail::ConvGeometry& g, double pad_value, const char* op,
                   bool ones_row = false);

// The backward of unfold's backward (col2im) is unfold again: what create_graph records on col2im's result. The
// ones row (conv2d's bias column) is a constant: its gradient is zero.
struct FoldNode final : detail::Node {
  detail::ConvGeometry g;
  bool ones_row = false;
  const char* name() const override { return "unfold_backward"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* gout, Tensor* gin) override {
    Tensor cols = unfold_impl(gout[0], g, 0.0, "unfold");
    if (ones_row) cols = cat({cols, zeros(Shape{cols.size(0), 1, cols.size(2)}, cols.dtype(), cols.device())}, 1);
    gin[0] = cols;
  }
};

struct UnfoldNode final : detail::Node {
  detail::ConvGeometry g;
  Shape in_shape;
  bool ones_row = false;
  const char* name() const override { return "unfold"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* gout, Tensor* gin) override {
    Tensor gx, gc;
    {
      NoGradGuard ng;
      gx = detail::make_empty(in_shape, gout[0].dtype(), gout[0].device(), "unfold backward");
      gc = gout[0].contiguous();
    }
    // col2im zeroes each plane before its sums (no separate fill pass) and skips the ones row.
    ops::FusedCall call = ops::Col2imCall{gc.impl(), gx.impl(), g, ones_row, /*zero_first=*/true};
    ops::run_fused(call, gx.device());
    if (detail::needs_tape(gout[0])) {  // create_graph
      auto* n = new FoldNode();
      n->g = g;
      n->ones_row = ones_row;
      n->next.push_back(detail::edge_of(gout[0]));
      detail::set_history(gx, n);
    }
    gin[0] = gx;
  }
};

void check_pair(Pair p, int64_t min, const char* op, const char* what) {
  OXM_CHECK(p[0] >= min && p[1] >= min, InvalidArgument, op, ": ", what, " must be >= ", min, ", got [", p[0], ", ",
            p[1], "]");
}

detail::ConvGeometry geometry(const Tensor& x, Pair k, Pair d, Pair p, Pair s, const char* op) {
  check_pair(k, 1, op, "kernel size");
  check_pair(d, 1, op, "dilation");
  check_pair(p, 0, op, "padding");
  check_pair(s, 1, op, "stride");
  const int64_t H = x.shape()[2], W = x.shape()[3];
  detail::ConvGeometry g{k[0], k[1], s[0], s[1], p[0], p[1], d[0], d[1], 0, 0};
  // Every step is overflow-checked: sizes near the int64 extremes must give this error, not a wrapped geometry.
  auto extent = [&](int64_t n, int i, int64_t& e) {
    int64_t span = 0, padded = 0;  // the dilated kernel's span minus one, and the padded input
    const bool overflow = __builtin_mul_overflow(d[i], k[i] - 1, &span) ||
                          __builtin_mul_overflow(p[i], int64_t{2}, &padded) ||
                          __builtin_add_overflow(padded, n, &padded);
    OXM_CHECK(!overflow, InvalidArgument, op, ": input ", x.shape(), " with kernel [", k[0], ", ", k[1],
              "], dilation [", d[0], ", ", d[1], "] and padding [", p[0], ", ", p[1],
              "] overflows a 64-bit extent; use smaller values");
    e = padded - span - 1;
  };
  int64_t eh = 0, ew = 0;
  extent(H, 0, eh);
  extent(W, 1, ew);
  OXM_CHECK(eh >= 0 && ew >= 0, InvalidArgument, op, ": input ", x.shape(), " is smaller than the kernel [", k[0], ", ",
            k[1], "] dilated by [", d[0], ", ", d[1], "] after padding [", p[0], ", ", p[1], "]");
  g.oh = eh / s[0] + 1;
  g.ow = ew / s[1] + 1;
  int64_t cols = 0, window = 0;
  OXM_CHECK(!__builtin_mul_overflow(g.oh, g.ow, &cols) && !__builtin_mul_overflow(k[0], k[1], &window) &&
                !__builtin_mul_overflow(window, x.shape()[1], &window),
            InvalidArgument, op, ": input ", x.shape(), " with kernel [", k[0], ", ", k[1], "] gives [", g.oh, ", ",
            g.ow, "] windows of ", k[0], "x", k[1], " values, which overflows a 64-bit size; use smaller values");
  return g;
}

void check_4d(const Tensor& x, const char* op) {
  detail::check_defined(x, op);
  OXM_CHECK(x.dim() == 4, ShapeMismatch, op, ": expected a 4-d input [N, C, H, W], got shape ", x.shape());
  OXM_CHECK(is_floating(x.dtype()), UnsupportedDType, op, ": dtype ", x.dtype(), " is not supported (f32, f64)");
}

// ones_row: one more row of ones per image (Im2colCall), conv2d's bias column.
Tensor unfold_impl(const Tensor& x, const detail::ConvGeometry& g, double pad_value, const char* op, bool ones_row) {
  const int64_t N = x.shape()[0], C = x.shape()[1];
  Shape out_shape{N, C * g.kh * g.kw + (ones_row ? 1 : 0), g.oh * g.ow};
  Tensor cols = detail::make_empty(out_shape, x.dtype(), x.device(), op);
  if (cols.numel()) {
    ops::FusedCall call = ops::Im2colCall{x.impl(), cols.impl(), g, pad_value, ones_row};
    ops::run_fused(call, x.device());
  }
  if (detail::needs_tape(x)) {
    auto* n = new UnfoldNode();
    n->g = g;
    n->ones_row = ones_row;
    n->in_shape = x.shape();
    n->next.push_back(detail::edge_of(x));
    detail::set_history(cols, n);
  }
  return cols;
}

Pair default_stride(Pair stride, Pair kernel) { return stride[0] == 0 && stride[1] == 0 ? kernel : stride; }

}  // namespace

Tensor unfold(const Tensor& x, Pair kernel, Pair dilation, Pair padding, Pair stride) {
  check_4d(x, "unfold");
  return unfold_impl(x, geometry(x, kernel, dilation, padding, stride, "unfold"), 0.0, "unfold");
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Pair stride, Pair padding, Pair dilation,
              int64_t groups) {
  const char* op = "conv2d";
  check_4d(x, op);
  detail::check_defined(weight, op, "weight");
  OXM_CHECK(weight.dim() == 4, ShapeMismatch, op, ": weight must be [out, in/groups, kh, kw], got ", weight.shape());
  OXM_CHECK(weight.dtype() == x.dtype(), DTypeMismatch, op, ": input is ", x.dtype(), " but weight is ",
            weight.dtype());
  OXM_CHECK(groups >= 1, InvalidArgument, op, ": groups must be >= 1, got ", groups);
  const int64_t N = x.shape()[0], C = x.shape()[1], O = weight.shape()[0];
  OXM_CHECK(C % groups == 0 && O % groups == 0, InvalidArgument, op, ": in_channels ", C, " and out_channels ", O,
            " must both be divisible by groups ", groups);
  OXM_CHECK(weight.shape()[1] * groups == C, ShapeMismatch, op, ": input has ", C, " channels but weight ",
            weight.shape(), " with groups ", groups, " expects ", weight.shape()[1] * groups);
  auto g = geometry(x, {weight.shape()[2], weight.shape()[3]}, dilation, padding, stride, op);
  const int64_t K = (C / groups) * g.kh * g.kw, L = g.oh * g.ow;
  if (bias.defined()) {
    OXM_CHECK(bias.shape() == Shape({O}), ShapeMismatch, op, ": bias must be [", O, "], got ", bias.shape());
    OXM_CHECK(bias.dtype() == x.dtype(), DTypeMismatch, op, ": input is ", x.dtype(), " but bias is ", bias.dtype());
    OXM_CHECK(bias.device() == x.device() && weight.device() == x.device(), DeviceMismatch, op, ": input on ",
              x.device(), ", weight on ", weight.device(), ", bias on ", bias.device(), "; move them to one device");
    // The bias as one more weight column over a row of ones in the columns: added inside the GEMM, and its
    // gradient computed inside the weight's (no add pass forward, no reduction backward). Where the backend's
    // im2col offers the ones row (the CPU); elsewhere the bias is added after the product.
    // (supports() of an Im2colCall looks at x and the options only: the probe has no columns yet.)
    ops::FusedCall probe = ops::Im2colCall{x.impl(), nullptr, g, 0.0, /*ones_row=*/true};
    if (groups == 1 && ops::fused_supported(probe, x.device())) {
      Tensor cols = unfold_impl(x, g, 0.0, op, /*ones_row=*/true);  // [N, K + 1, L]
      Tensor w = cat({weight.reshape({O, K}), bias.reshape({O, 1})}, 1);
      return w.matmul(cols).reshape({N, O, g.oh, g.ow});
    }
  }
  Tensor cols = unfold_impl(x, g, 0.0, op).view({N, groups, K, L});
  Tensor w = weight.reshape({groups, O / groups, K});
  Tensor out = w.matmul(cols).reshape({N, O, g.oh, g.ow});  // [G, O/G, K] x [N, G, K, L]: no copy of w
  if (bias.defined()) out = out + bias.reshape({1, O, 1, 1});
  return out;
}

namespace {

// g [N, C, oh, ow] scattered into zeros [N, C, H, W] at the saved plane indices, from recorded ops (scatter_add's
// gradient is a gather by the same indices): the backward under create_graph. `empty_window`: some index is the
// -1 of a window with no in-image tap, which gets position 0 and a zero gradient.
Tensor scatter_by_indices(const Tensor& g, const Tensor& indices, const Shape& in_shape, bool empty_window) {
  const int64_t N = in_shape[0], C = in_shape[1], L = indices.size(2) * indices.size(3);
  Tensor idx = indices.reshape({N, C, L}), gv = g.reshape({N, C, L});
  if (empty_window) {
    const Tensor inside = idx.ge(scalar(0, DType::I64)).to(DType::U8);
    gv = where(inside, gv, zeros_like(gv));
    idx = maximum(idx, scalar(0, DType::I64));
  }
  return zeros(Shape{N, C, in_shape[2] * in_shape[3]}, g.dtype(), g.device()).scatter_add(2, idx, gv).view(in_shape);
}

// max_pool2d's backward: the fused scatter by the forward's indices (ops/fused.hpp, MaxPool2dBackwardCall);
// under create_graph the same scatter from recorded ops. The indices are the tensor max_pool2d_with_indices
// returns: saved with its version, so writing it in place before backward is an error, as in torch.
struct MaxPool2dNode final : detail::Node {
  detail::SavedTensor indices;
  Shape in_shape;
  detail::ConvGeometry geometry;
  bool empty_window = false;
  bool release_saved() override {
    const bool had = indices.defined();
    indices.reset();
    return had;
  }
  const char* name() const override { return "max_pool2d"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* gout, Tensor* gin) override {
    const Tensor idx = indices.get(name());
    if (grad_enabled()) {
      gin[0] = scatter_by_indices(gout[0], idx, in_shape, empty_window);
      return;
    }
    const Tensor g = gout[0].contiguous();
    if (g.numel() == 0) {
      gin[0] = zeros(in_shape, g.dtype(), g.device());
      return;
    }
    // The kernel zeroes each plane before its scatter (no separate fill pass over the gradient).
    Tensor gx = detail::make_empty(in_shape, g.dtype(), g.device(), "max_pool2d backward");
    ops::FusedCall call = ops::MaxPool2dBackwardCall{g.impl(), idx.impl(), gx.impl(), /*zero_first=*/true, geometry};
    ops::run_fused(call, gx.device());
    gin[0] = gx;
  }
};

// Whether some window has no in-image tap (only with dilation: its taps jump over the image).
bool has_empty_window(const detail::ConvGeometry& g, int64_t H, int64_t W) {
  for (int64_t y = 0; y < g.oh; ++y) {
    const detail::TapRange r = detail::taps_inside(y * g.sh - g.ph, H, g.kh, g.dh);
    if (r.lo >= r.hi) return true;
  }
  for (int64_t z = 0; z < g.ow; ++z) {
    const detail::TapRange r = detail::taps_inside(z * g.sw - g.pw, W, g.kw, g.dw);
    if (r.lo >= r.hi) return true;
  }
  return false;
}

}  // namespace

std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, Pair kernel, Pair stride, Pair padding,
                                                   Pair dilation) {
  const char* op = "max_pool2d";
  check_4d(x, op);
  stride = default_stride(stride, kernel);
  check_pair(kernel, 1, op, "kernel size");
  OXM_CHECK(padding[0] <= kernel[0] / 2 && padding[1] <= kernel[1] / 2, InvalidArgument, op,
            ": padding must be at most half the kernel size (torch's rule), got padding [", padding[0], ", ",
            padding[1], "] for kernel [", kernel[0], ", ", kernel[1], "]");
  const auto g = geometry(x, kernel, dilation, padding, stride, op);
  const int64_t N = x.shape()[0], C = x.shape()[1];
  const Shape out_shape{N, C, g.oh, g.ow};
  Tensor out = detail::make_empty(out_shape, x.dtype(), x.device(), op);
  Tensor indices = detail::make_empty(out_shape, DType::I64, x.device(), op);
  if (out.numel() > 0) {
    ops::FusedCall call = ops::MaxPool2dCall{x.impl(), out.impl(), indices.impl(), g};
    ops::run_fused(call, x.device());
  }
  if (detail::needs_tape(x)) {
    auto* n = new MaxPool2dNode();
    n->indices.save(indices, false);
    n->in_shape = x.shape();
    n->geometry = g;
    n->empty_window = has_empty_window(g, x.shape()[2], x.shape()[3]);
    n->next.push_back(detail::edge_of(x));
    detail::set_history(out, n);
  }
  return {out, indices};
}

Tensor max_pool2d(const Tensor& x, Pair kernel, Pair stride, Pair padding, Pair dilation) {
  return std::get<0>(max_pool2d_with_indices(x, kernel, stride, padding, dilation));
}

Tensor avg_pool2d(const Tensor& x, Pair kernel, Pair stride, Pair padding, bool count_include_pad) {
  const char* op = "avg_pool2d";
  check_4d(x, op);
  stride = default_stride(stride, kernel);
  OXM_CHECK(padding[0] <= kernel[0] / 2 && padding[1] <= kernel[1] / 2, InvalidArgument, op,
            ": padding must be at most half the kernel size, got padding [", padding[0], ", ", padding[1],
            "] for kernel [", kernel[0], ", ", kernel[1], "]");
  auto g = geometry(x, kernel, {1, 1}, padding, stride, op);
  const int64_t N = x.shape()[0], C = x.shape()[1];
  Tensor cols = unfold_impl(x, g, 0.0, op).view({N, C, g.kh * g.kw, g.oh * g.ow});
  if (count_include_pad || (padding[0] == 0 && padding[1] == 0)) return cols.mean({2}).view({N, C, g.oh, g.ow});
  // Divide by the number of in-image elements of each window.
  Tensor ones_img = ones({1, 1, x.shape()[2], x.shape()[3]}, x.dtype(), x.device());
  Tensor counts;
  {
    NoGradGuard ng;
    counts = unfold_impl(ones_img, g, 0.0, op).sum({1}).view({1, 1, g.oh * g.ow});
  }
  return (cols.sum({2}) / counts).view({N, C, g.oh, g.ow});
}

namespace {
// linear's backward from x [M, K] and weight [N, K]: three GEMM-shaped ops (a reduction for the bias), recorded
// when create_graph asks for it (they are ordinary differentiable ops).
struct LinearNode final : detail::Node {
  detail::SavedTensor x, weight;
  bool release_saved() override {
    const bool had = x.defined() || weight.defined();
    x.reset();
    weight.reset();
    return had;
  }
  const char* name() const override { return "linear"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* gout, Tensor* gin) override {
    // g [M, N], or [R, M, N] for stacked replicas (x [R, M, K], weight [R, N, K], bias [R, N]).
    const Tensor& g = gout[0];
    if (needs_grad(0)) gin[0] = g.matmul(weight.get(name()));
    if (needs_grad(1)) gin[1] = g.transpose(-1, -2).matmul(x.get(name()));
    if (needs_grad(2)) gin[2] = g.sum({g.dim() - 2});
  }
};

// The fused op and its node: x [M, K] with weight [N, K] (or x [R, M, K] with a stacked weight), the bias of the
// matching shape or undefined; out has `out_shape` ([M, N] or [R, M, N]).
Tensor fused_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Shape& out_shape) {
  const Tensor xg = ops::gemm_compatible(x), wg = ops::gemm_compatible(weight);
  const Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  Tensor out = detail::make_empty(out_shape, x.dtype(), x.device(), "linear");
  ops::FusedCall call = ops::LinearCall{xg.impl(), wg.impl(), b.defined() ? b.impl() : nullptr, out.impl()};
  ops::run_fused(call, x.device());
  if (detail::needs_tape(x, weight) || (b.defined() && grad_enabled() && b.requires_grad())) {
    auto* node = new LinearNode();
    node->next.push_back(detail::edge_of(x));
    node->next.push_back(detail::edge_of(weight));
    node->next.push_back(b.defined() ? detail::edge_of(b) : detail::Edge{});
    if (node->needs_grad(1)) node->x.save(x, false);
    if (node->needs_grad(0)) node->weight.save(weight, false);
    detail::set_history(out, node);
  }
  return out;
}

// linear with stacked replicas: weight [R, N, K], bias [R, N] or none, x [R, ..., K] -> [R, ..., N].
Tensor stacked_linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const int64_t R = weight.shape()[0], n = weight.shape()[1], k = weight.shape()[2];
  OXM_CHECK(x.dim() >= 2 && x.shape()[0] == R && x.shape().back() == k, ShapeMismatch, "linear: stacked weight ",
            weight.shape(), " ([replicas, out, in]) needs input [", R, ", ..., ", k, "], got ", x.shape(),
            " (to give every replica the same input: x.unsqueeze(0).expand({", R, ", ...}))");
  OXM_CHECK(!bias.defined() || bias.shape() == Shape({R, n}), ShapeMismatch, "linear: stacked weight ", weight.shape(),
            " needs bias [", R, ", ", n, "], got ", bias.shape());
  int64_t m = 1;
  for (int64_t d = 1; d + 1 < x.dim(); ++d) m *= x.shape()[static_cast<size_t>(d)];
  Shape out_shape = x.shape();
  out_shape[out_shape.size() - 1] = n;
  const Tensor x3 = x.dim() == 3 ? x : x.reshape({R, m, k});
  const bool fused = is_floating(x.dtype()) && weight.dtype() == x.dtype() && weight.device() == x.device() &&
                     (!bias.defined() || (bias.dtype() == x.dtype() && bias.device() == x.device())) && n <= INT_MAX &&
                     k <= INT_MAX && m <= INT_MAX;
  if (!fused) {  // the composite's ops name a dtype or device problem
    Tensor y = x3.matmul(weight.transpose(1, 2));
    if (bias.defined()) y = y + bias.unsqueeze(1);
    return x.dim() == 3 ? y : y.reshape(out_shape);
  }
  const Tensor out = fused_linear(x3, weight, bias, {R, m, n});
  return x.dim() == 3 ? out : out.view(out_shape);
}
}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  detail::check_defined(x, "linear");
  detail::check_defined(weight, "linear", "weight");
  if (weight.dim() == 3) return stacked_linear(x, weight, bias);
  OXM_CHECK(weight.dim() == 2, ShapeMismatch, "linear: weight must be [out, in] (or [replicas, out, in]), got ",
            weight.shape());
  OXM_CHECK(x.dim() >= 1 && x.shape().back() == weight.shape()[1], ShapeMismatch, "linear: input ", x.shape(),
            " has last dim ", x.dim() ? x.shape().back() : 0, " but weight ", weight.shape(), " expects ",
            weight.shape()[1]);
  const int64_t n = weight.shape()[0], k = weight.shape()[1];
  // One fused call (the bias written into the GEMM's output) when the operands are what a layer holds: one float
  // dtype and device, a [out] bias or none. Anything else (integer dtypes, mixed devices, a broadcasting bias)
  // takes the composite path, whose ops name the problem or broadcast as torch does.
  const bool fused = is_floating(x.dtype()) && weight.dtype() == x.dtype() && weight.device() == x.device() &&
                     (!bias.defined() || (bias.dim() == 1 && bias.shape()[0] == n && bias.dtype() == x.dtype() &&
                                          bias.device() == x.device())) &&
                     n <= INT_MAX && k <= INT_MAX;
  if (!fused) {
    Tensor y = x.dim() == 1 ? x.unsqueeze(0).matmul(weight.t()).squeeze(0) : x.matmul(weight.t());
    return bias.defined() ? y + bias : y;
  }
  int64_t m = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) m *= x.shape()[static_cast<size_t>(d)];
  OXM_CHECK(m <= INT_MAX, NotImplemented, "linear: ", m, " input rows (input ", x.shape(),
            ") are above 2^31-1; split the batch");
  const Tensor x2 = x.dim() == 2 ? x : x.reshape({m, k});
  const Tensor out = fused_linear(x2, weight, bias, {m, n});
  if (x.dim() == 2) return out;
  Shape out_shape = x.shape();
  out_shape[out_shape.size() - 1] = n;
  return out.view(out_shape);
}

namespace {
// gelu(x W^T + b)'s node: saves x, the weight, the bias and the derivative gelu'(u) the fused forward wrote (in place
// of the pre-activation u the separate GELU node would keep). Without create_graph the gradient is du = g gelu'(u),
// then the linear's products; with create_graph u is recomputed from the re-attached inputs and the GELU's recorded
// derivative formula used, so the gradient is itself differentiable.
struct LinearGeluNode final : detail::Node {
  detail::SavedTensor x, weight, bias;
  Tensor dgelu;  // [M, N]; made from (not a view of) the saved inputs, whose version checks cover it
  bool release_saved() override {
    const bool had = x.defined() || dgelu.defined();
    x.reset();
    weight.reset();
    bias.reset();
    dgelu = Tensor();
    return had;
  }
  const char* name() const override { return "linear_gelu"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* gout, Tensor* gin) override {
    const Tensor& g = gout[0];
    const Tensor xv = x.get(name()), wv = weight.get(name());
    Tensor du;
    if (!grad_enabled()) {
      OXM_CHECK(dgelu.defined(), InvalidArgument, name(), ": the saved GELU derivative was released (",
                "backward through this graph a second time needs retain_graph = true)");
      du = g * dgelu;
    } else {
      const Tensor u = linear(xv, wv, bias.defined() ? bias.get(name()) : Tensor());
      du = ops::defs::Gelu::grad_graph(g, u, Tensor(), ops::OpParams{});
    }
    if (needs_grad(0)) gin[0] = du.matmul(wv);
    if (needs_grad(1)) gin[1] = du.transpose(-1, -2).matmul(xv);
    if (needs_grad(2)) gin[2] = du.sum({du.dim() - 2});
  }
};
}  // namespace

Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  detail::check_defined(x, "linear");
  detail::check_defined(weight, "linear", "weight");
  const bool tape = detail::needs_tape(x, weight) || (bias.defined() && grad_enabled() && bias.requires_grad());
  const bool fused = tape && weight.dim() == 2 && x.dim() >= 1 && x.shape().back() == weight.shape()[1] &&
                     is_floating(x.dtype()) && weight.dtype() == x.dtype() && weight.device() == x.device() &&
                     (!bias.defined() || (bias.dim() == 1 && bias.shape()[0] == weight.shape()[0] &&
                                          bias.dtype() == x.dtype() && bias.device() == x.device())) &&
                     weight.shape()[0] <= INT_MAX && weight.shape()[1] <= INT_MAX;
  if (!fused) return gelu(linear(x, weight, bias));
  const int64_t n = weight.shape()[0], k = weight.shape()[1];
  int64_t m = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) m *= x.shape()[static_cast<size_t>(d)];
  if (m > INT_MAX || m * n == 0) return gelu(linear(x, weight, bias));
  const Tensor x2 = x.dim() == 2 ? x : x.reshape({m, k});
  const Tensor xg = ops::gemm_compatible(x2), wg = ops::gemm_compatible(weight);
  const Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  Tensor out = detail::make_empty({m, n}, x.dtype(), x.device(), "linear");
  Tensor dgelu = detail::make_empty({m, n}, x.dtype(), x.device(), "linear");
  ops::LinearCall c{xg.impl(), wg.impl(), b.defined() ? b.impl() : nullptr, out.impl()};
  c.gelu_grad = dgelu.impl();
  ops::FusedCall call = c;
  if (!ops::fused_supported(call, x.device())) {
    // the backend's fused linear without the epilogue, or the fallback: the same values through the plain ops
    return gelu(linear(x, weight, bias));
  }
  ops::run_fused(call, x.device());
  auto* node = new LinearGeluNode();
  node->next.push_back(detail::edge_of(x2));
  node->next.push_back(detail::edge_of(weight));
  node->next.push_back(b.defined() ? detail::edge_of(b) : detail::Edge{});
  node->x.save(x2, false);
  node->weight.save(weight, false);
  if (b.defined()) node->bias.save(b, false);
  node->dgelu = std::move(dgelu);
  detail::set_history(out, node);
  if (x.dim() == 2) return out;
  Shape out_shape = x.shape();
  out_shape[out_shape.size() - 1] = n;
  return out.view(out_shape);
}

namespace {
// layer_norm through the fused kernels (ops/fused.hpp): one pass forward, one backward (the composite is ~9 ops
// forward and twice that backward). Saves x, the weight and the row statistics.
struct LayerNormNode final : detail::Node {
  detail::SavedTensor x, weight;
  Tensor mean, rstd;
  Shape bias_shape;
  Dims dims;
  int64_t n = 1;
  double eps = 1e-5;
  bool release_saved() override {
    const bool had = x.defined() || mean.defined();
    x.reset();
    weight.reset();
    mean = Tensor();
    rstd = Tensor();
    return had;
  }
  const char* name() const override { return "layer_norm"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* gout, Tensor* gin) override {
    Tensor xv = x.get(name()), wv = weight.defined() ? weight.get(name()) : Tensor();
    const Tensor& g = gout[0];
    if (grad_enabled()) {
      // create_graph: the same gradient from recorded ops, with the statistics recomputed from the re-attached x
      // (so the gradient knows how they depend on it).
      const Tensor xc = xv - xv.mean(dims, true);
      const Tensor r = (xc.square().mean(dims, true) + eps).rsqrt();
      const Tensor xhat = xc * r;
      const Tensor gy = wv.defined() ? g * wv : g;
      if (needs_grad(0)) gin[0] = r * (gy - gy.mean(dims, true) - xhat * (gy * xhat).mean(dims, true));
      if (needs_grad(1)) gin[1] = detail::sum_to(g * xhat, wv.shape());
      if (needs_grad(2)) gin[2] = detail::sum_to(g, bias_shape);
      return;
    }
    const Tensor gc = g.contiguous();
    const auto& xi = *xv.impl();
    Tensor gx = detail::make_empty(xi.shape, xi.dtype, xi.device(), "layer_norm backward");
    Tensor gw = needs_grad(1) ? detail::make_empty(wv.shape(), xi.dtype, xi.device(), "layer_norm backward") : Tensor();
    Tensor gb = needs_grad(2) ? detail::make_empty(bias_shape, xi.dtype, xi.device(), "layer_norm backward") : Tensor();
    if (xi.numel > 0) {
      ops::FusedCall call = ops::LayerNormBackwardCall{&xi,
                                                       gc.impl(),
                                                       wv.defined() ? wv.impl() : nullptr,
                                                       mean.impl(),
                                                       rstd.impl(),
                                                       n,
                                                       gx.impl(),
                                                       gw.defined() ? gw.impl() : nullptr,
                                                       gb.defined() ? gb.impl() : nullptr};
      ops::run_fused(call, xi.device());
    } else {
      if (gw.defined()) gw.fill_(0.0);
      if (gb.defined()) gb.fill_(0.0);
    }
    if (needs_grad(0)) gin[0] = gx;
    if (needs_grad(1)) gin[1] = gw;
    if (needs_grad(2)) gin[2] = gb;
  }
};

detail::Edge edge_or_none(const Tensor& t) { return t.defined() ? detail::edge_of(t) : detail::Edge{}; }
}  // namespace

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  detail::check_defined(x, "layer_norm");
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  OXM_CHECK(k >= 1 && x.dim() >= k, ShapeMismatch, "layer_norm: normalized_shape ", normalized_shape,
            " does not fit input ", x.shape());
  for (int64_t i = 0; i < k; ++i)
    OXM_CHECK(x.shape()[x.dim() - k + i] == normalized_shape[i], ShapeMismatch, "layer_norm: input ", x.shape(),
              " does not end with normalized_shape ", normalized_shape);
  Dims dims;
  for (int64_t i = x.dim() - k; i < x.dim(); ++i) dims.push_back(i);
  // The fused kernels when the affine parameters are normalized_shape itself (or absent), of x's dtype and device.
  auto fits = [&](const Tensor& p) {
    return !p.defined() || (p.shape() == normalized_shape && p.dtype() == x.dtype() && p.device() == x.device());
  };
  if (is_floating(x.dtype()) && fits(weight) && fits(bias) && normalized_shape.product() > 0) {
    const Tensor xc = x.contiguous();
    const Tensor w = weight.defined() ? weight.contiguous() : Tensor(),
                 b = bias.defined() ? bias.contiguous() : Tensor();
    const int64_t n = normalized_shape.product();
    Shape stat = x.shape();
    for (int64_t i = x.dim() - k; i < x.dim(); ++i) stat[static_cast<size_t>(i)] = 1;
    Tensor y = detail::make_empty(x.shape(), x.dtype(), x.device(), "layer_norm");
    Tensor mean = detail::make_empty(stat, x.dtype(), x.device(), "layer_norm");
    Tensor rstd = detail::make_empty(stat, x.dtype(), x.device(), "layer_norm");
    if (x.numel() > 0) {
      ops::FusedCall call = ops::LayerNormCall{
          xc.impl(),  w.defined() ? w.impl() : nullptr, b.defined() ? b.impl() : nullptr, eps, n, y.impl(), mean.impl(),
          rstd.impl()};
      ops::run_fused(call, x.device());
    }
    const bool tape = grad_enabled() &&
                      (xc.requires_grad() || (w.defined() && w.requires_grad()) || (b.defined() && b.requires_grad()));
    if (tape) {
      auto* node = new LayerNormNode();
      node->next.push_back(edge_or_none(xc));
      node->next.push_back(edge_or_none(w));
      node->next.push_back(edge_or_none(b));
      node->x.save(xc, false);
      if (w.defined()) node->weight.save(w, false);
      node->mean = mean;
      node->rstd = rstd;
      node->bias_shape = normalized_shape;
      node->dims = dims;
      node->n = n;
      node->eps = eps;
      detail::set_history(y, node);
    }
    return y;
  }
  Tensor mu = x.mean(dims, true);
  Tensor xc = x - mu;
  Tensor var = xc.square().mean(dims, true);
  Tensor y = xc * (var + eps).rsqrt();
  if (weight.defined()) y = y * weight;
  if (bias.defined()) y = y + bias;
  return y;
}

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  const char* op = "batch_norm";
  detail::check_defined(x, op);
  OXM_CHECK(x.dim() == 2 || x.dim() == 4, ShapeMismatch, op, ": expected [N, C] or [N, C, H, W], got ", x.shape());
  const int64_t C = x.shape()[1];
  Dims dims = x.dim() == 4 ? Dims{0, 2, 3} : Dims{0};
  Shape bshape = x.dim() == 4 ? Shape{1, C, 1, 1} : Shape{1, C};
  Tensor mean, var, new_running_mean, new_running_var;
  if (training) {
    const int64_t count = x.numel() / std::max<int64_t>(C, 1);
    OXM_CHECK(count > 1, InvalidArgument, op, ": training needs more than one value per channel, got input ",
              x.shape());
    mean = x.mean(dims, true);
    var = (x - mean).square().mean(dims, true);
    if (running_mean.defined() && running_var.defined()) {
      NoGradGuard ng;
      const Tensor m = mean.detach().reshape({C});
      const Tensor v = var.detach().reshape({C}) * (double(count) / double(count - 1));
      new_running_mean = running_mean * (1.0 - momentum) + m * momentum;
      new_running_var = running_var * (1.0 - momentum) + v * momentum;
    }
  } else {
    OXM_CHECK(running_mean.defined() && running_var.defined(), InvalidArgument, op,
              ": evaluation mode needs running statistics (track_running_stats)");
    mean = running_mean.reshape(bshape);
    var = running_var.reshape(bshape);
  }
  Tensor y = (x - mean) * (var + eps).rsqrt();
  if (weight.defined()) y = y * weight.reshape(bshape);
  if (bias.defined()) y = y + bias.reshape(bshape);
  // The running statistics are written last, by copies that allocate nothing: a failure (out of memory) anywhere
  // above leaves them as they were instead of, say, scaled by (1 - momentum) without the new batch's share.
  if (new_running_mean.defined()) {
    NoGradGuard ng;
    Tensor rm = running_mean, rv = running_var;
    rm.copy_(new_running_mean);
    rv.copy_(new_running_var);
  }
  return y;
}

namespace {
// Dropout inside a CUDA graph capture: the mask is drawn on the device (Philox, the fused op DropoutMask) from a
// seed taken from `gen` once, at the capture, and an offset that a replay hook writes before each replay, so every
// replay draws a fresh mask (torch's graphs advance their Philox offsets the same way). The state is allocated
// without an initialising kernel, which the graph would replay over the hook's values. The masks are not the host
// generator's numbers: a replayed step's dropout differs from an eager step's, with the same distribution.
Tensor dropout_captured(const Tensor& x, double p, Generator& gen) {
  const auto seed = static_cast<int64_t>(gen.next_u64());
  const int64_t philox_blocks = (x.numel() + 3) / 4;
  Tensor state = empty({2}, DType::I64, x.device()), mask = empty(x.shape(), x.dtype(), x.device());
  ops::FusedCall call = ops::DropoutMaskCall{mask.impl(), state.impl(), p, 1.0 / (1.0 - p)};
  OXM_CHECK(ops::fused_supported(call, x.device()), NotImplemented, "dropout: inside a CUDA graph capture the mask is ",
            "drawn on the device, and the backend of ", x.device(), " offers no dropout kernel for ", x.dtype(),
            "; apply this dropout outside the capture");
  auto next_offset = std::make_shared<int64_t>(0);
  detail::add_replay_hook([state, next_offset, seed, philox_blocks] {
    const int64_t values[2] = {seed, *next_offset};
    detail::copy_host_into(state, values, sizeof values);
    *next_offset += philox_blocks;
  });
  ops::run_fused(call, x.device());
  return x * mask;
}
}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  detail::check_defined(x, "dropout");
  OXM_CHECK(p >= 0.0 && p <= 1.0, InvalidArgument, "dropout: p must be in [0, 1], got ", p);
  if (!training || p == 0.0) return x;
  if (p == 1.0) return x * 0.0;
  if (detail::capture_open() && !x.device().is_cpu()) return dropout_captured(x, p, gen);
  Tensor keep = rand(x.shape(), gen, DType::F64).ge(full({}, p, DType::F64));
  return x * (keep * (1.0 / (1.0 - p))).to(x.dtype()).to(x.device());
}

Tensor embedding(const Tensor& indices, const Tensor& weight) {
  detail::check_defined(indices, "embedding", "indices");
  detail::check_defined(weight, "embedding", "weight");
  OXM_CHECK(weight.dim() == 2, ShapeMismatch, "embedding: weight must be [num_embeddings, dim], got ", weight.shape());
  Shape out = indices.shape();
  out.push_back(weight.shape()[1]);
  return weight.index_select(0, indices.reshape({-1})).reshape(out);
}

Tensor embedding(const Tensor& indices, const Tensor& weight, int64_t padding_idx) {
  detail::check_defined(weight, "embedding", "weight");
  OXM_CHECK(weight.dim() == 2, ShapeMismatch, "embedding: weight must be [num_embeddings, dim], got ", weight.shape());
  const int64_t V = weight.shape()[0];
  OXM_CHECK(padding_idx >= 0 && padding_idx < V, InvalidArgument, "embedding: padding_idx ", padding_idx,
            " is outside [0, ", V, ")");
  // Same values; the padding row comes from a detached copy so no gradient reaches it.
  Tensor keep;
  {
    NoGradGuard ng;
    keep = ones({V, 1}, weight.dtype(), weight.device());
    keep.narrow(0, padding_idx, 1).fill_(0.0);
  }
  const Tensor w = weight * keep + weight.detach() * (1.0 - keep);
  return embedding(indices, w);
}

}  // namespace oxmera::nn::functional
