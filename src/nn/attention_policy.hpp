#pragma once
// When scaled_dot_product_attention takes its fused kernel. On the CPU the composite (batched GEMM, softmax,
// batched GEMM) runs about twice as fast as the fused tiled kernel at every size measured (fwd+bwd, [16, 4, 64,
// 16] to [1, 4, 1024, 64], 2026-12-02), so the fused kernel is used only where it pays in memory: when the
// scores of all (batch, head) pairs, [B*H, L, S], would take more than this many bytes. Tests set it to 0 to
// exercise the fused kernel at small sizes.
#include <atomic>
#include <cstdint>

namespace oxmera::detail {
inline std::atomic<int64_t> attention_composite_max_score_bytes{int64_t{64} << 20};
}  // namespace oxmera::detail
