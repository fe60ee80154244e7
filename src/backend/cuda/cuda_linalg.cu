// Small batched linear algebra of f32 matrices (n <= kSpdMaxN) on the device, f64 arithmetic (spd_math.hpp,
// host-tested): log-determinant (+ inverse for its backward) and Cholesky factor, one warp per matrix on an f64 tile
// in shared memory; triangular solves, one thread per (matrix, right-hand column) with a per-thread work column.
// Failing matrices are reported as the call's ops::SpdReport asks (per-matrix info, an atomic min into a first-failure
// word that the host reads later: no wait); with an empty report one small device-to-host copy per call reads the
// flags.
#include <optional>
#include <type_traits>
#include <vector>

#include "backend/common/spd_math.hpp"
#include "backend/cuda/cuda_common.cuh"

namespace oxmera::detail::cuda {
namespace {

constexpr int kLinalgThreads = 64;  // per block of the triangular solves (their per-thread work columns)

#define OXM_LINALG_LOOP(i, n)                                                            \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// Where a kernel writes each matrix's outcome: the flags the host reads back (pivot, value), or the call's
// SpdReport (info, first); unused ones are null.
struct Report {
  int* pivot = nullptr;
  double* value = nullptr;
  int64_t* info = nullptr;
  unsigned long long* first = nullptr;
  int64_t tag = 0;
};

__device__ void report(const Report& r, int64_t b, int pivot, double value) {
  if (r.pivot) r.pivot[b] = pivot;
  if (r.value) r.value[b] = value;
  if (r.info) r.info[b] = pivot < 0 ? 0 : pivot + 1;
  if (r.first && pivot >= 0) atomicMin(r.first, static_cast<unsigned long long>(spd_failure_key(r.tag, b, pivot)));
}

// One warp per matrix (spd_math.hpp's spd_warp_*): kSpdWarps matrices per block, each warp on its own f64 tile.
constexpr int kSpdWarps = 4;  // 4 tiles of 32 x 33 doubles: 33 KiB of shared memory per block

struct LaneOfWarp {  // spd_math.hpp's Warp on the device
  int lane;
  template <class F>
  __device__ void each(F&& f) const {
    f(lane);
  }
  __device__ void sync() const { __syncwarp(); }
};

// Each warp walks matrices b = its global warp index, + the grid's warps (uniform within the warp: its lanes
// stay together at every __syncwarp).
#define OXM_SPD_WARP_LOOP(b, count)                                                                         \
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * kSpdWarps + threadIdx.x / kSpdWarpLanes; b < (count); \
       b += static_cast<int64_t>(gridDim.x) * kSpdWarps)

__global__ void __launch_bounds__(kSpdWarpLanes* kSpdWarps)
    spd_logdet_kernel(const float* a, int64_t count, int n, float* logdet, float* inv, Report r) {
  __shared__ double tiles[kSpdWarps][kSpdWarpTile];
  const LaneOfWarp w{static_cast<int>(threadIdx.x % kSpdWarpLanes)};
  double* m = tiles[threadIdx.x / kSpdWarpLanes];
  OXM_SPD_WARP_LOOP(b, count) {
    const int64_t nn = static_cast<int64_t>(n) * n;
    const SpdPivot p = spd_warp_logdet_inverse(w, a + b * nn, n, m, logdet + b, inv ? inv + b * nn : nullptr);
    if (w.lane == 0) report(r, b, p.pivot, p.value);
  }
}

__global__ void __launch_bounds__(kSpdWarpLanes* kSpdWarps)
    spd_cholesky_kernel(const float* a, int64_t count, int n, float* L, Report r) {
  __shared__ double tiles[kSpdWarps][kSpdWarpTile];
  const LaneOfWarp w{static_cast<int>(threadIdx.x % kSpdWarpLanes)};
  double* m = tiles[threadIdx.x / kSpdWarpLanes];
  OXM_SPD_WARP_LOOP(b, count) {
    const int64_t nn = static_cast<int64_t>(n) * n;
    const SpdPivot p = spd_warp_cholesky(w, a + b * nn, n, m, L + b * nn);
    if (w.lane == 0) report(r, b, p.pivot, p.value);
  }
}
#undef OXM_SPD_WARP_LOOP

// Thread (b, c) solves column c of matrix b; every column of a matrix meets the same zero diagonal first, so
// column 0 alone reports it.
template <int N>
__global__ void __launch_bounds__(kLinalgThreads)
    tri_solve_kernel(const float* t, float* x, int64_t count, int n, int64_t k, bool upper, Report r) {
  double work[N];
  OXM_LINALG_LOOP(id, count * k) {
    const int64_t b = id / k, c = id % k;
    const int row = tri_solve_column(t + b * n * n, n, x + b * n * k + c, k, upper, work);
    if (c == 0) report(r, b, row, 0.0);
  }
}

unsigned grid_for(int64_t threads) {
  const int64_t want = (threads + kLinalgThreads - 1) / kLinalgThreads, cap = 64LL * sm_count();
  return static_cast<unsigned>(want < 1 ? 1 : (want < cap ? want : cap));
}
// Blocks for `count` matrices at kSpdWarps per block.
unsigned grid_for_matrices(int64_t count) {
  const int64_t want = (count + kSpdWarps - 1) / kSpdWarps, cap = 32LL * sm_count();
  return static_cast<unsigned>(want < 1 ? 1 : (want < cap ? want : cap));
}

// Calls f(std::integral_constant<int, N>) with the smallest N in {4, 8, 16, 32} that holds n.
template <class F>
void with_size(int64_t n, F&& f) {
  if (n <= 4)
    f(std::integral_constant<int, 4>{});
  else if (n <= 8)
    f(std::integral_constant<int, 8>{});
  else if (n <= 16)
    f(std::integral_constant<int, 16>{});
  else
    f(std::integral_constant<int, kSpdMaxN>{});
}

// The first failing matrix from the per-matrix flags (pivot -1 = fine), with its value when `value` is given.
SpdFailure read_failure(const int* pivot, const double* value, int64_t count, const char* op) {
  std::vector<int> host(static_cast<size_t>(count));
  check(cudaMemcpyAsync(host.data(), pivot, host.size() * sizeof(int), cudaMemcpyDeviceToHost, stream()), op,
        "cudaMemcpyAsync");
  check(cudaStreamSynchronize(stream()), op, "cudaStreamSynchronize");
  SpdFailure fail;
  for (int64_t b = 0; b < count; ++b)
    if (host[static_cast<size_t>(b)] >= 0) {
      fail.batch = b;
      fail.pivot = host[static_cast<size_t>(b)];
      if (value) {
        check(cudaMemcpyAsync(&fail.value, value + b, sizeof(double), cudaMemcpyDeviceToHost, stream()), op,
              "cudaMemcpyAsync");
        check(cudaStreamSynchronize(stream()), op, "cudaStreamSynchronize");
      }
      break;
    }
  return fail;
}

#undef OXM_LINALG_LOOP

}  // namespace

bool has_small_linalg(DType dtype, int64_t n) { return dtype == DType::F32 && n >= 1 && n <= kSpdMaxN; }

// The kernel's Report for a call: its SpdReport's outputs, or flags in `pivot` / `value` (scratch the caller
// reads back) when the report is empty.
Report report_for(const ops::SpdReport& r, const Scratch* pivot, const Scratch* value) {
  Report out;
  if (r.empty()) {
    out.pivot = pivot->as<int>();
    out.value = value ? value->as<double>() : nullptr;
    return out;
  }
  out.info = r.info ? r.info->ptr<int64_t>() : nullptr;
  out.first = r.first ? reinterpret_cast<unsigned long long*>(r.first->ptr<int64_t>()) : nullptr;
  out.tag = r.tag;
  return out;
}

// Enqueues `launch(report)` for a call and, with an empty SpdReport, reads the flags back into c.fail (a wait).
template <class Call, class Launch>
void launch_reporting(Call& c, const char* op, bool with_value, Launch launch) {
  const bool read_back = c.report.empty();
  if (read_back) refuse_in_capture(op, "reads its failure flags on the host");
  std::optional<Scratch> pivot, value;  // the flags read back: none on the deferred path
  if (read_back) pivot.emplace(static_cast<size_t>(c.count) * sizeof(int));
  if (read_back && with_value) value.emplace(static_cast<size_t>(c.count) * sizeof(double));
  launch(report_for(c.report, pivot ? &*pivot : nullptr, value ? &*value : nullptr));
  check_launch(op);
  c.fail =
      read_back ? read_failure(pivot->as<int>(), value ? value->as<double>() : nullptr, c.count, op) : SpdFailure{};
}

bool logdet_spd(ops::LogdetSpdCall& c) {
  if (!has_small_linalg(c.a->dtype, c.n) || c.count < 1) return false;
  float* inv = c.inverse ? c.inverse->ptr<float>() : nullptr;
  launch_reporting(c, "logdet", true, [&](const Report& r) {
    spd_logdet_kernel<<<grid_for_matrices(c.count), kSpdWarpLanes * kSpdWarps, 0, stream()>>>(
        c.a->ptr<float>(), c.count, static_cast<int>(c.n), c.logdet->ptr<float>(), inv, r);
  });
  return true;
}

bool cholesky_spd(ops::CholeskySpdCall& c) {
  if (!has_small_linalg(c.a->dtype, c.n) || c.count < 1) return false;
  launch_reporting(c, "cholesky", true, [&](const Report& r) {
    spd_cholesky_kernel<<<grid_for_matrices(c.count), kSpdWarpLanes * kSpdWarps, 0, stream()>>>(
        c.a->ptr<float>(), c.count, static_cast<int>(c.n), c.L->ptr<float>(), r);
  });
  return true;
}

bool solve_triangular_small(ops::SolveTriangularSmallCall& c) {
  if (!has_small_linalg(c.t->dtype, c.n) || c.count < 1 || c.k < 1) return false;
  launch_reporting(c, "solve_triangular", false, [&](const Report& r) {
    with_size(c.n, [&](auto N) {
      tri_solve_kernel<decltype(N)::value><<<grid_for(c.count * c.k), kLinalgThreads, 0, stream()>>>(
          c.t->ptr<float>(), c.x->ptr<float>(), c.count, static_cast<int>(c.n), c.k, c.upper, r);
    });
  });
  return true;
}

}  // namespace oxmera::detail::cuda
