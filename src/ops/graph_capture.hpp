#pragma once
// The open CUDA graph capture (oxmera::cuda::Graph, graph.cpp), for the layers that must refuse or adapt work
// while one is open: host transfers (Tensor::to), optimizers (their hyperparameters are baked into the graph).
#include <cstddef>
#include <functional>

#include "oxmera/tensor.hpp"

namespace oxmera::detail {

class DeferredChecks;  // ops/device_checks.hpp

// Whether this thread has a capture open (the thread that began it: other threads' CPU work keeps its ordinary
// checks and errors). A thread-local flag, cheap enough for every transfer.
extern thread_local bool t_capture_open;
inline bool capture_open() noexcept { return t_capture_open; }
// Throws InvalidArgument naming `op` and `why` when a capture is open.
void refuse_in_capture(const char* op, const char* why);
// Adds a function the open capture's graph runs on the host before each replay: it may check that what the graph
// baked in still holds (throwing InvalidArgument), or advance host-side bookkeeping the replay advances on the
// device. InvalidArgument when no capture is open.
void add_replay_hook(std::function<void()> hook);
// Adds `count` (an i64 scalar on the capture's device: out-of-range indices an op clamped) to the open capture's
// error count; Graph::replay() reads it after each replay and throws IndexOutOfBounds when it grew.
void count_capture_index_errors(const Tensor& count);
// The open capture's deferred device checks (ops/device_checks.hpp): Graph::replay() runs them after each replay.
// InvalidArgument when no capture is open.
DeferredChecks& open_capture_checks();
// `host` (a CPU tensor of values that depend on shapes alone: index lists, masks) on `device`; to(device) outside a
// capture, and inside one a copy the graph keeps (Backend::copy_constant_from_host) instead of a refusal.
Tensor constant_on_device(const Tensor& host, Device device);
// Writes `nbytes` of host memory into the contiguous device tensor `dst` (outside a capture: a replay hook's).
void copy_host_into(const Tensor& dst, const void* src, size_t nbytes);

}  // namespace oxmera::detail
