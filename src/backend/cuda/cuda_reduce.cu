// Reductions over any dim set, arg-reductions, softmax and the fused cross entropy. Deterministic: no float atomics;
// every output is combined by a fixed tree inside a block and (for long reductions) fixed-size chunks summed in order.
// f32 sums accumulate in f64 like the CPU backend.
#include <cfloat>

#include "backend/cuda/cuda_common.cuh"

namespace oxmera::detail::cuda {
namespace {

using ops::ArgReduceOp;
using ops::ReduceOp;

template <class T>
struct AccOf {
  using type = double;
};
template <>
struct AccOf<int64_t> {
  using type = int64_t;
};

template <class A>
__host__ __device__ inline A identity(ReduceOp op) {
  if constexpr (std::is_same_v<A, int64_t>) {
    return op == ReduceOp::Sum ? 0 : (op == ReduceOp::Max ? INT64_MIN : INT64_MAX);
  } else {
    return op == ReduceOp::Sum ? 0.0 : (op == ReduceOp::Max ? -HUGE_VAL : HUGE_VAL);
  }
}
// NaN propagates through max/min; i64 sums wrap.
template <class A>
__device__ inline A combine(ReduceOp op, A a, A b) {
  if (op == ReduceOp::Sum) {
    if constexpr (std::is_same_v<A, int64_t>)
      return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
    else
      return a + b;
  }
  if (a != a) return a;
  if (b != b) return b;
  return op == ReduceOp::Max ? (b > a ? b : a) : (b < a ? b : a);
}

// Block-wide combine of one value per thread in a fixed tree; thread 0 gets the result.
template <class A>
__device__ inline A block_combine(ReduceOp op, A v, A* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] = combine(op, sh[threadIdx.x], sh[threadIdx.x + s]);
    __syncthreads();
  }
  return sh[0];
}

// One thread per output, reduced elements in order (short reductions with many outputs).
template <class T>
__global__ void reduce_thread_kernel(ReduceOp op, Group kept, Group red, const T* x, T* out, int64_t M, int64_t R) {
  using A = typename AccOf<T>::type;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t m = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; m < M; m += step) {
    const T* base = x + kept.offset(m);
    A acc = identity<A>(op);
    for (int64_t r = 0; r < R; ++r) acc = combine<A>(op, acc, static_cast<A>(base[red.offset(r)]));
    out[kept.out_offset(m)] = static_cast<T>(acc);
  }
}

// A warp per output over a contiguous run of R elements (short rows; ReduceKernel::WarpRows): lane i reads elements
// i, i + 32, ... so a warp's loads are adjacent, and the 32 partials combine by a fixed shuffle tree (deterministic).
// The loop bound is the same for the whole warp, so every lane reaches each shuffle.
template <class T>
__global__ void __launch_bounds__(kThreads)
    reduce_warp_rows_kernel(ReduceOp op, Group kept, const T* x, T* out, int64_t M, int64_t R) {
  using A = typename AccOf<T>::type;
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int64_t warps = (static_cast<int64_t>(gridDim.x) * blockDim.x) / 32;
  for (int64_t m = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; m < M; m += warps) {
    const T* row = x + kept.offset(m);
    A acc = identity<A>(op);
    for (int64_t r = lane; r < R; r += 32) acc = combine<A>(op, acc, static_cast<A>(row[r]));
    for (int s = 16; s > 0; s >>= 1) acc = combine<A>(op, acc, __shfl_down_sync(0xffffffffu, acc, s));
    if (lane == 0) out[kept.out_offset(m)] = static_cast<T>(acc);
  }
}

// Block (m, c) reduces chunk c of output m. With one chunk it writes the output, else a partial.
template <class T>
__global__ void __launch_bounds__(kThreads)
    reduce_block_kernel(ReduceOp op, Group kept, Group red, const T* x, T* out, typename AccOf<T>::type* partial,
                        int64_t R, int64_t chunks) {
  using A = typename AccOf<T>::type;
  __shared__ A sh[kThreads];
  const int64_t m = blockIdx.x, c = blockIdx.y;
  const int64_t len = (R + chunks - 1) / chunks, r0 = c * len, r1 = min(R, r0 + len);
  const T* base = x + kept.offset(m);
  A acc = identity<A>(op);
  for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x)
    acc = combine<A>(op, acc, static_cast<A>(base[red.offset(r)]));
  acc = block_combine<A>(op, acc, sh);
  if (threadIdx.x == 0) {
    if (chunks == 1)
      out[kept.out_offset(m)] = static_cast<T>(acc);
    else
      partial[m * chunks + c] = acc;
  }
}

// Column reduction: the outputs are contiguous in x (kept dim 0 has stride 1). Threads (tx, ty) of block
// (bx, c) take output bx*32 + tx and rows ty, ty + 8, ... of chunk c, so a warp reads 32 adjacent values;
// the 8 row partials are combined in a fixed order by ty == 0.
template <class T>
__global__ void __launch_bounds__(kColOutputs* kColRows)
    reduce_cols_kernel(ReduceOp op, Group kept, Group red, const T* x, T* out, typename AccOf<T>::type* partial,
                       int64_t M, int64_t R, int64_t chunks) {
  using A = typename AccOf<T>::type;
  __shared__ A sh[kColRows][kColOutputs];
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int64_t m = static_cast<int64_t>(blockIdx.x) * kColOutputs + tx, c = blockIdx.y;
  const int64_t len = (R + chunks - 1) / chunks, r0 = c * len, r1 = min(R, r0 + len);
  A acc = identity<A>(op);
  if (m < M) {
    const T* base = x + kept.offset(m);
    for (int64_t r = r0 + ty; r < r1; r += kColRows) acc = combine<A>(op, acc, static_cast<A>(base[red.offset(r)]));
  }
  sh[ty][tx] = acc;
  __syncthreads();
  if (ty == 0 && m < M) {
    for (int k = 1; k < kColRows; ++k) acc = combine<A>(op, acc, sh[k][tx]);
    if (chunks == 1)
      out[kept.out_offset(m)] = static_cast<T>(acc);
    else
      partial[m * chunks + c] = acc;
  }
}

template <class T>
__global__ void reduce_finish_kernel(ReduceOp op, Group kept, T* out, const typename AccOf<T>::type* partial, int64_t M,
                                     int64_t chunks) {
  using A = typename AccOf<T>::type;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t m = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; m < M; m += step) {
    A acc = identity<A>(op);
    for (int64_t c = 0; c < chunks; ++c) acc = combine<A>(op, acc, partial[m * chunks + c]);
    out[kept.out_offset(m)] = static_cast<T>(acc);
  }
}

template <class T>
__global__ void fill_kept_kernel(Group kept, T* out, int64_t M, T v) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t m = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; m < M; m += step)
    out[kept.out_offset(m)] = v;
}

const char* reduce_name(ReduceOp op) { return op == ReduceOp::Sum ? "sum" : (op == ReduceOp::Max ? "max" : "min"); }

// x's shape and strides with out's strides, as the plain arrays index_math.hpp's group builders take.
struct FlatDims {
  int rank;
  int64_t shape[kMaxDims], xs[kMaxDims], os[kMaxDims];
  FlatDims(const TensorImpl& x, const TensorImpl& out, const char* op) : rank(static_cast<int>(x.shape.size())) {
    check_rank(x, op);
    for (int d = 0; d < rank; ++d) {
      shape[d] = x.shape[d];
      xs[d] = x.strides[d];
      os[d] = out.strides[d];
    }
  }
};

template <class T>
void reduce_t(ReduceOp op, const TensorImpl& x, TensorImpl& out, uint64_t mask) {
  using A = typename AccOf<T>::type;
  const char* name = reduce_name(op);
  const FlatDims f(x, out, name);
  Group kept, red;
  OXM_CHECK(make_reduce_groups(f.rank, f.shape, f.xs, f.os, mask, kept, red), NotImplemented, name, ": more than ",
            kMaxDims, " non-mergeable dims");
  const int64_t M = kept.numel(), R = red.numel();
  if (M == 0) return;
  const T* xp = x.ptr<T>();
  T* op_ = out.ptr<T>();
  const ReduceKernel kernel = choose_reduce_kernel(kept, red);
  if (kernel == ReduceKernel::Fill) {
    fill_kept_kernel<T><<<blocks(M), kThreads, 0, stream()>>>(kept, op_, M, static_cast<T>(identity<A>(op)));
    return check_launch(name);
  }
  if (kernel == ReduceKernel::WarpRows) {
    reduce_warp_rows_kernel<T><<<blocks(M * 32), kThreads, 0, stream()>>>(op, kept, xp, op_, M, R);
    return check_launch(name);
  }
  if (kernel == ReduceKernel::Thread) {
    reduce_thread_kernel<T><<<blocks(M), kThreads, 0, stream()>>>(op, kept, red, xp, op_, M, R);
    return check_launch(name);
  }
  if (kernel == ReduceKernel::Cols) {
    const int64_t chunks = col_reduce_chunks(M, R), col_blocks = (M + kColOutputs - 1) / kColOutputs;
    OXM_CHECK(col_blocks <= INT32_MAX && M * chunks <= (int64_t{1} << 40), NotImplemented, name,
              ": too many outputs for the cuda column reduction (", M, ")");
    A* partial = nullptr;
    const size_t pbytes = chunks > 1 ? static_cast<size_t>(M * chunks) * sizeof(A) : 0;
    if (pbytes) partial = static_cast<A*>(scratch_alloc(pbytes));
    dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>(chunks)), block(kColOutputs, kColRows);
    reduce_cols_kernel<T><<<grid, block, 0, stream()>>>(op, kept, red, xp, op_, partial, M, R, chunks);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess && chunks > 1) {
      reduce_finish_kernel<T><<<blocks(M), kThreads, 0, stream()>>>(op, kept, op_, partial, M, chunks);
      e = cudaGetLastError();
    }
    if (pbytes) scratch_free(partial, pbytes);
    return check(e, name, "kernel launch");
  }
  const int64_t chunks = reduce_chunks(R);
  OXM_CHECK(M <= INT32_MAX && (chunks == 1 || M * chunks <= (int64_t{1} << 31)), NotImplemented, name,
            ": too many outputs for the cuda block reduction (", M, ")");
  A* partial = nullptr;
  const size_t pbytes = chunks > 1 ? static_cast<size_t>(M * chunks) * sizeof(A) : 0;
  if (pbytes) partial = static_cast<A*>(scratch_alloc(pbytes));
  dim3 grid(static_cast<unsigned>(M), static_cast<unsigned>(chunks));
  reduce_block_kernel<T><<<grid, kThreads, 0, stream()>>>(op, kept, red, xp, op_, partial, R, chunks);
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess && chunks > 1) {
    reduce_finish_kernel<T><<<blocks(M), kThreads, 0, stream()>>>(op, kept, op_, partial, M, chunks);
    e = cudaGetLastError();
  }
  if (pbytes) scratch_free(partial, pbytes);
  check(e, name, "kernel launch");
}

// ---------------------------------------------------------------- arg reductions
template <class T>
__device__ inline bool better(bool is_max, T v, int64_t i, T bv, int64_t bi) {
  if (is_max ? v > bv : v < bv) return true;
  return v == bv && i < bi;
}

// One block per line (first index of the extreme, as the CPU's strict comparison gives); NaN sets *nan_flag.
template <class T>
__global__ void __launch_bounds__(kThreads) arg_kernel(bool is_max, Lines l, const T* x, int64_t* out, int* nan_flag) {
  __shared__ T shv[kThreads];
  __shared__ int64_t shi[kThreads];
  const int64_t m = blockIdx.x;
  const T* row = x + l.rest.offset(m);
  T bv = row[0];
  int64_t bi = 0;
  bool nan = false;
  for (int64_t i = threadIdx.x; i < l.len; i += blockDim.x) {
    const T v = row[i * l.stride];
    if constexpr (std::is_floating_point_v<T>) nan |= (v != v);
    if (better(is_max, v, i, bv, bi)) {
      bv = v;
      bi = i;
    }
  }
  if (nan) *nan_flag = 1;
  shv[threadIdx.x] = bv;
  shi[threadIdx.x] = bi;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s &&
        better(is_max, shv[threadIdx.x + s], shi[threadIdx.x + s], shv[threadIdx.x], shi[threadIdx.x])) {
      shv[threadIdx.x] = shv[threadIdx.x + s];
      shi[threadIdx.x] = shi[threadIdx.x + s];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[l.rest.out_offset(m)] = shi[0];
}

// The lines of x along `dim` (with out's strides for the other dims), as argmax and softmax walk them.
Lines lines_along(const TensorImpl& x, const TensorImpl& out, int64_t dim, const char* name) {
  const FlatDims f(x, out, name);
  Lines l;
  OXM_CHECK(make_lines(f.rank, f.shape, f.xs, f.os, dim, l), NotImplemented, name, ": more than ", kMaxDims, " dims");
  return l;
}

template <class T>
bool arg_reduce_t(ArgReduceOp op, const TensorImpl& x, TensorImpl& out, int64_t dim) {
  const char* name = op == ArgReduceOp::Argmax ? "argmax" : "argmin";
  const Lines l = lines_along(x, out, dim, name);
  const int64_t M = l.rest.numel();
  if (M == 0 || l.len == 0) return true;
  OXM_CHECK(M <= INT32_MAX, NotImplemented, name, ": too many lines for the cuda kernel (", M, ")");
  refuse_in_capture(name, "reads its NaN flag on the host");
  int* flag = static_cast<int*>(scratch_alloc(sizeof(int)));
  int host_flag = 0;
  cudaError_t e = cudaMemsetAsync(flag, 0, sizeof(int), stream());
  if (e == cudaSuccess) {
    const int threads = l.len >= kThreads ? kThreads : 32;
    arg_kernel<T><<<static_cast<unsigned>(M), threads, 0, stream()>>>(op == ArgReduceOp::Argmax, l, x.ptr<T>(),
                                                                      out.ptr<int64_t>(), flag);
    e = cudaGetLastError();
  }
  // The NaN answer is read by the host: the one synchronisation this op needs.
  if (e == cudaSuccess) e = cudaMemcpyAsync(&host_flag, flag, sizeof(int), cudaMemcpyDeviceToHost, stream());
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream());
  scratch_free(flag, sizeof(int));
  check(e, name, "kernel");
  return host_flag == 0;
}

// ---------------------------------------------------------------- softmax
// One block per line: max (NaN propagates; all -inf gives 0), f64 sum of exp, then the outputs, with the CPU
// f32 row's rounding: log: x - (float(log(sum)) + max); else exp(x - max) * float(1 / sum).
__global__ void __launch_bounds__(kThreads) softmax_kernel(Lines l, const float* x, float* out, bool log) {
  __shared__ double sh[kThreads];
  const int64_t m = blockIdx.x;
  const float* row = x + l.rest.offset(m);
  float* orow = out + l.rest.out_offset(m);
  double mx = -HUGE_VAL;
  for (int64_t i = threadIdx.x; i < l.len; i += blockDim.x) mx = combine<double>(ReduceOp::Max, mx, row[i * l.stride]);
  mx = block_combine<double>(ReduceOp::Max, mx, sh);
  __syncthreads();  // everyone has read sh[0] before it is reused
  float fmx = static_cast<float>(mx);
  if (fmx == -INFINITY) fmx = 0.f;
  double sum = 0;
  for (int64_t i = threadIdx.x; i < l.len; i += blockDim.x) {
    const float e = expf(row[i * l.stride] - fmx);
    if (!log) orow[i * l.out_stride] = e;
    sum += e;
  }
  sum = block_combine<double>(ReduceOp::Sum, sum, sh);
  if (log) {
    const float lse = static_cast<float>(::log(sum)) + fmx;
    for (int64_t i = threadIdx.x; i < l.len; i += blockDim.x) orow[i * l.out_stride] = row[i * l.stride] - lse;
  } else {
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t i = threadIdx.x; i < l.len; i += blockDim.x) orow[i * l.out_stride] *= inv;
  }
}

// ---------------------------------------------------------------- cross entropy (class targets)
// One block per row, as softmax: max, then the f64 sums of exp(x - max) and of x; thread 0 writes the row's
// log-sum-exp and loss with the CPU kernel's rounding (cpu_loss.cpp).
__global__ void __launch_bounds__(kThreads)
    cross_entropy_kernel(int64_t C, int64_t sr, int64_t sc, const float* x, const int64_t* target, int64_t ts,
                         double ls, double scale, float* loss, float* lse) {
  __shared__ double sh[kThreads];
  const int64_t r = blockIdx.x;
  const float* row = x + r * sr;
  double mx = -HUGE_VAL;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) mx = combine<double>(ReduceOp::Max, mx, row[c * sc]);
  mx = block_combine<double>(ReduceOp::Max, mx, sh);
  __syncthreads();
  float fmx = static_cast<float>(mx);
  if (fmx == -INFINITY) fmx = 0.f;
  double sum = 0, xsum = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    sum += expf(row[c * sc] - fmx);
    xsum += row[c * sc];
  }
  sum = block_combine<double>(ReduceOp::Sum, sum, sh);
  __syncthreads();
  if (ls > 0) xsum = block_combine<double>(ReduceOp::Sum, xsum, sh);
  if (threadIdx.x != 0) return;
  const float l = static_cast<float>(::log(sum)) + fmx;
  lse[r] = l;
  const int64_t t = target[r * ts];
  if (t < 0) {
    loss[r] = 0.f;
    return;
  }
  const float picked = row[t * sc] - l;
  float v = -picked;
  if (ls > 0)
    v = static_cast<float>((1.0 - ls) * -static_cast<double>(picked) -
                           ls / static_cast<double>(C) * (xsum - static_cast<double>(C) * l));
  loss[r] = static_cast<float>(scale * v);
}

// One thread per element of the contiguous [R, C] gradient.
__global__ void __launch_bounds__(kThreads)
    cross_entropy_backward_kernel(int64_t R, int64_t C, int64_t sr, int64_t sc, const float* x, const int64_t* target,
                                  int64_t ts, const float* lse, const float* g, int64_t gs, float on_target,
                                  float uniform, double scale, float* gx) {
  const int64_t n = R * C, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t r = i / C, c = i - r * C, t = target[r * ts];
    if (t < 0) {
      gx[i] = 0.f;
      continue;
    }
    const float gr = static_cast<float>(scale * static_cast<double>(g[r * gs]));
    float v = gr * (expf(x[r * sr + c * sc] - lse[r]) - uniform);
    if (c == t) v -= gr * on_target;
    gx[i] = v;
  }
}

}  // namespace

void cross_entropy(const TensorImpl& x, const TensorImpl& target, double ls, double scale, TensorImpl& loss,
                   TensorImpl& lse) {
  OXM_CHECK(x.dtype == DType::F32, UnsupportedDType, "cross_entropy: dtype ", x.dtype,
            " is not supported on cuda (f32)");
  const int64_t R = x.shape[0], C = x.shape[1];
  if (R == 0) return;
  OXM_CHECK(R <= INT32_MAX, NotImplemented, "cross_entropy: too many rows for the cuda kernel (", R, ")");
  const int threads = C >= kThreads ? kThreads : 32;
  cross_entropy_kernel<<<static_cast<unsigned>(R), threads, 0, stream()>>>(
      C, x.strides[0], x.strides[1], x.ptr<float>(), target.ptr<int64_t>(), target.strides[0], ls, scale,
      loss.ptr<float>(), lse.ptr<float>());
  check_launch("cross_entropy");
}

void cross_entropy_backward(const TensorImpl& x, const TensorImpl& target, const TensorImpl& lse, const TensorImpl& g,
                            double ls, double scale, TensorImpl& grad_x) {
  OXM_CHECK(x.dtype == DType::F32, UnsupportedDType, "cross_entropy backward: dtype ", x.dtype,
            " is not supported on cuda (f32)");
  const int64_t R = x.shape[0], C = x.shape[1];
  if (R == 0 || C == 0) return;
  cross_entropy_backward_kernel<<<blocks(R * C), kThreads, 0, stream()>>>(
      R, C, x.strides[0], x.strides[1], x.ptr<float>(), target.ptr<int64_t>(), target.strides[0], lse.ptr<float>(),
      g.ptr<float>(), g.strides[0], static_cast<float>(1.0 - ls), static_cast<float>(ls / static_cast<double>(C)),
      scale, grad_x.ptr<float>());
  check_launch("cross_entropy backward");
}

void reduce(ReduceOp op, const TensorImpl& x, TensorImpl& out, uint64_t mask) {
  switch (x.dtype) {
    case DType::F32:
      return reduce_t<float>(op, x, out, mask);
    case DType::I64:
      return reduce_t<int64_t>(op, x, out, mask);
    default:
      OXM_FAIL(UnsupportedDType, reduce_name(op), ": dtype ", x.dtype, " is not supported on cuda (f32, i64)");
  }
}

bool arg_reduce(ArgReduceOp op, const TensorImpl& x, TensorImpl& out, int64_t dim) {
  switch (x.dtype) {
    case DType::F32:
      return arg_reduce_t<float>(op, x, out, dim);
    case DType::I64:
      return arg_reduce_t<int64_t>(op, x, out, dim);
    default:
      OXM_FAIL(UnsupportedDType, "argmax: dtype ", x.dtype, " is not supported on cuda (f32, i64)");
  }
}

void softmax(const TensorImpl& x, TensorImpl& out, int64_t dim, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  OXM_CHECK(x.dtype == DType::F32, UnsupportedDType, name, ": dtype ", x.dtype, " is not supported on cuda (f32)");
  const Lines l = lines_along(x, out, dim, name);
  const int64_t M = l.rest.numel();
  if (M == 0 || l.len == 0) return;
  OXM_CHECK(M <= INT32_MAX, NotImplemented, name, ": too many lines for the cuda kernel (", M, ")");
  const int threads = l.len >= kThreads ? kThreads : 32;
  softmax_kernel<<<static_cast<unsigned>(M), threads, 0, stream()>>>(l, x.ptr<float>(), out.ptr<float>(), log);
  check_launch(name);
}

}  // namespace oxmera::detail::cuda
