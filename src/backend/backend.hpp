#pragma once
// The seam every device plugs into. The tensor layer computes shapes, dtypes, broadcasting and autograd;
// a backend only runs kernels on memory it owns. Pointers handed to a backend are opaque device pointers
// (never dereferenced by the tensor layer), launches may be asynchronous, and the tensor layer calls
// `to_host` / `synchronize` only where the host reads values. A GPU backend (CUDA now, Metal later) is a
// subclass registered for its DeviceKind by oxmera::init().
#include <cstddef>
#include <string>

#include "ops/op_defs.hpp"
#include "oxmera/memory.hpp"
#include "tensor/tensor_impl.hpp"

namespace oxmera::detail {

// One optimizer update with torch.optim's formulas. State buffers by kind:
//   SGD: state0 = momentum buffer (when momentum != 0)
//   Adam / AdamW: state0 = exp_avg, state1 = exp_avg_sq, state2 = max_exp_avg_sq (amsgrad)
//   RMSprop: state0 = square_avg, state1 = momentum buffer (momentum != 0), state2 = grad_avg (centered)
struct OptimizerStep {
  enum class Kind : uint8_t { SGD, Adam, AdamW, RMSprop } kind = Kind::SGD;
  double lr = 1e-3, weight_decay = 0;
  double momentum = 0, dampening = 0;  // SGD, RMSprop (momentum)
  bool nesterov = false;               // SGD
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // Adam(W); eps also RMSprop
  bool amsgrad = false;                // Adam(W)
  double alpha = 0.99;                 // RMSprop
  bool centered = false;               // RMSprop
  bool maximize = false;
  int64_t step = 1;                    // 1-based step count after this update (bias corrections)
  bool first_step = false;             // SGD: momentum buffer initialised from the gradient
};

// One parameter's update for Backend::optimizer_steps.
struct OptimizerUpdate {
  OptimizerStep step;
  TensorImpl* param = nullptr;
  const TensorImpl* grad = nullptr;
  TensorImpl* state[3] = {nullptr, nullptr, nullptr};
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

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceKind kind() const = 0;
  virtual const char* name() const = 0;

  // ---- memory (throws OutOfMemory)
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) noexcept = 0;
  // Host <-> device transfer of raw bytes; `to_host` completes before returning.
  virtual void copy_from_host(void* dst, const void* src, size_t nbytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t nbytes) = 0;
  virtual void synchronize() {}
  // One line for `oxmera doctor`: what this device is (name, memory, capability, driver).
  virtual std::string describe() const { return name(); }
  virtual MemoryStats memory_stats() const = 0;
  virtual void empty_cache() = 0;

  // ---- kernels. Every input is a view already broadcast to the output's shape (stride 0 where
  // broadcast); outputs are freshly allocated and contiguous unless a comment says otherwise.
  virtual void unary(ops::UnaryOp op, const TensorImpl& x, TensorImpl& out) = 0;
  virtual void binary(ops::BinaryOp op, const TensorImpl& a, const TensorImpl& b, TensorImpl& out) = 0;
  // A binary op with one operand a host scalar passed by value: out = op(s, t) when scalar_left, else op(t, s);
  // t has out's shape (any strides). Saves a device-side 0-d tensor (one fill launch) per scalar operand.
  virtual void binary_scalar(ops::BinaryOp op, const TensorImpl& t, double s, bool scalar_left, TensorImpl& out) = 0;
  // One operand's gradient of a binary op in one pass: out = Def::grad_a(g, a, b) (side 0) or grad_b (side 1)
  // elementwise (float dtypes). g has out's shape; a and b are broadcast to it and either may be a 0-d CPU
  // tensor (a host scalar operand, read by value) when out is on another device.
  virtual void binary_grad(ops::BinaryOp op, int side, const TensorImpl& g, const TensorImpl& a, const TensorImpl& b,
                           TensorImpl& out) = 0;
  // The backward of a unary op in one pass: out = Def::grad(g, x, y) elementwise (float dtypes). x and y are
  // the op's saved input and output; one it does not save is passed as g (never read).
  virtual void unary_grad(ops::UnaryOp op, const TensorImpl& g, const TensorImpl& x, const TensorImpl& y,
                          TensorImpl& out) = 0;
  // out = mask != 0 ? a : b; mask may be U8 or the dtype of a/b.
  virtual void where(const TensorImpl& mask, const TensorImpl& a, const TensorImpl& b, TensorImpl& out) = 0;
  // Strided copy with dtype conversion; `dst` may be any (non-overlapping) strided view.
  virtual void copy(const TensorImpl& src, TensorImpl& dst) = 0;
  virtual void fill(TensorImpl& dst, double value) = 0;  // dst may be a strided view
  // out has the keepdim shape of x reduced over `reduce_mask` (bit d set = dim d reduced).
  virtual void reduce(ops::ReduceOp op, const TensorImpl& x, TensorImpl& out, uint64_t reduce_mask) = 0;
  // out (I64) holds indices along `dim`; out has the keepdim shape. Returns false when x holds a NaN.
  virtual bool arg_reduce(ops::ArgReduceOp op, const TensorImpl& x, TensorImpl& out, int64_t dim) = 0;
  virtual void softmax(const TensorImpl& x, TensorImpl& out, int64_t dim, bool log) = 0;
  // a: [..., m, k], b: [..., k, n] with identical batch shapes (stride 0 where broadcast); out contiguous.
  virtual void matmul(const TensorImpl& a, const TensorImpl& b, TensorImpl& out) = 0;

  // ---- indexing. Index tensors are I64 on this device and already validated (in range, right shape).
  // out[..., i, ...] = x[..., idx[i], ...] along dim (out contiguous, shape[dim] = idx.numel).
  virtual void index_select(const TensorImpl& x, int64_t dim, const TensorImpl& idx, TensorImpl& out) = 0;
  // out[..., idx[i], ...] += src[..., i, ...] along dim, in increasing i (deterministic for duplicates).
  virtual void index_add(TensorImpl& out, int64_t dim, const TensorImpl& idx, const TensorImpl& src) = 0;
  // out[p] = x[p with p[dim] = idx[p]] (idx has out's shape).
  virtual void gather(const TensorImpl& x, int64_t dim, const TensorImpl& idx, TensorImpl& out) = 0;
  // out[p with p[dim] = idx[p]] += src[p] over p in row-major order (deterministic for duplicates).
  virtual void scatter_add(TensorImpl& out, int64_t dim, const TensorImpl& idx, const TensorImpl& src) = 0;

  // ---- convolution helpers (im2col). x: [N, C, H, W], any strides; cols: contiguous [N, C*kh*kw, oh*ow]
  // where row (c, i, j), column (y, z) holds x[n, c, y*sh - ph + i*dh, z*sw - pw + j*dw], or `pad_value`
  // outside the image.
  virtual void im2col(const TensorImpl& x, TensorImpl& cols, const ConvGeometry& g, double pad_value) = 0;
  // The adjoint: x_grad (contiguous [N, C, H, W], zero-filled by the caller) += col2im(cols).
  virtual void col2im(const TensorImpl& cols, TensorImpl& x_grad, const ConvGeometry& g) = 0;

  // ---- fused cross entropy over rows (class targets, no class weights). x: [R, C], any strides; target: [R]
  // I64 on this device, a class in [0, C) or -1 for an ignored row. Writes loss and lse ([R], contiguous):
  //   lse_r = log sum_c exp x_rc,  logp_rc = x_rc - lse_r,
  //   loss_r = scale * (-(1 - ls) logp_{r, t_r} - (ls / C) sum_c logp_rc), and 0 for an ignored row.
  virtual void cross_entropy(const TensorImpl& x, const TensorImpl& target, double label_smoothing, double scale,
                             TensorImpl& loss, TensorImpl& lse) = 0;
  // Its gradient: grad_x (contiguous [R, C]) = g_r * scale * (p_rc - (1 - ls) [c == t_r] - ls / C) with
  // p_rc = exp(x_rc - lse_r), and 0 for an ignored row; g: [R], any strides (0 for a broadcast gradient).
  virtual void cross_entropy_backward(const TensorImpl& x, const TensorImpl& target, const TensorImpl& lse,
                                      const TensorImpl& g, double label_smoothing, double scale,
                                      TensorImpl& grad_x) = 0;

  // ---- fused optimizer update of one parameter: one pass over its memory. param, grad and the state buffers
  // are contiguous tensors of one shape and dtype. The default reports NotImplemented naming the backend (a
  // backend that overrides optimizer_steps need not implement it: the CUDA one does not).
  virtual void optimizer_step(const OptimizerStep& step, TensorImpl& param, const TensorImpl& grad,
                              TensorImpl* state0, TensorImpl* state1, TensorImpl* state2);
  // Every update of one Optimizer::step() on this device at once (the only entry point optimizers use): a GPU
  // runs them in one launch per 24 parameters. The default calls optimizer_step for each.
  virtual void optimizer_steps(const OptimizerUpdate* updates, size_t count);

  // ---- small batched linear algebra on the device (optional). has_small_linalg says whether this backend
  // has kernels for the dtype and size n; when it has not (the default), linalg round-trips through the
  // host kernels. Inputs and outputs are `count` contiguous matrices. Each call completes its check before
  // returning: `fail` names the first failing matrix (its outputs are then unspecified).
  virtual bool has_small_linalg(DType dtype, int64_t n) const { return false; }
  // logdet[b] = log det a_b (a_b SPD) and, when `inverse` is not null, inverse_b = a_b^{-1}; fail: pivot.
  virtual bool logdet_spd(const TensorImpl& a, int64_t count, int64_t n, TensorImpl& logdet, TensorImpl* inverse,
                          SpdFailure& fail) {
    return false;
  }
  // L_b = the lower Cholesky factor of a_b (zeros above the diagonal); fail: pivot.
  virtual bool cholesky_spd(const TensorImpl& a, int64_t count, int64_t n, TensorImpl& L, SpdFailure& fail) {
    return false;
  }
  // x_b <- t_b^{-1} x_b in place (t_b lower or upper triangular n x n, x_b n x k); fail: the zero diagonal.
  virtual bool solve_triangular_small(const TensorImpl& t, TensorImpl& x, int64_t count, int64_t n, int64_t k,
                                      bool upper, SpdFailure& fail) {
    return false;
  }
};

// The backend for `device`; BackendUnavailable (naming `op`) when none is registered for it.
Backend& backend_for(Device device, const char* op);
Backend& cpu_backend();
// Registers `backend` for its kind unless one is registered (idempotent). Takes ownership.
void register_backend(Backend* backend);

}  // namespace oxmera::detail
