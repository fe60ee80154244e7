#pragma once
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "oxmera/device.hpp"
#include "oxmera/dtype.hpp"
#include "oxmera/error.hpp"
#include "oxmera/op_registry.hpp"
#include "oxmera/shape.hpp"

namespace oxmera {

namespace detail {
struct TensorImpl;
void retain(TensorImpl* p) noexcept;
void release(TensorImpl* p) noexcept;
}  // namespace detail

class Generator;

// A Tensor is a ref-counted handle to a strided view of ref-counted storage on a device. Copying a Tensor
// copies the handle (shares data), as in libtorch.
class Tensor {
 public:
  Tensor() noexcept = default;
  explicit Tensor(detail::TensorImpl* impl) noexcept : impl_(impl) {}  // takes ownership of one reference
  Tensor(const Tensor& o) noexcept : impl_(o.impl_) {
    if (impl_) detail::retain(impl_);
  }
  Tensor(Tensor&& o) noexcept : impl_(std::exchange(o.impl_, nullptr)) {}
  Tensor& operator=(const Tensor& o) noexcept {
    if (o.impl_) detail::retain(o.impl_);
    if (impl_) detail::release(impl_);
    impl_ = o.impl_;
    return *this;
  }
  Tensor& operator=(Tensor&& o) noexcept {
    if (this != &o) {
      if (impl_) detail::release(impl_);
      impl_ = std::exchange(o.impl_, nullptr);
    }
    return *this;
  }
  ~Tensor() {
    if (impl_) detail::release(impl_);
  }

  bool defined() const noexcept { return impl_ != nullptr; }
  detail::TensorImpl* impl() const noexcept { return impl_; }
  bool is_same(const Tensor& o) const noexcept { return impl_ == o.impl_; }

  // ---- metadata
  const Shape& shape() const;
  const Strides& strides() const;
  int64_t dim() const;
  int64_t numel() const;
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int64_t storage_offset() const;
  DType dtype() const;
  Device device() const;
  bool is_contiguous() const;
  // Shares storage with `o` (views of one another).
  bool shares_storage(const Tensor& o) const;

  // ---- element access (CPU tensors; others are copied to the host first)
  template <class T>
  std::vector<T> to_vector() const;  // logical row-major order; T must match dtype()
  template <class T>
  T item() const;  // one-element tensors only
  // Pointer to the first element of a CPU tensor of dtype T (respecting storage_offset).
  template <class T>
  T* data_ptr() const;

  // ---- views (share storage)
  Tensor reshape(const Shape& shape) const;  // view when the strides allow it, copy otherwise; one -1 allowed
  Tensor view(const Shape& shape) const;     // like reshape but never copies (InvalidArgument instead)
  Tensor permute(const Dims& order) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;  // swaps the last two dims (rank >= 2); a no-op on rank 1
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;  // removes dim
  // View of the diagonal of dims (dim1, dim2) with `offset` (> 0: above), appended as the last dim (torch).
  Tensor diagonal(int64_t offset = 0, int64_t dim1 = 0, int64_t dim2 = 1) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor broadcast_to(const Shape& shape) const;  // stride 0 on broadcast dims
  Tensor expand(const Shape& shape) const { return broadcast_to(shape); }
  Tensor contiguous() const;  // self when already contiguous
  Tensor clone() const;       // always a fresh contiguous copy (differentiable)

  // ---- conversion
  Tensor to(DType dtype) const;  // self when equal
  Tensor to(Device device) const;

  // ---- elementwise ops: one method per entry of the op registry (oxmera/op_registry.hpp, which documents
  // each): unary x.exp(), x.tanh(), x.gelu() (exact, torch's default), x.sign() (gradient 0), x.isnan() (a 0/1
  // mask), parameterised ones with torch's defaults (x.softplus(beta = 1, threshold = 20), x.leaky_relu(0.01),
  // ...); binary a.add(b), a.pow(b), a.remainder(b), a.maximum(b), and the comparisons a.eq(b), a.lt(b), ...
  // (masks of a's dtype holding 0 or 1; not differentiable).
#define OXM_X(id, name, api, dtypes, grad, cost, lo, hi, params, ...) \
  OXM_IF_PUBLIC(api, Tensor name(OXM_PARAM_DECL(params)) const;)
  OXMERA_UNARY_OPS(OXM_X)
#undef OXM_X
#define OXM_X(id, name, api, ...) OXM_IF_PUBLIC(api, Tensor name(const Tensor& other) const;)
  OXMERA_BINARY_OPS(OXM_X)
#undef OXM_X
  // torch's approximate= argument: "none" (exact, as gelu()) or "tanh"; anything else is InvalidArgument.
  Tensor gelu(std::string_view approximate) const;
  Tensor pow(double exponent) const;
  Tensor clamp(double lo, double hi) const;
  // Tensor bounds (broadcast with self, same dtype); either may be undefined (Tensor{}) for no bound, not both.
  // Computed as min(max(x, lo), hi), as torch; the gradient reaches x where lo <= x <= hi and each bound where it
  // is the result.
  Tensor clamp(const Tensor& lo, const Tensor& hi) const;
  Tensor clamp_min(double lo) const;
  Tensor clamp_min(const Tensor& lo) const;
  Tensor clamp_max(double hi) const;
  Tensor clamp_max(const Tensor& hi) const;

  // ---- reductions (empty dims = all dims)
  Tensor sum(const Dims& dims = {}, bool keepdim = false) const;
  Tensor mean(const Dims& dims = {}, bool keepdim = false) const;
  Tensor max(const Dims& dims = {}, bool keepdim = false) const;
  Tensor min(const Dims& dims = {}, bool keepdim = false) const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;  // I64
  Tensor argmin(int64_t dim, bool keepdim = false) const;  // I64
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  Tensor logsumexp(int64_t dim, bool keepdim = false) const;

  // ---- linear algebra
  Tensor matmul(const Tensor& o) const;

  // ---- index ops (index tensors are I64; negative or out-of-range indices are IndexOutOfBounds)
  Tensor index_select(int64_t dim, const Tensor& index) const;  // index: 1-d (or 0-d)
  // Copy of self with src[..., i, ...] added at self[..., index[i], ...]; duplicates accumulate in order.
  Tensor index_add(int64_t dim, const Tensor& index, const Tensor& src) const;
  Tensor gather(int64_t dim, const Tensor& index) const;  // out[p] = self[p with p[dim] = index[p]]
  // Copy of self with src[p] added at self[p with p[dim] = index[p]]; deterministic for duplicates.
  Tensor scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const;

  // ---- in-place (not recorded by autograd; an error on a tensor that requires grad while grad mode is on)
  Tensor& zero_();
  Tensor& fill_(double value);
  Tensor& copy_(const Tensor& src);  // broadcasts src, same dtype
  Tensor& add_(const Tensor& o, double alpha = 1.0);
  Tensor& mul_(double s);

  // ---- autograd
  Tensor& requires_grad_(bool requires_grad = true);
  bool requires_grad() const;
  bool is_leaf() const;
  // A non-leaf's gradient is kept in .grad by later backward() calls (accumulating), as leaves' are.
  // No-op on a leaf; InvalidArgument when the tensor does not require grad.
  Tensor& retain_grad();
  bool retains_grad() const;  // true after retain_grad() on a non-leaf
  Tensor grad() const;        // undefined tensor when none
  void set_grad(const Tensor& g);
  void zero_grad();  // drops the gradient (like set_to_none)
  void backward() const;
  void backward(const Tensor& seed) const;
  Tensor detach() const;
  // Name of the backward node that produced this tensor ("" for leaves / untracked).
  std::string grad_fn_name() const;

  std::string str() const;  // readable printing

 private:
  detail::TensorImpl* impl_ = nullptr;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// ---- construction
template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape);
Tensor zeros(const Shape& shape, DType dtype = DType::F32);
Tensor ones(const Shape& shape, DType dtype = DType::F32);
Tensor full(const Shape& shape, double value, DType dtype = DType::F32);
Tensor empty(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
Tensor arange(int64_t n, DType dtype = DType::I64);
Tensor arange(double start, double end, double step, DType dtype = DType::F32);
Tensor eye(int64_t n, DType dtype = DType::F32);
Tensor scalar(double value, DType dtype = DType::F32);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor randn(const Shape& shape, uint64_t seed, DType dtype = DType::F32);
Tensor rand(const Shape& shape, uint64_t seed, DType dtype = DType::F32);
Tensor randn(const Shape& shape, Generator& gen, DType dtype = DType::F32);
Tensor rand(const Shape& shape, Generator& gen, DType dtype = DType::F32);

// ---- free-function forms
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
// The registry's binary ops as free functions: add(a, b), sub, mul, div, pow, maximum, minimum, eq, ne, lt, ...
#define OXM_X(id, name, api, ...) OXM_IF_PUBLIC(api, Tensor name(const Tensor& a, const Tensor& b);)
OXMERA_BINARY_OPS(OXM_X)
#undef OXM_X
// Elementwise select: mask != 0 ? a : b, with broadcasting; mask has the dtype of a and b, or U8.
Tensor where(const Tensor& mask, const Tensor& a, const Tensor& b);
Tensor matmul(const Tensor& a, const Tensor& b);
// Concatenation along an existing dim / a new dim; all tensors share dtype, device and other dims.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Pads dim with `before` / `after` entries of `value` (both >= 0).
Tensor pad(const Tensor& t, int64_t dim, int64_t before, int64_t after, double value = 0.0);
// [..., C] tensor with 1 at each index (I64 input); num_classes = -1 infers max + 1.
Tensor one_hot(const Tensor& index, int64_t num_classes = -1, DType dtype = DType::F32);

// ---- threads
void set_num_threads(int n);  // intra-op threads for CPU kernels (and BLAS)
int get_num_threads();

}  // namespace oxmera
