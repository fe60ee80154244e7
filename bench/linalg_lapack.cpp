// oxmera's own f64 host kernels vs LAPACK (OpenBLAS) for the research workload's shapes: batches of 192
// SPD matrices of 4x4 and 16x16, f64.
//
//   oxmera::linalg::cholesky  vs dpotrf_ ('L') called per matrix
//   oxmera::linalg::eigh      vs dsyevd_ ('V', 'L') called per matrix (workspace queried once)
//
// The oxmera side is the public call on a f64 tensor without grad (it includes the host f64 copy of the
// batch and the result tensor); the LAPACK side includes a memcpy of the batch into a work buffer (dpotrf
// and dsyevd overwrite their input). LAPACK is dlopen'ed from the OpenBLAS oxmera uses (OpenMP build) and
// called from one thread; oxmera uses its own thread count (OMP_NUM_THREADS). Prints min and median
// microseconds per batch over REPS timed batches after a warm-up, and the max difference between results.
//
//   build-la/bench/linalg_lapack [reps] [libopenblas path]
//   OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 build-la/bench/linalg_lapack 400
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "oxmera/oxmera.hpp"

namespace ox = oxmera;

namespace {

using potrf_t = void (*)(const char*, const int*, double*, const int*, int*);
using syevd_t = void (*)(const char*, const char*, const int*, double*, const int*, double*, double*, const int*, int*,
                         const int*, int*);

struct Stats {
  double min_us, med_us;
};

Stats time_it(int reps, const std::function<void()>& f) {
  for (int i = 0; i < std::max(10, reps / 10); ++i) f();  // warm-up
  std::vector<double> t(static_cast<size_t>(reps));
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    auto t1 = std::chrono::steady_clock::now();
    t[static_cast<size_t>(i)] = std::chrono::duration<double, std::micro>(t1 - t0).count();
  }
  std::sort(t.begin(), t.end());
  return {t.front(), t[t.size() / 2]};
}

volatile double g_sink = 0;

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 300;
  const char* lib = argc > 2 ? argv[2] : "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0";
  void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    std::fprintf(stderr, "dlopen %s: %s\n", lib, dlerror());
    return 1;
  }
  auto potrf = reinterpret_cast<potrf_t>(dlsym(h, "dpotrf_"));
  auto syevd = reinterpret_cast<syevd_t>(dlsym(h, "dsyevd_"));
  if (!potrf || !syevd) {
    std::fprintf(stderr, "%s lacks dpotrf_/dsyevd_\n", lib);
    return 1;
  }
  const char* core = std::getenv("OPENBLAS_CORETYPE");
  std::printf("oxmera threads %d, blas %s, LAPACK %s (OPENBLAS_CORETYPE=%s), reps %d\n", ox::get_num_threads(),
              ox::blas_name(), lib, core ? core : "unset", reps);
  std::printf("%-9s %-8s %22s %22s %8s %10s\n", "op", "shape", "oxmera us (min / med)", "LAPACK us (min / med)",
              "ratio", "max|diff|");
  const int64_t B = 192;
  for (int64_t n : {4, 16}) {
    ox::NoGradGuard ng;
    ox::Tensor x = ox::randn({B, n, n}, 11, ox::DType::F64);
    ox::Tensor a =
        (x.matmul(x.transpose(-2, -1)) / static_cast<double>(n) + ox::eye(n, ox::DType::F64) * 0.5).contiguous();
    const std::vector<double> av = a.to_vector<double>();
    const int ni = static_cast<int>(n);
    std::vector<double> work(av.size());
    char shape[32];
    std::snprintf(shape, sizeof shape, "192x%lldx%lld", static_cast<long long>(n), static_cast<long long>(n));

    // ---- Cholesky
    ox::Tensor L;
    Stats so = time_it(reps, [&] {
      L = ox::linalg::cholesky(a);
      g_sink = g_sink + static_cast<double>(L.numel());
    });
    Stats sl = time_it(reps, [&] {
      std::memcpy(work.data(), av.data(), av.size() * sizeof(double));
      for (int64_t b = 0; b < B; ++b) {
        int info = 0;
        // Row-major lower == column-major upper: ask LAPACK for 'U' on the same memory.
        potrf("U", &ni, work.data() + b * n * n, &ni, &info);
        if (info != 0) std::abort();
      }
      g_sink = g_sink + work[0];
    });
    std::vector<double> Lv = L.to_vector<double>();
    double dchol = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j <= i; ++j)
          dchol = std::max(dchol, std::abs(Lv[b * n * n + i * n + j] - work[b * n * n + i * n + j]));
    std::printf("%-9s %-8s %10.1f / %9.1f %10.1f / %9.1f %8.2f %10.1e\n", "cholesky", shape, so.min_us, so.med_us,
                sl.min_us, sl.med_us, so.med_us / sl.med_us, dchol);

    // ---- eigh
    int lwork = -1, liwork = -1, info = 0, iq = 0;
    double wq = 0;
    std::vector<double> w(static_cast<size_t>(B * n));
    syevd("V", "U", &ni, work.data(), &ni, w.data(), &wq, &lwork, &iq, &liwork, &info);
    lwork = static_cast<int>(wq);
    liwork = iq;
    std::vector<double> wk(static_cast<size_t>(lwork));
    std::vector<int> iwk(static_cast<size_t>(liwork));
    ox::linalg::EighResult E;
    Stats eo = time_it(reps, [&] {
      E = ox::linalg::eigh(a);
      g_sink = g_sink + static_cast<double>(E.eigenvalues.numel());
    });
    Stats el = time_it(reps, [&] {
      std::memcpy(work.data(), av.data(), av.size() * sizeof(double));
      for (int64_t b = 0; b < B; ++b) {
        int inf = 0;
        syevd("V", "U", &ni, work.data() + b * n * n, &ni, w.data() + b * n, wk.data(), &lwork, iwk.data(), &liwork,
              &inf);
        if (inf != 0) std::abort();
      }
      g_sink = g_sink + w[0];
    });
    std::vector<double> ev = E.eigenvalues.to_vector<double>();
    double deig = 0;
    for (size_t i = 0; i < ev.size(); ++i) deig = std::max(deig, std::abs(ev[i] - w[i]));
    std::printf("%-9s %-8s %10.1f / %9.1f %10.1f / %9.1f %8.2f %10.1e\n", "eigh", shape, eo.min_us, eo.med_us,
                el.min_us, el.med_us, eo.med_us / el.med_us, deig);
  }
  return 0;
}
