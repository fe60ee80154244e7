// One pass over a batch row per LSTM step, forward and backward: the composite is ~10 elementwise ops (and a
// cat) forward and ~20 backward, each a full pass and an allocation. exp / tanh are vec_math's inline versions:
// libm's scalar calls were ~1/3 of a training step and block vectorisation of the loops.
#include "backend/cpu/rnn_kernels.hpp"

#include <cmath>

#include "backend/cpu/vec_math.hpp"
#include "oxmera/error.hpp"

namespace oxmera::detail {
namespace {

template <class T>
T sigmoid(T x) {
  return T(1) / (T(1) + vm::exp(-x));
}

template <class T>
void lstm_cell_t(const ops::LstmCellCall& c) {
  const int64_t B = c.batch, H = c.hidden;
  const T* gates = reinterpret_cast<const T*>(c.gates->byte_ptr());
  const T* cp = reinterpret_cast<const T*>(c.c_prev->byte_ptr());
  T* acts = reinterpret_cast<T*>(c.acts->byte_ptr());
  T* h = reinterpret_cast<T*>(c.h->byte_ptr());
  T* cn = reinterpret_cast<T*>(c.c->byte_ptr());
  for (int64_t b = 0; b < B; ++b) {
    const T* g = gates + b * 4 * H;
    T* a = acts + b * 4 * H;
    for (int64_t j = 0; j < H; ++j) {
      const T i = sigmoid(g[j]), f = sigmoid(g[H + j]), gg = vm::tanh(g[2 * H + j]), o = sigmoid(g[3 * H + j]);
      a[j] = i;
      a[H + j] = f;
      a[2 * H + j] = gg;
      a[3 * H + j] = o;
      const T cv = f * cp[b * H + j] + i * gg;
      cn[b * H + j] = cv;
      h[b * H + j] = o * vm::tanh(cv);
    }
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
    for (int64_t j = 0; j < H; ++j) {
      const int64_t k = b * H + j;
      const T i = a[j], f = a[H + j], g = a[2 * H + j], o = a[3 * H + j];
      const T tc = vm::tanh(cn[k]);
      const T ghv = gh ? gh[k] : T(0), gcv = gc ? gc[k] : T(0);
      const T dc = gcv + ghv * o * (T(1) - tc * tc);
      d[j] = dc * g * i * (T(1) - i);
      d[H + j] = dc * cp[k] * f * (T(1) - f);
      d[2 * H + j] = dc * i * (T(1) - g * g);
      d[3 * H + j] = ghv * tc * o * (T(1) - o);
      dcp[k] = dc * f;
    }
  }
}

}  // namespace

void cpu_lstm_cell(const ops::LstmCellCall& c) {
  switch (c.gates->dtype) {
    case DType::F32:
      return lstm_cell_t<float>(c);
    case DType::F64:
      return lstm_cell_t<double>(c);
    default:
      OXM_FAIL(UnsupportedDType, "lstm_cell: dtype ", c.gates->dtype, " is not supported (f32, f64)");
  }
}
void cpu_lstm_cell_backward(const ops::LstmCellBackwardCall& c) {
  switch (c.acts->dtype) {
    case DType::F32:
      return lstm_cell_backward_t<float>(c);
    case DType::F64:
      return lstm_cell_backward_t<double>(c);
    default:
      OXM_FAIL(UnsupportedDType, "lstm_cell backward: dtype ", c.acts->dtype, " is not supported (f32, f64)");
  }
}

}  // namespace oxmera::detail
