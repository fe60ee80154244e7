#pragma once
// CUDA graphs: capture a fixed-shape piece of GPU work once (a whole training step: forward, backward and the
// optimizer's update) and replay it with one launch, as torch.cuda.CUDAGraph does. A small model's GPU step is
// bound by kernel launches; a replay costs about one.
//
//   Tensor x = zeros({64, 2}, DType::F32, Device::cuda());        // static input: new batches are copied into it
//   Tensor y = zeros({64}, DType::I64, Device::cuda());
//   train_step(x, y);                                             // one eager step first: optimizer state exists
//   cuda::Graph graph;
//   Tensor loss;
//   {
//     cuda::GraphCapture capture(graph);                          // nothing below runs: it is recorded
//     optimizer.zero_grad();
//     loss = nn::functional::cross_entropy(model.forward(x), y);
//     loss.backward();
//     optimizer.step();
//   }
//   for (...) { x.copy_(next_x); y.copy_(next_y); graph.replay(); use(loss.item<float>()); }
//
// Rules (each broken one is a typed error, never a silently stale replay):
// - During a capture nothing on the device may be read back or waited for (item(), to(Device::cpu()), printing a
//   tensor, synchronize) and no host data may be copied in (to(Device::cuda()) of a host tensor, random numbers
//   from rand / randn, which are drawn on the host): InvalidArgument naming the op. Copy new data into static device
//   tensors before replay() instead, outside the capture.
// - Dropout (nn::functional::dropout and the layers built on it) draws its mask on the device inside a capture
//   (Philox, seeded once from its generator at the capture; every replay draws a new mask). Those masks are not the
//   generator's host numbers, so a replayed step's dropout differs from an eager step's (same distribution).
// - Memory allocated during the capture (activations, gradients, the loss) belongs to the graph: every replay
//   writes the same addresses again, so tensors created in the capture hold the newest replay's values.
// - Optimizers: SGD, RMSprop, Adam and AdamW steps can be captured once each parameter has its state (one eager
//   step first: torch's warm-up); Adam's step count advances at every replay. Changing a captured hyperparameter
//   (an lr scheduler, a new weight decay) after the capture makes replay() throw InvalidArgument naming it;
//   capture again instead.
// - One capture at a time, on the thread that began it; no other thread may use the GPU meanwhile (the backend has
//   one stream). Other threads' CPU work is not affected.
#include <memory>

#include "oxmera/device.hpp"

namespace oxmera::cuda {

class Graph {
 public:
  Graph();
  ~Graph();
  Graph(Graph&&) noexcept;
  Graph& operator=(Graph&&) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Starts recording the work issued for `device` (a CUDA device; NotImplemented for one that cannot capture,
  // InvalidArgument while another capture is open or this graph already holds one: reset() it first).
  void capture_begin(Device device = Device::cuda());
  // Ends the recording; the graph can be replayed from now on.
  void capture_end();
  // Drops an open capture (its work is discarded), for a capture that failed part-way. GraphCapture calls it
  // when an exception leaves its scope.
  void capture_abort() noexcept;
  // Enqueues the captured work once more (asynchronous, as any launch). InvalidArgument before capture_end() or
  // when a captured optimizer's hyperparameters changed since.
  void replay();
  // Forgets the captured work and gives its memory back (tensors still holding some of it keep it until they go).
  void reset() noexcept;
  bool captured() const noexcept;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

// Begins a capture of `graph` on construction and ends it on destruction (aborts it when an exception unwinds),
// like `with torch.cuda.graph(g):`.
class GraphCapture {
 public:
  explicit GraphCapture(Graph& graph, Device device = Device::cuda());
  ~GraphCapture() noexcept(false);
  GraphCapture(const GraphCapture&) = delete;
  GraphCapture& operator=(const GraphCapture&) = delete;

 private:
  Graph& graph_;
  int uncaught_;
};

// Whether this thread has a capture open (torch.cuda.is_current_stream_capturing).
bool is_capturing() noexcept;

}  // namespace oxmera::cuda
