#pragma once
// A module for every activation of nn::functional, plus Identity, Softmax and LogSoftmax. They hold no
// parameters: any floating input of the module's dtype (f32, or f64 after Module::to(DType::F64)) is accepted.
#include <string>

#include "oxmera/nn/functional.hpp"
#include "oxmera/nn/module.hpp"

namespace oxmera::nn {

#define OXM_ACTIVATION_BODY(Cls)                                                   \
  std::string name() const override { return #Cls; }                               \
                                                                                   \
 protected:                                                                        \
  ModulePtr shallow_copy() const override { return std::make_shared<Cls>(*this); } \
                                                                                   \
 public:

// Identity passes anything through (torch's accepts and ignores constructor arguments; this one takes none).
class Identity : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x; }
  OXM_ACTIVATION_BODY(Identity)
};

class GELU : public Module {
 public:
  GELU() = default;
  explicit GELU(std::string approximate);  // "none" or "tanh"
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override { return "approximate='" + approximate + "'"; }
  OXM_ACTIVATION_BODY(GELU)
  std::string approximate = "none";
};

class SiLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  OXM_ACTIVATION_BODY(SiLU)
};

class Mish : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  OXM_ACTIVATION_BODY(Mish)
};

class Softplus : public Module {
 public:
  explicit Softplus(double beta = 1.0, double threshold = 20.0) : beta(beta), threshold(threshold) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  OXM_ACTIVATION_BODY(Softplus)
  double beta, threshold;
};

class ELU : public Module {
 public:
  explicit ELU(double alpha = 1.0) : alpha(alpha) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  OXM_ACTIVATION_BODY(ELU)
  double alpha;
};

class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : negative_slope(negative_slope) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  OXM_ACTIVATION_BODY(LeakyReLU)
  double negative_slope;
};

class Hardtanh : public Module {
 public:
  explicit Hardtanh(double min_val = -1.0, double max_val = 1.0);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  OXM_ACTIVATION_BODY(Hardtanh)
  double min_val, max_val;
};

class Softmax : public Module {
 public:
  explicit Softmax(int64_t dim) : dim(dim) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override { return "dim=" + std::to_string(dim); }
  OXM_ACTIVATION_BODY(Softmax)
  int64_t dim;
};

class LogSoftmax : public Module {
 public:
  explicit LogSoftmax(int64_t dim) : dim(dim) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override { return "dim=" + std::to_string(dim); }
  OXM_ACTIVATION_BODY(LogSoftmax)
  int64_t dim;
};

#undef OXM_ACTIVATION_BODY

}  // namespace oxmera::nn
