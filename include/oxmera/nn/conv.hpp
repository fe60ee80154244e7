#pragma once
// Convolution variants and adaptive pooling: Conv1d (conv2d over a unit height), ConvTranspose2d (col2im of
// W^T x, the adjoint of conv2d), AdaptiveAvgPool2d. Functional forms for f32 and f64; the modules hold f32
// parameters (f64 after Module::to(DType::F64)).
#include <optional>
#include <string>

#include "oxmera/nn/functional.hpp"
#include "oxmera/nn/module.hpp"
#include "oxmera/random.hpp"

namespace oxmera::nn {
namespace functional {
// x [N, C, L] (or [C, L]), weight [O, C/groups, k], bias [O] or undefined.
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, int64_t stride = 1, int64_t padding = 0,
              int64_t dilation = 1, int64_t groups = 1);
// x [N, C_in, H, W], weight [C_in, C_out/groups, kh, kw] (torch's layout), bias [C_out] or undefined. Output
// size (H - 1) * stride - 2 * padding + dilation * (kh - 1) + output_padding + 1; output_padding < stride.
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, Pair stride = {1, 1},
                        Pair padding = {0, 0}, Pair output_padding = {0, 0}, int64_t groups = 1,
                        Pair dilation = {1, 1});
// x [N, C, H, W] or [C, H, W] -> [..., oh, ow]; window i spans [floor(i H / oh), ceil((i + 1) H / oh)) as torch.
Tensor adaptive_avg_pool2d(const Tensor& x, Pair output_size);
}  // namespace functional

using functional::Pair;

struct Conv1dOptions {
  int64_t stride = 1, padding = 0, dilation = 1, groups = 1;
  bool bias = true;
};
class Conv1d : public Module {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel, Conv1dOptions options = {},
         Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;  // [N, C, L] or [C, L]
  std::string name() const override { return "Conv1d"; }
  std::string extra_repr() const override;

 protected:
  ModulePtr shallow_copy() const override { return std::make_shared<Conv1d>(*this); }

 public:
  Tensor weight, bias;  // [out, in/groups, k], [out]
  Conv1dOptions options;
};

struct ConvTranspose2dOptions {
  Pair stride{1, 1}, padding{0, 0}, output_padding{0, 0};
  int64_t groups = 1;
  bool bias = true;
  Pair dilation{1, 1};
};
class ConvTranspose2d : public Module {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, Pair kernel, ConvTranspose2dOptions options = {},
                  Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "ConvTranspose2d"; }
  std::string extra_repr() const override;

 protected:
  ModulePtr shallow_copy() const override { return std::make_shared<ConvTranspose2d>(*this); }

 public:
  Tensor weight, bias;  // [in, out/groups, kh, kw], [out]
  ConvTranspose2dOptions options;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Pair output_size) : output_size(output_size) {}
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "AdaptiveAvgPool2d"; }
  std::string extra_repr() const override;

 protected:
  ModulePtr shallow_copy() const override { return std::make_shared<AdaptiveAvgPool2d>(*this); }

 public:
  Pair output_size;
};

}  // namespace oxmera::nn
