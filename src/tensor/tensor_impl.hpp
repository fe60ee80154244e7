#pragma once
// Internal representation of tensors and storage. Never exposed through public headers.
#include <atomic>
#include <cstdint>

#include "core/ref.hpp"
#include "oxmera/tensor.hpp"

namespace oxmera::detail {

struct Node;
void destroy(Node* n) noexcept;

// A block of device memory. `data` is opaque for non-CPU devices: only that device's backend reads it.
struct Storage {
  std::atomic<int32_t> refcount{1};
  void* data = nullptr;
  size_t nbytes = 0;
  Device device;
  // Bumped by every in-place write, so autograd can detect a saved tensor modified before backward.
  uint32_t version = 0;
  // A CPU storage in page-locked memory: the kind of the backend that allocated it (and frees it, through
  // deallocate_pinned_host); DeviceKind::CPU for ordinary memory. See Tensor::pin_memory.
  DeviceKind pinned_by = DeviceKind::CPU;
};
void destroy(Storage* s) noexcept;
// Allocates storage of `nbytes` on `device` through its backend (caching allocator on the CPU).
Ref<Storage> allocate_storage(size_t nbytes, Device device);
// Allocates CPU storage of `nbytes` in page-locked memory through the backend that can pin (pinning_backend);
// BackendUnavailable naming `op` when none can.
Ref<Storage> allocate_pinned_storage(size_t nbytes, const char* op);

struct TensorImpl {
  std::atomic<int32_t> refcount{1};
  Ref<Storage> storage;
  Shape shape;
  Strides strides;
  int64_t offset = 0;  // in elements
  int64_t numel = 0;
  DType dtype = DType::F32;
  bool contiguous = true;
  // autograd
  bool requires_grad = false;
  bool retains_grad = false;  // a non-leaf whose gradient backward() stores in .grad (registered on grad_fn)
  uint32_t output_nr = 0;
  Ref<Node> grad_fn;  // null for leaves and untracked tensors
  Tensor grad;
  std::shared_ptr<HookList> hooks;  // a leaf's gradient hooks (a non-leaf's live on its grad_fn)

  Device device() const { return storage->device; }
  // An empty storage has no data: a view into it at an offset (zeros({3, 0, 4}).narrow(0, 1, 2)) must not add
  // the offset to a null pointer (undefined behaviour); nothing is read through it anyway.
  char* byte_ptr() const {
    char* base = static_cast<char*>(storage->data);
    return base ? base + offset * static_cast<int64_t>(itemsize(dtype)) : base;
  }
  template <class T>
  T* ptr() const {
    return reinterpret_cast<T*>(byte_ptr());
  }
  void refresh_contiguous();
};
void destroy(TensorImpl* t) noexcept;

// Allocates a TensorImpl (one place to change if a pool ever pays off; measured: malloc is ~5% of a tiny op).
TensorImpl* new_impl();

// New contiguous tensor with uninitialised memory; `op` names the caller for errors.
Tensor make_empty(const Shape& shape, DType dtype, Device device, const char* op);
// New tensor viewing `base`'s storage with the given geometry (no autograd).
Tensor make_view(const Tensor& base, Shape shape, Strides strides, int64_t offset);
inline TensorImpl& impl_of(const Tensor& t) { return *t.impl(); }

// Throws InvalidArgument when `t` is undefined.
void check_defined(const Tensor& t, const char* op, const char* arg = "input");

}  // namespace oxmera::detail
