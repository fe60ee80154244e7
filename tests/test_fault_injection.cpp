// Fault injection and resource limits (issue #17 items 4, 5): every CPU allocation of a training step and of a
// checkpoint save / load is failed in turn (core/fault_injection.hpp), and every file operation of an atomic
// save is failed with ENOSPC and EIO. Each failure must be a typed oxmera::Error, leak nothing, and leave
// the weights, the optimizer state and the file on disk as they were. Then the limits: a file claiming a
// 1 TiB tensor, a request beyond the address space, a 10^6-node graph.
#include <sys/resource.h>

#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "backend/cpu/caching_allocator.hpp"
#include "core/fault_injection.hpp"
#include "ops/fused.hpp"
#include "test_util.hpp"

namespace {
using namespace oxmera;
using oxt::bits;
using oxt::Snapshot;
using oxt::snapshot;
namespace fs = std::filesystem;

// Disarms the hooks however a test ends.
struct FaultGuard {
  ~FaultGuard() { fault::clear_faults(); }
};

int64_t allocation_events() {
  const MemoryStats s = memory_stats();
  return s.system_allocations + s.cache_hits;
}

// A small model trained on a fixed batch: kind 0, an MLP with a LayerNorm, mse and Adam; kind 1, a CNN
// (conv, GELU, flatten, linear), cross-entropy and AdamW with amsgrad.
struct Trainer {
  std::shared_ptr<nn::Sequential> model = std::make_shared<nn::Sequential>();
  std::unique_ptr<optim::Optimizer> opt;
  Tensor x, y;
  int kind;
  explicit Trainer(uint64_t seed, int kind_ = 0) : kind(kind_) {
    Generator g(seed);
    if (kind == 0) {
      model->push_back(std::make_shared<nn::Linear>(6, 16, true, g));
      model->push_back(std::make_shared<nn::ReLU>());
      model->push_back(std::make_shared<nn::LayerNorm>(Shape{16}));
      model->push_back(std::make_shared<nn::Linear>(16, 3, true, g));
      opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 1e-2});
      x = randn(Shape{8, 6}, g);
      y = randn(Shape{8, 3}, g);
    } else {
      model->push_back(std::make_shared<nn::Conv2d>(2, 4, nn::Pair{3, 3}, nn::Conv2dOptions{}, g));
      model->push_back(std::make_shared<nn::GELU>());
      model->push_back(std::make_shared<nn::Flatten>());
      model->push_back(std::make_shared<nn::Linear>(64, 3, true, g));
      opt = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions{.lr = 1e-2, .amsgrad = true});
      x = randn(Shape{4, 2, 6, 6}, g);
      y = from_vector<int64_t>({0, 2, 1, 2}, {4});
    }
  }
  void step() {
    opt->zero_grad();
    const Tensor out = (*model)(x);
    (kind == 0 ? nn::mse_loss(out, y) : nn::cross_entropy(out, y)).backward();
    opt->step();
  }
  Snapshot weights() const { return snapshot(model->state_dict()); }
  Snapshot optimizer_state() const { return snapshot(opt->state_tensors()); }
};

// Runs `op` with the n-th allocation failing; true when it threw OutOfMemory (anything else is a test failure).
template <class F>
bool fails_with_out_of_memory(int64_t n, F&& op) {
  FaultGuard guard;
  fault::fail_allocation_after(n);
  try {
    op();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::OutOfMemory) << "allocation " << n << ": " << e.what();
    return e.kind() == ErrorKind::OutOfMemory;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "allocation " << n << ": not an oxmera::Error: " << e.what();
    return false;
  }
  ADD_FAILURE() << "allocation " << n << " was failed but the operation succeeded";
  return false;
}

TEST(FaultInjection, HookFailsExactlyTheNthAllocationOnce) {
  FaultGuard guard;
  fault::fail_allocation_after(2);
  Tensor a = zeros({4});
  Tensor b = zeros({4});
  EXPECT_OXM_ERROR(zeros({4}), OutOfMemory, "fail_allocation_after");
  Tensor c = zeros({4});  // disarmed after firing
  EXPECT_EQ(c.numel(), 4);
  fault::fail_allocation_after(0);
  fault::fail_allocation_after(-1);  // disarm
  EXPECT_EQ(zeros({4}).numel(), 4);
}

// Every allocation of a training step (forward, backward, Adam step; the first step, which creates Adam's state,
// and a later one): OutOfMemory, nothing leaked, weights and optimizer state bit-identical to before the step,
// and a retried step gives exactly the weights of a step that never failed.
TEST(FaultInjection, EveryAllocationOfATrainingStep) {
  for (int kind : {0, 1})
    for (int warm_steps : {0, 1}) {
      Trainer reference(7, kind);
      for (int i = 0; i < warm_steps; ++i) reference.step();
      reference.opt->zero_grad();
      const int64_t before = allocation_events();
      reference.step();
      const int64_t k = allocation_events() - before;
      const Snapshot expected = reference.weights();
      ASSERT_GT(k, 10);

      int64_t failed = 0;
      for (int64_t n = 0; n < k; ++n) {
        Trainer t(7, kind);
        for (int i = 0; i < warm_steps; ++i) t.step();
        t.opt->zero_grad();
        const Snapshot w0 = t.weights(), s0 = t.optimizer_state();
        const int64_t baseline = memory_stats().allocated_bytes;
        failed += fails_with_out_of_memory(n, [&] { t.step(); });
        // A failed backward may have accumulated some .grad (as in torch): zero_grad() before retrying.
        t.opt->zero_grad();
        EXPECT_EQ(memory_stats().allocated_bytes, baseline) << "allocation " << n << " of " << k << " leaked";
        EXPECT_EQ(t.weights(), w0) << "allocation " << n << " of " << k << " changed the weights";
        EXPECT_EQ(t.optimizer_state(), s0) << "allocation " << n << " of " << k << " changed the optimizer state";
        t.step();
        EXPECT_EQ(t.weights(), expected) << "the step retried after failing allocation " << n << " differs";
      }
      EXPECT_EQ(failed, k) << "model " << kind << ", warm steps " << warm_steps;
      RecordProperty(
          std::string(kind ? "cnn_" : "mlp_") + (warm_steps ? "later_step_allocations" : "first_step_allocations"),
          static_cast<int>(k));
    }
}

// The composite fallback of the fused optimizer update (what a backend without the kernel runs): an allocation
// failing anywhere in the list updates no parameter and no state buffer. A defect before: it wrote each tensor
// as it went, so a failure in parameter 2's update left parameter 1 (and part of 2's state) updated while
// Optimizer::step rolled their step counts back.
TEST(FaultInjection, FallbackOptimizerUpdateIsAllOrNothing) {
  using Kind = detail::OptimizerStep::Kind;
  std::vector<detail::OptimizerStep> kinds(4);
  kinds[0].kind = Kind::SGD;
  kinds[0].momentum = 0.9;
  kinds[0].weight_decay = 0.1;
  kinds[0].nesterov = true;
  kinds[1].kind = Kind::Adam;
  kinds[1].amsgrad = true;
  kinds[1].weight_decay = 0.01;
  kinds[2].kind = Kind::AdamW;
  kinds[2].weight_decay = 0.01;
  kinds[3].kind = Kind::RMSprop;
  kinds[3].momentum = 0.5;
  kinds[3].centered = true;
  int64_t total = 0;
  for (const detail::OptimizerStep& kind : kinds) {
    std::vector<Tensor> params, grads, state;
    for (uint64_t i = 0; i < 3; ++i) {
      params.push_back(randn({5}, 10 + i));
      grads.push_back(randn({5}, 20 + i));
      for (int b = 0; b < 3; ++b) state.push_back(rand({5}, 30 + 3 * i + static_cast<uint64_t>(b)));
    }
    std::vector<detail::OptimizerUpdate> updates;
    for (size_t i = 0; i < 3; ++i) {
      detail::OptimizerStep st = kind;
      st.step = 3;
      updates.push_back({st,
                         params[i].impl(),
                         grads[i].impl(),
                         {state[3 * i].impl(), state[3 * i + 1].impl(), state[3 * i + 2].impl()}});
    }
    auto all = [&] {
      std::vector<std::vector<uint64_t>> v;
      for (const Tensor& t : params) v.push_back(bits(t));
      for (const Tensor& t : state) v.push_back(bits(t));
      return v;
    };
    const auto before_values = all();
    {
      // A dry run on copies, to count the allocations.
      std::vector<Tensor> p2, s2;
      for (const Tensor& t : params) p2.push_back(t.clone());
      for (const Tensor& t : state) s2.push_back(t.clone());
      std::vector<detail::OptimizerUpdate> u2 = updates;
      for (size_t i = 0; i < 3; ++i) {
        u2[i].param = p2[i].impl();
        for (int b = 0; b < 3; ++b) u2[i].state[b] = s2[3 * i + static_cast<size_t>(b)].impl();
      }
      const int64_t start = allocation_events();
      ops::FusedCall call = ops::OptimizerStepsCall{u2.data(), u2.size()};
      ops::run_fused_fallback(call, Device::cpu());
      total += allocation_events() - start;
      const int64_t k = allocation_events() - start;
      ASSERT_GT(k, 3);
      for (int64_t n = 0; n < k; ++n) {
        const int64_t baseline = memory_stats().allocated_bytes;
        ops::FusedCall failing = ops::OptimizerStepsCall{updates.data(), updates.size()};
        EXPECT_TRUE(fails_with_out_of_memory(n, [&] { ops::run_fused_fallback(failing, Device::cpu()); }));
        EXPECT_EQ(memory_stats().allocated_bytes, baseline);
        EXPECT_EQ(all(), before_values) << "kind " << static_cast<int>(kind.kind) << ": allocation " << n << " of " << k
                                        << " left a partial update";
      }
    }
  }
  RecordProperty("fallback_allocations", static_cast<int>(total));
}

// A BatchNorm forward in training mode updates running_mean, running_var and num_batches_tracked: an allocation
// failing anywhere in it leaves all three as they were. A defect before: running_mean.mul_(1 - momentum) ran
// before the batch's share was computed and added, and num_batches_tracked was counted before the forward ran.
TEST(FaultInjection, BatchNormForwardChangesNoBufferWhenItFails) {
  Generator g(4);
  std::vector<std::pair<std::shared_ptr<nn::Module>, Tensor>> cases = {
      {std::make_shared<nn::BatchNorm1d>(5), randn(Shape{6, 5}, g)},
      {std::make_shared<nn::BatchNorm1d>(5), randn(Shape{6, 5, 3}, g)},
      {std::make_shared<nn::BatchNorm2d>(3), randn(Shape{2, 3, 4, 4}, g)}};
  int64_t total = 0;
  for (auto& layer_input : cases) {
    // References, not a structured binding: clang 14 cannot capture bindings in the lambdas below.
    auto& layer = layer_input.first;
    auto& x = layer_input.second;
    (*layer)(x);  // running statistics away from their initial values
    const Snapshot s0 = snapshot(layer->state_dict());
    // Counted on a fresh layer of the same kind, so that this one's buffers stay at s0.
    auto copy = layer->name() == "BatchNorm2d" ? std::shared_ptr<nn::Module>(std::make_shared<nn::BatchNorm2d>(3))
                                               : std::make_shared<nn::BatchNorm1d>(5);
    const int64_t before = allocation_events();
    (*copy)(x);
    const int64_t k = allocation_events() - before;
    ASSERT_GT(k, 5);
    total += k;
    for (int64_t n = 0; n < k; ++n) {
      const int64_t baseline = memory_stats().allocated_bytes;
      EXPECT_TRUE(fails_with_out_of_memory(n, [&] { (*layer)(x); }));
      EXPECT_EQ(memory_stats().allocated_bytes, baseline);
      EXPECT_EQ(snapshot(layer->state_dict()), s0) << layer->name() << " " << x.shape() << ": allocation " << n
                                                   << " of " << k << " changed the running statistics";
    }
  }
  RecordProperty("batchnorm_allocations", static_cast<int>(total));
}

class FaultInjectionFiles : public oxt::TempDirTest {};

// Every allocation of save_checkpoint over an existing checkpoint (the file stays the old one, no temporary is
// left) and of load_checkpoint (model and optimizer keep their state: all or nothing).
TEST_F(FaultInjectionFiles, EveryAllocationOfACheckpointSaveAndLoad) {
  const std::string file = path("ckpt.safetensors");
  Trainer t(3);
  t.step();
  save_checkpoint(file, *t.model, *t.opt, 1);
  const Snapshot old_weights = t.weights();
  t.step();
  const Snapshot new_weights = t.weights();

  auto saved_weights = [&] {
    Trainer fresh(99);
    fresh.step();  // give Adam a state to load into
    load_checkpoint(file, *fresh.model, *fresh.opt);
    return fresh.weights();
  };

  int64_t before = allocation_events();
  save_checkpoint(path("count.safetensors"), *t.model, *t.opt, 2);
  const int64_t k_save = allocation_events() - before;
  fs::remove(path("count.safetensors"));
  ASSERT_GT(k_save, 0);
  for (int64_t n = 0; n < k_save; ++n) {
    const int64_t baseline = memory_stats().allocated_bytes;
    EXPECT_TRUE(fails_with_out_of_memory(n, [&] { save_checkpoint(file, *t.model, *t.opt, 2); }));
    EXPECT_EQ(memory_stats().allocated_bytes, baseline) << "save: allocation " << n << " leaked";
    EXPECT_EQ(listing(), std::vector<std::string>{"ckpt.safetensors"}) << "save: allocation " << n;
    EXPECT_EQ(saved_weights(), old_weights) << "save: allocation " << n << " changed the file";
  }

  save_checkpoint(file, *t.model, *t.opt, 2);
  Trainer target(5);
  target.step();
  target.opt->zero_grad();
  const Snapshot w0 = target.weights(), s0 = target.optimizer_state();
  before = allocation_events();
  EXPECT_EQ(load_checkpoint(file, *target.model, *target.opt), 2);
  const int64_t k_load = allocation_events() - before;
  EXPECT_EQ(target.weights(), new_weights);
  ASSERT_GT(k_load, 0);
  for (int64_t n = 0; n < k_load; ++n) {
    Trainer u(5);
    u.step();
    u.opt->zero_grad();
    ASSERT_EQ(u.weights(), w0);
    const int64_t baseline = memory_stats().allocated_bytes;
    EXPECT_TRUE(fails_with_out_of_memory(n, [&] { load_checkpoint(file, *u.model, *u.opt); }));
    EXPECT_EQ(memory_stats().allocated_bytes, baseline) << "load: allocation " << n << " leaked";
    EXPECT_EQ(u.weights(), w0) << "load: allocation " << n << " changed the model";
    EXPECT_EQ(u.optimizer_state(), s0) << "load: allocation " << n << " changed the optimizer";
  }
  RecordProperty("save_allocations", static_cast<int>(k_save));
  RecordProperty("load_allocations", static_cast<int>(k_load));
}

// nn::save / nn::load (documented all or nothing) and Optimizer::load_state_tensors (all or nothing) under
// every allocation failure: OutOfMemory, no leak, the module / optimizer unchanged.
TEST_F(FaultInjectionFiles, EveryAllocationOfModuleLoadAndOptimizerStateLoad) {
  const std::string file = path("model.safetensors");
  Trainer source(11);
  source.step();
  nn::save(*source.model, file);
  const auto entries = source.opt->state_tensors();

  Trainer probe(12);
  probe.step();
  int64_t before = allocation_events();
  nn::load(*probe.model, file);
  const int64_t k_load = allocation_events() - before;
  before = allocation_events();
  probe.opt->load_state_tensors(entries);
  const int64_t k_state = allocation_events() - before;
  ASSERT_GT(k_load, 0);
  ASSERT_GT(k_state, 0);

  Trainer target(12);
  target.step();
  target.opt->zero_grad();
  const Snapshot w0 = target.weights(), s0 = target.optimizer_state();
  for (int64_t n = 0; n < k_load; ++n) {
    const int64_t baseline = memory_stats().allocated_bytes;
    EXPECT_TRUE(fails_with_out_of_memory(n, [&] { nn::load(*target.model, file); }));
    EXPECT_EQ(memory_stats().allocated_bytes, baseline) << "nn::load: allocation " << n << " leaked";
    EXPECT_EQ(target.weights(), w0) << "nn::load: allocation " << n << " changed the model";
  }
  for (int64_t n = 0; n < k_state; ++n) {
    const int64_t baseline = memory_stats().allocated_bytes;
    EXPECT_TRUE(fails_with_out_of_memory(n, [&] { target.opt->load_state_tensors(entries); }));
    EXPECT_EQ(memory_stats().allocated_bytes, baseline) << "load_state_tensors: allocation " << n << " leaked";
    EXPECT_EQ(target.optimizer_state(), s0) << "load_state_tensors: allocation " << n << " changed the state";
  }
  RecordProperty("module_load_allocations", static_cast<int>(k_load));
  RecordProperty("optimizer_state_load_allocations", static_cast<int>(k_state));
}

// Every file operation of an atomic save (create, writes, fsync, close, rename, directory fsync) failing with
// ENOSPC and with EIO: an Io error naming the file and the errno text; the checkpoint on disk is the complete
// old one (or, when only the directory fsync after the rename failed, the complete new one); no temporary file.
TEST_F(FaultInjectionFiles, EveryFileOperationOfASaveFailingWithEnospcAndEio) {
  const std::string file = path("ckpt.safetensors");
  Trainer t(3);
  t.step();
  save_checkpoint(file, *t.model, *t.opt, 1);
  const Snapshot old_weights = t.weights();
  t.step();
  const Snapshot new_weights = t.weights();

  const int64_t before = fault::file_operations_counted();
  save_checkpoint(path("count.safetensors"), *t.model, *t.opt, 2);
  const int64_t k = fault::file_operations_counted() - before;
  fs::remove(path("count.safetensors"));
  ASSERT_GE(k, 6);  // create, >= 1 write, fsync, close, rename, directory open + fsync

  int64_t stayed_old = 0, became_new = 0;
  for (int err : {ENOSPC, EIO}) {
    for (int64_t n = 0; n < k; ++n) {
      {
        FaultGuard guard;
        fault::fail_file_operation_after(n, err);
        try {
          save_checkpoint(file, *t.model, *t.opt, 2);
          ADD_FAILURE() << "file operation " << n << " failed but the save succeeded";
        } catch (const Error& e) {
          EXPECT_EQ(e.kind(), ErrorKind::Io) << e.what();
          const std::string msg = e.what();
          EXPECT_NE(msg.find(file), std::string::npos) << "the error does not name the file: " << msg;
          EXPECT_NE(msg.find(std::strerror(err)), std::string::npos) << "the error lacks the errno text: " << msg;
        }
      }
      EXPECT_EQ(listing(), std::vector<std::string>{"ckpt.safetensors"}) << "file operation " << n;
      Trainer fresh(99);
      fresh.step();
      EXPECT_NO_THROW(load_checkpoint(file, *fresh.model, *fresh.opt)) << "file operation " << n;
      const Snapshot on_disk = fresh.weights();
      if (on_disk == old_weights) {
        ++stayed_old;
      } else {
        EXPECT_EQ(on_disk, new_weights) << "file operation " << n << ": neither the old nor the new checkpoint";
        ++became_new;
        Trainer old(3);  // back to the old file for the next case
        old.step();
        save_checkpoint(file, *old.model, *old.opt, 1);
      }
    }
  }
  // Only the directory open and fsync come after the rename.
  EXPECT_EQ(became_new, 2 * 2);
  EXPECT_EQ(stayed_old, 2 * (k - 2));
  RecordProperty("file_operations", static_cast<int>(k));
}

// The same for nn::save and save_safetensors (the one atomic-file path all savers share).
TEST_F(FaultInjectionFiles, SafetensorsWriteFailureKeepsThePreviousFile) {
  const std::string file = path("w.safetensors");
  save_safetensors(file, {{"a", full({4}, 1.0)}});
  for (int64_t n = 0; n < 3; ++n) {  // create, write, fsync
    FaultGuard guard;
    fault::fail_file_operation_after(n, ENOSPC);
    EXPECT_OXM_ERROR(save_safetensors(file, {{"a", full({1000}, 2.0)}}), Io, std::strerror(ENOSPC));
  }
  EXPECT_EQ(listing(), std::vector<std::string>{"w.safetensors"});
  EXPECT_EQ(load_safetensors(file).at("a").to_vector<float>(), std::vector<float>(4, 1.0f));
}

// ------------------------------------------------------------------------------------------ resource limits
TEST_F(FaultInjectionFiles, FileClaimingATebibyteTensorNeverAllocatesIt) {
  const std::string header = R"({"x":{"dtype":"U8","shape":[1099511627776],"data_offsets":[0,1099511627776]}})";
  std::string bytes(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);  // little-endian host
  bytes += header;
  bytes += std::string(16, '\0');
  {
    FILE* f = std::fopen(path("big.safetensors").c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    std::fclose(f);
  }
  const int64_t before = allocation_events();
  EXPECT_OXM_ERROR(load_safetensors(path("big.safetensors")), Io, "outside the data section");
  EXPECT_EQ(allocation_events(), before);  // rejected from the header alone
  EXPECT_LT(memory_stats().peak_allocated_bytes, int64_t{1} << 40);
}

TEST(ResourceLimits, RequestsBeyondMemoryAreOutOfMemory) {
  const int64_t baseline = memory_stats().allocated_bytes;
  EXPECT_OXM_ERROR(empty(Shape{int64_t{1} << 50}), OutOfMemory, "cannot allocate");
  EXPECT_OXM_ERROR(zeros(Shape{int64_t{1} << 48, 4}), OutOfMemory, "cannot allocate");
  // Sizes the alignment rounding would wrap to a tiny block (a defect before: aligned_alloc(64, 0)).
  EXPECT_OXM_ERROR(detail::host_allocate(SIZE_MAX), OutOfMemory, "cannot allocate");
  EXPECT_OXM_ERROR(detail::host_allocate(SIZE_MAX - 32), OutOfMemory, "cannot allocate");
  EXPECT_OXM_ERROR(detail::host_allocate(static_cast<size_t>(INT64_MAX)), OutOfMemory, "cannot allocate");
  EXPECT_EQ(memory_stats().allocated_bytes, baseline);
  EXPECT_EQ(zeros({3}).numel(), 3);  // the allocator still works
}

// Under a real address-space limit (RLIMIT_AS, what `ulimit -v` sets; set here in-process, the soft limit only,
// and restored): a request beyond it fails in the system allocator, and the caching allocator must first
// return its cache to the system and retry, then report OutOfMemory. Not under sanitizers: their runtimes map
// memory for themselves and abort when that fails.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define OXT_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define OXT_SANITIZED 1
#endif
#endif
#ifndef OXT_SANITIZED
int64_t virtual_memory_bytes() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  int64_t kib = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmSize: %" SCNd64, &kib) == 1) break;
  std::fclose(f);
  return kib < 0 ? -1 : kib * 1024;
}
#endif
TEST(ResourceLimits, UnderAnAddressSpaceLimit) {
#ifdef OXT_SANITIZED
  GTEST_SKIP() << "sanitizer runtimes cannot run under an address-space limit";
#else
  const int64_t mib = int64_t{1} << 20;
  empty_cache();
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_AS, &old), 0);
  const int64_t vm = virtual_memory_bytes();
  ASSERT_GT(vm, 0);
  const int64_t limit = vm + 1024 * mib;
  if (old.rlim_cur != RLIM_INFINITY && static_cast<int64_t>(old.rlim_cur) < limit + 1024 * mib)
    GTEST_SKIP() << "an address-space limit is already set";
  struct Restore {
    rlimit r;
    ~Restore() { ::setrlimit(RLIMIT_AS, &r); }
  } restore{old};
  rlimit lowered = old;
  lowered.rlim_cur = static_cast<rlim_t>(limit);
  ASSERT_EQ(::setrlimit(RLIMIT_AS, &lowered), 0);
  { Tensor cached = empty(Shape{768 * mib}, DType::U8); }  // kept in the allocator's cache when freed
  EXPECT_GE(memory_stats().reserved_bytes, 768 * mib);
  // 512 MiB more do not fit beside the cached 768: served after the allocator returns its cache and retries.
  Tensor half = empty(Shape{512 * mib}, DType::U8);
  EXPECT_EQ(half.numel(), 512 * mib);
  EXPECT_LT(memory_stats().reserved_bytes, 768 * mib);
  half = Tensor();
  EXPECT_OXM_ERROR(empty(Shape{2048 * mib}, DType::U8), OutOfMemory, "cannot allocate");
  EXPECT_OXM_ERROR(zeros(Shape{512 * mib, 4}), OutOfMemory, "cannot allocate");
  EXPECT_EQ(zeros({3}).numel(), 3);
  empty_cache();
#endif
}

// x = x * 1.0001 chained 10^6 times: backward and the graph's destruction are iterative (no recursion
// proportional to depth, which would overflow the stack, above all under ASan's larger frames).
TEST(ResourceLimits, MillionNodeGraphBackpropagatesAndFrees) {
  const int64_t baseline = memory_stats().allocated_bytes;
  Tensor x = from_vector<double>({1.0}, {1}).requires_grad_();
  {
    Tensor y = x;
    const int n = 1000000;
    for (int i = 0; i < n; ++i) y = y * 1.0001;
    y.sum().backward();
    EXPECT_NEAR(x.grad().item<double>() / std::pow(1.0001, n), 1.0, 1e-9);
  }
  x = Tensor();  // and its .grad
  EXPECT_EQ(memory_stats().allocated_bytes, baseline);
}

}  // namespace
