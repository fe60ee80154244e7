#pragma once
// In-place initialisers (torch.nn.init), drawing from an explicit Generator. They run without recording
// autograd and work on f32 and f64 tensors.
#include <utility>

#include "oxmera/random.hpp"
#include "oxmera/tensor.hpp"

namespace oxmera::nn::init {

enum class FanMode { FanIn, FanOut };
enum class Nonlinearity { Linear, Sigmoid, Tanh, ReLU, LeakyReLU };

// {fan_in, fan_out} of a weight with at least 2 dims ([out, in, k...]).
std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& t);
double calculate_gain(Nonlinearity nl, double param = 0.01);

void uniform_(Tensor& t, double lo, double hi, Generator& gen);
void normal_(Tensor& t, double mean, double std, Generator& gen);
void constant_(Tensor& t, double value);
void zeros_(Tensor& t);
void ones_(Tensor& t);
void xavier_uniform_(Tensor& t, Generator& gen, double gain = 1.0);
void xavier_normal_(Tensor& t, Generator& gen, double gain = 1.0);
void kaiming_uniform_(Tensor& t, Generator& gen, double a = 0.0, FanMode mode = FanMode::FanIn,
                      Nonlinearity nl = Nonlinearity::LeakyReLU);
void kaiming_normal_(Tensor& t, Generator& gen, double a = 0.0, FanMode mode = FanMode::FanIn,
                     Nonlinearity nl = Nonlinearity::LeakyReLU);

}  // namespace oxmera::nn::init
