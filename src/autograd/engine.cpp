// Reverse-mode engine: iterative topological walk (no recursion), gradient buffers kept on the nodes,
// accumulation into leaves, and iterative teardown of deep graphs.
#include <algorithm>
#include <tuple>
#include <vector>

#include "autograd/node.hpp"
#include "oxmera/autograd.hpp"

namespace oxmera {
namespace {
thread_local bool t_grad_enabled = true;
}
bool grad_enabled() noexcept { return t_grad_enabled; }
void set_grad_enabled(bool enabled) noexcept { t_grad_enabled = enabled; }

namespace detail {

// Deleting a node releases its edges, which may release the next node: a 100k-deep chain would recurse
// 100k times. Instead, nodes whose count drops to zero while a teardown is running are queued and deleted
// by the outermost call.
void destroy(Node* n) noexcept {
  thread_local bool tearing_down = false;
  thread_local std::vector<Node*>* pending = nullptr;
  if (tearing_down) {
    pending->push_back(n);
    return;
  }
  tearing_down = true;
  std::vector<Node*> local;
  pending = &local;
  delete n;
  while (!local.empty()) {
    Node* x = local.back();
    local.pop_back();
    delete x;
  }
  pending = nullptr;
  tearing_down = false;
}

namespace {
// The node whose apply() the engine is running on this thread (null outside backward): what a saved output is
// re-attached to under create_graph.
thread_local Node* t_applying = nullptr;
}  // namespace

void SavedTensor::save(const Tensor& t, bool is_output, uint32_t output_nr) {
  if (!t.defined()) return;
  const TensorImpl& s = *t.impl();
  is_output_ = is_output;
  output_nr_ = output_nr;
  // An output is kept as an alias without history: with its grad_fn (this node) it would be a reference cycle.
  // An input is kept as it is, history included (upstream, so no cycle): create_graph differentiates through it.
  tensor_ = is_output ? make_view(t, s.shape, s.strides, s.offset) : t;
  version_ = s.storage->version;
}

Tensor SavedTensor::get(const char* op) const {
  OXM_CHECK(!tensor_.defined() || tensor_.impl()->storage->version == version_, InvalidArgument, "backward of ", op,
            ": a tensor saved for the gradient was modified in place after it was used; clone it before "
            "modifying it, or modify it before the forward pass");
  // create_graph: a saved output comes back as the output of the node being applied, so the gradient knows how
  // it depends on it.
  if (!is_output_ || !t_grad_enabled || !t_applying || !tensor_.defined()) return tensor_;
  const TensorImpl& s = *tensor_.impl();
  Tensor t = make_view(tensor_, s.shape, s.strides, s.offset);
  TensorImpl& o = *t.impl();
  o.grad_fn = Ref<Node>::share(t_applying);
  o.output_nr = output_nr_;
  o.requires_grad = true;
  return t;
}

Edge edge_of(const Tensor& t) {
  const TensorImpl& s = *t.impl();
  if (!s.requires_grad) return {};
  if (s.grad_fn) return {s.grad_fn, Tensor(), s.output_nr};
  return {nullptr, t, 0};
}

bool needs_tape(const Tensor& a) { return t_grad_enabled && a.impl()->requires_grad; }
bool needs_tape(const Tensor& a, const Tensor& b) {
  return t_grad_enabled && (a.impl()->requires_grad || b.impl()->requires_grad);
}

void set_history(Tensor& out, Node* n, uint32_t output_nr) {
  TensorImpl& o = *out.impl();
  o.grad_fn = Ref<Node>::adopt(n);
  o.output_nr = output_nr;
  o.requires_grad = true;
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  const Shape& gs = g.shape();
  if (gs == shape) return g;
  const size_t lead = gs.size() - shape.size();
  Dims dims;
  for (size_t i = 0; i < gs.size(); ++i) {
    if (i < lead || (shape[i - lead] == 1 && gs[i] != 1)) dims.push_back(static_cast<int64_t>(i));
  }
  Tensor r = dims.empty() ? g : g.sum(dims, true);
  return r.reshape(shape);
}

namespace {

// Runs a leaf's or node output's pre-hooks on g (in registration order); each may replace it.
void run_pre_hooks(const HookList* hooks, uint32_t output_nr, Tensor& g) {
  if (!hooks || hooks->pre.empty() || !g.defined()) return;
  // Copy: a hook may register or remove hooks.
  std::vector<HookList::Pre> pre = hooks->pre;
  for (auto& h : pre) {
    if (h.output_nr != output_nr) continue;
    Tensor r = h.fn(g);
    if (!r.defined()) continue;
    OXM_CHECK(r.shape() == g.shape() && r.dtype() == g.dtype() && r.device() == g.device(), InvalidArgument,
              "gradient hook: returned a tensor of shape ", r.shape(), ", dtype ", r.dtype(), " on ", r.device(),
              " for a gradient of shape ", g.shape(), ", dtype ", g.dtype(), " on ", g.device(),
              "; return a tensor like the gradient, or an undefined Tensor() to keep it");
    g = r;
  }
}

void accumulate_leaf(const Tensor& leaf, Tensor g) {
  TensorImpl& L = *leaf.impl();
  if (g.shape() != L.shape) g = sum_to(g, L.shape);
  run_pre_hooks(L.hooks.get(), 0, g);
  if (!L.grad.defined()) {
    // Own the gradient: an alias of a buffer used elsewhere (a seed, or the same gradient handed to two
    // leaves by add) must not be shared, since optimizers update .grad in place.
    const TensorImpl& G = *g.impl();
    // (contiguous: .grad has the leaf's layout, as the optimizers' kernels expect)
    L.grad = is_sole_handle(G) && G.contiguous && G.offset == 0 ? g : g.clone();
  } else {
    L.grad = L.grad + g;
  }
}

void run_post_hooks(const Tensor& leaf) {
  const HookList* hooks = leaf.impl()->hooks.get();
  if (!hooks || hooks->post.empty()) return;
  std::vector<HookList::Post> post = hooks->post;
  Tensor t = leaf;
  for (auto& h : post) h.fn(t);
}

// A retained non-leaf gets its own copy (the same gradient tensor continues through the node's backward).
void accumulate_retained(TensorImpl& t, const Tensor& g) { t.grad = t.grad.defined() ? t.grad + g : g.clone(); }

std::atomic<uint64_t> g_epoch{0};

}  // namespace

// One backward: from roots (seeded) through the graph. Without `capture` gradients accumulate into leaves'
// .grad (Tensor::backward); with it (autograd::grad) the gradients of `inputs` are returned in `captured` and no
// .grad is touched, and only the nodes between the roots and the inputs run.
struct BackwardTask {
  std::vector<Tensor> roots, seeds;
  bool retain_graph = false;
  bool create_graph = false;  // run the rules under grad mode: the gradients get histories of their own
  const std::vector<Tensor>* inputs = nullptr;
  std::vector<Tensor>* captured = nullptr;
};

SmallDims dense_order(const Shape& shape, const Strides& strides) {
  const size_t n = shape.size();
  SmallDims order(n);
  for (size_t i = 0; i < n; ++i) order[i] = static_cast<int64_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
  int64_t expected = 1;
  for (size_t i = n; i-- > 0;) {
    const int64_t d = order[i];
    if (shape[d] == 1) continue;
    if (strides[d] != expected) return {};
    expected *= shape[d];
  }
  return order;
}

namespace {

// A gradient buffer sums what arrives for one output. Without create_graph the sum is taken in place when the buffer
// is the only handle on its memory (no other slot, node or view sees it), as torch's input buffers do: no new
// buffer per contribution.
void add_into(Tensor& slot, Tensor g) {
  if (!slot.defined()) {
    slot = std::move(g);
    return;
  }
  const TensorImpl& S = *slot.impl();
  if (!grad_enabled() && is_sole_handle(S) && S.shape == g.impl()->shape && S.dtype == g.impl()->dtype &&
      S.device() == g.impl()->device()) {
    slot.add_(g);
    return;
  }
  slot = slot + g;
}

}  // namespace

bool add_into_view_of_buffer(const Edge& e, const Shape& in_shape, const Tensor& g,
                             const std::function<Tensor(const Tensor&)>& view) {
  if (grad_enabled() || !e.node) return false;
  const Node& c = *e.node;
  if (e.output_nr >= c.grad_buffer.size() || !c.grad_buffer[e.output_nr].defined()) return false;
  const Tensor& slot = c.grad_buffer[e.output_nr];
  const TensorImpl& S = *slot.impl();
  if (!is_sole_handle(S) || S.shape != in_shape || S.dtype != g.dtype() || S.device() != g.device()) return false;
  view(slot).add_(g);
  return true;
}

namespace {

// Sets grad mode for one backward and restores it (also when a rule throws).
struct GradModeScope {
  bool prev;
  explicit GradModeScope(bool on) : prev(t_grad_enabled) { t_grad_enabled = on; }
  ~GradModeScope() { t_grad_enabled = prev; }
};
struct ApplyingScope {
  Node* prev;
  explicit ApplyingScope(Node* n) : prev(t_applying) { t_applying = n; }
  ~ApplyingScope() { t_applying = prev; }
};

void run_task(BackwardTask& task) {
  // Backward rules are recorded only for create_graph (higher-order gradients), which also keeps the graph: the
  // new graph refers to the old one's saved tensors (torch's default retain_graph = create_graph).
  GradModeScope grad_mode(task.create_graph);
  const bool retain = task.retain_graph || task.create_graph;
  const bool capture = task.captured != nullptr;
  // Where captured gradients go: leaves by impl, non-leaves by (node, output_nr).
  std::vector<std::pair<const TensorImpl*, size_t>> leaf_slots;
  std::vector<std::tuple<const Node*, uint32_t, size_t>> node_slots;
  if (capture) {
    task.captured->assign(task.inputs->size(), Tensor());
    for (size_t i = 0; i < task.inputs->size(); ++i) {
      const TensorImpl& t = *(*task.inputs)[i].impl();
      if (t.grad_fn)
        node_slots.emplace_back(t.grad_fn.get(), t.output_nr, i);
      else
        leaf_slots.emplace_back(&t, i);
    }
  }
  auto capture_leaf = [&](const TensorImpl* leaf, const Tensor& g) {
    bool any = false;
    for (auto& [p, i] : leaf_slots)
      if (p == leaf) {
        Tensor v = g.shape() == leaf->shape ? g : sum_to(g, leaf->shape);
        run_pre_hooks(leaf->hooks.get(), 0, v);
        add_into((*task.captured)[i], v);
        any = true;
      }
    return any;
  };
  const uint64_t epoch = g_epoch.fetch_add(1) + 1;
  // Pass 1: every node reachable from the roots, and how many edges point at each; leaves with
  // post-accumulate hooks, and how many edges point at each of them.
  std::vector<Node*> stack, reached;
  std::vector<std::pair<TensorImpl*, int>> leaf_pending;
  auto reach = [&](Node* c) {
    if (c->epoch != epoch) {
      OXM_CHECK(!c->released, InvalidArgument, "backward: trying to backward through the graph a second time (node '",
                c->name(),
                "' already freed the tensors it saved for backward); pass retain_graph = true to the "
                "first backward (or autograd::grad) if you need to backward twice");
      c->epoch = epoch;
      c->pending = 0;
      c->grad_buffer.clear();
      c->index = static_cast<uint32_t>(reached.size());
      stack.push_back(c);
      reached.push_back(c);
    }
    ++c->pending;
  };
  for (const Tensor& root : task.roots)
    if (Node* n = root.impl()->grad_fn.get()) reach(n);
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (size_t i = 0; i < n->next.size(); ++i) {
      Edge& e = n->next[i];
      if (Node* c = e.node.get()) {
        reach(c);
      } else if (!capture && e.leaf.defined()) {
        TensorImpl* L = e.leaf.impl();
        if (L->hooks && !L->hooks->post.empty()) {
          auto it = std::find_if(leaf_pending.begin(), leaf_pending.end(), [&](auto& p) { return p.first == L; });
          if (it == leaf_pending.end())
            leaf_pending.emplace_back(L, 1);
          else
            ++it->second;
        }
      }
    }
  }
  // The roots' own pending counts were bumped once each by reach(); a root node is ready once every other
  // consumer inside the graph has delivered, so remove the roots' contributions.
  for (const Tensor& root : task.roots)
    if (Node* n = root.impl()->grad_fn.get()) --n->pending;
  // With capture: a node runs only if an input lies below it (needed), computed children first.
  std::vector<char> needed;
  auto needed_of = [&](const Node* n) -> bool { return n->epoch == epoch && needed[n->index]; };
  if (capture) {
    // `reached` is in discovery order; a child can be discovered after its parent, so iterate to a fixed point
    // (converges in depth passes; graphs are DAGs, typically one or two passes suffice for autograd::grad).
    needed.assign(reached.size(), 0);
    bool changed = true;
    while (changed) {
      changed = false;
      for (size_t k = reached.size(); k-- > 0;) {
        if (needed[k]) continue;
        const Node* n = reached[k];
        bool need = false;
        for (size_t i = 0; i < n->next.size() && !need; ++i) {
          const Edge& e = n->next[i];
          if (e.node) {
            for (auto& [p, o, slot] : node_slots) need = need || (p == e.node.get() && o == e.output_nr);
            need = need || needed_of(e.node.get());
          } else if (e.leaf.defined()) {
            for (auto& [p, slot] : leaf_slots) need = need || p == e.leaf.impl();
          }
        }
        if (need) {
          needed[k] = 1;
          changed = true;
        }
      }
    }
  }
  // Seeds: into the root nodes' buffers (two roots of one node add up); a leaf root accumulates directly.
  std::vector<Node*> ready;
  for (size_t r = 0; r < task.roots.size(); ++r) {
    const TensorImpl& ri = *task.roots[r].impl();
    if (Node* n = ri.grad_fn.get()) {
      if (n->grad_buffer.size() < n->num_outputs) n->grad_buffer.resize(n->num_outputs);
      add_into(n->grad_buffer[ri.output_nr], task.seeds[r]);
    } else if (capture) {
      capture_leaf(&ri, task.seeds[r]);
    } else {
      accumulate_leaf(task.roots[r], task.seeds[r]);
      run_post_hooks(task.roots[r]);
    }
  }
  for (Node* n : reached)
    if (n->pending == 0) ready.push_back(n);
  // Pass 2: Kahn's algorithm; a node runs once all its consumers have delivered their gradients.
  std::vector<Tensor> grad_out, grad_in;
  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    grad_out.assign(n->num_outputs, Tensor());
    // With capture, a node neither below an input nor holding one is skipped (its hooks do not run either).
    bool hosts = false;
    for (auto& [p, o, slot] : node_slots) hosts = hosts || p == n;
    const bool active = !capture || hosts || needed_of(n);
    bool any = false;
    for (size_t i = 0; active && i < n->num_outputs && i < n->grad_buffer.size(); ++i) {
      grad_out[i] = std::move(n->grad_buffer[i]);
      run_pre_hooks(n->hooks.get(), static_cast<uint32_t>(i), grad_out[i]);
      any |= grad_out[i].defined();
    }
    n->grad_buffer.clear();
    if (capture) {
      for (auto& [p, o, slot] : node_slots)
        if (p == n && o < grad_out.size() && grad_out[o].defined()) add_into((*task.captured)[slot], grad_out[o]);
    } else {
      for (const Node::Retained& rt : n->retained)
        if (rt.output_nr < grad_out.size() && grad_out[rt.output_nr].defined())
          accumulate_retained(*rt.tensor, grad_out[rt.output_nr]);
    }
    const bool run = any && active && (!capture || needed_of(n));
    grad_in.assign(n->next.size(), Tensor());
    if (run) {
      OXM_CHECK(!task.create_graph || n->differentiable_backward(), NotImplemented,
                "backward with create_graph: the gradient of '", n->name(),
                "' is computed by a kernel of its own and has no derivative yet, so higher-order gradients through "
                "it are not available; see docs/LIMITATIONS.md (Autograd)");
      ApplyingScope applying(n);
      n->apply(grad_out.data(), grad_in.data());
      if (t_anomaly_enabled) [[unlikely]]
        check_anomaly(*n, grad_in.data(), grad_in.size());
    }
    if (run && !retain && n->release_saved()) n->released = true;
    // Drop the incoming gradients now: a view node's output shares their storage, and a leaf can take
    // ownership of a gradient (no copy) only when nothing else holds it.
    for (Tensor& g : grad_out) g = Tensor();
    for (size_t i = 0; i < n->next.size(); ++i) {
      Edge& e = n->next[i];
      if (e.node) {
        Node* c = e.node.get();
        if (grad_in[i].defined()) {
          if (c->grad_buffer.size() < c->num_outputs) c->grad_buffer.resize(c->num_outputs);
          add_into(c->grad_buffer[e.output_nr], std::move(grad_in[i]));
        }
        if (--c->pending == 0) ready.push_back(c);
      } else if (e.leaf.defined()) {
        if (capture) {
          if (grad_in[i].defined()) capture_leaf(e.leaf.impl(), grad_in[i]);
          continue;
        }
        if (grad_in[i].defined()) accumulate_leaf(e.leaf, std::move(grad_in[i]));
        for (auto& lp : leaf_pending)
          if (lp.first == e.leaf.impl() && --lp.second == 0) run_post_hooks(e.leaf);
      }
    }
  }
}

}  // namespace

void run_task_for_grad(BackwardTask& task) { run_task(task); }

void run_backward(const Tensor& root, const Tensor& seed, bool retain_graph, bool create_graph) {
  BackwardTask task;
  task.roots.push_back(root);
  task.seeds.push_back(seed);
  task.retain_graph = retain_graph;
  task.create_graph = create_graph;
  run_task(task);
}

}  // namespace detail

// ---------------------------------------------------------------- hooks
void HookHandle::remove() {
  auto list = list_.lock();
  if (!list) return;
  std::erase_if(list->pre, [&](const detail::HookList::Pre& h) { return h.id == id_; });
  std::erase_if(list->post, [&](const detail::HookList::Post& h) { return h.id == id_; });
  list_.reset();
}
bool HookHandle::active() const {
  auto list = list_.lock();
  if (!list) return false;
  for (auto& h : list->pre)
    if (h.id == id_) return true;
  for (auto& h : list->post)
    if (h.id == id_) return true;
  return false;
}

namespace {
std::atomic<uint64_t> g_hook_id{0};
}

HookHandle Tensor::register_hook_impl(std::function<Tensor(const Tensor&)> hook) {
  detail::check_defined(*this, "register_hook");
  auto& t = *impl_;
  OXM_CHECK(t.requires_grad, InvalidArgument,
            "register_hook: this tensor does not require grad, so no gradient will flow into it; call "
            "requires_grad_() on it (a leaf) or on an input it is computed from");
  std::shared_ptr<detail::HookList>& list = t.grad_fn ? t.grad_fn->hooks : t.hooks;
  if (!list) list = std::make_shared<detail::HookList>();
  const uint64_t id = ++g_hook_id;
  list->pre.push_back({id, t.grad_fn ? t.output_nr : 0u, std::move(hook)});
  return HookHandle(list, id);
}

HookHandle Tensor::register_post_accumulate_grad_hook(std::function<void(Tensor&)> hook) {
  detail::check_defined(*this, "register_post_accumulate_grad_hook");
  auto& t = *impl_;
  OXM_CHECK(!t.grad_fn && t.requires_grad, InvalidArgument,
            "register_post_accumulate_grad_hook: only leaves that require grad accumulate a .grad (this tensor ",
            t.grad_fn ? "is the result of an op" : "does not require grad", "); register it on a parameter");
  if (!t.hooks) t.hooks = std::make_shared<detail::HookList>();
  const uint64_t id = ++g_hook_id;
  t.hooks->post.push_back({id, std::move(hook)});
  return HookHandle(t.hooks, id);
}

// ---------------------------------------------------------------- Tensor autograd surface
Tensor& Tensor::requires_grad_(bool requires_grad) {
  detail::check_defined(*this, "requires_grad_");
  auto& t = *impl_;
  if (t.grad_fn) {
    OXM_CHECK(requires_grad, InvalidArgument,
              "requires_grad_(false): this tensor is the result of an op that is being differentiated; use "
              ".detach() to get a tensor without history");
    return *this;
  }
  OXM_CHECK(!requires_grad || is_floating(t.dtype), UnsupportedDType, "requires_grad_: dtype ", t.dtype,
            " cannot require gradients; only f32 and f64 tensors can");
  t.requires_grad = requires_grad;
  return *this;
}
bool Tensor::requires_grad() const { return defined() && impl_->requires_grad; }
Tensor& Tensor::retain_grad() {
  detail::check_defined(*this, "retain_grad");
  auto& t = *impl_;
  OXM_CHECK(t.requires_grad, InvalidArgument,
            "retain_grad: this tensor does not require grad, so backward() computes no gradient for it");
  if (t.grad_fn && !t.retains_grad) {  // leaves keep their gradient anyway
    t.grad_fn->retained.push_back({t.output_nr, &t});
    t.retains_grad = true;
  }
  return *this;
}
bool Tensor::retains_grad() const { return defined() && impl_->retains_grad; }
bool Tensor::is_leaf() const { return defined() && !impl_->grad_fn; }
Tensor Tensor::grad() const {
  detail::check_defined(*this, "grad");
  return impl_->grad;
}
void Tensor::set_grad(const Tensor& g) {
  detail::check_defined(*this, "set_grad");
  if (g.defined()) {
    // The kind names what differs (torch: "assigned grad has data of a different size / type / device").
    if (g.shape() != shape() || g.dtype() != dtype() || g.device() != device()) [[unlikely]]
      detail::throw_error(g.shape() != shape()   ? ErrorKind::ShapeMismatch
                          : g.dtype() != dtype() ? ErrorKind::DTypeMismatch
                                                 : ErrorKind::DeviceMismatch,
                          detail::concat("set_grad: gradient ", g.shape(), " ", g.dtype(), " on ", g.device(),
                                         " does not match tensor ", shape(), " ", dtype(), " on ", device()));
  }
  impl_->grad = g;
}
void Tensor::zero_grad() {
  detail::check_defined(*this, "zero_grad");
  impl_->grad = Tensor();
}
std::string Tensor::grad_fn_name() const { return defined() && impl_->grad_fn ? impl_->grad_fn->name() : ""; }

void Tensor::backward() const { backward(Tensor(), false, false); }
void Tensor::backward(const Tensor& seed) const {
  detail::check_defined(seed, "backward", "seed");
  backward(seed, false, false);
}

namespace {
// The seed of a backward from `out`: `given` checked against it, or ones for a one-element tensor.
Tensor checked_seed(const Tensor& out, const Tensor& given, const char* op, size_t which) {
  if (!given.defined()) {
    OXM_CHECK(out.numel() == 1, ShapeMismatch, op, ": output ", which, " has shape ", out.shape(),
              "; only a one-element tensor has an implicit seed — pass a gradient (seed) of the same shape");
    return ones(out.shape(), out.dtype(), out.device());
  }
  OXM_CHECK(given.shape() == out.shape(), ShapeMismatch, op, ": gradient (seed shape ", given.shape(), ")",
            " differs from the shape ", out.shape(), " of output ", which);
  OXM_CHECK(given.dtype() == out.dtype(), DTypeMismatch, op, ": gradient (seed dtype ", given.dtype(), ")",
            " differs from the dtype ", out.dtype(), " of output ", which);
  OXM_CHECK(given.device() == out.device(), DeviceMismatch, op, ": gradient is on ", given.device(), " but output ",
            which, " is on ", out.device());
  return given;
}
}  // namespace

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  detail::check_defined(*this, "backward");
  OXM_CHECK(impl_->requires_grad, InvalidArgument,
            "backward: this tensor does not require grad and has no history; call requires_grad_() on an input "
            "before computing it (and not under NoGradGuard)");
  detail::run_backward(*this, checked_seed(*this, gradient, "backward", 0), retain_graph, create_graph);
}

std::vector<Tensor> autograd::grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                                   const std::vector<Tensor>& grad_outputs, bool retain_graph, bool create_graph,
                                   bool allow_unused) {
  const char* op = "autograd::grad";
  OXM_CHECK(!outputs.empty(), InvalidArgument, op, ": no outputs given");
  OXM_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), InvalidArgument, op, ": ",
            grad_outputs.size(), " grad_outputs for ", outputs.size(), " outputs; pass one per output (or none)");
  detail::BackwardTask task;
  task.retain_graph = retain_graph;
  task.create_graph = create_graph;
  for (size_t i = 0; i < outputs.size(); ++i) {
    detail::check_defined(outputs[i], op, "output");
    OXM_CHECK(outputs[i].requires_grad(), InvalidArgument, op, ": output ", i,
              " does not require grad and has no history; compute it from inputs that require grad");
    task.roots.push_back(outputs[i]);
    task.seeds.push_back(checked_seed(outputs[i], grad_outputs.empty() ? Tensor() : grad_outputs[i], op, i));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    detail::check_defined(inputs[i], op, "input");
    OXM_CHECK(inputs[i].requires_grad(), InvalidArgument, op, ": input ", i, " (shape ", inputs[i].shape(),
              ") does not require grad, so it has no gradient; call requires_grad_() on it before the forward pass");
  }
  std::vector<Tensor> result;
  task.inputs = &inputs;
  task.captured = &result;
  detail::run_task_for_grad(task);
  for (size_t i = 0; i < inputs.size(); ++i)
    OXM_CHECK(result[i].defined() || allow_unused, InvalidArgument, op, ": input ", i, " (shape ", inputs[i].shape(),
              ") was not used to compute the outputs; pass allow_unused = true to get an undefined gradient for it");
  return result;
}

Tensor Tensor::detach() const {
  detail::check_defined(*this, "detach");
  return detail::make_view(*this, impl_->shape, impl_->strides, impl_->offset);
}

}  // namespace oxmera
