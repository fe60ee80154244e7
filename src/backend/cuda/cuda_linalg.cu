// Small batched linear algebra of f32 matrices (n <= kSpdMaxN) on the device, f64 arithmetic in per-thread
// work arrays (spd_math.hpp, host-tested): log-determinant (+ inverse for its backward) and Cholesky factor,
// one thread per matrix; triangular solves, one thread per (matrix, right-hand column). One small
// device-to-host copy per call reads the failure flags (NotPositiveDefinite / singular need them).
#include <type_traits>
#include <vector>

#include "backend/common/spd_math.hpp"
#include "backend/cuda/cuda_common.cuh"

namespace oxmera::detail::cuda {
namespace {

constexpr int kLinalgThreads = 64;  // per block: the per-thread f64 arrays live in local memory

#define OXM_LINALG_LOOP(i, n)                                                            \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

template <int N>
__global__ void __launch_bounds__(kLinalgThreads)
    spd_logdet_kernel(const float* a, int64_t count, int n, float* logdet, float* inv, int* pivot, double* value) {
  double work[spd_work_size(N)];  // packed lower triangle: 4.1 KiB per thread at N = 32
  OXM_LINALG_LOOP(b, count) {
    const int64_t nn = static_cast<int64_t>(n) * n;
    const SpdPivot p = spd_logdet_inverse(a + b * nn, n, work, logdet + b, inv ? inv + b * nn : nullptr);
    pivot[b] = p.pivot;
    value[b] = p.value;
  }
}

template <int N>
__global__ void __launch_bounds__(kLinalgThreads)
    spd_cholesky_kernel(const float* a, int64_t count, int n, float* L, int* pivot, double* value) {
  double work[spd_work_size(N)];
  OXM_LINALG_LOOP(b, count) {
    const int64_t nn = static_cast<int64_t>(n) * n;
    const SpdPivot p = spd_cholesky(a + b * nn, n, work, L + b * nn);
    pivot[b] = p.pivot;
    value[b] = p.value;
  }
}

// Thread (b, c) solves column c of matrix b; every column of a matrix meets the same zero diagonal first, so
// column 0 alone reports it.
template <int N>
__global__ void __launch_bounds__(kLinalgThreads)
    tri_solve_kernel(const float* t, float* x, int64_t count, int n, int64_t k, bool upper, int* pivot) {
  double work[N];
  OXM_LINALG_LOOP(id, count * k) {
    const int64_t b = id / k, c = id % k;
    const int row = tri_solve_column(t + b * n * n, n, x + b * n * k + c, k, upper, work);
    if (c == 0) pivot[b] = row;
  }
}

unsigned grid_for(int64_t threads) {
  const int64_t want = (threads + kLinalgThreads - 1) / kLinalgThreads, cap = 64LL * sm_count();
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
  refuse_in_capture(op, "reads its failure flags on the host");
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

bool logdet_spd(const TensorImpl& a, int64_t count, int64_t n, TensorImpl& logdet, TensorImpl* inverse,
                SpdFailure& fail) {
  if (!has_small_linalg(a.dtype, n) || count < 1) return false;
  Scratch pivot(static_cast<size_t>(count) * sizeof(int)), value(static_cast<size_t>(count) * sizeof(double));
  float* inv = inverse ? inverse->ptr<float>() : nullptr;
  with_size(n, [&](auto N) {
    spd_logdet_kernel<decltype(N)::value><<<grid_for(count), kLinalgThreads, 0, stream()>>>(
        a.ptr<float>(), count, static_cast<int>(n), logdet.ptr<float>(), inv, pivot.as<int>(), value.as<double>());
  });
  check_launch("logdet");
  fail = read_failure(pivot.as<int>(), value.as<double>(), count, "logdet");
  return true;
}

bool cholesky_spd(const TensorImpl& a, int64_t count, int64_t n, TensorImpl& L, SpdFailure& fail) {
  if (!has_small_linalg(a.dtype, n) || count < 1) return false;
  Scratch pivot(static_cast<size_t>(count) * sizeof(int)), value(static_cast<size_t>(count) * sizeof(double));
  with_size(n, [&](auto N) {
    spd_cholesky_kernel<decltype(N)::value><<<grid_for(count), kLinalgThreads, 0, stream()>>>(
        a.ptr<float>(), count, static_cast<int>(n), L.ptr<float>(), pivot.as<int>(), value.as<double>());
  });
  check_launch("cholesky");
  fail = read_failure(pivot.as<int>(), value.as<double>(), count, "cholesky");
  return true;
}

bool solve_triangular_small(const TensorImpl& t, TensorImpl& x, int64_t count, int64_t n, int64_t k, bool upper,
                            SpdFailure& fail) {
  if (!has_small_linalg(t.dtype, n) || count < 1 || k < 1) return false;
  Scratch pivot(static_cast<size_t>(count) * sizeof(int));
  with_size(n, [&](auto N) {
    tri_solve_kernel<decltype(N)::value><<<grid_for(count * k), kLinalgThreads, 0, stream()>>>(
        t.ptr<float>(), x.ptr<float>(), count, static_cast<int>(n), k, upper, pivot.as<int>());
  });
  check_launch("solve_triangular");
  fail = read_failure(pivot.as<int>(), nullptr, count, "solve_triangular");
  return true;
}

}  // namespace oxmera::detail::cuda
