#pragma once
#include <functional>
#include <string>
#include <vector>

#include "oxmera/tensor.hpp"

namespace oxmera {

// Whether operations record the autograd tape on this thread.
bool grad_enabled() noexcept;
void set_grad_enabled(bool enabled) noexcept;

// Disables tape recording on this thread for its lifetime.
class NoGradGuard {
 public:
  NoGradGuard() noexcept : prev_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// Sets tape recording on this thread to `enabled` for its lifetime (libtorch's AutoGradMode): AutoGradMode(true)
// records again inside a NoGradGuard.
class AutoGradMode {
 public:
  explicit AutoGradMode(bool enabled) noexcept : prev_(grad_enabled()) { set_grad_enabled(enabled); }
  ~AutoGradMode() { set_grad_enabled(prev_); }
  AutoGradMode(const AutoGradMode&) = delete;
  AutoGradMode& operator=(const AutoGradMode&) = delete;

 private:
  bool prev_;
};

namespace autograd {
// The gradients of `outputs` (seeded with grad_outputs, which may be empty or hold undefined tensors for
// one-element outputs) with respect to `inputs`, as torch.autograd.grad: returned, not accumulated into any
// .grad. Only the part of the graph between them runs. An input the outputs do not depend on is
// InvalidArgument unless allow_unused (then its gradient is an undefined tensor). retain_graph keeps the graph's
// saved tensors for another backward; create_graph records the backward, so the returned gradients have histories
// and can be differentiated again (Hessian-vector products, gradient penalties, MAML), and keeps the graph.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false,
                         bool create_graph = false, bool allow_unused = false);
}  // namespace autograd

struct GradcheckOptions {
  double eps = 1e-6;   // central-difference step
  double atol = 1e-5;  // |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-3;
  int projections = 2;  // random output projections checked (vector-Jacobian products)
  uint64_t seed = 1234;
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0.0;
  int worst_input = -1;
  int64_t worst_index = -1;  // flat index into that input
  double analytic = 0.0;
  double numeric = 0.0;
  std::string message;  // human-readable summary of the worst element
};

// Compares the tape's gradient of f against central finite differences. Inputs should be F64 leaves; the
// ones that require grad are checked. f must be a pure function of its inputs.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options = {});

// Second derivatives, as torch.autograd.gradgradcheck: for a random (seeded) output gradient v, gradchecks the map
// (inputs, v) -> the gradients of <v, f(inputs)> with respect to the inputs that require grad, computed with
// create_graph = true. So it checks the derivative of every backward rule f goes through (and of v's role).
GradcheckResult gradgradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                              const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});

}  // namespace oxmera
