#pragma once
// Autograd graph nodes. A node is created only when an op has an input that requires grad while grad
// mode is on. Each node owns edges to the producers of its inputs (another node, or a leaf tensor whose
// .grad accumulates) and whatever it saved for its backward rule.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/small_vec.hpp"
#include "tensor/tensor_impl.hpp"

namespace oxmera::detail {

struct Edge {
  Ref<Node> node;          // producer node, or null
  Tensor leaf;             // leaf that accumulates, when node is null
  uint32_t output_nr = 0;  // which output of `node`
  bool active() const { return node || leaf.defined(); }
};

// Gradient hooks (Tensor::register_hook, register_post_accumulate_grad_hook): a leaf's live on its TensorImpl, a
// non-leaf's on the node that produces it (keyed by output_nr). Handles hold weak references.
struct HookList {
  struct Pre {
    uint64_t id;
    uint32_t output_nr;
    std::function<Tensor(const Tensor&)> fn;
  };
  struct Post {
    uint64_t id;
    std::function<void(Tensor&)> fn;
  };
  std::vector<Pre> pre;
  std::vector<Post> post;
  bool empty() const { return pre.empty() && post.empty(); }
};

struct Node {
  std::atomic<int32_t> refcount{1};
  SmallVec<Edge, 2> next;  // one per input of the op (inactive when that input needs no grad)
  uint32_t num_outputs = 1;
  // Engine scratch, valid during one backward() call.
  uint64_t epoch = 0;
  int32_t pending = 0;
  uint32_t index = 0;  // position in the engine's list of reached nodes
  SmallVec<Tensor, 1> grad_buffer;
  // Outputs whose gradient is also stored in their .grad (Tensor::retain_grad). Not owning: a retained
  // tensor removes itself when it is destroyed (destroy(TensorImpl*)).
  struct Retained {
    uint32_t output_nr;
    TensorImpl* tensor;
  };
  std::vector<Retained> retained;

  std::shared_ptr<HookList> hooks;  // hooks on this node's outputs' gradients
  // Set once a backward without retain_graph ran this node and freed what it saved: another backward through it
  // is an error (torch's rule), not a wrong gradient.
  bool released = false;

  virtual ~Node() = default;
  virtual const char* name() const = 0;
  // grad_out[num_outputs] -> grad_in[next.size()] (leave undefined where next[i] is inactive).
  virtual void apply(Tensor* grad_out, Tensor* grad_in) = 0;
  // Frees the tensors saved for backward (after a backward without retain_graph); returns whether there were
  // any. A node that saves nothing keeps the default, and may be run backward again, as in torch.
  virtual bool release_saved() { return false; }
  // Whether apply() computes its gradients with recorded ops when grad mode is on, as the engine runs it for
  // create_graph = true (higher-order gradients). A rule built on kernels of its own says false, and the engine
  // refuses create_graph through it (NotImplemented) rather than return a gradient without history.
  virtual bool differentiable_backward() const { return false; }
  bool needs_grad(size_t i) const { return i < next.size() && next[i].active(); }
};

// A tensor saved for backward. Outputs are kept as aliases without grad_fn (an output with its grad_fn would be a
// reference cycle); inputs as they are. The storage version is checked at backward time so an in-place write in
// between is an error, not a wrong gradient. Under grad mode (a backward with create_graph = true) an input comes
// back with its history as it is, and get() re-attaches a saved output (`output_nr` of the node that saved it) to
// the node being applied, so the gradient the rule computes is itself differentiable.
class SavedTensor {
 public:
  SavedTensor() = default;
  void save(const Tensor& t, bool is_output, uint32_t output_nr = 0);
  Tensor get(const char* op) const;
  bool defined() const { return tensor_.defined(); }
  void reset() { tensor_ = Tensor(); }

 private:
  Tensor tensor_;
  uint32_t version_ = 0, output_nr_ = 0;
  bool is_output_ = false;
};

// The edge through which a gradient flows back into `t` (inactive when t needs none).
Edge edge_of(const Tensor& t);
// Whether a gradient buffer may be written in place: this handle is the only one on the tensor and on its memory
// (no other slot, node, view or user sees it), it is contiguous and it has no history.
// The dims from the largest stride to the smallest when the elements fill numel consecutive slots in that order
// (dense and non-overlapping: contiguous, or a permutation of contiguous such as a gradient buffer laid out as its
// input); empty otherwise. Size-1 dims take any stride.
SmallDims dense_order(const Shape& shape, const Strides& strides);
inline bool is_sole_handle(const TensorImpl& t) {
  // dense: an in-place add touches each element once
  return t.refcount.load() == 1 && t.storage->refcount.load() == 1 && !t.grad_fn &&
         (t.contiguous || !dense_order(t.shape, t.strides).empty());
}
// Adds g into the gradient buffer `slot` of the node at edge e (without create_graph, when the buffer already
// holds a sole-handle tensor of in_shape, g's dtype and device), at the elements `view` selects: what a view's
// backward does instead of embedding g in zeros of the whole input (q, k and v taken from one qkv tensor). False:
// nothing was added (the caller embeds as usual).
bool add_into_view_of_buffer(const Edge& e, const Shape& in_shape, const Tensor& g,
                             const std::function<Tensor(const Tensor&)>& view);
// Whether an op with these inputs must record a node.
bool needs_tape(const Tensor& a);
bool needs_tape(const Tensor& a, const Tensor& b);
// Makes `out` (fresh, single output) the output `output_nr` of node `n` (takes ownership of n).
void set_history(Tensor& out, Node* n, uint32_t output_nr = 0);
// Reduces a broadcast gradient back to `shape` (sum over broadcast dims).
Tensor sum_to(const Tensor& g, const Shape& shape);

// Anomaly mode (autograd::set_detect_anomaly), read by the engine after each node's backward: constinit, so the
// check is one thread-local load.
extern constinit thread_local bool t_anomaly_enabled;
// Throws InvalidArgument naming `n` at the first defined gradient in grad_in[0, count) holding NaN or infinity.
void check_anomaly(const Node& n, const Tensor* grad_in, size_t count);

}  // namespace oxmera::detail
