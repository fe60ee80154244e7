#pragma once
// The seam every device plugs into. The tensor layer computes shapes, dtypes, broadcasting and autograd;
// a backend only runs kernels on memory it owns. Pointers handed to a backend are opaque device pointers
// (never dereferenced by the tensor layer), launches may be asynchronous, and the tensor layer calls
// `to_host` / `synchronize` only where the host reads values. A GPU backend (CUDA now, Metal later) is a
// subclass registered for its DeviceKind by oxmera::init().
#include <cstddef>
#include <string>

#include "ops/fused.hpp"
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
  // ---- stream order, for a library that enqueues work on the device itself (NCCL's collectives). native_stream():
  // the stream this backend's kernels run on, as the library's handle (a cudaStream_t for CUDA; nullptr for the
  // default stream or a synchronous backend), so its work is ordered after the kernels that produced its inputs
  // and before those that read its outputs. record_marker(): a marker enqueued behind everything issued so far;
  // marker_reached() polls it without blocking (throws Backend when the device reports an earlier failure);
  // release_marker() frees it. A synchronous backend (the defaults) has every marker reached at once.
  // memory_is_cuda(): this backend's blocks are CUDA device memory that a CUDA library (NCCL) may read and write on
  // native_stream(); false for anything else that calls itself a CUDA device (the host-memory test device).
  virtual bool memory_is_cuda() const { return false; }
  // The physical device this backend drives, as a string equal in two processes exactly when they share it ("host
  // PCI-bus-id" for CUDA); empty when unknown. NCCL needs one device per rank: ranks that share one are staged.
  virtual std::string device_identity() { return {}; }
  virtual void* native_stream() { return nullptr; }
  virtual void* record_marker() { return nullptr; }
  virtual bool marker_reached(void* marker) { return true; }
  virtual void release_marker(void* marker) noexcept {}
  // ---- page-locked ("pinned") host memory, for a device that copies from it by DMA. A backend that offers it
  // returns true from can_pin_host(); its blocks are host memory the CPU backend reads and writes as any other
  // (a pinned tensor is a CPU tensor, Storage::pinned_by names this backend's kind). deallocate_pinned_host is
  // stream-ordered: a block is reused or freed only once the device has passed every copy issued from it
  // before the call (copy_from_pinned_host may still be reading it when its tensor dies).
  virtual bool can_pin_host() const { return false; }
  // OutOfMemory when the driver refuses; BackendUnavailable from a backend that cannot pin (the default).
  virtual void* allocate_pinned_host(size_t nbytes) {
    OXM_FAIL(BackendUnavailable, "pin_memory: the ", name(), " backend cannot allocate page-locked host memory (",
             nbytes, " bytes asked)");
  }
  virtual void deallocate_pinned_host(void* ptr, size_t nbytes) noexcept {}
  // Host -> device copy whose source lies in a block of allocate_pinned_host: enqueued on the device's stream
  // and not waited for (later work on that stream sees the data). The caller must not write the source before
  // the stream passes the copy (synchronize()); freeing it is safe (see deallocate_pinned_host). The default
  // (a backend without an asynchronous path) is copy_from_host.
  virtual void copy_from_pinned_host(void* dst, const void* src, size_t nbytes) { copy_from_host(dst, src, nbytes); }
  // Host -> device copy of values that are a function of shapes alone (an index list, a triangle mask): the same
  // at every replay of a graph, so inside a capture the backend keeps its own copy of them for the graph instead
  // of refusing. Outside a capture it is copy_from_host.
  virtual void copy_constant_from_host(void* dst, const void* src, size_t nbytes) { copy_from_host(dst, src, nbytes); }
  // ---- CUDA graphs (oxmera::cuda::Graph, src/ops/graph.cpp). Between begin_capture() and end_capture() the backend
  // records the work it is asked for instead of running it (every launch and device-to-device copy on its one
  // stream), and allocates from a pool private to the graph: a block freed during the capture is reused only by
  // later allocations of the same capture, and every block stays reserved for the graph until destroy_graph
  // (replay writes them all again). Blocks still held by tensors when the graph is destroyed go back to the
  // ordinary cache when those tensors free them. While capturing, reading device memory on the host
  // (copy_to_host), waiting (synchronize) and copying from host memory (copy_from_host) are refused with
  // InvalidArgument: the replay could not repeat them. end_capture() returns the graph; abort_capture() drops a
  // capture that failed part-way. replay() enqueues the graph's work once more on the stream (asynchronous).
  // The defaults refuse: a backend without graphs runs every step eagerly.
  virtual bool can_capture() const { return false; }
  virtual void begin_capture() {
    OXM_FAIL(NotImplemented, "cuda::Graph: the ", name(), " backend cannot capture graphs");
  }
  virtual void* end_capture() {
    OXM_FAIL(NotImplemented, "cuda::Graph: the ", name(), " backend cannot capture graphs");
  }
  virtual void abort_capture() noexcept {}
  virtual void replay(void* graph) {
    OXM_FAIL(NotImplemented, "cuda::Graph: the ", name(), " backend cannot replay graphs");
  }
  virtual void destroy_graph(void* graph) noexcept {}
  // One line for `oxmera doctor`: what this device is (name, memory, capability, driver).
  virtual std::string describe() const { return name(); }
  virtual MemoryStats memory_stats() const = 0;
  virtual void empty_cache() = 0;

  // ---- kernels. Every input is a view already broadcast to the output's shape (stride 0 where
  // broadcast); outputs are freshly allocated and contiguous unless a comment says otherwise.
  // `params`: the op's scalar parameters (the registry's params column; zeros for ops without), by value.
  virtual void unary(ops::UnaryOp op, const TensorImpl& x, TensorImpl& out, const ops::OpParams& params) = 0;
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
                          TensorImpl& out, const ops::OpParams& params) = 0;
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

  // ---- fused ops (src/ops/fused.hpp): kernels this backend offers for work ordinary ops can also do. `supports`
  // looks at the call's op id, dtypes and shapes (it must not launch or allocate); `run` is only called with a
  // call `supports` accepted. A backend that offers none keeps the defaults: ops::run_fused then runs each op's
  // composite fallback through the kernels above.
  virtual bool supports(const ops::FusedCall& call) const { return false; }
  virtual void run(ops::FusedCall& call) {
    OXM_FAIL(NotImplemented, ops::fused_op_name(ops::fused_op(call)), ": the ", name(),
             " backend was asked to run a fused kernel it does not offer (ops::run_fused asks supports() first)");
  }
  // Every member is defined here (no key function): a backend compiled into another shared object, as the CUDA
  // module is, carries its own copy of this class's vtable and type info and needs no symbol of the library.
};

// The backend for `device`; BackendUnavailable (naming `op`) when none is registered for it.
Backend& backend_for(Device device, const char* op);
Backend& cpu_backend();
// The registered backend that can pin host memory (can_pin_host()), CUDA first, or null when none can.
Backend* pinning_backend() noexcept;
// Registers `backend` for its kind unless one is registered (idempotent). Takes ownership.
void register_backend(Backend* backend);

}  // namespace oxmera::detail
