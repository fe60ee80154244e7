// Latency of collectives: oxmera::distributed::all_reduce (descriptor check + data) against a bare MPI_Allreduce
// of the same bytes, and against the in-place MPI_Iallreduce + MPI_Test loop oxmera ran before its ring (Open MPI:
// libnbc's binomial tree). Run under mpirun: `mpirun -np 2 build-cpu/bench/oxmera_distributed_latency [ITERS]`.
// Rank 0 prints the median of 7 rounds of `iters` calls each, per call, for 1, 256 and 65536 f32 elements, and
// of iters / 100 calls (at least 5) for 1875000 (7.5 MB, the wide MLP's gradients: oxmera's ring, see
// OXMERA_ALLREDUCE_RING_BYTES).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <oxmera/oxmera.hpp>

namespace dist = oxmera::distributed;

template <class F>
double median_us(int iters, F&& f) {
  std::vector<double> rounds;
  for (int r = 0; r < 7; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) f();
    const auto t1 = std::chrono::steady_clock::now();
    rounds.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / iters);
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[3];
}

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 2000;
  dist::init();
  for (int64_t n : {int64_t{1}, int64_t{256}, int64_t{65536}, int64_t{1875000}}) {
    const int calls = n > 65536 ? std::max(5, iters / 100) : iters;
    oxmera::Tensor t = oxmera::ones({n});
    std::vector<float> raw(static_cast<size_t>(n), 1.0f);
    const double ox = median_us(calls, [&] { dist::all_reduce(t); });
    const double mpi = median_us(calls, [&] {
      MPI_Allreduce(MPI_IN_PLACE, raw.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    });
    const double nb = median_us(calls, [&] {
      MPI_Request req = MPI_REQUEST_NULL;
      MPI_Iallreduce(MPI_IN_PLACE, raw.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
      int done = 0;
      while (!done) MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    });
    if (dist::rank() == 0)
      std::printf(
          "all_reduce f32 [%lld] x %d ranks: oxmera %.2f us, MPI_Allreduce %.2f us (ratio %.2f), "
          "in-place MPI_Iallreduce %.2f us (ratio %.2f)\n",
          static_cast<long long>(n), dist::world_size(), ox, mpi, ox / mpi, nb, ox / nb);
  }
  dist::finalize();
  return 0;
}
