// nn::functional's activations: the op registry's Tensor methods under torch.nn.functional's names.
#include "oxmera/nn/functional.hpp"

namespace oxmera::nn::functional {

Tensor gelu(const Tensor& x, std::string_view approximate) { return x.gelu(approximate); }
Tensor silu(const Tensor& x) { return x.silu(); }
Tensor mish(const Tensor& x) { return x.mish(); }
Tensor softplus(const Tensor& x, double beta, double threshold) { return x.softplus(beta, threshold); }
Tensor elu(const Tensor& x, double alpha) { return x.elu(alpha); }
Tensor leaky_relu(const Tensor& x, double negative_slope) { return x.leaky_relu(negative_slope); }
Tensor hardtanh(const Tensor& x, double min_val, double max_val) { return x.hardtanh(min_val, max_val); }

}  // namespace oxmera::nn::functional
