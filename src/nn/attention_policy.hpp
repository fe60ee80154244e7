#pragma once
// When scaled_dot_product_attention takes its fused op. Only where the device's backend has a kernel for it (the
// CPU's, src/backend/cpu/attention_kernels.cpp): elsewhere the composite (batched GEMM, softmax, batched GEMM)
// runs, as the fused op's fallback would, without recomputing the scores in the backward. On the CPU the fused
// kernels beat the composite at every size measured (docs/LIMITATIONS.md, "Fused attention on the CPU"), so by
// default every problem takes them; problems whose scores over all (batch, head) pairs, [B*H, L, S], take at most
// this many bytes take the composite instead (tests set it to compare the two paths).
#include <atomic>
#include <cstdint>

namespace oxmera::detail {
inline std::atomic<int64_t> attention_composite_max_score_bytes{-1};
// A fused forward that records its node keeps the weights P for the backward (which then skips recomputing q k^T
// and the softmax) when they take at most this many bytes: the small problems, where they cost little memory.
// Larger ones keep nothing beyond q, k, v and recompute P block by block, as the forward computed it.
inline std::atomic<int64_t> attention_keep_probs_max_bytes{int64_t{16} << 20};
}  // namespace oxmera::detail
