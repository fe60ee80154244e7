// Conv1d, ConvTranspose2d and AdaptiveAvgPool2d, functional and module forms.
#include "oxmera/nn/conv.hpp"

#include <cmath>
#include <sstream>

#include "autograd/node.hpp"
#include "ops/fused.hpp"
#include "ops/graph_capture.hpp"
#include "oxmera/autograd.hpp"
#include "oxmera/nn/init.hpp"

namespace oxmera::nn {
namespace functional {
namespace {

// col2im of cols [N, C*kh*kw, oh*ow] into [N, C, H, W] (overlaps summed). Its backward is unfold with the same
// geometry, which has its own (differentiable) backward, so create_graph works through it.
struct FoldForConvTransposeNode final : detail::Node {
  detail::ConvGeometry g;
  const char* name() const override { return "conv_transpose2d_fold"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* gout, Tensor* gin) override {
    gin[0] = unfold(gout[0], {g.kh, g.kw}, {g.dh, g.dw}, {g.ph, g.pw}, {g.sh, g.sw});
  }
};

Tensor fold(const Tensor& cols, const Shape& out_shape, const detail::ConvGeometry& g) {
  Tensor out, cc;
  {
    NoGradGuard ng;
    out = zeros(out_shape, cols.dtype(), cols.device());
    cc = cols.contiguous();
  }
  if (cc.numel()) {
    ops::FusedCall call = ops::Col2imCall{cc.impl(), out.impl(), g};
    ops::run_fused(call, out.device());
  }
  if (detail::needs_tape(cols)) {
    auto* n = new FoldForConvTransposeNode();
    n->g = g;
    n->next.push_back(detail::edge_of(cols));
    detail::set_history(out, n);
  }
  return out;
}

void check_float(const Tensor& x, const char* op) {
  OXM_CHECK(is_floating(x.dtype()), UnsupportedDType, op, ": dtype ", x.dtype(), " is not supported (f32, f64)");
}

}  // namespace

Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding,
              int64_t dilation, int64_t groups) {
  const char* op = "conv1d";
  detail::check_defined(x, op);
  detail::check_defined(weight, op, "weight");
  OXM_CHECK(x.dim() == 2 || x.dim() == 3, ShapeMismatch, op, ": expected [N, C, L] or [C, L], got ", x.shape());
  OXM_CHECK(weight.dim() == 3, ShapeMismatch, op, ": weight must be [out, in/groups, k], got ", weight.shape());
  if (x.dim() == 2) return conv1d(x.unsqueeze(0), weight, bias, stride, padding, dilation, groups).squeeze(0);
  // A unit height: conv2d's im2col path, kernel [1, k].
  Tensor y = conv2d(x.unsqueeze(2), weight.unsqueeze(2), bias, {1, stride}, {0, padding}, {1, dilation}, groups);
  return y.squeeze(2);
}

Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Pair stride, Pair padding,
                        Pair output_padding, int64_t groups, Pair dilation) {
  const char* op = "conv_transpose2d";
  detail::check_defined(x, op);
  detail::check_defined(weight, op, "weight");
  OXM_CHECK(x.dim() == 3 || x.dim() == 4, ShapeMismatch, op, ": expected [N, C, H, W] or [C, H, W], got ", x.shape());
  if (x.dim() == 3)
    return conv_transpose2d(x.unsqueeze(0), weight, bias, stride, padding, output_padding, groups, dilation).squeeze(0);
  check_float(x, op);
  OXM_CHECK(weight.dim() == 4, ShapeMismatch, op, ": weight must be [in, out/groups, kh, kw], got ", weight.shape());
  OXM_CHECK(weight.dtype() == x.dtype(), DTypeMismatch, op, ": input is ", x.dtype(), " but weight is ",
            weight.dtype());
  OXM_CHECK(groups >= 1, InvalidArgument, op, ": groups must be >= 1, got ", groups);
  OXM_CHECK(stride[0] >= 1 && stride[1] >= 1 && dilation[0] >= 1 && dilation[1] >= 1 && padding[0] >= 0 &&
                padding[1] >= 0 && output_padding[0] >= 0 && output_padding[1] >= 0,
            InvalidArgument, op, ": stride and dilation must be >= 1, padding and output_padding >= 0");
  OXM_CHECK(output_padding[0] < stride[0] && output_padding[1] < stride[1], InvalidArgument, op, ": output_padding [",
            output_padding[0], ", ", output_padding[1], "] must be smaller than stride [", stride[0], ", ", stride[1],
            "]");
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  OXM_CHECK(weight.shape()[0] == C, ShapeMismatch, op, ": input has ", C, " channels but weight ", weight.shape(),
            " expects ", weight.shape()[0], " (weight is [in, out/groups, kh, kw])");
  OXM_CHECK(C % groups == 0, InvalidArgument, op, ": in_channels ", C, " must be divisible by groups ", groups);
  const int64_t og = weight.shape()[1], O = og * groups, kh = weight.shape()[2], kw = weight.shape()[3];
  // (n - 1) s - 2 p + d (k - 1) + output_padding + 1, overflow-checked: the int64 extremes give an error, not a
  // wrapped size.
  auto extent = [&](int64_t n, int i, int64_t k) {
    int64_t grown = 0, pad2 = 0, span = 0, e = 0;
    const bool overflow =
        __builtin_mul_overflow(n - 1, stride[i], &grown) || __builtin_mul_overflow(padding[i], int64_t{2}, &pad2) ||
        __builtin_mul_overflow(dilation[i], k - 1, &span) || __builtin_sub_overflow(grown, pad2, &e) ||
        __builtin_add_overflow(e, span, &e) || __builtin_add_overflow(e, output_padding[i] + 1, &e);
    OXM_CHECK(!overflow, InvalidArgument, op, ": input ", x.shape(), " with weight ", weight.shape(), ", stride [",
              stride[0], ", ", stride[1], "], padding [", padding[0], ", ", padding[1], "] and dilation [", dilation[0],
              ", ", dilation[1], "] overflows a 64-bit output size; use smaller values");
    return e;
  };
  const int64_t OH = extent(H, 0, kh), OW = extent(W, 1, kw);
  OXM_CHECK(OH > 0 && OW > 0, InvalidArgument, op, ": input ", x.shape(), " with weight ", weight.shape(),
            " gives a non-positive output size [", OH, ", ", OW, "]; reduce padding");
  detail::ConvGeometry g{kh, kw, stride[0], stride[1], padding[0], padding[1], dilation[0], dilation[1], H, W};
  // cols[n, g] = W_g^T x[n, g]: [G, og*kh*kw, C/G] x [N, G, C/G, H*W] -> [N, G, og*kh*kw, H*W], then col2im.
  const int64_t cg = C / groups, K = og * kh * kw;
  Tensor wt = weight.reshape({groups, cg, K}).transpose(1, 2);
  Tensor cols = wt.matmul(x.reshape({N, groups, cg, H * W})).reshape({N, O * kh * kw, H * W});
  Tensor out = fold(cols, {N, O, OH, OW}, g);
  if (bias.defined()) {
    OXM_CHECK(bias.shape() == Shape({O}), ShapeMismatch, op, ": bias must be [", O, "], got ", bias.shape());
    out = out + bias.reshape({1, O, 1, 1});
  }
  return out;
}

namespace {
// [out, in] averaging matrix of torch's adaptive windows: row i averages [floor(i n / o), ceil((i + 1) n / o)).
Tensor adaptive_matrix(int64_t n, int64_t o, DType dtype, Device device) {
  Tensor m = zeros({o, n}, DType::F64);
  double* p = m.data_ptr<double>();
  for (int64_t i = 0; i < o; ++i) {
    const int64_t s = (i * n) / o, e = ((i + 1) * n + o - 1) / o;
    for (int64_t j = s; j < e; ++j) p[i * n + j] = 1.0 / static_cast<double>(e - s);
  }
  return detail::constant_on_device(m.to(dtype), device);
}
}  // namespace

Tensor adaptive_avg_pool2d(const Tensor& x, Pair output_size) {
  const char* op = "adaptive_avg_pool2d";
  detail::check_defined(x, op);
  OXM_CHECK(x.dim() == 3 || x.dim() == 4, ShapeMismatch, op, ": expected [N, C, H, W] or [C, H, W], got ", x.shape());
  check_float(x, op);
  OXM_CHECK(output_size[0] >= 1 && output_size[1] >= 1, InvalidArgument, op, ": output_size must be >= 1, got [",
            output_size[0], ", ", output_size[1], "]");
  const int64_t H = x.shape()[x.dim() - 2], W = x.shape()[x.dim() - 1];
  OXM_CHECK(H >= 1 && W >= 1, ShapeMismatch, op, ": input ", x.shape(), " has an empty spatial dim");
  // The windows are products of a row range and a column range, so the pooling is Ph x Pw^T (two matmuls).
  Tensor ph, pw;
  {
    NoGradGuard ng;
    ph = adaptive_matrix(H, output_size[0], x.dtype(), x.device());
    pw = adaptive_matrix(W, output_size[1], x.dtype(), x.device());
  }
  return ph.matmul(x).matmul(pw.t());
}

}  // namespace functional

namespace F = functional;

namespace {
void default_init(Tensor& weight, Tensor& bias, Generator& gen) {
  init::kaiming_uniform_(weight, gen, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(init::fan_in_and_fan_out(weight).first));
    init::uniform_(bias, -bound, bound, gen);
  }
}
void check_positive(int64_t v, const char* layer, const char* what) {
  OXM_CHECK(v > 0, InvalidArgument, layer, ": ", what, " must be > 0, got ", v);
}
std::string tuple_str(Pair p) {
  std::ostringstream os;
  os << "(" << p[0] << ", " << p[1] << ")";
  return os.str();
}
}  // namespace

Conv1d::Conv1d(int64_t in, int64_t out, int64_t kernel, Conv1dOptions opt, Generator& gen) : options(opt) {
  check_positive(in, "Conv1d", "in_channels");
  check_positive(out, "Conv1d", "out_channels");
  check_positive(kernel, "Conv1d", "kernel_size");
  check_positive(opt.groups, "Conv1d", "groups");
  OXM_CHECK(in % opt.groups == 0 && out % opt.groups == 0, InvalidArgument, "Conv1d: in_channels ", in,
            " and out_channels ", out, " must be divisible by groups ", opt.groups);
  register_parameter("weight", &Conv1d::weight, empty({out, in / opt.groups, kernel}));
  register_parameter("bias", &Conv1d::bias, opt.bias ? empty({out}) : Tensor());
  default_init(weight, bias, gen);
}
std::string Conv1d::extra_repr() const {
  std::ostringstream os;
  os << weight.shape()[1] * options.groups << ", " << weight.shape()[0] << ", kernel_size=(" << weight.shape()[2]
     << ",), stride=(" << options.stride << ",)";
  if (options.padding != 0) os << ", padding=(" << options.padding << ",)";
  if (options.dilation != 1) os << ", dilation=(" << options.dilation << ",)";
  if (options.groups != 1) os << ", groups=" << options.groups;
  if (!bias.defined()) os << ", bias=false";
  return os.str();
}
Tensor Conv1d::forward(const Tensor& x) {
  check_f32_input(x);
  return F::conv1d(x, weight, bias, options.stride, options.padding, options.dilation, options.groups);
}

ConvTranspose2d::ConvTranspose2d(int64_t in, int64_t out, Pair kernel, ConvTranspose2dOptions opt, Generator& gen)
    : options(opt) {
  check_positive(in, "ConvTranspose2d", "in_channels");
  check_positive(out, "ConvTranspose2d", "out_channels");
  check_positive(opt.groups, "ConvTranspose2d", "groups");
  check_positive(kernel[0], "ConvTranspose2d", "kernel height");
  check_positive(kernel[1], "ConvTranspose2d", "kernel width");
  OXM_CHECK(in % opt.groups == 0 && out % opt.groups == 0, InvalidArgument, "ConvTranspose2d: in_channels ", in,
            " and out_channels ", out, " must be divisible by groups ", opt.groups);
  OXM_CHECK(opt.output_padding[0] < opt.stride[0] && opt.output_padding[1] < opt.stride[1], InvalidArgument,
            "ConvTranspose2d: output_padding ", tuple_str(opt.output_padding), " must be smaller than stride ",
            tuple_str(opt.stride));
  register_parameter("weight", &ConvTranspose2d::weight, empty({in, out / opt.groups, kernel[0], kernel[1]}));
  register_parameter("bias", &ConvTranspose2d::bias, opt.bias ? empty({out}) : Tensor());
  // torch's fan_in for this layout is weight.size(1) * kh * kw, which fan_in_and_fan_out computes too.
  default_init(weight, bias, gen);
}
std::string ConvTranspose2d::extra_repr() const {
  std::ostringstream os;
  os << weight.shape()[0] << ", " << weight.shape()[1] * options.groups
     << ", kernel_size=" << tuple_str(Pair(weight.shape()[2], weight.shape()[3]))
     << ", stride=" << tuple_str(options.stride);
  if (options.padding != Pair(0)) os << ", padding=" << tuple_str(options.padding);
  if (options.dilation != Pair(1)) os << ", dilation=" << tuple_str(options.dilation);
  if (options.output_padding != Pair(0)) os << ", output_padding=" << tuple_str(options.output_padding);
  if (options.groups != 1) os << ", groups=" << options.groups;
  if (!bias.defined()) os << ", bias=false";
  return os.str();
}
Tensor ConvTranspose2d::forward(const Tensor& x) {
  check_f32_input(x);
  return F::conv_transpose2d(x, weight, bias, options.stride, options.padding, options.output_padding, options.groups,
                             options.dilation);
}

std::string AdaptiveAvgPool2d::extra_repr() const {
  if (output_size[0] == output_size[1]) return "output_size=" + std::to_string(output_size[0]);
  return "output_size=" + tuple_str(output_size);
}
Tensor AdaptiveAvgPool2d::forward(const Tensor& x) {
  check_f32_input(x);
  return F::adaptive_avg_pool2d(x, output_size);
}

}  // namespace oxmera::nn
