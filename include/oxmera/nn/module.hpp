#pragma once
// Module: the base of every layer. Parameters and buffers are Tensor handles shared with whoever else holds
// them (an optimizer updates the same storage the module reads).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "oxmera/tensor.hpp"

namespace oxmera::nn {

class Module {
 public:
  virtual ~Module() = default;
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }
  // Short type name used in errors and printing ("Linear").
  virtual std::string name() const = 0;

  // Parameters of this module and its children, depth first in registration order, named with dots
  // ("0.weight", "encoder.1.bias"), like torch.
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  // Non-trainable state (BatchNorm running statistics), named the same way.
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }

  void train(bool on = true);  // recursive
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void zero_grad();  // drops every parameter's gradient
  // Moves every parameter and buffer to `device` in place (handles held elsewhere see the move).
  void to(Device device);

 protected:
  Tensor register_parameter(std::string name, Tensor t);
  Tensor register_buffer(std::string name, Tensor t);
  template <class M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> m) {
    children_.emplace_back(std::move(name), m);
    return m;
  }
  // Throws DTypeMismatch unless x is f32 (layers hold f32 parameters).
  void check_f32_input(const Tensor& x) const;

 private:
  void collect(const std::string& prefix, bool buffers, std::vector<std::pair<std::string, Tensor>>& out) const;
  std::vector<std::pair<std::string, Tensor>> params_, buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

using ModulePtr = std::shared_ptr<Module>;

}  // namespace oxmera::nn
