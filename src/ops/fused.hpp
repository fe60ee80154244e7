#pragma once
// Fused ops: kernels a backend may offer for work that ordinary ops can also do (cross entropy and its
// backward, the grouped optimizer step, im2col / col2im, the small SPD linear algebra, scans and sorting along a
// dim, layer norm, the LSTM cell, attention, linear, max pooling). Each op has an id, a typed call struct
// (inputs, outputs, scalars) and a composite fallback built from ordinary ops (or a host loop). The Backend
// contract has two entry points for all of them, `supports(call)` and `run(call)`; `ops::run_fused` asks the
// backend and otherwise runs the fallback, so a backend that offers none still runs every model. The registry
// (name, id, fallback, who offers it) is `fused_ops()` in fused.cpp. Adding a fused op: one X-macro entry and
// its call struct here, its fallback and registry row in fused.cpp, and `supports`/`run` cases in the backends
// that offer a kernel for it (see docs/ARCHITECTURE.md, "How a backend plugs in").
#include <climits>
#include <cstddef>
#include <cstdint>
#include <variant>

#include "core/host_device.hpp"
#include "oxmera/device.hpp"
#include "oxmera/dtype.hpp"
#include "tensor/tensor_impl.hpp"

namespace oxmera::detail {

// One optimizer update with torch.optim's formulas. State buffers by kind:
//   SGD: state0 = momentum buffer (when momentum != 0)
//   Adam / AdamW: state0 = exp_avg, state1 = exp_avg_sq, state2 = max_exp_avg_sq (amsgrad)
//   RMSprop: state0 = square_avg, state1 = momentum buffer (momentum != 0), state2 = grad_avg (centered)
struct OptimizerStep {
  enum class Kind : uint8_t { SGD, Adam, AdamW, RMSprop } kind = Kind::SGD;
  double lr = 1e-3, weight_decay = 0;
  double momentum = 0, dampening = 0;             // SGD, RMSprop (momentum)
  bool nesterov = false;                          // SGD
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // Adam(W); eps also RMSprop
  bool amsgrad = false;                           // Adam(W)
  double alpha = 0.99;                            // RMSprop
  bool centered = false;                          // RMSprop
  bool maximize = false;
  int64_t step = 1;         // 1-based step count after this update (bias corrections)
  bool first_step = false;  // SGD: momentum buffer initialised from the gradient
};

// One parameter's update of an OptimizerStepsCall: param, grad and the state buffers are contiguous tensors
// of one shape, dtype and device.
struct OptimizerUpdate {
  OptimizerStep step;
  TensorImpl* param = nullptr;
  const TensorImpl* grad = nullptr;
  TensorImpl* state[3] = {nullptr, nullptr, nullptr};
  // Adam / AdamW inside a CUDA graph capture: a one-element i64 tensor on the parameter's device holding the step
  // count of this update, read by the kernel in place of step.step (a replay hook advances it before every replay,
  // so the bias corrections follow the count; Optimizer::step). Null otherwise.
  const TensorImpl* step_count = nullptr;
};

// Where a batched Cholesky found a matrix that is not positive definite (batch -1: none).
struct SpdFailure {
  int64_t batch = -1, pivot = -1;
  double value = 0;
};

// Geometry of a 2-d sliding window (convolution, pooling): kernel, stride, padding, dilation, output size.
struct ConvGeometry {
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1, oh = 0, ow = 0;
};

// The kernel taps [lo, hi) of one pooling window along one dim whose positions start + t * d (t in [0, k)) lie
// inside [0, n): start = y * stride - padding. Ceilings as (a - 1) / d + 1 for a > 0, so a dilation near INT64_MAX
// does not overflow. lo >= hi: the window has no in-image position along this dim.
struct TapRange {
  int64_t lo = 0, hi = 0;
};
OXM_HD inline TapRange taps_inside(int64_t start, int64_t n, int64_t k, int64_t d) {
  const int64_t lo = start >= 0 ? 0 : (-start - 1) / d + 1;
  const int64_t hi = n - start <= 0 ? 0 : (n - start - 1) / d + 1;
  return {lo < k ? lo : k, hi < k ? hi : k};
}

}  // namespace oxmera::detail

namespace oxmera::ops {

// X(Id, CallStruct): every fused op, in the order of FusedOp and of the FusedCall variant (names, fallbacks and
// offerings are the registry's, fused.cpp). The next issue's attention and RNN-cell kernels are appended here.
#define OXMERA_FUSED_OPS(X)                         \
  X(CrossEntropy, CrossEntropyCall)                 \
  X(CrossEntropyBackward, CrossEntropyBackwardCall) \
  X(OptimizerSteps, OptimizerStepsCall)             \
  X(Im2col, Im2colCall)                             \
  X(Col2im, Col2imCall)                             \
  X(LogdetSpd, LogdetSpdCall)                       \
  X(CholeskySpd, CholeskySpdCall)                   \
  X(SolveTriangularSmall, SolveTriangularSmallCall) \
  X(Scan, ScanCall)                                 \
  X(CumprodBackward, CumprodBackwardCall)           \
  X(SortIndices, SortIndicesCall)                   \
  X(SoftmaxBackward, SoftmaxBackwardCall)           \
  X(LayerNorm, LayerNormCall)                       \
  X(LayerNormBackward, LayerNormBackwardCall)       \
  X(LstmCell, LstmCellCall)                         \
  X(LstmCellBackward, LstmCellBackwardCall)         \
  X(Attention, AttentionCall)                       \
  X(AttentionBackward, AttentionBackwardCall)       \
  X(Linear, LinearCall)                             \
  X(GruCell, GruCellCall)                           \
  X(GruCellBackward, GruCellBackwardCall)           \
  X(MaxPool2d, MaxPool2dCall)                       \
  X(MaxPool2dBackward, MaxPool2dBackwardCall)       \
  X(RnnCell, RnnCellCall)                           \
  X(DropoutMask, DropoutMaskCall)                   \
  X(IndexCheck, IndexCheckCall)                     \
  X(TensorListNorm, TensorListNormCall)             \
  X(TensorListScale, TensorListScaleCall)

enum class FusedOp : uint8_t {
#define OXM_X(id, call) id,
  OXMERA_FUSED_OPS(OXM_X)
#undef OXM_X
};
#define OXM_X(id, call) +1
inline constexpr int kNumFusedOps = 0 OXMERA_FUSED_OPS(OXM_X);
#undef OXM_X

using detail::TensorImpl;

// Cross entropy over rows (class targets, no class weights). x: [R, C] (R, C >= 1), any strides; target: [R]
// I64 on x's device, a class in [0, C) or -1 for an ignored row. Writes loss and lse ([R], contiguous):
//   lse_r = log sum_c exp x_rc,  logp_rc = x_rc - lse_r,
//   loss_r = scale * (-(1 - ls) logp_{r, t_r} - (ls / C) sum_c logp_rc), and 0 for an ignored row.
struct CrossEntropyCall {
  static constexpr FusedOp kOp = FusedOp::CrossEntropy;
  const TensorImpl* x = nullptr;
  const TensorImpl* target = nullptr;
  double label_smoothing = 0, scale = 1;
  TensorImpl* loss = nullptr;
  TensorImpl* lse = nullptr;
};

// Its gradient: grad_x (contiguous [R, C]) = g_r * scale * (p_rc - (1 - ls) [c == t_r] - ls / C) with
// p_rc = exp(x_rc - lse_r), and 0 for an ignored row; g: [R], any strides (0 for a broadcast gradient).
struct CrossEntropyBackwardCall {
  static constexpr FusedOp kOp = FusedOp::CrossEntropyBackward;
  const TensorImpl* x = nullptr;
  const TensorImpl* target = nullptr;
  const TensorImpl* lse = nullptr;
  const TensorImpl* g = nullptr;
  double label_smoothing = 0, scale = 1;
  TensorImpl* grad_x = nullptr;
};

// Every update of one Optimizer::step() on one device (a GPU runs them in one launch per 24 parameters). A
// kernel that throws must have updated none of them (the optimizer then rolls its bookkeeping back).
struct OptimizerStepsCall {
  static constexpr FusedOp kOp = FusedOp::OptimizerSteps;
  const detail::OptimizerUpdate* updates = nullptr;
  size_t count = 0;
};

// x: [N, C, H, W], any strides; cols: contiguous [N, C*kh*kw, oh*ow] where row (c, i, j), column (y, z) holds
// x[n, c, y*sh - ph + i*dh, z*sw - pw + j*dw], or `pad_value` outside the image. With ones_row, cols is
// [N, C*kh*kw + 1, oh*ow] and each image's last row is all ones: a convolution's bias then rides in its GEMM as
// one more weight column (nn::functional::conv2d), and its gradient comes out of the weight's.
struct Im2colCall {
  static constexpr FusedOp kOp = FusedOp::Im2col;
  const TensorImpl* x = nullptr;
  TensorImpl* cols = nullptr;
  detail::ConvGeometry geometry;
  double pad_value = 0;
  bool ones_row = false;
};

// The adjoint of im2col: x_grad (contiguous [N, C, H, W]) += col2im(cols). With ones_row, cols has im2col's extra
// last row per image, which is skipped; with zero_first, x_grad's contents are ignored (each plane is zeroed just
// before its sums, instead of a separate zero-fill pass).
struct Col2imCall {
  static constexpr FusedOp kOp = FusedOp::Col2im;
  const TensorImpl* cols = nullptr;
  TensorImpl* x_grad = nullptr;
  detail::ConvGeometry geometry;
  bool ones_row = false;
  bool zero_first = false;
};

// Small batched SPD linear algebra: `count` contiguous n x n matrices in and out; a failing matrix's outputs are
// NaN. How failures reach the host: with `report` empty, each call completes its check before returning (`fail`
// names the first failing matrix: a device waits for it); otherwise the kernel writes them where `report` says and
// leaves `fail` empty (a backend may still fill `fail` instead, when it has the answer on the host anyway).
// Where a small-SPD kernel reports failing matrices without the host waiting:
//   info (optional): i64 [count] on the call's device: 0, or the failing pivot + 1 (torch's `info`);
//   first (optional): i64 [1] on the call's device, lowered (an atomic min) to spd_failure_key(tag, b, pivot) for
//   every failing matrix b (backend/common/spd_math.hpp; ops/device_checks.hpp reads it later).
struct SpdReport {
  TensorImpl* info = nullptr;
  TensorImpl* first = nullptr;
  int64_t tag = 0;
  bool empty() const { return info == nullptr && first == nullptr; }
};

// logdet[b] = log det a_b (a_b SPD) and, when `inverse` is not null, inverse_b = a_b^{-1}; fail: the pivot.
struct LogdetSpdCall {
  static constexpr FusedOp kOp = FusedOp::LogdetSpd;
  const TensorImpl* a = nullptr;
  int64_t count = 0, n = 0;
  TensorImpl* logdet = nullptr;
  TensorImpl* inverse = nullptr;
  SpdReport report;
  detail::SpdFailure fail;
};

// L_b = the lower Cholesky factor of a_b (zeros above the diagonal); fail: the pivot.
struct CholeskySpdCall {
  static constexpr FusedOp kOp = FusedOp::CholeskySpd;
  const TensorImpl* a = nullptr;
  int64_t count = 0, n = 0;
  TensorImpl* L = nullptr;
  SpdReport report;
  detail::SpdFailure fail;
};

// x_b <- t_b^{-1} x_b in place (t_b lower or upper triangular n x n, x_b n x k); fail: the zero diagonal's row.
struct SolveTriangularSmallCall {
  static constexpr FusedOp kOp = FusedOp::SolveTriangularSmall;
  const TensorImpl* t = nullptr;
  TensorImpl* x = nullptr;
  int64_t count = 0, n = 0, k = 0;
  bool upper = false;
  SpdReport report;
  detail::SpdFailure fail;
};

// mask[i] = scale where the i-th uniform of the Philox4x32-10 stream (key state[0], counter state[1] + i / 4, word
// i % 4: backend/common/philox.hpp) is >= p, else 0. The dropout mask of a CUDA graph capture, drawn on the device
// from a seed and offset in device memory that a replay hook advances (nn::functional::dropout). mask contiguous
// (f32, f64), state i64 [2] on its device.
struct DropoutMaskCall {
  static constexpr FusedOp kOp = FusedOp::DropoutMask;
  TensorImpl* mask = nullptr;
  const TensorImpl* state = nullptr;
  double p = 0, scale = 1;
};

// An index's range check without a wait (index ops on a device whose index is on that device): safe = index clamped
// to [0, size) (so no kernel reads outside the indexed tensor), and each out-of-range position p lowers the report's
// word to the key (report.tag, p, 0) (spd_math.hpp's keys: the earliest call's first bad position wins), which the
// host reads later (ops/device_checks.hpp). index and safe: i64, contiguous, one shape, on the device; size >= 1;
// report.first set, numel <= kMaxPositions.
//
// Class targets (cross entropy): positions equal to `ignore` are written as -1 and not checked, and `kept` (i64 [1]
// on the device, or null) is increased by the number of the other positions.
struct IndexCheckCall {
  static constexpr FusedOp kOp = FusedOp::IndexCheck;
  static constexpr int64_t kMaxPositions = int64_t{1} << 32;  // the key's batch range (spd_math.hpp)
  static constexpr int64_t kNoIgnore = INT64_MIN;
  const TensorImpl* index = nullptr;
  TensorImpl* safe = nullptr;
  int64_t size = 1;
  SpdReport report;
  int64_t ignore = kNoIgnore;
  TensorImpl* kept = nullptr;
  // Whether the call is one the kernels take (CUDA's and the test device's); asked before the report is made, which
  // must be set (report.first) when the call runs.
  bool kernel_takes() const {
    return index->dtype == DType::I64 && index->contiguous && safe->contiguous && size >= 1 &&
           index->numel <= kMaxPositions && (kept == nullptr || (kept->dtype == DType::I64 && kept->numel == 1));
  }
};

// The inner sums of per-tensor norms over a list (clip_grad_norm_ on a device): out[i] = sum |t_i|^p for a finite
// norm_type p > 0 (the terms |x|^p formed in the tensors' dtype, summed in f64), or max |t_i| for p = +inf (NaN
// propagates); 0 for an empty tensor. The tensors on out's device, out [count] (CUDA's kernel: f32 and contiguous;
// the fallback: any float dtype).
struct TensorListNormCall {
  static constexpr FusedOp kOp = FusedOp::TensorListNorm;
  const TensorImpl* const* tensors = nullptr;
  size_t count = 0;
  double norm_type = 2;
  TensorImpl* out = nullptr;
};
// Every tensor of a list multiplied in place by one scale (clip_grad_norm_'s coefficient), on one device (CUDA's
// kernel: f32, contiguous).
struct TensorListScaleCall {
  static constexpr FusedOp kOp = FusedOp::TensorListScale;
  TensorImpl* const* tensors = nullptr;
  size_t count = 0;
  double scale = 1;
};

// Ops along one dim of contiguous tensors seen as [outer, n, inner]: `outer * inner` rows of n elements `inner`
// apart (row (o, i) starts at o * n * inner + i); the per-row math is src/backend/common/scan_math.hpp.
struct RowsAlongDim {
  int64_t outer = 1, n = 1, inner = 1;
};
// out = the inclusive running sum or product of x along each row (from its end when `reverse`); x and out
// contiguous, one shape and dtype (f32, f64, i64). Floats accumulate in f64, i64 wraps.
struct ScanCall {
  static constexpr FusedOp kOp = FusedOp::Scan;
  const TensorImpl* x = nullptr;
  TensorImpl* out = nullptr;
  RowsAlongDim rows;
  bool product = false, reverse = false;
};
// cumprod's gradient grad_x from g and x (all contiguous, one shape and float dtype), exact with zeros in x.
struct CumprodBackwardCall {
  static constexpr FusedOp kOp = FusedOp::CumprodBackward;
  const TensorImpl* x = nullptr;
  const TensorImpl* g = nullptr;
  TensorImpl* grad_x = nullptr;
  RowsAlongDim rows;
};
// indices (contiguous I64, x's shape) = each row's positions in stable sorted order, ascending or descending;
// NaN is the largest value. x contiguous (f32, f64, i64).
struct SortIndicesCall {
  static constexpr FusedOp kOp = FusedOp::SortIndices;
  const TensorImpl* x = nullptr;
  TensorImpl* indices = nullptr;
  RowsAlongDim rows;
  bool descending = false;
};
// softmax / log_softmax's gradient along one dim from its output y and the output's gradient g (one shape and
// float dtype, any strides): grad_x (contiguous) = y (g - sum_dim(g y)), or for log_softmax g - e^y sum_dim(g).
struct SoftmaxBackwardCall {
  static constexpr FusedOp kOp = FusedOp::SoftmaxBackward;
  const TensorImpl* y = nullptr;
  const TensorImpl* g = nullptr;
  TensorImpl* grad_x = nullptr;
  int64_t dim = 0;
  bool log = false;
};

// layer_norm over rows of the last n elements: x contiguous ([rows, n] in memory), weight and bias contiguous [n]
// or null. Writes (all contiguous) mean_r, rstd_r = 1 / sqrt(var_r + eps) (biased variance) and
// y = (x - mean_r) rstd_r * weight + bias.
struct LayerNormCall {
  static constexpr FusedOp kOp = FusedOp::LayerNorm;
  const TensorImpl* x = nullptr;
  const TensorImpl* weight = nullptr;
  const TensorImpl* bias = nullptr;
  double eps = 1e-5;
  int64_t n = 1;
  TensorImpl* y = nullptr;
  TensorImpl* mean = nullptr;
  TensorImpl* rstd = nullptr;
};
// Its gradient from g (contiguous, x's shape) and the forward's mean and rstd, with xhat = (x - mean) rstd and
// gy = g weight (g without a weight): grad_x = rstd (gy - mean_n(gy) - xhat mean_n(gy xhat)); grad_weight =
// sum_rows(g xhat), grad_bias = sum_rows(g) ([n], each written when not null).
struct LayerNormBackwardCall {
  static constexpr FusedOp kOp = FusedOp::LayerNormBackward;
  const TensorImpl* x = nullptr;
  const TensorImpl* g = nullptr;
  const TensorImpl* weight = nullptr;
  const TensorImpl* mean = nullptr;
  const TensorImpl* rstd = nullptr;
  int64_t n = 1;
  TensorImpl* grad_x = nullptr;
  TensorImpl* grad_weight = nullptr;
  TensorImpl* grad_bias = nullptr;
};

// One LSTM time step's gate math after the two matrix products. gates: contiguous [B, 4H], the pre-activations
// x W_ih^T + b_ih + h W_hh^T + b_hh in torch's order (i, f, g, o), or with `gates_add` (contiguous [B, 4H], else null)
// the pre-activations are gates + gates_add (the input projection and the recurrent product, added in the kernel,
// as torch's fused cell takes them); c_prev contiguous [B, H]. Writes (contiguous) acts [B, 4H] = (sigmoid i,
// sigmoid f, tanh g, sigmoid o) for the backward, c = f c_prev + i g, h = o tanh c.
struct LstmCellCall {
  static constexpr FusedOp kOp = FusedOp::LstmCell;
  const TensorImpl* gates = nullptr;
  const TensorImpl* c_prev = nullptr;
  int64_t batch = 0, hidden = 0;
  TensorImpl* acts = nullptr;
  TensorImpl* h = nullptr;
  TensorImpl* c = nullptr;
  const TensorImpl* gates_add = nullptr;
};
// Its gradient from the forward's acts, c_prev and c and the gradients gh, gc of h and c (contiguous [B, H]; null:
// zero): dc = gc + gh o (1 - tanh^2 c); grad_gates [B, 4H] = (dc g i(1-i), dc c_prev f(1-f), dc i (1-g^2),
// gh tanh(c) o(1-o)); grad_c_prev [B, H] = dc f. All contiguous, one float dtype.
struct LstmCellBackwardCall {
  static constexpr FusedOp kOp = FusedOp::LstmCellBackward;
  const TensorImpl* acts = nullptr;
  const TensorImpl* c_prev = nullptr;
  const TensorImpl* c = nullptr;
  const TensorImpl* gh = nullptr;
  const TensorImpl* gc = nullptr;
  int64_t batch = 0, hidden = 0;
  TensorImpl* grad_gates = nullptr;
  TensorImpl* grad_c_prev = nullptr;
};
// Scaled dot-product attention over B = N * H independent problems (one float dtype): q [N, H, L, E],
// k [N, H, S, E], v [N, H, S, Ev] and out [N, H, L, Ev] are 4-d views with any strides but a unit one along the
// last dim (the heads of a packed projection read in place; an output written in [N, L, H, Ev] order for the out
// projection); mask null or an additive [N, H, L, S] view with a unit stride along S and any others (a mask shared
// by batches, heads or queries is a broadcast view with stride 0 there, never expanded; a bool mask arrives as
// 0 / -inf); causal keeps key j <= query i. Writes out = softmax(scale q k^T + mask) v and, unless lse is null, lse
// [B, L] (contiguous) = the rows' logsumexp; a fully masked row gives NaN, as torch's softmax does. Unless probs is
// null it also gets the weights P = softmax(scale q k^T + mask), [B, L, S] contiguous (0 at masked keys), for the
// backward to read instead of recomputing them (small problems, where they cost little memory).
struct AttentionCall {
  static constexpr FusedOp kOp = FusedOp::Attention;
  const TensorImpl* q = nullptr;
  const TensorImpl* k = nullptr;
  const TensorImpl* v = nullptr;
  const TensorImpl* mask = nullptr;
  bool causal = false;
  double scale = 1;
  TensorImpl* out = nullptr;
  TensorImpl* lse = nullptr;
  TensorImpl* probs = nullptr;
};
// Its gradient with the same q, k, v, mask, causal and scale and g = dL/dout ([N, H, L, Ev], a unit stride along the
// last dim): the weights P = softmax(scale q k^T + mask) are recomputed (or read from probs, the forward's, when not
// null: the same values), dS = P (g v^T - rowsum(P g v^T)), and
// grad_q [N, H, L, E] = scale dS k, grad_k [N, H, S, E] = scale dS^T q, grad_v [N, H, S, Ev] = P^T g are written
// (views as q's; null: not wanted). A fully masked row makes the gradients NaN, as the composite's.
struct AttentionBackwardCall {
  static constexpr FusedOp kOp = FusedOp::AttentionBackward;
  const TensorImpl* q = nullptr;
  const TensorImpl* k = nullptr;
  const TensorImpl* v = nullptr;
  const TensorImpl* mask = nullptr;
  bool causal = false;
  double scale = 1;
  const TensorImpl* g = nullptr;
  TensorImpl* grad_q = nullptr;
  TensorImpl* grad_k = nullptr;
  TensorImpl* grad_v = nullptr;
  const TensorImpl* probs = nullptr;
};

// A fully connected layer's forward: out [M, N] (contiguous) = x [M, K] weight [N, K]^T + bias [N] (bias contiguous,
// or null: no bias). x and weight are GEMM operands (one of each matrix's strides is 1, leading dims fit 32 bits);
// one float dtype. Stacked replicas: x [R, M, K] (any batch stride, 0 included), weight [R, N, K], bias [R, N] and
// out [R, M, N], one product per replica. A backend with a GEMM that accumulates (beta = 1) writes the bias rows first
// and adds the product to them: no separate pass over the output for the bias. With `accumulate`, out already holds a
// matrix and the product is added to it (out += x weight^T; bias null): the autograd's in-place gradient sums.
// With gelu_grad (not with accumulate): out = gelu(u) for u = x weight^T + bias (the erf form) and gelu_grad (out's
// shape, contiguous) = gelu'(u), the GELU's derivative its backward multiplies by: one pass over u after the product,
// while it is in cache, instead of a GELU pass now and a transcendental one in the backward.
struct LinearCall {
  static constexpr FusedOp kOp = FusedOp::Linear;
  const TensorImpl* x = nullptr;
  const TensorImpl* weight = nullptr;
  const TensorImpl* bias = nullptr;
  TensorImpl* out = nullptr;
  bool accumulate = false;
  TensorImpl* gelu_grad = nullptr;
};

// One GRU step's gate math after the two matrix products (torch's order r, z, n; contiguous, one float dtype):
// gi = x W_ih^T + b_ih and gh = h W_hh^T + b_hh, both [B, 3H]; h_prev [B, H]. Writes acts [B, 4H] = (r, z, n,
// gh_n) for the backward, with r = sigmoid(gi_r + gh_r), z = sigmoid(gi_z + gh_z), n = tanh(gi_n + r gh_n), and
// h [B, H] = (1 - z) n + z h_prev.
struct GruCellCall {
  static constexpr FusedOp kOp = FusedOp::GruCell;
  const TensorImpl* gi = nullptr;
  const TensorImpl* gh = nullptr;
  const TensorImpl* h_prev = nullptr;
  int64_t batch = 0, hidden = 0;
  TensorImpl* acts = nullptr;
  TensorImpl* h = nullptr;
};
// Its gradient from acts, h_prev and g = dL/dh (contiguous [B, H]): dn = g (1 - z) (1 - n^2), dz = g (h_prev - n)
// z (1 - z), dr = dn gh_n r (1 - r); grad_gi = (dr, dz, dn), grad_gh = (dr, dz, dn r) ([B, 3H]), grad_h_prev = g z.
struct GruCellBackwardCall {
  static constexpr FusedOp kOp = FusedOp::GruCellBackward;
  const TensorImpl* acts = nullptr;
  const TensorImpl* h_prev = nullptr;
  const TensorImpl* g = nullptr;
  int64_t batch = 0, hidden = 0;
  TensorImpl* grad_gi = nullptr;
  TensorImpl* grad_gh = nullptr;
  TensorImpl* grad_h_prev = nullptr;
};
// 2-d max pooling in one pass over x [N, C, H, W] (any strides; f32, f64): out (x's dtype) and indices (I64), both
// contiguous [N, C, oh, ow]. Window (y, z) holds the taps (i, j) at row y*sh - ph + i*dh, column z*sw - pw + j*dw;
// taps in the padding are skipped. Walking the in-image taps in (i, j) row-major order, the first is held and a
// later one replaces the held one when it is greater or NaN, as torch's CPU and CUDA kernels do: out is the
// window's max (NaN when it holds one), indices its flat position h*W + w in the input plane (ties: the first;
// NaNs: the last one). A window with no in-image tap (possible with dilation) gives -inf and index -1.
struct MaxPool2dCall {
  static constexpr FusedOp kOp = FusedOp::MaxPool2d;
  const TensorImpl* x = nullptr;
  TensorImpl* out = nullptr;
  TensorImpl* indices = nullptr;
  detail::ConvGeometry geometry;
};
// Its gradient: grad_x (contiguous [N, C, H, W]) += g at indices, plane by plane, in increasing output position;
// g and indices are contiguous [N, C, oh, ow] (g of grad_x's dtype). An index outside [0, H*W) (the -1 of an empty
// window) adds nothing. With zero_first, grad_x's contents are ignored: each plane is zeroed just before its
// scatter, while it is in cache, instead of a separate zero-fill pass over the whole gradient.
struct MaxPool2dBackwardCall {
  static constexpr FusedOp kOp = FusedOp::MaxPool2dBackward;
  const TensorImpl* g = nullptr;
  const TensorImpl* indices = nullptr;
  TensorImpl* grad_x = nullptr;
  bool zero_first = false;
  // The forward's geometry (oh, ow: g's plane), for a kernel that gathers per input position over the outputs whose
  // windows reach it (CUDA); oh = 0: not given (the CPU scatters by the indices alone and does not need it).
  detail::ConvGeometry geometry{};
};

// One plain RNN step after the two matrix products: h = act(xt + hh) over `count` elements (xt and hh contiguous,
// one float dtype; act = tanh, or relu when `relu`), one pass instead of an add and an activation. Its backward
// is the activation's (one unary_grad pass from h), so it has no fused op of its own.
struct RnnCellCall {
  static constexpr FusedOp kOp = FusedOp::RnnCell;
  const TensorImpl* xt = nullptr;
  const TensorImpl* hh = nullptr;
  int64_t count = 0;
  bool relu = false;
  TensorImpl* h = nullptr;
};

// One fused call; its index is its FusedOp.
using FusedCall = std::variant<CrossEntropyCall, CrossEntropyBackwardCall, OptimizerStepsCall, Im2colCall, Col2imCall,
                               LogdetSpdCall, CholeskySpdCall, SolveTriangularSmallCall, ScanCall, CumprodBackwardCall,
                               SortIndicesCall, SoftmaxBackwardCall, LayerNormCall, LayerNormBackwardCall, LstmCellCall,
                               LstmCellBackwardCall, AttentionCall, AttentionBackwardCall, LinearCall, GruCellCall,
                               GruCellBackwardCall, MaxPool2dCall, MaxPool2dBackwardCall, RnnCellCall, DropoutMaskCall,
                               IndexCheckCall, TensorListNormCall, TensorListScaleCall>;
#define OXM_X(id, call)                                                                                          \
  static_assert(std::is_same_v<std::variant_alternative_t<static_cast<size_t>(FusedOp::id), FusedCall>, call> && \
                call::kOp == FusedOp::id);
OXMERA_FUSED_OPS(OXM_X)
#undef OXM_X
static_assert(std::variant_size_v<FusedCall> == static_cast<size_t>(kNumFusedOps));

inline FusedOp fused_op(const FusedCall& call) { return static_cast<FusedOp>(call.index()); }

// A registry row: what the op is called (errors, tests), its composite fallback (ordinary ops on `device`, run
// whenever the backend does not support a call) and which built-in backends offer a kernel for it.
struct FusedOpInfo {
  FusedOp op;
  const char* name;
  void (*fallback)(FusedCall& call, Device device);
  const char* offered_by;
};
const FusedOpInfo& fused_op_info(FusedOp op);
// The attention fallbacks (ops/attention_fused.cpp), listed in the registry.
void attention_fallback(FusedCall& call, Device device);
void attention_backward_fallback(FusedCall& call, Device device);
const char* fused_op_name(FusedOp op);

// Whether the backend of `device` has a kernel for this call (its op id, dtypes and shapes).
bool fused_supported(const FusedCall& call, Device device);
// Runs the call: the backend's kernel when it supports it, else the registry's fallback. The one dispatch
// point of nn, optim and linalg.
void run_fused(FusedCall& call, Device device);
// The fallback alone, whatever the backend offers (tests compare it with the kernels).
void run_fused_fallback(FusedCall& call, Device device);

}  // namespace oxmera::ops
