#pragma once
// Small batched linear algebra over the last two dims (every leading dim is a batch dim), f32 and f64.
// Factorizations run in f64 on the host (a GPU tensor round-trips through host memory) and return the
// input's dtype and device. Decompositions of SPD / symmetric matrices only: no general LU, QR or SVD.
#include "oxmera/tensor.hpp"

namespace oxmera::linalg {

// eigh's symmetry check: |a_ij - a_ji| must not exceed EIGH_SYMMETRY_TOL * max|a| (per matrix).
inline constexpr double EIGH_SYMMETRY_TOL = 1e-5;

// Lower Cholesky factor L of SPD a (a = L L^T); reads the lower triangle. NotPositiveDefinite names the
// batch index and the failing pivot. Differentiable (the gradient is symmetrised, as torch's).
Tensor cholesky(const Tensor& a);
// torch.linalg.cholesky_ex: the factor and, per matrix, info (i64 [...] on a's device: 0, or i > 0 when the leading
// minor of order i is not positive definite) without an error or, on a GPU, a wait for the check; a failing
// matrix's L is NaN. With check_errors, cholesky's NotPositiveDefinite instead (info then all 0).
struct CholeskyExResult {
  Tensor L;
  Tensor info;
};
CholeskyExResult cholesky_ex(const Tensor& a, bool check_errors = false);
// log det a for SPD a (via Cholesky), [..., n, n] -> [...]. Differentiable (gradient a^{-1}). On a GPU (f32,
// n <= 32) it does not wait for its check: a matrix that is not positive definite gets a NaN logdet and is
// reported (NotPositiveDefinite naming it) at the device's next read-back to the host, or after the replay of a
// CUDA graph that captured it.
Tensor logdet(const Tensor& a);
// det a for SPD a (exp of logdet). Differentiable.
Tensor det(const Tensor& a);
// Solution x of a x = b for SPD a, b [..., n, k] or [..., n]; batch dims broadcast. Differentiable.
Tensor solve(const Tensor& a, const Tensor& b);
// Solution of (L L^T) x = b given the lower Cholesky factor L (torch's argument order). Differentiable.
Tensor cholesky_solve(const Tensor& b, const Tensor& L);
// Inverse of SPD a. Differentiable.
Tensor inverse(const Tensor& a);
// Solution x of t x = b for triangular t (lower unless `upper`); reads only that triangle. Differentiable. A zero on
// the diagonal is InvalidArgument; on a GPU (f32, n <= 32) it is found later, as logdet's failures, and the
// solution is NaN.
Tensor solve_triangular(const Tensor& t, const Tensor& b, bool upper);

struct EighResult {
  Tensor eigenvalues;   // [..., n], ascending
  Tensor eigenvectors;  // [..., n, n], eigenvectors as columns
};
// Symmetric eigendecomposition (Householder tridiagonalisation + implicit QL, f64). Reads the lower triangle after the
// symmetry check (NotSymmetric names the batch index and the worst pair). Eigenvalues are differentiable always; the
// eigenvectors' gradient is defined only for distinct eigenvalues: backward through eigenvectors of a
// matrix with (numerically) repeated eigenvalues is InvalidArgument.
EighResult eigh(const Tensor& a);

// [..., n, n] -> [..., n] (the diagonal of the last two dims); a 1-d input gives the diagonal matrix.
Tensor diag(const Tensor& a);
// [..., n] -> [..., n, n] with v on the diagonal. Differentiable.
Tensor diag_embed(const Tensor& v);
// Sum of the diagonal of the last two dims: [..., n, n] -> [...].
Tensor trace(const Tensor& a);

}  // namespace oxmera::linalg
