// The generic strided/broadcast elementwise kernel family: one grid-stride kernel template over a coalesced
// Plan, instantiated with the op registry's functors (unary, binary), where, copy/cast and fill; and the dropout
// mask drawn on the device (Philox, for CUDA graph captures).
#include "backend/common/philox.hpp"
#include "backend/cuda/cuda_common.cuh"

namespace oxmera::detail::cuda {

template <int N>
struct Ptrs {
  char* p[N];
};

template <int N, class F>
__global__ void __launch_bounds__(kThreads) ew_kernel(Plan<N> plan, Ptrs<N> ptr, F f) {
  const int64_t n = plan.numel, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[N];
    if (plan.contiguous) {
      for (int o = 0; o < N; ++o) off[o] = i;
    } else if (plan.index32) {  // uniform across the grid: no divergence
      plan.offsets32(static_cast<uint32_t>(i), off);
    } else {
      plan.offsets(i, off);
    }
    f(ptr, off);
  }
}

void check_rank(const TensorImpl& t, const char* op) {
  OXM_CHECK(t.shape.size() <= static_cast<size_t>(kMaxDims), NotImplemented, op, ": the cuda backend supports up to ",
            kMaxDims, " dims, got shape ", t.shape);
}

namespace {

// ts[0] is the output; every operand has the output's shape (inputs already broadcast).
template <int N, class F>
void launch(const TensorImpl* const (&ts)[N], F f, const char* op) {
  const TensorImpl& out = *ts[0];
  check_rank(out, op);
  const int rank = static_cast<int>(out.shape.size());
  int64_t st[N][kMaxDims];
  const int64_t* sp[N];
  for (int o = 0; o < N; ++o) {
    for (int d = 0; d < rank; ++d) st[o][d] = ts[o]->strides[d];
    sp[o] = st[o];
  }
  int64_t shape[kMaxDims];
  for (int d = 0; d < rank; ++d) shape[d] = out.shape[d];
  Plan<N> plan;
  OXM_CHECK(make_plan<N>(rank, shape, sp, plan), NotImplemented, op, ": more than ", kMaxDims,
            " non-mergeable dims (shape ", out.shape, "); make the tensor contiguous first");
  if (plan.numel == 0) return;
  Ptrs<N> ptr;
  for (int o = 0; o < N; ++o) ptr.p[o] = ts[o]->byte_ptr();
  ew_kernel<N, F><<<blocks(plan.numel), kThreads, 0, stream()>>>(plan, ptr, f);
  check_launch(op);
}

template <class T>
__device__ inline T& at(char* p, int64_t i) {
  return reinterpret_cast<T*>(p)[i];
}

template <class Def, class T>
struct UnaryF {
  ops::OpParams params;
  __device__ void operator()(const Ptrs<2>& p, const int64_t* o) const {
    at<T>(p.p[0], o[0]) = ops::unary_fwd<Def, T>(at<T>(p.p[1], o[1]), params);
  }
};
template <class Def, class T>
struct UnaryGradF {
  ops::OpParams params;
  __device__ void operator()(const Ptrs<4>& p, const int64_t* o) const {
    at<T>(p.p[0], o[0]) =
        ops::unary_grad_of<Def, T>(at<T>(p.p[1], o[1]), at<T>(p.p[2], o[2]), at<T>(p.p[3], o[3]), params);
  }
};
template <class Def, class T>
struct BinaryF {
  __device__ void operator()(const Ptrs<3>& p, const int64_t* o) const {
    at<T>(p.p[0], o[0]) = Def::template fwd<T>(at<T>(p.p[1], o[1]), at<T>(p.p[2], o[2]));
  }
};
// One operand's gradient; an operand held on the host (a scalar) is passed by value (HostA / HostB).
template <class Def, class T, int Side, bool HostA, bool HostB>
struct BinaryGradF {
  T a_value, b_value;
  __device__ void operator()(const Ptrs<4>& p, const int64_t* o) const {
    const T g = at<T>(p.p[1], o[1]);
    const T a = HostA ? a_value : at<T>(p.p[2], o[2]);
    const T b = HostB ? b_value : at<T>(p.p[3], o[3]);
    if constexpr (Side == 0)
      at<T>(p.p[0], o[0]) = Def::template grad_a<T>(g, a, b);
    else
      at<T>(p.p[0], o[0]) = Def::template grad_b<T>(g, a, b);
  }
};
template <class Def, class T>
struct BinaryScalarF {
  T s;
  bool left;
  __device__ void operator()(const Ptrs<2>& p, const int64_t* o) const {
    const T x = at<T>(p.p[1], o[1]);
    at<T>(p.p[0], o[0]) = left ? Def::template fwd<T>(s, x) : Def::template fwd<T>(x, s);
  }
};
template <class T, class M>
struct WhereF {
  __device__ void operator()(const Ptrs<4>& p, const int64_t* o) const {
    at<T>(p.p[0], o[0]) = at<M>(p.p[1], o[1]) != M(0) ? at<T>(p.p[2], o[2]) : at<T>(p.p[3], o[3]);
  }
};
template <class S, class D>
struct CopyF {
  __device__ void operator()(const Ptrs<2>& p, const int64_t* o) const {
    at<D>(p.p[0], o[0]) = static_cast<D>(at<S>(p.p[1], o[1]));
  }
};
template <class T>
struct FillF {
  T v;
  __device__ void operator()(const Ptrs<1>& p, const int64_t* o) const { at<T>(p.p[0], o[0]) = v; }
};

const char* gpu_dtypes(bool ints) { return ints ? "f32, i64" : "f32"; }

template <class Def>
void unary_dispatch(const TensorImpl& x, TensorImpl& out, const ops::OpParams& params) {
  const TensorImpl* ts[2] = {&out, &x};
  if (x.dtype == DType::F32) return launch<2>(ts, UnaryF<Def, float>{params}, Def::name);
  if constexpr (Def::ints)
    if (x.dtype == DType::I64) return launch<2>(ts, UnaryF<Def, int64_t>{params}, Def::name);
  OXM_FAIL(UnsupportedDType, Def::name, ": dtype ", x.dtype, " is not supported on cuda (", gpu_dtypes(Def::ints), ")");
}
template <class Def>
void binary_dispatch(const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  const TensorImpl* ts[3] = {&out, &a, &b};
  if (a.dtype == DType::F32) return launch<3>(ts, BinaryF<Def, float>{}, Def::name);
  if constexpr (Def::ints)
    if (a.dtype == DType::I64) return launch<3>(ts, BinaryF<Def, int64_t>{}, Def::name);
  OXM_FAIL(UnsupportedDType, Def::name, ": dtype ", a.dtype, " is not supported on cuda (", gpu_dtypes(Def::ints), ")");
}

template <class Def, int Side>
void binary_grad_dispatch(const TensorImpl& g, const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  OXM_CHECK(g.dtype == DType::F32, UnsupportedDType, Def::name, " backward: dtype ", g.dtype,
            " is not supported on cuda (f32)");
  const bool host_a = a.device().is_cpu(), host_b = b.device().is_cpu();
  OXM_CHECK(!(host_a && host_b), InvalidArgument, Def::name, " backward: both operands are on the cpu");
  const float av = host_a ? *a.ptr<float>() : 0.f, bv = host_b ? *b.ptr<float>() : 0.f;
  // A host operand's slot gets g (never read), so the plan only walks device memory.
  const TensorImpl* ts[4] = {&out, &g, host_a ? &g : &a, host_b ? &g : &b};
  if (host_a) return launch<4>(ts, BinaryGradF<Def, float, Side, true, false>{av, bv}, Def::name);
  if (host_b) return launch<4>(ts, BinaryGradF<Def, float, Side, false, true>{av, bv}, Def::name);
  return launch<4>(ts, BinaryGradF<Def, float, Side, false, false>{av, bv}, Def::name);
}

template <class Def>
void binary_scalar_dispatch(const TensorImpl& t, double s, bool left, TensorImpl& out) {
  const TensorImpl* ts[2] = {&out, &t};
  if (t.dtype == DType::F32) return launch<2>(ts, BinaryScalarF<Def, float>{static_cast<float>(s), left}, Def::name);
  if constexpr (Def::ints)
    if (t.dtype == DType::I64)
      return launch<2>(ts, BinaryScalarF<Def, int64_t>{static_cast<int64_t>(s), left}, Def::name);
  OXM_FAIL(UnsupportedDType, Def::name, ": dtype ", t.dtype, " is not supported on cuda (", gpu_dtypes(Def::ints), ")");
}

template <class T>
void where_t(const TensorImpl& m, const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  const TensorImpl* ts[4] = {&out, &m, &a, &b};
  if (m.dtype == DType::U8) return launch<4>(ts, WhereF<T, uint8_t>{}, "where");
  OXM_CHECK(m.dtype == a.dtype, UnsupportedDType, "where: mask dtype ", m.dtype, " on cuda must be u8 or ", a.dtype);
  return launch<4>(ts, WhereF<T, T>{}, "where");
}

template <class S>
void copy_from(const TensorImpl& src, TensorImpl& dst) {
  const TensorImpl* ts[2] = {&dst, &src};
  switch (dst.dtype) {
    case DType::F32:
      return launch<2>(ts, CopyF<S, float>{}, "copy");
    case DType::I64:
      return launch<2>(ts, CopyF<S, int64_t>{}, "copy");
    case DType::U8:
      return launch<2>(ts, CopyF<S, uint8_t>{}, "copy");
    default:
      OXM_FAIL(UnsupportedDType, "copy: dtype ", dst.dtype, " does not live on cuda (f32, i64, u8)");
  }
}

}  // namespace

void unary(ops::UnaryOp op, const TensorImpl& x, TensorImpl& out, const ops::OpParams& p) {
  switch (op) {
#define OXM_X(id, ...)   \
  case ops::UnaryOp::id: \
    return unary_dispatch<ops::defs::id>(x, out, p);
    OXMERA_UNARY_OPS(OXM_X)
#undef OXM_X
    default:
      break;
  }
  OXM_FAIL(NotImplemented, "cuda: unknown unary op");
}

void unary_grad(ops::UnaryOp op, const TensorImpl& g, const TensorImpl& x, const TensorImpl& y, TensorImpl& out,
                const ops::OpParams& p) {
  OXM_CHECK(g.dtype == DType::F32, UnsupportedDType, ops::unary_name(op), " backward: dtype ", g.dtype,
            " is not supported on cuda (f32)");
  const TensorImpl* ts[4] = {&out, &g, &x, &y};
  switch (op) {
#define OXM_X(id, ...)   \
  case ops::UnaryOp::id: \
    return launch<4>(ts, UnaryGradF<ops::defs::id, float>{p}, ops::defs::id::name);
    OXMERA_UNARY_OPS(OXM_X)
#undef OXM_X
    default:
      break;
  }
  OXM_FAIL(NotImplemented, "cuda: unknown unary op");
}

void binary(ops::BinaryOp op, const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  switch (op) {
#define OXM_X(id, ...)    \
  case ops::BinaryOp::id: \
    return binary_dispatch<ops::defs::id>(a, b, out);
    OXMERA_BINARY_OPS(OXM_X)
#undef OXM_X
    default:
      break;
  }
  OXM_FAIL(NotImplemented, "cuda: unknown binary op");
}

void binary_grad(ops::BinaryOp op, int side, const TensorImpl& g, const TensorImpl& a, const TensorImpl& b,
                 TensorImpl& out) {
  switch (op) {
#define OXM_X(id, ...)                                                      \
  case ops::BinaryOp::id:                                                   \
    return side == 0 ? binary_grad_dispatch<ops::defs::id, 0>(g, a, b, out) \
                     : binary_grad_dispatch<ops::defs::id, 1>(g, a, b, out);
    OXMERA_BINARY_OPS(OXM_X)
#undef OXM_X
    default:
      break;
  }
  OXM_FAIL(NotImplemented, "cuda: unknown binary op");
}

void binary_scalar(ops::BinaryOp op, const TensorImpl& t, double s, bool left, TensorImpl& out) {
  switch (op) {
#define OXM_X(id, ...)    \
  case ops::BinaryOp::id: \
    return binary_scalar_dispatch<ops::defs::id>(t, s, left, out);
    OXMERA_BINARY_OPS(OXM_X)
#undef OXM_X
    default:
      break;
  }
  OXM_FAIL(NotImplemented, "cuda: unknown binary op");
}

void where(const TensorImpl& m, const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  switch (a.dtype) {
    case DType::F32:
      return where_t<float>(m, a, b, out);
    case DType::I64:
      return where_t<int64_t>(m, a, b, out);
    case DType::U8:
      return where_t<uint8_t>(m, a, b, out);
    default:
      OXM_FAIL(UnsupportedDType, "where: dtype ", a.dtype, " does not live on cuda (f32, i64, u8)");
  }
}

void copy(const TensorImpl& src, TensorImpl& dst) {
  switch (src.dtype) {
    case DType::F32:
      return copy_from<float>(src, dst);
    case DType::I64:
      return copy_from<int64_t>(src, dst);
    case DType::U8:
      return copy_from<uint8_t>(src, dst);
    default:
      OXM_FAIL(UnsupportedDType, "copy: dtype ", src.dtype, " does not live on cuda (f32, i64, u8)");
  }
}

void fill(TensorImpl& dst, double v) {
  const TensorImpl* ts[1] = {&dst};
  switch (dst.dtype) {
    case DType::F32:
      return launch<1>(ts, FillF<float>{static_cast<float>(v)}, "fill");
    case DType::I64:
      return launch<1>(ts, FillF<int64_t>{static_cast<int64_t>(v)}, "fill");
    case DType::U8:
      return launch<1>(ts, FillF<uint8_t>{static_cast<uint8_t>(v)}, "fill");
    default:
      OXM_FAIL(UnsupportedDType, "fill: dtype ", dst.dtype, " does not live on cuda (f32, i64, u8)");
  }
}

namespace {
// One thread per Philox block (four mask elements); the seed and offset are read from device memory, where a CUDA
// graph's replay hook writes them before each replay.
__global__ void __launch_bounds__(kThreads)
    dropout_mask_kernel(float* mask, const int64_t* state, int64_t numel, double p, double scale) {
  const auto seed = static_cast<uint64_t>(state[0]), offset = static_cast<uint64_t>(state[1]);
  const int64_t n_blocks = (numel + 3) / 4;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < n_blocks;
       b += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dropout_mask_block(seed, offset, b, numel, p, scale, mask);
}
}  // namespace

void dropout_mask(const ops::DropoutMaskCall& c) {
  const int64_t n_blocks = (c.mask->numel + 3) / 4;
  if (n_blocks == 0) return;
  dropout_mask_kernel<<<blocks(n_blocks), kThreads, 0, stream()>>>(c.mask->ptr<float>(), c.state->ptr<int64_t>(),
                                                                   c.mask->numel, c.p, c.scale);
  check_launch("dropout");
}

}  // namespace oxmera::detail::cuda
