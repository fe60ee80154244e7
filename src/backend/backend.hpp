#pragma once
// The seam every device plugs into. The tensor layer computes shapes, dtypes, broadcasting and autograd;
// a backend only runs kernels on memory it owns. Pointers handed to a backend are opaque device pointers
// (never dereferenced by the tensor layer), launches may be asynchronous, and the tensor layer calls
// `to_host` / `synchronize` only where the host reads values. A GPU backend (CUDA now, Metal later) is a
// subclass registered for its DeviceKind by oxmera::init().
#include <cstddef>

#include "ops/op_defs.hpp"
#include "oxmera/memory.hpp"
#include "tensor/tensor_impl.hpp"

namespace oxmera::detail {

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
  virtual MemoryStats memory_stats() const = 0;
  virtual void empty_cache() = 0;

  // ---- kernels. Every input is a view already broadcast to the output's shape (stride 0 where
  // broadcast); outputs are freshly allocated and contiguous unless a comment says otherwise.
  virtual void unary(ops::UnaryOp op, const TensorImpl& x, TensorImpl& out) = 0;
  virtual void binary(ops::BinaryOp op, const TensorImpl& a, const TensorImpl& b, TensorImpl& out) = 0;
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
};

// The backend for `device`; BackendUnavailable (naming `op`) when none is registered for it.
Backend& backend_for(Device device, const char* op);
Backend& cpu_backend();
// Registers `backend` for its kind unless one is registered (idempotent). Takes ownership.
void register_backend(Backend* backend);

}  // namespace oxmera::detail
