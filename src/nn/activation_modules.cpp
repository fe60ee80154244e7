// The activation modules of oxmera/nn/activation.hpp: each checks the input dtype and calls nn::functional.
#include "oxmera/nn/activation.hpp"

#include "nn/repr.hpp"

namespace oxmera::nn {
namespace F = functional;

GELU::GELU(std::string a) : approximate(std::move(a)) {
  OXM_CHECK(approximate == "none" || approximate == "tanh", InvalidArgument, "GELU: approximate must be 'none' or ",
            "'tanh', got '", approximate, "'");
}
Tensor GELU::forward(const Tensor& x) {
  check_f32_input(x);
  return F::gelu(x, approximate);
}
Tensor SiLU::forward(const Tensor& x) {
  check_f32_input(x);
  return F::silu(x);
}
Tensor Mish::forward(const Tensor& x) {
  check_f32_input(x);
  return F::mish(x);
}
Tensor Softplus::forward(const Tensor& x) {
  check_f32_input(x);
  return F::softplus(x, beta, threshold);
}
std::string Softplus::extra_repr() const { return "beta=" + py_float(beta) + ", threshold=" + py_float(threshold); }
Tensor ELU::forward(const Tensor& x) {
  check_f32_input(x);
  return F::elu(x, alpha);
}
std::string ELU::extra_repr() const { return "alpha=" + py_float(alpha); }
Tensor LeakyReLU::forward(const Tensor& x) {
  check_f32_input(x);
  return F::leaky_relu(x, negative_slope);
}
std::string LeakyReLU::extra_repr() const { return "negative_slope=" + py_float(negative_slope); }
Hardtanh::Hardtanh(double lo, double hi) : min_val(lo), max_val(hi) {
  OXM_CHECK(lo < hi, InvalidArgument, "Hardtanh: min_val ", lo, " must be below max_val ", hi);
}
Tensor Hardtanh::forward(const Tensor& x) {
  check_f32_input(x);
  return F::hardtanh(x, min_val, max_val);
}
std::string Hardtanh::extra_repr() const { return "min_val=" + py_float(min_val) + ", max_val=" + py_float(max_val); }
Tensor Softmax::forward(const Tensor& x) {
  check_f32_input(x);
  return x.softmax(dim);
}
Tensor LogSoftmax::forward(const Tensor& x) {
  check_f32_input(x);
  return x.log_softmax(dim);
}

}  // namespace oxmera::nn
