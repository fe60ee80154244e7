#pragma once
// nn::DistributedDataParallel: one model replica per process; gradients averaged over the processes during
// backward (torch.nn.parallel.DistributedDataParallel's scheme, over oxmera::distributed).
//
// At construction the replica's parameters and buffers are broadcast from the group's first rank, so every
// process starts from the same values. The parameters are grouped into buckets (reverse registration order,
// the order backward tends to produce gradients in; at most bucket_cap_bytes each, one dtype and device per
// bucket). Each parameter's post-accumulate-grad hook marks it ready; once every parameter of a bucket is ready
// its gradients are flattened and all-reduced (ReduceOp::Avg) asynchronously, buckets strictly in index order so
// that every rank issues the same collectives in the same order, and communication runs while backward computes
// the remaining gradients. When the last bucket has been started, the hook waits for all of them and writes the
// averaged gradients back into each parameter's .grad, so they are ready when backward returns.
//
// Every rank must run the same number of forward/backward rounds (the collectives are matched by order). Without
// find_unused_parameters, a parameter that receives no gradient in a backward leaves that backward's reduction
// unfinished: the next call through the wrapper (forward, or a backward reaching the same parameter again) is
// InvalidArgument naming the parameters that got none. With it, the forward's graph tells which parameters the
// backward will not reach (see DistributedDataParallelOptions).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "oxmera/distributed.hpp"
#include "oxmera/nn/module.hpp"

namespace oxmera::nn {

struct DistributedDataParallelOptions {
  int64_t bucket_cap_bytes = int64_t{25} * 1024 * 1024;  // torch's default
  // torch's find_unused_parameters: after each forward, walk the autograd graph from its output; the parameters
  // it does not reach are marked ready when backward starts (contributing their .grad, zeros when undefined), so
  // the buckets still launch. One extra all-reduce (Max) of per-parameter "used" flags per backward: a parameter
  // no rank used keeps its .grad untouched (undefined stays undefined); one used on some ranks gets the average
  // over all ranks. Costs a graph walk per forward and one small collective per backward.
  bool find_unused_parameters = false;
  // torch's gradient_as_bucket_view: after each reduction every parameter's .grad is a view into its bucket's
  // flat buffer (kept between backwards) instead of a tensor the average is copied into, and a gradient that
  // already is that view (accumulated in place) is reduced where it lies. Saves one copy of every gradient per
  // step and the buckets' allocations. As in torch, a .grad held across steps sees the next reduction's values.
  bool gradient_as_bucket_view = false;
};

namespace ddp_detail {
struct State;
}

class DistributedDataParallel {
 public:
  // InvalidArgument before distributed::init(), for a null module, or one without parameters that require grad.
  explicit DistributedDataParallel(ModulePtr module, distributed::ProcessGroup group = {},
                                   DistributedDataParallelOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // The wrapped module's forward(x), after checking that the previous backward's reduction finished.
  Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }
  Module& module() const { return *module_; }
  const ModulePtr& module_ptr() const { return module_; }

  // While the guard lives, backward accumulates gradients locally and reduces nothing (gradient accumulation:
  // run the micro-batches under no_sync() but the last, whose backward reduces the accumulated sums).
  class NoSync {
   public:
    explicit NoSync(std::shared_ptr<ddp_detail::State> s);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    std::shared_ptr<ddp_detail::State> state_;
    bool previous_;
  };
  [[nodiscard]] NoSync no_sync();

  // The buckets, as lists of parameter names (for tests and tuning).
  std::vector<std::vector<std::string>> buckets() const;

 private:
  ModulePtr module_;
  std::shared_ptr<ddp_detail::State> state_;
};

}  // namespace oxmera::nn
