#include "oxmera/nn/module.hpp"

#include "oxmera/autograd.hpp"
#include "tensor/tensor_impl.hpp"

namespace oxmera::nn {

Tensor Module::register_parameter(std::string name, Tensor t) {
  detail::check_defined(t, "register_parameter");
  if (!t.requires_grad()) t.requires_grad_(true);
  params_.emplace_back(std::move(name), t);
  return t;
}

Tensor Module::register_buffer(std::string name, Tensor t) {
  detail::check_defined(t, "register_buffer");
  buffers_.emplace_back(std::move(name), t);
  return t;
}

void Module::collect(const std::string& prefix, bool buffers, std::vector<std::pair<std::string, Tensor>>& out) const {
  for (const auto& [n, t] : buffers ? buffers_ : params_) out.emplace_back(prefix + n, t);
  for (const auto& [n, m] : children_) m->collect(prefix + n + ".", buffers, out);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", false, out);
  return out;
}
std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", true, out);
  return out;
}
std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, m] : children_) m->train(on);
}

void Module::zero_grad() {
  for (auto& t : parameters()) t.zero_grad();
}

void Module::to(Device device) {
  auto move = [&](Tensor t) {
    if (t.device() == device) return;
    Tensor moved;
    {
      NoGradGuard ng;
      moved = t.detach().to(device);
    }
    // Swap the data under the existing handle so optimizers and other holders see the move.
    detail::TensorImpl& dst = *t.impl();
    const detail::TensorImpl& src = *moved.impl();
    dst.storage = src.storage;
    dst.strides = src.strides;
    dst.offset = src.offset;
    dst.contiguous = src.contiguous;
    dst.grad = dst.grad.defined() ? dst.grad.to(device) : Tensor();
  };
  for (auto& [n, t] : named_parameters()) move(t);
  for (auto& [n, t] : named_buffers()) move(t);
}

void Module::check_f32_input(const Tensor& x) const {
  detail::check_defined(x, name().c_str());
  OXM_CHECK(x.dtype() == DType::F32, DTypeMismatch, name(), ": input has dtype ", x.dtype(),
            " but the layer's parameters are f32; cast the input with .to(DType::F32)");
}

}  // namespace oxmera::nn
