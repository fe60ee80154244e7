// nn::DistributedDataParallel (see oxmera/nn/data_parallel.hpp for the scheme).
#include "oxmera/nn/data_parallel.hpp"

#include <algorithm>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "autograd/node.hpp"
#include "oxmera/autograd.hpp"

namespace oxmera::nn {

namespace ddp_detail {

struct Param {
  std::string name;
  Tensor tensor;
  int bucket = 0;
  int64_t offset = 0;  // in its bucket's flat buffer
  bool ready = false;
};

struct Bucket {
  std::vector<int> params;
  int64_t numel = 0;
  int ready = 0;
  Tensor flat;
  distributed::Work work;
};

struct State {
  distributed::ProcessGroup group;
  std::vector<Param> params;
  std::vector<Bucket> buckets;
  std::vector<HookHandle> hooks;
  int next_launch = 0;  // buckets start strictly in index order, the same on every rank
  int next_done = 0;    // the buckets before it have completed (progress())
  bool in_round = false;
  bool no_sync = false;
  // A wait for this round's reductions threw (a Timeout: a peer stopped or died; a Backend error): the group is
  // broken, so the destructor does not wait again (one more timeout per bucket while an error unwinds).
  bool failed = false;
  // find_unused_parameters: which parameters the last forward's graph reaches (all of them until a forward has
  // been walked), and the all-reduced (Max) flags saying which some rank reached.
  bool find_unused = false;
  bool as_view = false;  // gradient_as_bucket_view: the buckets' flat buffers persist and the grads view them
  bool walked = false;   // a forward since the last round set `used`
  std::vector<uint8_t> used;
  std::unordered_map<const oxmera::detail::TensorImpl*, int> index_of;
  // The walk's work list and visited set, kept between forwards: cleared, not freed, so that after the first
  // forward a walk allocates nothing (the set keeps its buckets, the stack its capacity).
  std::vector<const oxmera::detail::Node*> walk_stack;
  std::unordered_set<const oxmera::detail::Node*> walk_seen;
  Tensor used_flags;
  distributed::Work used_work;

  void on_ready(int i) {
    if (no_sync) return;
    // torch marks the unused parameters ready at the first gradient of the backward (not at forward), so a .grad
    // changed in between (zero_grad after forward) is what they contribute.
    if (walked && !in_round) mark_unused();
    mark_ready(i);
  }

  // After a forward (find_unused_parameters): walk the graph from its output to the leaves it reaches.
  void walk(const Tensor& out) {
    // No graph (no backward through this output), or a no_sync() micro-batch: torch skips these too.
    if (!grad_enabled() || no_sync) return;
    used.assign(params.size(), 0);
    auto& stack = walk_stack;
    auto& seen = walk_seen;
    stack.clear();
    seen.clear();
    auto visit = [&](const oxmera::detail::Edge& e) {
      if (e.node) {
        if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
      } else if (e.leaf.defined()) {
        auto it = index_of.find(e.leaf.impl());
        if (it != index_of.end()) used[static_cast<size_t>(it->second)] = 1;
      }
    };
    if (out.defined() && out.requires_grad()) visit(oxmera::detail::edge_of(out));
    while (!stack.empty()) {
      const oxmera::detail::Node* n = stack.back();
      stack.pop_back();
      for (size_t k = 0; k < n->next.size(); ++k) visit(n->next[k]);
    }
    // The set holds raw pointers into this forward's graph: drop them (keeping the buckets) so that no stale
    // address outlives the graph, and a later graph's node at a reused address is still visited.
    seen.clear();
    walked = true;
    // No parameter reached: no hook will fire in this backward, so the round runs now (every rank still issues
    // its collectives in the same order; this rank contributes its .grad, or zeros).
    if (std::find(used.begin(), used.end(), uint8_t{1}) == used.end()) mark_unused();
  }

  void mark_unused() {
    in_round = true;
    for (size_t i = 0; i < params.size(); ++i)
      if (!used[i]) mark_ready(static_cast<int>(i));
  }

  void mark_ready(int i) {
    Param& p = params[static_cast<size_t>(i)];
    if (p.ready) unfinished("a backward", p.name);
    p.ready = true;
    in_round = true;
    ++buckets[static_cast<size_t>(p.bucket)].ready;
    while (next_launch < static_cast<int>(buckets.size()) &&
           buckets[static_cast<size_t>(next_launch)].ready ==
               static_cast<int>(buckets[static_cast<size_t>(next_launch)].params.size()))
      launch(next_launch++);
    if (next_launch == static_cast<int>(buckets.size()))
      complete();
    else
      progress();
  }

  // MPI moves a non-blocking collective's data only inside MPI calls (Open MPI has no progress thread by
  // default): testing the oldest unfinished bucket from every hook keeps the started ones moving while backward
  // computes the next gradients, instead of only at the next launch and the final wait.
  void progress() {
    while (next_done < next_launch && buckets[static_cast<size_t>(next_done)].work.is_completed()) ++next_done;
  }

  void launch(int b) {
    NoGradGuard no_grad;
    if (b == 0 && find_unused) {
      // Before the first bucket on every rank, so the flags' all-reduce has the same place in every rank's order.
      used_flags = from_vector(used, Shape{static_cast<int64_t>(used.size())});
      used_work = distributed::all_reduce_async(used_flags, distributed::ReduceOp::Max, group);
    }
    Bucket& bk = buckets[static_cast<size_t>(b)];
    if (as_view) {
      const Tensor& first = params[static_cast<size_t>(bk.params.front())].tensor;
      if (!bk.flat.defined()) bk.flat = empty({bk.numel}, first.dtype(), first.device());
      for (int i : bk.params) {
        const Param& p = params[static_cast<size_t>(i)];
        const Tensor g = p.tensor.grad();
        if (g.defined() && is_bucket_view(g, bk, p)) continue;  // accumulated in place: already in the bucket
        Tensor slot = bk.flat.narrow(0, p.offset, p.tensor.numel());
        if (g.defined())
          slot.copy_(g.detach().reshape({-1}));
        else
          slot.fill_(0.0);
      }
      bk.work = distributed::all_reduce_async(bk.flat, distributed::ReduceOp::Avg, group);
      return;
    }
    std::vector<Tensor> grads;
    grads.reserve(bk.params.size());
    for (int i : bk.params) {
      const Tensor& t = params[static_cast<size_t>(i)].tensor;
      const Tensor g = t.grad();
      // An unused parameter without a gradient contributes zeros (find_unused_parameters; torch does the same).
      grads.push_back(g.defined() ? g.detach().reshape({-1}) : zeros({t.numel()}, t.dtype(), t.device()));
    }
    bk.flat = grads.size() == 1 ? grads[0].clone() : cat(grads, 0);
    bk.work = distributed::all_reduce_async(bk.flat, distributed::ReduceOp::Avg, group);
  }

  static bool is_bucket_view(const Tensor& g, const Bucket& bk, const Param& p) {
    return g.impl()->storage.get() == bk.flat.impl()->storage.get() && g.impl()->offset == p.offset &&
           g.is_contiguous() && g.numel() == p.tensor.numel();
  }

  void wait_for(distributed::Work& w) {
    try {
      w.wait();
    } catch (const Error&) {
      failed = true;
      throw;
    }
  }

  // Every bucket has started: wait for them in order and write the averages back into the gradients.
  void complete() {
    NoGradGuard no_grad;
    std::vector<uint8_t> used_somewhere;
    if (find_unused) {
      wait_for(used_work);
      used_somewhere = used_flags.to_vector<uint8_t>();
    }
    for (Bucket& bk : buckets) {
      wait_for(bk.work);
      for (int i : bk.params) {
        Param& p = params[static_cast<size_t>(i)];
        // A parameter no rank used keeps its .grad untouched (undefined stays undefined), as torch.
        if (find_unused && !used_somewhere[static_cast<size_t>(i)]) continue;
        Tensor avg = bk.flat.narrow(0, p.offset, p.tensor.numel()).reshape(p.tensor.shape());
        Tensor g = p.tensor.grad();
        if (as_view) {  // the grad becomes (or already is) its slot of the bucket: no copy
          if (!(g.defined() && is_bucket_view(g, bk, p))) p.tensor.set_grad(avg);
          continue;
        }
        if (g.defined())
          g.copy_(avg);
        else
          p.tensor.set_grad(avg.clone());  // used by another rank only: it receives the average too
      }
    }
    reset();
  }

  void reset() {
    for (Bucket& bk : buckets) {
      bk.ready = 0;
      if (!as_view) bk.flat = Tensor();
      bk.work = distributed::Work();
    }
    for (Param& p : params) p.ready = false;
    next_launch = 0;
    next_done = 0;
    in_round = false;
    failed = false;
    walked = false;
    used.assign(params.size(), 1);
    used_flags = Tensor();
    used_work = distributed::Work();
  }

  // The previous backward left parameters without gradients: finish the buckets already started (every rank
  // started the same ones), forget the round, and say which parameters got none.
  [[noreturn]] void unfinished(const char* where, const std::string& again) {
    std::ostringstream missing;
    int n = 0;
    for (const Param& p : params)
      if (!p.ready) missing << (n++ ? ", " : "") << p.name;
    std::string wait_error;
    if (find_unused && next_launch > 0) {
      try {
        wait_for(used_work);
      } catch (const Error& e) {
        wait_error = std::string("; finishing its started reductions failed too: ") + e.what();
      }
    }
    for (int b = 0; b < next_launch && wait_error.empty(); ++b) {  // after one failure the others would too
      try {
        wait_for(buckets[static_cast<size_t>(b)].work);
      } catch (const Error& e) {
        wait_error = std::string("; finishing its started reductions failed too: ") + e.what();
      }
    }
    reset();
    OXM_FAIL(InvalidArgument, "DistributedDataParallel: ", where, " started", again.empty() ? "" : " (reaching ", again,
             again.empty() ? "" : ")", " before the previous backward's gradient reduction finished: ", "parameter(s) ",
             missing.str(), " received no gradient in it",
             find_unused ? " although the forward's graph reached them (run backward through the output of the "
                           "forward before the next one). The reduction was abandoned"
                         : ". The reduction was abandoned. Without find_unused_parameters every parameter must take "
                           "part in every backward: for a model whose forward skips parameters, construct "
                           "DistributedDataParallel with DistributedDataParallelOptions find_unused_parameters=true "
                           "(`{.find_unused_parameters = true}`)",
             wait_error);
  }
};

}  // namespace ddp_detail

DistributedDataParallel::DistributedDataParallel(ModulePtr module, distributed::ProcessGroup group,
                                                 DistributedDataParallelOptions options)
    : module_(std::move(module)), state_(std::make_shared<ddp_detail::State>()) {
  OXM_CHECK(module_ != nullptr, InvalidArgument, "DistributedDataParallel: the module is null");
  OXM_CHECK(options.bucket_cap_bytes > 0, InvalidArgument,
            "DistributedDataParallel: bucket_cap_bytes must be positive, got ", options.bucket_cap_bytes);
  if (!group.defined()) group = distributed::world();
  OXM_CHECK(group.is_member(), InvalidArgument, "DistributedDataParallel: world rank ", distributed::rank(),
            " is not a member of the process group; construct it on the group's members only");
  auto& s = *state_;
  s.group = group;
  s.find_unused = options.find_unused_parameters;
  s.as_view = options.gradient_as_bucket_view;
  const int src = group.ranks().front();
  {
    NoGradGuard no_grad;
    for (auto& [name, t] : module_->named_parameters()) {
      Tensor v = t;
      distributed::broadcast(v, src, group);
    }
    for (auto& [name, t] : module_->named_buffers()) {
      Tensor v = t;
      distributed::broadcast(v, src, group);
    }
  }
  auto named = module_->named_parameters();
  for (auto it = named.rbegin(); it != named.rend(); ++it)
    if (it->second.requires_grad()) s.params.push_back({it->first, it->second});
  OXM_CHECK(!s.params.empty(), InvalidArgument,
            "DistributedDataParallel: the module has no parameters that require grad; there is nothing to reduce");
  s.used.assign(s.params.size(), 1);
  for (size_t i = 0; i < s.params.size(); ++i) s.index_of[s.params[i].tensor.impl()] = static_cast<int>(i);
  int64_t bytes = 0;
  for (size_t i = 0; i < s.params.size(); ++i) {
    auto& p = s.params[i];
    const int64_t nbytes = p.tensor.numel() * static_cast<int64_t>(itemsize(p.tensor.dtype()));
    bool fresh = s.buckets.empty();
    if (!fresh) {
      const auto& first = s.params[static_cast<size_t>(s.buckets.back().params.front())].tensor;
      fresh = first.dtype() != p.tensor.dtype() || first.device() != p.tensor.device() ||
              bytes + nbytes > options.bucket_cap_bytes;
    }
    if (fresh) {
      s.buckets.emplace_back();
      bytes = 0;
    }
    auto& bk = s.buckets.back();
    p.bucket = static_cast<int>(s.buckets.size()) - 1;
    p.offset = bk.numel;
    bk.params.push_back(static_cast<int>(i));
    bk.numel += p.tensor.numel();
    bytes += nbytes;
  }
  std::weak_ptr<ddp_detail::State> weak = state_;
  for (size_t i = 0; i < s.params.size(); ++i) {
    s.hooks.push_back(s.params[i].tensor.register_post_accumulate_grad_hook([weak, i](Tensor&) {
      if (auto st = weak.lock()) st->on_ready(static_cast<int>(i));
    }));
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  for (auto& h : state_->hooks) h.remove();
  // The started reductions write into buffers the group's queue keeps alive, so not waiting is safe; waiting
  // after a failure would only add a timeout per bucket to the unwinding of that error.
  for (int b = 0; b < state_->next_launch && !state_->failed; ++b) {
    try {
      state_->buckets[static_cast<size_t>(b)].work.wait();
    } catch (...) {  // a destructor must not throw; the group's next wait reports a broken job
      break;         // one failure: the others would time out too
    }
  }
  // (The used flags' all-reduce, when started, precedes bucket 0 on the group: waiting for the buckets covers it.)
}

Tensor DistributedDataParallel::forward(const Tensor& x) {
  if (state_->in_round) state_->unfinished("a forward", "");
  Tensor out = (*module_)(x);
  if (state_->find_unused) state_->walk(out);
  return out;
}

DistributedDataParallel::NoSync::NoSync(std::shared_ptr<ddp_detail::State> s)
    : state_(std::move(s)), previous_(state_->no_sync) {
  state_->no_sync = true;
}
DistributedDataParallel::NoSync::~NoSync() { state_->no_sync = previous_; }
DistributedDataParallel::NoSync DistributedDataParallel::no_sync() { return NoSync(state_); }

std::vector<std::vector<std::string>> DistributedDataParallel::buckets() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& bk : state_->buckets) {
    out.emplace_back();
    for (int i : bk.params) out.back().push_back(state_->params[static_cast<size_t>(i)].name);
  }
  return out;
}

}  // namespace oxmera::nn
