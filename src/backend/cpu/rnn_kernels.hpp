#pragma once
// The CPU's fused recurrent-cell kernels (ops/fused.hpp: LstmCellCall, LstmCellBackwardCall), f32 and f64.
#include "ops/fused.hpp"

namespace oxmera::detail {
void cpu_lstm_cell(const ops::LstmCellCall& c);
void cpu_lstm_cell_backward(const ops::LstmCellBackwardCall& c);
}  // namespace oxmera::detail
