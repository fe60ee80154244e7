#pragma once
// Shared by the CUDA backend's translation units (never included outside src/backend/cuda).
#include <cuda_runtime.h>

#include "backend/backend.hpp"
#include "backend/common/index_math.hpp"

namespace oxmera::detail::cuda {

// Throws Error(Backend) naming the op, what failed and the CUDA error; clears a non-sticky error first.
[[noreturn]] void fail(cudaError_t e, const char* op, const char* what);
inline void check(cudaError_t e, const char* op, const char* what) {
  if (e != cudaSuccess) [[unlikely]]
    fail(e, op, what);
}
// After a launch: configuration errors are reported now; execution errors surface at the next sync.
inline void check_launch(const char* op) { check(cudaGetLastError(), op, "kernel launch"); }

// The backend's single stream and the device's SM count (set once when the backend is created).
cudaStream_t stream();
int sm_count();
// Temporary device memory from the caching allocator; freeing right after enqueueing the kernels that use it
// is safe (one stream: a later user of the block runs after them).
void* scratch_alloc(size_t nbytes);
void scratch_free(void* p, size_t nbytes) noexcept;
// Scratch memory released when the scope ends, also when an error is thrown (stream-ordered, as above).
class Scratch {
 public:
  explicit Scratch(size_t nbytes) : n_(nbytes == 0 ? 1 : nbytes), p_(scratch_alloc(n_)) {}
  ~Scratch() { scratch_free(p_, n_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  size_t n_;
  void* p_;
};
// Enqueues a host-to-device copy on the stream; `src` may be freed as soon as this returns (small copies are
// staged in pinned memory, so they never wait for the stream's earlier work).
void copy_host_to_device(void* dst, const void* src, size_t nbytes, const char* op);
// InvalidArgument naming `op` while a CUDA graph is being captured (a host read-back or wait cannot be captured).
void refuse_in_capture(const char* op, const char* why);

inline constexpr int kThreads = 256;
inline unsigned blocks(int64_t n) { return static_cast<unsigned>(grid_blocks(n, kThreads, sm_count())); }

// Shape / strides of a tensor as plain arrays (rank checked against kMaxDims).
void check_rank(const TensorImpl& t, const char* op);

// ---- kernels (cuda_elementwise.cu, cuda_reduce.cu, cuda_index.cu)
void unary(ops::UnaryOp op, const TensorImpl& x, TensorImpl& out, const ops::OpParams& p);
void unary_grad(ops::UnaryOp op, const TensorImpl& g, const TensorImpl& x, const TensorImpl& y, TensorImpl& out,
                const ops::OpParams& p);
void binary(ops::BinaryOp op, const TensorImpl& a, const TensorImpl& b, TensorImpl& out);
void binary_grad(ops::BinaryOp op, int side, const TensorImpl& g, const TensorImpl& a, const TensorImpl& b,
                 TensorImpl& out);
void binary_scalar(ops::BinaryOp op, const TensorImpl& t, double s, bool scalar_left, TensorImpl& out);
void where(const TensorImpl& m, const TensorImpl& a, const TensorImpl& b, TensorImpl& out);
void copy(const TensorImpl& src, TensorImpl& dst);
void fill(TensorImpl& dst, double v);
void reduce(ops::ReduceOp op, const TensorImpl& x, TensorImpl& out, uint64_t mask);
bool arg_reduce(ops::ArgReduceOp op, const TensorImpl& x, TensorImpl& out, int64_t dim);
void softmax(const TensorImpl& x, TensorImpl& out, int64_t dim, bool log);
void cross_entropy(const TensorImpl& x, const TensorImpl& target, double ls, double scale, TensorImpl& loss,
                   TensorImpl& lse);
void cross_entropy_backward(const TensorImpl& x, const TensorImpl& target, const TensorImpl& lse, const TensorImpl& g,
                            double ls, double scale, TensorImpl& grad_x);
void index_select(const TensorImpl& x, int64_t dim, const TensorImpl& idx, TensorImpl& out);
void index_add(TensorImpl& out, int64_t dim, const TensorImpl& idx, const TensorImpl& src);
void gather(const TensorImpl& x, int64_t dim, const TensorImpl& idx, TensorImpl& out);
void scatter_add(TensorImpl& out, int64_t dim, const TensorImpl& idx, const TensorImpl& src);
void im2col(const TensorImpl& x, TensorImpl& cols, const ConvGeometry& g, double pad_value);
void col2im(const TensorImpl& cols, TensorImpl& x_grad, const ConvGeometry& g, bool zero_first);
void optimizer_steps(const OptimizerUpdate* updates, size_t count);
bool has_small_linalg(DType dtype, int64_t n);  // cuda_linalg.cu
// The small SPD linear algebra; false when the call is not one the kernels take (the fallback runs).
bool logdet_spd(ops::LogdetSpdCall& c);
bool cholesky_spd(ops::CholeskySpdCall& c);
bool solve_triangular_small(ops::SolveTriangularSmallCall& c);

// The dropout mask of a CUDA graph capture (cuda_elementwise.cu): f32, contiguous.
void dropout_mask(const ops::DropoutMaskCall& c);

// Scans and sorting along a dim (cuda_scan_sort.cu): f32 and i64 (cumprod's backward: f32).
bool has_scan_sort(DType dtype);
void scan(const ops::ScanCall& c);
void cumprod_backward(const ops::CumprodBackwardCall& c);
void sort_indices(const ops::SortIndicesCall& c);

// The deferred range check of a device index (cuda_index.cu), for the calls IndexCheckCall::kernel_takes().
void index_check(const ops::IndexCheckCall& c);

// clip_grad_norm_'s list kernels (cuda_index.cu): f32 contiguous tensors (and out, when given, f32 [count]).
bool has_tensor_list(const TensorImpl* const* ts, size_t count, const TensorImpl* out);
void tensor_list_norm(const ops::TensorListNormCall& c);
void tensor_list_scale(const ops::TensorListScaleCall& c);

// The nn fused ops (cuda_nn.cu): the LSTM / GRU / RNN cells, layer norm, softmax's gradient, max pooling; f32.
// has_nn_kernel: whether the call is one they take (nn_math.hpp's nn_kernel_takes).
bool has_nn_kernel(const ops::FusedCall& call);
void run_nn_kernel(ops::FusedCall& call);
}  // namespace oxmera::detail::cuda
