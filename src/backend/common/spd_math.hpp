#pragma once
// Small symmetric-positive-definite kernels, one matrix per warp on the CUDA backend (spd_warp_*) and one matrix per
// call on the host-memory test device (tests/fake_device.hpp): plain C++ usable from host code (unit-tested in
// tests/test_cuda_host.cpp without a GPU) and from device code (nvcc). f64 arithmetic whatever the storage
// type, as the CPU's linalg kernels do.
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/host_device.hpp"

namespace oxmera::detail {

// Largest n the per-thread kernels take (their f64 work array, the packed triangle, is in local memory);
// larger batches go through the host kernels.
inline constexpr int kSpdMaxN = 32;

// Doubles of work space spd_logdet_inverse needs for an n x n matrix: its packed lower triangle.
constexpr int spd_work_size(int n) { return n * (n + 1) / 2; }

// A failing matrix as one ordered 64-bit key, for checks the host reads later (ops::SpdReport): the kernels lower
// a device word to the key of each failure (an atomic min), so the word ends up naming the earliest call (`tag`)
// and, in it, the first matrix. Keys stay below kSpdNoFailure, the word's value when nothing failed (a power of
// two, exact in the double a fill takes).
inline constexpr int kSpdKeyPivotBits = 5;   // pivots of n <= kSpdMaxN = 32
inline constexpr int kSpdKeyBatchBits = 32;  // larger batches check at once
inline constexpr int64_t kSpdMaxDeferredBatch = int64_t{1} << kSpdKeyBatchBits;
inline constexpr int64_t kSpdMaxTag = int64_t{1} << (62 - kSpdKeyBatchBits - kSpdKeyPivotBits);
inline constexpr int64_t kSpdNoFailure = int64_t{1} << 62;
OXM_HD inline int64_t spd_failure_key(int64_t tag, int64_t batch, int pivot) {
  return (tag << (kSpdKeyBatchBits + kSpdKeyPivotBits)) | (batch << kSpdKeyPivotBits) | pivot;
}
static_assert(kSpdMaxDeferredBatch == int64_t{1} << 32, "ops::IndexCheckCall::kMaxPositions is the key's batch range");
// One position of an index range check (ops::IndexCheckCall): the value clamped into [0, size) (size >= 1), and in
// `key` the failure key of (tag, position) when the value was outside, else kSpdNoFailure. A value equal to `ignore`
// (class targets' ignore_index) is neither checked nor kept: it becomes -1. `*kept`: whether the value counts.
OXM_HD inline int64_t index_check_at(int64_t value, int64_t size, int64_t tag, int64_t position, int64_t ignore,
                                     int64_t* key, bool* kept) {
  if (value == ignore) {
    *key = kSpdNoFailure;
    *kept = false;
    return -1;
  }
  const bool inside = value >= 0 && value < size;
  *key = inside ? kSpdNoFailure : spd_failure_key(tag, position, 0);
  *kept = true;
  return inside ? value : (value < 0 ? 0 : size - 1);
}

struct SpdKey {
  int64_t tag, batch;
  int pivot;
};
inline SpdKey spd_decode_key(int64_t key) {
  return {key >> (kSpdKeyBatchBits + kSpdKeyPivotBits), (key >> kSpdKeyPivotBits) & (kSpdMaxDeferredBatch - 1),
          static_cast<int>(key & ((1 << kSpdKeyPivotBits) - 1))};
}

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

// NaN in each of `count` entries: the outputs of a matrix that failed, so a result read before its (deferred) check
// shows the failure instead of stale memory.
template <class T>
OXM_HD void spd_fill_nan(T* out, int64_t count) {
  for (int64_t i = 0; i < count; ++i) out[i] = std::numeric_limits<T>::quiet_NaN();
}

// *logdet = log det a = 2 sum log L_ii and, when `inv` is not null, inv = a^{-1} (full, symmetric) =
// L^{-T} L^{-1}, for one n x n matrix (work: spd_work_size(n) doubles). NaN outputs when a pivot fails.
template <class T>
OXM_HD SpdPivot spd_logdet_inverse(const T* a, int n, double* work, T* logdet, T* inv) {
  double half_logdet = 0.0;
  const SpdPivot p = spd_factor(a, n, work, &half_logdet);
  if (p.pivot >= 0) {
    *logdet = std::numeric_limits<T>::quiet_NaN();
    if (inv) spd_fill_nan(inv, static_cast<int64_t>(n) * n);
    return p;
  }
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

// The lower Cholesky factor of one n x n matrix into `L` (row-major, zeros above the diagonal); NaN when a pivot
// fails.
template <class T>
OXM_HD SpdPivot spd_cholesky(const T* a, int n, double* work, T* L) {
  double half_logdet = 0.0;
  const SpdPivot p = spd_factor(a, n, work, &half_logdet);
  if (p.pivot >= 0) {
    spd_fill_nan(L, static_cast<int64_t>(n) * n);
    return p;
  }
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) L[i * n + j] = j <= i ? static_cast<T>(packed(work, i, j)) : T(0);
  return {};
}

// ---- One warp (32 lanes) per matrix: the CUDA kernels' layout (a thread per matrix keeps its f64 triangle in slow
// local memory and leaves most of a GPU idle for a few hundred matrices). The lanes share the matrix in `m` (f64,
// kSpdWarpLd doubles per row: shared memory on the device): the factor L in its lower triangle; for the inverse,
// X = L^{-1} by columns in the upper part (X[i][c] at m[c][i] for i > c, X[c][c] at m[c][n]). `Warp` runs the lane
// parts: on the device `each(f)` is f(this lane) and `sync()` is __syncwarp(); on the host (tests) `each` runs the
// 32 lanes one after another, in any order, and `sync()` does nothing. Code outside each() runs on every lane alike
// (values all lanes compute equally). The arithmetic, and its order, is the one-thread functions' above, so the
// results are the same bits.
inline constexpr int kSpdWarpLanes = 32, kSpdWarpLd = kSpdMaxN + 1;
inline constexpr int kSpdWarpTile = kSpdMaxN * kSpdWarpLd;  // doubles of `m`

// The host's Warp (tests and the host-memory test device): the lanes one after another, in reverse order when
// `reverse` (results must not depend on the order the lanes of a phase run in).
struct SequentialWarp {
  bool reverse = false;
  template <class F>
  void each(F&& f) const {
    for (int i = 0; i < kSpdWarpLanes; ++i) f(reverse ? kSpdWarpLanes - 1 - i : i);
  }
  void sync() const {}
};

// Left-looking Cholesky of a (n <= kSpdMaxN) into m's lower triangle; lane i computes row i's entry of each column.
template <class Warp, class T>
OXM_HD SpdPivot spd_warp_factor(Warp& w, const T* a, int n, double* m, double* half_logdet) {
  w.sync();  // the lanes are done with m's previous matrix
  w.each([&](int lane) {
    for (int e = lane; e < n * n; e += kSpdWarpLanes) {
      const int i = e / n, j = e % n;
      if (j <= i) m[i * kSpdWarpLd + j] = static_cast<double>(a[e]);
    }
  });
  w.sync();
  double acc = 0.0;
  for (int j = 0; j < n; ++j) {
    double d = m[j * kSpdWarpLd + j];
    for (int k = 0; k < j; ++k) d -= m[j * kSpdWarpLd + k] * m[j * kSpdWarpLd + k];
    if (!(d > 0.0)) return {j, d};
    const double ljj = sqrt(d), r = 1.0 / ljj;
    acc += log(ljj);
    w.sync();  // every lane has read row j before lane j replaces its diagonal
    w.each([&](int lane) {
      if (lane == j) {
        m[j * kSpdWarpLd + j] = ljj;
      } else if (lane > j && lane < n) {
        double s = m[lane * kSpdWarpLd + j];
        for (int k = 0; k < j; ++k) s -= m[lane * kSpdWarpLd + k] * m[j * kSpdWarpLd + k];
        m[lane * kSpdWarpLd + j] = s * r;
      }
    });
    w.sync();
  }
  *half_logdet = acc;
  return {};
}

// spd_logdet_inverse with a warp: lane c computes column c of X = L^{-1}, then lane i row i of X^T X.
template <class Warp, class T>
OXM_HD SpdPivot spd_warp_logdet_inverse(Warp& w, const T* a, int n, double* m, T* logdet, T* inv) {
  double half_logdet = 0.0;
  const SpdPivot p = spd_warp_factor(w, a, n, m, &half_logdet);
  if (p.pivot >= 0) {
    w.each([&](int lane) {
      if (lane == 0) *logdet = std::numeric_limits<T>::quiet_NaN();
      if (inv)
        for (int e = lane; e < n * n; e += kSpdWarpLanes) inv[e] = std::numeric_limits<T>::quiet_NaN();
    });
    return p;
  }
  w.each([&](int lane) {
    if (lane == 0) *logdet = static_cast<T>(2.0 * half_logdet);
  });
  if (inv == nullptr) return {};
  w.each([&](int c) {
    if (c >= n) return;
    double* col = m + c * kSpdWarpLd;
    col[n] = 1.0 / m[c * kSpdWarpLd + c];
    for (int i = c + 1; i < n; ++i) {
      double s = 0.0;
      for (int k = c; k < i; ++k) s += m[i * kSpdWarpLd + k] * (k == c ? col[n] : col[k]);
      col[i] = -s * (1.0 / m[i * kSpdWarpLd + i]);
    }
  });
  w.sync();
  w.each([&](int i) {
    if (i >= n) return;
    const double* ci = m + i * kSpdWarpLd;
    for (int j = 0; j <= i; ++j) {
      const double* cj = m + j * kSpdWarpLd;
      double s = 0.0;
      for (int k = i; k < n; ++k) s += (k == i ? ci[n] : ci[k]) * (k == j ? cj[n] : cj[k]);
      inv[i * n + j] = static_cast<T>(s);
      inv[j * n + i] = static_cast<T>(s);
    }
  });
  return {};
}

// spd_cholesky with a warp.
template <class Warp, class T>
OXM_HD SpdPivot spd_warp_cholesky(Warp& w, const T* a, int n, double* m, T* L) {
  double half_logdet = 0.0;
  const SpdPivot p = spd_warp_factor(w, a, n, m, &half_logdet);
  w.each([&](int lane) {
    for (int e = lane; e < n * n; e += kSpdWarpLanes) {
      const int i = e / n, j = e % n;
      L[e] =
          p.pivot >= 0 ? std::numeric_limits<T>::quiet_NaN() : (j <= i ? static_cast<T>(m[i * kSpdWarpLd + j]) : T(0));
    }
  });
  return p;
}

// Column `x` (n entries, stride `ldx`) of T X = B, in place: forward substitution for a lower triangular T,
// back substitution for an upper one (row-major n x n; the other triangle is not read). f64 inside, in
// `work` (n doubles). Returns the first row (in solve order) whose diagonal entry is 0 (singular), else -1;
// x is then NaN.
template <class T>
OXM_HD int tri_solve_column(const T* t, int n, T* x, int64_t ldx, bool upper, double* work) {
  for (int s = 0; s < n; ++s) {
    const int i = upper ? n - 1 - s : s;
    const double d = static_cast<double>(t[i * n + i]);
    if (d == 0.0) {
      for (int r = 0; r < n; ++r) x[r * ldx] = std::numeric_limits<T>::quiet_NaN();
      return i;
    }
    double v = static_cast<double>(x[i * ldx]);
    const int k0 = upper ? i + 1 : 0, k1 = upper ? n : i;
    for (int k = k0; k < k1; ++k) v -= static_cast<double>(t[i * n + k]) * work[k];
    work[i] = v / d;
  }
  for (int i = 0; i < n; ++i) x[i * ldx] = static_cast<T>(work[i]);
  return -1;
}

}  // namespace oxmera::detail
