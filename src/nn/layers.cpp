#include "oxmera/nn/layers.hpp"

#include <cmath>

#include "oxmera/nn/init.hpp"
#include "tensor/tensor_impl.hpp"

namespace oxmera::nn {
namespace F = functional;

namespace {
// torch's default for Linear and Conv2d: kaiming_uniform(a = sqrt(5)) weights, U(+-1/sqrt(fan_in)) bias.
void default_init(Tensor& weight, Tensor* bias, Generator& gen) {
  init::kaiming_uniform_(weight, gen, std::sqrt(5.0));
  if (bias && bias->defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(init::fan_in_and_fan_out(weight).first));
    init::uniform_(*bias, -bound, bound, gen);
  }
}
void check_positive(int64_t v, const char* layer, const char* what) {
  OXM_CHECK(v > 0, InvalidArgument, layer, ": ", what, " must be > 0, got ", v);
}
}  // namespace

Linear::Linear(int64_t in, int64_t out, bool with_bias, Generator& gen) {
  check_positive(in, "Linear", "in_features");
  check_positive(out, "Linear", "out_features");
  weight = register_parameter("weight", empty({out, in}));
  if (with_bias) bias = register_parameter("bias", empty({out}));
  default_init(weight, &bias, gen);
}
Tensor Linear::forward(const Tensor& x) {
  check_f32_input(x);
  return F::linear(x, weight, bias);
}

Conv2d::Conv2d(int64_t in, int64_t out, Pair kernel, Conv2dOptions opt, Generator& gen) : options(opt) {
  check_positive(in, "Conv2d", "in_channels");
  check_positive(out, "Conv2d", "out_channels");
  check_positive(opt.groups, "Conv2d", "groups");
  OXM_CHECK(in % opt.groups == 0 && out % opt.groups == 0, InvalidArgument, "Conv2d: in_channels ", in,
            " and out_channels ", out, " must be divisible by groups ", opt.groups);
  check_positive(kernel[0], "Conv2d", "kernel height");
  check_positive(kernel[1], "Conv2d", "kernel width");
  weight = register_parameter("weight", empty({out, in / opt.groups, kernel[0], kernel[1]}));
  if (opt.bias) bias = register_parameter("bias", empty({out}));
  default_init(weight, &bias, gen);
}
Tensor Conv2d::forward(const Tensor& x) {
  check_f32_input(x);
  return F::conv2d(x, weight, bias, options.stride, options.padding, options.dilation, options.groups);
}

MaxPool2d::MaxPool2d(Pair k, Pair s, Pair p, Pair d) : kernel(k), stride(s), padding(p), dilation(d) {}
Tensor MaxPool2d::forward(const Tensor& x) {
  check_f32_input(x);
  return F::max_pool2d(x, kernel, stride, padding, dilation);
}

AvgPool2d::AvgPool2d(Pair k, Pair s, Pair p, bool cip) : kernel(k), stride(s), padding(p), count_include_pad(cip) {}
Tensor AvgPool2d::forward(const Tensor& x) {
  check_f32_input(x);
  return F::avg_pool2d(x, kernel, stride, padding, count_include_pad);
}

Embedding::Embedding(int64_t num, int64_t dim, Generator& gen) {
  check_positive(num, "Embedding", "num_embeddings");
  check_positive(dim, "Embedding", "embedding_dim");
  weight = register_parameter("weight", empty({num, dim}));
  init::normal_(weight, 0.0, 1.0, gen);
}
Tensor Embedding::forward(const Tensor& indices) {
  detail::check_defined(indices, "Embedding", "indices");
  OXM_CHECK(indices.dtype() == DType::I64, DTypeMismatch, "Embedding: indices have dtype ", indices.dtype(),
            "; they must be i64 (cast with .to(DType::I64))");
  return F::embedding(indices, weight);
}

LayerNorm::LayerNorm(Shape shape, double e, bool affine) : normalized_shape(std::move(shape)), eps(e) {
  OXM_CHECK(!normalized_shape.empty(), InvalidArgument, "LayerNorm: normalized_shape must not be empty");
  checked_numel(normalized_shape, "LayerNorm");
  if (affine) {
    weight = register_parameter("weight", ones(normalized_shape));
    bias = register_parameter("bias", zeros(normalized_shape));
  }
}
Tensor LayerNorm::forward(const Tensor& x) {
  check_f32_input(x);
  return F::layer_norm(x, normalized_shape, weight, bias, eps);
}

BatchNorm2d::BatchNorm2d(int64_t c, double e, double m, bool affine, bool track) : eps(e), momentum(m) {
  check_positive(c, "BatchNorm2d", "num_features");
  if (affine) {
    weight = register_parameter("weight", ones({c}));
    bias = register_parameter("bias", zeros({c}));
  }
  if (track) {
    running_mean = register_buffer("running_mean", zeros({c}));
    running_var = register_buffer("running_var", ones({c}));
  }
}
Tensor BatchNorm2d::forward(const Tensor& x) {
  check_f32_input(x);
  OXM_CHECK(x.dim() == 4, ShapeMismatch, "BatchNorm2d: expected [N, C, H, W], got ", x.shape());
  const int64_t c = running_mean.defined() ? running_mean.numel() : (weight.defined() ? weight.numel() : x.shape()[1]);
  OXM_CHECK(x.shape()[1] == c, ShapeMismatch, "BatchNorm2d: input has ", x.shape()[1], " channels, the layer ", c);
  const bool use_batch = is_training() || !running_mean.defined();
  return F::batch_norm(x, running_mean, running_var, weight, bias, use_batch, momentum, eps);
}

Dropout::Dropout(double prob, uint64_t seed) : p(prob), generator(seed) {
  OXM_CHECK(p >= 0.0 && p <= 1.0, InvalidArgument, "Dropout: p must be in [0, 1], got ", p);
}
Tensor Dropout::forward(const Tensor& x) {
  check_f32_input(x);
  return F::dropout(x, p, is_training(), generator);
}

Sequential::Sequential(std::initializer_list<ModulePtr> modules) {
  for (const auto& m : modules) push_back(m);
}
void Sequential::push_back(ModulePtr m) {
  OXM_CHECK(m != nullptr, InvalidArgument, "Sequential: cannot add a null module");
  register_module(std::to_string(children().size()), std::move(m));
}
Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (const auto& [n, m] : children()) h = m->forward(h);
  return h;
}

}  // namespace oxmera::nn
