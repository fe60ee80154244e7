#pragma once
// Module: the base of every layer, and AnyModule, the type-erased holder containers keep.
//
// Parameters, buffers and child modules are registered by name. The preferred form registers a *member*
// (a pointer to member, `register_parameter("weight", &Linear::weight)`): the registry then reads the member
// every time, so assigning it — weight tying, `decoder->weight = embedding->weight` — is what
// named_parameters(), parameters(), state_dict(), optimizers built afterwards and nn::save see. The older form
// registers a value (`w = register_parameter("w", t)`); registering an existing name again replaces that
// entry (the explicit way to tie a value-registered parameter). Listings de-duplicate shared tensors by
// identity, keeping the first name, as torch's named_parameters(remove_duplicate=True); state_dict() keeps
// every name, as torch's.
//
// forward: a module either overrides the single-tensor `Tensor forward(const Tensor&)` (what Sequential,
// operator() and existing code use) or declares its own typed forward (`Tensor forward(const Tensor& x, const
// Tensor& mask)`, `std::tuple<Tensor, Tensor> forward(const Tensor&)`), called directly on the concrete type
// or through AnyModule, which checks the arguments at run time. One C++ rule applies: a forward whose
// parameter list is exactly (const Tensor&) overrides the virtual and must return Tensor; a single-input
// forward returning something else takes its input by value, `std::tuple<Tensor, Tensor> forward(Tensor x)`,
// or is const. Derive such a module from nn::Cloneable<Self> rather than Module directly: it also gives
// clone(), and clang's -Wall (-Woverloaded-virtual) stays quiet about forward hiding the virtual.
#include <any>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "oxmera/tensor.hpp"

// -Woverloaded-virtual is reported at Module::forward's declaration when Cloneable's deleted forward hides it
// (on purpose, see Cloneable); the pragmas cover this header only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Woverloaded-virtual"

namespace oxmera::nn {

class Module;
using ModulePtr = std::shared_ptr<Module>;

// state_dict(): names in torch's order (each module's parameters, then its buffers, then its children, depth
// first), with lookup by name. Converts to the vector save_safetensors takes.
struct StateDict : std::vector<std::pair<std::string, Tensor>> {
  using std::vector<std::pair<std::string, Tensor>>::vector;
  bool contains(const std::string& key) const;
  const Tensor& at(const std::string& key) const;  // InvalidArgument naming the key when absent
  std::vector<std::string> keys() const;
};

// What load_state_dict(dict, strict = false) did not match (torch's _IncompatibleKeys).
struct LoadStateDictResult {
  std::vector<std::string> missing_keys, unexpected_keys;
};

namespace module_detail {
// Readable type names for errors: "Tensor", "std::tuple<Tensor, Tensor>", "int".
std::string type_name(const std::type_info& t);
template <class T>
std::string param_type_name() {
  std::string s = type_name(typeid(std::remove_cvref_t<T>));
  if constexpr (std::is_const_v<std::remove_reference_t<T>>) s = "const " + s;
  if constexpr (std::is_lvalue_reference_v<T>) s += "&";
  if constexpr (std::is_rvalue_reference_v<T>) s += "&&";
  return s;
}

// Forward hooks of one module (Module::register_forward_pre_hook / register_forward_hook).
struct ForwardHooks {
  struct Pre {
    uint64_t id;
    std::function<Tensor(Module&, const Tensor&)> fn;
  };
  struct Post {
    uint64_t id;
    std::function<Tensor(Module&, const Tensor&, const Tensor&)> fn;
  };
  std::vector<Pre> pre;
  std::vector<Post> post;
  bool empty() const { return pre.empty() && post.empty(); }
};
// A module's hook lists. Copying a module (clone()) gives the copy lists of its own holding the same hooks,
// as torch's deepcopy; handles keep referring to the original's.
class ForwardHookSlot {
 public:
  ForwardHookSlot() = default;
  ForwardHookSlot(const ForwardHookSlot& o) : list(o.list ? std::make_shared<ForwardHooks>(*o.list) : nullptr) {}
  ForwardHookSlot& operator=(const ForwardHookSlot& o) {
    if (this != &o) list = o.list ? std::make_shared<ForwardHooks>(*o.list) : nullptr;
    return *this;
  }
  ForwardHookSlot(ForwardHookSlot&&) noexcept = default;
  ForwardHookSlot& operator=(ForwardHookSlot&&) noexcept = default;
  bool any() const { return list && !list->empty(); }
  std::shared_ptr<ForwardHooks> list;
};
}  // namespace module_detail

// Removes a module forward hook (torch's RemovableHandle); like oxmera::HookHandle, removing twice, or after
// the module is gone, does nothing.
class ModuleHookHandle {
 public:
  ModuleHookHandle() = default;
  ModuleHookHandle(std::weak_ptr<module_detail::ForwardHooks> list, uint64_t id) : list_(std::move(list)), id_(id) {}
  void remove();
  bool active() const;

 private:
  std::weak_ptr<module_detail::ForwardHooks> list_;
  uint64_t id_ = 0;
};

class Module {
 public:
  Module() = default;
  Module(const Module&) = default;
  Module& operator=(const Module&) = default;
  virtual ~Module() = default;

  // The single-tensor forward. Not overriding it is fine for a module whose forward takes other arguments;
  // calling it then is an InvalidArgument naming the module.
  virtual Tensor forward(const Tensor& x);
  // forward(x) with this module's forward hooks around it (calling forward directly skips them, as in torch).
  Tensor operator()(const Tensor& x) {
    if (!forward_hooks_.any()) [[likely]]
      return forward(x);
    return run_forward_hooks(x, [this](const Tensor& y) { return forward(y); });
  }

  // ---- forward hooks (torch's register_forward_pre_hook / register_forward_hook), run by operator()(x) and by
  // AnyModule (so by Sequential and the other containers) around a Tensor -> Tensor forward, in registration
  // order. A pre-hook, fn(module, input), sees the input and may return a replacement (an undefined Tensor, or
  // no return value, keeps it); a forward hook, fn(module, input, output), sees the input forward received and
  // the output, and may return a replacement output the same way. Hooks may register or remove hooks (the
  // change applies from the next call). The handle removes the hook.
  template <class F>
  ModuleHookHandle register_forward_pre_hook(F&& fn) {
    if constexpr (std::is_void_v<std::invoke_result_t<F&, Module&, const Tensor&>>) {
      return add_forward_pre_hook([h = std::forward<F>(fn)](Module& m, const Tensor& x) mutable {
        h(m, x);
        return Tensor();
      });
    } else {
      return add_forward_pre_hook(std::function<Tensor(Module&, const Tensor&)>(std::forward<F>(fn)));
    }
  }
  template <class F>
  ModuleHookHandle register_forward_hook(F&& fn) {
    if constexpr (std::is_void_v<std::invoke_result_t<F&, Module&, const Tensor&, const Tensor&>>) {
      return add_forward_hook([h = std::forward<F>(fn)](Module& m, const Tensor& x, const Tensor& y) mutable {
        h(m, x, y);
        return Tensor();
      });
    } else {
      return add_forward_hook(std::function<Tensor(Module&, const Tensor&, const Tensor&)>(std::forward<F>(fn)));
    }
  }
  bool has_forward_hooks() const { return forward_hooks_.any(); }
  // The pre-hooks, `fwd` on the (possibly replaced) input, then the forward hooks: what operator() and
  // AnyModule do when hooks are registered; for containers that call a child's forward some other way.
  Tensor run_forward_hooks(const Tensor& x, const std::function<Tensor(const Tensor&)>& fwd);
  // Short type name used in errors and printing ("Linear"); by default the class name without namespaces.
  virtual std::string name() const;
  // The part of the printed form inside the parentheses (torch's extra_repr): "in_features=4, ...".
  virtual std::string extra_repr() const { return ""; }
  // The tree as torch prints it: "Sequential(\n  (0): Linear(in_features=4, ...)\n)". Also operator<<.
  std::string repr() const;

  // Parameters of this module and its children, depth first in registration order, named with dots
  // ("0.weight", "encoder.1.bias"), like torch. Each tensor once, under its first name (a tied weight is
  // listed once); undefined members (Linear without bias) are skipped.
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool remove_duplicate) const;
  // Non-trainable state (BatchNorm running statistics), named and de-duplicated the same way.
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool remove_duplicate) const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const;
  // This module ("") and every submodule, depth first in registration order, named with dots ("blocks.0.fc"),
  // each once (a module shared under two names is listed under its first), as torch's named_modules(). The
  // pointers are the tree's own modules: valid while this module holds them.
  std::vector<std::pair<std::string, Module*>> named_modules();
  std::vector<Module*> modules();
  // fn on every submodule, then on this module (torch's Module.apply: children first), e.g. to initialise
  // weights by module type.
  Module& apply(const std::function<void(Module&)>& fn);

  // Every parameter and buffer by name, in torch's state_dict order; a tensor shared under several names
  // appears under each (as torch). The tensors are detached views of the module's own storage.
  StateDict state_dict() const;
  // state_dict() with each tensor once, under its first name: what nn::save and save_checkpoint write.
  StateDict state_dict_deduplicated() const;
  // Copies `dict` into the parameters and buffers in place (converted to each one's dtype and device), all or
  // nothing. A name counts as present when it or another name of the same (shared) tensor is in `dict`.
  // strict: missing or unexpected keys are an InvalidArgument listing them; otherwise they are returned. A
  // shape mismatch is a ShapeMismatch in both modes (as torch), an undefined tensor an InvalidArgument.
  LoadStateDictResult load_state_dict(const std::vector<std::pair<std::string, Tensor>>& dict, bool strict = true);
  LoadStateDictResult load_state_dict(const std::map<std::string, Tensor>& dict, bool strict = true);

  // Elements in parameters() (shared tensors counted once); trainable_only: those that require grad.
  int64_t num_parameters(bool trainable_only = false) const;

  // Deep copy of the tree: every parameter and buffer copied (not shared with this module), shared tensors and
  // shared submodules stay shared within the copy, training mode kept. Needs every module in the tree to be
  // copyable (built-in layers and containers are; a user module derives from nn::Cloneable<Self>) and its
  // tensors and typed child members registered by member; otherwise NotImplemented naming the module.
  ModulePtr clone() const;

  void train(bool on = true);  // recursive
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void zero_grad();  // drops every parameter's gradient
  // Moves every parameter and buffer to `device` in place (handles held elsewhere see the move).
  void to(Device device);
  // Converts every floating parameter and buffer to `dtype` (F32 or F64) in place, handles kept, gradients
  // dropped (they were of the old dtype); integer buffers (num_batches_tracked) stay. The layers then expect
  // inputs of that dtype. InvalidArgument for a non-floating dtype.
  void to(DType dtype);
  // The floating dtype the layers of this module expect (F32 unless to(DType) said otherwise).
  DType param_dtype() const { return param_dtype_; }

  // ---- registration (public, as torch's, so a parameter can be re-pointed from outside the module)
  // By value: the registry keeps this handle (re-registering `name` replaces it). Sets requires_grad.
  Tensor register_parameter(std::string name, Tensor t);
  // By member: the registry reads `member` of this object from now on. The three-argument forms assign
  // `value` to the member first (requires_grad set on parameters). An undefined member is skipped in listings.
  template <class M>
  Tensor& register_parameter(std::string name, Tensor M::*member) {
    return add_tensor(false, std::move(name), member_accessor(member), nullptr);
  }
  template <class M>
  Tensor& register_parameter(std::string name, Tensor M::*member, Tensor value) {
    return add_tensor(false, std::move(name), member_accessor(member), &value);
  }
  Tensor register_buffer(std::string name, Tensor t);
  template <class M>
  Tensor& register_buffer(std::string name, Tensor M::*member) {
    return add_tensor(true, std::move(name), member_accessor(member), nullptr);
  }
  template <class M>
  Tensor& register_buffer(std::string name, Tensor M::*member, Tensor value) {
    return add_tensor(true, std::move(name), member_accessor(member), &value);
  }
  // Child modules: by value, or by a shared_ptr member (then clone() can re-point it and assigning it
  // replaces the child). Registering an existing name again replaces that child.
  template <class M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> m) {
    add_child(std::move(name), m, {});
    return m;
  }
  template <class Owner, class M>
  std::shared_ptr<M>& register_module(std::string name, std::shared_ptr<M> Owner::*member, std::shared_ptr<M> m) {
    static_cast<Owner&>(*this).*member = std::move(m);
    return register_module(std::move(name), member);
  }
  template <class Owner, class M>
  std::shared_ptr<M>& register_module(std::string name, std::shared_ptr<M> Owner::*member) {
    ChildMember acc;
    acc.get = [member](const Module& self) -> ModulePtr { return static_cast<const Owner&>(self).*member; };
    acc.set = [member](Module& self, ModulePtr v) {
      static_cast<Owner&>(self).*member = std::static_pointer_cast<M>(v);
    };
    ModulePtr current = static_cast<Owner&>(*this).*member;
    add_child(std::move(name), current, std::move(acc));
    return static_cast<Owner&>(*this).*member;
  }

 protected:
  // Throws DTypeMismatch unless x has the module's parameter dtype (f32, or f64 after to(DType::F64)).
  void check_f32_input(const Tensor& x) const;
  // A copy of this object by its copy constructor (tensors and children still shared); clone() then replaces
  // them. The default throws NotImplemented; nn::Cloneable<Derived> and the built-in modules override it.
  virtual ModulePtr shallow_copy() const;
  // Called on a clone after its children were replaced (containers re-point their typed holders).
  virtual void children_replaced() {}
  // Containers whose children live only in the registry (Sequential, ModuleList, ModuleDict) set this, so
  // clone() may replace value-registered children.
  void set_children_owned_by_registry() { children_owned_ = true; }
  // Replaces every child with `children`, in order (containers renumbering "0", "1", ...).
  void reset_children(const std::vector<std::pair<std::string, ModulePtr>>& children);

 private:
  using TensorAccessor = std::function<Tensor&(Module&)>;
  struct TensorSlot {
    std::string name;
    Tensor value;           // by-value registration
    TensorAccessor member;  // by-member registration (empty for by-value)
  };
  struct ChildMember {
    std::function<ModulePtr(const Module&)> get;
    std::function<void(Module&, ModulePtr)> set;
  };
  struct ChildSlot {
    std::string name;
    ModulePtr value;
    ChildMember member;
  };
  template <class M>
  static TensorAccessor member_accessor(Tensor M::*member) {
    static_assert(std::is_base_of_v<Module, M>, "register_parameter/register_buffer: the member must be of a Module");
    return [member](Module& self) -> Tensor& { return static_cast<M&>(self).*member; };
  }
  ModuleHookHandle add_forward_pre_hook(std::function<Tensor(Module&, const Tensor&)> fn);
  ModuleHookHandle add_forward_hook(std::function<Tensor(Module&, const Tensor&, const Tensor&)> fn);
  Tensor& add_tensor(bool buffer, std::string name, TensorAccessor member, Tensor* value);
  void add_child(std::string name, ModulePtr m, ChildMember member);
  const Tensor& slot_tensor(const TensorSlot& s) const;
  ModulePtr child_of(const ChildSlot& s) const;
  void collect(const std::string& prefix, int which, std::vector<std::pair<std::string, Tensor>>& out) const;
  std::vector<std::pair<std::string, Tensor>> listing(int which, bool remove_duplicate) const;
  ModulePtr clone_into(void* memo) const;  // memo: the clone's tensor and module maps (module.cpp)

  std::vector<TensorSlot> params_, buffers_;
  std::vector<ChildSlot> children_;
  mutable std::vector<std::pair<std::string, ModulePtr>> children_view_;
  bool training_ = true;
  DType param_dtype_ = DType::F32;
  bool children_owned_ = false;
  module_detail::ForwardHookSlot forward_hooks_;
};

std::ostream& operator<<(std::ostream& os, const Module& m);

// Elements in m.parameters() (shared tensors once); trainable_only: those that require grad.
int64_t parameter_count(const Module& m, bool trainable_only = false);

// Makes a user module copyable for clone(): `class Block : public nn::Cloneable<Block> { ... };`
// (Base: another module class to derive from, e.g. Cloneable<MyLinear, nn::Linear>).
namespace module_detail {
struct NotAForward {};
}  // namespace module_detail
// The deleted forward stops name lookup here, so a typed forward in Derived (forward(x, mask)) does not hide
// the virtual Module::forward from -Woverloaded-virtual's point of view (clang and GCC >= 13 warn otherwise).
// Overriding forward(const Tensor&) in Derived works as usual.
template <class Derived, class Base = Module>
class Cloneable : public Base {
 public:
  using Base::Base;
  void forward(module_detail::NotAForward) = delete;

 protected:
  ModulePtr shallow_copy() const override { return std::make_shared<Derived>(static_cast<const Derived&>(*this)); }
};

// Typed clone: nn::clone(model) returns a std::shared_ptr of the same type.
template <class M>
std::shared_ptr<M> clone(const std::shared_ptr<M>& m) {
  return std::static_pointer_cast<M>(m->clone());
}

// ------------------------------------------------------------------------------------------ AnyModule
// Holds any module (as a shared_ptr to its concrete type) and calls its forward with arguments checked at run
// time: `AnyModule a(std::make_shared<Block>()); Tensor y = a.forward(x, mask);`, or with another return
// type `a.forward<std::tuple<Tensor, Tensor>>(x)`. The module's class must declare exactly one forward
// (overloads and templates cannot be erased). Arguments must have forward's parameter types; arithmetic
// values convert (not floating to integer), string literals convert to std::string. A wrong count, type or
// return type is an InvalidArgument naming the module, forward's signature and the argument types.
class AnyModule {
 public:
  struct ArgRef {
    void* ptr = nullptr;
    const std::type_info* type = nullptr;
    bool is_const = false;
    bool (*convert)(const void* src, const std::type_info& target, void* dst) = nullptr;
  };
  struct Holder {
    virtual ~Holder() = default;
    virtual std::any call(const ArgRef* args, size_t n) = 0;
    virtual const std::type_info& return_type() const = 0;
    virtual std::string signature() const = 0;  // "Tensor(const Tensor&, const Tensor&)"
    virtual bool tensor_to_tensor() const = 0;
    virtual Tensor call_tensor(const Tensor& x) = 0;
    virtual std::shared_ptr<Holder> rebind(ModulePtr m) const = 0;
    ModulePtr module;
  };

  AnyModule() = default;
  template <class M, std::enable_if_t<std::is_base_of_v<Module, M>, int> = 0>
  AnyModule(std::shared_ptr<M> module);  // NOLINT(google-explicit-constructor): containers take modules as is
  template <class M, std::enable_if_t<std::is_base_of_v<Module, std::remove_cvref_t<M>>, int> = 0>
  AnyModule(M&& module)  // NOLINT(google-explicit-constructor)
      : AnyModule(std::make_shared<std::remove_cvref_t<M>>(std::forward<M>(module))) {}

  template <class Ret = Tensor, class... Args>
  Ret forward(Args&&... args);
  template <class... Args>
  Tensor operator()(Args&&... args) {
    return forward<Tensor>(std::forward<Args>(args)...);
  }

  bool is_empty() const { return holder_ == nullptr; }
  const ModulePtr& ptr() const;
  Module* operator->() const { return ptr().get(); }
  Module& operator*() const { return *ptr(); }
  // The module as a T (InvalidArgument naming both types when it is not one).
  template <class T>
  T& get() const {
    auto* p = dynamic_cast<T*>(ptr().get());
    if (!p) bad_get(typeid(T));
    return *p;
  }
  const std::type_info& type_info() const;
  std::string signature() const;  // of forward: "Tensor(const Tensor&, const Tensor&)"
  bool is_tensor_to_tensor() const { return holder_ && holder_->tensor_to_tensor(); }
  // The same forward bound to `m`, which must have the held module's dynamic type (clone() uses it).
  AnyModule rebind(ModulePtr m) const;

 private:
  explicit AnyModule(std::shared_ptr<Holder> h) : holder_(std::move(h)) {}
  std::any call(const ArgRef* args, size_t n) const;
  [[noreturn]] void bad_get(const std::type_info& want) const;
  [[noreturn]] void bad_return(const std::type_info& want) const;
  std::shared_ptr<Holder> holder_;
};

namespace module_detail {

[[noreturn]] void throw_bad_forward_call(const AnyModule::Holder& h, const AnyModule::ArgRef* args, size_t n,
                                         const std::string& why);

template <class A>
bool convert_arg(const void* src, const std::type_info& target, void* dst) {
  using D = std::remove_cvref_t<A>;
  if constexpr (std::is_arithmetic_v<D>) {
    const D v = *static_cast<const D*>(src);
    bool done = false;
    auto try_one = [&](auto tag) {
      using T = decltype(tag);
      if (done || target != typeid(T)) return;
      if constexpr (std::is_floating_point_v<D> && !std::is_floating_point_v<T>) return;  // would truncate
      if constexpr (std::is_same_v<T, bool> && !std::is_same_v<D, bool>) return;
      *static_cast<T*>(dst) = static_cast<T>(v);
      done = true;
    };
    try_one(bool{}), try_one(char{}), try_one(static_cast<signed char>(0)), try_one(static_cast<unsigned char>(0)),
        try_one(short{}), try_one(static_cast<unsigned short>(0)), try_one(int{}), try_one(unsigned{}), try_one(long{}),
        try_one(static_cast<unsigned long>(0)), try_one(static_cast<long long>(0)),
        try_one(static_cast<unsigned long long>(0)), try_one(float{}), try_one(double{}),
        try_one(static_cast<long double>(0));
    return done;
  } else if constexpr (std::is_array_v<D> && std::is_same_v<std::remove_cv_t<std::remove_extent_t<D>>, char>) {
    if (target != typeid(std::string)) return false;
    *static_cast<std::string*>(dst) = std::string(static_cast<const char*>(src));
    return true;
  } else if constexpr (std::is_same_v<D, const char*> || std::is_same_v<D, char*>) {
    if (target != typeid(std::string)) return false;
    *static_cast<std::string*>(dst) = std::string(*static_cast<const D*>(src));
    return true;
  } else {
    return false;
  }
}

// One argument of forward's parameter type P, taken from an ArgRef (exact type or converted). Movable: it
// remembers whether it converted, not a pointer into itself.
template <class P>
class ForwardArg {
  using D = std::remove_cvref_t<P>;
  static constexpr bool kMutableRef = std::is_lvalue_reference_v<P> && !std::is_const_v<std::remove_reference_t<P>>;
  static constexpr bool kConvertible = !kMutableRef && (std::is_arithmetic_v<D> || std::is_same_v<D, std::string>);

 public:
  ForwardArg(const AnyModule::ArgRef& a, size_t index, const AnyModule::Holder& h, const AnyModule::ArgRef* all,
             size_t n) {
    if (*a.type == typeid(D)) {
      if (kMutableRef && a.is_const)
        throw_bad_forward_call(
            h, all, n, "argument " + std::to_string(index + 1) + " is const but forward takes " + param_type_name<P>());
      ptr_ = static_cast<D*>(a.ptr);
      return;
    }
    if constexpr (kConvertible) {
      if (a.convert && a.convert(a.ptr, typeid(D), &converted_)) {
        converted_used_ = true;
        return;
      }
    }
    throw_bad_forward_call(h, all, n,
                           "argument " + std::to_string(index + 1) + " is " + type_name(*a.type) + ", forward takes " +
                               param_type_name<P>());
  }
  P get() {
    D* p = ptr_;
    if constexpr (kConvertible)
      if (converted_used_) p = &converted_;
    if constexpr (std::is_rvalue_reference_v<P>) {
      moved_ = *p;  // never move from the caller's object
      return std::move(moved_);
    } else {
      return *p;
    }
  }

 private:
  D* ptr_ = nullptr;
  bool converted_used_ = false;
  std::conditional_t<kConvertible, D, char> converted_{};
  std::conditional_t<std::is_rvalue_reference_v<P>, D, char> moved_{};
};

template <class FP>
struct ForwardTraits;
#define OXM_FORWARD_TRAITS(qual)                  \
  template <class C, class R, class... P>         \
  struct ForwardTraits<R (C::*)(P...) qual> {     \
    using Ret = R;                                \
    template <template <class...> class T>        \
    using Apply = T<P...>;                        \
    static constexpr size_t arity = sizeof...(P); \
  };
OXM_FORWARD_TRAITS()
OXM_FORWARD_TRAITS(const)
OXM_FORWARD_TRAITS(noexcept)
OXM_FORWARD_TRAITS(const noexcept)
#undef OXM_FORWARD_TRAITS

template <class M>
concept HasOneForward = requires {
  &M::forward;
};

template <class M, class FP, class R, class... P>
struct TypedHolder final : AnyModule::Holder {
  using RetD = std::remove_cvref_t<R>;
  static_assert(std::is_void_v<R> || std::is_copy_constructible_v<RetD>,
                "AnyModule: forward's return type must be copyable (or void)");
  static constexpr bool kTensorToTensor =
      sizeof...(P) == 1 && std::is_same_v<RetD, Tensor> && (std::is_same_v<std::remove_cvref_t<P>, Tensor> && ...);

  TypedHolder(std::shared_ptr<M> m, FP f) : typed(std::move(m)), fp(f) { module = typed; }

  std::any call(const AnyModule::ArgRef* args, size_t n) override {
    if (n != sizeof...(P))
      throw_bad_forward_call(
          *this, args, n,
          "forward takes " + std::to_string(sizeof...(P)) + " argument(s), " + std::to_string(n) + " given");
    return call_impl(args, n, std::index_sequence_for<P...>{});
  }
  template <size_t... I>
  std::any call_impl(const AnyModule::ArgRef* args, size_t n, std::index_sequence<I...>) {
    [[maybe_unused]] std::tuple<ForwardArg<P>...> in{ForwardArg<P>(args[I], I, *this, args, n)...};
    if constexpr (std::is_void_v<R>) {
      ((*typed).*fp)(std::get<I>(in).get()...);
      return {};
    } else {
      return std::any(RetD(((*typed).*fp)(std::get<I>(in).get()...)));
    }
  }
  const std::type_info& return_type() const override { return typeid(RetD); }
  std::string signature() const override {
    std::string s;
    if constexpr (std::is_void_v<R>)
      s = "void";
    else
      s = param_type_name<R>();
    s += "(";
    size_t i = 0;
    ((s += (i++ ? ", " : "") + param_type_name<P>()), ...);
    return s + ")";
  }
  bool tensor_to_tensor() const override { return kTensorToTensor; }
  Tensor call_tensor(const Tensor& x) override {
    if constexpr (kTensorToTensor) {
      Tensor copy = x;  // forward may take Tensor& or Tensor&&; the caller's handle stays as it is
      return ((*typed).*fp)(static_cast<P>(copy)...);
    } else {
      AnyModule::ArgRef a{const_cast<Tensor*>(&x), &typeid(Tensor), true, nullptr};
      throw_bad_forward_call(*this, &a, 1, "forward is not Tensor -> Tensor");
    }
  }
  std::shared_ptr<AnyModule::Holder> rebind(ModulePtr m) const override {
    return std::make_shared<TypedHolder>(std::static_pointer_cast<M>(std::move(m)), fp);
  }

  std::shared_ptr<M> typed;
  FP fp;
};

template <class M, class FP, class... P>
using TypedHolderFor = TypedHolder<M, FP, typename ForwardTraits<FP>::Ret, P...>;

template <class M, class FP>
struct MakeHolder {
  template <class... P>
  using Bound = TypedHolderFor<M, FP, P...>;
  using type = typename ForwardTraits<FP>::template Apply<Bound>;
};

}  // namespace module_detail

template <class M, std::enable_if_t<std::is_base_of_v<Module, M>, int>>
AnyModule::AnyModule(std::shared_ptr<M> module) {
  static_assert(module_detail::HasOneForward<M>,
                "AnyModule: the module class must declare exactly one forward (not overloaded, not a template)");
  if (!module) return;
  using FP = decltype(&M::forward);
  holder_ = std::make_shared<typename module_detail::MakeHolder<M, FP>::type>(std::move(module), &M::forward);
}

template <class Ret, class... Args>
Ret AnyModule::forward(Args&&... args) {
  if constexpr (std::is_same_v<Ret, Tensor> && sizeof...(Args) == 1 &&
                (std::is_same_v<std::remove_cvref_t<Args>, Tensor> && ...)) {
    if (holder_ && holder_->tensor_to_tensor()) {
      Module& m = *holder_->module;
      if (m.has_forward_hooks()) [[unlikely]]
        return m.run_forward_hooks(args..., [this](const Tensor& y) { return holder_->call_tensor(y); });
      return holder_->call_tensor(args...);
    }
  }
  const ArgRef refs[sizeof...(Args) + 1] = {
      ArgRef{const_cast<void*>(static_cast<const void*>(std::addressof(args))), &typeid(std::remove_cvref_t<Args>),
             std::is_const_v<std::remove_reference_t<Args>>, &module_detail::convert_arg<Args>}...,
      ArgRef{}};
  std::any out = call(refs, sizeof...(Args));
  if constexpr (std::is_void_v<Ret>) {
    return;
  } else {
    if (auto* p = std::any_cast<Ret>(&out)) return std::move(*p);
    bad_return(typeid(Ret));
  }
}

}  // namespace oxmera::nn

#pragma GCC diagnostic pop
