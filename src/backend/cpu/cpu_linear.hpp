#pragma once
// The CPU's fused linear layer (ops/fused.hpp: LinearCall), f32 and f64: the bias rows, then one GEMM with
// beta = 1 into them. OpenBLAS clears C for beta = 0 anyway, so the bias costs one row copy per output row
// instead of a separate pass of adds over the output.
#include "ops/fused.hpp"

namespace oxmera::detail {
void cpu_linear(const ops::LinearCall& c);
}  // namespace oxmera::detail
