#pragma once
// Intra-op parallelism on the CPU: OpenMP, only above a grain size where a fork/join pays for itself,
// and never nested (inside a parallel region work runs serially).
#include <algorithm>
#include <cstdint>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace oxmera::detail {

// The intra-op thread count of the calling thread: its own (set_thread_cpu_threads) if set, else the process-wide
// one (set_num_threads, else OMP_NUM_THREADS / the hardware's).
int cpu_threads() noexcept;
int process_cpu_threads() noexcept;
// The calling thread's own count (0: the process-wide one again); the DataLoader's workers run with 1, as torch's.
// oxmera's kernels follow it; BLAS keeps the process-wide count (OpenBLAS has one for the process).
void set_thread_cpu_threads(int n) noexcept;

// Calls fn(begin, end) over [0, n) split into contiguous ranges, one per thread when n >= grain.
template <class F>
void parallel_for(int64_t n, int64_t grain, F&& fn) {
  if (n <= 0) return;
#ifdef _OPENMP
  int threads = cpu_threads();
  if (threads > 1 && n >= grain && !omp_in_parallel()) {
    int64_t chunks = std::min<int64_t>(threads, (n + grain / 2) / std::max<int64_t>(grain / 2, 1));
    chunks = std::max<int64_t>(chunks, 1);
    if (chunks > 1) {
#pragma omp parallel num_threads(static_cast <int>(chunks))
      {
        int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
        int64_t b = n * t / nt, e = n * (t + 1) / nt;
        if (b < e) fn(b, e);
      }
      return;
    }
  }
#endif
  fn(int64_t{0}, n);
}

}  // namespace oxmera::detail
