#pragma once
// Normalisation layers beyond LayerNorm/BatchNorm2d: BatchNorm1d ([N, C] and [N, C, L]), GroupNorm, RMSNorm
// (torch 2.4's: eps unset means the input dtype's machine epsilon). Functional forms for f32 and f64.
#include <optional>
#include <string>

#include "oxmera/nn/functional.hpp"
#include "oxmera/nn/layers.hpp"
#include "oxmera/nn/module.hpp"

namespace oxmera::nn {
namespace functional {
// x [N, C, *]: normalised over each group of C / num_groups channels and the trailing dims (biased variance);
// weight, bias [C] or undefined.
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);
// x * rsqrt(mean(x^2 over the trailing normalized_shape) + eps) * weight; eps unset: x's dtype epsilon.
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                std::optional<double> eps = std::nullopt);
}  // namespace functional

class BatchNorm1d : public Module {
 public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                       bool track_running_stats = true);
  BatchNorm1d(int64_t num_features, BatchNormOptions options);  // see BatchNormOptions (layers.hpp)
  Tensor forward(const Tensor& x) override;  // [N, C] or [N, C, L]; [R, N, C] or [R, N, C, L] with replicas
  int64_t replicas() const noexcept { return replicas_; }  // 0: not stacked
  std::string name() const override { return "BatchNorm1d"; }
  std::string extra_repr() const override;

 protected:
  ModulePtr shallow_copy() const override { return std::make_shared<BatchNorm1d>(*this); }

 public:
  Tensor weight, bias, running_mean, running_var;
  Tensor num_batches_tracked;  // 0-d i64, as BatchNorm2d's
  double eps, momentum;
  int64_t num_features;
  bool affine, track_running_stats;

 private:
  int64_t replicas_ = 0;
};

// GroupNorm's settings as options, and stacked replicas: R >= 1 gives weight and bias [R, C] (ones, zeros) and takes
// input [R, N, C, *]; replica r's samples are normalised as GroupNorm does and scaled and shifted by replica r's
// parameters.
struct GroupNormOptions {
  double eps = 1e-5;
  bool affine = true;
  int64_t replicas = 0;
};

class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  GroupNorm(int64_t num_groups, int64_t num_channels, GroupNormOptions options);
  Tensor forward(const Tensor& x) override;                // [N, C, *], or [R, N, C, *] with replicas
  int64_t replicas() const noexcept { return replicas_; }  // 0: not stacked
  std::string name() const override { return "GroupNorm"; }
  std::string extra_repr() const override;

 protected:
  ModulePtr shallow_copy() const override { return std::make_shared<GroupNorm>(*this); }

 public:
  Tensor weight, bias;  // [C] ones, zeros ([R, C] with replicas)
  int64_t num_groups, num_channels;
  double eps;

 private:
  int64_t replicas_ = 0;
};

// RMSNorm's settings as options, and stacked replicas: R >= 1 gives weight [R, *normalized_shape] (ones) and takes
// input [R, ..., *normalized_shape]; replica r is scaled by replica r's weight.
struct RMSNormOptions {
  std::optional<double> eps = std::nullopt;  // unset: the input dtype's machine epsilon (torch's)
  bool elementwise_affine = true;
  int64_t replicas = 0;
};

class RMSNorm : public Module {
 public:
  explicit RMSNorm(Shape normalized_shape, std::optional<double> eps = std::nullopt, bool elementwise_affine = true);
  RMSNorm(Shape normalized_shape, RMSNormOptions options);
  Tensor forward(const Tensor& x) override;
  int64_t replicas() const noexcept { return replicas_; }  // 0: not stacked
  std::string name() const override { return "RMSNorm"; }
  std::string extra_repr() const override;

 protected:
  ModulePtr shallow_copy() const override { return std::make_shared<RMSNorm>(*this); }

 public:
  Tensor weight;  // normalized_shape, ones ([R, *normalized_shape] with replicas)
  Shape normalized_shape;
  std::optional<double> eps;

 private:
  int64_t replicas_ = 0;
};

}  // namespace oxmera::nn
