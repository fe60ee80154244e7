// Custom autograd functions (autograd::Function<Derived>): the non-template part. The header's apply runs the
// user's forward and hands the outputs here; the node recorded holds the context, the saved tensors (as
// SavedTensor, so a saved output does not own its own grad_fn) and a pointer to Derived::backward.
#include <cxxabi.h>

#include <cstdlib>
#include <string>

#include "autograd/node.hpp"
#include "oxmera/autograd.hpp"

namespace oxmera::autograd {
namespace {

std::string demangled(const std::type_info& t) {
  int status = 0;
  char* d = abi::__cxa_demangle(t.name(), nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : t.name();
  std::free(d);
  for (const std::string junk : {"(anonymous namespace)::", "oxmera::autograd::", "oxmera::"}) {
    for (size_t p = s.find(junk); p != std::string::npos; p = s.find(junk)) s.erase(p, junk.size());
  }
  return s;
}

// Whether a tensor of shape `from` broadcasts to `to` (so a gradient of shape `to` sums back to `from`).
bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  const size_t lead = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[lead + i]) return false;
  return true;
}

}  // namespace

namespace function_detail {

struct FunctionNode final : detail::Node {
  std::string fn_name;
  std::unique_ptr<AutogradContext> ctx;
  BackwardFn backward = nullptr;
  std::vector<char> is_tensor_arg;  // per forward argument (tensor lists expanded)
  std::vector<detail::SavedTensor> saved;
  bool saved_freed = false;
  struct Meta {
    bool defined = false;
    Shape shape;
    DType dtype = DType::F32;
    Device device = Device::cpu();
  };
  std::vector<Meta> inputs, outputs;

  const char* name() const override { return fn_name.c_str(); }
  // The user's backward runs under the engine's grad mode: built from ops, it is recorded for create_graph.
  bool differentiable_backward() const override { return true; }
  bool materialize() const;

  bool release_saved() override {
    bool had = false;
    for (auto& s : saved) {
      had = had || s.defined();
      s.reset();
    }
    saved_freed = saved_freed || had;
    return had;
  }

  void apply(Tensor* grad_out, Tensor* grad_in) override {
    variable_list grads(num_outputs);
    for (uint32_t i = 0; i < num_outputs; ++i) {
      grads[i] = grad_out[i];
      const Meta& m = outputs[i];
      if (!grads[i].defined() && m.defined && materialize()) {
        grads[i] = empty(m.shape, m.dtype, m.device);
        if (grads[i].numel()) grads[i].fill_(0.0);
      }
    }
    variable_list r = backward(ctx.get(), std::move(grads));
    const size_t nargs = is_tensor_arg.size();
    for (size_t i = nargs; i < r.size(); ++i)
      OXM_CHECK(!r[i].defined(), InvalidArgument, fn_name, "::backward returned ", r.size(), " gradients for ", nargs,
                " forward arguments, and gradient ", i, " (beyond them) is defined; return one per forward argument");
    OXM_CHECK(r.size() >= nargs, InvalidArgument, fn_name, "::backward returned ", r.size(), " gradient(s); expected ",
              nargs,
              ", one per argument of forward (after the context; tensor lists count element by element), with an "
              "undefined Tensor() for non-tensor arguments and inputs that need none");
    size_t input = 0;
    for (size_t a = 0; a < nargs; ++a) {
      Tensor& g = r[a];
      if (!is_tensor_arg[a]) {
        OXM_CHECK(!g.defined(), InvalidArgument, fn_name, "::backward returned a defined gradient at position ", a,
                  ", but forward argument ", a, " is not a tensor; return an undefined Tensor() there");
        continue;
      }
      const size_t j = input++;
      if (!g.defined() || !needs_grad(j)) continue;
      const Meta& m = inputs[j];
      if (g.shape() != m.shape) {
        OXM_CHECK(broadcasts_to(m.shape, g.shape()), InvalidArgument, fn_name,
                  "::backward returned a gradient of shape ", g.shape(), " at position ", a, " for an input of shape ",
                  m.shape,
                  "; return a gradient of the input's shape (or one the input broadcasts to, which is summed back)");
        g = detail::sum_to(g, m.shape);
      }
      if (g.dtype() != m.dtype) {
        OXM_CHECK(is_floating(g.dtype()), InvalidArgument, fn_name, "::backward returned a gradient of dtype ",
                  g.dtype(), " at position ", a, " for an input of dtype ", m.dtype, "; return a floating gradient");
        g = g.to(m.dtype);
      }
      OXM_CHECK(g.device() == m.device, DeviceMismatch, fn_name, "::backward returned a gradient on ", g.device(),
                " at position ", a, " for an input on ", m.device, "; return it on the input's device");
      grad_in[j] = std::move(g);
    }
  }
};

struct Access {
  static std::vector<char>& needs(AutogradContext& c) { return c.needs_input_grad_; }
  static variable_list& to_save(AutogradContext& c) { return c.to_save_; }
  static const std::vector<const void*>& non_diff(const AutogradContext& c) { return c.non_differentiable_; }
  static void set_node(AutogradContext& c, FunctionNode* n) { c.node_ = n; }
  static bool materialize(const AutogradContext& c) { return c.materialize_grads_; }
};

bool FunctionNode::materialize() const { return Access::materialize(*ctx); }

std::unique_ptr<AutogradContext> make_context(const variable_list& inputs) {
  auto ctx = std::make_unique<AutogradContext>();
  auto& needs = Access::needs(*ctx);
  needs.resize(inputs.size(), 0);
  const bool on = grad_enabled();
  for (size_t i = 0; i < inputs.size(); ++i) needs[i] = on && inputs[i].defined() && inputs[i].requires_grad();
  return ctx;
}

void record(std::unique_ptr<AutogradContext> ctx, const variable_list& inputs, std::vector<char> is_tensor_arg,
            variable_list& outputs, BackwardFn backward, const std::type_info& type, const char* name) {
  const auto& needs = Access::needs(*ctx);
  bool any = false;
  for (char n : needs) any = any || n;
  if (!any) return;  // nothing to differentiate: the context (and what it saved) goes with this call

  auto* node = new FunctionNode();
  detail::Ref<detail::Node> own = detail::Ref<detail::Node>::adopt(node);  // released unless an output takes it
  node->fn_name = name ? std::string(name) : demangled(type);
  node->backward = backward;
  node->is_tensor_arg = std::move(is_tensor_arg);
  node->inputs.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    node->next.push_back(needs[i] ? detail::edge_of(t) : detail::Edge{});
    if (t.defined()) node->inputs[i] = {true, t.shape(), t.dtype(), t.device()};
  }

  // Outputs: an output that is an input, repeats an earlier output or already has history gets a fresh alias,
  // so that giving it this node's history touches nothing else.
  const auto& non_diff = Access::non_diff(*ctx);
  auto listed = [](const std::vector<const void*>& v, const void* p) {
    for (const void* q : v)
      if (q == p) return true;
    return false;
  };
  std::vector<const void*> seen;
  for (const Tensor& t : inputs)
    if (t.defined()) seen.push_back(t.impl());
  node->num_outputs = static_cast<uint32_t>(outputs.size());
  node->outputs.resize(outputs.size());
  std::vector<const void*> attached;
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor& o = outputs[i];
    if (!o.defined()) continue;
    node->outputs[i] = {true, o.shape(), o.dtype(), o.device()};
    const bool diff = is_floating(o.dtype()) && !listed(non_diff, o.impl());
    if (listed(seen, o.impl()) || o.requires_grad()) o = o.detach();
    seen.push_back(o.impl());
    if (!diff) continue;
    node->refcount.fetch_add(1, std::memory_order_relaxed);
    detail::set_history(o, node, static_cast<uint32_t>(i));
    attached.push_back(o.impl());
  }

  // Saved tensors, after the outputs have their history (an output is saved as one: no reference cycle).
  for (const Tensor& t : Access::to_save(*ctx)) {
    detail::SavedTensor s;
    const bool is_output = t.defined() && listed(attached, t.impl());
    s.save(t, is_output, is_output ? t.impl()->output_nr : 0);  // create_graph re-attaches it as that output
    node->saved.push_back(std::move(s));
  }
  Access::to_save(*ctx).clear();
  Access::set_node(*ctx, node);
  node->ctx = std::move(ctx);
}

}  // namespace function_detail

// ---------------------------------------------------------------- AutogradContext
void AutogradContext::save_for_backward(variable_list to_save) {
  OXM_CHECK(!node_, InvalidArgument,
            "AutogradContext::save_for_backward: call it in forward (this context's node is already recorded)");
  to_save_ = std::move(to_save);
}

variable_list AutogradContext::get_saved_variables() const {
  if (!node_) return to_save_;  // still in forward
  OXM_CHECK(!node_->saved_freed, InvalidArgument, "AutogradContext::get_saved_variables (", node_->fn_name,
            "): the saved tensors were freed by a backward without retain_graph; pass retain_graph = true to it if "
            "you need to backward twice");
  variable_list out;
  out.reserve(node_->saved.size());
  for (const auto& s : node_->saved) out.push_back(s.get(node_->fn_name.c_str()));
  return out;
}

void AutogradContext::mark_non_differentiable(const variable_list& outputs) {
  for (const Tensor& t : outputs)
    if (t.defined()) non_differentiable_.push_back(t.impl());
}

bool AutogradContext::needs_input_grad(size_t index) const {
  OXM_CHECK(index < needs_input_grad_.size(), IndexOutOfBounds, "AutogradContext::needs_input_grad: index ", index,
            " but forward has ", needs_input_grad_.size(), " tensor input(s)");
  return needs_input_grad_[index] != 0;
}

// ---------------------------------------------------------------- SavedValue
namespace {
template <class T, class F>
bool read_arith(const std::any& v, F&& f) {
  if (const T* p = std::any_cast<T>(&v)) {
    f(*p);
    return true;
  }
  return false;
}
template <class F>
bool read_number(const std::any& v, bool integral_only, F&& f) {
  bool ok = read_arith<int64_t>(v, f) || read_arith<int>(v, f) || read_arith<long>(v, f) ||
            read_arith<long long>(v, f) || read_arith<unsigned>(v, f) || read_arith<unsigned long>(v, f) ||
            read_arith<unsigned long long>(v, f) || read_arith<short>(v, f) || read_arith<unsigned short>(v, f) ||
            read_arith<char>(v, f) || read_arith<signed char>(v, f) || read_arith<unsigned char>(v, f);
  if (!ok && !integral_only) ok = read_arith<double>(v, f) || read_arith<float>(v, f) || read_arith<long double>(v, f);
  return ok;
}
}  // namespace

void SavedValue::bad_kind(const std::type_info& want) const {
  OXM_FAIL(InvalidArgument, "AutogradContext::saved_data: the value holds ",
           value_.has_value() ? demangled(value_.type()) : std::string("nothing"), ", read as ", demangled(want));
}

double SavedValue::toDouble() const {
  double out = 0;
  if (!read_number(value_, false, [&](auto v) { out = static_cast<double>(v); })) bad_kind(typeid(double));
  return out;
}
int64_t SavedValue::toInt() const {
  int64_t out = 0;
  if (!read_number(value_, true, [&](auto v) { out = static_cast<int64_t>(v); })) bad_kind(typeid(int64_t));
  return out;
}
bool SavedValue::toBool() const { return get<bool>(); }
Tensor SavedValue::toTensor() const { return get<Tensor>(); }
const std::string& SavedValue::toStringRef() const { return get<std::string>(); }

}  // namespace oxmera::autograd
