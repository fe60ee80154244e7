#pragma once
// Self-attention over one packed projection (internal; MultiheadAttention's self-attention path).
#include <cstdint>

#include "oxmera/random.hpp"
#include "oxmera/tensor.hpp"

namespace oxmera::nn::functional {

// scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal) -> [N, H, T, hd] for the q, k, v heads of
// one projection [N, T, 3 * H * hd] (batch_first) or [T, N, 3 * H * hd] (q: its first H * hd features, k the next,
// v the last), with the default scale. The same values as the three-view call; its fused backward writes the three
// gradients into one gradient of the projection (no zero fill and adds of each view's gradient into it).
Tensor packed_self_attention(const Tensor& projection, int64_t num_heads, bool batch_first, const Tensor& attn_mask,
                             double dropout_p, bool is_causal, Generator* gen = nullptr);

}  // namespace oxmera::nn::functional
