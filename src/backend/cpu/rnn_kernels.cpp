// One pass over a batch row per LSTM, GRU or plain RNN step, forward and backward: the LSTM's composite is ~10
// elementwise ops (and a cat) forward and ~20 backward, each a full pass and an allocation. exp / tanh are vec_math's
// inline versions: libm's scalar calls were ~1/3 of a training step and block vectorisation of the loops. Compiled once
// per ISA level with the other CPU kernels (cpu_kernels.hpp's table): the baseline build ran the gate math scalar.
#include "backend/cpu/cpu_kernels.hpp"

#include <cmath>

#include "backend/cpu/vec_math.hpp"
#include "ops/fused.hpp"
#include "ops/op_defs.hpp"
#include "oxmera/error.hpp"

#ifndef OXM_ISA
#define OXM_ISA isa_base
#endif

namespace oxmera::detail::OXM_ISA {
namespace {

// The gate activations are the registry's sigmoid and tanh (the values of x.sigmoid() / x.tanh(), so the kernel
// and the composite fallback agree), each over one contiguous run of the row: loops the vectoriser takes (one loop
// computing all four gates and the cell did not vectorise and ran scalar).
template <class T>
[[gnu::always_inline]] inline T sigmoid(T x) {
  return ops::defs::Sigmoid::fwd<T, VecMath>(x);
}
template <class T>
[[gnu::always_inline]] inline T tanh_(T x) {
  return ops::defs::Tanh::fwd<T, VecMath>(x);
}

// kAdd: the pre-activations are gates + gates_add (two summands, added in the same loops).
template <class T, bool kAdd>
__attribute__((flatten)) void lstm_cell_t(const ops::LstmCellCall& c) {
  const int64_t B = c.batch, H = c.hidden;
  const T* gates = reinterpret_cast<const T*>(c.gates->byte_ptr());
  const T* gates2 = kAdd ? reinterpret_cast<const T*>(c.gates_add->byte_ptr()) : nullptr;
  const T* cp = reinterpret_cast<const T*>(c.c_prev->byte_ptr());
  T* acts = reinterpret_cast<T*>(c.acts->byte_ptr());
  T* h = reinterpret_cast<T*>(c.h->byte_ptr());
  T* cn = reinterpret_cast<T*>(c.c->byte_ptr());
  for (int64_t b = 0; b < B; ++b) {
    const T* __restrict g = gates + b * 4 * H;
    const T* __restrict g2 = kAdd ? gates2 + b * 4 * H : nullptr;
    T* __restrict a = acts + b * 4 * H;
    auto pre = [&](int64_t j) { return kAdd ? g[j] + g2[j] : g[j]; };
    for (int64_t j = 0; j < 2 * H; ++j) a[j] = sigmoid(pre(j));      // i, f
    for (int64_t j = 2 * H; j < 3 * H; ++j) a[j] = tanh_(pre(j));    // g
    for (int64_t j = 3 * H; j < 4 * H; ++j) a[j] = sigmoid(pre(j));  // o
    const T* __restrict cpr = cp + b * H;
    T* __restrict cr = cn + b * H;
    T* __restrict hr = h + b * H;
    for (int64_t j = 0; j < H; ++j) {
      const T cv = a[H + j] * cpr[j] + a[j] * a[2 * H + j];
      cr[j] = cv;
      hr[j] = a[3 * H + j] * tanh_(cv);
    }
  }
}

// One batch row of the backward; gh / gc absent (no gradient reached h or c) are zero.
template <class T, bool kGh, bool kGc>
__attribute__((flatten)) void lstm_cell_backward_row(const T* __restrict a, const T* __restrict cp,
                                                     const T* __restrict cn, const T* __restrict gh,
                                                     const T* __restrict gc, T* __restrict d, T* __restrict dcp,
                                                     int64_t H) {
  for (int64_t j = 0; j < H; ++j) {
    const T i = a[j], f = a[H + j], g = a[2 * H + j], o = a[3 * H + j];
    const T tc = tanh_(cn[j]);
    const T ghv = kGh ? gh[j] : T(0), gcv = kGc ? gc[j] : T(0);
    const T dc = gcv + ghv * o * (T(1) - tc * tc);
    d[j] = dc * g * i * (T(1) - i);
    d[H + j] = dc * cp[j] * f * (T(1) - f);
    d[2 * H + j] = dc * i * (T(1) - g * g);
    d[3 * H + j] = ghv * tc * o * (T(1) - o);
    dcp[j] = dc * f;
  }
}

template <class T>
void lstm_cell_backward_t(const ops::LstmCellBackwardCall& c) {
  const int64_t B = c.batch, H = c.hidden;
  const T* acts = reinterpret_cast<const T*>(c.acts->byte_ptr());
  const T* cp = reinterpret_cast<const T*>(c.c_prev->byte_ptr());
  const T* cn = reinterpret_cast<const T*>(c.c->byte_ptr());
  const T* gh = c.gh ? reinterpret_cast<const T*>(c.gh->byte_ptr()) : nullptr;
  const T* gc = c.gc ? reinterpret_cast<const T*>(c.gc->byte_ptr()) : nullptr;
  T* dg = reinterpret_cast<T*>(c.grad_gates->byte_ptr());
  T* dcp = reinterpret_cast<T*>(c.grad_c_prev->byte_ptr());
  for (int64_t b = 0; b < B; ++b) {
    const T* a = acts + b * 4 * H;
    T* d = dg + b * 4 * H;
    const int64_t k = b * H;
    const T* ghr = gh ? gh + k : nullptr;
    const T* gcr = gc ? gc + k : nullptr;
    if (gh && gc)
      lstm_cell_backward_row<T, true, true>(a, cp + k, cn + k, ghr, gcr, d, dcp + k, H);
    else if (gh)
      lstm_cell_backward_row<T, true, false>(a, cp + k, cn + k, ghr, gcr, d, dcp + k, H);
    else if (gc)
      lstm_cell_backward_row<T, false, true>(a, cp + k, cn + k, ghr, gcr, d, dcp + k, H);
    else
      lstm_cell_backward_row<T, false, false>(a, cp + k, cn + k, ghr, gcr, d, dcp + k, H);
  }
}

template <class T>
__attribute__((flatten)) void gru_cell_t(const ops::GruCellCall& c) {
  const int64_t B = c.batch, H = c.hidden;
  const T* gi = reinterpret_cast<const T*>(c.gi->byte_ptr());
  const T* gh = reinterpret_cast<const T*>(c.gh->byte_ptr());
  const T* hp = reinterpret_cast<const T*>(c.h_prev->byte_ptr());
  T* acts = reinterpret_cast<T*>(c.acts->byte_ptr());
  T* h = reinterpret_cast<T*>(c.h->byte_ptr());
  for (int64_t b = 0; b < B; ++b) {
    const T* __restrict x = gi + b * 3 * H;
    const T* __restrict y = gh + b * 3 * H;
    T* __restrict a = acts + b * 4 * H;
    for (int64_t j = 0; j < 2 * H; ++j) a[j] = sigmoid(x[j] + y[j]);  // r, z
    for (int64_t j = 0; j < H; ++j) {
      a[3 * H + j] = y[2 * H + j];
      a[2 * H + j] = tanh_(x[2 * H + j] + a[j] * y[2 * H + j]);  // n
    }
    const T* __restrict hr = hp + b * H;
    T* __restrict out = h + b * H;
    for (int64_t j = 0; j < H; ++j) out[j] = a[2 * H + j] + a[H + j] * (hr[j] - a[2 * H + j]);
  }
}

template <class T>
__attribute__((flatten)) void gru_cell_backward_t(const ops::GruCellBackwardCall& c) {
  const int64_t B = c.batch, H = c.hidden;
  const T* acts = reinterpret_cast<const T*>(c.acts->byte_ptr());
  const T* hp = reinterpret_cast<const T*>(c.h_prev->byte_ptr());
  const T* gp = reinterpret_cast<const T*>(c.g->byte_ptr());
  T* dgi = reinterpret_cast<T*>(c.grad_gi->byte_ptr());
  T* dgh = reinterpret_cast<T*>(c.grad_gh->byte_ptr());
  T* dhp = reinterpret_cast<T*>(c.grad_h_prev->byte_ptr());
  for (int64_t b = 0; b < B; ++b) {
    const T* __restrict a = acts + b * 4 * H;
    const T* __restrict g = gp + b * H;
    const T* __restrict hr = hp + b * H;
    T* __restrict di = dgi + b * 3 * H;
    T* __restrict dh = dgh + b * 3 * H;
    T* __restrict dp = dhp + b * H;
    for (int64_t j = 0; j < H; ++j) {
      const T r = a[j], z = a[H + j], n = a[2 * H + j], ghn = a[3 * H + j], gv = g[j];
      const T dn = gv * (T(1) - z) * (T(1) - n * n);
      const T dz = gv * (hr[j] - n) * z * (T(1) - z);
      const T dr = dn * ghn * r * (T(1) - r);
      di[j] = dr;
      di[H + j] = dz;
      di[2 * H + j] = dn;
      dh[j] = dr;
      dh[H + j] = dz;
      dh[2 * H + j] = dn * r;
      dp[j] = gv * z;
    }
  }
}

// The plain RNN step: the registry's activation of the sum, one loop per activation so each vectorises.
template <class T>
__attribute__((flatten)) void rnn_cell_t(const ops::RnnCellCall& c) {
  const T* __restrict x = reinterpret_cast<const T*>(c.xt->byte_ptr());
  const T* __restrict y = reinterpret_cast<const T*>(c.hh->byte_ptr());
  T* __restrict h = reinterpret_cast<T*>(c.h->byte_ptr());
  const int64_t n = c.count;
  if (c.relu) {
    for (int64_t i = 0; i < n; ++i) h[i] = ops::defs::Relu::fwd<T, VecMath>(x[i] + y[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) h[i] = tanh_(x[i] + y[i]);
  }
}

}  // namespace

void lstm_cell(const ops::LstmCellCall& c) {
  switch (c.gates->dtype) {
    case DType::F32:
      return c.gates_add ? lstm_cell_t<float, true>(c) : lstm_cell_t<float, false>(c);
    case DType::F64:
      return c.gates_add ? lstm_cell_t<double, true>(c) : lstm_cell_t<double, false>(c);
    default:
      OXM_FAIL(UnsupportedDType, "lstm_cell: dtype ", c.gates->dtype, " is not supported (f32, f64)");
  }
}
void lstm_cell_backward(const ops::LstmCellBackwardCall& c) {
  switch (c.acts->dtype) {
    case DType::F32:
      return lstm_cell_backward_t<float>(c);
    case DType::F64:
      return lstm_cell_backward_t<double>(c);
    default:
      OXM_FAIL(UnsupportedDType, "lstm_cell backward: dtype ", c.acts->dtype, " is not supported (f32, f64)");
  }
}

void gru_cell(const ops::GruCellCall& c) {
  switch (c.gi->dtype) {
    case DType::F32:
      return gru_cell_t<float>(c);
    case DType::F64:
      return gru_cell_t<double>(c);
    default:
      OXM_FAIL(UnsupportedDType, "gru_cell: dtype ", c.gi->dtype, " is not supported (f32, f64)");
  }
}
void gru_cell_backward(const ops::GruCellBackwardCall& c) {
  switch (c.acts->dtype) {
    case DType::F32:
      return gru_cell_backward_t<float>(c);
    case DType::F64:
      return gru_cell_backward_t<double>(c);
    default:
      OXM_FAIL(UnsupportedDType, "gru_cell backward: dtype ", c.acts->dtype, " is not supported (f32, f64)");
  }
}
void rnn_cell(const ops::RnnCellCall& c) {
  switch (c.xt->dtype) {
    case DType::F32:
      return rnn_cell_t<float>(c);
    case DType::F64:
      return rnn_cell_t<double>(c);
    default:
      OXM_FAIL(UnsupportedDType, "rnn_cell: dtype ", c.xt->dtype, " is not supported (f32, f64)");
  }
}

}  // namespace oxmera::detail::OXM_ISA
