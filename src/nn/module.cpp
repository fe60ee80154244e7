#include "oxmera/nn/module.hpp"

#include <cxxabi.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <ostream>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "oxmera/autograd.hpp"
#include "tensor/tensor_impl.hpp"

namespace oxmera::nn {

namespace {
constexpr int kParams = 0, kBuffers = 1, kState = 2;  // what collect() gathers (kState: torch's state_dict order)

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

// "'a', 'b', 'c' and 2 more"
std::string key_list(const std::vector<std::string>& names) {
  std::string s;
  const size_t shown = std::min<size_t>(names.size(), 8);
  for (size_t i = 0; i < shown; ++i) s += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > shown) s += " and " + std::to_string(names.size() - shown) + " more";
  return s;
}
}  // namespace

namespace module_detail {
std::string type_name(const std::type_info& t) {
  int status = 0;
  char* d = abi::__cxa_demangle(t.name(), nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : t.name();
  std::free(d);
  replace_all(s, "oxmera::nn::", "");
  replace_all(s, "oxmera::", "");
  replace_all(s, "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >", "std::string");
  return s;
}

void throw_bad_forward_call(const AnyModule::Holder& h, const AnyModule::ArgRef* args, size_t n,
                            const std::string& why) {
  std::string given;
  for (size_t i = 0; i < n; ++i) given += (i ? ", " : "") + type_name(*args[i].type);
  OXM_FAIL(InvalidArgument, "AnyModule(", h.module ? h.module->name() : std::string("?"), ")::forward: ", why,
           "; forward is ", h.signature(), ", called with (", given, ")");
}
}  // namespace module_detail

// ------------------------------------------------------------------------------------------ StateDict
bool StateDict::contains(const std::string& key) const {
  for (const auto& [k, t] : *this)
    if (k == key) return true;
  return false;
}
const Tensor& StateDict::at(const std::string& key) const {
  for (const auto& [k, t] : *this)
    if (k == key) return t;
  OXM_FAIL(InvalidArgument, "StateDict: no key '", key, "' (", size(), " keys)");
}
std::vector<std::string> StateDict::keys() const {
  std::vector<std::string> out;
  out.reserve(size());
  for (const auto& [k, t] : *this) out.push_back(k);
  return out;
}

// ------------------------------------------------------------------------------------------ forward hooks
namespace {
std::atomic<uint64_t> g_forward_hook_id{0};
}

void ModuleHookHandle::remove() {
  if (auto list = list_.lock()) {
    std::erase_if(list->pre, [&](const module_detail::ForwardHooks::Pre& h) { return h.id == id_; });
    std::erase_if(list->post, [&](const module_detail::ForwardHooks::Post& h) { return h.id == id_; });
  }
  list_.reset();
}

bool ModuleHookHandle::active() const {
  auto list = list_.lock();
  if (!list) return false;
  for (const auto& h : list->pre)
    if (h.id == id_) return true;
  for (const auto& h : list->post)
    if (h.id == id_) return true;
  return false;
}

ModuleHookHandle Module::add_forward_pre_hook(std::function<Tensor(Module&, const Tensor&)> fn) {
  OXM_CHECK(fn, InvalidArgument, name(), ": register_forward_pre_hook: the hook is empty");
  auto& list = forward_hooks_.list;
  if (!list) list = std::make_shared<module_detail::ForwardHooks>();
  const uint64_t id = ++g_forward_hook_id;
  list->pre.push_back({id, std::move(fn)});
  return ModuleHookHandle(list, id);
}

ModuleHookHandle Module::add_forward_hook(std::function<Tensor(Module&, const Tensor&, const Tensor&)> fn) {
  OXM_CHECK(fn, InvalidArgument, name(), ": register_forward_hook: the hook is empty");
  auto& list = forward_hooks_.list;
  if (!list) list = std::make_shared<module_detail::ForwardHooks>();
  const uint64_t id = ++g_forward_hook_id;
  list->post.push_back({id, std::move(fn)});
  return ModuleHookHandle(list, id);
}

Tensor Module::run_forward_hooks(const Tensor& x, const std::function<Tensor(const Tensor&)>& fwd) {
  if (!forward_hooks_.any()) return fwd(x);
  // Copies: a hook may register or remove hooks (and the list may go if it removes the last one).
  std::shared_ptr<module_detail::ForwardHooks> hooks = forward_hooks_.list;
  const std::vector<module_detail::ForwardHooks::Pre> pre = hooks->pre;
  const std::vector<module_detail::ForwardHooks::Post> post = hooks->post;
  Tensor input = x;
  for (const auto& h : pre) {
    Tensor r = h.fn(*this, input);
    if (r.defined()) input = std::move(r);
  }
  Tensor output = fwd(input);
  for (const auto& h : post) {
    Tensor r = h.fn(*this, input, output);
    if (r.defined()) output = std::move(r);
  }
  return output;
}

// ------------------------------------------------------------------------------------------ Module
Tensor Module::forward(const Tensor& x) {
  OXM_FAIL(InvalidArgument, name(),
           ": forward(const Tensor&) is not defined for this module (its forward takes other arguments, or it is a "
           "container without a forward); call its own forward directly or through AnyModule");
}

std::string Module::name() const {
  std::string s = module_detail::type_name(typeid(*this));
  if (s.find('<') == std::string::npos) {
    const size_t at = s.rfind("::");
    if (at != std::string::npos) s = s.substr(at + 2);
  }
  return s;
}

Tensor Module::register_parameter(std::string name, Tensor t) {
  ::oxmera::detail::check_defined(t, "register_parameter");
  if (!t.requires_grad()) t.requires_grad_(true);
  return add_tensor(false, std::move(name), {}, &t);
}

Tensor Module::register_buffer(std::string name, Tensor t) {
  ::oxmera::detail::check_defined(t, "register_buffer");
  return add_tensor(true, std::move(name), {}, &t);
}

Tensor& Module::add_tensor(bool buffer, std::string name, TensorAccessor member, Tensor* value) {
  const char* what = buffer ? "register_buffer" : "register_parameter";
  OXM_CHECK(!name.empty() && name.find('.') == std::string::npos, InvalidArgument, this->name(), ": ", what,
            ": the name '", name, "' must be non-empty and without '.'");
  auto& slots = buffer ? buffers_ : params_;
  TensorSlot slot{name, Tensor(), std::move(member)};
  Tensor& target = slot.member ? slot.member(*this) : slot.value;
  if (value) {
    if (!buffer && value->defined() && !value->requires_grad()) value->requires_grad_(true);
    target = *value;
  }
  for (auto& s : slots)
    if (s.name == name) {
      s = std::move(slot);
      return s.member ? s.member(*this) : s.value;
    }
  slots.push_back(std::move(slot));
  auto& s = slots.back();
  return s.member ? s.member(*this) : s.value;
}

void Module::add_child(std::string name, ModulePtr m, ChildMember member) {
  OXM_CHECK(!name.empty() && name.find('.') == std::string::npos, InvalidArgument, this->name(),
            ": register_module: the name '", name, "' must be non-empty and without '.'");
  OXM_CHECK(m != nullptr, InvalidArgument, this->name(), ": register_module: the module '", name, "' is null");
  OXM_CHECK(m.get() != this, InvalidArgument, this->name(), ": register_module: a module cannot be its own child");
  ChildSlot slot{name, member.get ? nullptr : m, std::move(member)};
  for (auto& c : children_)
    if (c.name == name) {
      c = std::move(slot);
      return;
    }
  children_.push_back(std::move(slot));
}

void Module::reset_children(const std::vector<std::pair<std::string, ModulePtr>>& children) {
  children_.clear();
  for (const auto& [n, m] : children) add_child(n, m, {});
}

const Tensor& Module::slot_tensor(const TensorSlot& s) const {
  return s.member ? s.member(const_cast<Module&>(*this)) : s.value;
}
ModulePtr Module::child_of(const ChildSlot& s) const { return s.member.get ? s.member.get(*this) : s.value; }

// The view is rebuilt from the slots on every call (a member child may have been reassigned), in place when
// the count is unchanged, so a loop over children() that calls children() again keeps valid iterators.
const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& Module::children() const {
  std::vector<std::pair<std::string, ModulePtr>> now;
  now.reserve(children_.size());
  for (const auto& c : children_)
    if (ModulePtr m = child_of(c)) now.emplace_back(c.name, std::move(m));
  if (now.size() != children_view_.size()) {
    children_view_ = std::move(now);
  } else {
    for (size_t i = 0; i < now.size(); ++i) {
      if (children_view_[i].first != now[i].first) children_view_[i].first = now[i].first;
      if (children_view_[i].second != now[i].second) children_view_[i].second = now[i].second;
    }
  }
  return children_view_;
}

void Module::collect(const std::string& prefix, int which, std::vector<std::pair<std::string, Tensor>>& out) const {
  if (which != kBuffers)
    for (const auto& s : params_)
      if (const Tensor& t = slot_tensor(s); t.defined()) out.emplace_back(prefix + s.name, t);
  if (which != kParams)
    for (const auto& s : buffers_)
      if (const Tensor& t = slot_tensor(s); t.defined()) out.emplace_back(prefix + s.name, t);
  for (const auto& c : children_)
    if (ModulePtr m = child_of(c)) m->collect(prefix + c.name + ".", which, out);
}

std::vector<std::pair<std::string, Tensor>> Module::listing(int which, bool remove_duplicate) const {
  std::vector<std::pair<std::string, Tensor>> all;
  collect("", which, all);
  if (!remove_duplicate) return all;
  std::vector<std::pair<std::string, Tensor>> out;
  std::unordered_set<const void*> seen;
  for (auto& [n, t] : all)
    if (seen.insert(t.impl()).second) out.emplace_back(std::move(n), std::move(t));
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const { return listing(kParams, true); }
std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool remove_duplicate) const {
  return listing(kParams, remove_duplicate);
}
std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const { return listing(kBuffers, true); }
std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool remove_duplicate) const {
  return listing(kBuffers, remove_duplicate);
}
std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

StateDict Module::state_dict() const {
  StateDict out;
  for (auto& [n, t] : listing(kState, false)) out.emplace_back(n, t.detach());
  return out;
}
StateDict Module::state_dict_deduplicated() const {
  StateDict out;
  for (auto& [n, t] : listing(kState, true)) out.emplace_back(n, t.detach());
  return out;
}

LoadStateDictResult Module::load_state_dict(const std::map<std::string, Tensor>& dict, bool strict) {
  return load_state_dict(std::vector<std::pair<std::string, Tensor>>(dict.begin(), dict.end()), strict);
}

LoadStateDictResult Module::load_state_dict(const std::vector<std::pair<std::string, Tensor>>& dict, bool strict) {
  const std::string ctx = name() + ": load_state_dict";
  const auto own = listing(kState, false);
  std::map<std::string, Tensor> own_by_name;
  std::unordered_map<const void*, std::vector<std::string>> names_of;  // every name of each tensor
  for (const auto& [n, t] : own) {
    own_by_name.emplace(n, t);
    names_of[t.impl()].push_back(n);
  }
  std::set<std::string> given;
  LoadStateDictResult result;
  std::vector<std::string> bad_shapes;
  std::vector<std::pair<Tensor, Tensor>> copies;  // dst, src (converted)
  {
    NoGradGuard no_grad;
    for (const auto& [key, src] : dict) {
      OXM_CHECK(src.defined(), InvalidArgument, ctx, ": the tensor for '", key, "' is undefined");
      OXM_CHECK(given.insert(key).second, InvalidArgument, ctx, ": the key '", key, "' is given twice");
      auto it = own_by_name.find(key);
      if (it == own_by_name.end()) {
        result.unexpected_keys.push_back(key);
        continue;
      }
      const Tensor& dst = it->second;
      if (src.shape() != dst.shape()) {
        bad_shapes.push_back("'" + key + "': " + src.shape().str() + " given, " + dst.shape().str() + " in the module");
        continue;
      }
      Tensor s = src.detach();
      if (s.dtype() != dst.dtype()) s = s.to(dst.dtype());
      if (s.device() != dst.device()) s = s.to(dst.device());
      copies.emplace_back(dst, s);
    }
  }
  for (const auto& [n, t] : own) {
    bool present = false;
    for (const auto& alias : names_of[t.impl()]) present = present || given.count(alias);
    if (!present) result.missing_keys.push_back(n);
  }
  OXM_CHECK(bad_shapes.empty(), ShapeMismatch, ctx, ": size mismatch for ", bad_shapes.size(), " tensor(s): ", [&] {
    std::string s;
    for (size_t i = 0; i < bad_shapes.size(); ++i) s += (i ? "; " : "") + bad_shapes[i];
    return s;
  }());
  if (strict) {
    OXM_CHECK(result.missing_keys.empty() && result.unexpected_keys.empty(), InvalidArgument, ctx, ": ",
              result.missing_keys.size(), " missing key(s)",
              result.missing_keys.empty() ? std::string() : " (" + key_list(result.missing_keys) + ")", " and ",
              result.unexpected_keys.size(), " unexpected key(s)",
              result.unexpected_keys.empty() ? std::string() : " (" + key_list(result.unexpected_keys) + ")",
              "; pass strict = false to load the rest");
  }
  NoGradGuard no_grad;
  for (auto& [dst, src] : copies) {
    Tensor d = dst;
    d.copy_(src);
  }
  return result;
}

int64_t Module::num_parameters(bool trainable_only) const {
  int64_t n = 0;
  for (const auto& t : parameters())
    if (!trainable_only || t.requires_grad()) n += t.numel();
  return n;
}
int64_t parameter_count(const Module& m, bool trainable_only) { return m.num_parameters(trainable_only); }

// ------------------------------------------------------------------------------------------ clone
ModulePtr Module::shallow_copy() const {
  OXM_FAIL(NotImplemented, name(), ": clone() needs a copy of this module: derive its class from nn::Cloneable<",
           name(), "> (or override shallow_copy())");
}

namespace {
struct CloneMemo {
  std::unordered_map<const void*, Tensor> tensors;
  std::unordered_map<const Module*, ModulePtr> modules;
};
Tensor copy_tensor(const Tensor& t, CloneMemo& memo) {
  auto it = memo.tensors.find(t.impl());
  if (it != memo.tensors.end()) return it->second;
  Tensor c;
  {
    NoGradGuard no_grad;
    c = t.detach().clone();
  }
  if (t.requires_grad()) c.requires_grad_(true);
  memo.tensors.emplace(t.impl(), c);
  return c;
}
}  // namespace

ModulePtr Module::clone() const {
  CloneMemo memo;
  return clone_into(&memo);
}

ModulePtr Module::clone_into(void* memo_ptr) const {
  CloneMemo& memo = *static_cast<CloneMemo*>(memo_ptr);
  if (auto it = memo.modules.find(this); it != memo.modules.end()) return it->second;
  const bool owns_children = children_owned_ || typeid(*this) == typeid(Module);
  for (const auto* slots : {&params_, &buffers_})
    for (const auto& s : *slots)
      OXM_CHECK(s.member || typeid(*this) == typeid(Module), NotImplemented, name(), ": clone() cannot deep-copy '",
                s.name,
                "': it was registered by value, so the module may hold another handle to it; register it by "
                "member (register_parameter(\"",
                s.name, "\", &", name(), "::", s.name, "))");
  for (const auto& c : children_)
    OXM_CHECK(c.member.get || owns_children, NotImplemented, name(), ": clone() cannot deep-copy the child '", c.name,
              "': it was registered by value, so the module may hold another pointer to it; register it by member "
              "(register_module(\"",
              c.name, "\", &", name(), "::", c.name, ", module))");
  ModulePtr copy = typeid(*this) == typeid(Module) ? std::make_shared<Module>(*this) : shallow_copy();
  // typeid of a reference bound beforehand: typeid(*copy) would call shared_ptr::operator* inside typeid's
  // operand, which is evaluated (the type is polymorphic) and clang warns about (-Wpotentially-evaluated-expression).
  const Module* copied = copy.get();
  OXM_CHECK(copied != nullptr && typeid(*copied) == typeid(*this), NotImplemented, name(),
            ": clone(): shallow_copy() returned a ",
            copied != nullptr ? module_detail::type_name(typeid(*copied)) : std::string("null pointer"), ", not a ",
            module_detail::type_name(typeid(*this)), " (derive the class from nn::Cloneable<itself>)");
  memo.modules.emplace(this, copy);
  for (auto* slots : {&copy->params_, &copy->buffers_})
    for (auto& s : *slots) {
      Tensor& t = s.member ? s.member(*copy) : s.value;
      if (t.defined()) t = copy_tensor(t, memo);
    }
  for (auto& c : copy->children_) {
    ModulePtr old = copy->child_of(c);
    if (!old) continue;
    ModulePtr fresh = old->clone_into(memo_ptr);
    if (c.member.set)
      c.member.set(*copy, fresh);
    else
      c.value = fresh;
  }
  copy->children_replaced();
  return copy;
}

// ------------------------------------------------------------------------------------------ modes, devices
std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  std::vector<const Module*> seen;
  // Iterative depth first (pre-order), children in registration order.
  std::vector<std::pair<std::string, Module*>> stack{{"", this}};
  while (!stack.empty()) {
    auto [name, m] = stack.back();
    stack.pop_back();
    if (std::find(seen.begin(), seen.end(), m) != seen.end()) continue;
    seen.push_back(m);
    out.emplace_back(name, m);
    const auto& kids = m->children();
    for (size_t i = kids.size(); i-- > 0;)
      stack.emplace_back(name.empty() ? kids[i].first : name + "." + kids[i].first, kids[i].second.get());
  }
  return out;
}
std::vector<Module*> Module::modules() {
  std::vector<Module*> out;
  for (auto& [n, m] : named_modules()) out.push_back(m);
  return out;
}
Module& Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& [n, m] : children()) m->apply(fn);
  fn(*this);
  return *this;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, m] : children()) m->train(on);
}

void Module::zero_grad() {
  for (auto& t : parameters()) t.zero_grad();
}

void Module::to(Device device) {
  auto move = [&](Tensor t) {
    if (t.device() == device) return;
    Tensor moved;
    {
      NoGradGuard ng;
      moved = t.detach().to(device);
    }
    // Swap the data under the existing handle so optimizers and other holders see the move.
    ::oxmera::detail::TensorImpl& dst = *t.impl();
    const ::oxmera::detail::TensorImpl& src = *moved.impl();
    dst.storage = src.storage;
    dst.strides = src.strides;
    dst.offset = src.offset;
    dst.contiguous = src.contiguous;
    dst.grad = dst.grad.defined() ? dst.grad.to(device) : Tensor();
  };
  for (auto& [n, t] : named_parameters()) move(t);
  for (auto& [n, t] : named_buffers()) move(t);
}

void Module::to(DType dtype) {
  OXM_CHECK(dtype == DType::F32 || dtype == DType::F64, InvalidArgument, name(), ".to: dtype ", dtype,
            " is not a floating dtype a module can hold (F32, F64)");
  auto convert = [&](Tensor t) {
    if (!t.defined() || !is_floating(t.dtype()) || t.dtype() == dtype) return;
    Tensor converted;
    {
      NoGradGuard ng;
      converted = t.detach().to(dtype).contiguous();
    }
    // As to(Device): the data swapped under the existing handle, so optimizers and other holders see it.
    ::oxmera::detail::TensorImpl& dst = *t.impl();
    const ::oxmera::detail::TensorImpl& src = *converted.impl();
    dst.storage = src.storage;
    dst.strides = src.strides;
    dst.offset = src.offset;
    dst.contiguous = src.contiguous;
    dst.dtype = src.dtype;
    dst.grad = Tensor();
  };
  for (auto& [n, t] : named_parameters()) convert(t);
  for (auto& [n, t] : named_buffers()) convert(t);
  for (Module* m : modules()) m->param_dtype_ = dtype;
}

void Module::check_f32_input(const Tensor& x) const {
  ::oxmera::detail::check_defined(x, name().c_str());
  const char* want = param_dtype_ == DType::F64 ? "f64" : "f32";
  OXM_CHECK(x.dtype() == param_dtype_, DTypeMismatch, name(), ": input has dtype ", x.dtype(),
            " but the layer's parameters are ", want,
            "; cast the input with .to(DType::", param_dtype_ == DType::F64 ? "F64" : "F32",
            ") or the module with .to(DType::", x.dtype() == DType::F64 ? "F64" : "F32", ")");
}

// ------------------------------------------------------------------------------------------ printing
namespace {
// torch's _addindent: every line after the first indented by `n` spaces.
std::string add_indent(const std::string& s, int n) {
  std::string out;
  for (char c : s) {
    out += c;
    if (c == '\n') out.append(static_cast<size_t>(n), ' ');
  }
  return out;
}
}  // namespace

std::string Module::repr() const {
  std::vector<std::string> extra_lines, child_lines;
  {
    std::string e = extra_repr();
    if (!e.empty()) {
      std::istringstream is(e);
      for (std::string line; std::getline(is, line);) extra_lines.push_back(line);
    }
  }
  for (const auto& [n, m] : children()) child_lines.push_back("(" + n + "): " + add_indent(m->repr(), 2));
  std::string s = name() + "(";
  if (extra_lines.size() == 1 && child_lines.empty()) {
    s += extra_lines[0];
  } else if (!extra_lines.empty() || !child_lines.empty()) {
    s += "\n";
    for (const auto* lines : {&extra_lines, &child_lines})
      for (const auto& l : *lines) s += "  " + l + "\n";
  }
  return s + ")";
}

std::ostream& operator<<(std::ostream& os, const Module& m) { return os << m.repr(); }

// ------------------------------------------------------------------------------------------ AnyModule
const ModulePtr& AnyModule::ptr() const {
  OXM_CHECK(holder_ != nullptr, InvalidArgument, "AnyModule: empty (no module held)");
  return holder_->module;
}
const std::type_info& AnyModule::type_info() const {
  const Module& held = *ptr();
  return typeid(held);
}
std::string AnyModule::signature() const {
  OXM_CHECK(holder_ != nullptr, InvalidArgument, "AnyModule: empty (no module held)");
  return holder_->signature();
}
std::any AnyModule::call(const ArgRef* args, size_t n) const {
  OXM_CHECK(holder_ != nullptr, InvalidArgument, "AnyModule::forward: empty (no module held)");
  return holder_->call(args, n);
}
AnyModule AnyModule::rebind(ModulePtr m) const {
  const Module* fresh = m.get();
  const Module* held = holder_ != nullptr ? holder_->module.get() : nullptr;
  OXM_CHECK(held != nullptr && fresh != nullptr && typeid(*fresh) == typeid(*held), InvalidArgument,
            "AnyModule::rebind: the new module must have the held module's type");
  return AnyModule(holder_->rebind(std::move(m)));
}
void AnyModule::bad_get(const std::type_info& want) const {
  const Module& held = *ptr();
  OXM_FAIL(InvalidArgument, "AnyModule::get: the module is a ", module_detail::type_name(typeid(held)), ", not a ",
           module_detail::type_name(want));
}
void AnyModule::bad_return(const std::type_info& want) const {
  OXM_FAIL(InvalidArgument, "AnyModule(", holder_->module->name(), ")::forward: forward is ", holder_->signature(),
           " and returns ", module_detail::type_name(holder_->return_type()), ", not ", module_detail::type_name(want),
           "; call forward<", module_detail::type_name(holder_->return_type()), ">(...)");
}

}  // namespace oxmera::nn
