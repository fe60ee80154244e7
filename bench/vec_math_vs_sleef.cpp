// The measurement behind the choice of own vectorised math over SLEEF (docs/ARCHITECTURE.md, "Vectorised math"):
// exp, tanh and erf over 4M contiguous elements (a [1024, 4096] tensor), f32 and f64, at the AVX2 level the kernels
// are built for: oxmera's vm:: functions in a plain loop the compiler vectorises, against SLEEF 3.5's AVX2 vector
// functions (Sleef_*f8_u10avx2 / *d4_u10avx2, 1-ulp) called per vector. Also prints each side's max ULP error
// against the long double C library on the same data. Built only where libsleef-dev is installed:
//   ./build/bench/vec_math_vs_sleef [reps]
#include <sleef.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "backend/cpu/vec_math.hpp"

namespace vm = oxmera::detail::vm;

namespace {

template <class F>
double best_ms(int reps, F&& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

template <class T>
double max_ulp(const std::vector<T>& x, const std::vector<T>& y, long double (*ref)(long double)) {
  double m = 0;
  for (size_t i = 0; i < x.size(); i += 7) {
    const long double r = ref(x[i]);
    const T a = std::fabs(static_cast<T>(r));
    const T sp = std::nextafter(a, T(INFINITY)) - a;
    m = std::max(m, static_cast<double>(std::fabs(y[i] - r) / sp));
  }
  return m;
}

template <class T, class Own, class Sleef>
void compare(const char* name, const std::vector<T>& x, int reps, Own own, Sleef sleef,
             long double (*ref)(long double)) {
  std::vector<T> y(x.size()), z(x.size());
  const size_t n = x.size();
  const double t_own = best_ms(reps, [&] {
    for (size_t i = 0; i < n; ++i) y[i] = own(x[i]);
  });
  const double t_sleef = best_ms(reps, [&] { sleef(x.data(), z.data(), n); });
  std::printf("%-5s %s  own %7.3f ms  sleef %7.3f ms  own/sleef %.2f   max ulp own %.2f sleef %.2f\n", name,
              sizeof(T) == 4 ? "f32" : "f64", t_own, t_sleef, t_own / t_sleef, max_ulp(x, y, ref), max_ulp(x, z, ref));
}

#define SLEEF_LOOP(T, VT, W, load, store, fn)                    \
  [](const T* in, T* out, size_t n) {                            \
    size_t i = 0;                                                \
    for (; i + W <= n; i += W) store(out + i, fn(load(in + i))); \
    for (; i < n; ++i) out[i] = in[i];                           \
  }

long double ld_exp(long double v) { return std::exp(v); }
long double ld_tanh(long double v) { return std::tanh(v); }
long double ld_erf(long double v) { return std::erf(v); }

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 10;
  const size_t n = 1024 * 4096;
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> d(-4, 4);
  std::vector<float> xf(n);
  std::vector<double> xd(n);
  for (size_t i = 0; i < n; ++i) xd[i] = xf[i] = static_cast<float>(d(rng));
  compare<float>(
      "exp", xf, reps, [](float v) { return vm::exp(v); },
      SLEEF_LOOP(float, __m256, 8, _mm256_loadu_ps, _mm256_storeu_ps, Sleef_expf8_u10avx2), ld_exp);
  compare<float>(
      "tanh", xf, reps, [](float v) { return vm::tanh(v); },
      SLEEF_LOOP(float, __m256, 8, _mm256_loadu_ps, _mm256_storeu_ps, Sleef_tanhf8_u10avx2), ld_tanh);
  compare<float>(
      "erf", xf, reps, [](float v) { return vm::erf(v); },
      SLEEF_LOOP(float, __m256, 8, _mm256_loadu_ps, _mm256_storeu_ps, Sleef_erff8_u10avx2), ld_erf);
  compare<double>(
      "exp", xd, reps, [](double v) { return vm::exp(v); },
      SLEEF_LOOP(double, __m256d, 4, _mm256_loadu_pd, _mm256_storeu_pd, Sleef_expd4_u10avx2), ld_exp);
  compare<double>(
      "tanh", xd, reps, [](double v) { return vm::tanh(v); },
      SLEEF_LOOP(double, __m256d, 4, _mm256_loadu_pd, _mm256_storeu_pd, Sleef_tanhd4_u10avx2), ld_tanh);
  compare<double>(
      "erf", xd, reps, [](double v) { return vm::erf(v); },
      SLEEF_LOOP(double, __m256d, 4, _mm256_loadu_pd, _mm256_storeu_pd, Sleef_erfd4_u10avx2), ld_erf);
  return 0;
}
