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
}  // namespace oxmera::detail
