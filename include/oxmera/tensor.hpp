#pragma once
#include <concepts>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
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
struct HookList;
}  // namespace detail

// What Tensor::register_hook and register_post_accumulate_grad_hook return: remove() unregisters the hook (a
// no-op once removed or once the tensor or graph is gone). Dropping the handle keeps the hook.
class HookHandle {
 public:
  HookHandle() = default;
  HookHandle(std::weak_ptr<detail::HookList> list, uint64_t id) : list_(std::move(list)), id_(id) {}
  void remove();
  bool active() const;

 private:
  std::weak_ptr<detail::HookList> list_;
  uint64_t id_ = 0;
};

class Generator;
namespace indexing {
class TensorIndex;
}

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
  // As to(device); with non_blocking, a copy from pinned memory (is_pinned()) to a GPU is enqueued on the
  // device's stream and not waited for, as torch's .to(device, non_blocking=True): later ops on the device see
  // the data, and the pinned block is kept from reuse until the device has read it; writing the source in place
  // before synchronize() is a race, as in torch. Otherwise (pageable source, device -> host) the copy is the
  // ordinary one.
  Tensor to(Device device, bool non_blocking) const;
  // A copy of this CPU tensor in page-locked (pinned) host memory, which a GPU reads by DMA without a staging
  // copy; self when already pinned. The copy is contiguous and differentiable (gradient: identity), as
  // torch's. BackendUnavailable when no backend can pin (no GPU: torch raises too), DeviceMismatch for a
  // tensor not on the CPU.
  Tensor pin_memory() const;
  // Whether this tensor's storage is page-locked host memory (false for GPU tensors and ordinary CPU ones).
  bool is_pinned() const;

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
  // The same with a scalar operand, held in self's dtype: x.gt(0.0), x.maximum(0.0), x.pow(2.0), x.sub(1.0).
#define OXM_X(id, name, api, ...) OXM_IF_PUBLIC(api, Tensor name(double other) const;)
  OXMERA_BINARY_OPS(OXM_X)
#undef OXM_X
  // torch's approximate= argument: "none" (exact, as gelu()) or "tanh"; anything else is InvalidArgument.
  Tensor gelu(std::string_view approximate) const;
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
  // One dim as an integer, as in torch: x.sum(1), x.mean(-1, true). x.max(0) / x.min(0) return (values,
  // indices) as libtorch's; the gradient flows to the selected element only. Templates, so that a braced list
  // (x.sum({0, 1}), x.max({2}), x.sum({})) still means the Dims overload.
  template <class I>
  requires std::integral<I> &&(!std::same_as<I, bool>)Tensor sum(I dim, bool keepdim = false) const {
    return sum(Dims{static_cast<int64_t>(dim)}, keepdim);
  }
  template <class I>
  requires std::integral<I> &&(!std::same_as<I, bool>)Tensor mean(I dim, bool keepdim = false) const {
    return mean(Dims{static_cast<int64_t>(dim)}, keepdim);
  }
  template <class I>
  requires std::integral<I> &&
      (!std::same_as<I, bool>)std::tuple<Tensor, Tensor> max(I dim, bool keepdim = false) const {
    return max_with_indices(static_cast<int64_t>(dim), keepdim);
  }
  template <class I>
  requires std::integral<I> &&
      (!std::same_as<I, bool>)std::tuple<Tensor, Tensor> min(I dim, bool keepdim = false) const {
    return min_with_indices(static_cast<int64_t>(dim), keepdim);
  }
  std::tuple<Tensor, Tensor> max_with_indices(int64_t dim, bool keepdim = false) const;
  std::tuple<Tensor, Tensor> min_with_indices(int64_t dim, bool keepdim = false) const;
  // Variance / standard deviation over dims (empty = all) divided by max(0, count - correction); correction
  // 1 (Bessel) as in torch (a bool reads as libtorch's `unbiased`). f32 / f64.
  Tensor var(const Dims& dims = {}, double correction = 1.0, bool keepdim = false) const;
  Tensor std(const Dims& dims = {}, double correction = 1.0, bool keepdim = false) const;
  template <class I>
  requires std::integral<I> &&(!std::same_as<I, bool>)Tensor
      var(I dim, double correction = 1.0, bool keepdim = false) const {
    return var(Dims{static_cast<int64_t>(dim)}, correction, keepdim);
  }
  template <class I>
  requires std::integral<I> &&(!std::same_as<I, bool>)Tensor
      std(I dim, double correction = 1.0, bool keepdim = false) const {
    return std(Dims{static_cast<int64_t>(dim)}, correction, keepdim);
  }
  // Vector p-norm over dims (empty = all): p = 2, 1, INFINITY, -INFINITY, 0 (count of nonzeros) or any p > 0.
  Tensor norm(double p = 2.0, const Dims& dims = {}, bool keepdim = false) const;
  // Whether any / every element over dims (empty = all) is nonzero (NaN counts as nonzero), as a 0/1 mask of
  // this tensor's dtype, like the comparisons. Not differentiable.
  Tensor any(const Dims& dims = {}, bool keepdim = false) const;
  Tensor all(const Dims& dims = {}, bool keepdim = false) const;
  // Inclusive prefix sum / product along dim (the same dtype).
  Tensor cumsum(int64_t dim) const;
  Tensor cumprod(int64_t dim) const;
  // Stable sort along dim: (values, i64 indices); NaN sorts as the largest (last ascending, first descending).
  std::tuple<Tensor, Tensor> sort(int64_t dim = -1, bool descending = false) const;
  Tensor argsort(int64_t dim = -1, bool descending = false) const;
  // The k largest (smallest) along dim, sorted (ties in index order): (values, i64 indices).
  std::tuple<Tensor, Tensor> topk(int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true) const;

  // ---- structured layout ops
  // Elements below / above diagonal `diagonal` of the last two dims kept, the others 0 (batched).
  Tensor tril(int64_t diagonal = 0) const;
  Tensor triu(int64_t diagonal = 0) const;
  // A copy with `value` where mask (broadcastable to this shape; u8 or this dtype) is nonzero. A 0-d tensor
  // value receives the gradient of the filled positions.
  Tensor masked_fill(const Tensor& mask, double value) const;
  Tensor masked_fill(const Tensor& mask, const Tensor& value) const;
  // Views along dim, as torch: chunk into `chunks` pieces of ceil(size / chunks) (fewer when they run out);
  // split into pieces of `size` (the last may be shorter) or of the given sizes (which must sum to the dim).
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;
  template <class I>
  requires std::integral<I> &&(!std::same_as<I, bool>)std::vector<Tensor> split(I size, int64_t dim = 0) const {
    return split_size(static_cast<int64_t>(size), dim);
  }
  std::vector<Tensor> split(const std::vector<int64_t>& sizes, int64_t dim = 0) const;
  std::vector<Tensor> split_size(int64_t size, int64_t dim = 0) const;
  std::vector<Tensor> unbind(int64_t dim = 0) const;
  // Copies: repeat (repeats.size() >= dim(); torch's Tensor.repeat), tile (repeats padded with leading 1s),
  // flip (reversed along dims), roll (shifted circularly along dims; without dims, the flattened tensor).
  Tensor repeat(const Shape& repeats) const;
  Tensor tile(const Shape& repeats) const;
  Tensor flip(const Dims& dims) const;
  Tensor roll(const Dims& shifts, const Dims& dims = {}) const;

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
  // Elementwise in place: o broadcasts to self's shape and has self's dtype and device.
  Tensor& add_(const Tensor& o, double alpha = 1.0);
  Tensor& sub_(const Tensor& o, double alpha = 1.0);
  Tensor& mul_(const Tensor& o);
  Tensor& div_(const Tensor& o);
  Tensor& add_(double s);
  Tensor& sub_(double s);
  Tensor& mul_(double s);
  Tensor& div_(double s);

  // ---- libtorch-style indexing (namespace oxmera::indexing): x.index({Slice(0, 4), 2, None, Ellipsis, idx}).
  // Integers select (removing the dim), Slice(start, stop, step) narrows (a view), None inserts a dim of size 1,
  // Ellipsis stands for the dims not named; I64 tensors pick elements (advanced indexing, as torch: index
  // tensors broadcast together; their dims go where the first one stood when they are adjacent, in front
  // otherwise) and U8 masks pick the positions where they are non-zero. Without tensor indices the result is
  // a view; with them, a copy. Differentiable.
  Tensor index(std::initializer_list<indexing::TensorIndex> indices) const;
  Tensor index(const std::vector<indexing::TensorIndex>& indices) const;
  // Writes `values` (broadcast to what index() would return) into the indexed positions; with
  // accumulate, adds them instead (duplicates accumulate in order; without it the last duplicate wins).
  // Like the other in-place ops, not recorded by autograd.
  Tensor& index_put_(std::initializer_list<indexing::TensorIndex> indices, const Tensor& values,
                     bool accumulate = false);
  Tensor& index_put_(const std::vector<indexing::TensorIndex>& indices, const Tensor& values, bool accumulate = false);
  Tensor& index_put_(std::initializer_list<indexing::TensorIndex> indices, double value);
  Tensor& index_put_(const std::vector<indexing::TensorIndex>& indices, double value);

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
  // As torch's backward(gradient, retain_graph, create_graph): gradient may be undefined for a one-element
  // tensor. Without retain_graph the saved tensors of the graph are freed as the backward passes, and a second
  // backward through a node that had saved tensors is InvalidArgument. With create_graph the backward rules are
  // recorded: .grad gets a history of its own and can be differentiated again (higher-order gradients); the graph
  // is then kept, as torch's retain_graph = create_graph default. As in torch, that .grad's history refers back to
  // the leaf, a reference cycle that keeps both alive until the gradient is dropped (zero_grad() or set_grad({}));
  // autograd::grad(..., create_graph = true) returns the gradients instead and makes no cycle.
  void backward(const Tensor& gradient, bool retain_graph, bool create_graph = false) const;
  // Hooks on the gradient flowing into this tensor (which must require grad), run in registration order when
  // backward reaches it, before it is accumulated into .grad or passed on: a hook returning a Tensor replaces the
  // gradient (same shape, dtype and device) unless it returns an undefined one; a hook returning void observes.
  template <class F>
  HookHandle register_hook(F&& hook) {
    if constexpr (std::is_void_v<std::invoke_result_t<F&, const Tensor&>>) {
      return register_hook_impl([h = std::forward<F>(hook)](const Tensor& g) mutable {
        h(g);
        return Tensor();
      });
    } else {
      return register_hook_impl(std::function<Tensor(const Tensor&)>(std::forward<F>(hook)));
    }
  }
  // Leaves only: runs once per backward when this leaf's .grad holds all of that backward's contributions (the
  // moment a data-parallel trainer can start reducing it). The hook receives the leaf itself.
  HookHandle register_post_accumulate_grad_hook(std::function<void(Tensor&)> hook);
  Tensor detach() const;
  // Name of the backward node that produced this tensor ("" for leaves / untracked).
  std::string grad_fn_name() const;

  std::string str() const;  // readable printing

 private:
  HookHandle register_hook_impl(std::function<Tensor(const Tensor&)> hook);
  detail::TensorImpl* impl_ = nullptr;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

namespace indexing {
// Slice(start, stop, step): omitted ends (None) mean the whole dim; negative ends count from the back.
struct Slice {
  Slice(std::optional<int64_t> start = std::nullopt, std::optional<int64_t> stop = std::nullopt, int64_t step = 1)
      : start(start), stop(stop), step(step) {}
  std::optional<int64_t> start, stop;
  int64_t step;
};
inline constexpr std::nullopt_t None = std::nullopt;  // a new dim of size 1 (and an open end of a Slice)
struct EllipsisIndex {};
inline constexpr EllipsisIndex Ellipsis{};

class TensorIndex {
 public:
  enum class Kind : uint8_t { Integer, Slice, None, Ellipsis, Tensor };
  template <class I>
  requires(std::is_integral_v<I> && !std::is_same_v<I, bool>) TensorIndex(I i)
      : kind_(Kind::Integer), integer_(static_cast<int64_t>(i)) {}       // NOLINT: implicit as libtorch
  TensorIndex(Slice s) : kind_(Kind::Slice), slice_(s) {}                // NOLINT
  TensorIndex(std::nullopt_t) : kind_(Kind::None) {}                     // NOLINT
  TensorIndex(EllipsisIndex) : kind_(Kind::Ellipsis) {}                  // NOLINT
  TensorIndex(Tensor t) : kind_(Kind::Tensor), tensor_(std::move(t)) {}  // NOLINT
  Kind kind() const noexcept { return kind_; }
  int64_t integer() const noexcept { return integer_; }
  const Slice& slice() const noexcept { return slice_; }
  const Tensor& tensor() const noexcept { return tensor_; }

 private:
  Kind kind_;
  int64_t integer_ = 0;
  Slice slice_;
  Tensor tensor_;
};
}  // namespace indexing

// ---- construction
// from_vector: f32, f64, i64 and u8 tensors from vectors of those types; other integer element types
// (int, int32_t, uint16_t, ...) make I64 tensors and bool makes U8 (oxmera has no other integer dtypes).
// Other element types do not compile.
namespace detail {
template <class T>
inline constexpr bool is_native_element_v =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int64_t> || std::is_same_v<T, uint8_t>;
Tensor from_int64_values(std::vector<int64_t> values, const Shape& shape);
}  // namespace detail
template <class T>
requires(detail::is_native_element_v<T>) Tensor from_vector(const std::vector<T>& values, const Shape& shape);
template <class T>
requires(std::is_integral_v<T> && !detail::is_native_element_v<T>) Tensor
    from_vector(const std::vector<T>& values, const Shape& shape) {
  if constexpr (std::is_same_v<T, bool>) {
    return from_vector(std::vector<uint8_t>(values.begin(), values.end()), shape);
  } else {
    std::vector<int64_t> v;
    v.reserve(values.size());
    for (T x : values) {
      if constexpr (std::is_unsigned_v<T> && sizeof(T) >= sizeof(int64_t))
        OXM_CHECK(x <= static_cast<T>(std::numeric_limits<int64_t>::max()), InvalidArgument, "from_vector: value ", x,
                  " does not fit the i64 tensor it would become");
      v.push_back(static_cast<int64_t>(x));
    }
    return detail::from_int64_values(std::move(v), shape);
  }
}
Tensor zeros(const Shape& shape, DType dtype = DType::F32);
Tensor ones(const Shape& shape, DType dtype = DType::F32);
Tensor full(const Shape& shape, double value, DType dtype = DType::F32);
Tensor empty(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
Tensor arange(int64_t n, DType dtype = DType::I64);
Tensor arange(double start, double end, double step, DType dtype = DType::F32);
// torch's dtype rule: arange(0, 10) and arange(0, 10, 2) are I64 (every argument an integer), arange(0, 1, 0.25)
// and arange(0.0, 5.0) are F32. An explicit dtype takes the overload above.
template <class S, class E, class St = int>
requires(std::is_arithmetic_v<S>&& std::is_arithmetic_v<E>&& std::is_arithmetic_v<St>) Tensor
    arange(S start, E end, St step = 1) {
  const bool ints = std::is_integral_v<S> && std::is_integral_v<E> && std::is_integral_v<St>;
  return arange(static_cast<double>(start), static_cast<double>(end), static_cast<double>(step),
                ints ? DType::I64 : DType::F32);
}
Tensor eye(int64_t n, DType dtype = DType::F32);
// The same on `device`: allocated there and filled by the device's own kernel (no host buffer, no upload).
Tensor zeros(const Shape& shape, DType dtype, Device device);
Tensor ones(const Shape& shape, DType dtype, Device device);
Tensor full(const Shape& shape, double value, DType dtype, Device device);
Tensor eye(int64_t n, DType dtype, Device device);
// 0, 1, ..., n-1 made on `device` (no host data copied: usable inside a CUDA graph capture).
Tensor arange(int64_t n, DType dtype, Device device);
Tensor scalar(double value, DType dtype = DType::F32);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor randn(const Shape& shape, uint64_t seed, DType dtype = DType::F32);
Tensor rand(const Shape& shape, uint64_t seed, DType dtype = DType::F32);
Tensor randn(const Shape& shape, Generator& gen, DType dtype = DType::F32);
Tensor rand(const Shape& shape, Generator& gen, DType dtype = DType::F32);
// Integers uniform in [low, high) (I64 unless dtype says otherwise).
Tensor randint(int64_t low, int64_t high, const Shape& shape, uint64_t seed, DType dtype = DType::I64);
Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator& gen, DType dtype = DType::I64);
// A uniformly random permutation of 0 .. n-1 (I64 unless dtype says otherwise).
Tensor randperm(int64_t n, uint64_t seed, DType dtype = DType::I64);
Tensor randperm(int64_t n, Generator& gen, DType dtype = DType::I64);
// Indices (I64) of num_samples draws from the categorical distribution of each row of probs (1-d or 2-d,
// non-negative, finite, any positive scale), without replacement unless `replacement` (as torch.multinomial).
// The result has probs' device.
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement, uint64_t seed);
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement, Generator& gen);
// 1 with probability p (elementwise, p in [0, 1]), else 0, in p's dtype and on p's device.
Tensor bernoulli(const Tensor& p, uint64_t seed);
Tensor bernoulli(const Tensor& p, Generator& gen);

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
Tensor operator==(const Tensor& a, const Tensor& b);  // masks, as torch: (a == b) is a.eq(b), not a bool
Tensor operator!=(const Tensor& a, const Tensor& b);
// Comparisons with a scalar (x > 0.0, 0.5 <= x): masks of the tensor's dtype holding 0 or 1.
Tensor operator<(const Tensor& a, double b);
Tensor operator<=(const Tensor& a, double b);
Tensor operator>(const Tensor& a, double b);
Tensor operator>=(const Tensor& a, double b);
Tensor operator==(const Tensor& a, double b);
Tensor operator!=(const Tensor& a, double b);
Tensor operator<(double a, const Tensor& b);
Tensor operator<=(double a, const Tensor& b);
Tensor operator>(double a, const Tensor& b);
Tensor operator>=(double a, const Tensor& b);
Tensor operator==(double a, const Tensor& b);
Tensor operator!=(double a, const Tensor& b);
// The registry's binary ops as free functions: add(a, b), sub, mul, div, pow, maximum, minimum, eq, ne, lt, ...
#define OXM_X(id, name, api, ...) OXM_IF_PUBLIC(api, Tensor name(const Tensor& a, const Tensor& b);)
OXMERA_BINARY_OPS(OXM_X)
#undef OXM_X
// Elementwise select: mask != 0 ? a : b, with broadcasting; mask has the dtype of a and b, or U8.
Tensor where(const Tensor& mask, const Tensor& a, const Tensor& b);
// With a scalar branch (held in the other branch's dtype), or two (the result is the mask's dtype when it is a
// float, else F32, as torch's default dtype).
Tensor where(const Tensor& mask, const Tensor& a, double b);
Tensor where(const Tensor& mask, double a, const Tensor& b);
Tensor where(const Tensor& mask, double a, double b);
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
