// CPU kernels. Compiled once per ISA level with OXM_ISA set to the namespace name (see CMakeLists.txt).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/common/index_math.hpp"
#include "backend/cpu/blas.hpp"
#include "backend/cpu/cpu_kernels.hpp"
#include "backend/cpu/parallel.hpp"
#include "backend/cpu/simd.hpp"
#include "backend/cpu/vec_math.hpp"
#include "backend/mat_layout.hpp"
#include "core/convert.hpp"

#ifndef OXM_ISA
#define OXM_ISA isa_base
#endif

namespace oxmera::detail::OXM_ISA {

// cpu_optim.cpp (the same ISA namespace)
void optimizer_step(const OptimizerStep& s, TensorImpl& param, const TensorImpl& grad, TensorImpl* s0, TensorImpl* s1,
                    TensorImpl* s2);
// cpu_loss.cpp (the same ISA namespace)
void cross_entropy(const TensorImpl& x, const TensorImpl& target, double label_smoothing, double scale,
                   TensorImpl& loss, TensorImpl& lse);
void cross_entropy_backward(const TensorImpl& x, const TensorImpl& target, const TensorImpl& lse, const TensorImpl& g,
                            double label_smoothing, double scale, TensorImpl& grad_x);
// rnn_kernels.cpp (the same ISA namespace)
void lstm_cell(const ops::LstmCellCall& c);
void lstm_cell_backward(const ops::LstmCellBackwardCall& c);
void gru_cell(const ops::GruCellCall& c);
void gru_cell_backward(const ops::GruCellBackwardCall& c);
void rnn_cell(const ops::RnnCellCall& c);
// pool_kernels.cpp (the same ISA namespace)
void max_pool2d(const ops::MaxPool2dCall& c);
void max_pool2d_backward(const ops::MaxPool2dBackwardCall& c);
// norm_kernels.cpp (the same ISA namespace)
void layer_norm(const TensorImpl& x, const TensorImpl* w, const TensorImpl* b, double eps, int64_t n, TensorImpl& y,
                TensorImpl& mean, TensorImpl& rstd);
void layer_norm_backward(const TensorImpl& x, const TensorImpl& g, const TensorImpl* w, const TensorImpl& mean,
                         const TensorImpl& rstd, int64_t n, TensorImpl& gx, TensorImpl* gw, TensorImpl* gb);
void tensor_list_norm(const ops::TensorListNormCall& c);
void tensor_list_scale(const ops::TensorListScaleCall& c);
// attention_kernels.cpp (the same ISA namespace)
void attention(const ops::AttentionCall& c);
void attention_backward(const ops::AttentionBackwardCall& c);

namespace {

using ops::ArgReduceOp;
using ops::BinaryOp;
using ops::ReduceOp;
using ops::UnaryOp;

constexpr int kMaxDims = 16;
constexpr int64_t kGrainCheap = 32768;  // elements per thread before a simple op goes parallel
constexpr int64_t kGrainCostly = 4096;  // for transcendental ops

// ---------------------------------------------------------------- elementwise iteration
// The shared coalesced loop nest (backend/common/index_math.hpp) with byte strides, plus each operand's base
// pointer; dim 0 is the innermost. A plan always has at least one dim (a 0-d shape is one dim of size 1).
template <int N>
struct Plan {
  CoalescedPlan<N, kMaxDims> loop;
  char* base[N];
};

template <int N>
Plan<N> make_plan(const Shape& shape, const TensorImpl* const (&ops)[N]) {
  Plan<N> p;
  int64_t item[N];
  for (int o = 0; o < N; ++o) {
    p.base[o] = ops[o]->byte_ptr();
    item[o] = static_cast<int64_t>(itemsize(ops[o]->dtype));
  }
  const bool fits = coalesce(
      static_cast<int>(shape.size()), shape.data(),
      [&](int o, int d) { return ops[o]->strides[static_cast<size_t>(d)] * item[o]; }, p.loop);
  OXM_CHECK(fits, NotImplemented, "elementwise kernel: more than ", kMaxDims, " non-mergeable dims (shape ", shape,
            "); make the tensor contiguous first");
  if (p.loop.ndim == 0) {
    p.loop.ndim = 1;
    p.loop.size[0] = 1;
    for (int o = 0; o < N; ++o) p.loop.stride[o][0] = 0;
  }
  return p;
}

// Runs inner(ptrs, inner_strides, count) over all elements of the plan, in parallel above `grain`.
template <int N, class F>
void run_plan(const Plan<N>& plan, int64_t grain, F&& inner) {
  const CoalescedPlan<N, kMaxDims>& p = plan.loop;
  const int64_t total = p.numel;
  if (total == 0) return;
  parallel_for(total, grain, [&](int64_t begin, int64_t end) {
    int64_t idx[kMaxDims];
    char* ptr[N];
    int64_t inner_stride[N];
    for (int o = 0; o < N; ++o) inner_stride[o] = p.stride[o][0];
    int64_t rem = begin;
    for (int d = 0; d < p.ndim; ++d) {
      idx[d] = rem % p.size[d];
      rem /= p.size[d];
    }
    int64_t pos = begin;
    bool fresh = true;
    while (pos < end) {
      if (fresh) {
        for (int o = 0; o < N; ++o) {
          char* q = plan.base[o];
          for (int d = 0; d < p.ndim; ++d) q += idx[d] * p.stride[o][d];
          ptr[o] = q;
        }
      }
      int64_t n = std::min(p.size[0] - idx[0], end - pos);
      inner(ptr, inner_stride, n);
      pos += n;
      idx[0] += n;
      fresh = true;
      if (idx[0] == p.size[0] && p.ndim > 1) {
        // Next row: step the pointers along dim 1 instead of recomputing them (small inner rows are common).
        idx[0] = 0;
        ++idx[1];
        if (idx[1] < p.size[1]) {
          // ptr is at the segment start, column size0 - n of the finished row.
          for (int o = 0; o < N; ++o) ptr[o] += p.stride[o][1] - p.stride[o][0] * (p.size[0] - n);
          fresh = false;
        } else {
          for (int d = 1; d + 1 < p.ndim && idx[d] == p.size[d]; ++d) {
            idx[d] = 0;
            ++idx[d + 1];
          }
        }
      }
    }
  });
}

template <class T>
inline T& at(char* p, int64_t stride, int64_t i) {
  return *reinterpret_cast<T*>(p + i * stride);
}

// ---------------------------------------------------------------- unary / binary
// The per-element math a CPU kernel runs: the op registry's definition with the vectorisable elementary
// functions (VecMath, vec_math.hpp), so the loops below compile to SIMD code.
using CpuMath = VecMath;
// On the elementwise inner loops: inline the whole per-element math (the op's def, its gradient and the
// vectorised functions) into the loop, which the vectoriser needs; GCC's size heuristics otherwise leave calls
// in the bigger gradients (gelu, erf, pow) and those loops run scalar.
#define OXM_FLATTEN __attribute__((flatten))
// Ops whose vectorised math holds for |x| <= vm::trig_limit only: their kernels recompute larger arguments with the
// C library in a second, scalar pass (rare in practice; a scan otherwise).
template <class Def>
constexpr bool kRangeLimited = std::is_same_v<Def, ops::defs::Sin> || std::is_same_v<Def, ops::defs::Cos>;
// Whether any of n strided elements is beyond that range: an integer OR reduction (vectorised when contiguous; a
// bool one is not), so the common case costs one cheap read pass, not a branch per element.
template <class T>
bool any_needs_libm(const char* p, int64_t stride, int64_t n) {
  using I = typename vm::Fp<T>::I;
  I any = 0;
  if (stride == sizeof(T)) {
    const T* x = reinterpret_cast<const T*>(p);
    for (int64_t i = 0; i < n; ++i) any |= I(vm::trig_needs_libm(x[i]));
  } else {
    for (int64_t i = 0; i < n; ++i) any |= I(vm::trig_needs_libm(*reinterpret_cast<const T*>(p + i * stride)));
  }
  return any != 0;
}

template <class Def, class T>
void unary_typed(const TensorImpl& x, TensorImpl& out, int64_t grain, const ops::OpParams& prm) {
  const TensorImpl* ops[2] = {&out, &x};
  const auto p = make_plan(out.shape, ops);
  const ops::OpParams params = prm;
  run_plan(p, grain, [params](char** ptr, const int64_t* s, int64_t n) OXM_FLATTEN {
    T* o = reinterpret_cast<T*>(ptr[0]);
    const T* a = reinterpret_cast<const T*>(ptr[1]);
    if (s[0] == sizeof(T) && s[1] == sizeof(T)) {
      for (int64_t i = 0; i < n; ++i) o[i] = ops::unary_fwd<Def, T, CpuMath>(a[i], params);
    } else {
      for (int64_t i = 0; i < n; ++i)
        at<T>(ptr[0], s[0], i) = ops::unary_fwd<Def, T, CpuMath>(at<T>(ptr[1], s[1], i), params);
    }
    if constexpr (kRangeLimited<Def> && std::is_floating_point_v<T>) {
      if (any_needs_libm<T>(ptr[1], s[1], n)) {
        for (int64_t i = 0; i < n; ++i) {
          const T xv = at<T>(ptr[1], s[1], i);
          if (vm::trig_needs_libm(xv)) at<T>(ptr[0], s[0], i) = ops::unary_fwd<Def, T>(xv, params);
        }
      }
    }
  });
}

template <class Def>
void unary_dispatch(const TensorImpl& x, TensorImpl& out, int64_t grain, const ops::OpParams& p) {
  switch (x.dtype) {
    case DType::F32:
      return unary_typed<Def, float>(x, out, grain, p);
    case DType::F64:
      return unary_typed<Def, double>(x, out, grain, p);
    case DType::I64:
      if constexpr (Def::ints) return unary_typed<Def, int64_t>(x, out, grain, p);
      break;
    default:
      break;
  }
  OXM_FAIL(UnsupportedDType, Def::name, ": dtype ", x.dtype, " is not supported");
}

// The registry's cost class picks the parallel grain.
bool is_cheap(UnaryOp op) { return !ops::info(op).costly; }

void unary(UnaryOp op, const TensorImpl& x, TensorImpl& out, const ops::OpParams& p) {
  int64_t grain = is_cheap(op) ? kGrainCheap : kGrainCostly;
  switch (op) {
#define OXM_X(id, ...) \
  case UnaryOp::id:    \
    return unary_dispatch<ops::defs::id>(x, out, grain, p);
    OXMERA_UNARY_OPS(OXM_X)
#undef OXM_X
    default:
      break;
  }
}

// Inner loop of a 3-input gradient kernel with a contiguous output: each input is contiguous (C) or a
// broadcast scalar along the run (stride 0), chosen at compile time so the loop vectorises. Returns false for
// other strides (the caller then runs the strided loop).
template <class T, class F>
bool grad_run(char** ptr, const int64_t* s, int64_t n, F f) {
  constexpr int64_t e = sizeof(T);
  if (s[0] != e) return false;
  for (int o = 1; o < 4; ++o)
    if (s[o] != e && s[o] != 0) return false;
  T* out = reinterpret_cast<T*>(ptr[0]);
  const T* p1 = reinterpret_cast<const T*>(ptr[1]);
  const T* p2 = reinterpret_cast<const T*>(ptr[2]);
  const T* p3 = reinterpret_cast<const T*>(ptr[3]);
  auto loop = [&](auto c1, auto c2, auto c3) {
    for (int64_t i = 0; i < n; ++i)
      out[i] = f(p1[decltype(c1)::value ? i : 0], p2[decltype(c2)::value ? i : 0], p3[decltype(c3)::value ? i : 0]);
  };
  using Y = std::true_type;
  using N = std::false_type;
  switch ((s[1] == e ? 4 : 0) | (s[2] == e ? 2 : 0) | (s[3] == e ? 1 : 0)) {
    case 7:
      loop(Y{}, Y{}, Y{});
      break;
    case 6:
      loop(Y{}, Y{}, N{});
      break;
    case 5:
      loop(Y{}, N{}, Y{});
      break;
    case 4:
      loop(Y{}, N{}, N{});
      break;
    case 3:
      loop(N{}, Y{}, Y{});
      break;
    case 2:
      loop(N{}, Y{}, N{});
      break;
    case 1:
      loop(N{}, N{}, Y{});
      break;
    default:
      loop(N{}, N{}, N{});
      break;
  }
  return true;
}

template <class Def, class T>
void unary_grad_typed(const TensorImpl& g, const TensorImpl& x, const TensorImpl& y, TensorImpl& out, int64_t grain,
                      const ops::OpParams& prm) {
  const TensorImpl* ops[4] = {&out, &g, &x, &y};
  const auto p = make_plan(out.shape, ops);
  const ops::OpParams params = prm;
  run_plan(p, grain, [params](char** ptr, const int64_t* s, int64_t n) OXM_FLATTEN {
    auto f = [params](T gv, T xv, T yv) { return ops::unary_grad_of<Def, T, CpuMath>(gv, xv, yv, params); };
    if (!grad_run<T>(ptr, s, n, f)) {
      for (int64_t i = 0; i < n; ++i)
        at<T>(ptr[0], s[0], i) = f(at<T>(ptr[1], s[1], i), at<T>(ptr[2], s[2], i), at<T>(ptr[3], s[3], i));
    }
    if constexpr (kRangeLimited<Def>) {
      if (any_needs_libm<T>(ptr[2], s[2], n)) {
        for (int64_t i = 0; i < n; ++i) {
          const T xv = at<T>(ptr[2], s[2], i);
          if (vm::trig_needs_libm(xv))
            at<T>(ptr[0], s[0], i) =
                ops::unary_grad_of<Def, T>(at<T>(ptr[1], s[1], i), xv, at<T>(ptr[3], s[3], i), params);
        }
      }
    }
  });
}

void unary_grad(UnaryOp op, const TensorImpl& g, const TensorImpl& x, const TensorImpl& y, TensorImpl& out,
                const ops::OpParams& p) {
  const int64_t grain = is_cheap(op) ? kGrainCheap : kGrainCostly;
  switch (op) {
#define OXM_X(id, ...)                                                                                 \
  case UnaryOp::id:                                                                                    \
    if (g.dtype == DType::F32) return unary_grad_typed<ops::defs::id, float>(g, x, y, out, grain, p);  \
    if (g.dtype == DType::F64) return unary_grad_typed<ops::defs::id, double>(g, x, y, out, grain, p); \
    break;
    OXMERA_UNARY_OPS(OXM_X)
#undef OXM_X
    default:
      break;
  }
  OXM_FAIL(UnsupportedDType, ops::unary_name(op), " backward: dtype ", g.dtype, " is not supported (f32, f64)");
}

// Binary ops that call transcendental functions (parallel from a smaller size).
template <class Def>
constexpr bool costly_binary() {
  return Def::costly;
}

template <class Def, class T>
void binary_typed(const TensorImpl& a, const TensorImpl& b, TensorImpl& out, int64_t grain) {
  const TensorImpl* ops[3] = {&out, &a, &b};
  const auto p = make_plan(out.shape, ops);
  run_plan(p, grain, [](char** ptr, const int64_t* s, int64_t n) OXM_FLATTEN {
    T* o = reinterpret_cast<T*>(ptr[0]);
    const T* x = reinterpret_cast<const T*>(ptr[1]);
    const T* y = reinterpret_cast<const T*>(ptr[2]);
    constexpr int64_t e = sizeof(T);
    if (s[0] == e && s[1] == e && s[2] == e) {
      for (int64_t i = 0; i < n; ++i) o[i] = Def::template fwd<T, CpuMath>(x[i], y[i]);
    } else if (s[0] == e && s[1] == e && s[2] == 0) {
      const T yv = *y;
      for (int64_t i = 0; i < n; ++i) o[i] = Def::template fwd<T, CpuMath>(x[i], yv);
    } else if (s[0] == e && s[1] == 0 && s[2] == e) {
      const T xv = *x;
      for (int64_t i = 0; i < n; ++i) o[i] = Def::template fwd<T, CpuMath>(xv, y[i]);
    } else {
      for (int64_t i = 0; i < n; ++i)
        at<T>(ptr[0], s[0], i) = Def::template fwd<T, CpuMath>(at<T>(ptr[1], s[1], i), at<T>(ptr[2], s[2], i));
    }
  });
}

template <class Def>
void binary_dispatch(const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  int64_t grain = costly_binary<Def>() ? kGrainCostly : kGrainCheap;
  switch (a.dtype) {
    case DType::F32:
      return binary_typed<Def, float>(a, b, out, grain);
    case DType::F64:
      return binary_typed<Def, double>(a, b, out, grain);
    case DType::I64:
      if constexpr (Def::ints) return binary_typed<Def, int64_t>(a, b, out, grain);
      break;
    default:
      break;
  }
  OXM_FAIL(UnsupportedDType, Def::name, ": dtype ", a.dtype, " is not supported");
}

void binary(BinaryOp op, const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  switch (op) {
#define OXM_X(id, ...) \
  case BinaryOp::id:   \
    return binary_dispatch<ops::defs::id>(a, b, out);
    OXMERA_BINARY_OPS(OXM_X)
#undef OXM_X
    default:
      break;
  }
}

template <class Def, class T, int Side>
void binary_grad_typed(const TensorImpl& g, const TensorImpl& a, const TensorImpl& b, TensorImpl& out, int64_t grain) {
  const TensorImpl* ops[4] = {&out, &g, &a, &b};
  const auto p = make_plan(out.shape, ops);
  run_plan(p, grain, [](char** ptr, const int64_t* s, int64_t n) OXM_FLATTEN {
    auto f = [](T gv, T av, T bv) {
      if constexpr (Side == 0)
        return Def::template grad_a<T, CpuMath>(gv, av, bv);
      else
        return Def::template grad_b<T, CpuMath>(gv, av, bv);
    };
    if (grad_run<T>(ptr, s, n, f)) return;
    for (int64_t i = 0; i < n; ++i)
      at<T>(ptr[0], s[0], i) = f(at<T>(ptr[1], s[1], i), at<T>(ptr[2], s[2], i), at<T>(ptr[3], s[3], i));
  });
}

template <class Def>
void binary_grad_dispatch(int side, const TensorImpl& g, const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  const int64_t grain = costly_binary<Def>() ? kGrainCostly : kGrainCheap;
  if (g.dtype == DType::F32)
    return side == 0 ? binary_grad_typed<Def, float, 0>(g, a, b, out, grain)
                     : binary_grad_typed<Def, float, 1>(g, a, b, out, grain);
  if (g.dtype == DType::F64)
    return side == 0 ? binary_grad_typed<Def, double, 0>(g, a, b, out, grain)
                     : binary_grad_typed<Def, double, 1>(g, a, b, out, grain);
  OXM_FAIL(UnsupportedDType, Def::name, " backward: dtype ", g.dtype, " is not supported (f32, f64)");
}

void binary_grad(BinaryOp op, int side, const TensorImpl& g, const TensorImpl& a, const TensorImpl& b,
                 TensorImpl& out) {
  switch (op) {
#define OXM_X(id, ...) \
  case BinaryOp::id:   \
    return binary_grad_dispatch<ops::defs::id>(side, g, a, b, out);
    OXMERA_BINARY_OPS(OXM_X)
#undef OXM_X
    default:
      break;
  }
  OXM_FAIL(NotImplemented, "cpu: unknown binary op");
}

template <class Def, class T>
void binary_scalar_typed(const TensorImpl& t, T s, bool left, TensorImpl& out, int64_t grain) {
  const TensorImpl* ops[2] = {&out, &t};
  const auto p = make_plan(out.shape, ops);
  run_plan(p, grain, [s, left](char** ptr, const int64_t* st, int64_t n) OXM_FLATTEN {
    if (st[0] == sizeof(T) && st[1] == sizeof(T)) {
      T* o = reinterpret_cast<T*>(ptr[0]);
      const T* x = reinterpret_cast<const T*>(ptr[1]);
      if (left) {
        for (int64_t i = 0; i < n; ++i) o[i] = Def::template fwd<T, CpuMath>(s, x[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) o[i] = Def::template fwd<T, CpuMath>(x[i], s);
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const T x = at<T>(ptr[1], st[1], i);
        at<T>(ptr[0], st[0], i) = left ? Def::template fwd<T, CpuMath>(s, x) : Def::template fwd<T, CpuMath>(x, s);
      }
    }
  });
}

template <class Def>
void binary_scalar_dispatch(const TensorImpl& t, double s, bool left, TensorImpl& out) {
  const int64_t grain = costly_binary<Def>() ? kGrainCostly : kGrainCheap;
  switch (t.dtype) {
    case DType::F32:
      return binary_scalar_typed<Def, float>(t, static_cast<float>(s), left, out, grain);
    case DType::F64:
      return binary_scalar_typed<Def, double>(t, s, left, out, grain);
    case DType::I64:
      if constexpr (Def::ints) return binary_scalar_typed<Def, int64_t>(t, convert_value<int64_t>(s), left, out, grain);
      break;
    default:
      break;
  }
  OXM_FAIL(UnsupportedDType, Def::name, ": dtype ", t.dtype, " is not supported");
}

void binary_scalar(BinaryOp op, const TensorImpl& t, double s, bool left, TensorImpl& out) {
  switch (op) {
#define OXM_X(id, ...) \
  case BinaryOp::id:   \
    return binary_scalar_dispatch<ops::defs::id>(t, s, left, out);
    OXMERA_BINARY_OPS(OXM_X)
#undef OXM_X
    default:
      break;
  }
  OXM_FAIL(NotImplemented, "cpu: unknown binary op");
}

template <class T, class M>
void where_typed(const TensorImpl& m, const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  const TensorImpl* ops[4] = {&out, &m, &a, &b};
  const auto p = make_plan(out.shape, ops);
  run_plan(p, kGrainCheap, [](char** ptr, const int64_t* s, int64_t n) {
    // Contiguous output and mask with each value contiguous or a broadcast scalar (masking with a constant, and
    // the backward's where(m, g, 0)): the variants are chosen at compile time so the selects vectorise.
    if (s[0] == sizeof(T) && s[1] == sizeof(M) && (s[2] == sizeof(T) || s[2] == 0) &&
        (s[3] == sizeof(T) || s[3] == 0)) {
      T* o = reinterpret_cast<T*>(ptr[0]);
      const M* mk = reinterpret_cast<const M*>(ptr[1]);
      const T* a = reinterpret_cast<const T*>(ptr[2]);
      const T* b = reinterpret_cast<const T*>(ptr[3]);
      if (s[2] != 0 && s[3] != 0) {
        for (int64_t i = 0; i < n; ++i) o[i] = mk[i] != M(0) ? a[i] : b[i];
      } else if (s[2] != 0) {
        const T bv = *b;
        for (int64_t i = 0; i < n; ++i) o[i] = mk[i] != M(0) ? a[i] : bv;
      } else if (s[3] != 0) {
        const T av = *a;
        for (int64_t i = 0; i < n; ++i) o[i] = mk[i] != M(0) ? av : b[i];
      } else {
        const T av = *a, bv = *b;
        for (int64_t i = 0; i < n; ++i) o[i] = mk[i] != M(0) ? av : bv;
      }
      return;
    }
    for (int64_t i = 0; i < n; ++i)
      at<T>(ptr[0], s[0], i) = at<M>(ptr[1], s[1], i) != M(0) ? at<T>(ptr[2], s[2], i) : at<T>(ptr[3], s[3], i);
  });
}
template <class T>
void where_mask(const TensorImpl& m, const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  if (m.dtype == DType::U8) return where_typed<T, uint8_t>(m, a, b, out);
  return where_typed<T, T>(m, a, b, out);
}
void where(const TensorImpl& m, const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  switch (a.dtype) {
    case DType::F32:
      return where_mask<float>(m, a, b, out);
    case DType::F64:
      return where_mask<double>(m, a, b, out);
    case DType::I64:
      return where_mask<int64_t>(m, a, b, out);
    case DType::U8:
      return where_mask<uint8_t>(m, a, b, out);
  }
}

// ---------------------------------------------------------------- copy / cast / fill
// A copy whose two innermost (coalesced) dims are transposed between source and destination (contiguous() of a
// transposed or permuted view): a row-by-row walk reads the source a column at a time, one cache line per
// element once the matrix outgrows the cache (4x torch's time at [1024, 1024]). Tiles of kTile x kTile keep both
// sides' lines in cache. `p` is the copy's plan (operand 0 the destination); returns false when it does not apply.
template <class T>
bool copy_transposed_tiles(const Plan<2>& p) {
  constexpr int64_t kTile = 16;
  const auto& l = p.loop;
  const int64_t item = sizeof(T);
  if (l.ndim < 2 || l.stride[0][0] != item || l.stride[1][1] != item || l.stride[1][0] == item ||
      l.size[0] < kTile / 2 || l.size[1] < kTile / 2)
    return false;
  const int64_t n0 = l.size[0], n1 = l.size[1];
  const int64_t ds1 = l.stride[0][1] / item, ss0 = l.stride[1][0] / item;
  if (l.stride[0][1] % item != 0 || l.stride[1][0] % item != 0) return false;
  int64_t outer = 1;
  for (int d = 2; d < l.ndim; ++d) outer *= l.size[d];
  const int64_t tiles1 = (n1 + kTile - 1) / kTile;
  // One task per (outer index, tile row); each walks its tile row's tiles.
  parallel_for(outer * tiles1, std::max<int64_t>(1, kGrainCheap / (kTile * n0)), [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      int64_t rem = task / tiles1;
      const int64_t t1 = task % tiles1;
      char* dbase = p.base[0];
      const char* sbase = p.base[1];
      for (int d = 2; d < l.ndim; ++d) {
        const int64_t i = rem % l.size[d];
        rem /= l.size[d];
        dbase += i * l.stride[0][d];
        sbase += i * l.stride[1][d];
      }
      T* dst = reinterpret_cast<T*>(dbase);
      const T* src = reinterpret_cast<const T*>(sbase);
      const int64_t a0 = t1 * kTile, a1 = std::min(n1, a0 + kTile);
      for (int64_t b0 = 0; b0 < n0; b0 += kTile) {
        const int64_t b1 = std::min(n0, b0 + kTile);
        for (int64_t a = a0; a < a1; ++a) {
          T* __restrict drow = dst + a * ds1;
          const T* __restrict scol = src + a;
          for (int64_t b = b0; b < b1; ++b) drow[b] = scol[b * ss0];
        }
      }
    }
  });
  return true;
}

template <class S, class D>
void copy_typed(const TensorImpl& src, TensorImpl& dst) {
  const TensorImpl* ops[2] = {&dst, &src};
  const auto p = make_plan(dst.shape, ops);
  if constexpr (std::is_same_v<S, D>) {
    if (copy_transposed_tiles<D>(p)) return;
  }
  run_plan(p, kGrainCheap, [](char** ptr, const int64_t* s, int64_t n) {
    if (s[0] == sizeof(D) && s[1] == sizeof(S)) {
      D* o = reinterpret_cast<D*>(ptr[0]);
      const S* x = reinterpret_cast<const S*>(ptr[1]);
      if constexpr (std::is_same_v<S, D>) {
        if (n * static_cast<int64_t>(sizeof(D)) <= 128) {
          for (int64_t i = 0; i < n; ++i) o[i] = x[i];  // short rows (a permute's runs): no call per row
        } else {
          std::memcpy(o, x, static_cast<size_t>(n) * sizeof(D));
        }
      } else {
        for (int64_t i = 0; i < n; ++i) o[i] = convert_value<D>(x[i]);
      }
    } else {
      for (int64_t i = 0; i < n; ++i) at<D>(ptr[0], s[0], i) = convert_value<D>(at<S>(ptr[1], s[1], i));
    }
  });
}
template <class S>
void copy_from(const TensorImpl& src, TensorImpl& dst) {
  switch (dst.dtype) {
    case DType::F32:
      return copy_typed<S, float>(src, dst);
    case DType::F64:
      return copy_typed<S, double>(src, dst);
    case DType::I64:
      return copy_typed<S, int64_t>(src, dst);
    case DType::U8:
      return copy_typed<S, uint8_t>(src, dst);
  }
}
void copy(const TensorImpl& src, TensorImpl& dst) {
  switch (src.dtype) {
    case DType::F32:
      return copy_from<float>(src, dst);
    case DType::F64:
      return copy_from<double>(src, dst);
    case DType::I64:
      return copy_from<int64_t>(src, dst);
    case DType::U8:
      return copy_from<uint8_t>(src, dst);
  }
}

template <class T>
void fill_typed(TensorImpl& dst, T v) {
  const TensorImpl* ops[1] = {&dst};
  const auto p = make_plan(dst.shape, ops);
  run_plan(p, kGrainCheap, [v](char** ptr, const int64_t* s, int64_t n) {
    if (s[0] == sizeof(T)) {
      std::fill_n(reinterpret_cast<T*>(ptr[0]), n, v);
    } else {
      for (int64_t i = 0; i < n; ++i) at<T>(ptr[0], s[0], i) = v;
    }
  });
}
void fill(TensorImpl& dst, double v) {
  switch (dst.dtype) {
    case DType::F32:
      return fill_typed<float>(dst, static_cast<float>(v));
    case DType::F64:
      return fill_typed<double>(dst, v);
    case DType::I64:
      return fill_typed<int64_t>(dst, convert_value<int64_t>(v));
    case DType::U8:
      return fill_typed<uint8_t>(dst, convert_value<uint8_t>(v));
  }
}

// ---------------------------------------------------------------- reductions
// Accumulator types: f32 sums accumulate in f64; f64 sums are pairwise within a contiguous run and
// Neumaier-compensated across runs; i64 sums are exact (wrapping on overflow).
template <class T>
struct SumAcc {
  using A = std::conditional_t<std::is_same_v<T, int64_t>, int64_t, double>;
  A sum = 0, comp = 0;
  void add(A v) {
    if constexpr (std::is_same_v<A, int64_t>) {
      sum = static_cast<int64_t>(static_cast<uint64_t>(sum) + static_cast<uint64_t>(v));
    } else {
      A t = sum + v;
      if (std::abs(sum) >= std::abs(v))
        comp += (sum - t) + v;
      else
        comp += (v - t) + sum;
      sum = t;
    }
  }
  A result() const { return sum + comp; }
};

// Sum of a contiguous run: 8 independent lanes (vectorisable), pairwise above 1024 elements.
template <class T, class A>
A sum_contig(const T* x, int64_t n) {
  using L = std::conditional_t<std::is_same_v<A, int64_t>, uint64_t, A>;  // i64 wraps: add in unsigned
  if (n > 1024) {
    int64_t h = (n / 2) & ~int64_t{7};
    return static_cast<A>(static_cast<L>(sum_contig<T, A>(x, h)) + static_cast<L>(sum_contig<T, A>(x + h, n - h)));
  }
  L lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) lane[j] += static_cast<L>(x[i + j]);
  L s = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  for (; i < n; ++i) s += static_cast<L>(x[i]);
  return static_cast<A>(s);
}

template <class T, bool IsMax>
T extreme_contig(const T* x, int64_t n, int64_t stride) {
  T best = IsMax ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
  if constexpr (std::is_same_v<T, int64_t>)
    best = IsMax ? std::numeric_limits<T>::min() : std::numeric_limits<T>::max();
  bool nan = false;
  for (int64_t i = 0; i < n; ++i) {
    T v = x[i * stride];
    if constexpr (std::is_floating_point_v<T>) nan |= (v != v);
    best = IsMax ? (v > best ? v : best) : (v < best ? v : best);
  }
  if constexpr (std::is_floating_point_v<T>)
    if (nan) return std::numeric_limits<T>::quiet_NaN();
  return best;
}

// A coalesced group of dims (innermost first) with element strides of the input.
struct Group {
  int ndim = 0;
  int64_t size[kMaxDims];
  int64_t stride[kMaxDims];      // input strides
  int64_t out_stride[kMaxDims];  // output strides (kept group only)
  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= size[d];
    return n;
  }
  // Offset of flat index i (innermost fastest).
  int64_t offset(int64_t i, bool out = false) const {
    int64_t off = 0;
    for (int d = 0; d < ndim; ++d) {
      off += (i % size[d]) * (out ? out_stride[d] : stride[d]);
      i /= size[d];
    }
    return off;
  }
};

// The group without its innermost dim (the dims above a contiguous run).
Group drop_innermost(const Group& g) {
  Group o = g;
  for (int d = 0; d + 1 < g.ndim; ++d) {
    o.size[d] = g.size[d + 1];
    o.stride[d] = g.stride[d + 1];
    o.out_stride[d] = g.out_stride[d + 1];
  }
  o.ndim = g.ndim > 0 ? g.ndim - 1 : 0;
  return o;
}

void group_push(Group& g, int64_t size, int64_t stride, int64_t out_stride) {
  if (size == 1) return;
  if (g.ndim > 0 && stride == g.stride[g.ndim - 1] * g.size[g.ndim - 1] &&
      out_stride == g.out_stride[g.ndim - 1] * g.size[g.ndim - 1]) {
    g.size[g.ndim - 1] *= size;
    return;
  }
  OXM_CHECK(g.ndim < kMaxDims, NotImplemented, "reduction: more than ", kMaxDims, " non-mergeable dims");
  g.size[g.ndim] = size;
  g.stride[g.ndim] = stride;
  g.out_stride[g.ndim] = out_stride;
  ++g.ndim;
}

// part[j] += the sum over rows r in [r0, r1) of row r's element j (row r at xb + red.offset(r)), j < cnt, each column
// summed in P in row order. Floating columns go in tiles of vectors held in registers across the rows (widened to
// f64 lanes): the same sums in the same order as one scalar pass per row over an array of partials, without a load
// and a store of each partial per element.
template <class T, class P>
void add_rows_into(const T* xb, const Group& red, int64_t r0, int64_t r1, int64_t cnt, P* part) {
  int64_t j = 0;
  if constexpr (std::is_floating_point_v<T> && std::is_same_v<P, double>) {
    using namespace simd;
    constexpr int64_t W = kLanes<T>, kTile = 4;
    auto tile = [&]<int64_t NT>(int64_t j0) {
      WideVec<T> acc[NT];
      for (int64_t t = 0; t < NT; ++t) std::memcpy(&acc[t], part + j0 + t * W, sizeof acc[t]);
      for (int64_t r = r0; r < r1; ++r) {
        const T* row = xb + red.offset(r) + j0;
        for (int64_t t = 0; t < NT; ++t) acc[t] += widen<T>(vload(row + t * W));
      }
      for (int64_t t = 0; t < NT; ++t) std::memcpy(part + j0 + t * W, &acc[t], sizeof acc[t]);
    };
    for (; j + kTile * W <= cnt; j += kTile * W) tile.template operator()<kTile>(j);
    for (; j + W <= cnt; j += W) tile.template operator()<1>(j);
  }
  if (j == cnt) return;
  for (int64_t r = r0; r < r1; ++r) {
    const T* row = xb + red.offset(r);
    for (int64_t c = j; c < cnt; ++c) part[c] += static_cast<P>(row[c]);
  }
}

template <class T>
void reduce_typed(ReduceOp op, const TensorImpl& x, TensorImpl& out, uint64_t mask) {
  Group kept, red;
  for (size_t d = x.shape.size(); d-- > 0;) {
    if (mask >> d & 1)
      group_push(red, x.shape[d], x.strides[d], 0);
    else
      group_push(kept, x.shape[d], x.strides[d], out.strides[d]);
  }
  const T* xp = x.ptr<T>();
  T* op_ = out.ptr<T>();
  const int64_t M = kept.numel(), R = red.numel();
  if (M == 0) return;
  using A = typename SumAcc<T>::A;
  if (R == 0) {
    T ident = T(0);
    if (op == ReduceOp::Max) ident = -std::numeric_limits<T>::infinity();
    if (op == ReduceOp::Min) ident = std::numeric_limits<T>::infinity();
    for (int64_t m = 0; m < M; ++m) op_[kept.offset(m, true)] = ident;
    return;
  }
  const bool inner_contig = red.ndim > 0 && red.stride[0] == 1;
  // With a contiguous innermost reduced run: the dims above it, built once (not per output: a Group is
  // ~1.5 KB, and copying it per row dominated short-row sums).
  const Group red_outer = inner_contig ? drop_innermost(red) : Group{};
  const int64_t runs = inner_contig ? R / red.size[0] : 0;
  // Reduce over the reduced group for one output, starting at input offset `base`.
  auto reduce_one = [&](int64_t base) -> T {
    if (op == ReduceOp::Sum) {
      // One run (plain row sums): its lane sum is the result (a compensated sum of one value is that value).
      if (runs == 1) return static_cast<T>(sum_contig<T, A>(xp + base, red.size[0]));
      SumAcc<T> acc;
      if (inner_contig) {
        for (int64_t r = 0; r < runs; ++r) acc.add(sum_contig<T, A>(xp + base + red_outer.offset(r), red.size[0]));
      } else {
        for (int64_t r = 0; r < R; ++r) acc.add(static_cast<A>(xp[base + red.offset(r)]));
      }
      return static_cast<T>(acc.result());
    }
    const bool is_max = op == ReduceOp::Max;
    if (red.ndim == 1)
      return is_max ? extreme_contig<T, true>(xp + base, R, red.stride[0])
                    : extreme_contig<T, false>(xp + base, R, red.stride[0]);
    T best = is_max ? extreme_contig<T, true>(xp + base, 0, 1) : extreme_contig<T, false>(xp + base, 0, 1);
    bool nan = false;
    for (int64_t r = 0; r < R; ++r) {
      T v = xp[base + red.offset(r)];
      if constexpr (std::is_floating_point_v<T>) nan |= (v != v);
      best = is_max ? (v > best ? v : best) : (v < best ? v : best);
    }
    if constexpr (std::is_floating_point_v<T>)
      if (nan) return std::numeric_limits<T>::quiet_NaN();
    return best;
  };

  if (M == 1 && op == ReduceOp::Sum && red.ndim == 1 && red.stride[0] == 1 && R > 65536) {
    // Full contiguous sum: fixed-size blocks (independent of the thread count) summed in parallel,
    // then combined in order, so the result is bit-identical for any number of threads.
    constexpr int64_t kBlock = 32768;
    int64_t nb = (R + kBlock - 1) / kBlock;
    std::vector<A> part(static_cast<size_t>(nb));
    parallel_for(nb, 2, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) part[i] = sum_contig<T, A>(xp + i * kBlock, std::min(kBlock, R - i * kBlock));
    });
    SumAcc<T> acc;
    for (A v : part) acc.add(v);
    op_[0] = static_cast<T>(acc.result());
    return;
  }
  if (!inner_contig && kept.ndim > 0 && kept.stride[0] == 1 && kept.out_stride[0] == 1 && op != ReduceOp::Sum) {
    // Column max/min: whole rows compared into per-column bests (vectorised), NaN tracked per column.
    const int64_t L = kept.size[0];
    const Group outer = drop_innermost(kept);
    const int64_t MO = outer.numel();
    const bool is_max = op == ReduceOp::Max;
    parallel_for(MO, std::max<int64_t>(1, kGrainCheap / std::max<int64_t>(L * R, 1)), [&](int64_t b, int64_t e) {
      for (int64_t mo = b; mo < e; ++mo) {
        const T* xb = xp + outer.offset(mo);
        T* ob = op_ + outer.offset(mo, true);
        const T* first = xb + red.offset(0);
        for (int64_t j = 0; j < L; ++j) ob[j] = first[j];
        for (int64_t r = 1; r < R; ++r) {
          const T* row = xb + red.offset(r);
          if (is_max) {
            for (int64_t j = 0; j < L; ++j)
              ob[j] = (row[j] > ob[j] || row[j] != row[j]) && ob[j] == ob[j] ? row[j] : ob[j];
          } else {
            for (int64_t j = 0; j < L; ++j)
              ob[j] = (row[j] < ob[j] || row[j] != row[j]) && ob[j] == ob[j] ? row[j] : ob[j];
          }
        }
      }
    });
    return;
  }
  if (!inner_contig && kept.ndim > 0 && kept.stride[0] == 1 && kept.out_stride[0] == 1 && op == ReduceOp::Sum) {
    // Column reduction (reduced dims outside a contiguous kept run): whole rows are added into plain lanes
    // (vectorised) for blocks of 256 rows, and the block partials are combined with compensation.
    const int64_t L = kept.size[0];
    const Group outer = drop_innermost(kept);
    const int64_t MO = outer.numel();
    constexpr int64_t kCols = 512, kRows = 256;
    const int64_t col_blocks = (L + kCols - 1) / kCols;
    using P = std::conditional_t<std::is_same_v<T, int64_t>, uint64_t, double>;
    const int64_t units = MO * col_blocks;
    const int64_t work_per_unit = std::min(L, kCols) * R;
    parallel_for(units, std::max<int64_t>(1, kGrainCheap / std::max<int64_t>(work_per_unit, 1)),
                 [&](int64_t b, int64_t e) {
                   P part[kCols];
                   SumAcc<T> acc[kCols];
                   for (int64_t u = b; u < e; ++u) {
                     const int64_t mo = u / col_blocks, j0 = (u % col_blocks) * kCols;
                     const int64_t cnt = std::min(kCols, L - j0);
                     const T* xb = xp + outer.offset(mo) + j0;
                     T* ob = op_ + outer.offset(mo, true) + j0;
                     if (R <= kRows) {  // one block: its plain lanes are the result (compensating one value is a no-op)
                       for (int64_t j = 0; j < cnt; ++j) part[j] = 0;
                       add_rows_into<T, P>(xb, red, 0, R, cnt, part);
                       for (int64_t j = 0; j < cnt; ++j) ob[j] = static_cast<T>(static_cast<A>(part[j]));
                       continue;
                     }
                     for (int64_t j = 0; j < cnt; ++j) acc[j] = SumAcc<T>{};
                     for (int64_t r0 = 0; r0 < R; r0 += kRows) {
                       for (int64_t j = 0; j < cnt; ++j) part[j] = 0;
                       add_rows_into<T, P>(xb, red, r0, std::min(R, r0 + kRows), cnt, part);
                       for (int64_t j = 0; j < cnt; ++j) acc[j].add(static_cast<A>(part[j]));
                     }
                     for (int64_t j = 0; j < cnt; ++j) ob[j] = static_cast<T>(acc[j].result());
                   }
                 });
    return;
  }
  if (op == ReduceOp::Sum && runs == 1 && kept.ndim == 1) {
    // Rows of one strided run of outputs (the common sum(-1) of a contiguous tensor): no offset arithmetic.
    const int64_t xs = kept.stride[0], os = kept.out_stride[0], len = red.size[0];
    parallel_for(M, std::max<int64_t>(kGrainCheap / std::max<int64_t>(R, 1), 1), [&](int64_t b, int64_t e) {
      for (int64_t m = b; m < e; ++m) op_[m * os] = static_cast<T>(sum_contig<T, A>(xp + m * xs, len));
    });
    return;
  }
  parallel_for(M, std::max<int64_t>(kGrainCheap / std::max<int64_t>(R, 1), 1), [&](int64_t b, int64_t e) {
    for (int64_t m = b; m < e; ++m) op_[kept.offset(m, true)] = reduce_one(kept.offset(m));
  });
}

void reduce(ReduceOp op, const TensorImpl& x, TensorImpl& out, uint64_t mask) {
  switch (x.dtype) {
    case DType::F32:
      return reduce_typed<float>(op, x, out, mask);
    case DType::F64:
      return reduce_typed<double>(op, x, out, mask);
    case DType::I64:
      return reduce_typed<int64_t>(op, x, out, mask);
    default:
      OXM_FAIL(UnsupportedDType, "reduce: dtype ", x.dtype, " is not supported");
  }
}

// Rows along `dim`: (outer, inner) pairs, each a strided line of length D.
struct Lines {
  Group rest;  // all dims but `dim`, input strides / output strides
  int64_t D, stride, out_stride;
};
Lines make_lines(const TensorImpl& x, const TensorImpl& out, int64_t dim) {
  Lines l;
  for (size_t d = x.shape.size(); d-- > 0;)
    if (static_cast<int64_t>(d) != dim) group_push(l.rest, x.shape[d], x.strides[d], out.strides[d]);
  l.D = x.shape.empty() ? 1 : x.shape[dim];
  l.stride = x.shape.empty() ? 1 : x.strides[dim];
  l.out_stride = out.shape.empty() ? 1 : out.strides[dim];
  return l;
}

template <class T>
bool arg_reduce_typed(ArgReduceOp op, const TensorImpl& x, TensorImpl& out, int64_t dim) {
  Lines l = make_lines(x, out, dim);
  const T* xp = x.ptr<T>();
  int64_t* op_ = out.ptr<int64_t>();
  const bool is_max = op == ArgReduceOp::Argmax;
  bool ok = true;
  const int64_t M = l.rest.numel();
  for (int64_t m = 0; m < M; ++m) {
    const T* row = xp + l.rest.offset(m);
    int64_t best = 0;
    T bv = row[0];
    for (int64_t i = 0; i < l.D; ++i) {
      T v = row[i * l.stride];
      if constexpr (std::is_floating_point_v<T>)
        if (v != v) ok = false;
      if (is_max ? v > bv : v < bv) {
        bv = v;
        best = i;
      }
    }
    op_[l.rest.offset(m, true)] = best;
  }
  return ok;
}
bool arg_reduce(ArgReduceOp op, const TensorImpl& x, TensorImpl& out, int64_t dim) {
  switch (x.dtype) {
    case DType::F32:
      return arg_reduce_typed<float>(op, x, out, dim);
    case DType::F64:
      return arg_reduce_typed<double>(op, x, out, dim);
    case DType::I64:
      return arg_reduce_typed<int64_t>(op, x, out, dim);
    default:
      OXM_FAIL(UnsupportedDType, "argmax: dtype ", x.dtype, " is not supported");
  }
}

// One contiguous f32 row in three vectorised passes: max, exp (exp_f32, stored) with sums, scale. The max needs no
// NaN test: a NaN entry never wins the comparison, but its exp makes the sum, and so every output, NaN (as a NaN max
// would). The sums run in 16 float lanes flushed into a double every 256 elements (16 per lane), which keeps them
// in registers and the rounding of a row of any length near that of a double sum.
void softmax_row_f32(const float* x, float* y, int64_t D, bool log) {
  constexpr int W = 16;
  // The max in a 16-float vector type: GCC's SLP pass leaves the same loop on a lane array scalar.
  using F16 = float __attribute__((vector_size(W * sizeof(float))));
  F16 lane_max = F16{} - INFINITY;
  int64_t i = 0;
  for (; i + W <= D; i += W) {
    F16 v;
    std::memcpy(&v, x + i, sizeof v);
    lane_max = v > lane_max ? v : lane_max;
  }
  float mx = -INFINITY;
  for (int j = 0; j < W; ++j) mx = lane_max[j] > mx ? lane_max[j] : mx;
  for (; i < D; ++i) mx = x[i] > mx ? x[i] : mx;
  if (mx == -INFINITY) mx = 0;  // all -inf (or NaN): avoid inf - inf
  double sum = 0;
  float part[W];
  auto flush = [&] {
    float s8[8];
    for (int j = 0; j < 8; ++j) s8[j] = part[j] + part[j + 8];
    sum +=
        static_cast<double>((s8[0] + s8[1]) + (s8[2] + s8[3])) + static_cast<double>((s8[4] + s8[5]) + (s8[6] + s8[7]));
  };
  i = 0;
  while (i + W <= D) {
    for (int j = 0; j < W; ++j) part[j] = 0.f;
    const int64_t stop = std::min(D - D % W, i + 16 * W);
    for (; i < stop; i += W)
      for (int j = 0; j < W; ++j) {
        const float e = exp_f32(x[i + j] - mx);
        y[i + j] = e;
        part[j] += e;
      }
    flush();
  }
  for (; i < D; ++i) {
    const float e = exp_f32(x[i] - mx);
    y[i] = e;
    sum += e;
  }
  if (log) {
    const float lse = static_cast<float>(std::log(sum)) + mx;
    for (int64_t k = 0; k < D; ++k) y[k] = x[k] - lse;
  } else {
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t k = 0; k < D; ++k) y[k] *= inv;
  }
}

template <class T>
void softmax_typed(const TensorImpl& x, TensorImpl& out, int64_t dim, bool log) {
  Lines l = make_lines(x, out, dim);
  const T* xp = x.ptr<T>();
  T* op_ = out.ptr<T>();
  const int64_t M = l.rest.numel(), D = l.D;
  if (M == 0 || D == 0) return;
  parallel_for(M, std::max<int64_t>(kGrainCostly / D, 1), [&](int64_t b, int64_t e) {
    for (int64_t m = b; m < e; ++m) {
      const T* row = xp + l.rest.offset(m);
      T* orow = op_ + l.rest.offset(m, true);
      const int64_t s = l.stride, os = l.out_stride;
      if constexpr (std::is_same_v<T, float>) {
        if (s == 1 && os == 1) {
          softmax_row_f32(row, orow, D, log);
          continue;
        }
      }
      T mx = -std::numeric_limits<T>::infinity();
      for (int64_t i = 0; i < D; ++i) mx = std::max(mx, row[i * s]);
      if (mx == -std::numeric_limits<T>::infinity()) mx = 0;  // all -inf: avoid inf - inf
      double sum = 0;
      if (log) {
        for (int64_t i = 0; i < D; ++i) sum += std::exp(row[i * s] - mx);
        T lse = static_cast<T>(std::log(sum)) + mx;
        for (int64_t i = 0; i < D; ++i) orow[i * os] = row[i * s] - lse;
      } else {
        for (int64_t i = 0; i < D; ++i) {
          T v = std::exp(row[i * s] - mx);
          orow[i * os] = v;
          sum += v;
        }
        T inv = static_cast<T>(1.0 / sum);
        for (int64_t i = 0; i < D; ++i) orow[i * os] *= inv;
      }
    }
  });
}
void softmax(const TensorImpl& x, TensorImpl& out, int64_t dim, bool log) {
  switch (x.dtype) {
    case DType::F32:
      return softmax_typed<float>(x, out, dim, log);
    case DType::F64:
      return softmax_typed<double>(x, out, dim, log);
    default:
      OXM_FAIL(UnsupportedDType, log ? "log_softmax" : "softmax", ": dtype ", x.dtype, " is not supported");
  }
}

// softmax's gradient row by row: one pass for the row's sum (g y, or g for log_softmax) in lanes of T flushed into
// an f64 sum every 16 per lane (the composite's sums are f64), one pass for the result.
template <class T>
void softmax_backward_typed(const TensorImpl& yt, const TensorImpl& gt, TensorImpl& out, int64_t n, bool log) {
  const T* yp = yt.ptr<T>();
  const T* gp = gt.ptr<T>();
  T* op_ = out.ptr<T>();
  const int64_t rows = n > 0 ? yt.numel / n : 0;
  constexpr int W = 64 / sizeof(T);
  parallel_for(rows, std::max<int64_t>(kGrainCheap / std::max<int64_t>(n, 1), 1), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* y = yp + r * n;
      const T* g = gp + r * n;
      T* o = op_ + r * n;
      double sum = 0;
      int64_t i = 0;
      while (i + W <= n) {
        T part[W] = {};
        const int64_t stop = std::min(n - n % W, i + 16 * W);
        if (log) {
          for (; i < stop; i += W)
            for (int j = 0; j < W; ++j) part[j] += g[i + j];
        } else {
          for (; i < stop; i += W)
            for (int j = 0; j < W; ++j) part[j] += g[i + j] * y[i + j];
        }
        double s = 0;
        for (int j = 0; j < W; ++j) s += static_cast<double>(part[j]);
        sum += s;
      }
      for (; i < n; ++i) sum += static_cast<double>(log ? g[i] : g[i] * y[i]);
      const T s = static_cast<T>(sum);
      if (log) {
        for (int64_t k = 0; k < n; ++k) o[k] = g[k] - vm::exp(y[k]) * s;
      } else {
        for (int64_t k = 0; k < n; ++k) o[k] = y[k] * (g[k] - s);
      }
    }
  });
}
void softmax_backward(const TensorImpl& y, const TensorImpl& g, TensorImpl& out, int64_t n, bool log) {
  switch (y.dtype) {
    case DType::F32:
      return softmax_backward_typed<float>(y, g, out, n, log);
    case DType::F64:
      return softmax_backward_typed<double>(y, g, out, n, log);
    default:
      OXM_FAIL(UnsupportedDType, log ? "log_softmax" : "softmax", " backward: dtype ", y.dtype,
               " is not supported (f32, f64)");
  }
}

// ---------------------------------------------------------------- matmul

template <class T>
void matmul_typed(const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  const size_t r = out.shape.size();
  const int64_t m = out.shape[r - 2], n = out.shape[r - 1], k = a.shape[r - 1];
  T* cp = out.ptr<T>();
  if (m == 0 || n == 0) return;
  Shape bshape(out.shape.begin(), r - 2);
  const int64_t B = bshape.product();
  auto mat_offset = [&](const TensorImpl& t, int64_t i) {
    int64_t off = 0;
    for (size_t d = r - 2; d-- > 0;) {
      off += (i % bshape[d]) * t.strides[d];
      i /= bshape[d];
    }
    return off;
  };
  const T* ap = a.ptr<T>();
  const T* bp = b.ptr<T>();
  if (k == 0) {
    std::fill(cp, cp + B * m * n, T(0));
    return;
  }
  MatLayout la = mat_layout(m, k, a.strides[r - 2], a.strides[r - 1]);
  MatLayout lb = mat_layout(k, n, b.strides[r - 2], b.strides[r - 1]);
  GemmArgs g{la.trans, lb.trans, m, n, k, la.ld, lb.ld, n};
  auto one = [&](int64_t i) {
    const T* A = ap + mat_offset(a, i);
    const T* Bm = bp + mat_offset(b, i);
    T* C = cp + i * m * n;
    if constexpr (std::is_same_v<T, float>)
      sgemm(g, 1.0f, A, Bm, 0.0f, C);
    else
      dgemm(g, 1.0, A, Bm, 0.0, C);
  };
  const int64_t flops = m * n * k;
  if (B > 1 && flops < 64 * 64 * 64 && blas_reentrant()) {
    // Many small products: parallel over the batch (BLAS runs single-threaded inside).
    parallel_for(B, std::max<int64_t>(1, 16384 / std::max<int64_t>(flops, 1)), [&](int64_t b0, int64_t e0) {
      for (int64_t i = b0; i < e0; ++i) one(i);
    });
  } else {
    for (int64_t i = 0; i < B; ++i) one(i);
  }
}
void matmul(const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  switch (a.dtype) {
    case DType::F32:
      return matmul_typed<float>(a, b, out);
    case DType::F64:
      return matmul_typed<double>(a, b, out);
    default:
      OXM_FAIL(UnsupportedDType, "matmul: dtype ", a.dtype, " is not supported (f32, f64)");
  }
}

// y = gelu(u) and u's storage overwritten with gelu'(u) = Phi(u) + u phi(u), one e^(-u^2/2) for both (the Gelu
// entry's formulas, op_defs.hpp).
template <class T>
void gelu_with_grad_t(TensorImpl& ud, TensorImpl& y) {
  T* d = ud.ptr<T>();
  T* o = y.ptr<T>();
  parallel_for(ud.numel, kGrainCostly, [&](int64_t begin, int64_t end) OXM_FLATTEN {
    for (int64_t i = begin; i < end; ++i) {
      const T u = d[i];
      T gauss;
      const T cdf = CpuMath::normal_cdf(u, gauss);
      o[i] = u * cdf;
      d[i] = cdf + u * (gauss * T(0.39894228040143267794));
    }
  });
}
void gelu_with_grad(TensorImpl& ud, TensorImpl& y) {
  if (ud.dtype == DType::F32) return gelu_with_grad_t<float>(ud, y);
  OXM_CHECK(ud.dtype == DType::F64, UnsupportedDType, "linear (gelu): dtype ", ud.dtype,
            " is not supported (f32, f64)");
  gelu_with_grad_t<double>(ud, y);
}

#define OXM_STR2(x) #x
#define OXM_STR(x) OXM_STR2(x)
const CpuKernels table = {OXM_STR(OXM_ISA),
                          unary,
                          binary,
                          binary_scalar,
                          binary_grad,
                          unary_grad,
                          where,
                          copy,
                          fill,
                          reduce,
                          arg_reduce,
                          softmax,
                          softmax_backward,
                          matmul,
                          layer_norm,
                          layer_norm_backward,
                          optimizer_step,
                          cross_entropy,
                          cross_entropy_backward,
                          lstm_cell,
                          lstm_cell_backward,
                          gru_cell,
                          gru_cell_backward,
                          max_pool2d,
                          max_pool2d_backward,
                          rnn_cell,
                          attention,
                          attention_backward,
                          tensor_list_norm,
                          tensor_list_scale,
                          gelu_with_grad};

}  // namespace

const CpuKernels* kernels() { return &table; }

}  // namespace oxmera::detail::OXM_ISA
