#pragma once
// Layers. Parameters are f32 and initialised like torch's defaults from the Generator passed in
// (default_generator() unless given); an f64 input is a DTypeMismatch naming the layer and the cast.
#include <initializer_list>

#include "oxmera/nn/functional.hpp"
#include "oxmera/nn/module.hpp"
#include "oxmera/random.hpp"

namespace oxmera::nn {

using functional::Pair;

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Linear"; }
  Tensor weight, bias;  // [out, in], [out] (undefined without bias)
};

struct Conv2dOptions {
  Pair stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
  bool bias = true;
};
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Pair kernel, Conv2dOptions options = {},
         Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Conv2d"; }
  Tensor weight, bias;  // [out, in/groups, kh, kw], [out]
  Conv2dOptions options;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Pair kernel, Pair stride = {0, 0}, Pair padding = {0, 0}, Pair dilation = {1, 1});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "MaxPool2d"; }
  Pair kernel, stride, padding, dilation;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Pair kernel, Pair stride = {0, 0}, Pair padding = {0, 0}, bool count_include_pad = true);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "AvgPool2d"; }
  Pair kernel, stride, padding;
  bool count_include_pad;
};

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, Generator& gen = default_generator());
  Tensor forward(const Tensor& indices) override;  // I64 indices of any shape -> [..., D]
  std::string name() const override { return "Embedding"; }
  Tensor weight;  // [V, D], N(0, 1)
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "LayerNorm"; }
  Tensor weight, bias;
  Shape normalized_shape;
  double eps;
};

class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                       bool track_running_stats = true);
  Tensor forward(const Tensor& x) override;  // [N, C, H, W]
  std::string name() const override { return "BatchNorm2d"; }
  Tensor weight, bias, running_mean, running_var;
  double eps, momentum;
};

class Dropout : public Module {
 public:
  // The mask stream is this module's own Generator (seeded from `seed`), so it can be checkpointed.
  explicit Dropout(double p = 0.5, uint64_t seed = 0);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Dropout"; }
  double p;
  Generator generator;
};

class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<ModulePtr> modules);
  void push_back(ModulePtr m);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Sequential"; }
  size_t size() const { return children().size(); }
  Module& operator[](size_t i) const { return *children()[i].second; }
};

#define OXM_ACTIVATION(Cls, expr)                             \
  class Cls : public Module {                                 \
   public:                                                    \
    Tensor forward(const Tensor& x) override { return expr; } \
    std::string name() const override { return #Cls; }        \
  };
OXM_ACTIVATION(ReLU, x.relu())
OXM_ACTIVATION(Tanh, x.tanh())
OXM_ACTIVATION(Sigmoid, x.sigmoid())
OXM_ACTIVATION(GELU, x.gelu())
#undef OXM_ACTIVATION

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_dim, end_dim); }
  std::string name() const override { return "Flatten"; }
  int64_t start_dim, end_dim;
};

}  // namespace oxmera::nn
