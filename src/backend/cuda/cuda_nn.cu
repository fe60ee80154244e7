// The nn fused ops on the device (f32): the LSTM, GRU and plain RNN cells forward and backward (a thread per (batch
// row, hidden unit)), layer norm and its gradient and softmax's gradient (a warp per row; the weight and bias
// gradients as per-chunk column sums and then one sum over the chunks, a fixed order: deterministic), max pooling
// (a thread per output) and its gradient (a thread per input position, gathering from the outputs whose windows
// reach it, in increasing output position: no atomics, the CPU's sums). The per-element and per-row code is
// src/backend/common/nn_math.hpp, which the host-memory test device runs too. Each op is one launch (the
// layer-norm gradient two or three), where its composite fallback was 5 to 30.
#include "backend/common/nn_math.hpp"
#include "backend/cuda/cuda_common.cuh"

namespace oxmera::detail::cuda {
namespace {

// nn_math.hpp's lanes on the device: this thread's lane of its warp, sums by xor shuffles.
struct DeviceLanes {
  int lane;
  template <class F>
  __device__ void each(F&& f) const {
    f(lane);
  }
  template <class F>
  __device__ double sum(F&& f) const {
    double v = f(lane);
    for (int s = kRowLanes / 2; s > 0; s >>= 1) v += __shfl_xor_sync(0xffffffffu, v, s);
    return v;
  }
};

constexpr int kRowWarps = kThreads / kRowLanes;  // rows per block of the row kernels

// Index type I: int when the element count fits (32-bit divisions), else int64_t.
#define OXM_NN_LOOP(I, i, n)                                                                                 \
  for (I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x); i < (n); \
       i += static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x))
// Each warp walks rows r = its global warp index, + the grid's warps (uniform within the warp, as the shuffles need).
#define OXM_ROW_LOOP(r, rows)                                                                          \
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kRowWarps + threadIdx.x / kRowLanes; r < (rows); \
       r += static_cast<int64_t>(gridDim.x) * kRowWarps)

template <class I>
__global__ void __launch_bounds__(kThreads)
    lstm_cell_kernel(const float* gates, const float* gates_add, const float* c_prev, I B, I H, float* acts, float* h,
                     float* c) {
  OXM_NN_LOOP(I, e, B * H) {
    const I b = e / H;
    lstm_cell_at<float>(gates, gates_add, c_prev, H, b, e - b * H, acts, h, c);
  }
}
template <class I>
__global__ void __launch_bounds__(kThreads)
    lstm_cell_backward_kernel(const float* acts, const float* c_prev, const float* c, const float* gh, const float* gc,
                              I B, I H, float* grad_gates, float* grad_c_prev) {
  OXM_NN_LOOP(I, e, B * H) {
    const I b = e / H;
    lstm_cell_backward_at<float>(acts, c_prev, c, gh, gc, H, b, e - b * H, grad_gates, grad_c_prev);
  }
}
template <class I>
__global__ void __launch_bounds__(kThreads)
    gru_cell_kernel(const float* gi, const float* gh, const float* h_prev, I B, I H, float* acts, float* h) {
  OXM_NN_LOOP(I, e, B * H) {
    const I b = e / H;
    gru_cell_at<float>(gi, gh, h_prev, H, b, e - b * H, acts, h);
  }
}
template <class I>
__global__ void __launch_bounds__(kThreads)
    gru_cell_backward_kernel(const float* acts, const float* h_prev, const float* g, I B, I H, float* grad_gi,
                             float* grad_gh, float* grad_h_prev) {
  OXM_NN_LOOP(I, e, B * H) {
    const I b = e / H;
    gru_cell_backward_at<float>(acts, h_prev, g, H, b, e - b * H, grad_gi, grad_gh, grad_h_prev);
  }
}
__global__ void __launch_bounds__(kThreads)
    rnn_cell_kernel(const float* xt, const float* hh, int64_t n, bool relu, float* h) {
  OXM_NN_LOOP(int64_t, i, n) h[i] = rnn_cell_at<float>(xt[i], hh[i], relu);
}

__global__ void __launch_bounds__(kThreads)
    layer_norm_kernel(const float* x, const float* w, const float* b, int64_t rows, int64_t n, double eps, float* y,
                      float* mean, float* rstd) {
  const DeviceLanes lanes{static_cast<int>(threadIdx.x % kRowLanes)};
  OXM_ROW_LOOP(r, rows) layer_norm_row(lanes, x + r * n, w, b, n, eps, y + r * n, mean + r, rstd + r);
}
__global__ void __launch_bounds__(kThreads)
    layer_norm_backward_kernel(const float* x, const float* g, const float* w, const float* mean, const float* rstd,
                               int64_t rows, int64_t n, float* grad_x) {
  const DeviceLanes lanes{static_cast<int>(threadIdx.x % kRowLanes)};
  OXM_ROW_LOOP(r, rows) layer_norm_backward_row(lanes, x + r * n, g + r * n, w, mean[r], rstd[r], n, grad_x + r * n);
}
// One thread per (chunk, column): the chunk's sums into partial[chunk][j] (f64), or straight into the gradients
// when there is one chunk.
__global__ void __launch_bounds__(kThreads)
    layer_norm_param_partial_kernel(const float* x, const float* g, const float* mean, const float* rstd, int64_t rows,
                                    int64_t n, int64_t chunks, double* pw, double* pb, float* gw, float* gb) {
  OXM_NN_LOOP(int64_t, e, chunks * n) {
    const int64_t chunk = e / n, j = e - chunk * n;
    double sw, sb;
    layer_norm_param_partial(x, g, mean, rstd, n, rows, chunk, j, &sw, &sb);
    if (chunks == 1) {
      if (gw) gw[j] = static_cast<float>(sw);
      if (gb) gb[j] = static_cast<float>(sb);
    } else {
      pw[e] = sw;
      pb[e] = sb;
    }
  }
}
__global__ void __launch_bounds__(kThreads)
    layer_norm_param_finish_kernel(const double* pw, const double* pb, int64_t n, int64_t chunks, float* gw,
                                   float* gb) {
  OXM_NN_LOOP(int64_t, j, n) {
    double sw = 0, sb = 0;
    for (int64_t k = 0; k < chunks; ++k) {
      sw += pw[k * n + j];
      sb += pb[k * n + j];
    }
    if (gw) gw[j] = static_cast<float>(sw);
    if (gb) gb[j] = static_cast<float>(sb);
  }
}

__global__ void __launch_bounds__(kThreads)
    softmax_backward_kernel(const float* y, const float* g, int64_t rows, int64_t n, bool log, float* grad_x) {
  const DeviceLanes lanes{static_cast<int>(threadIdx.x % kRowLanes)};
  OXM_ROW_LOOP(r, rows) softmax_backward_row(lanes, y + r * n, g + r * n, n, log, grad_x + r * n);
}

// x [N, C, H, W] with strides s; one thread per output of the contiguous [N, C, oh, ow].
__global__ void __launch_bounds__(kThreads)
    max_pool_kernel(const float* x, int64_t C, int64_t H, int64_t W, int64_t s0, int64_t s1, int64_t s2, int64_t s3,
                    ConvGeometry geo, int64_t total, float* out, int64_t* indices) {
  const int64_t plane_out = geo.oh * geo.ow;
  OXM_NN_LOOP(int64_t, e, total) {
    const int64_t p = e / plane_out, l = e - p * plane_out, y = l / geo.ow, z = l - y * geo.ow;
    const int64_t nn = p / C, cc = p - nn * C;
    max_pool_window(x + nn * s0 + cc * s1, s2, s3, H, W, geo, y, z, out + e, indices + e);
  }
}
// One thread per input position of the contiguous [N, C, H, W] gradient.
__global__ void __launch_bounds__(kThreads)
    max_pool_backward_kernel(const float* g, const int64_t* indices, int64_t H, int64_t W, ConvGeometry geo,
                             int64_t total, bool zero_first, float* grad_x) {
  const int64_t plane = H * W, plane_out = geo.oh * geo.ow;
  OXM_NN_LOOP(int64_t, e, total) {
    const int64_t p = e / plane, l = e - p * plane, h = l / W, w = l - h * W;
    grad_x[e] =
        max_pool_backward_at(g + p * plane_out, indices + p * plane_out, W, geo, h, w, zero_first ? 0.f : grad_x[e]);
  }
}

template <class T>
const T* ptr_or_null(const TensorImpl* t) {
  return t ? t->ptr<T>() : nullptr;
}
template <class T>
T* mut_or_null(TensorImpl* t) {
  return t ? t->ptr<T>() : nullptr;
}
// A cell kernel over batch * hidden elements, launched with 32-bit index arithmetic when the count fits:
// launch(B, H) with B and H of the kernel's index type.
template <class Launch>
void launch_cells(int64_t batch, int64_t hidden, const char* op, Launch launch) {
  const int64_t n = batch * hidden;
  if (n == 0) return;
  if (n <= INT32_MAX)
    launch(static_cast<int>(batch), static_cast<int>(hidden));
  else
    launch(batch, hidden);
  check_launch(op);
}
unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(grid_blocks(rows, kRowWarps, sm_count())); }

}  // namespace

bool has_nn_kernel(const ops::FusedCall& call) { return nn_kernel_takes(call); }

void run_nn_kernel(ops::FusedCall& call) {
  switch (ops::fused_op(call)) {
    case ops::FusedOp::LstmCell: {
      const auto& c = std::get<ops::LstmCellCall>(call);
      return launch_cells(c.batch, c.hidden, "lstm_cell", [&](auto B, auto H) {
        lstm_cell_kernel<decltype(B)><<<blocks(int64_t{B} * H), kThreads, 0, stream()>>>(
            c.gates->ptr<float>(), ptr_or_null<float>(c.gates_add), c.c_prev->ptr<float>(), B, H, c.acts->ptr<float>(),
            c.h->ptr<float>(), c.c->ptr<float>());
      });
    }
    case ops::FusedOp::LstmCellBackward: {
      const auto& c = std::get<ops::LstmCellBackwardCall>(call);
      return launch_cells(c.batch, c.hidden, "lstm_cell backward", [&](auto B, auto H) {
        lstm_cell_backward_kernel<decltype(B)><<<blocks(int64_t{B} * H), kThreads, 0, stream()>>>(
            c.acts->ptr<float>(), c.c_prev->ptr<float>(), c.c->ptr<float>(), ptr_or_null<float>(c.gh),
            ptr_or_null<float>(c.gc), B, H, c.grad_gates->ptr<float>(), c.grad_c_prev->ptr<float>());
      });
    }
    case ops::FusedOp::GruCell: {
      const auto& c = std::get<ops::GruCellCall>(call);
      return launch_cells(c.batch, c.hidden, "gru_cell", [&](auto B, auto H) {
        gru_cell_kernel<decltype(B)><<<blocks(int64_t{B} * H), kThreads, 0, stream()>>>(
            c.gi->ptr<float>(), c.gh->ptr<float>(), c.h_prev->ptr<float>(), B, H, c.acts->ptr<float>(),
            c.h->ptr<float>());
      });
    }
    case ops::FusedOp::GruCellBackward: {
      const auto& c = std::get<ops::GruCellBackwardCall>(call);
      return launch_cells(c.batch, c.hidden, "gru_cell backward", [&](auto B, auto H) {
        gru_cell_backward_kernel<decltype(B)><<<blocks(int64_t{B} * H), kThreads, 0, stream()>>>(
            c.acts->ptr<float>(), c.h_prev->ptr<float>(), c.g->ptr<float>(), B, H, c.grad_gi->ptr<float>(),
            c.grad_gh->ptr<float>(), c.grad_h_prev->ptr<float>());
      });
    }
    case ops::FusedOp::RnnCell: {
      const auto& c = std::get<ops::RnnCellCall>(call);
      if (c.count == 0) return;
      rnn_cell_kernel<<<blocks(c.count), kThreads, 0, stream()>>>(c.xt->ptr<float>(), c.hh->ptr<float>(), c.count,
                                                                  c.relu, c.h->ptr<float>());
      return check_launch("rnn_cell");
    }
    case ops::FusedOp::LayerNorm: {
      const auto& c = std::get<ops::LayerNormCall>(call);
      const int64_t rows = c.x->numel / c.n;
      if (rows == 0) return;
      layer_norm_kernel<<<row_blocks(rows), kThreads, 0, stream()>>>(
          c.x->ptr<float>(), ptr_or_null<float>(c.weight), ptr_or_null<float>(c.bias), rows, c.n, c.eps,
          c.y->ptr<float>(), c.mean->ptr<float>(), c.rstd->ptr<float>());
      return check_launch("layer_norm");
    }
    case ops::FusedOp::LayerNormBackward: {
      const auto& c = std::get<ops::LayerNormBackwardCall>(call);
      const int64_t rows = c.x->numel / c.n, n = c.n;
      float *gw = mut_or_null<float>(c.grad_weight), *gb = mut_or_null<float>(c.grad_bias);
      if (rows == 0) {  // the column sums of no rows
        if (gw) fill(*c.grad_weight, 0.0);
        if (gb) fill(*c.grad_bias, 0.0);
        return;
      }
      const float *x = c.x->ptr<float>(), *g = c.g->ptr<float>(), *mean = c.mean->ptr<float>(),
                  *rstd = c.rstd->ptr<float>();
      layer_norm_backward_kernel<<<row_blocks(rows), kThreads, 0, stream()>>>(x, g, ptr_or_null<float>(c.weight), mean,
                                                                              rstd, rows, n, c.grad_x->ptr<float>());
      check_launch("layer_norm backward");
      if (!gw && !gb) return;
      const int64_t chunks = (rows + kLayerNormRowChunk - 1) / kLayerNormRowChunk;
      if (chunks == 1) {
        layer_norm_param_partial_kernel<<<blocks(n), kThreads, 0, stream()>>>(x, g, mean, rstd, rows, n, 1, nullptr,
                                                                              nullptr, gw, gb);
        return check_launch("layer_norm backward");
      }
      Scratch partial(static_cast<size_t>(2 * chunks * n) * sizeof(double));
      double* pw = partial.as<double>();
      double* pb = pw + chunks * n;
      layer_norm_param_partial_kernel<<<blocks(chunks * n), kThreads, 0, stream()>>>(x, g, mean, rstd, rows, n, chunks,
                                                                                     pw, pb, gw, gb);
      check_launch("layer_norm backward");
      layer_norm_param_finish_kernel<<<blocks(n), kThreads, 0, stream()>>>(pw, pb, n, chunks, gw, gb);
      return check_launch("layer_norm backward");
    }
    case ops::FusedOp::SoftmaxBackward: {
      const auto& c = std::get<ops::SoftmaxBackwardCall>(call);
      const int64_t n = c.y->shape.empty() ? 1 : c.y->shape.back();
      if (c.y->numel == 0 || n == 0) return;
      const int64_t rows = c.y->numel / n;
      softmax_backward_kernel<<<row_blocks(rows), kThreads, 0, stream()>>>(c.y->ptr<float>(), c.g->ptr<float>(), rows,
                                                                           n, c.log, c.grad_x->ptr<float>());
      return check_launch(c.log ? "log_softmax backward" : "softmax backward");
    }
    case ops::FusedOp::MaxPool2d: {
      const auto& c = std::get<ops::MaxPool2dCall>(call);
      const TensorImpl& x = *c.x;
      const int64_t total = c.out->numel;
      if (total == 0) return;
      max_pool_kernel<<<blocks(total), kThreads, 0, stream()>>>(
          x.ptr<float>(), x.shape[1], x.shape[2], x.shape[3], x.strides[0], x.strides[1], x.strides[2], x.strides[3],
          c.geometry, total, c.out->ptr<float>(), c.indices->ptr<int64_t>());
      return check_launch("max_pool2d");
    }
    case ops::FusedOp::MaxPool2dBackward: {
      const auto& c = std::get<ops::MaxPool2dBackwardCall>(call);
      const int64_t total = c.grad_x->numel;
      if (total == 0) return;
      max_pool_backward_kernel<<<blocks(total), kThreads, 0, stream()>>>(
          c.g->ptr<float>(), c.indices->ptr<int64_t>(), c.grad_x->shape[2], c.grad_x->shape[3], c.geometry, total,
          c.zero_first, c.grad_x->ptr<float>());
      return check_launch("max_pool2d backward");
    }
    default:
      OXM_FAIL(Backend, "cuda: ", ops::fused_op_name(ops::fused_op(call)), " is not one of the nn kernels");
  }
}

}  // namespace oxmera::detail::cuda
