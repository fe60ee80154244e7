// The CUDA backend: one device (cuda:0), one stream, a size-bucketed caching allocator with stream-ordered
// reuse, cuBLAS for matmul, and the kernels of cuda_*.cu. Launches are asynchronous; the host waits only in
// copy_to_host (and in arg_reduce and cholesky, whose NaN / pivot answers the host reads; logdet and solve_triangular
// leave theirs on the device: ops/device_checks.hpp).
#include <cublas_v2.h>
#include <unistd.h>

#include <bit>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_common.cuh"
#include "backend/mat_layout.hpp"

namespace oxmera::detail::cuda {

namespace {
cudaStream_t g_stream = nullptr;
int g_sms = 1;
std::string g_description = "cuda";  // set once when the backend is created

std::string gib(int64_t b) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

// Size classes: 512 B minimum, then two per power of two (0.75 p and p), as the host allocator.
size_t bucket(size_t n) {
  if (n <= 512) return 512;
  const size_t p = std::bit_ceil(n), three_q = p / 2 + p / 4;
  return n <= three_q ? three_q : p;
}

// A CUDA graph's private pool (capture_pool): blocks allocated during its capture. Every replay writes them
// again, so a block freed after the capture stays the graph's (its free list) until the graph is destroyed; one
// freed during the capture may be handed to a later allocation of the same capture (stream order holds inside
// the graph as on the stream).
struct GraphPool {
  std::unordered_map<size_t, std::vector<void*>> free;
  std::vector<void*> blocks;
  std::vector<std::pair<void*, size_t>> kept;  // allocated before the capture, freed during it (block, size class)
};

class DeviceAllocator {
 public:
  // Allocations go to `pool` from now on (null: the ordinary cache again).
  void set_capture_pool(GraphPool* pool) {
    std::lock_guard<std::mutex> lock(mu_);
    capture_pool_ = pool;
  }
  // The graph is gone: its free blocks join the ordinary cache, its blocks still held by tensors become ordinary
  // blocks (cached when their tensors free them). Stream-ordered like any free.
  void release_pool(GraphPool& pool) noexcept {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [b, v] : pool.free)
      for (void* p : v) try {
          free_[b].push_back(p);
        } catch (...) {
          cudaFree(p);
          cached_ -= static_cast<int64_t>(b);
        }
    for (auto& [p, b] : pool.kept) try {
        free_[b].push_back(p);
      } catch (...) {
        cudaFree(p);
        cached_ -= static_cast<int64_t>(b);
      }
    for (void* p : pool.blocks) owner_.erase(p);
    pool.free.clear();
    pool.blocks.clear();
    pool.kept.clear();
  }
  void* allocate(size_t n) {
    const size_t b = bucket(n);
    std::lock_guard<std::mutex> lock(mu_);
    if (capture_pool_) {
      auto pit = capture_pool_->free.find(b);
      if (pit != capture_pool_->free.end() && !pit->second.empty()) {
        void* p = pit->second.back();
        pit->second.pop_back();
        cached_ -= static_cast<int64_t>(b);
        ++stats_.cache_hits;
        return account(p, b);
      }
    }
    auto it = free_.find(b);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      cached_ -= static_cast<int64_t>(b);
      ++stats_.cache_hits;
      return adopt(p, b);
    }
    void* p = nullptr;
    cudaError_t e = malloc_device(&p, b);
    if (e == cudaErrorMemoryAllocation && !capture_pool_) {  // (freeing the cache waits: not while capturing)
      cudaGetLastError();                                    // not sticky: clear it, free the cache, retry once
      release_locked();
      e = cudaMalloc(&p, b);
    }
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      OXM_FAIL(OutOfMemory, "cuda:0: out of memory allocating ", gib(static_cast<int64_t>(b)), " (", b,
               " bytes) after freeing the cache: allocated ", gib(stats_.allocated_bytes), ", reserved ",
               gib(stats_.allocated_bytes + cached_), ", peak ", gib(stats_.peak_allocated_bytes), "; device free ",
               gib(static_cast<int64_t>(free_b)), " of ", gib(static_cast<int64_t>(total_b)));
    }
    check(e, "allocate", "cudaMalloc");
    ++stats_.system_allocations;
    return adopt(p, b);
  }
  void deallocate(void* p, size_t n) noexcept {
    if (!p) return;
    const size_t b = bucket(n);
    std::lock_guard<std::mutex> lock(mu_);
    stats_.allocated_bytes -= static_cast<int64_t>(b);
    cached_ += static_cast<int64_t>(b);
    try {
      if (auto o = owner_.find(p); o != owner_.end()) {
        o->second->free[b].push_back(p);
        return;
      }
      if (capture_pool_) {
        // Allocated before the capture, freed during it: replays may read its contents (a tensor the captured work
        // used and then dropped), so it serves neither eager work nor the capture itself until the graph goes.
        capture_pool_->kept.push_back({p, b});
        return;
      }
      free_[b].push_back(p);
    } catch (...) {  // no memory for the free list: give the block back instead
      cudaFree(p);
      cached_ -= static_cast<int64_t>(b);
    }
  }
  MemoryStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    MemoryStats s = stats_;
    s.reserved_bytes = s.allocated_bytes + cached_;
    return s;
  }
  void release() {
    std::lock_guard<std::mutex> lock(mu_);
    release_locked();
  }

 private:
  // cudaMalloc is a "potentially unsafe" call for a capturing thread (it would invalidate the capture): the block
  // is not part of the graph, only reserved for it, so the call runs in relaxed mode then, as torch's allocator does.
  cudaError_t malloc_device(void** p, size_t b) {
    if (!capture_pool_) return cudaMalloc(p, b);
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    const cudaError_t e = cudaMalloc(p, b);
    cudaThreadExchangeStreamCaptureMode(&mode);
    return e;
  }
  // A block handed out: the capture's pool owns it while a capture is open.
  void* adopt(void* p, size_t b) {
    if (capture_pool_) {
      try {
        owner_[p] = capture_pool_;
        capture_pool_->blocks.push_back(p);
      } catch (...) {     // no host memory for the bookkeeping: the block goes back to the cache (or leaks, if that
        owner_.erase(p);  // fails too: no cudaFree while capturing)
        try {
          free_[b].push_back(p);
          cached_ += static_cast<int64_t>(b);
        } catch (...) {
        }
        throw;
      }
    }
    return account(p, b);
  }
  void* account(void* p, size_t b) {
    stats_.allocated_bytes += static_cast<int64_t>(b);
    if (stats_.allocated_bytes > stats_.peak_allocated_bytes) stats_.peak_allocated_bytes = stats_.allocated_bytes;
    return p;
  }
  void release_locked() {
    // Cached blocks may still be read by queued kernels: let the stream drain first.
    if (g_stream) cudaStreamSynchronize(g_stream);
    for (auto& [b, v] : free_)
      for (void* p : v) cudaFree(p);
    free_.clear();
    cached_ = 0;
  }
  mutable std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  int64_t cached_ = 0;  // bytes in free lists, the graphs' included (reserved, not allocated)
  MemoryStats stats_;
  GraphPool* capture_pool_ = nullptr;
  std::unordered_map<void*, GraphPool*> owner_;  // blocks of live graphs' pools
};

DeviceAllocator* g_alloc = nullptr;

// Small host-to-device copies (index lists, batch pointers) go through pinned staging slots, so that
// cudaMemcpyAsync is truly asynchronous (from pageable memory the driver may wait for the stream's earlier
// work). A slot is reused only once its previous copy has completed (its event), 32 copies later.
class PinnedStaging {
 public:
  static constexpr size_t kSlotBytes = size_t{64} << 10;
  static constexpr int kSlots = 32;
  PinnedStaging() {
    if (cudaHostAlloc(reinterpret_cast<void**>(&base_), kSlotBytes * kSlots, cudaHostAllocDefault) != cudaSuccess) {
      cudaGetLastError();  // no pinned memory: every copy takes the pageable path
      base_ = nullptr;
      return;
    }
    for (auto& e : events_)
      if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
        cudaGetLastError();
        base_ = nullptr;
        return;
      }
  }
  // False when the copy is too large for a slot (or there is no pinned memory): the caller copies directly.
  bool copy(void* dst, const void* src, size_t n, const char* op) {
    if (base_ == nullptr || n > kSlotBytes) return false;
    std::lock_guard<std::mutex> lock(mu_);
    const int k = next_;
    next_ = (next_ + 1) % kSlots;
    if (used_[k]) check(cudaEventSynchronize(events_[k]), op, "cudaEventSynchronize (staging slot)");
    char* slot = base_ + static_cast<size_t>(k) * kSlotBytes;
    std::memcpy(slot, src, n);
    check(cudaMemcpyAsync(dst, slot, n, cudaMemcpyHostToDevice, g_stream), op, "cudaMemcpyAsync");
    const cudaError_t e = cudaEventRecord(events_[k], g_stream);
    if (e != cudaSuccess) {  // no event guards the slot: wait for the copy so the slot is free again
      cudaStreamSynchronize(g_stream);
      used_[k] = false;
      check(e, op, "cudaEventRecord");
    }
    used_[k] = true;
    return true;
  }

 private:
  std::mutex mu_;
  char* base_ = nullptr;
  cudaEvent_t events_[kSlots] = {};
  bool used_[kSlots] = {};
  int next_ = 0;
};
PinnedStaging* g_staging = nullptr;

// Page-locked host blocks for pinned tensors (Tensor::pin_memory, the DataLoader's pin_memory), cached by size
// class as the device allocator is. A freed block may still be read by a copy queued on the stream
// (copy_from_pinned_host), so deallocate records an event on the stream and the block is handed out again only
// once that event has completed (the event follows every copy issued from the block before the free, the
// stream being the only one); until then allocate takes another block or asks the driver for one.
class PinnedHostPool {
 public:
  void* allocate(size_t n) {
    const size_t b = bucket(n);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(b);
      if (it != free_.end())
        for (size_t k = 0; k < it->second.size(); ++k) {
          void* p = it->second[k];
          const cudaError_t q = cudaEventQuery(events_.at(p));
          if (q == cudaErrorNotReady) {
            cudaGetLastError();
            continue;
          }
          check(q, "pin_memory", "cudaEventQuery (pinned block)");
          it->second[k] = it->second.back();
          it->second.pop_back();
          return p;
        }
    }
    void* p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, b, cudaHostAllocDefault);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      OXM_FAIL(OutOfMemory, "pin_memory: out of page-locked host memory allocating ", b, " bytes");
    }
    check(e, "pin_memory", "cudaHostAlloc");
    return p;
  }
  void deallocate(void* p, size_t n) noexcept {
    if (!p) return;
    const size_t b = bucket(n);
    std::lock_guard<std::mutex> lock(mu_);
    try {
      cudaEvent_t& ev = events_[p];
      if (ev == nullptr && cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) {
        cudaGetLastError();
        ev = nullptr;
      }
      if (ev == nullptr || cudaEventRecord(ev, g_stream) != cudaSuccess) {
        // No event guards the block: wait for the stream (its copies are done), then give the block back.
        cudaGetLastError();
        cudaStreamSynchronize(g_stream);
        if (ev) cudaEventDestroy(ev);
        events_.erase(p);
        cudaFreeHost(p);
        return;
      }
      free_[b].push_back(p);
    } catch (...) {  // no memory for the bookkeeping: wait for the stream and give the block back
      cudaStreamSynchronize(g_stream);
      cudaFreeHost(p);
    }
  }
  // Gives the cached blocks back to the driver (after the stream drained: queued copies may read them).
  void release() {
    std::lock_guard<std::mutex> lock(mu_);
    if (g_stream) cudaStreamSynchronize(g_stream);
    for (auto& [b, v] : free_)
      for (void* p : v) {
        cudaEventDestroy(events_.at(p));
        events_.erase(p);
        cudaFreeHost(p);
      }
    free_.clear();
  }

 private:
  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  std::unordered_map<void*, cudaEvent_t> events_;  // the event of every block freed at least once
};
PinnedHostPool* g_pinned = nullptr;

const char* cublas_status(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
      return "cuBLAS error";
  }
}
void check_blas(cublasStatus_t s, const char* op, const char* what) {
  OXM_CHECK(s == CUBLAS_STATUS_SUCCESS, Backend, "cuda: ", op, ": ", what, " failed: ", cublas_status(s), " (",
            static_cast<int>(s), ")");
}

}  // namespace

void fail(cudaError_t e, const char* op, const char* what) {
  cudaGetLastError();
  OXM_FAIL(Backend, "cuda: ", op, ": ", what, " failed: ", cudaGetErrorName(e), ": ", cudaGetErrorString(e));
}
cudaStream_t stream() { return g_stream; }
int sm_count() { return g_sms; }
// Host constants copied in during a capture (a batched GEMM's pointer lists): the graph's memcpy node reads them
// at every replay, so they go to page-locked memory that belongs to the graph (allocated before the capture
// began: no driver allocation while capturing) instead of a staging slot that later copies reuse.
struct CaptureArena {
  static constexpr size_t kBytes = size_t{1} << 20;
  char* base = nullptr;
  size_t used = 0;
};
CaptureArena* g_capture_arena = nullptr;  // non-null while a capture is open

void refuse_in_capture(const char* op, const char* why) {
  OXM_CHECK(g_capture_arena == nullptr, InvalidArgument, "cuda: ", op, ": ", why,
            " while a CUDA graph is being captured (cuda::Graph): a replay could not repeat it; do it outside the "
            "capture");
}

void* scratch_alloc(size_t n) { return g_alloc->allocate(n); }
void copy_host_to_device(void* dst, const void* src, size_t n, const char* op) {
  if (n == 0) return;
  if (g_capture_arena) {
    CaptureArena& a = *g_capture_arena;
    const size_t at = (a.used + 15) / 16 * 16;
    OXM_CHECK(at + n <= CaptureArena::kBytes, NotImplemented, "cuda: ", op, ": more than ", CaptureArena::kBytes,
              " bytes of host constants in one CUDA graph capture");
    std::memcpy(a.base + at, src, n);
    a.used = at + n;
    check(cudaMemcpyAsync(dst, a.base + at, n, cudaMemcpyHostToDevice, g_stream), op, "cudaMemcpyAsync (captured)");
    return;
  }
  if (g_staging && g_staging->copy(dst, src, n, op)) return;
  // Pageable source: staged by the driver before this returns, so the caller may free it right away.
  check(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, g_stream), op, "cudaMemcpyAsync");
}
void scratch_free(void* p, size_t n) noexcept { g_alloc->deallocate(p, n); }

namespace {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(cublasHandle_t h) : blas_(h) {}
  DeviceKind kind() const override { return DeviceKind::CUDA; }
  const char* name() const override { return "cuda"; }
  std::string describe() const override { return g_description; }
  void* allocate(size_t n) override { return g_alloc->allocate(n); }
  void deallocate(void* p, size_t n) noexcept override { g_alloc->deallocate(p, n); }
  MemoryStats memory_stats() const override { return g_alloc->stats(); }
  void empty_cache() override {
    refuse_in_capture("empty_cache", "frees cached memory (a wait for the stream)");
    g_alloc->release();
    g_pinned->release();
  }
  void copy_from_host(void* dst, const void* src, size_t n) override {
    refuse_in_capture("copy_from_host", "copies host memory to the device");
    copy_host_to_device(dst, src, n, "copy_from_host");
  }
  // A shape-derived constant: through the staging slots, or inside a capture into the graph's arena.
  void copy_constant_from_host(void* dst, const void* src, size_t n) override {
    copy_host_to_device(dst, src, n, "copy_constant_from_host");
  }
  bool can_pin_host() const override { return true; }
  void* allocate_pinned_host(size_t n) override { return g_pinned->allocate(n); }
  void deallocate_pinned_host(void* p, size_t n) noexcept override { g_pinned->deallocate(p, n); }
  // From pinned memory the copy is a DMA the stream runs in order: nothing is staged and nothing waits.
  void copy_from_pinned_host(void* dst, const void* src, size_t n) override {
    refuse_in_capture("copy_from_pinned_host", "copies host memory to the device");
    if (n) check(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, g_stream), "to", "cudaMemcpyAsync (pinned)");
  }
  void copy_to_host(void* dst, const void* src, size_t n) override {
    refuse_in_capture("copy_to_host", "reads device memory on the host");
    check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, g_stream), "copy_to_host", "cudaMemcpyAsync");
    check(cudaStreamSynchronize(g_stream), "copy_to_host",
          "synchronisation (an earlier asynchronous kernel may have failed)");
  }
  void synchronize() override {
    refuse_in_capture("synchronize", "waits for the device");
    check(cudaStreamSynchronize(g_stream), "synchronize", "cudaStreamSynchronize");
  }
  bool memory_is_cuda() const override { return true; }
  std::string device_identity() override {
    char host[256] = {};
    char bus[64] = {};
    int dev = 0;
    check(cudaGetDevice(&dev), "device_identity", "cudaGetDevice");
    check(cudaDeviceGetPCIBusId(bus, static_cast<int>(sizeof bus), dev), "device_identity", "cudaDeviceGetPCIBusId");
    gethostname(host, sizeof host - 1);
    return std::string(host) + " " + bus;
  }
  void* native_stream() override {
    refuse_in_capture("native_stream", "hands the stream to another library (a collective)");
    return g_stream;
  }
  void* record_marker() override {
    refuse_in_capture("record_marker", "waits for the device (a collective)");
    cudaEvent_t ev = nullptr;
    check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "record_marker", "cudaEventCreateWithFlags");
    const cudaError_t e = cudaEventRecord(ev, g_stream);
    if (e != cudaSuccess) cudaEventDestroy(ev);
    check(e, "record_marker", "cudaEventRecord");
    return ev;
  }
  bool marker_reached(void* marker) override {
    if (marker == nullptr) return true;
    const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(marker));
    if (e == cudaErrorNotReady) return false;  // "not an error" (the runtime does not record it as the last error)
    check(e, "marker_reached", "cudaEventQuery (an earlier asynchronous operation may have failed)");
    return true;
  }
  void release_marker(void* marker) noexcept override {
    if (marker != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(marker));
  }
  // ---- CUDA graphs: stream capture of g_stream (thread-local mode: other threads may still call the runtime),
  // a private pool in the allocator, and a page-locked arena for host constants (copy_host_to_device).
  struct Graph {
    cudaGraphExec_t exec = nullptr;
    GraphPool pool;
    CaptureArena arena;
  };
  bool can_capture() const override { return true; }
  void begin_capture() override {
    OXM_CHECK(capturing_ == nullptr, InvalidArgument, "cuda::Graph: a capture is already open");
    auto g = std::make_unique<Graph>();
    check(cudaHostAlloc(reinterpret_cast<void**>(&g->arena.base), CaptureArena::kBytes, cudaHostAllocDefault),
          "cuda::Graph::capture_begin", "cudaHostAlloc (the capture's constants)");
    {
      // cuBLAS must not allocate its workspace while capturing: give it one now (kept for the process).
      std::lock_guard<std::mutex> lock(blas_mu_);
      if (workspace_ == nullptr) {
        constexpr size_t kWorkspace = size_t{32} << 20;  // what NVIDIA advises for Hopper (4 MiB before it)
        void* w = nullptr;
        const cudaError_t e = cudaMalloc(&w, kWorkspace);
        if (e != cudaSuccess) cudaFreeHost(g->arena.base);
        check(e, "cuda::Graph::capture_begin", "cudaMalloc (cuBLAS workspace)");
        check_blas(cublasSetWorkspace(blas_, w, kWorkspace), "cuda::Graph::capture_begin", "cublasSetWorkspace");
        workspace_ = w;
      }
    }
    g_alloc->set_capture_pool(&g->pool);
    const cudaError_t e = cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
      g_alloc->set_capture_pool(nullptr);
      cudaFreeHost(g->arena.base);
      check(e, "cuda::Graph::capture_begin", "cudaStreamBeginCapture");
    }
    g_capture_arena = &g->arena;
    capturing_ = g.release();
  }
  void* end_capture() override {
    OXM_CHECK(capturing_ != nullptr, InvalidArgument, "cuda::Graph: no capture is open");
    std::unique_ptr<Graph> g(capturing_);
    capturing_ = nullptr;
    g_capture_arena = nullptr;
    g_alloc->set_capture_pool(nullptr);
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamEndCapture(g_stream, &graph);
    if (e == cudaSuccess) e = cudaGraphInstantiate(&g->exec, graph, 0);
    if (graph) cudaGraphDestroy(graph);  // the executable graph does not need it
    if (e != cudaSuccess) {
      drop(*g);
      check(e, "cuda::Graph::capture_end", "cudaStreamEndCapture / cudaGraphInstantiate");
    }
    return g.release();
  }
  void abort_capture() noexcept override {
    if (capturing_ == nullptr) return;
    std::unique_ptr<Graph> g(capturing_);
    capturing_ = nullptr;
    g_capture_arena = nullptr;
    g_alloc->set_capture_pool(nullptr);
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(g_stream, &graph);  // may report the capture invalidated: it is dropped either way
    cudaGetLastError();
    if (graph) cudaGraphDestroy(graph);
    drop(*g);
  }
  void replay(void* graph) override {
    check(cudaGraphLaunch(static_cast<Graph*>(graph)->exec, g_stream), "cuda::Graph::replay", "cudaGraphLaunch");
  }
  void destroy_graph(void* graph) noexcept override {
    std::unique_ptr<Graph> g(static_cast<Graph*>(graph));
    drop(*g);
  }
  void unary(ops::UnaryOp op, const TensorImpl& x, TensorImpl& out, const ops::OpParams& p) override {
    cuda::unary(op, x, out, p);
  }
  void binary_grad(ops::BinaryOp op, int side, const TensorImpl& g, const TensorImpl& a, const TensorImpl& b,
                   TensorImpl& out) override {
    cuda::binary_grad(op, side, g, a, b, out);
  }
  void binary_scalar(ops::BinaryOp op, const TensorImpl& t, double s, bool left, TensorImpl& out) override {
    cuda::binary_scalar(op, t, s, left, out);
  }
  void unary_grad(ops::UnaryOp op, const TensorImpl& g, const TensorImpl& x, const TensorImpl& y, TensorImpl& out,
                  const ops::OpParams& p) override {
    cuda::unary_grad(op, g, x, y, out, p);
  }
  void binary(ops::BinaryOp op, const TensorImpl& a, const TensorImpl& b, TensorImpl& out) override {
    cuda::binary(op, a, b, out);
  }
  void where(const TensorImpl& m, const TensorImpl& a, const TensorImpl& b, TensorImpl& out) override {
    cuda::where(m, a, b, out);
  }
  void copy(const TensorImpl& src, TensorImpl& dst) override { cuda::copy(src, dst); }
  void fill(TensorImpl& dst, double v) override { cuda::fill(dst, v); }
  void reduce(ops::ReduceOp op, const TensorImpl& x, TensorImpl& out, uint64_t mask) override {
    cuda::reduce(op, x, out, mask);
  }
  bool arg_reduce(ops::ArgReduceOp op, const TensorImpl& x, TensorImpl& out, int64_t dim) override {
    return cuda::arg_reduce(op, x, out, dim);
  }
  void softmax(const TensorImpl& x, TensorImpl& out, int64_t dim, bool log) override {
    cuda::softmax(x, out, dim, log);
  }
  void matmul(const TensorImpl& a, const TensorImpl& b, TensorImpl& out) override;
  void index_select(const TensorImpl& x, int64_t dim, const TensorImpl& idx, TensorImpl& out) override {
    cuda::index_select(x, dim, idx, out);
  }
  void index_add(TensorImpl& out, int64_t dim, const TensorImpl& idx, const TensorImpl& src) override {
    cuda::index_add(out, dim, idx, src);
  }
  void gather(const TensorImpl& x, int64_t dim, const TensorImpl& idx, TensorImpl& out) override {
    cuda::gather(x, dim, idx, out);
  }
  void scatter_add(TensorImpl& out, int64_t dim, const TensorImpl& idx, const TensorImpl& src) override {
    cuda::scatter_add(out, dim, idx, src);
  }
  // Fused ops: f32 cross entropy (rows up to INT32_MAX), im2col / col2im, the grouped optimizer steps, the
  // small SPD linear algebra (n <= 32), scans / sort indices along a dim (f32, i64), and the nn kernels (f32 LSTM,
  // GRU and RNN cells, layer norm, softmax's gradient, max pooling); attention and linear take the composite fallback.
  bool supports(const ops::FusedCall& call) const override {
    switch (ops::fused_op(call)) {
      case ops::FusedOp::CrossEntropy: {
        const auto& c = std::get<ops::CrossEntropyCall>(call);
        return c.x->dtype == DType::F32 && c.x->shape[0] <= INT32_MAX;
      }
      case ops::FusedOp::CrossEntropyBackward:
        return std::get<ops::CrossEntropyBackwardCall>(call).x->dtype == DType::F32;
      case ops::FusedOp::Im2col: {  // without the ones row (conv2d then adds its bias as before)
        const auto& c = std::get<ops::Im2colCall>(call);
        return c.x->dtype == DType::F32 && !c.ones_row;
      }
      case ops::FusedOp::Col2im: {
        const auto& c = std::get<ops::Col2imCall>(call);
        return c.cols->dtype == DType::F32 && !c.ones_row;
      }
      case ops::FusedOp::OptimizerSteps: {
        const auto& c = std::get<ops::OptimizerStepsCall>(call);
        for (size_t i = 0; i < c.count; ++i)
          if (c.updates[i].param->dtype != DType::F32) return false;
        return true;
      }
      case ops::FusedOp::LogdetSpd: {
        const auto& c = std::get<ops::LogdetSpdCall>(call);
        return c.count >= 1 && cuda::has_small_linalg(c.a->dtype, c.n);
      }
      case ops::FusedOp::CholeskySpd: {
        const auto& c = std::get<ops::CholeskySpdCall>(call);
        return c.count >= 1 && cuda::has_small_linalg(c.a->dtype, c.n);
      }
      case ops::FusedOp::SolveTriangularSmall: {
        const auto& c = std::get<ops::SolveTriangularSmallCall>(call);
        return c.count >= 1 && c.k >= 1 && cuda::has_small_linalg(c.t->dtype, c.n);
      }
      case ops::FusedOp::Scan:
        return cuda::has_scan_sort(std::get<ops::ScanCall>(call).x->dtype);
      case ops::FusedOp::DropoutMask: {
        const auto& c = std::get<ops::DropoutMaskCall>(call);
        return c.mask->dtype == DType::F32 && c.mask->contiguous && c.state->dtype == DType::I64;
      }
      case ops::FusedOp::CumprodBackward:
        return std::get<ops::CumprodBackwardCall>(call).x->dtype == DType::F32;
      case ops::FusedOp::SortIndices:
        return cuda::has_scan_sort(std::get<ops::SortIndicesCall>(call).x->dtype);
      case ops::FusedOp::SoftmaxBackward:  // cuda_nn.cu (f32)
      case ops::FusedOp::LayerNorm:
      case ops::FusedOp::LayerNormBackward:
      case ops::FusedOp::LstmCell:
      case ops::FusedOp::LstmCellBackward:
      case ops::FusedOp::GruCell:
      case ops::FusedOp::GruCellBackward:
      case ops::FusedOp::RnnCell:
      case ops::FusedOp::MaxPool2d:
      case ops::FusedOp::MaxPool2dBackward:
        return cuda::has_nn_kernel(call);
      case ops::FusedOp::IndexCheck:
        return std::get<ops::IndexCheckCall>(call).kernel_takes();
      case ops::FusedOp::TensorListNorm: {
        const auto& c = std::get<ops::TensorListNormCall>(call);
        return cuda::has_tensor_list(c.tensors, c.count, c.out);
      }
      case ops::FusedOp::TensorListScale: {
        const auto& c = std::get<ops::TensorListScaleCall>(call);
        return cuda::has_tensor_list(c.tensors, c.count, nullptr);
      }
      case ops::FusedOp::Attention:  // the composite fallbacks (no kernels here yet)
      case ops::FusedOp::AttentionBackward:
      case ops::FusedOp::Linear:  // the fallback's GEMM + bias add is two launches, as a bias copy + beta-1 GEMM
        return false;
    }
    return false;
  }
  void run(ops::FusedCall& call) override {
    switch (ops::fused_op(call)) {
      case ops::FusedOp::CrossEntropy: {
        auto& c = std::get<ops::CrossEntropyCall>(call);
        return cuda::cross_entropy(*c.x, *c.target, c.label_smoothing, c.scale, *c.loss, *c.lse);
      }
      case ops::FusedOp::CrossEntropyBackward: {
        auto& c = std::get<ops::CrossEntropyBackwardCall>(call);
        return cuda::cross_entropy_backward(*c.x, *c.target, *c.lse, *c.g, c.label_smoothing, c.scale, *c.grad_x);
      }
      case ops::FusedOp::Im2col: {
        auto& c = std::get<ops::Im2colCall>(call);
        return cuda::im2col(*c.x, *c.cols, c.geometry, c.pad_value);
      }
      case ops::FusedOp::Col2im: {
        auto& c = std::get<ops::Col2imCall>(call);
        return cuda::col2im(*c.cols, *c.x_grad, c.geometry, c.zero_first);
      }
      case ops::FusedOp::OptimizerSteps: {
        auto& c = std::get<ops::OptimizerStepsCall>(call);
        return cuda::optimizer_steps(c.updates, c.count);
      }
      case ops::FusedOp::LogdetSpd: {
        auto& c = std::get<ops::LogdetSpdCall>(call);
        if (!cuda::logdet_spd(c)) break;
        return;
      }
      case ops::FusedOp::CholeskySpd: {
        auto& c = std::get<ops::CholeskySpdCall>(call);
        if (!cuda::cholesky_spd(c)) break;
        return;
      }
      case ops::FusedOp::SolveTriangularSmall: {
        auto& c = std::get<ops::SolveTriangularSmallCall>(call);
        if (!cuda::solve_triangular_small(c)) break;
        return;
      }
      case ops::FusedOp::Scan:
        return cuda::scan(std::get<ops::ScanCall>(call));
      case ops::FusedOp::DropoutMask:
        return cuda::dropout_mask(std::get<ops::DropoutMaskCall>(call));
      case ops::FusedOp::CumprodBackward:
        return cuda::cumprod_backward(std::get<ops::CumprodBackwardCall>(call));
      case ops::FusedOp::SortIndices:
        return cuda::sort_indices(std::get<ops::SortIndicesCall>(call));
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
        return cuda::run_nn_kernel(call);
      case ops::FusedOp::IndexCheck:
        return cuda::index_check(std::get<ops::IndexCheckCall>(call));
      case ops::FusedOp::TensorListNorm:
        return cuda::tensor_list_norm(std::get<ops::TensorListNormCall>(call));
      case ops::FusedOp::TensorListScale:
        return cuda::tensor_list_scale(std::get<ops::TensorListScaleCall>(call));
      case ops::FusedOp::Attention:
      case ops::FusedOp::AttentionBackward:
      case ops::FusedOp::Linear:
        break;
    }
    Backend::run(call);  // not offered (supports() said so)
  }

 private:
  // A graph's resources: a replay may still be running, so the arena it reads is freed after the stream drains
  // (a rare wait: reset() or a failed capture); the pool's blocks are stream-ordered frees.
  void drop(Graph& g) noexcept {
    if (g.exec) cudaGraphExecDestroy(g.exec);
    if (g.arena.base) {
      cudaStreamSynchronize(g_stream);
      cudaFreeHost(g.arena.base);
    }
    cudaGetLastError();
    g_alloc->release_pool(g.pool);
  }
  std::mutex blas_mu_;  // a cuBLAS handle must not be used by two threads at once
  cublasHandle_t blas_;
  void* workspace_ = nullptr;  // cuBLAS's, set before the first capture
  Graph* capturing_ = nullptr;
};

void CudaBackend::matmul(const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  OXM_CHECK(a.dtype == DType::F32 && b.dtype == DType::F32, UnsupportedDType, "matmul: dtype ", a.dtype,
            " is not supported on cuda (f32)");
  const size_t r = out.shape.size();
  const int64_t m = out.shape[r - 2], n = out.shape[r - 1], k = a.shape[r - 1];
  if (m == 0 || n == 0) return;
  Shape bshape(out.shape.begin(), r - 2);
  const int64_t B = bshape.product();
  if (B == 0) return;
  float* cp = out.ptr<float>();
  if (k == 0) {
    check(cudaMemsetAsync(cp, 0, static_cast<size_t>(B * m * n) * sizeof(float), g_stream), "matmul",
          "cudaMemsetAsync");
    return;
  }
  OXM_CHECK(m <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX && B <= INT32_MAX, NotImplemented,
            "matmul: dims beyond 2^31 are not supported by cuBLAS (m ", m, ", n ", n, ", k ", k, ", batch ", B, ")");
  const MatLayout la = mat_layout(m, k, a.strides[r - 2], a.strides[r - 1]);
  const MatLayout lb = mat_layout(k, n, b.strides[r - 2], b.strides[r - 1]);
  // cuBLAS takes 32-bit leading dimensions: a view into a huge tensor can have a row stride beyond that.
  OXM_CHECK(la.ld <= INT32_MAX && lb.ld <= INT32_MAX, NotImplemented, "matmul: a leading dimension beyond 2^31 - 1 (",
            la.ld, " for the left operand, ", lb.ld,
            " for the right) is not supported by cuBLAS; call .contiguous() on the operand first");
  // Row-major C = A B is column-major C^T = B^T A^T: cuBLAS gets (B, A) with the row-major layouts.
  const cublasOperation_t opa = la.trans ? CUBLAS_OP_T : CUBLAS_OP_N, opb = lb.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const float one = 1.f, zero = 0.f;
  const float* ap = a.ptr<float>();
  const float* bp = b.ptr<float>();
  // Batch dims coalesced jointly for a and b (out is contiguous): one stride each = strided batched call.
  int64_t bs[kMaxDims], as_[kMaxDims], bst[kMaxDims], os[kMaxDims];
  OXM_CHECK(r - 2 <= static_cast<size_t>(kMaxDims), NotImplemented, "matmul: more than ", kMaxDims, " batch dims");
  for (size_t d = 0; d + 2 < r; ++d) {
    bs[d] = bshape[d];
    as_[d] = a.strides[d];
    bst[d] = b.strides[d];
    os[d] = out.strides[d];
  }
  const int64_t* sp[3] = {os, as_, bst};
  Plan<3> plan;
  const bool fits = make_plan<3>(static_cast<int>(r - 2), bs, sp, plan);
  std::lock_guard<std::mutex> lock(blas_mu_);
  check_blas(cublasSetStream(blas_, g_stream), "matmul", "cublasSetStream");
  // TF32 tensor cores only when the user opted in (set_float32_matmul_precision("high")), as in torch.
  const bool tf32 = float32_matmul_precision() != "highest";
  check_blas(cublasSetMathMode(blas_, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH), "matmul",
             "cublasSetMathMode");
  if (fits && plan.ndim <= 1) {
    const int64_t sa = plan.ndim ? plan.stride[1][0] : 0, sb = plan.ndim ? plan.stride[2][0] : 0;
    if (B == 1) {
      check_blas(cublasSgemm(blas_, opb, opa, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &one, bp,
                             static_cast<int>(lb.ld), ap, static_cast<int>(la.ld), &zero, cp, static_cast<int>(n)),
                 "matmul", "cublasSgemm");
    } else {
      check_blas(
          cublasSgemmStridedBatched(blas_, opb, opa, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                                    &one, bp, static_cast<int>(lb.ld), sb, ap, static_cast<int>(la.ld), sa, &zero, cp,
                                    static_cast<int>(n), m * n, static_cast<int>(B)),
          "matmul", "cublasSgemmStridedBatched");
    }
    return;
  }
  // General broadcast batch (e.g. a stride-0 dim outside a strided one): pointer arrays, nothing materialised.
  std::vector<const float*> host(static_cast<size_t>(3 * B));
  auto offset = [&](const int64_t* st, int64_t i) {
    int64_t off = 0;
    for (size_t d = r - 2; d-- > 0;) {
      off += (i % bs[d]) * st[d];
      i /= bs[d];
    }
    return off;
  };
  for (int64_t i = 0; i < B; ++i) {
    host[static_cast<size_t>(i)] = bp + offset(bst, i);
    host[static_cast<size_t>(B + i)] = ap + offset(as_, i);
    host[static_cast<size_t>(2 * B + i)] = cp + i * m * n;
  }
  const size_t bytes = host.size() * sizeof(float*);
  void* dev = scratch_alloc(bytes);
  try {
    copy_host_to_device(dev, host.data(), bytes, "matmul");
  } catch (...) {
    scratch_free(dev, bytes);
    throw;
  }
  auto** arr = static_cast<const float**>(dev);
  const cublasStatus_t st =
      cublasSgemmBatched(blas_, opb, opa, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &one, arr,
                         static_cast<int>(lb.ld), arr + B, static_cast<int>(la.ld), &zero,
                         const_cast<float**>(arr + 2 * B), static_cast<int>(n), static_cast<int>(B));
  scratch_free(dev, bytes);  // stream-ordered: the next user of the block runs after the GEMM
  check_blas(st, "matmul", "cublasSgemmBatched");
}

}  // namespace
}  // namespace oxmera::detail::cuda

namespace oxmera::detail {

Backend* create_cuda_backend(std::string& why) noexcept {
  try {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
      why = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
      cudaGetLastError();
      return nullptr;
    }
    if (count == 0) {
      why = "the driver reports no CUDA device";
      return nullptr;
    }
    auto describe = [](const char* what, cudaError_t err) {
      return std::string(what) + " failed: " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err);
    };
    if ((e = cudaSetDevice(0)) != cudaSuccess) return why = describe("cudaSetDevice(0)", e), nullptr;
    cudaDeviceProp prop{};
    if ((e = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess)
      return why = describe("cudaGetDeviceProperties", e), nullptr;
    cudaStream_t s = nullptr;
    if ((e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) != cudaSuccess)
      return why = describe("cudaStreamCreate", e), nullptr;
    cublasHandle_t h = nullptr;
    const cublasStatus_t bs = cublasCreate(&h);
    if (bs != CUBLAS_STATUS_SUCCESS) {
      cudaStreamDestroy(s);
      why = std::string("cublasCreate failed: ") + cuda::cublas_status(bs);
      return nullptr;
    }
    cublasSetStream(h, s);
    cuda::g_stream = s;
    cuda::g_sms = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1;
    {
      int driver = 0;
      cudaDriverGetVersion(&driver);
      char mem[32];
      std::snprintf(mem, sizeof mem, "%.1f", static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
      cuda::g_description = std::string(prop.name) + ", " + mem + " GiB, compute capability " +
                            std::to_string(prop.major) + "." + std::to_string(prop.minor) + ", driver " +
                            std::to_string(driver / 1000) + "." + std::to_string((driver % 1000) / 10);
    }
    cuda::g_alloc = new cuda::DeviceAllocator();  // never destroyed: storages may outlive static destruction
    cuda::g_staging = new cuda::PinnedStaging();  // likewise
    cuda::g_pinned = new cuda::PinnedHostPool();  // likewise (pinned tensors may outlive static destruction)
    return new cuda::CudaBackend(h);
  } catch (const std::exception& ex) {
    why = ex.what();
    return nullptr;
  }
}

}  // namespace oxmera::detail
