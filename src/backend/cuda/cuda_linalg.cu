// Batched log-determinant (and inverse, for its backward) of small SPD f32 matrices: one thread per matrix,
// f64 arithmetic in a per-thread work array (spd_math.hpp). Replaces the host round trip of linalg::logdet
// for n <= kSpdMaxN; one small device-to-host copy per call reads the pivots (NotPositiveDefinite needs them).
#include <vector>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/spd_math.hpp"

namespace oxmera::detail::cuda {
namespace {

template <int N>
__global__ void __launch_bounds__(64) spd_logdet_kernel(const float* a, int64_t count, int n, float* logdet,
                                                          float* inv, int* pivot, double* value) {
  double work[spd_work_size(N)];  // packed lower triangle: 4.1 KiB per thread at N = 32
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < count;
       b += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t nn = static_cast<int64_t>(n) * n;
    const SpdPivot p = spd_logdet_inverse(a + b * nn, n, work, logdet + b, inv ? inv + b * nn : nullptr);
    pivot[b] = p.pivot;
    value[b] = p.value;
  }
}

template <int N>
void launch(const float* a, int64_t count, int n, float* logdet, float* inv, int* pivot, double* value) {
  constexpr int kT = 64;
  const int64_t want = (count + kT - 1) / kT, cap = 64LL * sm_count();
  const unsigned grid = static_cast<unsigned>(want < cap ? want : cap);
  spd_logdet_kernel<N><<<grid, kT, 0, stream()>>>(a, count, n, logdet, inv, pivot, value);
}

}  // namespace

bool has_logdet_spd(DType dtype, int64_t n) { return dtype == DType::F32 && n >= 1 && n <= kSpdMaxN; }

bool logdet_spd(const TensorImpl& a, int64_t count, int64_t n, TensorImpl& logdet, TensorImpl* inverse,
                SpdFailure& fail) {
  if (!has_logdet_spd(a.dtype, n) || count < 1) return false;
  const float* ap = a.ptr<float>();
  float* lp = logdet.ptr<float>();
  float* ip = inverse ? inverse->ptr<float>() : nullptr;
  const size_t pbytes = static_cast<size_t>(count) * sizeof(int), vbytes = static_cast<size_t>(count) * sizeof(double);
  Scratch pivot_buf(pbytes), value_buf(vbytes);
  int* pivot = pivot_buf.as<int>();
  double* value = value_buf.as<double>();
  const int ni = static_cast<int>(n);
  if (n <= 4)
    launch<4>(ap, count, ni, lp, ip, pivot, value);
  else if (n <= 8)
    launch<8>(ap, count, ni, lp, ip, pivot, value);
  else if (n <= 16)
    launch<16>(ap, count, ni, lp, ip, pivot, value);
  else
    launch<32>(ap, count, ni, lp, ip, pivot, value);
  check_launch("logdet");
  std::vector<int> host(static_cast<size_t>(count));
  check(cudaMemcpyAsync(host.data(), pivot, pbytes, cudaMemcpyDeviceToHost, stream()), "logdet", "cudaMemcpyAsync");
  check(cudaStreamSynchronize(stream()), "logdet", "cudaStreamSynchronize");
  fail = SpdFailure{};
  for (int64_t b = 0; b < count; ++b)
    if (host[static_cast<size_t>(b)] >= 0) {
      fail.batch = b;
      fail.pivot = host[static_cast<size_t>(b)];
      check(cudaMemcpyAsync(&fail.value, value + b, sizeof(double), cudaMemcpyDeviceToHost, stream()), "logdet",
            "cudaMemcpyAsync");
      check(cudaStreamSynchronize(stream()), "logdet", "cudaStreamSynchronize");
      break;
    }
  return true;
}

}  // namespace oxmera::detail::cuda
