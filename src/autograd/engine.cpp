// Reverse-mode engine: iterative topological walk (no recursion), gradient buffers kept on the nodes,
// accumulation into leaves, and iterative teardown of deep graphs.
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

void SavedTensor::save(const Tensor& t, bool is_output) {
  if (!t.defined()) return;
  const TensorImpl& s = *t.impl();
  if (is_output || s.grad_fn) {
    // Alias without history: saving an output with its grad_fn would be a reference cycle, and the
    // backward rules compute with saved values, not through them.
    tensor_ = make_view(t, s.shape, s.strides, s.offset);
  } else {
    tensor_ = t;
  }
  version_ = s.storage->version;
}

Tensor SavedTensor::get(const char* op) const {
  OXM_CHECK(!tensor_.defined() || tensor_.impl()->storage->version == version_, InvalidArgument, "backward of ", op,
            ": a tensor saved for the gradient was modified in place after it was used; clone it before "
            "modifying it, or modify it before the forward pass");
  return tensor_;
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

void accumulate_leaf(const Tensor& leaf, Tensor g) {
  TensorImpl& L = *leaf.impl();
  if (g.shape() != L.shape) g = sum_to(g, L.shape);
  if (!L.grad.defined()) {
    // Own the gradient: an alias of a buffer used elsewhere (a seed, or the same gradient handed to two
    // leaves by add) must not be shared, since optimizers update .grad in place.
    const TensorImpl& G = *g.impl();
    bool exclusive =
        G.refcount.load() == 1 && G.storage->refcount.load() == 1 && G.contiguous && G.offset == 0 && !G.grad_fn;
    L.grad = exclusive ? g : g.clone();
  } else {
    L.grad = L.grad + g;
  }
}

// A retained non-leaf gets its own copy (the same gradient tensor continues through the node's backward).
void accumulate_retained(TensorImpl& t, const Tensor& g) { t.grad = t.grad.defined() ? t.grad + g : g.clone(); }

std::atomic<uint64_t> g_epoch{0};

}  // namespace

void run_backward(const Tensor& root, const Tensor& seed) {
  NoGradGuard no_grad;  // backward rules are not themselves recorded (no higher-order gradients)
  TensorImpl& r = *root.impl();
  if (!r.grad_fn) {
    accumulate_leaf(root, seed);
    return;
  }
  const uint64_t epoch = g_epoch.fetch_add(1) + 1;
  // Pass 1: count, for every reachable node, how many edges point at it.
  std::vector<Node*> stack{r.grad_fn.get()};
  r.grad_fn->epoch = epoch;
  r.grad_fn->pending = 0;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (size_t i = 0; i < n->next.size(); ++i) {
      Node* c = n->next[i].node.get();
      if (!c) continue;
      if (c->epoch != epoch) {
        c->epoch = epoch;
        c->pending = 0;
        c->grad_buffer.clear();
        stack.push_back(c);
      }
      ++c->pending;
    }
  }
  // Pass 2: Kahn's algorithm; a node runs once all its consumers have delivered their gradients.
  Node* root_node = r.grad_fn.get();
  root_node->grad_buffer.clear();
  root_node->grad_buffer.resize(root_node->num_outputs);
  root_node->grad_buffer[r.output_nr] = seed;
  std::vector<Node*> ready{root_node};
  std::vector<Tensor> grad_out, grad_in;
  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    grad_out.assign(n->num_outputs, Tensor());
    bool any = false;
    for (size_t i = 0; i < n->num_outputs && i < n->grad_buffer.size(); ++i) {
      grad_out[i] = std::move(n->grad_buffer[i]);
      any |= grad_out[i].defined();
    }
    n->grad_buffer.clear();
    for (const Node::Retained& rt : n->retained)
      if (rt.output_nr < grad_out.size() && grad_out[rt.output_nr].defined())
        accumulate_retained(*rt.tensor, grad_out[rt.output_nr]);
    grad_in.assign(n->next.size(), Tensor());
    if (any) n->apply(grad_out.data(), grad_in.data());
    // Drop the incoming gradients now: a view node's output shares their storage, and a leaf can take
    // ownership of a gradient (no copy) only when nothing else holds it.
    for (Tensor& g : grad_out) g = Tensor();
    for (size_t i = 0; i < n->next.size(); ++i) {
      Edge& e = n->next[i];
      if (e.node) {
        Node* c = e.node.get();
        if (grad_in[i].defined()) {
          if (c->grad_buffer.size() < c->num_outputs) c->grad_buffer.resize(c->num_outputs);
          Tensor& slot = c->grad_buffer[e.output_nr];
          slot = slot.defined() ? slot + grad_in[i] : std::move(grad_in[i]);
        }
        if (--c->pending == 0) ready.push_back(c);
      } else if (e.leaf.defined() && grad_in[i].defined()) {
        accumulate_leaf(e.leaf, std::move(grad_in[i]));
      }
    }
  }
}

}  // namespace detail

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
    OXM_CHECK(g.shape() == shape() && g.dtype() == dtype() && g.device() == device(), InvalidArgument,
              "set_grad: gradient ", g.shape(), " ", g.dtype(), " on ", g.device(), " does not match tensor ", shape(),
              " ", dtype(), " on ", device());
  }
  impl_->grad = g;
}
void Tensor::zero_grad() {
  detail::check_defined(*this, "zero_grad");
  impl_->grad = Tensor();
}
std::string Tensor::grad_fn_name() const { return defined() && impl_->grad_fn ? impl_->grad_fn->name() : ""; }

void Tensor::backward() const {
  detail::check_defined(*this, "backward");
  OXM_CHECK(numel() == 1, ShapeMismatch, "backward: called on a tensor of shape ", shape(),
            "; only a one-element tensor has an implicit seed — pass a seed of the same shape: backward(seed)");
  backward(ones(shape(), dtype()).to(device()));
}

void Tensor::backward(const Tensor& seed) const {
  detail::check_defined(*this, "backward");
  detail::check_defined(seed, "backward", "seed");
  OXM_CHECK(impl_->requires_grad, InvalidArgument,
            "backward: this tensor does not require grad and has no history; call requires_grad_() on an input "
            "before computing it (and not under NoGradGuard)");
  OXM_CHECK(seed.shape() == shape(), ShapeMismatch, "backward: seed shape ", seed.shape(),
            " differs from the tensor's shape ", shape());
  OXM_CHECK(seed.dtype() == dtype(), DTypeMismatch, "backward: seed dtype ", seed.dtype(),
            " differs from the tensor's dtype ", dtype());
  OXM_CHECK(seed.device() == device(), DeviceMismatch, "backward: seed is on ", seed.device(), " but the tensor is on ",
            device());
  detail::run_backward(*this, seed);
}

Tensor Tensor::detach() const {
  detail::check_defined(*this, "detach");
  return detail::make_view(*this, impl_->shape, impl_->strides, impl_->offset);
}

}  // namespace oxmera
