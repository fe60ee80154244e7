#include "oxmera/nn/init.hpp"

#include <cmath>

#include "oxmera/autograd.hpp"
#include "tensor/tensor_impl.hpp"

namespace oxmera::nn::init {
namespace {
void fill_from(Tensor& t, const Tensor& values, const char* op) {
  detail::check_defined(t, op);
  OXM_CHECK(is_floating(t.dtype()), UnsupportedDType, op, ": dtype ", t.dtype(), " is not supported (f32, f64)");
  NoGradGuard ng;
  t.copy_(values.to(t.dtype()).to(t.device()));
}
}  // namespace

std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& t) {
  detail::check_defined(t, "fan_in_and_fan_out");
  OXM_CHECK(t.dim() >= 2, InvalidArgument, "fan_in_and_fan_out: needs a tensor with at least 2 dims, got shape ",
            t.shape());
  int64_t receptive = 1;
  for (int64_t i = 2; i < t.dim(); ++i) receptive *= t.shape()[i];
  return {t.shape()[1] * receptive, t.shape()[0] * receptive};
}

double calculate_gain(Nonlinearity nl, double param) {
  switch (nl) {
    case Nonlinearity::Linear:
    case Nonlinearity::Sigmoid:
      return 1.0;
    case Nonlinearity::Tanh:
      return 5.0 / 3.0;
    case Nonlinearity::ReLU:
      return std::sqrt(2.0);
    case Nonlinearity::LeakyReLU:
      return std::sqrt(2.0 / (1.0 + param * param));
  }
  return 1.0;
}

void uniform_(Tensor& t, double lo, double hi, Generator& gen) {
  OXM_CHECK(lo <= hi, InvalidArgument, "uniform_: low ", lo, " exceeds high ", hi);
  fill_from(t, rand(t.shape(), gen, DType::F64) * (hi - lo) + lo, "uniform_");
}
void normal_(Tensor& t, double mean, double std, Generator& gen) {
  OXM_CHECK(std >= 0, InvalidArgument, "normal_: std must be >= 0, got ", std);
  fill_from(t, randn(t.shape(), gen, DType::F64) * std + mean, "normal_");
}
void constant_(Tensor& t, double value) { fill_from(t, full({}, value, DType::F64), "constant_"); }
void zeros_(Tensor& t) { constant_(t, 0.0); }
void ones_(Tensor& t) { constant_(t, 1.0); }

void xavier_uniform_(Tensor& t, Generator& gen, double gain) {
  auto [fi, fo] = fan_in_and_fan_out(t);
  double a = gain * std::sqrt(6.0 / static_cast<double>(fi + fo));
  uniform_(t, -a, a, gen);
}
void xavier_normal_(Tensor& t, Generator& gen, double gain) {
  auto [fi, fo] = fan_in_and_fan_out(t);
  normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(fi + fo)), gen);
}
void kaiming_uniform_(Tensor& t, Generator& gen, double a, FanMode mode, Nonlinearity nl) {
  auto [fi, fo] = fan_in_and_fan_out(t);
  const double fan = static_cast<double>(mode == FanMode::FanIn ? fi : fo);
  OXM_CHECK(fan > 0, InvalidArgument, "kaiming_uniform_: zero fan for shape ", t.shape());
  double bound = calculate_gain(nl, a) * std::sqrt(3.0 / fan);
  uniform_(t, -bound, bound, gen);
}
void kaiming_normal_(Tensor& t, Generator& gen, double a, FanMode mode, Nonlinearity nl) {
  auto [fi, fo] = fan_in_and_fan_out(t);
  const double fan = static_cast<double>(mode == FanMode::FanIn ? fi : fo);
  OXM_CHECK(fan > 0, InvalidArgument, "kaiming_normal_: zero fan for shape ", t.shape());
  normal_(t, 0.0, calculate_gain(nl, a) / std::sqrt(fan), gen);
}

}  // namespace oxmera::nn::init
