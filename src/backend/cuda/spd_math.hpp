#pragma once
// Small symmetric-positive-definite kernels of the CUDA backend, one matrix per thread: plain C++ usable from
// host code (unit-tested in tests/test_cuda_host.cpp without a GPU) and from device code (nvcc). f64
// arithmetic whatever the storage type, as the CPU's linalg kernels do.
#include <cmath>
#include <cstdint>

#include "backend/cuda/host_device.hpp"

namespace oxmera::detail::cuda {

// Largest n the per-thread kernels take (their f64 work array, the packed triangle, is in local memory);
// larger batches go through the host kernels.
inline constexpr int kSpdMaxN = 32;

// Doubles of work space spd_logdet_inverse needs for an n x n matrix: its packed lower triangle.
constexpr int spd_work_size(int n) { return n * (n + 1) / 2; }

struct SpdPivot {
  int pivot = -1;      // first Cholesky pivot that is not > 0 (or NaN); -1: positive definite
  double value = 0.0;  // that pivot's value
};

// For one row-major n x n matrix `a` (only its lower triangle is read): Cholesky a = L L^T into `work`
// (spd_work_size(n) doubles, L packed by rows), *logdet = log det a = 2 sum log L_ii and, when `inv` is not
// null, inv = a^{-1} (full, symmetric) = L^{-T} L^{-1}. Nothing is written to *logdet or inv when a pivot
// fails.
template <class T>
OXM_CUDA_HD SpdPivot spd_logdet_inverse(const T* a, int n, double* work, T* logdet, T* inv) {
  // L[i][j] (j <= i) lives at work[i (i + 1) / 2 + j]
  auto L = [work](int i, int j) -> double& { return work[i * (i + 1) / 2 + j]; };
  double half_logdet = 0.0;
  // Left-looking Cholesky, column by column: the diagonal first (its pivot decides), then the column below it.
  for (int j = 0; j < n; ++j) {
    double d = static_cast<double>(a[j * n + j]);
    for (int k = 0; k < j; ++k) d -= L(j, k) * L(j, k);
    if (!(d > 0.0)) return {j, d};
    const double ljj = sqrt(d), r = 1.0 / ljj;
    L(j, j) = ljj;
    half_logdet += log(ljj);
    for (int i = j + 1; i < n; ++i) {
      double s = static_cast<double>(a[i * n + j]);
      for (int k = 0; k < j; ++k) s -= L(i, k) * L(j, k);
      L(i, j) = s * r;
    }
  }
  *logdet = static_cast<T>(2.0 * half_logdet);
  if (inv == nullptr) return {};
  // X = L^{-1} in place, row by row with columns ascending: X[i][j] = -(sum_{k=j}^{i-1} L[i][k] X[k][j]) / L[i][i]
  // reads L[i][k] only for k >= j, which the row's earlier (smaller-j) writes have not touched.
  for (int i = 0; i < n; ++i) {
    const double rii = 1.0 / L(i, i);
    for (int j = 0; j < i; ++j) {
      double s = 0.0;
      for (int k = j; k < i; ++k) s += L(i, k) * L(k, j);
      L(i, j) = -s * rii;
    }
    L(i, i) = rii;
  }
  // a^{-1} = X^T X: entry (i, j) = sum_{k >= max(i, j)} X[k][i] X[k][j].
  for (int i = 0; i < n; ++i)
    for (int j = 0; j <= i; ++j) {
      double s = 0.0;
      for (int k = i; k < n; ++k) s += L(k, i) * L(k, j);
      inv[i * n + j] = static_cast<T>(s);
      inv[j * n + i] = static_cast<T>(s);
    }
  return {};
}

}  // namespace oxmera::detail::cuda
