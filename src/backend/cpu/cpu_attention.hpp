#pragma once
// The CPU's fused scaled dot-product attention (ops/fused.hpp, AttentionCall).
#include "ops/fused.hpp"

namespace oxmera::detail {
bool cpu_attention_supported(const ops::AttentionCall& c);
void cpu_attention(const ops::AttentionCall& c);
}  // namespace oxmera::detail
