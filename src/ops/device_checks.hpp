#pragma once
// Checks of device results that the host does not wait for at once. The small SPD kernels on a GPU (logdet's and
// solve_triangular's failing matrices) report failures into one i64 word on the device instead of being read back
// after every call: a wait per call, which also cannot be captured in a CUDA graph (torch's logdet and
// solve_triangular do not check at all). The word is read, one wait, at the device's next read-back to the host
// (Tensor::to(Device::cpu()): item(), printing, to_vector, saving), when kMaxPendingChecks calls are pending, and
// after each replay of a graph that captured such calls; the earliest failing call then throws its own typed error,
// saying when it was found. The failing matrices' results are NaN meanwhile.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "ops/fused.hpp"
#include "oxmera/tensor.hpp"

namespace oxmera::detail {

// Throws the op's error for its first failing matrix (batch index, pivot); `when` says when it was found.
using DeferredFailure = std::function<void(int64_t batch, int pivot, const char* when)>;

// Checks sharing one device word (backend/common/spd_math.hpp's keys; kSpdNoFailure while nothing failed).
class DeferredChecks {
 public:
  // Allocates the word on `device` (outside a capture: a graph prepares its list before capturing).
  void prepare(Device device);
  bool prepared() const { return word_.defined(); }
  // The report for one more check: its tag is its position in the list. prepare() first.
  ops::SpdReport add(DeferredFailure raise);
  size_t size() const { return raises_.size(); }
  // Reads the word (a wait). On a failure the word is reset and the failing check's raise is returned with its
  // matrix (raise empty: nothing failed). `forget` empties the list (eager checks; a graph keeps its captured
  // ones, whose tags its replays repeat).
  struct Failure {
    DeferredFailure raise;
    int64_t batch = -1;
    int pivot = -1;
  };
  Failure collect(bool forget);
  void clear() noexcept;

 private:
  Tensor word_;
  std::vector<DeferredFailure> raises_;
};

// Pending eager checks per device are run once this many have queued (one wait per that many calls).
inline constexpr size_t kMaxPendingChecks = 256;

// The report for a new check of `count` matrices on `device`: the open capture's list inside a CUDA graph
// capture, else the device's pending list. An empty report (the call checks at once) when `count` is beyond the
// key's batch range.
ops::SpdReport defer_check(Device device, int64_t count, DeferredFailure raise);
// Runs `device`'s pending eager checks and throws the first failure; nothing to do (no lock, no wait) when none
// is pending. Tensor::to runs it after every read-back from a device.
void run_deferred_checks(Device device);

}  // namespace oxmera::detail
