// OpenBLAS's sgemm (the library oxmera's CPU GEMM loads, with the core type oxmera picks) against oneDNN 2.6's
// dnnl_sgemm on the char transformer's and the CNN's GEMM shapes, row-major f32, 1 thread. Each round times 30 calls
// of one then 30 of the other; prints the medians over 15 rounds and the median (min-max) of the per-round ratios.
// Built only where libdnnl-dev is installed (links OpenBLAS and oneDNN directly, not oxmera).
// Usage: OMP_NUM_THREADS=1 OPENBLAS_CORETYPE=SkylakeX gemm_vs_onednn
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include <oneapi/dnnl/dnnl.h>

extern "C" char* openblas_get_corename();

int main() {
  using Clock = std::chrono::steady_clock;
  struct Shape {
    char ta, tb;
    int m, n, k;
    const char* what;
  };
  const Shape shapes[] = {
      {'N', 'T', 1024, 192, 64, "qkv projection"},  {'N', 'T', 1024, 64, 64, "out projection"},
      {'N', 'T', 1024, 256, 64, "feed-forward 1"},  {'N', 'T', 1024, 64, 256, "feed-forward 2"},
      {'N', 'N', 1024, 64, 192, "qkv input grad"},  {'T', 'N', 192, 64, 1024, "qkv weight grad"},
      {'N', 'N', 1024, 256, 64, "ff2 input grad"},  {'T', 'N', 64, 256, 1024, "ff2 weight grad"},
      {'N', 'T', 64, 64, 16, "attention scores"},   {'N', 'N', 64, 16, 64, "attention x V"},
      {'N', 'N', 6272, 8, 9, "conv1-like columns"}, {'N', 'N', 12544, 16, 72, "conv2-like columns"}};
  std::printf("# OpenBLAS core %s, 1 thread; us per call\n", openblas_get_corename());
  for (const Shape& s : shapes) {
    const int lda = s.ta == 'N' ? s.k : s.m, ldb = s.tb == 'N' ? s.n : s.k;
    std::vector<float> a(static_cast<size_t>(s.m) * s.k, 0.5f), b(static_cast<size_t>(s.k) * s.n, 0.25f),
        c(static_cast<size_t>(s.m) * s.n);
    auto openblas = [&] {
      cblas_sgemm(CblasRowMajor, s.ta == 'N' ? CblasNoTrans : CblasTrans, s.tb == 'N' ? CblasNoTrans : CblasTrans, s.m,
                  s.n, s.k, 1.f, a.data(), lda, b.data(), ldb, 0.f, c.data(), s.n);
    };
    auto onednn = [&] { dnnl_sgemm(s.ta, s.tb, s.m, s.n, s.k, 1.f, a.data(), lda, b.data(), ldb, 0.f, c.data(), s.n); };
    auto time_us = [](auto&& fn) {
      const auto t0 = Clock::now();
      for (int i = 0; i < 30; ++i) fn();
      return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 30;
    };
    for (int i = 0; i < 10; ++i) {
      openblas();
      onednn();
    }
    std::vector<double> to, td, ratio;
    for (int r = 0; r < 15; ++r) {
      const double x = time_us(openblas), y = time_us(onednn);
      to.push_back(x);
      td.push_back(y);
      ratio.push_back(y / x);
    }
    for (auto* v : {&to, &td, &ratio}) std::sort(v->begin(), v->end());
    std::printf("%-20s M %5d N %4d K %5d  openblas %8.1f  onednn %8.1f  onednn/openblas %.2f (%.2f-%.2f)\n", s.what,
                s.m, s.n, s.k, to[7], td[7], ratio[7], ratio.front(), ratio.back());
  }
  return 0;
}
