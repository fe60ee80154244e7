#pragma once
#include "tensor/tensor_impl.hpp"

namespace oxmera::detail {
void cpu_index_select(const TensorImpl& x, int64_t dim, const TensorImpl& idx, TensorImpl& out);
void cpu_index_add(TensorImpl& out, int64_t dim, const TensorImpl& idx, const TensorImpl& src);
void cpu_gather(const TensorImpl& x, int64_t dim, const TensorImpl& idx, TensorImpl& out);
void cpu_scatter_add(TensorImpl& out, int64_t dim, const TensorImpl& idx, const TensorImpl& src);
}  // namespace oxmera::detail
