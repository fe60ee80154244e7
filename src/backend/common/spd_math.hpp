#pragma once
// Small symmetric-positive-definite kernels, one matrix per thread on the CUDA backend and one matrix per call on
// the host-memory test device (tests/fake_device.hpp): plain C++ usable from host code (unit-tested in
// tests/test_cuda_host.cpp without a GPU) and from device code (nvcc). f64 arithmetic whatever the storage
// type, as the CPU's linalg kernels do.
#include <cmath>
#include <cstdint>

#include "core/host_device.hpp"

namespace oxmera::detail {

// Largest n the per-thread kernels take (their f64 work array, the packed triangle, is in local memory);
// larger batches go through the host kernels.
inline constexpr int kSpdMaxN = 32;

// Doubles of work space spd_logdet_inverse needs for an n x n matrix: its packed lower triangle.
constexpr int spd_work_size(int n) { return n * (n + 1) / 2; }

struct SpdPivot {
  int pivot = -1;      // first Cholesky pivot that is not > 0 (or NaN); -1: positive definite
  double value = 0.0;  // that pivot's value
};

// L[i][j] (j <= i) of a factor packed by rows in `work`.
OXM_HD inline double& packed(double* work, int i, int j) { return work[i * (i + 1) / 2 + j]; }

// Left-looking Cholesky a = L L^T of one row-major n x n matrix (only its lower triangle is read) into `work`
// (spd_work_size(n) doubles, packed by rows), column by column: the diagonal first (its pivot decides), then
// the column below it. *half_logdet = sum log L_ii.
template <class T>
OXM_HD SpdPivot spd_factor(const T* a, int n, double* work, double* half_logdet) {
  double acc = 0.0;
  for (int j = 0; j < n; ++j) {
    double d = static_cast<double>(a[j * n + j]);
    for (int k = 0; k < j; ++k) d -= packed(work, j, k) * packed(work, j, k);
    if (!(d > 0.0)) return {j, d};
    const double ljj = sqrt(d), r = 1.0 / ljj;
    packed(work, j, j) = ljj;
    acc += log(ljj);
    for (int i = j + 1; i < n; ++i) {
      double s = static_cast<double>(a[i * n + j]);
      for (int k = 0; k < j; ++k) s -= packed(work, i, k) * packed(work, j, k);
      packed(work, i, j) = s * r;
    }
  }
  *half_logdet = acc;
  return {};
}

// *logdet = log det a = 2 sum log L_ii and, when `inv` is not null, inv = a^{-1} (full, symmetric) =
// L^{-T} L^{-1}, for one n x n matrix (work: spd_work_size(n) doubles). Nothing is written when a pivot fails.
template <class T>
OXM_HD SpdPivot spd_logdet_inverse(const T* a, int n, double* work, T* logdet, T* inv) {
  double half_logdet = 0.0;
  const SpdPivot p = spd_factor(a, n, work, &half_logdet);
  if (p.pivot >= 0) return p;
  *logdet = static_cast<T>(2.0 * half_logdet);
  if (inv == nullptr) return {};
  // X = L^{-1} in place, row by row with columns ascending: X[i][j] = -(sum_{k=j}^{i-1} L[i][k] X[k][j]) / L[i][i]
  // reads L[i][k] only for k >= j, which the row's earlier (smaller-j) writes have not touched.
  for (int i = 0; i < n; ++i) {
    const double rii = 1.0 / packed(work, i, i);
    for (int j = 0; j < i; ++j) {
      double s = 0.0;
      for (int k = j; k < i; ++k) s += packed(work, i, k) * packed(work, k, j);
      packed(work, i, j) = -s * rii;
    }
    packed(work, i, i) = rii;
  }
  // a^{-1} = X^T X: entry (i, j) = sum_{k >= max(i, j)} X[k][i] X[k][j].
  for (int i = 0; i < n; ++i)
    for (int j = 0; j <= i; ++j) {
      double s = 0.0;
      for (int k = i; k < n; ++k) s += packed(work, k, i) * packed(work, k, j);
      inv[i * n + j] = static_cast<T>(s);
      inv[j * n + i] = static_cast<T>(s);
    }
  return {};
}

// The lower Cholesky factor of one n x n matrix into `L` (row-major, zeros above the diagonal); nothing is
// written when a pivot fails.
template <class T>
OXM_HD SpdPivot spd_cholesky(const T* a, int n, double* work, T* L) {
  double half_logdet = 0.0;
  const SpdPivot p = spd_factor(a, n, work, &half_logdet);
  if (p.pivot >= 0) return p;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) L[i * n + j] = j <= i ? static_cast<T>(packed(work, i, j)) : T(0);
  return {};
}

// Column `x` (n entries, stride `ldx`) of T X = B, in place: forward substitution for a lower triangular T,
// back substitution for an upper one (row-major n x n; the other triangle is not read). f64 inside, in
// `work` (n doubles). Returns the first row (in solve order) whose diagonal entry is 0 (singular), else -1;
// x is then left unchanged.
template <class T>
OXM_HD int tri_solve_column(const T* t, int n, T* x, int64_t ldx, bool upper, double* work) {
  for (int s = 0; s < n; ++s) {
    const int i = upper ? n - 1 - s : s;
    const double d = static_cast<double>(t[i * n + i]);
    if (d == 0.0) return i;
    double v = static_cast<double>(x[i * ldx]);
    const int k0 = upper ? i + 1 : 0, k1 = upper ? n : i;
    for (int k = k0; k < k1; ++k) v -= static_cast<double>(t[i * n + k]) * work[k];
    work[i] = v / d;
  }
  for (int i = 0; i < n; ++i) x[i * ldx] = static_cast<T>(work[i]);
  return -1;
}

}  // namespace oxmera::detail
