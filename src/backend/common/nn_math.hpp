#pragma once
// The per-element and per-row code of the CUDA backend's nn kernels — the LSTM, GRU and plain RNN cells, layer norm
// and its gradient, softmax's gradient, max pooling and its gradient — as host-and-device functions: the kernels
// (src/backend/cuda/cuda_nn.cu) call them per thread or per warp, and the host-memory test device
// (tests/fake_device.hpp) runs the same functions on host memory, so their formulas and indexing are tested against
// the CPU backend's kernels without a GPU. The CPU backend keeps its own vectorised kernels (rnn_kernels.cpp,
// pool_kernels.cpp, cpu_kernels.cpp). Same formulas as those, same f64 row sums; the order of the sums is a warp's.
#include <cmath>
#include <cstdint>
#include <limits>
#include <variant>

#include "core/host_device.hpp"
#include "ops/fused.hpp"
#include "ops/op_defs.hpp"

namespace oxmera::detail {

// ---- A warp of 32 lanes working on one row. `each(f)` runs f(lane) for the calling lane (device) or for all lanes
// (host); `sum(f)` adds f(lane) over the lanes by a fixed butterfly (lane l adds lane l ^ s for s = 16, 8, 4, 2, 1;
// a + b == b + a, so every lane ends with the same bits, and the host's simulation gives those bits too). Code
// outside each() runs on every lane alike.
inline constexpr int kRowLanes = 32;

// The host's warp (the test device): the lanes one after another, in reverse when `reverse` (no result may depend
// on the order the lanes of a phase run in).
struct SequentialLanes {
  bool reverse = false;
  template <class F>
  void each(F&& f) const {
    for (int i = 0; i < kRowLanes; ++i) f(reverse ? kRowLanes - 1 - i : i);
  }
  template <class F>
  double sum(F&& f) const {
    double v[kRowLanes];
    each([&](int lane) { v[lane] = f(lane); });
    for (int s = kRowLanes / 2; s > 0; s >>= 1) {
      double t[kRowLanes];
      for (int l = 0; l < kRowLanes; ++l) t[l] = v[l] + v[l ^ s];
      for (int l = 0; l < kRowLanes; ++l) v[l] = t[l];
    }
    return v[0];
  }
};

// ---- Recurrent cells: one (batch row b, hidden unit j) per call, the formulas of ops/fused.hpp's call structs and of
// the CPU kernels (the registry's sigmoid and tanh with the policy M's exp / tanh).
template <class T, class M = ops::Math>
OXM_HD T cell_sigmoid(T x) {
  return ops::defs::Sigmoid::fwd<T, M>(x);
}
template <class T, class M = ops::Math>
OXM_HD T cell_tanh(T x) {
  return ops::defs::Tanh::fwd<T, M>(x);
}

// LSTM forward at (b, j): gates / acts rows of 4H (i, f, g, o), c_prev / c / h rows of H; gates_add (null: none) is
// added to gates.
template <class T, class M = ops::Math>
OXM_HD void lstm_cell_at(const T* gates, const T* gates_add, const T* c_prev, int64_t H, int64_t b, int64_t j, T* acts,
                         T* h, T* c) {
  const T* g = gates + b * 4 * H;
  const T* g2 = gates_add ? gates_add + b * 4 * H : nullptr;
  auto pre = [&](int64_t k) { return g2 ? g[k] + g2[k] : g[k]; };
  T* a = acts + b * 4 * H;
  const T i = cell_sigmoid<T, M>(pre(j)), f = cell_sigmoid<T, M>(pre(H + j));
  const T gg = cell_tanh<T, M>(pre(2 * H + j)), o = cell_sigmoid<T, M>(pre(3 * H + j));
  a[j] = i;
  a[H + j] = f;
  a[2 * H + j] = gg;
  a[3 * H + j] = o;
  const T cv = f * c_prev[b * H + j] + i * gg;
  c[b * H + j] = cv;
  h[b * H + j] = o * cell_tanh<T, M>(cv);
}

// LSTM backward at (b, j); gh / gc null: zero.
template <class T, class M = ops::Math>
OXM_HD void lstm_cell_backward_at(const T* acts, const T* c_prev, const T* c, const T* gh, const T* gc, int64_t H,
                                  int64_t b, int64_t j, T* grad_gates, T* grad_c_prev) {
  const T* a = acts + b * 4 * H;
  T* d = grad_gates + b * 4 * H;
  const int64_t k = b * H + j;
  const T i = a[j], f = a[H + j], g = a[2 * H + j], o = a[3 * H + j];
  const T tc = cell_tanh<T, M>(c[k]);
  const T ghv = gh ? gh[k] : T(0), gcv = gc ? gc[k] : T(0);
  const T dc = gcv + ghv * o * (T(1) - tc * tc);
  d[j] = dc * g * i * (T(1) - i);
  d[H + j] = dc * c_prev[k] * f * (T(1) - f);
  d[2 * H + j] = dc * i * (T(1) - g * g);
  d[3 * H + j] = ghv * tc * o * (T(1) - o);
  grad_c_prev[k] = dc * f;
}

// GRU forward at (b, j): gi / gh rows of 3H (r, z, n), acts rows of 4H (r, z, n, gh_n), h_prev / h rows of H.
template <class T, class M = ops::Math>
OXM_HD void gru_cell_at(const T* gi, const T* gh, const T* h_prev, int64_t H, int64_t b, int64_t j, T* acts, T* h) {
  const T* x = gi + b * 3 * H;
  const T* y = gh + b * 3 * H;
  T* a = acts + b * 4 * H;
  const T r = cell_sigmoid<T, M>(x[j] + y[j]), z = cell_sigmoid<T, M>(x[H + j] + y[H + j]);
  const T ghn = y[2 * H + j];
  const T n = cell_tanh<T, M>(x[2 * H + j] + r * ghn);
  a[j] = r;
  a[H + j] = z;
  a[2 * H + j] = n;
  a[3 * H + j] = ghn;
  h[b * H + j] = n + z * (h_prev[b * H + j] - n);
}

template <class T>
OXM_HD void gru_cell_backward_at(const T* acts, const T* h_prev, const T* g, int64_t H, int64_t b, int64_t j,
                                 T* grad_gi, T* grad_gh, T* grad_h_prev) {
  const T* a = acts + b * 4 * H;
  const int64_t k = b * H + j;
  const T r = a[j], z = a[H + j], n = a[2 * H + j], ghn = a[3 * H + j], gv = g[k];
  const T dn = gv * (T(1) - z) * (T(1) - n * n);
  const T dz = gv * (h_prev[k] - n) * z * (T(1) - z);
  const T dr = dn * ghn * r * (T(1) - r);
  T* di = grad_gi + b * 3 * H;
  T* dh = grad_gh + b * 3 * H;
  di[j] = dr;
  di[H + j] = dz;
  di[2 * H + j] = dn;
  dh[j] = dr;
  dh[H + j] = dz;
  dh[2 * H + j] = dn * r;
  grad_h_prev[k] = gv * z;
}

template <class T, class M = ops::Math>
OXM_HD T rnn_cell_at(T xt, T hh, bool relu) {
  return relu ? ops::defs::Relu::fwd<T, M>(xt + hh) : cell_tanh<T, M>(xt + hh);
}

// ---- Rows (layer norm, softmax's gradient): one warp per row of n contiguous elements; f64 sums of T terms.
// layer_norm: two passes as the CPU's (the mean, then the mean square of the centred row).
template <class Lanes, class T>
OXM_HD void layer_norm_row(const Lanes& w, const T* x, const T* weight, const T* bias, int64_t n, double eps, T* y,
                           T* mean_out, T* rstd_out) {
  const double dn = static_cast<double>(n);
  const T mean = static_cast<T>(w.sum([&](int lane) {
    double s = 0;
    for (int64_t i = lane; i < n; i += kRowLanes) s += static_cast<double>(x[i]);
    return s;
  }) / dn);
  const T var = static_cast<T>(w.sum([&](int lane) {
    double s = 0;
    for (int64_t i = lane; i < n; i += kRowLanes) {
      const T d = x[i] - mean;
      s += static_cast<double>(d * d);
    }
    return s;
  }) / dn);
  const T rstd = T(1) / std::sqrt(var + static_cast<T>(eps));
  w.each([&](int lane) {
    if (lane == 0) {
      *mean_out = mean;
      *rstd_out = rstd;
    }
    for (int64_t i = lane; i < n; i += kRowLanes) {
      T v = (x[i] - mean) * rstd;
      if (weight) v = v * weight[i];
      if (bias) v = v + bias[i];
      y[i] = v;
    }
  });
}

// Its input gradient: gy = g weight (g without a weight), xhat = (x - mean) rstd,
// grad_x = rstd (gy - mean(gy) - xhat mean(gy xhat)).
template <class Lanes, class T>
OXM_HD void layer_norm_backward_row(const Lanes& w, const T* x, const T* g, const T* weight, T mean, T rstd, int64_t n,
                                    T* grad_x) {
  const double dn = static_cast<double>(n);
  const T a = static_cast<T>(w.sum([&](int lane) {
    double s = 0;
    for (int64_t i = lane; i < n; i += kRowLanes) s += static_cast<double>(weight ? g[i] * weight[i] : g[i]);
    return s;
  }) / dn);
  const T c = static_cast<T>(w.sum([&](int lane) {
    double s = 0;
    for (int64_t i = lane; i < n; i += kRowLanes) {
      const T gy = weight ? g[i] * weight[i] : g[i];
      s += static_cast<double>(gy * ((x[i] - mean) * rstd));
    }
    return s;
  }) / dn);
  w.each([&](int lane) {
    for (int64_t i = lane; i < n; i += kRowLanes) {
      const T gy = weight ? g[i] * weight[i] : g[i];
      grad_x[i] = rstd * (gy - a - (x[i] - mean) * rstd * c);
    }
  });
}

// The weight and bias gradients, column sums over the rows: chunks of kLayerNormRowChunk rows summed in row order
// per column (one thread per (chunk, column) on the device), then the chunks' partial sums added in chunk order.
inline constexpr int64_t kLayerNormRowChunk = 32;
template <class T>
OXM_HD void layer_norm_param_partial(const T* x, const T* g, const T* mean, const T* rstd, int64_t n, int64_t rows,
                                     int64_t chunk, int64_t j, double* sw, double* sb) {
  double a = 0, b = 0;
  const int64_t r1 = (chunk + 1) * kLayerNormRowChunk < rows ? (chunk + 1) * kLayerNormRowChunk : rows;
  for (int64_t r = chunk * kLayerNormRowChunk; r < r1; ++r) {
    const T gv = g[r * n + j];
    a += static_cast<double>(gv * ((x[r * n + j] - mean[r]) * rstd[r]));
    b += static_cast<double>(gv);
  }
  *sw = a;
  *sb = b;
}

// softmax's gradient along a contiguous row: s = sum(g y) (log_softmax: sum(g)); y (g - s) or g - e^y s.
template <class Lanes, class T, class M = ops::Math>
OXM_HD void softmax_backward_row(const Lanes& w, const T* y, const T* g, int64_t n, bool log, T* grad_x) {
  const T s = static_cast<T>(w.sum([&](int lane) {
    double acc = 0;
    for (int64_t i = lane; i < n; i += kRowLanes) acc += static_cast<double>(log ? g[i] : g[i] * y[i]);
    return acc;
  }));
  w.each([&](int lane) {
    for (int64_t i = lane; i < n; i += kRowLanes) grad_x[i] = log ? g[i] - M::exp(y[i]) * s : y[i] * (g[i] - s);
  });
}

// ---- Max pooling. One output (y, z) of a plane whose element (h, w) is plane[h * rs + w * cs]: the in-image taps
// in row-major order, the first held and a later one taking its place when greater or NaN (torch's rule); an
// empty window gives -inf and index -1. `index` is h * W + w.
template <class T>
OXM_HD void max_pool_window(const T* plane, int64_t rs, int64_t cs, int64_t H, int64_t W, const ConvGeometry& geo,
                            int64_t y, int64_t z, T* out, int64_t* index) {
  const TapRange ti = taps_inside(y * geo.sh - geo.ph, H, geo.kh, geo.dh);
  const TapRange tj = taps_inside(z * geo.sw - geo.pw, W, geo.kw, geo.dw);
  T best = -std::numeric_limits<T>::infinity();
  int64_t at = -1;
  for (int64_t i = ti.lo; i < ti.hi; ++i) {
    const int64_t h = y * geo.sh - geo.ph + i * geo.dh;
    for (int64_t j = tj.lo; j < tj.hi; ++j) {
      const int64_t w = z * geo.sw - geo.pw + j * geo.dw;
      const T v = plane[h * rs + w * cs];
      if (at < 0 || v > best || v != v) {
        best = v;
        at = h * W + w;
      }
    }
  }
  *out = best;
  *index = at;
}

// The outputs along one dim whose windows may hold input position p: o * s - pad + t * d == p for a tap t in [0, k),
// so o in [ceil((p + pad - (k - 1) d) / s), floor((p + pad) / s)], clipped to [0, out). A superset is harmless:
// the backward checks each candidate's index. Callers keep (k - 1) d + pad + p far from overflow (max_pool_fits).
struct OutputRange {
  int64_t lo = 0, hi = 0;  // [lo, hi)
};
OXM_HD inline int64_t floor_div(int64_t a, int64_t b) {  // b > 0
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}
OXM_HD inline OutputRange outputs_reaching(int64_t p, int64_t pad, int64_t k, int64_t s, int64_t d, int64_t out) {
  const int64_t lo = -floor_div(-(p + pad - (k - 1) * d), s);  // ceil
  const int64_t hi = floor_div(p + pad, s) + 1;
  return {lo < 0 ? 0 : lo, hi > out ? out : hi};
}
// Whether the backward's candidate arithmetic stays in range for this geometry and input size.
inline bool max_pool_fits(const ConvGeometry& g, int64_t H, int64_t W) {
  constexpr int64_t kLimit = int64_t{1} << 40;
  auto small = [&](int64_t k, int64_t s, int64_t p, int64_t d, int64_t n) {
    return k >= 1 && s >= 1 && d >= 1 && p >= 0 && k <= kLimit && d <= kLimit && p <= kLimit && n <= kLimit &&
           (k - 1) <= kLimit / d;
  };
  return small(g.kh, g.sh, g.ph, g.dh, H) && small(g.kw, g.sw, g.pw, g.dw, W);
}

// The gradient at input (h, w) of one plane: `init` plus g at every output whose index is h * W + w, in increasing
// output position (the CPU's scatter order, so the same sums). g / indices: the plane's [oh, ow], contiguous.
template <class T>
OXM_HD T max_pool_backward_at(const T* g, const int64_t* indices, int64_t W, const ConvGeometry& geo, int64_t h,
                              int64_t w, T init) {
  const OutputRange ry = outputs_reaching(h, geo.ph, geo.kh, geo.sh, geo.dh, geo.oh);
  const OutputRange rz = outputs_reaching(w, geo.pw, geo.kw, geo.sw, geo.dw, geo.ow);
  const int64_t target = h * W + w;
  T acc = init;
  for (int64_t y = ry.lo; y < ry.hi; ++y)
    for (int64_t z = rz.lo; z < rz.hi; ++z)
      if (indices[y * geo.ow + z] == target) acc += g[y * geo.ow + z];
  return acc;
}

// ---- The fused ops these kernels are for, and which of their calls the CUDA backend's kernels take (f32; the
// layouts below), the test device's too: one list and one predicate. False for any other fused op.
inline bool nn_kernel_op(ops::FusedOp op) {
  switch (op) {
    case ops::FusedOp::SoftmaxBackward:
    case ops::FusedOp::LayerNorm:
    case ops::FusedOp::LayerNormBackward:
    case ops::FusedOp::LstmCell:
    case ops::FusedOp::LstmCellBackward:
    case ops::FusedOp::GruCell:
    case ops::FusedOp::GruCellBackward:
    case ops::FusedOp::RnnCell:
    case ops::FusedOp::MaxPool2d:
    case ops::FusedOp::MaxPool2dBackward:
      return true;
    default:
      return false;
  }
}
inline bool nn_kernel_takes(const ops::FusedCall& call) {
  auto f32 = [](const TensorImpl* t) { return t->dtype == DType::F32; };
  auto dense = [](const TensorImpl* t) { return t == nullptr || t->contiguous; };
  switch (ops::fused_op(call)) {
    case ops::FusedOp::SoftmaxBackward: {
      const auto& c = std::get<ops::SoftmaxBackwardCall>(call);
      const int64_t last = static_cast<int64_t>(c.y->shape.size()) - 1;
      return f32(c.y) && dense(c.y) && dense(c.g) && dense(c.grad_x) && (c.dim == last || c.y->shape.empty());
    }
    case ops::FusedOp::LayerNorm: {
      const auto& c = std::get<ops::LayerNormCall>(call);
      return f32(c.x) && c.n >= 1 && dense(c.x) && dense(c.weight) && dense(c.bias);
    }
    case ops::FusedOp::LayerNormBackward: {
      const auto& c = std::get<ops::LayerNormBackwardCall>(call);
      return f32(c.x) && c.n >= 1 && dense(c.x) && dense(c.g) && dense(c.weight);
    }
    case ops::FusedOp::LstmCell: {
      const auto& c = std::get<ops::LstmCellCall>(call);
      return f32(c.gates) && dense(c.gates) && dense(c.c_prev) && dense(c.gates_add);
    }
    case ops::FusedOp::LstmCellBackward: {
      const auto& c = std::get<ops::LstmCellBackwardCall>(call);
      return f32(c.acts) && dense(c.acts) && dense(c.c_prev) && dense(c.c) && dense(c.gh) && dense(c.gc);
    }
    case ops::FusedOp::GruCell: {
      const auto& c = std::get<ops::GruCellCall>(call);
      return f32(c.gi) && dense(c.gi) && dense(c.gh) && dense(c.h_prev);
    }
    case ops::FusedOp::GruCellBackward: {
      const auto& c = std::get<ops::GruCellBackwardCall>(call);
      return f32(c.acts) && dense(c.acts) && dense(c.h_prev) && dense(c.g);
    }
    case ops::FusedOp::RnnCell: {
      const auto& c = std::get<ops::RnnCellCall>(call);
      return f32(c.xt) && dense(c.xt) && dense(c.hh);
    }
    case ops::FusedOp::MaxPool2d: {
      const auto& c = std::get<ops::MaxPool2dCall>(call);
      return f32(c.x) && c.x->shape.size() == 4;
    }
    case ops::FusedOp::MaxPool2dBackward: {
      const auto& c = std::get<ops::MaxPool2dBackwardCall>(call);
      if (!f32(c.grad_x) || c.grad_x->shape.size() != 4 || !dense(c.g) || !dense(c.indices) || !dense(c.grad_x))
        return false;
      const ConvGeometry& g = c.geometry;  // given, and the one g was made with
      return g.oh >= 1 && g.ow >= 1 && c.g->shape.size() == 4 && c.g->shape[2] == g.oh && c.g->shape[3] == g.ow &&
             max_pool_fits(g, c.grad_x->shape[2], c.grad_x->shape[3]);
    }
    default:
      return false;
  }
}

}  // namespace oxmera::detail
