#pragma once
// Per-row scans and sorting along one dim (cumsum / cumprod, cumprod's gradient, a stable sort's indices): one
// row per thread on the CUDA backend, one row per call on the host-memory test device (tests/fake_device.hpp)
// and in the fallbacks of src/ops/fused.cpp. A row is n elements `stride` apart. Plain C++ for host code, device
// code too under nvcc.
#include <cstdint>

#include "core/host_device.hpp"

namespace oxmera::detail {

// Scans accumulate floats in f64 (as torch's CPU kernels) and wrap i64 (unsigned arithmetic: no overflow UB).
template <class T>
struct ScanAccumulator {
  using type = double;
};
template <>
struct ScanAccumulator<int64_t> {
  using type = uint64_t;
};

// out = the inclusive running sum (product) of x along the row, from its end when `reverse`.
template <class T>
OXM_HD void scan_row(const T* x, T* out, int64_t n, int64_t stride, bool product, bool reverse) {
  using Acc = typename ScanAccumulator<T>::type;
  Acc acc = product ? Acc(1) : Acc(0);
  for (int64_t k = 0; k < n; ++k) {
    const int64_t at = (reverse ? n - 1 - k : k) * stride;
    acc = product ? acc * static_cast<Acc>(x[at]) : acc + static_cast<Acc>(x[at]);
    out[at] = static_cast<T>(acc);
  }
}

// gx = d/dx of sum_j g_j y_j, y = cumprod(x) along the row, exact with zeros (torch's rule): with z the first
// zero of x, gx_i = (sum_{j >= i} g_j y_j) / x_i before z, sum_{j >= z} g_j prod_{k <= j, k != z} x_k at z (a
// running product), and 0 after z. gx holds y while the row is walked backwards (no other scratch).
template <class T>
OXM_HD void cumprod_backward_row(const T* x, const T* g, T* gx, int64_t n, int64_t stride) {
  int64_t z = n;
  double p = 1;
  for (int64_t j = 0; j < n; ++j) {
    if (z == n && x[j * stride] == T(0)) z = j;
    p *= static_cast<double>(x[j * stride]);
    gx[j * stride] = static_cast<T>(p);
  }
  if (z < n) {
    double r = z > 0 ? static_cast<double>(gx[(z - 1) * stride]) : 1.0;
    double acc = static_cast<double>(g[z * stride]) * r;
    for (int64_t j = z + 1; j < n; ++j) {
      r *= static_cast<double>(x[j * stride]);
      acc += static_cast<double>(g[j * stride]) * r;
    }
    for (int64_t j = z + 1; j < n; ++j) gx[j * stride] = T(0);
    gx[z * stride] = static_cast<T>(acc);
  }
  double suffix = 0;  // sum_{j >= i} g_j y_j; the terms from z on are 0
  for (int64_t i = (z < n ? z : n) - 1; i >= 0; --i) {
    suffix += static_cast<double>(g[i * stride]) * static_cast<double>(gx[i * stride]);
    gx[i * stride] = static_cast<T>(suffix / static_cast<double>(x[i * stride]));
  }
}

// Whether a sorts strictly before b: NaN is the largest value (x != x: NaN, also in device code).
template <class T>
OXM_HD bool sorts_before(T a, T b, bool descending) {
  const bool a_nan = a != a, b_nan = b != b;
  return descending ? (a_nan && !b_nan) || a > b : (!a_nan && b_nan) || a < b;
}

// idx = the positions of the row in stable sorted order, by insertion: simple and obviously stable, O(n^2) (the
// per-thread GPU kernel's; the host fallback uses std::stable_sort with sorts_before).
template <class T>
OXM_HD void insertion_sort_row(const T* x, int64_t* idx, int64_t n, int64_t stride, bool descending) {
  for (int64_t k = 0; k < n; ++k) {
    const T v = x[k * stride];
    int64_t j = k;
    while (j > 0 && sorts_before(v, x[idx[(j - 1) * stride] * stride], descending)) {
      idx[j * stride] = idx[(j - 1) * stride];
      --j;
    }
    idx[j * stride] = k;
  }
}

}  // namespace oxmera::detail
