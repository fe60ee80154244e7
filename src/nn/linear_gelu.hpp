#pragma once
// gelu(linear(x, weight, bias)) as one fused op and one autograd node: the feed-forward of TransformerEncoderLayer /
// TransformerDecoderLayer with activation "gelu". The forward's one pass after the GEMM also writes the GELU's
// derivative (ops/fused.hpp, LinearCall::gelu_grad), kept by the node in place of the pre-activation, so the backward
// multiplies by it instead of taking erf and exp again. Internal (src/nn only).
#include <memory>
#include <string>
#include <typeinfo>

#include "oxmera/nn/functional.hpp"
#include "oxmera/nn/layers.hpp"
#include "oxmera/tensor.hpp"

namespace oxmera::nn::functional {

// The values and gradients of gelu(linear(x, weight, bias)) (the erf form); the same argument rules as linear. Takes
// the fused path for a [out, in] weight, a [out] bias or none, one float dtype and device, and a recorded graph;
// otherwise it is exactly gelu(linear(...)).
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias);

// A transformer layer's first feed-forward linear and its activation ("relu" or "gelu"): with "gelu" on a plain
// Linear (not a subclass, no replicas) and an input of its parameters' dtype, linear_gelu; otherwise
// linear1->forward(x) and the activation, as before.
inline Tensor feed_forward_in(const std::shared_ptr<Linear>& linear1, const std::string& activation, const Tensor& x) {
  const Linear& layer = *linear1;
  if (activation == "gelu" && typeid(layer) == typeid(Linear) && layer.replicas() == 0 && x.defined() &&
      x.dtype() == linear1->weight.dtype())
    return linear_gelu(x, linear1->weight, linear1->bias);
  const Tensor y = linear1->forward(x);
  return activation == "gelu" ? gelu(y) : y.relu();
}

}  // namespace oxmera::nn::functional
