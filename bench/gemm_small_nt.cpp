// The measurement behind the small A B^T rule in src/backend/cpu/blas.cpp: for row-major C = A B^T (A [m, k],
// B [n, k]) on a grid of small shapes, OpenBLAS's own A B^T call against copying B^T out ([k, n]) and calling A B.
// f32 and f64, 1 thread; prints the best of 5 timings per form, their ratio, and whether the rule takes the copy.
// Links OpenBLAS directly (not oxmera). Usage: OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OPENBLAS_CORETYPE=SkylakeX
// gemm_small_nt
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace {

template <class F>
double best_us(F&& f, double mnk) {
  const int reps = std::max(10, static_cast<int>(5e7 / (mnk + 2e3)));
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) f();
    const auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count() / reps * 1e6);
  }
  return best;
}

// The rule of blas.cpp (small_nt_as_nn), repeated here so the table says which shapes it takes.
bool rule_takes(long m, long n, long k) {
  return m >= 64 && m >= 4 * k && m * n * k <= (1L << 19) && (n >= 2 || k <= 16);
}

void gemm(float, int m, int n, int k, const float* a, const float* b, bool tb, float* c) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, 1.f, a, k, b, tb ? k : n, 0.f, c,
              n);
}
void gemm(double, int m, int n, int k, const double* a, const double* b, bool tb, double* c) {
  cblas_dgemm(CblasRowMajor, CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0, a, k, b, tb ? k : n, 0.0, c,
              n);
}

template <class T>
void grid(const char* name) {
  std::printf("# %s: m n k | A B^T us | copy + A B us | ratio | rule takes the copy\n", name);
  for (int m : {16, 64, 256, 1024})
    for (int n : {1, 2, 8, 16, 32, 64, 128, 256})
      for (int k : {2, 8, 16, 32, 64, 128, 256}) {
        const double mnk = double(m) * n * k;
        if (mnk > double(1 << 21)) continue;
        std::vector<T> a(static_cast<size_t>(m) * k, T(0.5)), b(static_cast<size_t>(n) * k, T(0.25)),
            bt(static_cast<size_t>(n) * k), c(static_cast<size_t>(m) * n);
        const double nt = best_us([&] { gemm(T(), m, n, k, a.data(), b.data(), true, c.data()); }, mnk);
        const double nn = best_us(
            [&] {
              for (int p = 0; p < k; ++p)
                for (int j = 0; j < n; ++j) bt[static_cast<size_t>(p) * n + j] = b[static_cast<size_t>(j) * k + p];
              gemm(T(), m, n, k, a.data(), bt.data(), false, c.data());
            },
            mnk);
        std::printf("%5d %4d %4d | %9.3f | %9.3f | %5.2f | %s\n", m, n, k, nt, nn, nn / nt,
                    rule_takes(m, n, k) ? "yes" : "no");
      }
}

}  // namespace

int main() {
  grid<float>("sgemm");
  grid<double>("dgemm");
}
