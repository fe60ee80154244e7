// Index ops (gathers and deterministic scatters: one thread per output element, contributions added in the
// CPU's order, no float atomics), im2col / col2im, and the fused optimizer steps (one launch per
// 24 parameters).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cub/device/device_radix_sort.cuh>
#include <memory>
#include <vector>

#include "backend/common/optim_math.hpp"
#include "backend/common/spd_math.hpp"
#include "backend/cuda/cuda_common.cuh"

namespace oxmera::detail::cuda {
namespace {

// index_add / scatter_add scan up to this many index positions per out element, and sort them above it.
constexpr int64_t kIndexAddScanMax = 32;

#define OXM_GRID_LOOP(i, n)                                                     \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x, \
               i##_step = static_cast<int64_t>(gridDim.x) * blockDim.x;         \
       i < (n); i += i##_step)

void load(Geom& g, int s, const Strides& st) {
  for (int d = 0; d < g.rank; ++d) g.stride[s][d] = st[d];
}
Geom geom_of(const Shape& shape, const char* op) {
  OXM_CHECK(shape.size() <= static_cast<size_t>(kMaxDims), NotImplemented, op, ": the cuda backend supports up to ",
            kMaxDims, " dims, got shape ", shape);
  Geom g;
  g.rank = static_cast<int>(shape.size());
  for (int d = 0; d < g.rank; ++d) g.size[d] = shape[d];
  g.set_index32();
  return g;
}

// out[p] = x[p with p[dim] = idx[p]]: stride set 0 = out, 1 = x (dim stride 0), 2 = index positions.
template <class T>
__global__ void gather_kernel(Geom g, int64_t n, T* out, const T* x, const int64_t* idx, int64_t x_dim_stride) {
  OXM_GRID_LOOP(p, n) {
    int64_t c[kMaxDims];
    g.coords(p, c);
    out[g.dot(0, c)] = x[g.dot(1, c) + idx[g.dot(2, c)] * x_dim_stride];
  }
}

// index_add: one thread per out element; out[..r..] += src[..i..] for every i with idx[i] == r, i ascending.
template <class T>
__global__ void index_add_kernel(Geom g, int64_t n, int dim, T* out, const T* src, int64_t src_dim_stride,
                                 const int64_t* idx, int64_t nidx, int64_t idx_stride) {
  OXM_GRID_LOOP(p, n) {
    int64_t c[kMaxDims];
    g.coords(p, c);
    const int64_t r = c[dim];
    c[dim] = 0;
    const T* s = src + g.dot(1, c);
    T* o = out + g.dot(0, c) + r * g.stride[0][dim];
    T acc = *o;
    for (int64_t i = 0; i < nidx; ++i)
      if (idx[i * idx_stride] == r) acc += s[i * src_dim_stride];
    *o = acc;
  }
}

// index_add over a long index list: the (index value, position) pairs sorted by value with a stable radix sort
// (positions ascending within a value), so each out element binary-searches its run and adds exactly the
// contributions of the scan above, in the same order: O(n log m + m) instead of O(n m).
template <class T>
__global__ void index_add_sorted_kernel(Geom g, int64_t n, int dim, T* out, const T* src, int64_t src_dim_stride,
                                        const uint64_t* keys, const int64_t* pos, int64_t nidx) {
  OXM_GRID_LOOP(p, n) {
    int64_t c[kMaxDims];
    g.coords(p, c);
    const int64_t r = c[dim];
    const uint64_t key = static_cast<uint64_t>(r);
    c[dim] = 0;
    const T* s = src + g.dot(1, c);
    T* o = out + g.dot(0, c) + r * g.stride[0][dim];
    const int64_t lo = lower_bound_key(keys, nidx, key);
    if (lo == nidx || keys[lo] != key) continue;
    T acc = *o;
    for (int64_t k = lo; k < nidx && keys[k] == key; ++k) acc += s[pos[k] * src_dim_stride];
    *o = acc;
  }
}

__global__ void index_pairs_kernel(int64_t m, const int64_t* idx, int64_t idx_stride, uint64_t* keys, int64_t* pos) {
  OXM_GRID_LOOP(i, m) {
    keys[i] = static_cast<uint64_t>(idx[i * idx_stride]);  // validated non-negative
    pos[i] = i;
  }
}

// scatter_add: one thread per out element q; scans the index positions p that share q's other coordinates
// (p[dim] ascending = the CPU's row-major order for that element). Sets: 0 = out, 1 = idx, 2 = src; the
// index shape is `isize` (dims may be smaller than out's).
template <class T>
__global__ void scatter_add_kernel(Geom g, int64_t n, int dim, Geom ig, T* out, const int64_t* idx, const T* src) {
  OXM_GRID_LOOP(q, n) {
    int64_t c[kMaxDims];
    g.coords(q, c);
    bool inside = true;
    for (int d = 0; d < g.rank; ++d)
      if (d != dim && c[d] >= ig.size[d]) inside = false;
    if (!inside) continue;
    const int64_t r = c[dim];
    c[dim] = 0;
    const int64_t ib = ig.dot(0, c), sb = ig.dot(1, c);
    const int64_t is = ig.stride[0][dim], ss = ig.stride[1][dim];
    T* o = out + g.dot(0, c) + r * g.stride[0][dim];
    T acc = *o;
    for (int64_t k = 0; k < ig.size[dim]; ++k)
      if (idx[ib + k * is] == r) acc += src[sb + k * ss];
    *o = acc;
  }
}

// scatter_add over long index dims: pair (flat row-major index in out of p's target, p) for every index position p.
__global__ void scatter_pairs_kernel(Geom g, int dim, Geom ig, const int64_t* idx, int64_t m, uint64_t* keys,
                                     int64_t* pos) {
  OXM_GRID_LOOP(p, m) {
    int64_t c[kMaxDims];
    ig.coords(p, c);
    c[dim] = idx[ig.dot(0, c)];
    int64_t q = 0;
    for (int d = 0; d < g.rank; ++d) q = q * g.size[d] + c[d];
    keys[p] = static_cast<uint64_t>(q);
    pos[p] = p;
  }
}

// One thread per out element q: its run in the sorted pairs holds the positions p targeting it, ascending,
// which is the row-major order in which the scan kernel (and the CPU) adds them.
template <class T>
__global__ void scatter_add_sorted_kernel(Geom g, int64_t n, Geom ig, T* out, const T* src, const uint64_t* keys,
                                          const int64_t* pos, int64_t m) {
  OXM_GRID_LOOP(q, n) {
    const uint64_t key = static_cast<uint64_t>(q);
    const int64_t lo = lower_bound_key(keys, m, key);
    if (lo == m || keys[lo] != key) continue;
    int64_t c[kMaxDims];
    g.coords(q, c);
    T* o = out + g.dot(0, c);
    T acc = *o;
    for (int64_t k = lo; k < m && keys[k] == key; ++k) {
      int64_t cp[kMaxDims];
      ig.coords(pos[k], cp);
      acc += src[ig.dot(1, cp)];
    }
    *o = acc;
  }
}

template <int Bytes>
struct Word;
template <>
struct Word<1> {
  using type = uint8_t;
};
template <>
struct Word<4> {
  using type = uint32_t;
};
template <>
struct Word<8> {
  using type = uint64_t;
};

template <class T>
void gather_launch(const Geom& g, TensorImpl& out, const TensorImpl& x, const TensorImpl& idx, int64_t xds,
                   const char* op) {
  const int64_t n = out.numel;
  if (n == 0) return;
  gather_kernel<T><<<blocks(n), kThreads, 0, stream()>>>(g, n, out.ptr<T>(), x.ptr<T>(), idx.ptr<int64_t>(), xds);
  check_launch(op);
}
void gather_bytes(const Geom& g, TensorImpl& out, const TensorImpl& x, const TensorImpl& idx, int64_t xds,
                  const char* op) {
  switch (itemsize(x.dtype)) {
    case 1:
      return gather_launch<Word<1>::type>(g, out, x, idx, xds, op);
    case 4:
      return gather_launch<Word<4>::type>(g, out, x, idx, xds, op);
    case 8:
      return gather_launch<Word<8>::type>(g, out, x, idx, xds, op);
    default:
      OXM_FAIL(UnsupportedDType, op, ": dtype ", x.dtype, " is not supported on cuda");
  }
}

// ---------------------------------------------------------------- im2col / col2im
// I: the index arithmetic's type (im2col_position: uint32_t when it fits, else int64_t); offsets stay 64-bit.
template <class T, class I>
__global__ void im2col_kernel(I n, const T* x, T* cols, I C, int64_t H, int64_t W, int64_t s0, int64_t s1, int64_t s2,
                              int64_t s3, ConvGeometry g, T pad) {
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I p = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; p < n; p += step) {
    const Im2colPos q = im2col_position<I>(p, C, static_cast<I>(g.kh), static_cast<I>(g.kw), static_cast<I>(g.oh),
                                           static_cast<I>(g.ow));
    const int64_t h = q.y * g.sh - g.ph + q.i * g.dh, w = q.z * g.sw - g.pw + q.j * g.dw;
    cols[p] = (h >= 0 && h < H && w >= 0 && w < W) ? x[q.nn * s0 + q.c * s1 + h * s2 + w * s3] : pad;
  }
}

// One thread per input pixel: the taps k = (i, j) that read it, in increasing k (the CPU's order).
template <class T, class I>
__global__ void col2im_kernel(I n, const T* cols, T* xg, bool zero_first, I H, I W, ConvGeometry g) {
  const int64_t K = g.kh * g.kw, L = g.oh * g.ow;
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I p = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; p < n; p += step) {
    const Col2imPos q = col2im_position<I>(p, H, W);
    const int64_t w = q.w, h = q.h, nc = q.nc;
    T acc = zero_first ? T(0) : xg[p];  // zero_first: x_grad's contents are ignored (no fill launch before)
    for (int64_t k = 0; k < K; ++k) {
      int64_t y, z;
      if (!col2im_source(h, k / g.kw, g.sh, g.ph, g.dh, g.oh, y)) continue;
      if (!col2im_source(w, k % g.kw, g.sw, g.pw, g.dw, g.ow, z)) continue;
      acc += cols[(nc * K + k) * L + y * g.ow + z];
    }
    xg[p] = acc;
  }
}

// ---------------------------------------------------------------- optimizer
// One parameter's update: its kind and the scalars optim_math.hpp rounds to f32 on the host (the CPU's).
struct OptArgs {
  OptimizerStep::Kind kind;
  // Adam(W) with its step count in device memory (a captured step): the bias corrections are computed per block.
  const int64_t* step_count;
  double lr, beta1, beta2;
  union {
    optim_math::SgdScalars<float> sgd;
    optim_math::AdamScalars<float> adam;
    optim_math::RmspropScalars<float> rmsprop;
  };
};

// One element's update: the math every backend shares (optim_math.hpp), with this parameter's options.
__device__ inline void optim_element(const OptArgs& a, int64_t i, float* p, const float* g, float* s0, float* s1,
                                     float* s2) {
  switch (a.kind) {
    case OptimizerStep::Kind::SGD: {
      const auto& c = a.sgd;
      optim_math::sgd_element(c, c.use_wd, c.use_mom, c.first, c.nesterov, c.maximize, i, p, g, s0);
      break;
    }
    case OptimizerStep::Kind::Adam:
    case OptimizerStep::Kind::AdamW: {
      const auto& c = a.adam;
      optim_math::adam_element(c, c.decoupled, c.l2, c.amsgrad, c.maximize ? -g[i] : g[i], i, p, s0, s1, s2);
      break;
    }
    case OptimizerStep::Kind::RMSprop: {
      const auto& c = a.rmsprop;
      optim_math::rmsprop_element(c, c.weight_decay, c.centered, c.momentum, c.maximize ? -g[i] : g[i], i, p, s0, s1,
                                  s2);
      break;
    }
  }
}

// Up to kMultiMax parameters per launch (index_math.hpp: the block -> parameter mapping, host-tested).
struct MultiOptArgs {
  int count = 0;
  int64_t first_block[kMultiMax + 1];
  int64_t n[kMultiMax];
  float* p[kMultiMax];
  const float* g[kMultiMax];
  float* s[3][kMultiMax];
  OptArgs a[kMultiMax];
};
static_assert(sizeof(MultiOptArgs) <= 4000, "kernel parameters are limited to 4 KiB");

__global__ void __launch_bounds__(kThreads) optim_multi_kernel(MultiOptArgs m) {
  const int64_t b = blockIdx.x;
  const int j = multi_block_param(m.first_block, m.count, b);
  int64_t begin, end;
  multi_block_range(m.first_block, m.n, j, b, begin, end);
  if (m.a[j].step_count != nullptr) {  // uniform in the block (j is the block's parameter)
    __shared__ OptArgs counted;
    if (threadIdx.x == 0) {
      OptArgs a = m.a[j];
      optim_math::adam_bias_corrections(a.adam, a.lr, a.beta1, a.beta2, *a.step_count);
      counted = a;
    }
    __syncthreads();
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
      optim_element(counted, i, m.p[j], m.g[j], m.s[0][j], m.s[1][j], m.s[2][j]);
    return;
  }
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    optim_element(m.a[j], i, m.p[j], m.g[j], m.s[0][j], m.s[1][j], m.s[2][j]);
}

float* state(TensorImpl* t, const TensorImpl& param, const char* what, bool needed) {
  if (!needed) return nullptr;
  OXM_CHECK(t != nullptr, InvalidArgument, "optimizer_step: missing state buffer ", what);
  OXM_CHECK(t->contiguous && t->dtype == param.dtype && t->numel == param.numel && t->device() == param.device(),
            InvalidArgument, "optimizer_step: state buffer ", what,
            " must be contiguous with the parameter's shape, dtype and device");
  return t->ptr<float>();
}

}  // namespace

void index_select(const TensorImpl& x, int64_t dim, const TensorImpl& idx, TensorImpl& out) {
  Geom g = geom_of(out.shape, "index_select");
  load(g, 0, out.strides);
  load(g, 1, x.strides);
  const int64_t xds = x.shape.empty() ? 0 : x.strides[dim];
  if (!x.shape.empty()) {
    g.stride[1][dim] = 0;
    g.stride[2][dim] = idx.shape.empty() ? 0 : idx.strides[0];
  }
  gather_bytes(g, out, x, idx, xds, "index_select");
}

void gather(const TensorImpl& x, int64_t dim, const TensorImpl& idx, TensorImpl& out) {
  Geom g = geom_of(out.shape, "gather");
  load(g, 0, out.strides);
  load(g, 1, x.strides);
  load(g, 2, idx.strides);
  const int64_t xds = x.shape.empty() ? 0 : x.strides[dim];
  if (!x.shape.empty()) g.stride[1][dim] = 0;
  gather_bytes(g, out, x, idx, xds, "gather");
}

// (key, position) pairs for the sorted scatters, sorted by key with CUB's stable radix sort (positions stay
// ascending within a key). `fill(keys, pos)` enqueues the kernel that writes the m unsorted pairs; keys are
// below 2^end_bit. The caller reads the sorted pairs before the object goes out of scope.
class SortedPairs {
 public:
  template <class Fill>
  SortedPairs(int64_t m, int end_bit, const char* op, Fill&& fill) : buf_(pair_bytes(m, op)) {
    uint64_t* base = buf_.as<uint64_t>();
    uint64_t* keys = base;
    int64_t* pos = reinterpret_cast<int64_t*>(base + m);
    keys_ = base + 2 * m;
    pos_ = reinterpret_cast<int64_t*>(base + 3 * m);
    fill(keys, pos);
    check_launch(op);
    size_t temp_bytes = 0;
    check(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys, keys_, pos, pos_, static_cast<int>(m), 0, end_bit,
                                          stream()),
          op, "cub::DeviceRadixSort::SortPairs (size query)");
    temp_ = std::make_unique<Scratch>(temp_bytes);
    check(cub::DeviceRadixSort::SortPairs(temp_->as<void>(), temp_bytes, keys, keys_, pos, pos_, static_cast<int>(m), 0,
                                          end_bit, stream()),
          op, "cub::DeviceRadixSort::SortPairs");
  }
  const uint64_t* keys() const { return keys_; }
  const int64_t* positions() const { return pos_; }

 private:
  // Bytes of the four pair arrays; CUB sorts at most 2^31 - 1 items (checked before allocating).
  static size_t pair_bytes(int64_t m, const char* op) {
    OXM_CHECK(m <= INT32_MAX, NotImplemented, op, ": more than 2^31 indices are not supported on cuda (", m, ")");
    return 4 * static_cast<size_t>(m) * sizeof(uint64_t);
  }
  Scratch buf_;  // unsorted keys, unsorted positions, sorted keys, sorted positions
  std::unique_ptr<Scratch> temp_;
  uint64_t* keys_ = nullptr;
  int64_t* pos_ = nullptr;
};

int bits_for(int64_t values) {  // keys in [0, values)
  return std::max(1, static_cast<int>(std::bit_width(static_cast<uint64_t>(values))));
}

template <class T>
void index_add_t(TensorImpl& out, int64_t dim, const TensorImpl& idx, const TensorImpl& src) {
  Geom g = geom_of(out.shape, "index_add");
  load(g, 0, out.strides);
  load(g, 1, src.strides);
  const int64_t n = out.numel;
  if (n == 0 || idx.numel == 0) return;
  const int64_t sds = src.strides[dim];
  g.stride[1][dim] = 0;
  const int64_t m = idx.numel, istride = idx.shape.empty() ? 0 : idx.strides[0];
  if (m <= kIndexAddScanMax) {
    index_add_kernel<T><<<blocks(n), kThreads, 0, stream()>>>(g, n, static_cast<int>(dim), out.ptr<T>(), src.ptr<T>(),
                                                              sds, idx.ptr<int64_t>(), m, istride);
    check_launch("index_add");
    return;
  }
  // Indices are validated to lie in [0, out.shape[dim]): sorting only the bits that range needs.
  const SortedPairs sorted(m, bits_for(out.shape[dim]), "index_add", [&](uint64_t* keys, int64_t* pos) {
    index_pairs_kernel<<<blocks(m), kThreads, 0, stream()>>>(m, idx.ptr<int64_t>(), istride, keys, pos);
  });
  index_add_sorted_kernel<T><<<blocks(n), kThreads, 0, stream()>>>(
      g, n, static_cast<int>(dim), out.ptr<T>(), src.ptr<T>(), sds, sorted.keys(), sorted.positions(), m);
  check_launch("index_add");
}  // the scratch goes back stream-ordered: safe right after enqueueing
void index_add(TensorImpl& out, int64_t dim, const TensorImpl& idx, const TensorImpl& src) {
  if (out.shape.empty()) {  // 0-d: treat as 1 element along a virtual dim of size 1
    OXM_FAIL(NotImplemented, "index_add: 0-d tensors are not supported on cuda");
  }
  switch (out.dtype) {
    case DType::F32:
      return index_add_t<float>(out, dim, idx, src);
    case DType::I64:
      return index_add_t<int64_t>(out, dim, idx, src);
    default:
      OXM_FAIL(UnsupportedDType, "index_add: dtype ", out.dtype, " is not supported on cuda (f32, i64)");
  }
}

template <class T>
void scatter_add_t(TensorImpl& out, int64_t dim, const TensorImpl& idx, const TensorImpl& src) {
  Geom g = geom_of(out.shape, "scatter_add");
  load(g, 0, out.strides);
  Geom ig = geom_of(idx.shape, "scatter_add");
  OXM_CHECK(ig.rank == g.rank, InvalidArgument, "scatter_add: index rank ", ig.rank, " differs from out rank ", g.rank);
  load(ig, 0, idx.strides);
  load(ig, 1, src.strides);
  const int64_t n = out.numel;
  if (n == 0 || idx.numel == 0) return;
  if (ig.size[dim] <= kIndexAddScanMax) {
    scatter_add_kernel<T><<<blocks(n), kThreads, 0, stream()>>>(g, n, static_cast<int>(dim), ig, out.ptr<T>(),
                                                                idx.ptr<int64_t>(), src.ptr<T>());
    check_launch("scatter_add");
    return;
  }
  // Long scans: each index position p becomes the pair (row-major flat index of its target in out, p).
  const int64_t m = idx.numel;
  const SortedPairs sorted(m, bits_for(n), "scatter_add", [&](uint64_t* keys, int64_t* pos) {
    scatter_pairs_kernel<<<blocks(m), kThreads, 0, stream()>>>(g, static_cast<int>(dim), ig, idx.ptr<int64_t>(), m,
                                                               keys, pos);
  });
  scatter_add_sorted_kernel<T><<<blocks(n), kThreads, 0, stream()>>>(g, n, ig, out.ptr<T>(), src.ptr<T>(),
                                                                     sorted.keys(), sorted.positions(), m);
  check_launch("scatter_add");
}
void scatter_add(TensorImpl& out, int64_t dim, const TensorImpl& idx, const TensorImpl& src) {
  if (out.shape.empty()) OXM_FAIL(NotImplemented, "scatter_add: 0-d tensors are not supported on cuda");
  switch (out.dtype) {
    case DType::F32:
      return scatter_add_t<float>(out, dim, idx, src);
    case DType::I64:
      return scatter_add_t<int64_t>(out, dim, idx, src);
    default:
      OXM_FAIL(UnsupportedDType, "scatter_add: dtype ", out.dtype, " is not supported on cuda (f32, i64)");
  }
}

void im2col(const TensorImpl& x, TensorImpl& cols, const ConvGeometry& g, double pad_value) {
  OXM_CHECK(x.dtype == DType::F32, UnsupportedDType, "im2col: dtype ", x.dtype, " is not supported on cuda (f32)");
  const int64_t n = cols.numel;
  if (n == 0) return;
  const int64_t C = x.shape[1];
  if (im2col_fits_32bit(n, C, g.kh, g.kw, g.oh, g.ow)) {
    im2col_kernel<float, uint32_t><<<blocks(n), kThreads, 0, stream()>>>(
        static_cast<uint32_t>(n), x.ptr<float>(), cols.ptr<float>(), static_cast<uint32_t>(C), x.shape[2], x.shape[3],
        x.strides[0], x.strides[1], x.strides[2], x.strides[3], g, static_cast<float>(pad_value));
  } else {
    im2col_kernel<float, int64_t><<<blocks(n), kThreads, 0, stream()>>>(
        n, x.ptr<float>(), cols.ptr<float>(), C, x.shape[2], x.shape[3], x.strides[0], x.strides[1], x.strides[2],
        x.strides[3], g, static_cast<float>(pad_value));
  }
  check_launch("im2col");
}

void col2im(const TensorImpl& cols, TensorImpl& x_grad, const ConvGeometry& g, bool zero_first) {
  OXM_CHECK(cols.dtype == DType::F32, UnsupportedDType, "col2im: dtype ", cols.dtype,
            " is not supported on cuda (f32)");
  OXM_CHECK(x_grad.contiguous, InvalidArgument, "col2im: x_grad must be contiguous");
  const int64_t n = x_grad.numel;
  if (n == 0) return;
  const int64_t H = x_grad.shape[2], W = x_grad.shape[3];
  if (n <= INT32_MAX) {  // then so are H and W (H * W <= n)
    col2im_kernel<float, uint32_t>
        <<<blocks(n), kThreads, 0, stream()>>>(static_cast<uint32_t>(n), cols.ptr<float>(), x_grad.ptr<float>(),
                                               zero_first, static_cast<uint32_t>(H), static_cast<uint32_t>(W), g);
  } else {
    col2im_kernel<float, int64_t>
        <<<blocks(n), kThreads, 0, stream()>>>(n, cols.ptr<float>(), x_grad.ptr<float>(), zero_first, H, W, g);
  }
  check_launch("col2im");
}

namespace {
// Checks one update and rounds its scalars (OptArgs); p0..p2 receive the state buffers it uses.
OptArgs optimizer_args(const OptimizerStep& s, const TensorImpl& param, const TensorImpl& grad, TensorImpl* s0,
                       TensorImpl* s1, TensorImpl* s2, float*& p0, float*& p1, float*& p2) {
  OXM_CHECK(param.contiguous && grad.contiguous && grad.dtype == param.dtype && grad.numel == param.numel,
            InvalidArgument, "optimizer_step: param and grad must be contiguous with one shape and dtype");
  OXM_CHECK(param.dtype == DType::F32, UnsupportedDType, "optimizer_step: parameters on cuda must be f32, got ",
            param.dtype);
  using K = OptimizerStep::Kind;
  OptArgs a{};
  a.kind = s.kind;
  p0 = p1 = p2 = nullptr;
  if (s.kind == K::SGD) {
    a.sgd = optim_math::sgd_scalars<float>(s);
    p0 = state(s0, param, "momentum_buffer", a.sgd.use_mom);
  } else if (s.kind == K::Adam || s.kind == K::AdamW) {
    a.adam = optim_math::adam_scalars<float>(s);
    a.lr = s.lr;
    a.beta1 = s.beta1;
    a.beta2 = s.beta2;
    p0 = state(s0, param, "exp_avg", true);
    p1 = state(s1, param, "exp_avg_sq", true);
    p2 = state(s2, param, "max_exp_avg_sq", a.adam.amsgrad);
  } else {
    a.rmsprop = optim_math::rmsprop_scalars<float>(s);
    p0 = state(s0, param, "square_avg", true);
    p1 = state(s1, param, "momentum_buffer", a.rmsprop.momentum);
    p2 = state(s2, param, "grad_avg", a.rmsprop.centered);
  }
  return a;
}
}  // namespace

void optimizer_steps(const OptimizerUpdate* updates, size_t count) {
  // Check every update before launching any, so a bad one leaves all parameters untouched.
  std::vector<OptArgs> args(count);
  std::vector<float*> st(3 * count);
  std::vector<int64_t> sizes(count);
  for (size_t i = 0; i < count; ++i) {
    const OptimizerUpdate& u = updates[i];
    args[i] = optimizer_args(u.step, *u.param, *u.grad, u.state[0], u.state[1], u.state[2], st[3 * i], st[3 * i + 1],
                             st[3 * i + 2]);
    if (u.step_count) {
      OXM_CHECK(u.step.kind == OptimizerStep::Kind::Adam || u.step.kind == OptimizerStep::Kind::AdamW, InvalidArgument,
                "optimizer_step: a step count in device memory is for Adam and AdamW only");
      OXM_CHECK(
          u.step_count->dtype == DType::I64 && u.step_count->numel == 1 && u.step_count->device() == u.param->device(),
          InvalidArgument, "optimizer_step: the step count must be one i64 element on the parameter's device");
      args[i].step_count = u.step_count->ptr<int64_t>();
    }
    sizes[i] = u.param->numel;
  }
  std::vector<MultiOptArgs> launches;
  plan_multi_launches(
      sizes.data(), static_cast<int64_t>(count),
      [&](int64_t i, int launch, int slot, int64_t first_block) {
        if (static_cast<size_t>(launch) == launches.size()) launches.push_back(MultiOptArgs{});
        MultiOptArgs& m = launches[static_cast<size_t>(launch)];
        const OptimizerUpdate& u = updates[i];
        m.first_block[slot] = first_block;
        m.n[slot] = sizes[static_cast<size_t>(i)];
        m.p[slot] = u.param->ptr<float>();
        m.g[slot] = u.grad->ptr<float>();
        for (int k = 0; k < 3; ++k) m.s[k][slot] = st[3 * static_cast<size_t>(i) + static_cast<size_t>(k)];
        m.a[slot] = args[static_cast<size_t>(i)];
      },
      [&](int launch, int slots, int64_t blocks) {
        MultiOptArgs& m = launches[static_cast<size_t>(launch)];
        m.count = slots;
        m.first_block[slots] = blocks;
      });
  for (const MultiOptArgs& l : launches) {
    optim_multi_kernel<<<static_cast<unsigned>(l.first_block[l.count]), kThreads, 0, stream()>>>(l);
    check_launch("optimizer_step");
  }
}

namespace {
// One thread per position: the clamped value, and an out-of-range position's key into the deferred-check word (the
// earliest call's first bad position wins: an atomic min, as the small SPD kernels report).
// With `kept`, the positions that count are added to it (integer atomics: the same total in any order).
__global__ void __launch_bounds__(kThreads)
    index_check_kernel(const int64_t* index, int64_t* safe, int64_t n, int64_t size, int64_t tag, int64_t ignore,
                       unsigned long long* word, unsigned long long* kept) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t key;
    bool counts;
    safe[i] = index_check_at(index[i], size, tag, i, ignore, &key, &counts);
    if (key != kSpdNoFailure) atomicMin(word, static_cast<unsigned long long>(key));
    if (kept && counts) atomicAdd(kept, 1ull);
  }
}
}  // namespace

void index_check(const ops::IndexCheckCall& c) {
  const int64_t n = c.index->numel;
  if (n == 0) return;
  OXM_CHECK(c.report.first != nullptr, Backend, "index check: the call has no report word");
  index_check_kernel<<<blocks(n), kThreads, 0, stream()>>>(
      c.index->ptr<int64_t>(), c.safe->ptr<int64_t>(), n, c.size, c.report.tag, c.ignore,
      c.report.first->ptr<unsigned long long>(), c.kept ? c.kept->ptr<unsigned long long>() : nullptr);
  check_launch("index check");
}

namespace {
// ---- clip_grad_norm_'s list kernels: the optimizer steps' launch plan (kMultiMax tensors, kMultiChunk elements per
// block). The norm: each block sums its chunk's terms in f64 by a fixed tree into partial[block], then one thread
// per tensor adds its blocks' partials in order (deterministic).
struct MultiListArgs {
  int count = 0;
  int64_t first_block[kMultiMax + 1];
  int64_t n[kMultiMax];
  float* t[kMultiMax];
  int64_t out_index[kMultiMax];
};
static_assert(sizeof(MultiListArgs) <= 4000, "kernel parameters are limited to 4 KiB");

__global__ void __launch_bounds__(kThreads)
    list_norm_partial_kernel(MultiListArgs m, int kind, float p, double* partial) {
  __shared__ double sh[kThreads];
  const int64_t b = blockIdx.x;
  const int j = multi_block_param(m.first_block, m.count, b);
  int64_t begin, end;
  multi_block_range(m.first_block, m.n, j, b, begin, end);
  double acc = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double v = optim_math::norm_term(m.t[j][i], kind, p);
    acc = kind == 3 ? optim_math::nan_max(acc, v) : acc + v;
  }
  sh[threadIdx.x] = acc;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s)
      sh[threadIdx.x] =
          kind == 3 ? optim_math::nan_max(sh[threadIdx.x], sh[threadIdx.x + s]) : sh[threadIdx.x] + sh[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[b] = sh[0];
}
__global__ void list_norm_finish_kernel(MultiListArgs m, int kind, const double* partial, float* out) {
  const int j = static_cast<int>(threadIdx.x);
  if (j >= m.count) return;
  double acc = 0;
  for (int64_t b = m.first_block[j]; b < m.first_block[j + 1]; ++b)
    acc = kind == 3 ? optim_math::nan_max(acc, partial[b]) : acc + partial[b];
  out[m.out_index[j]] = static_cast<float>(acc);
}
__global__ void __launch_bounds__(kThreads) list_scale_kernel(MultiListArgs m, float scale) {
  const int64_t b = blockIdx.x;
  const int j = multi_block_param(m.first_block, m.count, b);
  int64_t begin, end;
  multi_block_range(m.first_block, m.n, j, b, begin, end);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) m.t[j][i] *= scale;
}

// The launches of a list (empty tensors skipped), each with its tensors' positions in the list.
std::vector<MultiListArgs> plan_list(const TensorImpl* const* ts, size_t count) {
  std::vector<int64_t> sizes(count);
  for (size_t i = 0; i < count; ++i) sizes[i] = ts[i]->numel;
  std::vector<MultiListArgs> launches;
  plan_multi_launches(
      sizes.data(), static_cast<int64_t>(count),
      [&](int64_t i, int launch, int slot, int64_t first_block) {
        if (static_cast<size_t>(launch) == launches.size()) launches.push_back(MultiListArgs{});
        MultiListArgs& m = launches[static_cast<size_t>(launch)];
        m.first_block[slot] = first_block;
        m.n[slot] = sizes[static_cast<size_t>(i)];
        m.t[slot] = ts[i]->ptr<float>();
        m.out_index[slot] = i;
      },
      [&](int launch, int slots, int64_t blocks) {
        MultiListArgs& m = launches[static_cast<size_t>(launch)];
        m.count = slots;
        m.first_block[slots] = blocks;
      });
  return launches;
}
}  // namespace

bool has_tensor_list(const TensorImpl* const* ts, size_t count, const TensorImpl* out) {
  for (size_t i = 0; i < count; ++i)
    if (ts[i]->dtype != DType::F32 || !ts[i]->contiguous) return false;
  return out == nullptr || (out->dtype == DType::F32 && out->contiguous && out->numel == static_cast<int64_t>(count));
}

void tensor_list_norm(const ops::TensorListNormCall& c) {
  if (c.count == 0) return;
  float* out = c.out->ptr<float>();
  check(cudaMemsetAsync(out, 0, c.count * sizeof(float), stream()), "tensor list norm", "cudaMemsetAsync");
  const int kind = optim_math::norm_kind(c.norm_type);
  for (const MultiListArgs& l : plan_list(c.tensors, c.count)) {
    const int64_t blocks = l.first_block[l.count];
    Scratch partial(static_cast<size_t>(blocks) * sizeof(double));
    list_norm_partial_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream()>>>(
        l, kind, static_cast<float>(c.norm_type), partial.as<double>());
    check_launch("tensor list norm");
    list_norm_finish_kernel<<<1, kMultiMax, 0, stream()>>>(l, kind, partial.as<double>(), out);
    check_launch("tensor list norm");
  }
}

void tensor_list_scale(const ops::TensorListScaleCall& c) {
  for (const MultiListArgs& l : plan_list(c.tensors, c.count)) {
    list_scale_kernel<<<static_cast<unsigned>(l.first_block[l.count]), kThreads, 0, stream()>>>(
        l, static_cast<float>(c.scale));
    check_launch("tensor list scale");
  }
}

}  // namespace oxmera::detail::cuda
