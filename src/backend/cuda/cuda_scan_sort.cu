// Scans and sorting along a dim (the Scan, CumprodBackward and SortIndices fused calls): one thread per row
// running the per-row functions of backend/common/scan_math.hpp, which the host-memory test device runs too.
// Simple rather than fast: a row's scan is sequential and its sort an insertion sort (O(n^2) per row).
#include "backend/common/scan_math.hpp"
#include "backend/cuda/cuda_common.cuh"
#include "ops/fused.hpp"

namespace oxmera::detail::cuda {
namespace {

// Row (o, i) of the [outer, n, inner] view starts at o * n * inner + i.
__device__ inline int64_t row_base(const ops::RowsAlongDim& r, int64_t row) {
  return (row / r.inner) * r.n * r.inner + row % r.inner;
}
__device__ inline int64_t first_row() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline int64_t row_step() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

template <class T>
__global__ void scan_kernel(const T* x, T* out, ops::RowsAlongDim r, bool product, bool reverse) {
  for (int64_t row = first_row(); row < r.outer * r.inner; row += row_step()) {
    const int64_t b = row_base(r, row);
    scan_row(x + b, out + b, r.n, r.inner, product, reverse);
  }
}

template <class T>
__global__ void cumprod_backward_kernel(const T* x, const T* g, T* gx, ops::RowsAlongDim r) {
  for (int64_t row = first_row(); row < r.outer * r.inner; row += row_step()) {
    const int64_t b = row_base(r, row);
    cumprod_backward_row(x + b, g + b, gx + b, r.n, r.inner);
  }
}

template <class T>
__global__ void sort_indices_kernel(const T* x, int64_t* idx, ops::RowsAlongDim r, bool descending) {
  for (int64_t row = first_row(); row < r.outer * r.inner; row += row_step()) {
    const int64_t b = row_base(r, row);
    insertion_sort_row(x + b, idx + b, r.n, r.inner, descending);
  }
}

}  // namespace

bool has_scan_sort(DType dtype) { return dtype == DType::F32 || dtype == DType::I64; }

void scan(const ops::ScanCall& c) {
  const int64_t rows = c.rows.outer * c.rows.inner;
  if (rows == 0 || c.rows.n == 0) return;
  if (c.x->dtype == DType::F32)
    scan_kernel<float>
        <<<blocks(rows), kThreads, 0, stream()>>>(c.x->ptr<float>(), c.out->ptr<float>(), c.rows, c.product, c.reverse);
  else
    scan_kernel<int64_t><<<blocks(rows), kThreads, 0, stream()>>>(c.x->ptr<int64_t>(), c.out->ptr<int64_t>(), c.rows,
                                                                  c.product, c.reverse);
  check_launch(c.product ? "cumprod" : "cumsum");
}

void cumprod_backward(const ops::CumprodBackwardCall& c) {
  const int64_t rows = c.rows.outer * c.rows.inner;
  if (rows == 0 || c.rows.n == 0) return;
  cumprod_backward_kernel<float>
      <<<blocks(rows), kThreads, 0, stream()>>>(c.x->ptr<float>(), c.g->ptr<float>(), c.grad_x->ptr<float>(), c.rows);
  check_launch("cumprod backward");
}

void sort_indices(const ops::SortIndicesCall& c) {
  const int64_t rows = c.rows.outer * c.rows.inner;
  if (rows == 0 || c.rows.n == 0) return;
  if (c.x->dtype == DType::F32)
    sort_indices_kernel<float>
        <<<blocks(rows), kThreads, 0, stream()>>>(c.x->ptr<float>(), c.indices->ptr<int64_t>(), c.rows, c.descending);
  else
    sort_indices_kernel<int64_t>
        <<<blocks(rows), kThreads, 0, stream()>>>(c.x->ptr<int64_t>(), c.indices->ptr<int64_t>(), c.rows, c.descending);
  check_launch("sort");
}

}  // namespace oxmera::detail::cuda
