// oxmera::cuda::Graph: capture and replay through the device backend's graph entry points (backend.hpp), plus
// the host-side hooks a replay runs first (the optimizers' checks and step counts).
#include "oxmera/graph.hpp"

#include <atomic>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "ops/device_checks.hpp"
#include "ops/graph_capture.hpp"
#include "tensor/tensor_impl.hpp"

namespace oxmera {
namespace detail {
thread_local bool t_capture_open = false;
}  // namespace detail

namespace cuda {

struct Graph::State {
  detail::Backend* backend = nullptr;
  void* graph = nullptr;  // the backend's, after capture_end
  bool capturing = false;
  std::thread::id thread;
  std::vector<std::function<void()>> hooks;
  // Out-of-range indices clamped by the captured ops (detail::count_capture_index_errors), summed on the device;
  // allocated before the capture. Undefined until an op counts into it.
  Tensor index_errors;
  bool counts_index_errors = false;
  // Failing matrices of the captured small linear algebra (logdet, solve_triangular), read after each replay.
  detail::DeferredChecks checks;
};

namespace {
// The graph whose capture is open (one at a time: the backend has one stream).
std::atomic<Graph::State*> g_open{nullptr};
}  // namespace

Graph::Graph() : state_(std::make_unique<State>()) {}
Graph::~Graph() { reset(); }
Graph::Graph(Graph&&) noexcept = default;
Graph& Graph::operator=(Graph&& other) noexcept {
  if (this != &other) {
    reset();
    state_ = std::move(other.state_);
  }
  return *this;
}

void Graph::capture_begin(Device device) {
  OXM_CHECK(state_ != nullptr, InvalidArgument, "cuda::Graph::capture_begin: this graph was moved from");
  OXM_CHECK(!device.is_cpu(), InvalidArgument, "cuda::Graph::capture_begin: ", device,
            " is not a GPU; graphs capture the work of a CUDA device");
  OXM_CHECK(!state_->capturing && state_->graph == nullptr, InvalidArgument,
            "cuda::Graph::capture_begin: this graph already holds a ",
            state_->capturing ? "capture in progress" : "captured graph",
            "; reset() it (or use another Graph) to capture again");
  detail::Backend& be = detail::backend_for(device, "cuda::Graph::capture_begin");
  OXM_CHECK(be.can_capture(), NotImplemented, "cuda::Graph::capture_begin: the ", be.name(), " backend of ", device,
            " cannot capture graphs");
  State* expected = nullptr;
  OXM_CHECK(g_open.compare_exchange_strong(expected, state_.get()), InvalidArgument,
            "cuda::Graph::capture_begin: another graph's capture is open; end it first (one capture at a time)");
  try {
    detail::run_deferred_checks(device);  // eager checks still pending belong to work before the capture
    state_->index_errors = zeros({1}, DType::I64, device);  // before the capture: its zeros are not replayed
    state_->checks.prepare(device);
    be.begin_capture();
  } catch (...) {
    g_open.store(nullptr);
    throw;
  }
  state_->backend = &be;
  state_->capturing = true;
  state_->thread = std::this_thread::get_id();
  state_->hooks.clear();
  state_->counts_index_errors = false;
  detail::t_capture_open = true;
}

void Graph::capture_end() {
  OXM_CHECK(state_ != nullptr && state_->capturing, InvalidArgument,
            "cuda::Graph::capture_end: no capture of this graph is open (call capture_begin first)");
  OXM_CHECK(state_->thread == std::this_thread::get_id(), InvalidArgument,
            "cuda::Graph::capture_end: called from another thread than capture_begin's");
  state_->capturing = false;
  detail::t_capture_open = false;
  g_open.store(nullptr);
  try {
    state_->graph = state_->backend->end_capture();
  } catch (...) {
    state_->hooks.clear();
    throw;
  }
}

void Graph::capture_abort() noexcept {
  if (!state_ || !state_->capturing) return;
  state_->capturing = false;
  detail::t_capture_open = false;
  g_open.store(nullptr);
  state_->backend->abort_capture();
  state_->hooks.clear();
}

void Graph::replay() {
  OXM_CHECK(state_ != nullptr && state_->graph != nullptr, InvalidArgument, "cuda::Graph::replay: ",
            state_ && state_->capturing ? "the capture is still open (call capture_end first)" : "nothing captured");
  OXM_CHECK(!detail::capture_open(), InvalidArgument, "cuda::Graph::replay: a capture is open; end it first");
  for (auto& hook : state_->hooks) hook();
  state_->backend->replay(state_->graph);
  if (state_->counts_index_errors) {
    // The captured index ops count what they clamped: reading the count waits for this replay (only graphs with
    // device-checked indices pay it).
    const int64_t bad = state_->index_errors.to(Device::cpu()).item<int64_t>();
    if (bad != 0) {
      state_->index_errors.fill_(0.0);
      OXM_FAIL(IndexOutOfBounds, "cuda::Graph::replay: ", bad,
               " index value(s) were out of range in this replay (an index_select, gather, index_add or "
               "scatter_add inside the graph, e.g. an embedding lookup); they were clamped to stay inside the "
               "tensors, so this replay's results, and any parameters it updated, are wrong");
    }
  }
  if (state_->checks.size() > 0) {  // as for the index count: one wait per replay, for graphs that have checks
    const detail::DeferredChecks::Failure f = state_->checks.collect(false);
    if (f.raise)
      f.raise(f.batch, f.pivot,
              "found after cuda::Graph::replay(): this replay's results, and any parameters it updated, are NaN");
  }
}

void Graph::reset() noexcept {
  if (!state_) return;
  capture_abort();
  if (state_->graph) state_->backend->destroy_graph(state_->graph);
  state_->graph = nullptr;
  state_->hooks.clear();
  state_->index_errors = Tensor();
  state_->checks.clear();
}

bool Graph::captured() const noexcept { return state_ && state_->graph != nullptr; }

GraphCapture::GraphCapture(Graph& graph, Device device) : graph_(graph), uncaught_(std::uncaught_exceptions()) {
  graph_.capture_begin(device);
}
GraphCapture::~GraphCapture() noexcept(false) {
  if (std::uncaught_exceptions() > uncaught_) {
    graph_.capture_abort();
    return;
  }
  graph_.capture_end();
}

bool is_capturing() noexcept { return detail::capture_open(); }

}  // namespace cuda

namespace detail {
void refuse_in_capture(const char* op, const char* why) {
  OXM_CHECK(!capture_open(), InvalidArgument, op, ": ", why, " while a CUDA graph is being captured (",
            "cuda::Graph): the capture records device work only and a replay could not repeat this; do it "
            "outside the capture");
}
void count_capture_index_errors(const Tensor& count) {
  cuda::Graph::State* open = cuda::g_open.load();
  OXM_CHECK(open != nullptr, InvalidArgument, "count_capture_index_errors: no CUDA graph capture is open");
  open->index_errors.add_(count.reshape({1}));
  open->counts_index_errors = true;
}
DeferredChecks& open_capture_checks() {
  cuda::Graph::State* open = cuda::g_open.load();
  OXM_CHECK(open != nullptr, InvalidArgument, "open_capture_checks: no CUDA graph capture is open");
  return open->checks;
}
void add_replay_hook(std::function<void()> hook) {
  cuda::Graph::State* open = cuda::g_open.load();
  OXM_CHECK(open != nullptr, InvalidArgument, "add_replay_hook: no CUDA graph capture is open");
  open->hooks.push_back(std::move(hook));
}
Tensor constant_on_device(const Tensor& host, Device device) {
  if (device.is_cpu() || !capture_open()) return host.to(device);
  const Tensor src = host.contiguous();
  Tensor out = make_empty(src.shape(), src.dtype(), device, "constant_on_device");
  const size_t bytes = static_cast<size_t>(src.numel()) * itemsize(src.dtype());
  if (bytes)
    backend_for(device, "constant_on_device")
        .copy_constant_from_host(out.impl()->storage->data, src.impl()->byte_ptr(), bytes);
  return out;
}
void copy_host_into(const Tensor& dst, const void* src, size_t nbytes) {
  refuse_in_capture("copy_host_into", "copies host memory to the device");
  const TensorImpl& d = *dst.impl();
  OXM_CHECK(d.contiguous && nbytes <= static_cast<size_t>(d.numel) * itemsize(d.dtype), InvalidArgument,
            "copy_host_into: ", nbytes, " bytes do not fit the contiguous destination");
  if (nbytes) backend_for(d.device(), "copy_host_into").copy_from_host(d.byte_ptr(), src, nbytes);
}
}  // namespace detail
}  // namespace oxmera
