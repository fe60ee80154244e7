#pragma once
// A test-only backend for DeviceKind::CUDA that keeps tensors in host memory: every kernel is forwarded to the
// CPU backend, and the fused ops the CUDA backend has its own kernels for run the same per-matrix, per-row and
// per-element code as those kernels (src/backend/common/spd_math.hpp, scan_math.hpp, philox.hpp, nn_math.hpp). It lets
// the tensor layer's device branches, and the cuda test suite's own logic, run without a GPU
// (tests/test_fake_device.cpp, the cuda_suite_on_test_device ctest).
#include <unistd.h>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backend/backend.hpp"
#include "backend/common/nn_math.hpp"
#include "backend/common/optim_math.hpp"
#include "backend/common/philox.hpp"
#include "backend/common/scan_math.hpp"
#include "backend/common/spd_math.hpp"
#include "ops/fused.hpp"
#include "oxmera/oxmera.hpp"

namespace oxt_fake {

using namespace oxmera;

namespace d = oxmera::detail;

class HostMemoryDevice final : public d::Backend {
 public:
  DeviceKind kind() const override { return DeviceKind::CUDA; }
  const char* name() const override { return "host-memory test device"; }
  void* allocate(size_t n) override {
    if (capturing_) {  // the capture's pool: a block freed earlier in this capture, else a new one of the pool
      const size_t key = n == 0 ? 1 : n;
      auto it = pool_->free.find(key);
      if (it != pool_->free.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        return p;
      }
    }
    void* p = n > (size_t{1} << 40) ? nullptr : std::malloc(n == 0 ? 1 : n);  // refuse absurd sizes outright
    OXM_CHECK(p != nullptr, OutOfMemory, "host-memory test device: out of memory allocating ", n, " bytes (allocated ",
              allocated_.load(), ", reserved ", allocated_.load(), ")");
    allocated_ += static_cast<int64_t>(n);
    ++allocations_;
    if (capturing_) {
      pool_owner_[p] = pool_.get();
      pool_->blocks.push_back({p, n});
    }
    return p;
  }
  void deallocate(void* p, size_t n) noexcept override {
    run_queue();  // a queued copy may still write this block
    if (auto it = pool_owner_.find(p); it != pool_owner_.end()) {
      it->second->free[n == 0 ? 1 : n].push_back(p);  // a graph's block: replays write it, so it stays reserved
      return;
    }
    if (capturing_) {  // allocated before the capture, freed during it: replays may read its contents, so it is
      pool_->kept.push_back({p, n});  // kept, and not reused by the capture either, until the graph goes
      return;
    }
    allocated_ -= static_cast<int64_t>(n);
    std::free(p);
  }
  // Pinned host memory (offer_pinned): malloc'd blocks counted apart from the device's. copy_from_pinned_host
  // only queues the copy, as a stream would: it runs at the device's next operation (a kernel, a transfer,
  // synchronize, a free), so a test sees whether later work is ordered after it. Freeing a pinned block that a
  // queued copy still reads runs the queue first (the stream-ordered free the CUDA backend does with events).
  bool can_pin_host() const override { return offer_pinned; }
  void* allocate_pinned_host(size_t n) override {
    if (!offer_pinned) return d::Backend::allocate_pinned_host(n);
    void* p = std::malloc(n == 0 ? 1 : n);
    OXM_CHECK(p != nullptr, OutOfMemory, "host-memory test device: out of pinned memory allocating ", n, " bytes");
    ++pinned_allocations;
    pinned_bytes += static_cast<int64_t>(n);
    return p;
  }
  void deallocate_pinned_host(void* p, size_t n) noexcept override {
    bool waited = false;
    {
      std::lock_guard<std::mutex> lock(queue_mu_);
      for (const QueuedCopy& c : queue_)
        if (static_cast<const char*>(c.src) < static_cast<char*>(p) + n &&
            static_cast<char*>(p) < static_cast<const char*>(c.src) + c.n)
          waited = true;
    }
    if (waited) ++pinned_frees_after_queued_copy;
    run_queue();
    ++pinned_frees;
    pinned_bytes -= static_cast<int64_t>(n);
    std::free(p);
  }
  void copy_from_pinned_host(void* dst, const void* src, size_t n) override {
    refuse_in_capture("copy_from_pinned_host", "copies host memory to the device");
    ++async_host_to_device;
    if (trace) std::fprintf(stderr, "  h2d async %zu bytes\n", n);
    std::lock_guard<std::mutex> lock(queue_mu_);
    queue_.push_back({dst, src, n});
  }
  void synchronize() override {
    refuse_in_capture("synchronize", "waits for the device");
    run_queue();
  }
  // Whether it tells oxmera that its memory is CUDA memory: only for a library that works on host memory too (the
  // test NCCL, tests/distributed/fake_nccl.cpp); a real NCCL would fail on it.
  bool memory_is_cuda() const override { return claims_cuda_memory; }
  std::atomic<bool> claims_cuda_memory{false};
  // Each process its own device, unless a test makes every process's the same one (ranks sharing a GPU).
  std::string device_identity() override {
    return share_identity ? "host-memory test device (shared)"
                          : "host-memory test device of process " + std::to_string(getpid());
  }
  std::atomic<bool> share_identity{false};
  // A library handed this "stream" (the test NCCL) runs its work at once, after the copies queued before it.
  void* native_stream() override {
    refuse_in_capture("native_stream", "hands the stream to another library");
    run_queue();
    return nullptr;
  }
  // CUDA graphs, as the CUDA backend captures them: while capturing, a kernel is recorded (with a copy of its
  // tensors' geometry and data pointers, as a GPU launch captures its arguments) instead of run, and a replay runs
  // the records in order. Allocations come from the capture's pool (fake_device.hpp's deallocate keeps a pool block
  // reserved until the graph goes). Transfers and waits are refused; of the fused ops only the optimizer steps,
  // scans and the small linear algebra are offered while capturing (the others' call structs hold borrowed tensors
  // that are gone by the replay, and copying each kind is not worth it here: their composite fallbacks run
  // instead, as ordinary kernels).
  bool can_capture() const override { return offer_graphs; }
  void begin_capture() override {
    run_queue();
    pool_ = std::make_unique<Pool>();
    recorded_.clear();
    capturing_ = true;
  }
  void* end_capture() override {
    capturing_ = false;
    auto* g = new Graph{std::move(recorded_), std::move(pool_)};
    recorded_.clear();
    ++graphs_captured;
    return g;
  }
  void abort_capture() noexcept override {
    capturing_ = false;
    recorded_.clear();
    if (pool_) release_pool(*pool_);
    pool_.reset();
  }
  void replay(void* graph) override {
    ++graph_replays;
    for (const auto& work : static_cast<Graph*>(graph)->work) work();
  }
  void destroy_graph(void* graph) noexcept override {
    auto* g = static_cast<Graph*>(graph);
    g->work.clear();
    release_pool(*g->pool);
    delete g;
  }
  bool offer_graphs = true;
  std::atomic<int64_t> graphs_captured{0}, graph_replays{0};
  // Blocks of live graphs' pools (reserved until their graph is destroyed).
  size_t pool_blocks() const { return pool_owner_.size(); }

  // Copies queued by copy_from_pinned_host and not yet run.
  size_t queued_copies() {
    std::lock_guard<std::mutex> lock(queue_mu_);
    return queue_.size();
  }
  void copy_from_host(void* dst, const void* src, size_t n) override {
    refuse_in_capture("copy_from_host", "copies host memory to the device");
    run_queue();
    ++host_to_device;
    if (trace) std::fprintf(stderr, "  h2d %zu bytes\n", n);
    std::memcpy(dst, src, n);
  }
  void copy_constant_from_host(void* dst, const void* src, size_t n) override {
    if (!capturing_) return copy_from_host(dst, src, n);
    auto copy = std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + n);
    record("constant upload", [dst, copy] { std::memcpy(dst, copy->data(), copy->size()); });
  }
  void copy_to_host(void* dst, const void* src, size_t n) override {
    refuse_in_capture("copy_to_host", "reads device memory on the host");
    run_queue();
    ++device_to_host;
    if (trace) std::fprintf(stderr, "  d2h %zu bytes\n", n);
    std::memcpy(dst, src, n);
  }
  MemoryStats memory_stats() const override {
    MemoryStats s;
    s.allocated_bytes = s.reserved_bytes = allocated_.load();
    s.system_allocations = allocations_.load();
    return s;
  }
  void empty_cache() override {}

  // Kernels: the memory is host memory, so the CPU backend's kernels run on it as they are.
  void unary(ops::UnaryOp op, const d::TensorImpl& x, d::TensorImpl& out, const ops::OpParams& p) override {
    if (capturing_) return record(__func__, [op, p, xs = snap(x), os = snap(out)] { cpu().unary(op, *xs, *os, p); });
    note_kernel(__func__);
    cpu().unary(op, x, out, p);
  }
  void binary(ops::BinaryOp op, const d::TensorImpl& a, const d::TensorImpl& b, d::TensorImpl& out) override {
    if (capturing_)
      return record(__func__, [op, as = snap(a), bs = snap(b), os = snap(out)] { cpu().binary(op, *as, *bs, *os); });
    note_kernel(__func__);
    cpu().binary(op, a, b, out);
  }
  void binary_scalar(ops::BinaryOp op, const d::TensorImpl& t, double s, bool left, d::TensorImpl& out) override {
    if (capturing_)
      return record(__func__,
                    [op, s, left, ts = snap(t), os = snap(out)] { cpu().binary_scalar(op, *ts, s, left, *os); });
    note_kernel(__func__);
    cpu().binary_scalar(op, t, s, left, out);
  }
  void binary_grad(ops::BinaryOp op, int side, const d::TensorImpl& g, const d::TensorImpl& a, const d::TensorImpl& b,
                   d::TensorImpl& out) override {
    if (capturing_)
      return record(__func__, [op, side, gs = snap(g), as = snap(a), bs = snap(b), os = snap(out)] {
        cpu().binary_grad(op, side, *gs, *as, *bs, *os);
      });
    note_kernel(__func__);
    cpu().binary_grad(op, side, g, a, b, out);
  }
  void unary_grad(ops::UnaryOp op, const d::TensorImpl& g, const d::TensorImpl& x, const d::TensorImpl& y,
                  d::TensorImpl& out, const ops::OpParams& p) override {
    if (capturing_)
      return record(__func__, [op, p, gs = snap(g), xs = snap(x), ys = snap(y), os = snap(out)] {
        cpu().unary_grad(op, *gs, *xs, *ys, *os, p);
      });
    note_kernel(__func__);
    cpu().unary_grad(op, g, x, y, out, p);
  }
  void where(const d::TensorImpl& m, const d::TensorImpl& a, const d::TensorImpl& b, d::TensorImpl& out) override {
    if (capturing_)
      return record(__func__,
                    [ms = snap(m), as = snap(a), bs = snap(b), os = snap(out)] { cpu().where(*ms, *as, *bs, *os); });
    note_kernel(__func__);
    cpu().where(m, a, b, out);
  }
  void copy(const d::TensorImpl& src, d::TensorImpl& dst) override {
    if (capturing_) return record(__func__, [ss = snap(src), ds = snap(dst)] { cpu().copy(*ss, *ds); });
    note_kernel(__func__);
    cpu().copy(src, dst);
  }
  void fill(d::TensorImpl& dst, double v) override {
    if (capturing_) return record(__func__, [v, ds = snap(dst)] { cpu().fill(*ds, v); });
    note_kernel(__func__);
    cpu().fill(dst, v);
  }
  void reduce(ops::ReduceOp op, const d::TensorImpl& x, d::TensorImpl& out, uint64_t mask) override {
    if (capturing_)
      return record(__func__, [op, mask, xs = snap(x), os = snap(out)] { cpu().reduce(op, *xs, *os, mask); });
    note_kernel(__func__);
    cpu().reduce(op, x, out, mask);
  }
  bool arg_reduce(ops::ArgReduceOp op, const d::TensorImpl& x, d::TensorImpl& out, int64_t dim) override {
    // Its answer (whether a NaN was met) is read on the host, as the CUDA kernel's flag is.
    refuse_in_capture(op == ops::ArgReduceOp::Argmax ? "argmax" : "argmin", "reads device memory on the host");
    note_kernel(__func__);
    return cpu().arg_reduce(op, x, out, dim);
  }
  void softmax(const d::TensorImpl& x, d::TensorImpl& out, int64_t dim, bool log) override {
    if (capturing_)
      return record(__func__, [dim, log, xs = snap(x), os = snap(out)] { cpu().softmax(*xs, *os, dim, log); });
    note_kernel(__func__);
    cpu().softmax(x, out, dim, log);
  }
  void matmul(const d::TensorImpl& a, const d::TensorImpl& b, d::TensorImpl& out) override {
    if (capturing_)
      return record(__func__, [as = snap(a), bs = snap(b), os = snap(out)] { cpu().matmul(*as, *bs, *os); });
    note_kernel(__func__);
    cpu().matmul(a, b, out);
  }
  void index_select(const d::TensorImpl& x, int64_t dim, const d::TensorImpl& idx, d::TensorImpl& out) override {
    ++index_kernel_calls;
    if (capturing_)
      return record(__func__,
                    [dim, xs = snap(x), is = snap(idx), os = snap(out)] { cpu().index_select(*xs, dim, *is, *os); });
    note_kernel(__func__);
    cpu().index_select(x, dim, idx, out);
  }
  void index_add(d::TensorImpl& out, int64_t dim, const d::TensorImpl& idx, const d::TensorImpl& src) override {
    ++index_kernel_calls;
    if (capturing_)
      return record(__func__,
                    [dim, os = snap(out), is = snap(idx), ss = snap(src)] { cpu().index_add(*os, dim, *is, *ss); });
    note_kernel(__func__);
    cpu().index_add(out, dim, idx, src);
  }
  void gather(const d::TensorImpl& x, int64_t dim, const d::TensorImpl& idx, d::TensorImpl& out) override {
    if (capturing_)
      return record(__func__,
                    [dim, xs = snap(x), is = snap(idx), os = snap(out)] { cpu().gather(*xs, dim, *is, *os); });
    note_kernel(__func__);
    cpu().gather(x, dim, idx, out);
  }
  void scatter_add(d::TensorImpl& out, int64_t dim, const d::TensorImpl& idx, const d::TensorImpl& src) override {
    if (capturing_)
      return record(__func__,
                    [dim, os = snap(out), is = snap(idx), ss = snap(src)] { cpu().scatter_add(*os, dim, *is, *ss); });
    note_kernel(__func__);
    cpu().scatter_add(out, dim, idx, src);
  }
  // Fused ops: what the CPU backend offers (cross entropy, optimizer steps, im2col / col2im) is forwarded to it,
  // the optimizer steps as one kernel for the whole list (as the CUDA backend launches up to 24 parameters
  // at once); the small linear algebra runs the CUDA kernels' per-matrix functions. With offer_fused false the
  // device offers nothing, so every fused op takes its composite fallback (ordinary kernels only).
  bool supports(const ops::FusedCall& call) const override {
    if (!offer_fused) return false;
    if (capturing_ && !offered_while_capturing(ops::fused_op(call))) return false;
    switch (ops::fused_op(call)) {
      case ops::FusedOp::LogdetSpd:
        return small_linalg(std::get<ops::LogdetSpdCall>(call).a->dtype, std::get<ops::LogdetSpdCall>(call).n);
      case ops::FusedOp::CholeskySpd:
        return small_linalg(std::get<ops::CholeskySpdCall>(call).a->dtype, std::get<ops::CholeskySpdCall>(call).n);
      case ops::FusedOp::SolveTriangularSmall: {
        const auto& c = std::get<ops::SolveTriangularSmallCall>(call);
        return small_linalg(c.t->dtype, c.n) && c.k >= 1;
      }
      case ops::FusedOp::Scan:
        return scan_sort_dtype(std::get<ops::ScanCall>(call).x->dtype);
      case ops::FusedOp::CumprodBackward:
        return std::get<ops::CumprodBackwardCall>(call).x->dtype == DType::F32;
      case ops::FusedOp::SortIndices:
        return scan_sort_dtype(std::get<ops::SortIndicesCall>(call).x->dtype);
      case ops::FusedOp::DropoutMask: {
        const auto& c = std::get<ops::DropoutMaskCall>(call);
        return (c.mask->dtype == DType::F32 || c.mask->dtype == DType::F64) && c.mask->contiguous;
      }
      case ops::FusedOp::IndexCheck:
        return std::get<ops::IndexCheckCall>(call).kernel_takes();
      case ops::FusedOp::TensorListNorm: {  // CUDA's conditions (f32, contiguous)
        const auto& c = std::get<ops::TensorListNormCall>(call);
        return f32_list(c.tensors, c.count) && c.out->dtype == DType::F32 && c.out->contiguous &&
               c.out->numel == static_cast<int64_t>(c.count);
      }
      case ops::FusedOp::TensorListScale: {
        const auto& c = std::get<ops::TensorListScaleCall>(call);
        return f32_list(c.tensors, c.count);
      }
      case ops::FusedOp::Attention:  // as the CUDA backend: no kernels, so attention takes the composite
      case ops::FusedOp::AttentionBackward:
        return false;
      default:
        if (is_nn_op(ops::fused_op(call))) return offer_nn && d::nn_kernel_takes(call);  // CUDA's offer and code
        return cpu().supports(call);
    }
  }
  void run(ops::FusedCall& call) override {
    ++fused_kernel_calls;
    switch (ops::fused_op(call)) {
      case ops::FusedOp::LogdetSpd:
        return logdet_spd(std::get<ops::LogdetSpdCall>(call));
      case ops::FusedOp::CholeskySpd:
        return cholesky_spd(std::get<ops::CholeskySpdCall>(call));
      case ops::FusedOp::SolveTriangularSmall:
        return solve_triangular_small(std::get<ops::SolveTriangularSmallCall>(call));
      case ops::FusedOp::Scan:
        if (capturing_) {
          const auto& c = std::get<ops::ScanCall>(call);
          return record("scan", [this, c, xs = snap(*c.x), os = snap(*c.out)] {
            ops::FusedCall again = ops::ScanCall{xs.get(), os.get(), c.rows, c.product, c.reverse};
            scan_sort(again);
          });
        }
        [[fallthrough]];
      case ops::FusedOp::CumprodBackward:
      case ops::FusedOp::SortIndices:
        return scan_sort(call);
      case ops::FusedOp::DropoutMask: {
        // The CUDA kernel's code (philox.hpp) on host memory; recorded while capturing, reading the state at replay.
        const auto& c = std::get<ops::DropoutMaskCall>(call);
        auto run_mask = [c](d::TensorImpl* mask, const d::TensorImpl* state) {
          const auto seed = static_cast<uint64_t>(state->ptr<int64_t>()[0]);
          const auto offset = static_cast<uint64_t>(state->ptr<int64_t>()[1]);
          if (mask->dtype == DType::F32)
            d::dropout_mask_host(seed, offset, mask->numel, c.p, c.scale, mask->ptr<float>());
          else
            d::dropout_mask_host(seed, offset, mask->numel, c.p, c.scale, mask->ptr<double>());
        };
        if (capturing_)
          return record("dropout_mask",
                        [run_mask, ms = snap(*c.mask), ss = snap(*c.state)] { run_mask(ms.get(), ss.get()); });
        note_kernel("dropout_mask");
        return run_mask(c.mask, c.state);
      }
      case ops::FusedOp::OptimizerSteps:
        if (capturing_) return record_optimizer_steps(std::get<ops::OptimizerStepsCall>(call));
        note_kernel("optimizer_steps");
        if (fail_next_optimizer_steps) {
          fail_next_optimizer_steps = false;
          OXM_FAIL(Backend, "host-memory test device: optimizer_steps failed on request");
        }
        return cpu().run(call);
      case ops::FusedOp::TensorListNorm: {  // the CUDA kernel's terms (optim_math.hpp), summed in f64 per tensor
        const auto& c = std::get<ops::TensorListNormCall>(call);
        note_kernel("tensor_list_norm");
        const int kind = d::optim_math::norm_kind(c.norm_type);
        for (size_t i = 0; i < c.count; ++i) {
          double acc = 0;
          const float* x = c.tensors[i]->ptr<float>();
          for (int64_t e = 0; e < c.tensors[i]->numel; ++e) {
            const double v = d::optim_math::norm_term(x[e], kind, static_cast<float>(c.norm_type));
            acc = kind == 3 ? d::optim_math::nan_max(acc, v) : acc + v;
          }
          c.out->ptr<float>()[i] = static_cast<float>(acc);
        }
        return;
      }
      case ops::FusedOp::TensorListScale: {
        const auto& c = std::get<ops::TensorListScaleCall>(call);
        note_kernel("tensor_list_scale");
        for (size_t i = 0; i < c.count; ++i) {
          float* x = c.tensors[i]->ptr<float>();
          for (int64_t e = 0; e < c.tensors[i]->numel; ++e) x[e] *= static_cast<float>(c.scale);
        }
        return;
      }
      case ops::FusedOp::IndexCheck: {
        // The CUDA kernel's code (index_check_at, spd_math.hpp) and its atomic min, recorded while capturing.
        auto check = [](const ops::IndexCheckCall& c) {
          int64_t& word = c.report.first->ptr<int64_t>()[0];
          const int64_t* in = c.index->ptr<int64_t>();
          int64_t* out = c.safe->ptr<int64_t>();
          for (int64_t i = 0; i < c.index->numel; ++i) {
            int64_t key;
            bool counts;
            out[i] = d::index_check_at(in[i], c.size, c.report.tag, i, c.ignore, &key, &counts);
            word = std::min(word, key);
            if (c.kept && counts) ++c.kept->ptr<int64_t>()[0];
          }
        };
        const auto& c = std::get<ops::IndexCheckCall>(call);
        OXM_CHECK(c.report.first != nullptr, Backend, "host-memory test device: index check without a report word");
        if (capturing_)
          return record("index_check", [check, c, is = snap(*c.index), ss = snap(*c.safe), ws = snap(*c.report.first),
                                        ks = c.kept ? snap(*c.kept) : Snap()] {
            ops::IndexCheckCall again = c;
            again.index = is.get();
            again.safe = ss.get();
            again.report.first = ws.get();
            again.kept = ks.get();
            check(again);
          });
        note_kernel("index_check");
        return check(c);
      }
      default:
        if (is_nn_op(ops::fused_op(call))) return nn_kernel(call);
        note_kernel(ops::fused_op_name(ops::fused_op(call)));
        return cpu().run(call);
    }
  }

  std::atomic<int64_t> linalg_kernel_calls{0}, index_kernel_calls{0}, fused_kernel_calls{0};
  // Every kernel (one launch or more on a GPU) and every transfer, for launch-count tests.
  std::atomic<int64_t> kernel_calls{0}, host_to_device{0}, device_to_host{0};
  bool trace = false;                      // print each kernel and transfer to stderr (to find launches to save)
  bool fail_next_optimizer_steps = false;  // the next optimizer_steps throws Backend before updating anything
  // false: supports() is false for every fused op (the environment variable OXMERA_TEST_DEVICE_NO_FUSED sets it
  // for a whole run, as the cuda_suite_on_test_device_without_fused_ops ctest does).
  bool offer_fused = std::getenv("OXMERA_TEST_DEVICE_NO_FUSED") == nullptr;
  // false: the nn ops (cells, layer norm, softmax's gradient, max pooling) take their composites, as on the CUDA
  // backend before it had kernels for them; the other fused ops are still offered.
  bool offer_nn = true;
  // false: the device cannot pin host memory (can_pin_host), as a backend without a DMA path.
  bool offer_pinned = true;
  // Pinned blocks allocated and freed, bytes outstanding; copies from pinned memory queued (non_blocking);
  // frees of a pinned block a queued copy still read (the queue ran first).
  std::atomic<int64_t> pinned_allocations{0}, pinned_frees{0}, pinned_bytes{0}, async_host_to_device{0},
      pinned_frees_after_queued_copy{0};

 private:
  static bool f32_list(const d::TensorImpl* const* ts, size_t count) {
    for (size_t i = 0; i < count; ++i)
      if (ts[i]->dtype != DType::F32 || !ts[i]->contiguous) return false;
    return true;
  }
  static bool small_linalg(DType dtype, int64_t n) { return dtype == DType::F32 && n >= 1 && n <= d::kSpdMaxN; }
  static bool offered_while_capturing(ops::FusedOp op) {
    return op == ops::FusedOp::OptimizerSteps || op == ops::FusedOp::Scan || op == ops::FusedOp::LogdetSpd ||
           op == ops::FusedOp::CholeskySpd || op == ops::FusedOp::SolveTriangularSmall ||
           op == ops::FusedOp::DropoutMask || op == ops::FusedOp::IndexCheck || is_nn_op(op);
  }
  // The CUDA backend's nn kernels (src/backend/cuda/cuda_nn.cu): the test device runs their per-element and per-row
  // functions (nn_math.hpp) on host memory, a warp's lanes in reverse order, and records them while capturing.
  static bool is_nn_op(ops::FusedOp op) { return d::nn_kernel_op(op); }
  template <class F>
  static void rebind_call(ops::SoftmaxBackwardCall& c, F rebind) {
    rebind(c.y), rebind(c.g), rebind(c.grad_x);
  }
  template <class F>
  static void rebind_call(ops::LayerNormCall& c, F rebind) {
    rebind(c.x), rebind(c.weight), rebind(c.bias), rebind(c.y), rebind(c.mean), rebind(c.rstd);
  }
  template <class F>
  static void rebind_call(ops::LayerNormBackwardCall& c, F rebind) {
    rebind(c.x), rebind(c.g), rebind(c.weight), rebind(c.mean), rebind(c.rstd), rebind(c.grad_x), rebind(c.grad_weight),
        rebind(c.grad_bias);
  }
  template <class F>
  static void rebind_call(ops::LstmCellCall& c, F rebind) {
    rebind(c.gates), rebind(c.c_prev), rebind(c.acts), rebind(c.h), rebind(c.c), rebind(c.gates_add);
  }
  template <class F>
  static void rebind_call(ops::LstmCellBackwardCall& c, F rebind) {
    rebind(c.acts), rebind(c.c_prev), rebind(c.c), rebind(c.gh), rebind(c.gc), rebind(c.grad_gates),
        rebind(c.grad_c_prev);
  }
  template <class F>
  static void rebind_call(ops::GruCellCall& c, F rebind) {
    rebind(c.gi), rebind(c.gh), rebind(c.h_prev), rebind(c.acts), rebind(c.h);
  }
  template <class F>
  static void rebind_call(ops::GruCellBackwardCall& c, F rebind) {
    rebind(c.acts), rebind(c.h_prev), rebind(c.g), rebind(c.grad_gi), rebind(c.grad_gh), rebind(c.grad_h_prev);
  }
  template <class F>
  static void rebind_call(ops::RnnCellCall& c, F rebind) {
    rebind(c.xt), rebind(c.hh), rebind(c.h);
  }
  template <class F>
  static void rebind_call(ops::MaxPool2dCall& c, F rebind) {
    rebind(c.x), rebind(c.out), rebind(c.indices);
  }
  template <class F>
  static void rebind_call(ops::MaxPool2dBackwardCall& c, F rebind) {
    rebind(c.g), rebind(c.indices), rebind(c.grad_x);
  }
  void nn_kernel(ops::FusedCall& call) {
    const char* what = ops::fused_op_name(ops::fused_op(call));
    if (capturing_) {
      std::vector<std::shared_ptr<d::TensorImpl>> keep;
      ops::FusedCall again = call;
      auto rebind = [&keep](auto*& t) {
        if (t == nullptr) return;
        keep.push_back(snap(*t));
        t = keep.back().get();
      };
      std::visit(
          [&](auto& c) {
            if constexpr (requires { rebind_call(c, rebind); }) rebind_call(c, rebind);
          },
          again);
      return record(what, [again, keep] { run_nn_on_host(again); });
    }
    note_kernel(what);
    run_nn_on_host(call);
  }
  static const float* fp(const d::TensorImpl* t) { return t ? t->ptr<float>() : nullptr; }
  static float* fm(d::TensorImpl* t) { return t ? t->ptr<float>() : nullptr; }
  // What cuda_nn.cu's kernels do, element by element and row by row (f32).
  static void run_nn_on_host(const ops::FusedCall& call) {
    const d::SequentialLanes lanes{true};
    switch (ops::fused_op(call)) {
      case ops::FusedOp::LstmCell: {
        const auto& c = std::get<ops::LstmCellCall>(call);
        for (int64_t b = 0; b < c.batch; ++b)
          for (int64_t j = 0; j < c.hidden; ++j)
            d::lstm_cell_at<float>(fp(c.gates), fp(c.gates_add), fp(c.c_prev), c.hidden, b, j, fm(c.acts), fm(c.h),
                                   fm(c.c));
        return;
      }
      case ops::FusedOp::LstmCellBackward: {
        const auto& c = std::get<ops::LstmCellBackwardCall>(call);
        for (int64_t b = 0; b < c.batch; ++b)
          for (int64_t j = 0; j < c.hidden; ++j)
            d::lstm_cell_backward_at<float>(fp(c.acts), fp(c.c_prev), fp(c.c), fp(c.gh), fp(c.gc), c.hidden, b, j,
                                            fm(c.grad_gates), fm(c.grad_c_prev));
        return;
      }
      case ops::FusedOp::GruCell: {
        const auto& c = std::get<ops::GruCellCall>(call);
        for (int64_t b = 0; b < c.batch; ++b)
          for (int64_t j = 0; j < c.hidden; ++j)
            d::gru_cell_at<float>(fp(c.gi), fp(c.gh), fp(c.h_prev), c.hidden, b, j, fm(c.acts), fm(c.h));
        return;
      }
      case ops::FusedOp::GruCellBackward: {
        const auto& c = std::get<ops::GruCellBackwardCall>(call);
        for (int64_t b = 0; b < c.batch; ++b)
          for (int64_t j = 0; j < c.hidden; ++j)
            d::gru_cell_backward_at<float>(fp(c.acts), fp(c.h_prev), fp(c.g), c.hidden, b, j, fm(c.grad_gi),
                                           fm(c.grad_gh), fm(c.grad_h_prev));
        return;
      }
      case ops::FusedOp::RnnCell: {
        const auto& c = std::get<ops::RnnCellCall>(call);
        for (int64_t i = 0; i < c.count; ++i) fm(c.h)[i] = d::rnn_cell_at<float>(fp(c.xt)[i], fp(c.hh)[i], c.relu);
        return;
      }
      case ops::FusedOp::LayerNorm: {
        const auto& c = std::get<ops::LayerNormCall>(call);
        const int64_t n = c.n, rows = c.x->numel / n;
        for (int64_t r = 0; r < rows; ++r)
          d::layer_norm_row(lanes, fp(c.x) + r * n, fp(c.weight), fp(c.bias), n, c.eps, fm(c.y) + r * n, fm(c.mean) + r,
                            fm(c.rstd) + r);
        return;
      }
      case ops::FusedOp::LayerNormBackward: {
        const auto& c = std::get<ops::LayerNormBackwardCall>(call);
        const int64_t n = c.n, rows = c.x->numel / n;
        for (int64_t r = 0; r < rows; ++r)
          d::layer_norm_backward_row(lanes, fp(c.x) + r * n, fp(c.g) + r * n, fp(c.weight), fp(c.mean)[r],
                                     fp(c.rstd)[r], n, fm(c.grad_x) + r * n);
        const int64_t chunks = (rows + d::kLayerNormRowChunk - 1) / d::kLayerNormRowChunk;
        for (int64_t j = 0; j < n; ++j) {
          double sw = 0, sb = 0;
          for (int64_t k = 0; k < chunks; ++k) {
            double pw, pb;
            d::layer_norm_param_partial(fp(c.x), fp(c.g), fp(c.mean), fp(c.rstd), n, rows, k, j, &pw, &pb);
            sw += pw;
            sb += pb;
          }
          if (c.grad_weight) fm(c.grad_weight)[j] = static_cast<float>(sw);
          if (c.grad_bias) fm(c.grad_bias)[j] = static_cast<float>(sb);
        }
        return;
      }
      case ops::FusedOp::SoftmaxBackward: {
        const auto& c = std::get<ops::SoftmaxBackwardCall>(call);
        const int64_t n = c.y->shape.empty() ? 1 : c.y->shape.back();
        if (c.y->numel == 0 || n == 0) return;
        for (int64_t r = 0; r < c.y->numel / n; ++r)
          d::softmax_backward_row(lanes, fp(c.y) + r * n, fp(c.g) + r * n, n, c.log, fm(c.grad_x) + r * n);
        return;
      }
      case ops::FusedOp::MaxPool2d: {
        const auto& c = std::get<ops::MaxPool2dCall>(call);
        const d::TensorImpl& x = *c.x;
        const d::ConvGeometry& g = c.geometry;
        const int64_t planes = x.shape[0] * x.shape[1], C = x.shape[1];
        for (int64_t p = 0; p < planes; ++p)
          for (int64_t y = 0; y < g.oh; ++y)
            for (int64_t z = 0; z < g.ow; ++z) {
              const int64_t e = (p * g.oh + y) * g.ow + z;
              d::max_pool_window(fp(&x) + (p / C) * x.strides[0] + (p % C) * x.strides[1], x.strides[2], x.strides[3],
                                 x.shape[2], x.shape[3], g, y, z, fm(c.out) + e, c.indices->ptr<int64_t>() + e);
            }
        return;
      }
      case ops::FusedOp::MaxPool2dBackward: {
        const auto& c = std::get<ops::MaxPool2dBackwardCall>(call);
        const int64_t H = c.grad_x->shape[2], W = c.grad_x->shape[3], plane = H * W;
        const int64_t plane_out = c.geometry.oh * c.geometry.ow;
        float* gx = fm(c.grad_x);
        for (int64_t e = 0; e < c.grad_x->numel; ++e) {
          const int64_t p = e / plane, l = e % plane;
          gx[e] = d::max_pool_backward_at(fp(c.g) + p * plane_out, c.indices->ptr<int64_t>() + p * plane_out, W,
                                          c.geometry, l / W, l % W, c.zero_first ? 0.f : gx[e]);
        }
        return;
      }
      default:
        OXM_FAIL(Backend, "host-memory test device: ", ops::fused_op_name(ops::fused_op(call)), " is not an nn kernel");
    }
  }
  // Small linear algebra: the CUDA kernels' per-matrix functions (a warp's lanes run one after another, in reverse
  // order), one matrix (or column) at a time, reporting as
  // the CUDA kernels do (ops::SpdReport: per-matrix info, the first-failure word's atomic min; else `fail`, which
  // the CUDA backend reads back with a wait). While capturing they are recorded like any kernel; a call that wants
  // its answer on the host at once (empty report) is refused then, as on CUDA.
  template <class Call>
  static void report(Call& c, int64_t b, int pivot, double value) {
    if (c.report.info) c.report.info->template ptr<int64_t>()[b] = pivot < 0 ? 0 : pivot + 1;
    if (pivot < 0) return;
    if (c.report.first) {
      int64_t& word = c.report.first->template ptr<int64_t>()[0];
      word = std::min(word, d::spd_failure_key(c.report.tag, b, pivot));
    }
    if (c.report.empty() && c.fail.batch < 0) c.fail = {b, pivot, value};
  }
  template <class Call, class Run>
  void spd_kernel(Call& c, const char* what, Run run) {
    if (capturing_) {
      if (c.report.empty()) refuse_in_capture(what, "reads its failure flags on the host");
      // The tensors' geometry and pointers as a launch captures them; the replay runs a copy of the call on them.
      std::vector<std::shared_ptr<d::TensorImpl>> keep;
      Call again = c;
      auto rebind = [&keep](auto*& t) {
        if (t == nullptr) return;
        keep.push_back(snap(*t));
        t = keep.back().get();
      };
      rebind_call(again, rebind);
      return record(what, [again, keep, run] {
        Call c = again;
        run(c);
      });
    }
    ++linalg_kernel_calls;
    note_kernel(what);
    c.fail = {};
    run(c);
  }
  template <class F>
  static void rebind_call(ops::LogdetSpdCall& c, F rebind) {
    rebind(c.a), rebind(c.logdet), rebind(c.inverse), rebind(c.report.info), rebind(c.report.first);
  }
  template <class F>
  static void rebind_call(ops::CholeskySpdCall& c, F rebind) {
    rebind(c.a), rebind(c.L), rebind(c.report.info), rebind(c.report.first);
  }
  template <class F>
  static void rebind_call(ops::SolveTriangularSmallCall& c, F rebind) {
    rebind(c.t), rebind(c.x), rebind(c.report.info), rebind(c.report.first);
  }
  void logdet_spd(ops::LogdetSpdCall& call) {
    spd_kernel(call, "logdet_spd", [](ops::LogdetSpdCall& c) {
      const int64_t n = c.n;
      std::vector<double> tile(d::kSpdWarpTile);
      const d::SequentialWarp w{true};
      for (int64_t b = 0; b < c.count; ++b) {
        const d::SpdPivot p = d::spd_warp_logdet_inverse(w, c.a->ptr<float>() + b * n * n, static_cast<int>(n),
                                                         tile.data(), c.logdet->ptr<float>() + b,
                                                         c.inverse ? c.inverse->ptr<float>() + b * n * n : nullptr);
        report(c, b, p.pivot, p.value);
      }
    });
  }
  void cholesky_spd(ops::CholeskySpdCall& call) {
    spd_kernel(call, "cholesky_spd", [](ops::CholeskySpdCall& c) {
      const int64_t n = c.n;
      std::vector<double> tile(d::kSpdWarpTile);
      const d::SequentialWarp w{true};
      for (int64_t b = 0; b < c.count; ++b) {
        const d::SpdPivot p = d::spd_warp_cholesky(w, c.a->ptr<float>() + b * n * n, static_cast<int>(n), tile.data(),
                                                   c.L->ptr<float>() + b * n * n);
        report(c, b, p.pivot, p.value);
      }
    });
  }
  void solve_triangular_small(ops::SolveTriangularSmallCall& call) {
    spd_kernel(call, "solve_triangular_small", [](ops::SolveTriangularSmallCall& c) {
      const int64_t n = c.n, k = c.k;
      std::vector<double> work(static_cast<size_t>(n));
      for (int64_t b = 0; b < c.count; ++b) {
        int pivot = -1;
        for (int64_t col = 0; col < k; ++col) {
          const int row = d::tri_solve_column(c.t->ptr<float>() + b * n * n, static_cast<int>(n),
                                              c.x->ptr<float>() + b * n * k + col, k, c.upper, work.data());
          if (col == 0) pivot = row;
        }
        report(c, b, pivot, 0.0);
      }
    });
  }
  // Scans and sort indices (f32, i64 as on CUDA): the CUDA kernels' per-row functions, one row at a time.
  static bool scan_sort_dtype(DType dtype) { return dtype == DType::F32 || dtype == DType::I64; }
  template <class F>
  static void each_row(const ops::RowsAlongDim& r, F f) {
    for (int64_t row = 0; row < r.outer * r.inner; ++row) f((row / r.inner) * r.n * r.inner + row % r.inner);
  }
  template <class T>
  void scan_sort_typed(ops::FusedCall& call) {
    if (auto* c = std::get_if<ops::ScanCall>(&call))
      each_row(c->rows, [&](int64_t b) {
        d::scan_row(c->x->ptr<T>() + b, c->out->ptr<T>() + b, c->rows.n, c->rows.inner, c->product, c->reverse);
      });
    if (auto* c = std::get_if<ops::CumprodBackwardCall>(&call))
      each_row(c->rows, [&](int64_t b) {
        d::cumprod_backward_row(c->x->ptr<T>() + b, c->g->ptr<T>() + b, c->grad_x->ptr<T>() + b, c->rows.n,
                                c->rows.inner);
      });
    if (auto* c = std::get_if<ops::SortIndicesCall>(&call))
      each_row(c->rows, [&](int64_t b) {
        d::insertion_sort_row(c->x->ptr<T>() + b, c->indices->ptr<int64_t>() + b, c->rows.n, c->rows.inner,
                              c->descending);
      });
  }
  void scan_sort(ops::FusedCall& call) {
    note_kernel(ops::fused_op_name(ops::fused_op(call)));
    DType dt = DType::F32;
    if (auto* c = std::get_if<ops::ScanCall>(&call)) dt = c->x->dtype;
    if (auto* c = std::get_if<ops::SortIndicesCall>(&call)) dt = c->x->dtype;
    if (dt == DType::I64 && !std::holds_alternative<ops::CumprodBackwardCall>(call))
      scan_sort_typed<int64_t>(call);
    else
      scan_sort_typed<float>(call);
  }
  // A kernel argument as a GPU launch captures it: the tensor's geometry and data pointer, not the tensor (whose
  // block the capture's pool keeps). The alias owns a Storage object that does not own the memory. A 0-d host tensor
  // (a scalar operand, which the CUDA backend passes to its kernel by value) is copied: the launch holds its value,
  // and the host tensor may be gone by the replay.
  using Snap = std::shared_ptr<d::TensorImpl>;
  static Snap snap(const d::TensorImpl& t) {
    d::TensorImpl* c = d::new_impl();
    auto* st = new d::Storage();
    const bool by_value = t.storage->device.is_cpu();
    st->data = t.storage->data;
    st->nbytes = t.storage->nbytes;
    st->device = t.storage->device;
    if (by_value) {
      st->data = std::malloc(t.storage->nbytes == 0 ? 1 : t.storage->nbytes);
      if (st->data == nullptr) throw std::bad_alloc();
      if (t.storage->nbytes) std::memcpy(st->data, t.storage->data, t.storage->nbytes);
    }
    c->storage = d::Ref<d::Storage>::adopt(st);
    c->shape = t.shape;
    c->strides = t.strides;
    c->offset = t.offset;
    c->numel = t.numel;
    c->dtype = t.dtype;
    c->contiguous = t.contiguous;
    return Snap(c, [by_value](d::TensorImpl* p) {
      if (by_value) std::free(p->storage->data);
      p->storage->data = nullptr;  // ours freed above when copied; else not ours to free
      d::destroy(p);
    });
  }
  template <class F>
  void record(const char* what, F work) {
    recorded_.push_back([this, what, work = std::move(work)] {
      note_kernel(what);
      work();
    });
  }
  void record_optimizer_steps(const ops::OptimizerStepsCall& c) {
    struct Item {
      d::OptimizerStep step;
      Snap param, grad, state[3], count;
    };
    std::vector<Item> items;
    for (size_t i = 0; i < c.count; ++i) {
      const d::OptimizerUpdate& u = c.updates[i];
      Item it{u.step, snap(*u.param), snap(*u.grad), {}, u.step_count ? snap(*u.step_count) : nullptr};
      for (int k = 0; k < 3; ++k)
        if (u.state[k]) it.state[k] = snap(*u.state[k]);
      items.push_back(std::move(it));
    }
    record("optimizer_steps", [items = std::move(items)] {
      std::vector<d::OptimizerUpdate> updates;
      for (const Item& it : items)
        updates.push_back({it.step,
                           it.param.get(),
                           it.grad.get(),
                           {it.state[0].get(), it.state[1].get(), it.state[2].get()},
                           it.count.get()});
      ops::FusedCall call = ops::OptimizerStepsCall{updates.data(), updates.size()};
      cpu().run(call);
    });
  }
  void refuse_in_capture(const char* op, const char* why) const {
    OXM_CHECK(!capturing_, InvalidArgument, "host-memory test device: ", op, ": ", why,
              " while a CUDA graph is being captured");
  }
  struct Pool {
    std::vector<std::pair<void*, size_t>> blocks;
    std::vector<std::pair<void*, size_t>> kept;  // freed during the capture, allocated before it
    std::unordered_map<size_t, std::vector<void*>> free;
  };
  struct Graph {
    std::vector<std::function<void()>> work;
    std::unique_ptr<Pool> pool;
  };
  // The pool's free blocks go back to the system; its blocks still held by tensors become ordinary blocks (freed
  // when their tensors go).
  void release_pool(Pool& pool) noexcept {
    std::unordered_set<void*> free_now;
    for (auto& [n, v] : pool.free)
      for (void* p : v) free_now.insert(p);
    for (auto& [p, n] : pool.blocks) {
      pool_owner_.erase(p);
      if (free_now.count(p)) {
        allocated_ -= static_cast<int64_t>(n);
        std::free(p);
      }
    }
    for (auto& [p, n] : pool.kept) {
      allocated_ -= static_cast<int64_t>(n);
      std::free(p);
    }
    pool.blocks.clear();
    pool.free.clear();
    pool.kept.clear();
  }
  bool capturing_ = false;
  std::unique_ptr<Pool> pool_;
  std::vector<std::function<void()>> recorded_;
  std::unordered_map<void*, Pool*> pool_owner_;
  struct QueuedCopy {
    void* dst;
    const void* src;
    size_t n;
  };
  void run_queue() noexcept {
    std::lock_guard<std::mutex> lock(queue_mu_);
    for (const QueuedCopy& c : queue_) std::memcpy(c.dst, c.src, c.n);
    queue_.clear();
  }
  void note_kernel(const char* what) {
    run_queue();  // a kernel runs after the copies queued before it (one stream)
    ++kernel_calls;
    if (trace) std::fprintf(stderr, "  kernel %s\n", what);
  }
  static d::Backend& cpu() { return d::cpu_backend(); }
  std::atomic<int64_t> allocated_{0}, allocations_{0};
  std::mutex queue_mu_;
  std::vector<QueuedCopy> queue_;
};

// Registers a HostMemoryDevice for CUDA unless a backend (a real GPU) holds the slot; returns it, or nullptr.
inline HostMemoryDevice* register_host_memory_device() {
  static HostMemoryDevice* registered = [] {
    init();
    if (device_available(Device::cuda())) return static_cast<HostMemoryDevice*>(nullptr);
    auto* dev = new HostMemoryDevice();
    detail::register_backend(dev);
    return dev;
  }();
  return registered;
}

}  // namespace oxt_fake
