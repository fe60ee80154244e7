#pragma once
// Attention: the functional scaled_dot_product_attention (a fused op on backends that offer it, the
// matmul / softmax composite elsewhere).
#include <optional>

#include "oxmera/random.hpp"
#include "oxmera/tensor.hpp"

namespace oxmera::nn::functional {

// torch.nn.functional.scaled_dot_product_attention (torch 2.x): q [..., L, E], k [..., S, E], v [..., S, Ev]
// (one float dtype, the same leading dims) -> [..., L, Ev] = softmax(q k^T * scale + mask) v with scale
// 1 / sqrt(E) by default. attn_mask broadcasts to [..., L, S]: a bool (U8, as comparisons give) mask keeps the
// positions where it is true, a float mask (q's dtype) is added to the scores. is_causal keeps key j <= query i (with
// no attn_mask). dropout_p > 0 drops attention weights with `gen` (default_generator() when null) through the composite
// path.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask = {},
                                    double dropout_p = 0.0, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt, Generator* gen = nullptr);

// The same through ordinary ops only (matmul, softmax, matmul), whatever the backend offers: the reference the
// fused path is tested against, and what create_graph's double backward differentiates.
Tensor scaled_dot_product_attention_composite(const Tensor& q, const Tensor& k, const Tensor& v,
                                              const Tensor& attn_mask = {}, double dropout_p = 0.0,
                                              bool is_causal = false, std::optional<double> scale = std::nullopt,
                                              Generator* gen = nullptr);

}  // namespace oxmera::nn::functional
