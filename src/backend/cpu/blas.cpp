#include "backend/cpu/blas.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "backend/cpu/parallel.hpp"
#include "oxmera/version.hpp"

namespace oxmera::detail {
namespace {

// CBLAS ABI (row-major = 101, no-trans = 111, trans = 112).
using sgemm_fn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*,
                          int);
using dgemm_fn = void (*)(int, int, int, int, int, int, double, const double*, int, const double*, int, double, double*,
                          int);
using set_threads_fn = void (*)(int);
using corename_fn = char* (*)();
using config_fn = char* (*)();

struct Blas {
  sgemm_fn sgemm = nullptr;
  dgemm_fn dgemm = nullptr;
  set_threads_fn set_threads = nullptr;
  std::string name = "builtin blocked GEMM (OpenBLAS not found)";
};

Blas* g_blas = nullptr;
std::once_flag g_once;

// The OpenBLAS kernel family for this CPU, chosen by features rather than model numbers (OpenBLAS 0.3.21
// misdetects recent CPUs and falls back to SSE3 kernels).
const char* pick_coretype() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return nullptr;
}

void load() {
  auto* b = new Blas();
  g_blas = b;
  if (const char* off = std::getenv("OXMERA_NO_BLAS"); off && *off && std::string(off) != "0") {
    b->name = "builtin blocked GEMM (OXMERA_NO_BLAS set)";
    return;
  }
  // An explicit OPENBLAS_CORETYPE from the user wins; otherwise choose one before the library loads.
  std::string origin = "set by oxmera from CPU features";
  if (const char* ct = std::getenv("OPENBLAS_CORETYPE"); ct && *ct) {
    origin = "from OPENBLAS_CORETYPE";
  } else if (const char* pick = pick_coretype()) {
    setenv("OPENBLAS_CORETYPE", pick, 0);
  }
  // The OpenMP build shares our OpenMP thread pool (no competing spinning pools).
  const char* candidates[] = {
      "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0",
      "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
      "/usr/lib/aarch64-linux-gnu/openblas-openmp/libopenblas.so.0",
      "/usr/lib/aarch64-linux-gnu/openblas-pthread/libopenblas.so.0",
      "libopenblas.so.0",
  };
  // A library that exists but does not load (typically a missing dependency such as libgfortran.so.5) must not
  // fall back quietly: its loader message goes into the name that `oxmera doctor` shows.
  std::string load_error;
  for (const char* path : candidates) {
    void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* why = dlerror();
      if (why && load_error.empty() && std::string(why).find("No such file") == std::string::npos) load_error = why;
      continue;
    }
    auto s = reinterpret_cast<sgemm_fn>(dlsym(h, "cblas_sgemm"));
    auto d = reinterpret_cast<dgemm_fn>(dlsym(h, "cblas_dgemm"));
    if (!s || !d) {
      dlclose(h);
      continue;
    }
    b->sgemm = s;
    b->dgemm = d;
    b->set_threads = reinterpret_cast<set_threads_fn>(dlsym(h, "openblas_set_num_threads"));
    auto core = reinterpret_cast<corename_fn>(dlsym(h, "openblas_get_corename"));
    auto cfg = reinterpret_cast<config_fn>(dlsym(h, "openblas_get_config"));
    b->name = std::string(cfg ? cfg() : "OpenBLAS") + " core=" + (core ? core() : "?") + " (" + origin + ")";
    if (b->set_threads) b->set_threads(process_cpu_threads());
    return;
  }
  if (!load_error.empty()) b->name = "builtin blocked GEMM (OpenBLAS found but not loaded: " + load_error + ")";
}

Blas& blas() {
  std::call_once(g_once, load);
  return *g_blas;
}

// Portable fallback: C += alpha * A @ B with i-k-j loops over row-major data (after beta scaling).
template <class T>
void fallback_gemm(const GemmArgs& g, T alpha, const T* a, const T* b, T beta, T* c) {
  for (int64_t i = 0; i < g.m; ++i) {
    T* crow = c + i * g.ldc;
    for (int64_t j = 0; j < g.n; ++j) crow[j] = beta == T(0) ? T(0) : crow[j] * beta;
    for (int64_t p = 0; p < g.k; ++p) {
      T av = alpha * (g.trans_a ? a[p * g.lda + i] : a[i * g.lda + p]);
      if (!g.trans_b) {
        const T* brow = b + p * g.ldb;
        for (int64_t j = 0; j < g.n; ++j) crow[j] += av * brow[j];
      } else {
        for (int64_t j = 0; j < g.n; ++j) crow[j] += av * b[j * g.ldb + p];
      }
    }
  }
}

// OpenBLAS 0.3.21 sends a small row-major A B^T (its column-major TN) with a short k to the general path (packing
// both operands) rather than its small-matrix kernels, which it does take for A B. Measured here (bench/
// gemm_small_nt.cpp, 1 thread, AVX-512): copying B^T out ([n, k] -> [k, n]) and multiplying A B is 0.2-0.9x the
// time of the A B^T call when m >= 64, m >= 4k and m n k <= 2^19 (the copy is amortised over m rows), and never
// slower there; outside that region the copy costs more than it saves. A [1, k] B needs no copy at all.
constexpr int64_t kSmallNtMaxMnk = int64_t(1) << 19;
constexpr int64_t kSmallNtMaxBElems = kSmallNtMaxMnk / 64;

bool small_nt_as_nn(const GemmArgs& g) {
  if (g.trans_a || !g.trans_b || g.m < 64 || g.m < 4 * g.k || g.m * g.n * g.k > kSmallNtMaxMnk) return false;
  return g.n >= 2 || g.k <= 16;
}

// B [n, k] (row stride ldb) -> scratch [k, n] row-major; returns the NN call's arguments.
template <class T>
const T* transpose_b(const GemmArgs& g, const T* b, GemmArgs& nn) {
  nn = g;
  nn.trans_b = false;
  if (g.n == 1) {  // a single row of B is its own transpose (a column with unit stride)
    nn.ldb = 1;
    return b;
  }
  alignas(64) thread_local T scratch[kSmallNtMaxBElems];
  for (int64_t p = 0; p < g.k; ++p)
    for (int64_t j = 0; j < g.n; ++j) scratch[p * g.n + j] = b[j * g.ldb + p];
  nn.ldb = g.n;
  return scratch;
}

}  // namespace

bool blas_available() { return blas().sgemm != nullptr; }
void blas_set_threads(int n) {
  if (g_blas && g_blas->set_threads) g_blas->set_threads(n);
}

void sgemm(const GemmArgs& g, float alpha, const float* a, const float* b, float beta, float* c) {
  Blas& bl = blas();
  if (bl.sgemm && g.m > 0 && g.n > 0 && g.k > 0) {
    if (small_nt_as_nn(g)) {
      GemmArgs nn;
      const float* bt = transpose_b(g, b, nn);
      bl.sgemm(101, 111, 111, int(nn.m), int(nn.n), int(nn.k), alpha, a, int(nn.lda), bt, int(nn.ldb), beta, c,
               int(nn.ldc));
      return;
    }
    bl.sgemm(101, g.trans_a ? 112 : 111, g.trans_b ? 112 : 111, int(g.m), int(g.n), int(g.k), alpha, a, int(g.lda), b,
             int(g.ldb), beta, c, int(g.ldc));
    return;
  }
  fallback_gemm(g, alpha, a, b, beta, c);
}
void dgemm(const GemmArgs& g, double alpha, const double* a, const double* b, double beta, double* c) {
  Blas& bl = blas();
  if (bl.dgemm && g.m > 0 && g.n > 0 && g.k > 0) {
    if (small_nt_as_nn(g)) {
      GemmArgs nn;
      const double* bt = transpose_b(g, b, nn);
      bl.dgemm(101, 111, 111, int(nn.m), int(nn.n), int(nn.k), alpha, a, int(nn.lda), bt, int(nn.ldb), beta, c,
               int(nn.ldc));
      return;
    }
    bl.dgemm(101, g.trans_a ? 112 : 111, g.trans_b ? 112 : 111, int(g.m), int(g.n), int(g.k), alpha, a, int(g.lda), b,
             int(g.ldb), beta, c, int(g.ldc));
    return;
  }
  fallback_gemm(g, alpha, a, b, beta, c);
}

}  // namespace oxmera::detail

namespace oxmera {
const char* blas_name() { return detail::blas().name.c_str(); }
}  // namespace oxmera
