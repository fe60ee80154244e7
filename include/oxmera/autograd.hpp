#pragma once
#include <any>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <unordered_map>
#include <utility>
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

// ---------------------------------------------------------------- anomaly mode
// When on (per thread, off by default), the engine checks every gradient a backward node returns and throws
// InvalidArgument at the first NaN or infinity, naming the node (the forward op that created it, "log") and the
// input it was flowing to. Costs a full reduction per gradient: a debugging aid, as torch's detect_anomaly.
void set_detect_anomaly(bool enabled) noexcept;
bool is_anomaly_enabled() noexcept;
// Turns anomaly mode on for this thread for its lifetime (torch::autograd::DetectAnomalyGuard).
class DetectAnomalyGuard {
 public:
  DetectAnomalyGuard() noexcept : prev_(is_anomaly_enabled()) { set_detect_anomaly(true); }
  ~DetectAnomalyGuard() { set_detect_anomaly(prev_); }
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool prev_;
};

// ---------------------------------------------------------------- custom functions
// libtorch's custom autograd functions:
//
//   struct MulConstant : autograd::Function<MulConstant> {
//     static Tensor forward(autograd::AutogradContext* ctx, Tensor x, double k) {
//       ctx->saved_data["k"] = k;
//       return x * k;
//     }
//     static autograd::variable_list backward(autograd::AutogradContext* ctx, autograd::variable_list g) {
//       return {g[0] * ctx->saved_data["k"].toDouble(), Tensor()};  // one per forward argument
//     }
//   };
//   Tensor y = MulConstant::apply(x, 2.0);
//
// forward runs with grad mode off and returns a Tensor or a variable_list. Its Tensor arguments (also
// std::vector<Tensor> and std::optional<Tensor> ones, element by element) are the inputs; other arguments pass
// through. When grad mode is on and an input requires grad, apply records one node; its backward receives one
// gradient per output (zeros for outputs no gradient reached, unless set_materialize_grads(false)) and returns
// one per forward argument, as torch: undefined for non-tensor arguments and where there is none; extra
// trailing undefined entries are ignored. A gradient whose shape the input broadcasts to is summed back to the
// input's shape, a floating one of another dtype is converted; anything else is InvalidArgument naming the
// function. backward runs in whatever grad mode the engine runs it. The class name in errors and in
// grad_fn_name() is `static constexpr const char* name` when Derived has one, else its demangled type name.
using variable_list = std::vector<Tensor>;
using tensor_list = std::vector<Tensor>;

class AutogradContext;
namespace function_detail {
struct FunctionNode;  // the graph node, src/autograd/function.cpp
struct Access;
}  // namespace function_detail

// A value kept in AutogradContext::saved_data for backward (a small stand-in for torch's IValue): any copyable
// value. toDouble/toInt/toBool/toTensor/toStringRef read the common kinds (toDouble and toInt accept any
// arithmetic value, toInt no floating one); get<T>() reads anything else. A wrong kind is InvalidArgument
// naming the stored type. String literals are stored as std::string.
class SavedValue {
 public:
  SavedValue() = default;
  template <class T>
  requires(!std::same_as<std::remove_cvref_t<T>, SavedValue>) SavedValue(T&& v)  // NOLINT: assigned like IValue
      : value_(store(std::forward<T>(v))) {}

  double toDouble() const;
  int64_t toInt() const;
  bool toBool() const;
  Tensor toTensor() const;
  const std::string& toStringRef() const;
  bool isNone() const { return !value_.has_value(); }
  template <class T>
  const T& get() const {
    if (const T* p = std::any_cast<T>(&value_)) return *p;
    bad_kind(typeid(T));
  }
  const std::any& any() const { return value_; }

 private:
  template <class T>
  static std::any store(T&& v) {
    using D = std::decay_t<T>;
    if constexpr (std::is_same_v<D, const char*> || std::is_same_v<D, char*>)
      return std::any(std::string(v));
    else
      return std::any(D(std::forward<T>(v)));
  }
  [[noreturn]] void bad_kind(const std::type_info& want) const;
  std::any value_;
};

// What forward and backward share: the tensors saved for backward, other saved values, and which inputs need a
// gradient. Owned by the node apply records (or dropped after forward when none is recorded).
class AutogradContext {
 public:
  AutogradContext() = default;
  AutogradContext(const AutogradContext&) = delete;
  AutogradContext& operator=(const AutogradContext&) = delete;

  // In forward: the tensors backward will need (inputs or outputs of forward; undefined ones allowed); a
  // second call replaces the first. Outputs are kept without creating a reference cycle, and an in-place write
  // to a saved tensor before backward makes backward an InvalidArgument.
  void save_for_backward(variable_list to_save);
  // In backward: the saved tensors, in order. InvalidArgument once a backward without retain_graph freed them.
  variable_list get_saved_variables() const;
  // In forward: these outputs do not require grad (their gradients reaching backward are zeros), e.g. indices
  // or masks. Outputs that are not floating are never differentiable.
  void mark_non_differentiable(const variable_list& outputs);
  // Whether backward receives zeros (true, the default) or undefined tensors for outputs no gradient reached.
  void set_materialize_grads(bool value) { materialize_grads_ = value; }
  // Whether tensor input `index` (counting tensor inputs only, tensor lists element by element, as torch)
  // requires a gradient; backward may skip computing the others. Valid in forward and in backward.
  bool needs_input_grad(size_t index) const;
  std::unordered_map<std::string, SavedValue> saved_data;

 private:
  friend struct function_detail::Access;
  variable_list to_save_;                        // until apply records the node, which then holds them
  std::vector<const void*> non_differentiable_;  // output identities
  std::vector<char> needs_input_grad_;
  bool materialize_grads_ = true;
  function_detail::FunctionNode* node_ = nullptr;  // the node that owns this context, once recorded
};

namespace function_detail {
using BackwardFn = variable_list (*)(AutogradContext*, variable_list);

template <class A>
void collect_inputs(variable_list& inputs, std::vector<char>& is_tensor_arg, const A& a) {
  using D = std::remove_cvref_t<A>;
  if constexpr (std::is_same_v<D, Tensor>) {
    inputs.push_back(a);
    is_tensor_arg.push_back(1);
  } else if constexpr (std::is_same_v<D, std::vector<Tensor>>) {
    for (const Tensor& t : a) {
      inputs.push_back(t);
      is_tensor_arg.push_back(1);
    }
  } else if constexpr (std::is_same_v<D, std::optional<Tensor>>) {
    inputs.push_back(a ? *a : Tensor());
    is_tensor_arg.push_back(1);
  } else {
    is_tensor_arg.push_back(0);
  }
}

// A context for a call with these inputs (needs_input_grad set from grad mode and requires_grad).
std::unique_ptr<AutogradContext> make_context(const variable_list& inputs);
// After forward: when an input needs a gradient, records the node (taking the context) and gives the
// differentiable outputs their history; outputs that alias an input are replaced by fresh aliases first.
void record(std::unique_ptr<AutogradContext> ctx, const variable_list& inputs, std::vector<char> is_tensor_arg,
            variable_list& outputs, BackwardFn backward, const std::type_info& type, const char* name);

template <class T>
concept HasName = requires {
  { T::name } -> std::convertible_to<const char*>;
};
}  // namespace function_detail

template <class Derived>
struct Function {
  template <class... Args>
  static auto apply(Args&&... args) {
    variable_list inputs;
    std::vector<char> is_tensor_arg;
    (function_detail::collect_inputs(inputs, is_tensor_arg, args), ...);
    std::unique_ptr<AutogradContext> ctx = function_detail::make_context(inputs);
    using Out = std::remove_cvref_t<decltype(Derived::forward(ctx.get(), std::forward<Args>(args)...))>;
    static_assert(std::is_same_v<Out, Tensor> || std::is_same_v<Out, variable_list>,
                  "autograd::Function: forward must return a Tensor or a variable_list (std::vector<Tensor>)");
    variable_list outputs;
    {
      NoGradGuard no_grad;
      if constexpr (std::is_same_v<Out, Tensor>)
        outputs.push_back(Derived::forward(ctx.get(), std::forward<Args>(args)...));
      else
        outputs = Derived::forward(ctx.get(), std::forward<Args>(args)...);
    }
    const char* name = nullptr;
    if constexpr (function_detail::HasName<Derived>) name = Derived::name;
    function_detail::record(std::move(ctx), inputs, std::move(is_tensor_arg), outputs, &backward_thunk, typeid(Derived),
                            name);
    if constexpr (std::is_same_v<Out, Tensor>)
      return std::move(outputs[0]);
    else
      return outputs;
  }

 private:
  static variable_list backward_thunk(AutogradContext* ctx, variable_list grads) {
    return Derived::backward(ctx, std::move(grads));
  }
};
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
