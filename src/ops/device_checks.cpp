// Deferred device checks (device_checks.hpp): the eager pending lists per device and the graph's captured list.
#include "ops/device_checks.hpp"

#include <atomic>
#include <mutex>
#include <utility>

#include "backend/backend.hpp"
#include "backend/common/spd_math.hpp"
#include "ops/graph_capture.hpp"
#include "tensor/tensor_impl.hpp"

namespace oxmera::detail {

void DeferredChecks::prepare(Device device) {
  word_ = full({1}, static_cast<double>(kSpdNoFailure), DType::I64, device);
  raises_.clear();
}

ops::SpdReport DeferredChecks::add(DeferredFailure raise) {
  OXM_CHECK(word_.defined(), InvalidArgument, "deferred device checks: the list has no device word yet");
  OXM_CHECK(static_cast<int64_t>(raises_.size()) < kSpdMaxTag, InvalidArgument, "deferred device checks: more than ",
            kSpdMaxTag, " checked calls in one CUDA graph capture");
  ops::SpdReport r;
  r.first = word_.impl();
  r.tag = static_cast<int64_t>(raises_.size());
  raises_.push_back(std::move(raise));
  return r;
}

DeferredChecks::Failure DeferredChecks::collect(bool forget) {
  Failure f;
  if (raises_.empty()) return f;
  int64_t key = kSpdNoFailure;
  backend_for(word_.device(), "deferred device checks").copy_to_host(&key, word_.impl()->byte_ptr(), sizeof key);
  if (key != kSpdNoFailure) {
    const SpdKey k = spd_decode_key(key);
    word_.fill_(static_cast<double>(kSpdNoFailure));
    OXM_CHECK(k.tag >= 0 && k.tag < static_cast<int64_t>(raises_.size()), Backend,
              "deferred device checks: the device reported a failure of call ", k.tag, " but only ", raises_.size(),
              " checks are pending (corrupted report word ", key, ")");
    f = {raises_[static_cast<size_t>(k.tag)], k.batch, k.pivot};
  }
  if (forget) raises_.clear();
  return f;
}

void DeferredChecks::clear() noexcept {
  word_ = Tensor();
  raises_.clear();
}

namespace {
struct DevicePending {
  Device device;
  DeferredChecks checks;
};
std::mutex g_mu;
// One entry per device that has had a deferred check. Never destroyed: its words are device memory, which must not
// be freed during static destruction (the device's backend may be gone by then).
std::vector<DevicePending>& g_pending = *new std::vector<DevicePending>();
std::atomic<size_t> g_pending_count{0};

DeferredChecks& pending_for(Device device) {  // g_mu held
  for (auto& p : g_pending)
    if (p.device == device) return p.checks;
  g_pending.push_back({device, {}});
  return g_pending.back().checks;
}

[[noreturn]] void raise(const DeferredChecks::Failure& f, const char* when) {
  f.raise(f.batch, f.pivot, when);
  OXM_FAIL(Backend, "deferred device checks: a failure's raise returned");
}

constexpr const char* kFoundLater =
    "found at the next read-back of the device's results: on a GPU this op does not wait for its check";
}  // namespace

ops::SpdReport defer_check(Device device, int64_t count, DeferredFailure raise_fn) {
  if (count > kSpdMaxDeferredBatch) return {};
  if (capture_open()) return open_capture_checks().add(std::move(raise_fn));
  DeferredChecks::Failure failed;
  ops::SpdReport r;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    DeferredChecks& checks = pending_for(device);
    if (checks.size() >= kMaxPendingChecks) {
      g_pending_count -= checks.size();
      failed = checks.collect(true);
    }
    if (!failed.raise) {
      if (!checks.prepared()) checks.prepare(device);
      r = checks.add(std::move(raise_fn));
      ++g_pending_count;
    }
  }
  if (failed.raise) raise(failed, kFoundLater);
  return r;
}

void run_deferred_checks(Device device) {
  if (g_pending_count.load(std::memory_order_relaxed) == 0 || capture_open()) return;
  DeferredChecks::Failure failed;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    for (auto& p : g_pending)
      if (p.device == device && p.checks.size() > 0) {
        g_pending_count -= p.checks.size();
        failed = p.checks.collect(true);
      }
  }
  if (failed.raise) raise(failed, kFoundLater);
}

}  // namespace oxmera::detail
