// The activation modules of oxmera/nn/activation.hpp: each checks the input dtype and calls nn::functional.
#include <sstream>

#include "oxmera/nn/activation.hpp"

namespace oxmera::nn {
namespace F = functional;
namespace {
std::string num(double v) {
  std::ostringstream os;
  os << v;
  std::string s = os.str();
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}
}  // namespace

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
std::string Softplus::extra_repr() const { return "beta=" + num(beta) + ", threshold=" + num(threshold); }
Tensor ELU::forward(const Tensor& x) {
  check_f32_input(x);
  return F::elu(x, alpha);
}
std::string ELU::extra_repr() const { return "alpha=" + num(alpha); }
Tensor LeakyReLU::forward(const Tensor& x) {
  check_f32_input(x);
  return F::leaky_relu(x, negative_slope);
}
std::string LeakyReLU::extra_repr() const { return "negative_slope=" + num(negative_slope); }
Hardtanh::Hardtanh(double lo, double hi) : min_val(lo), max_val(hi) {
  OXM_CHECK(lo < hi, InvalidArgument, "Hardtanh: min_val ", lo, " must be below max_val ", hi);
}
Tensor Hardtanh::forward(const Tensor& x) {
  check_f32_input(x);
  return F::hardtanh(x, min_val, max_val);
}
std::string Hardtanh::extra_repr() const { return "min_val=" + num(min_val) + ", max_val=" + num(max_val); }
Tensor Softmax::forward(const Tensor& x) {
  check_f32_input(x);
  return x.softmax(dim);
}
Tensor LogSoftmax::forward(const Tensor& x) {
  check_f32_input(x);
  return x.log_softmax(dim);
}

}  // namespace oxmera::nn
