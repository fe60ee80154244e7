// Small batched linear algebra: host f64 kernels (Cholesky, triangular solves, Householder + QL eigh) and their
// backward rules; logdet, det, solve and inverse are compositions of these differentiable pieces.
#include "oxmera/linalg.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "autograd/node.hpp"
#include "backend/cpu/parallel.hpp"
#include "ops/device_checks.hpp"
#include "ops/fused.hpp"
#include "oxmera/autograd.hpp"

namespace oxmera::linalg {
namespace {

using detail::Node;

// A fresh contiguous f64 host copy of a batch of matrices [..., r, c].
struct Batch {
  Tensor t;
  int64_t count = 0, rows = 0, cols = 0;
  double* mat(int64_t b) const { return t.impl()->ptr<double>() + b * rows * cols; }
};
Batch host_batch(const Tensor& a) {
  NoGradGuard ng;
  Batch b;
  b.t = a.detach().to(Device::cpu()).to(DType::F64);
  if (b.t.shares_storage(a) || !b.t.is_contiguous()) b.t = b.t.clone();  // kernels write in place
  const Shape& s = a.shape();
  b.rows = s[s.size() - 2];
  b.cols = s[s.size() - 1];
  b.count = b.rows * b.cols == 0 ? Shape(s.data(), s.size() - 2).product() : a.numel() / (b.rows * b.cols);
  return b;
}
// Back to the caller's dtype and device (no history).
Tensor to_like(const Tensor& host_f64, const Tensor& like) {
  NoGradGuard ng;
  return host_f64.to(like.dtype()).to(like.device());
}

std::string batch_index_str(int64_t b, const Shape& shape) {
  Shape batch(shape.data(), shape.size() - 2);
  if (batch.empty()) return "0 (unbatched)";
  Shape idx(batch.size());
  int64_t r = b;
  for (size_t d = batch.size(); d-- > 0;) {
    idx[d] = r % batch[d];
    r /= batch[d];
  }
  return std::to_string(b) + " " + idx.str();
}

void check_square(const Tensor& a, const char* op) {
  detail::check_defined(a, op);
  OXM_CHECK(a.dim() >= 2, InvalidArgument, op, ": needs a matrix or a batch of matrices [..., n, n], got shape ",
            a.shape());
  OXM_CHECK(a.shape()[a.dim() - 1] == a.shape()[a.dim() - 2], ShapeMismatch, op, ": needs square matrices, got shape ",
            a.shape());
  OXM_CHECK(is_floating(a.dtype()), UnsupportedDType, op, ": dtype ", a.dtype(), " is not supported (f32, f64)");
}

// In place on x (n x m): solves T x = x for triangular T (n x n, row-major; lower or upper, optionally
// transposed, so that T^T of a lower factor is an upper solve). Row-oriented: each step is an axpy over a
// row of x (vectorisable). Returns the zero-pivot row or -1.
int64_t tri_solve(const double* T, int64_t n, double* x, int64_t m, bool upper, bool transpose) {
  auto at = [&](int64_t i, int64_t k) { return transpose ? T[k * n + i] : T[i * n + k]; };
  const bool up = upper != transpose;  // effective triangle
  for (int64_t s = 0; s < n; ++s) {
    const int64_t i = up ? n - 1 - s : s;
    const double d = at(i, i);
    if (d == 0.0) return i;
    double* xi = x + i * m;
    const int64_t k0 = up ? i + 1 : 0, k1 = up ? n : i;
    for (int64_t k = k0; k < k1; ++k) {
      const double t = at(i, k);
      const double* xk = x + k * m;
      for (int64_t c = 0; c < m; ++c) xi[c] -= t * xk[c];
    }
    const double inv = 1.0 / d;
    for (int64_t c = 0; c < m; ++c) xi[c] *= inv;
  }
  return -1;
}

// Batches of small matrices: parallel only when a batch carries enough work to pay for a fork/join.
template <class F>
void for_batches(int64_t count, int64_t n, F&& f) {
  const int64_t work = std::max<int64_t>(n * n * n, 1);
  detail::parallel_for(count, std::max<int64_t>(1, 262144 / work), [&](int64_t b0, int64_t e0) { f(b0, e0); });
}

// Under ThreadSanitizer the clones' ifunc resolvers would run before its runtime: one baseline version there.
#ifdef OXMERA_NO_TARGET_CLONES
#define OXM_TARGET_CLONES
#else
#define OXM_TARGET_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif

// Many small matrices at once: kLanes matrices interleaved element by element (structure of arrays), so
// every scalar step of the algorithm is one SIMD operation across independent matrices. This is what
// makes 4x4 and 16x16 batches fast; target_clones builds AVX-512 / AVX2 / baseline versions.
constexpr int64_t kLanes = 8;

// In place on a [n*n][kLanes] block: lower Cholesky factors. fail[l] = first failing pivot of lane l or -1.
OXM_TARGET_CLONES void chol_soa(double* a, int64_t n, int64_t* fail, double* bad) {
  auto A = [&](int64_t i, int64_t j) { return a + (i * n + j) * kLanes; };
  for (int64_t j = 0; j < n; ++j) {
    double s[kLanes], inv[kLanes];
    const double* ajj = A(j, j);
    for (int64_t l = 0; l < kLanes; ++l) s[l] = ajj[l];
    for (int64_t k = 0; k < j; ++k) {
      const double* ajk = A(j, k);
      for (int64_t l = 0; l < kLanes; ++l) s[l] -= ajk[l] * ajk[l];
    }
    for (int64_t l = 0; l < kLanes; ++l) {
      if (!(s[l] > 0.0)) {
        if (fail[l] < 0) {
          fail[l] = j;
          bad[l] = s[l];
        }
        s[l] = 1.0;  // keep the lane's arithmetic finite; its result is discarded
      }
    }
    double* djj = A(j, j);
    for (int64_t l = 0; l < kLanes; ++l) {
      djj[l] = std::sqrt(s[l]);
      inv[l] = 1.0 / djj[l];
    }
    for (int64_t i = j + 1; i < n; ++i) {
      double v[kLanes];
      const double* aij = A(i, j);
      for (int64_t l = 0; l < kLanes; ++l) v[l] = aij[l];
      for (int64_t k = 0; k < j; ++k) {
        const double *aik = A(i, k), *ajk = A(j, k);
        for (int64_t l = 0; l < kLanes; ++l) v[l] -= aik[l] * ajk[l];
      }
      double* out = A(i, j);
      for (int64_t l = 0; l < kLanes; ++l) out[l] = v[l] * inv[l];
    }
  }
}

// out (a [n*n][kLanes] block) = scale[l] * (L L^T)^{-1} for lower factors L in `a`: inv = L^{-1}, then
// inv^T inv (lower half, mirrored).
OXM_TARGET_CLONES void spd_inverse_soa(const double* a, int64_t n, const double* scale, double* inv, double* out) {
  auto L = [&](int64_t i, int64_t j) { return a + (i * n + j) * kLanes; };
  auto I = [&](int64_t i, int64_t j) { return inv + (i * n + j) * kLanes; };
  auto O = [&](int64_t i, int64_t j) { return out + (i * n + j) * kLanes; };
  for (int64_t i = 0; i < n; ++i) {
    double d[kLanes];
    const double* lii = L(i, i);
    for (int64_t l = 0; l < kLanes; ++l) d[l] = 1.0 / lii[l];
    for (int64_t j = 0; j <= i; ++j) {
      double v[kLanes];
      for (int64_t l = 0; l < kLanes; ++l) v[l] = i == j ? 1.0 : 0.0;
      for (int64_t k = j; k < i; ++k) {
        const double *lik = L(i, k), *ikj = I(k, j);
        for (int64_t l = 0; l < kLanes; ++l) v[l] -= lik[l] * ikj[l];
      }
      double* o = I(i, j);
      for (int64_t l = 0; l < kLanes; ++l) o[l] = v[l] * d[l];
    }
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      double v[kLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int64_t k = i; k < n; ++k) {
        const double *kki = I(k, i), *kkj = I(k, j);
        for (int64_t l = 0; l < kLanes; ++l) v[l] += kki[l] * kkj[l];
      }
      double *oij = O(i, j), *oji = O(j, i);
      for (int64_t l = 0; l < kLanes; ++l) {
        oij[l] = v[l] * scale[l];
        oji[l] = oij[l];
      }
    }
}

// A batch [..., n, n] (any dtype/device) packed into SoA blocks [blocks][n*n][kLanes] of f64 in one
// conversion pass; padding lanes hold identity matrices (always positive definite).
std::vector<double> soa_pack(const Tensor& a, int64_t count, int64_t n) {
  Tensor src;
  {
    NoGradGuard ng;
    src = a.detach().to(Device::cpu()).contiguous();
  }
  const int64_t blocks = (count + kLanes - 1) / kLanes, nn2 = n * n;
  std::vector<double> packed(static_cast<size_t>(blocks * nn2 * kLanes), 0.0);
  // 0x0 matrices: nothing to pack (and the lane offsets below would be applied to the empty vector's null data
  // pointer, undefined behaviour that clang's UBSan reports for cholesky of [3, 0, 0]).
  if (nn2 == 0) return packed;
  auto load = [&](auto* p) {
    for (int64_t b = 0; b < count; ++b) {
      double* dst = packed.data() + (b / kLanes) * nn2 * kLanes + (b % kLanes);
      const auto* m = p + b * nn2;
      for (int64_t e = 0; e < nn2; ++e) dst[e * kLanes] = static_cast<double>(m[e]);
    }
    for (int64_t b = count; b < blocks * kLanes; ++b)
      for (int64_t i = 0; i < n; ++i) packed[(b / kLanes) * nn2 * kLanes + (i * n + i) * kLanes + (b % kLanes)] = 1.0;
  };
  if (src.dtype() == DType::F32)
    load(src.impl()->ptr<float>());
  else
    load(src.impl()->ptr<double>());
  return packed;
}

// ---------------------------------------------------------------- cholesky
// The backward of cholesky written with tensor ops (so it runs on the factor's device, and is itself
// differentiable): P = Phi(L^T gL) (lower triangle, halved diagonal), S = L^{-T} P L^{-1}, gA = (S + S^T) / 2.
Tensor cholesky_backward_ops(const Tensor& Lf, const Tensor& gL) {
  Tensor Lt = Lf.transpose(-2, -1);
  const int64_t n = Lf.shape()[Lf.dim() - 1];
  Tensor phi = empty({n, n}, DType::F64);
  double* p = phi.impl()->ptr<double>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) p[i * n + j] = j < i ? 1.0 : (j == i ? 0.5 : 0.0);
  Tensor P = Lt.matmul(gL) * phi.to(Lf.dtype()).to(Lf.device());
  Tensor X = solve_triangular(Lt, P, true);                                      // L^{-T} P
  Tensor S = solve_triangular(Lt, X.transpose(-2, -1), true).transpose(-2, -1);  // X L^{-1}
  return (S + S.transpose(-2, -1)) * 0.5;
}

// The host-loop backward (one pass per matrix, no intermediate tensors); under create_graph the same formula
// from recorded ops.
struct CholeskyNode final : Node {
  detail::SavedTensor L;
  bool release_saved() override {
    const bool had = L.defined();
    L.reset();
    return had;
  }
  const char* name() const override { return "cholesky"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* gout, Tensor* gin) override {
    Tensor Lt = L.get("cholesky");
    if (grad_enabled()) {
      gin[0] = cholesky_backward_ops(Lt, gout[0]);
      return;
    }
    Batch l = host_batch(Lt), g = host_batch(gout[0]);
    const int64_t n = l.rows;
    for_batches(l.count, n, [&](int64_t b0, int64_t e0) {
      std::vector<double> P(static_cast<size_t>(n * n)), Y(static_cast<size_t>(n * n));
      for (int64_t b = b0; b < e0; ++b) {
        const double* Lm = l.mat(b);
        double* G = g.mat(b);
        // P = Phi(L^T gL): lower triangle, halved diagonal. Row axpys: P[i] += L[k][i] * G[k] (L[k][i] = 0, i > k).
        std::fill(P.begin(), P.end(), 0.0);
        for (int64_t k = 0; k < n; ++k)
          for (int64_t i = 0; i <= k; ++i) {
            const double lki = Lm[k * n + i];
            double* Pi = P.data() + i * n;
            const double* Gk = G + k * n;
            for (int64_t j = 0; j < n; ++j) Pi[j] += lki * Gk[j];
          }
        for (int64_t i = 0; i < n; ++i) {
          P[i * n + i] *= 0.5;
          for (int64_t j = i + 1; j < n; ++j) P[i * n + j] = 0.0;
        }
        // X = L^{-T} P, then Y = X L^{-1} computed as (L^{-T} X^T)^T.
        tri_solve(Lm, n, P.data(), n, false, true);
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < n; ++j) Y[i * n + j] = P[j * n + i];
        tri_solve(Lm, n, Y.data(), n, false, true);
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < n; ++j) G[i * n + j] = 0.5 * (Y[j * n + i] + Y[i * n + j]);
      }
    });
    gin[0] = to_like(g.t, gout[0]);
  }
};

// ---------------------------------------------------------------- solve_triangular
struct SolveTriangularNode final : Node {
  detail::SavedTensor T, X;
  bool upper = false;
  Shape t_shape, b_shape;
  bool release_saved() override {
    const bool had = T.defined() || X.defined();
    T.reset();
    X.reset();
    return had;
  }
  const char* name() const override { return "solve_triangular"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* gout, Tensor* gin) override {
    Tensor t = T.get(name()), x = X.get(name());
    // gB = T^{-T} gX;  gT = -gB X^T restricted to T's triangle.
    Tensor gB = solve_triangular(t.transpose(-2, -1), gout[0], !upper);
    if (needs_grad(1)) gin[1] = detail::sum_to(gB, b_shape);
    if (needs_grad(0)) {
      Tensor gT = -gB.matmul(x.transpose(-2, -1));
      const int64_t n = t.shape()[t.dim() - 1];
      Tensor mask = arange(n, DType::I64).unsqueeze(1).to(DType::F64);
      Tensor cols = arange(n, DType::I64).unsqueeze(0).to(DType::F64);
      Tensor keep = (upper ? mask.le(cols) : mask.ge(cols)).to(gT.dtype()).to(gT.device());
      gin[0] = detail::sum_to(gT * keep, t_shape);
    }
  }
};

// ---------------------------------------------------------------- eigh
// Symmetric eigendecomposition in f64: Householder reduction to tridiagonal form (accumulating the
// transformations), then the implicit QL method with Wilkinson-style shifts — about 9n^3 flops, against
// several sweeps of 6n^3 for cyclic Jacobi. Reads the lower triangle of `a` (row-major) and overwrites it.
// Eigenvalues w (ascending after the sort below) and eigenvectors as the columns of V.
void symmetric_eigh(double* a, int64_t n, double* w, double* V) {
  if (n == 0) return;
  std::vector<double> ev(static_cast<size_t>(n), 0.0);
  double* d = w;
  double* e = ev.data();
  auto v = [&](int64_t i, int64_t j) -> double& { return V[i * n + j]; };
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) v(i, j) = j <= i ? a[i * n + j] : a[j * n + i];
  // Householder tridiagonalisation (V holds the accumulated orthogonal transformation at the end).
  for (int64_t j = 0; j < n; ++j) d[j] = v(n - 1, j);
  for (int64_t i = n - 1; i > 0; --i) {
    double scale = 0.0, h = 0.0;
    for (int64_t k = 0; k < i; ++k) scale += std::abs(d[k]);
    if (scale == 0.0) {
      e[i] = d[i - 1];
      for (int64_t j = 0; j < i; ++j) {
        d[j] = v(i - 1, j);
        v(i, j) = 0.0;
        v(j, i) = 0.0;
      }
    } else {
      for (int64_t k = 0; k < i; ++k) {
        d[k] /= scale;
        h += d[k] * d[k];
      }
      double f = d[i - 1];
      double g = std::sqrt(h);
      if (f > 0) g = -g;
      e[i] = scale * g;
      h -= f * g;
      d[i - 1] = f - g;
      for (int64_t j = 0; j < i; ++j) e[j] = 0.0;
      for (int64_t j = 0; j < i; ++j) {
        f = d[j];
        v(j, i) = f;
        g = e[j] + v(j, j) * f;
        for (int64_t k = j + 1; k <= i - 1; ++k) {
          g += v(k, j) * d[k];
          e[k] += v(k, j) * f;
        }
        e[j] = g;
      }
      f = 0.0;
      for (int64_t j = 0; j < i; ++j) {
        e[j] /= h;
        f += e[j] * d[j];
      }
      const double hh = f / (h + h);
      for (int64_t j = 0; j < i; ++j) e[j] -= hh * d[j];
      for (int64_t j = 0; j < i; ++j) {
        f = d[j];
        g = e[j];
        for (int64_t k = j; k <= i - 1; ++k) v(k, j) -= (f * e[k] + g * d[k]);
        d[j] = v(i - 1, j);
        v(i, j) = 0.0;
      }
    }
    d[i] = h;
  }
  for (int64_t i = 0; i < n - 1; ++i) {
    v(n - 1, i) = v(i, i);
    v(i, i) = 1.0;
    const double h = d[i + 1];
    if (h != 0.0) {
      for (int64_t k = 0; k <= i; ++k) d[k] = v(k, i + 1) / h;
      for (int64_t j = 0; j <= i; ++j) {
        double g = 0.0;
        for (int64_t k = 0; k <= i; ++k) g += v(k, i + 1) * v(k, j);
        for (int64_t k = 0; k <= i; ++k) v(k, j) -= g * d[k];
      }
    }
    for (int64_t k = 0; k <= i; ++k) v(k, i + 1) = 0.0;
  }
  for (int64_t j = 0; j < n; ++j) {
    d[j] = v(n - 1, j);
    v(n - 1, j) = 0.0;
  }
  v(n - 1, n - 1) = 1.0;
  e[0] = 0.0;
  // Implicit QL on the tridiagonal (d, e), rotating V along.
  for (int64_t i = 1; i < n; ++i) e[i - 1] = e[i];
  e[n - 1] = 0.0;
  double f = 0.0, tst1 = 0.0;
  const double eps = std::numeric_limits<double>::epsilon();
  for (int64_t l = 0; l < n; ++l) {
    tst1 = std::max(tst1, std::abs(d[l]) + std::abs(e[l]));
    int64_t m = l;
    while (m < n && std::abs(e[m]) > eps * tst1) ++m;
    if (m > l) {
      for (int iter = 0; iter < 60 && std::abs(e[l]) > eps * tst1; ++iter) {
        double g = d[l];
        double p = (d[l + 1] - g) / (2.0 * e[l]);
        double r = std::hypot(p, 1.0);
        if (p < 0) r = -r;
        d[l] = e[l] / (p + r);
        d[l + 1] = e[l] * (p + r);
        const double dl1 = d[l + 1];
        double h = g - d[l];
        for (int64_t i = l + 2; i < n; ++i) d[i] -= h;
        f += h;
        p = d[m];
        double c = 1.0, c2 = 1.0, c3 = 1.0, s = 0.0, s2 = 0.0;
        const double el1 = e[l + 1];
        for (int64_t i = m - 1; i >= l; --i) {
          c3 = c2;
          c2 = c;
          s2 = s;
          g = c * e[i];
          h = c * p;
          r = std::hypot(p, e[i]);
          e[i + 1] = s * r;
          s = e[i] / r;
          c = p / r;
          p = c * d[i] - s * g;
          d[i + 1] = h + s * (c * g + s * d[i]);
          for (int64_t k = 0; k < n; ++k) {
            h = v(k, i + 1);
            v(k, i + 1) = s * v(k, i) + c * h;
            v(k, i) = c * v(k, i) - s * h;
          }
        }
        p = -s * s2 * c3 * el1 * e[l] / dl1;
        e[l] = s * p;
        d[l] = c * p;
      }
    }
    d[l] += f;
    e[l] = 0.0;
  }
  // The sort below reads the eigenvalues from the diagonal of `a` and the vectors from V.
  for (int64_t i = 0; i < n; ++i) a[i * n + i] = d[i];
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return a[x * n + x] < a[y * n + y]; });
  std::vector<double> Vs(static_cast<size_t>(n * n));
  for (int64_t j = 0; j < n; ++j) {
    w[j] = a[order[j] * n + order[j]];
    // Sign convention: the largest-magnitude component of each eigenvector is positive (deterministic).
    int64_t big = 0;
    for (int64_t i = 1; i < n; ++i)
      if (std::abs(V[i * n + order[j]]) > std::abs(V[big * n + order[j]])) big = i;
    const double sg = V[big * n + order[j]] < 0 ? -1.0 : 1.0;
    for (int64_t i = 0; i < n; ++i) Vs[i * n + j] = sg * V[i * n + order[j]];
  }
  std::copy(Vs.begin(), Vs.end(), V);
}

struct EighNode final : Node {
  detail::SavedTensor w, V;
  EighNode() { num_outputs = 2; }
  bool release_saved() override {
    const bool had = w.defined() || V.defined();
    w.reset();
    V.reset();
    return had;
  }
  const char* name() const override { return "eigh"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* gout, Tensor* gin) override {
    Tensor wv = w.get(name()), Vv = V.get(name());
    const int64_t n = wv.shape()[wv.dim() - 1];
    Tensor inner;  // V^T gA V in the eigenbasis
    if (gout[1].defined()) {
      Tensor VtgV = Vv.transpose(-2, -1).matmul(gout[1]);
      Tensor skew = (VtgV - VtgV.transpose(-2, -1)) * 0.5;
      Tensor E = wv.unsqueeze(-2) - wv.unsqueeze(-1);  // E_ij = w_j - w_i
      // Repeated eigenvalues make the eigenvectors' gradient undefined: say so rather than return inf/NaN.
      Tensor scale = wv.abs().max({-1}, true).unsqueeze(-1) + 1.0;
      Tensor gap = E.abs() + eye(n, wv.dtype(), wv.device()) * 1e300;
      const bool degenerate = (gap / scale).min().to(DType::F64).item<double>() <= 1e-10;
      OXM_CHECK(!degenerate || n <= 1, InvalidArgument,
                "eigh backward: the gradient through the eigenvectors is undefined for repeated eigenvalues "
                "(relative gap <= 1e-10); use only the eigenvalues or perturb the matrix");
      Tensor Ed = E + eye(n, wv.dtype(), wv.device());
      inner = skew / Ed * (1.0 - eye(n, wv.dtype(), wv.device()));
    }
    if (gout[0].defined()) {
      Tensor d = diag_embed(gout[0]);
      inner = inner.defined() ? inner + d : d;
    }
    gin[0] = Vv.matmul(inner).matmul(Vv.transpose(-2, -1));
  }
};

}  // namespace

namespace {
// cholesky on a device with the fused kernel: the tensor-op backward runs there.
struct CholeskyOpsNode final : Node {
  detail::SavedTensor L;
  bool release_saved() override {
    const bool had = L.defined();
    L.reset();
    return had;
  }
  const char* name() const override { return "cholesky"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* gout, Tensor* gin) override { gin[0] = cholesky_backward_ops(L.get("cholesky"), gout[0]); }
};
}  // namespace

namespace {
// cholesky and cholesky_ex: with `info` null a failing matrix is NotPositiveDefinite (a device waits for its
// check); otherwise *info gets torch's per-matrix codes (0, or the failing pivot + 1; i64 on a's device, no wait)
// and a failing matrix's factor is NaN.
Tensor cholesky_impl(const Tensor& a, Tensor* info) {
  const char* op = info ? "cholesky_ex" : "cholesky";
  check_square(a, op);
  const int64_t n = a.shape()[a.dim() - 1];
  const Shape batch(a.shape().data(), a.dim() - 2);
  const int64_t count = batch.product();
  if (!a.device().is_cpu() && count > 0) {
    // The fused CholeskySpd when the device offers it (asked before anything is allocated), else the host path.
    ops::FusedCall call = ops::CholeskySpdCall{a.impl(), count, n, nullptr, {}, {}};
    if (ops::fused_supported(call, a.device())) {
      Tensor src, L;
      {
        NoGradGuard ng;
        src = a.detach().contiguous();
        L = empty(a.shape(), a.dtype(), a.device());
        if (info) *info = empty(batch, DType::I64, a.device());
      }
      auto& c = std::get<ops::CholeskySpdCall>(call);
      c.a = src.impl();
      c.L = L.impl();
      if (info) c.report.info = info->impl();
      ops::run_fused(call, a.device());
      const detail::SpdFailure& fail = c.fail;
      OXM_CHECK(info || fail.batch < 0, NotPositiveDefinite, op, ": the matrix at batch index ",
                batch_index_str(fail.batch, a.shape()), " of shape ", a.shape(), " is not positive definite: pivot ",
                fail.pivot, " is ", fail.value, " (must be > 0)");
      if (detail::needs_tape(a)) {
        auto* node = new CholeskyOpsNode();
        node->next.push_back(detail::edge_of(a));
        node->L.save(L, true);
        detail::set_history(L, node);
      }
      return L;
    }
  }
  const int64_t blocks = (count + kLanes - 1) / kLanes, nn2 = n * n;
  std::vector<double> packed = soa_pack(a, count, n);
  std::vector<int64_t> fail(static_cast<size_t>(blocks * kLanes), -1);
  std::vector<double> bad(static_cast<size_t>(blocks * kLanes), 0.0);
  for_batches(blocks, n * 8, [&](int64_t b0, int64_t e0) {
    for (int64_t blk = b0; blk < e0; ++blk)
      chol_soa(packed.data() + blk * nn2 * kLanes, n, fail.data() + blk * kLanes, bad.data() + blk * kLanes);
  });
  if (info == nullptr)
    for (int64_t b = 0; b < count; ++b)
      OXM_CHECK(fail[b] < 0, NotPositiveDefinite, op, ": the matrix at batch index ", batch_index_str(b, a.shape()),
                " of shape ", a.shape(), " is not positive definite: pivot ", fail[b], " is ", bad[b],
                " (must be > 0)");
  Tensor L64 = empty(a.shape(), DType::F64);
  double* lp = L64.impl()->ptr<double>();
  for (int64_t b = 0; nn2 > 0 && b < count; ++b) {  // 0x0 matrices: packed is empty (its data() may be null)
    const double* src = packed.data() + (b / kLanes) * nn2 * kLanes + (b % kLanes);
    double* dst = lp + b * nn2;
    if (fail[b] >= 0) {
      std::fill(dst, dst + nn2, std::numeric_limits<double>::quiet_NaN());
      continue;
    }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) dst[i * n + j] = j <= i ? src[(i * n + j) * kLanes] : 0.0;
  }
  if (info) {
    Tensor codes = empty(batch, DType::I64);
    for (int64_t b = 0; b < count; ++b) codes.impl()->ptr<int64_t>()[b] = fail[b] < 0 ? 0 : fail[b] + 1;
    *info = codes.to(a.device());
  }
  Tensor L = to_like(L64, a);
  if (detail::needs_tape(a)) {
    auto* node = new CholeskyNode();
    node->next.push_back(detail::edge_of(a));
    node->L.save(L, true);
    detail::set_history(L, node);
  }
  return L;
}
}  // namespace

Tensor cholesky(const Tensor& a) { return cholesky_impl(a, nullptr); }

CholeskyExResult cholesky_ex(const Tensor& a, bool check_errors) {
  CholeskyExResult r;
  if (check_errors) {
    r.L = cholesky_impl(a, nullptr);
    r.info = zeros(Shape(a.shape().data(), a.dim() - 2), DType::I64, a.device());
    return r;
  }
  r.L = cholesky_impl(a, &r.info);
  return r;
}

namespace {
// The solution x of t x = b, with its history when t or b is differentiated.
Tensor record_solve_triangular(const Tensor& t, const Tensor& b, Tensor x, bool upper) {
  if (detail::needs_tape(t, b)) {
    auto* node = new SolveTriangularNode();
    node->next.push_back(detail::edge_of(t));
    node->next.push_back(detail::edge_of(b));
    node->upper = upper;
    node->t_shape = t.shape();
    node->b_shape = b.shape();
    node->T.save(t, false);
    node->X.save(x, true);
    detail::set_history(x, node);
  }
  return x;
}
}  // namespace

namespace {
// The right-hand side b [..., n, k] of a solve with the square matrix t [..., n, n]: dtype, device, n and
// the batch dims (broadcast); returns the batch shape. Checked before any factorisation, so a mis-shaped b is
// named as such even when the matrix would also fail.
Shape check_rhs(const Tensor& t, const Tensor& b, const char* op) {
  detail::check_defined(b, op, "b");
  OXM_CHECK(b.dim() >= 2, InvalidArgument, op, ": b must be [..., n, k], got shape ", b.shape());
  OXM_CHECK(b.dtype() == t.dtype(), DTypeMismatch, op, ": matrix is ", t.dtype(), " but b is ", b.dtype());
  OXM_CHECK(b.device() == t.device(), DeviceMismatch, op, ": matrix is on ", t.device(), " but b on ", b.device());
  const int64_t n = t.shape()[t.dim() - 1];
  OXM_CHECK(b.shape()[b.dim() - 2] == n, ShapeMismatch, op, ": matrix ", t.shape(), " and b ", b.shape(),
            " disagree on n");
  Shape tb(t.shape().data(), t.dim() - 2), bb(b.shape().data(), b.dim() - 2);
  return broadcast_shapes(tb, bb, op);
}
}  // namespace

Tensor solve_triangular(const Tensor& t, const Tensor& b, bool upper) {
  const char* op = "solve_triangular";
  check_square(t, op);
  const Shape batch = check_rhs(t, b, op);
  const int64_t n = t.shape()[t.dim() - 1];
  Shape ts = batch, bs = batch;
  ts.push_back(n);
  ts.push_back(n);
  bs.push_back(n);
  bs.push_back(b.shape()[b.dim() - 1]);
  const int64_t count = batch.product(), k = b.shape()[b.dim() - 1];
  if (!t.device().is_cpu() && count > 0 && k > 0) {
    ops::FusedCall call = ops::SolveTriangularSmallCall{t.impl(), nullptr, count, n, k, upper, {}, {}};
    if (ops::fused_supported(call, t.device())) {
      Tensor Tc, Xc;
      {
        NoGradGuard ng;
        Tc = t.detach().broadcast_to(ts).contiguous();
        Xc = b.detach().broadcast_to(bs).contiguous();
        if (Xc.shares_storage(b)) Xc = Xc.clone();  // solved in place
      }
      auto& c = std::get<ops::SolveTriangularSmallCall>(call);
      c.t = Tc.impl();
      c.x = Xc.impl();
      // No wait for the check (torch's solve_triangular does not check): a failure is thrown at the next read-back.
      c.report = detail::defer_check(t.device(), count, [ts](int64_t batch, int row, const char* when) {
        OXM_FAIL(InvalidArgument, "solve_triangular: the triangular matrix at batch index ", batch_index_str(batch, ts),
                 " has a zero on its diagonal at row ", row, " (singular; ", when, "; its solution is NaN)");
      });
      ops::run_fused(call, t.device());
      OXM_CHECK(c.fail.batch < 0, InvalidArgument, op, ": the triangular matrix at batch index ",
                batch_index_str(c.fail.batch, ts), " has a zero on its diagonal at row ", c.fail.pivot, " (singular)");
      return record_solve_triangular(t, b, Xc, upper);
    }
  }
  Batch T = host_batch(t.detach().broadcast_to(ts)), X = host_batch(b.detach().broadcast_to(bs));
  std::vector<int64_t> fail(static_cast<size_t>(T.count), -1);
  for_batches(T.count, n, [&](int64_t b0, int64_t e0) {
    for (int64_t i = b0; i < e0; ++i) fail[i] = tri_solve(T.mat(i), n, X.mat(i), X.cols, upper, false);
  });
  for (int64_t i = 0; i < T.count; ++i)
    OXM_CHECK(fail[i] < 0, InvalidArgument, op, ": the triangular matrix at batch index ", batch_index_str(i, ts),
              " has a zero on its diagonal at row ", fail[i], " (singular)");
  return record_solve_triangular(t, b, to_like(X.t, b), upper);
}

Tensor cholesky_solve(const Tensor& b, const Tensor& L) {
  return solve_triangular(L.transpose(-2, -1), solve_triangular(L, b, false), true);
}

Tensor solve(const Tensor& a, const Tensor& b) {
  check_square(a, "solve");
  detail::check_defined(b, "solve", "b");
  // torch's rule: b is a vector (batch) when it is 1-d or has exactly a's shape without the last dim.
  const bool vector = b.dim() == 1 || (b.dim() == a.dim() - 1 && b.shape() == Shape(a.shape().data(), a.dim() - 1));
  Tensor bm = vector ? b.unsqueeze(-1) : b;
  check_rhs(a, bm, "solve");
  Tensor x = cholesky_solve(bm, cholesky(a));
  return vector ? x.squeeze(-1) : x;
}

Tensor inverse(const Tensor& a) {
  check_square(a, "inverse");
  const int64_t n = a.shape()[a.dim() - 1];
  return cholesky_solve(eye(n, a.dtype(), a.device()), cholesky(a));
}

Tensor diag(const Tensor& a) {
  detail::check_defined(a, "diag");
  OXM_CHECK(a.dim() >= 1, InvalidArgument, "diag: needs at least one dim, got a 0-d tensor");
  if (a.dim() == 1) return diag_embed(a);
  return a.diagonal(0, -2, -1);
}

Tensor diag_embed(const Tensor& v) {
  detail::check_defined(v, "diag_embed");
  OXM_CHECK(v.dim() >= 1, InvalidArgument, "diag_embed: needs at least one dim, got a 0-d tensor");
  const int64_t n = v.shape()[v.dim() - 1];
  return v.unsqueeze(-1) * eye(n, v.dtype(), v.device());
}

Tensor trace(const Tensor& a) {
  check_square(a, "trace");
  return a.diagonal(0, -2, -1).sum({-1});
}

namespace {
// create_graph: gA = g a^{-1} from recorded ops (the inverse through cholesky and triangular solves, all
// differentiable), so the gradient knows how it depends on a.
Tensor logdet_backward_ops(const Tensor& a, const Tensor& g) { return g.unsqueeze(-1).unsqueeze(-1) * inverse(a); }

// logdet of SPD a with the fused backward gA = g a^{-1}, a^{-1} = L^{-T} L^{-1} from the saved factor (what
// torch's logdet backward computes, without going through the general Cholesky backward).
struct LogdetNode final : Node {
  std::vector<double> factors;  // SoA blocks of Cholesky factors, [blocks][n*n][kLanes]
  detail::SavedTensor a;        // the input, for the create_graph path (an alias: no copy)
  Shape in_shape;
  bool release_saved() override {
    const bool had = !factors.empty() || a.defined();
    factors = {};
    a.reset();
    return had;
  }
  const char* name() const override { return "logdet"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* gout, Tensor* gin) override {
    if (grad_enabled()) {
      gin[0] = logdet_backward_ops(a.get("logdet"), gout[0]);
      return;
    }
    const int64_t n = in_shape[in_shape.size() - 1];
    const int64_t count = n == 0 ? 0 : Shape(in_shape.data(), in_shape.size() - 2).product();
    Tensor g = gout[0].detach().to(Device::cpu()).to(DType::F64).contiguous();
    const double* gp = g.impl()->ptr<double>();
    Tensor out = empty(in_shape, DType::F64);
    double* op = out.impl()->ptr<double>();
    const int64_t blocks = (count + kLanes - 1) / kLanes;
    for_batches(blocks, n * 4, [&](int64_t b0, int64_t e0) {
      std::vector<double> inv(static_cast<size_t>(n * n * kLanes)), res(static_cast<size_t>(n * n * kLanes));
      for (int64_t blk = b0; blk < e0; ++blk) {
        double scale[kLanes];
        const int64_t lanes = std::min(kLanes, count - blk * kLanes);
        for (int64_t l = 0; l < kLanes; ++l) scale[l] = l < lanes ? gp[blk * kLanes + l] : 0.0;
        spd_inverse_soa(factors.data() + blk * n * n * kLanes, n, scale, inv.data(), res.data());
        for (int64_t l = 0; l < lanes; ++l) {
          double* O = op + (blk * kLanes + l) * n * n;
          for (int64_t e = 0; e < n * n; ++e) O[e] = res[e * kLanes + l];
        }
      }
    });
    gin[0] = to_like(out, gout[0]);
  }
};
}  // namespace

namespace {
// logdet on the tensor's own device when its backend has a kernel for it (backward g * a^{-1}, with the
// inverse computed in the forward pass only when a gradient will be needed).
struct LogdetInverseNode final : Node {
  detail::SavedTensor inv, a;  // a: the input, for the create_graph path (an alias: no copy)
  bool release_saved() override {
    const bool had = inv.defined() || a.defined();
    inv.reset();
    a.reset();
    return had;
  }
  const char* name() const override { return "logdet"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* gout, Tensor* gin) override {
    if (grad_enabled()) {
      gin[0] = logdet_backward_ops(a.get("logdet"), gout[0]);
      return;
    }
    Tensor g = gout[0].detach();
    gin[0] = g.unsqueeze(-1).unsqueeze(-1) * inv.get("logdet");
  }
};

bool logdet_on_device(const Tensor& a, int64_t count, int64_t n, const Shape& out_shape, Tensor& out) {
  ops::FusedCall call = ops::LogdetSpdCall{a.impl(), count, n, nullptr, nullptr, {}, {}};
  if (!ops::fused_supported(call, a.device())) return false;  // before allocating anything on the device
  const bool grad = detail::needs_tape(a);
  Tensor src, ld, inv;
  {
    NoGradGuard ng;
    src = a.detach().contiguous();
    ld = empty(out_shape, a.dtype(), a.device());
    if (grad) inv = empty(a.shape(), a.dtype(), a.device());
  }
  auto& c = std::get<ops::LogdetSpdCall>(call);
  c.a = src.impl();
  c.logdet = ld.impl();
  c.inverse = grad ? inv.impl() : nullptr;
  // No wait for the check (torch's logdet does not check at all): a failure is thrown at the next read-back.
  c.report = detail::defer_check(a.device(), count, [shape = a.shape()](int64_t batch, int pivot, const char* when) {
    OXM_FAIL(NotPositiveDefinite, "logdet: the matrix at batch index ", batch_index_str(batch, shape), " of shape ",
             shape, " is not positive definite: Cholesky pivot ", pivot, " is not > 0 (", when,
             "; its logdet is NaN); logdet supports symmetric positive definite matrices");
  });
  ops::run_fused(call, a.device());
  const detail::SpdFailure& fail = c.fail;
  OXM_CHECK(fail.batch < 0, NotPositiveDefinite, "logdet: the matrix at batch index ",
            batch_index_str(fail.batch, a.shape()), " of shape ", a.shape(),
            " is not positive definite: Cholesky pivot ", fail.pivot, " is ", fail.value,
            " (must be > 0); logdet supports symmetric positive definite matrices");
  if (grad) {
    auto* node = new LogdetInverseNode();
    node->next.push_back(detail::edge_of(a));
    node->inv.save(inv, false);
    node->a.save(a, false);
    detail::set_history(ld, node);
  }
  out = ld;
  return true;
}
}  // namespace

Tensor logdet(const Tensor& a) {
  check_square(a, "logdet");
  const int64_t n = a.shape()[a.dim() - 1];
  Shape out_shape(a.shape().data(), a.dim() - 2);
  const int64_t count = out_shape.product();
  if (!a.device().is_cpu() && count > 0) {
    Tensor out;
    if (logdet_on_device(a, count, n, out_shape, out)) return out;
  }
  const int64_t blocks = (count + kLanes - 1) / kLanes, nn2 = n * n;
  std::vector<double> factors = soa_pack(a, count, n);
  std::vector<int64_t> fail(static_cast<size_t>(blocks * kLanes), -1);
  std::vector<double> bad(static_cast<size_t>(blocks * kLanes), 0.0);
  Tensor ld = empty(out_shape, DType::F64);
  double* lp = ld.impl()->ptr<double>();
  for_batches(blocks, n * 8, [&](int64_t b0, int64_t e0) {
    for (int64_t blk = b0; blk < e0; ++blk) {
      double* f = factors.data() + blk * nn2 * kLanes;
      chol_soa(f, n, fail.data() + blk * kLanes, bad.data() + blk * kLanes);
      double acc[kLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int64_t i = 0; i < n; ++i)
        for (int64_t l = 0; l < kLanes; ++l) acc[l] += std::log(f[(i * n + i) * kLanes + l]);
      for (int64_t l = 0; l < kLanes && blk * kLanes + l < count; ++l) lp[blk * kLanes + l] = 2.0 * acc[l];
    }
  });
  for (int64_t b = 0; b < count; ++b)
    OXM_CHECK(fail[b] < 0, NotPositiveDefinite, "logdet: the matrix at batch index ", batch_index_str(b, a.shape()),
              " of shape ", a.shape(), " is not positive definite: Cholesky pivot ", fail[b], " is ", bad[b],
              " (must be > 0); logdet supports symmetric positive definite matrices");
  Tensor out = to_like(ld, a);
  if (detail::needs_tape(a)) {
    auto* node = new LogdetNode();
    node->next.push_back(detail::edge_of(a));
    node->factors = std::move(factors);
    node->a.save(a, false);
    node->in_shape = a.shape();
    detail::set_history(out, node);
  }
  return out;
}

Tensor det(const Tensor& a) { return logdet(a).exp(); }

EighResult eigh(const Tensor& a) {
  const char* op = "eigh";
  check_square(a, op);
  Batch m = host_batch(a);
  const int64_t n = m.rows;
  // Symmetry check, per matrix, relative to its largest magnitude.
  for (int64_t b = 0; b < m.count; ++b) {
    const double* A = m.mat(b);
    double amax = 0, worst = 0;
    int64_t wi = 0, wj = 0;
    for (int64_t i = 0; i < n * n; ++i) {
      // A NaN or inf has no eigendecomposition (LAPACK, hence torch, fails to converge): say where it is.
      OXM_CHECK(std::isfinite(A[i]), InvalidArgument, "eigh: the matrix at batch index ", batch_index_str(b, a.shape()),
                " holds ", A[i], " at [", i / n, "][", i % n, "]; eigenvalues of a non-finite matrix are undefined");
      amax = std::max(amax, std::abs(A[i]));
    }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = i + 1; j < n; ++j) {
        const double d = std::abs(A[i * n + j] - A[j * n + i]);
        if (d > worst || std::isnan(d)) {
          worst = d;
          wi = i;
          wj = j;
        }
      }
    OXM_CHECK(!(worst > EIGH_SYMMETRY_TOL * amax) && !std::isnan(worst), NotSymmetric,
              "eigh: the matrix at batch index ", batch_index_str(b, a.shape()), " is not symmetric: |a[", wi, "][", wj,
              "] - a[", wj, "][", wi, "]| = ", worst, " exceeds EIGH_SYMMETRY_TOL (", EIGH_SYMMETRY_TOL, ") x max|a| (",
              amax, "); symmetrise it explicitly if that is intended");
  }
  Shape ws(a.shape().data(), a.dim() - 1);
  Tensor w = zeros(ws, DType::F64), V = zeros(a.shape(), DType::F64);
  double* wp = w.impl()->ptr<double>();
  double* vp = V.impl()->ptr<double>();
  for_batches(m.count, 3 * n, [&](int64_t b0, int64_t e0) {  // ~9 n^3 flops per matrix
    for (int64_t b = b0; b < e0; ++b) symmetric_eigh(m.mat(b), n, wp + b * n, vp + b * n * n);
  });
  EighResult r{to_like(w, a), to_like(V, a)};
  if (detail::needs_tape(a)) {
    auto* node = new EighNode();
    node->next.push_back(detail::edge_of(a));
    node->w.save(r.eigenvalues, true);
    node->V.save(r.eigenvectors, true, 1);
    node->refcount.fetch_add(1);  // two outputs hold it
    detail::set_history(r.eigenvalues, node, 0);
    detail::set_history(r.eigenvectors, node, 1);
  }
  return r;
}

}  // namespace oxmera::linalg
