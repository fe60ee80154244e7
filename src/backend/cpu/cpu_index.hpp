#pragma once
#include "backend/backend.hpp"

namespace oxmera::detail {
void cpu_index_select(const TensorImpl& x, int64_t dim, const TensorImpl& idx, TensorImpl& out);
void cpu_index_add(TensorImpl& out, int64_t dim, const TensorImpl& idx, const TensorImpl& src);
void cpu_gather(const TensorImpl& x, int64_t dim, const TensorImpl& idx, TensorImpl& out);
void cpu_scatter_add(TensorImpl& out, int64_t dim, const TensorImpl& idx, const TensorImpl& src);
// ones_row / zero_first: ops/fused.hpp's Im2colCall and Col2imCall.
void cpu_im2col(const TensorImpl& x, TensorImpl& cols, const ConvGeometry& g, double pad_value, bool ones_row);
void cpu_col2im(const TensorImpl& cols, TensorImpl& x_grad, const ConvGeometry& g, bool ones_row, bool zero_first);
}  // namespace oxmera::detail
