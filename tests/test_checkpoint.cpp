// nn::save / nn::load and save_checkpoint / load_checkpoint: round trips, all-or-nothing load errors,
// bit-identical resume of training, and kill -9 during repeated checkpoint saves.
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <thread>

#include "test_util.hpp"

namespace {
using namespace oxmera;
using oxt::bits;
using oxt::Snapshot;
using oxt::snapshot;
namespace fs = std::filesystem;

class Checkpoint : public oxt::TempDirTest {};

// x [N,3,4,4] -> BatchNorm2d -> Flatten -> Linear -> ReLU -> Dropout -> LayerNorm -> Linear -> [N,3]
std::shared_ptr<nn::Sequential> make_model(uint64_t init_seed, uint64_t dropout_seed) {
  Generator g(init_seed);
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::BatchNorm2d>(3));
  m->push_back(std::make_shared<nn::Flatten>());
  m->push_back(std::make_shared<nn::Linear>(48, 32, true, g));
  m->push_back(std::make_shared<nn::ReLU>());
  m->push_back(std::make_shared<nn::Dropout>(0.3, dropout_seed));
  m->push_back(std::make_shared<nn::LayerNorm>(Shape{32}));
  m->push_back(std::make_shared<nn::Linear>(32, 3, true, g));
  return m;
}
nn::Dropout& dropout_of(nn::Sequential& m) { return dynamic_cast<nn::Dropout&>(m[4]); }

// One training step on a batch drawn from `data` (15 targets: an odd count, so the generator's cached
// normal is live between steps).
void train_step(nn::Module& model, optim::Optimizer& opt, Generator& data) {
  Tensor x = randn(Shape{5, 3, 4, 4}, data);
  Tensor y = randn(Shape{5, 3}, data);
  opt.zero_grad();
  nn::mse_loss(model(x), y).backward();
  opt.step();
}

Snapshot module_snapshot(const nn::Module& m) {
  auto named = m.named_parameters();
  for (auto& b : m.named_buffers()) named.push_back(b);
  return snapshot(named);
}
// Compact comparison: names the first tensor that differs instead of printing every value.
::testing::AssertionResult Same(const Snapshot& got, const Snapshot& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << got.size() << " tensors, want " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i].first != want[i].first)
      return ::testing::AssertionFailure()
             << "tensor " << i << " is '" << got[i].first << "', want '" << want[i].first << "'";
    if (got[i].second != want[i].second) {
      size_t j = 0;
      while (j < got[i].second.size() && j < want[i].second.size() && got[i].second[j] == want[i].second[j]) ++j;
      return ::testing::AssertionFailure() << "'" << got[i].first << "' differs at element " << j;
    }
  }
  return ::testing::AssertionSuccess();
}
bool same_state(const Generator& a, const Generator& b) {
  auto x = a.state(), y = b.state();
  return std::memcmp(x.s, y.s, sizeof x.s) == 0 && std::memcmp(&x.cached_normal, &y.cached_normal, 8) == 0 &&
         x.has_cached == y.has_cached;
}

// Rewrites a safetensors file through `edit` (for building bad files).
void rewrite(const std::string& src, const std::string& dst,
             const std::function<void(std::map<std::string, Tensor>&, std::map<std::string, std::string>&)>& edit) {
  SafetensorsFile f = load_safetensors_with_metadata(src);
  edit(f.tensors, f.metadata);
  save_safetensors(dst, f.tensors, f.metadata);
}

// ------------------------------------------------------------------------------------------ nn::save / load
TEST_F(Checkpoint, ModuleSaveLoadRoundTrip) {
  auto src = make_model(1, 7);
  optim::Adam opt_src(src->parameters(), {.lr = 1e-2});
  Generator data(3);
  for (int i = 0; i < 3; ++i) train_step(*src, opt_src, data);  // BN/LN params and running stats move
  const auto p = path("model.safetensors");
  nn::save(*src, p, {{"epoch", "3"}});

  // Names as named_parameters / named_buffers.
  auto file = load_safetensors(p);
  std::vector<std::string> names;
  for (const auto& [n, t] : file) names.push_back(n);
  EXPECT_EQ(names,
            (std::vector<std::string>{"0.bias", "0.num_batches_tracked", "0.running_mean", "0.running_var", "0.weight",
                                      "2.bias", "2.weight", "5.bias", "5.weight", "6.bias", "6.weight"}));

  auto dst = make_model(99, 8);
  std::vector<Tensor> handles = dst->parameters();
  optim::SGD opt_dst(handles, {.lr = 0.1});
  ASSERT_FALSE(Same(module_snapshot(*dst), module_snapshot(*src)));
  const auto md = nn::load(*dst, p);
  EXPECT_EQ(md.at("epoch"), "3");
  EXPECT_TRUE(Same(module_snapshot(*dst), module_snapshot(*src)));
  // In place: the same tensors, still leaves that require grad, and the optimizer's handles see the values.
  const auto after = dst->parameters();
  ASSERT_EQ(after.size(), handles.size());
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_TRUE(after[i].is_same(handles[i]));
    EXPECT_TRUE(after[i].requires_grad());
    EXPECT_TRUE(after[i].is_leaf());
  }
  train_step(*dst, opt_dst, data);
  EXPECT_FALSE(Same(module_snapshot(*dst), module_snapshot(*src)));
}

TEST_F(Checkpoint, ModuleLoadErrorsChangeNothing) {
  auto src = make_model(1, 7);
  const auto good = path("good.safetensors"), bad = path("bad.safetensors");
  nn::save(*src, good);
  auto dst = make_model(2, 7);
  const Snapshot before = module_snapshot(*dst);
  auto unchanged = [&] { EXPECT_TRUE(Same(module_snapshot(*dst), before)); };

  // Missing tensor (the last one in the module's order, so nothing before it may have been copied).
  rewrite(good, bad, [](auto& t, auto&) { t.erase("0.running_var"); });
  EXPECT_OXM_ERROR(nn::load(*dst, bad), Io, "'0.running_var'");
  EXPECT_OXM_ERROR(nn::load(*dst, bad, {.strict = false}), Io, "lacks 1 tensor");
  unchanged();

  // Unexpected extra tensor: an error in strict mode, ignored otherwise.
  rewrite(good, bad, [](auto& t, auto&) { t["7.weight"] = ones(Shape{2}); });
  EXPECT_OXM_ERROR(nn::load(*dst, bad), Io, "'7.weight'");
  unchanged();

  // Wrong shape / dtype.
  rewrite(good, bad, [](auto& t, auto&) { t["6.bias"] = zeros(Shape{4}); });
  EXPECT_OXM_ERROR(nn::load(*dst, bad), ShapeMismatch, "'6.bias'");
  unchanged();
  rewrite(good, bad, [](auto& t, auto&) { t["0.running_var"] = ones(Shape{3}, DType::F64); });
  EXPECT_OXM_ERROR(nn::load(*dst, bad), DTypeMismatch, "'0.running_var'");
  unchanged();

  // Not a readable safetensors file / no file.
  {
    std::FILE* f = std::fopen(bad.c_str(), "wb");
    std::fputs("garbage", f);
    std::fclose(f);
  }
  EXPECT_EQ(oxt::error_kind_of([&] { nn::load(*dst, bad); }), ErrorKind::Io);
  EXPECT_EQ(oxt::error_kind_of([&] { nn::load(*dst, path("none.safetensors")); }), ErrorKind::Io);
  unchanged();

  // Non-strict load with an extra tensor works.
  rewrite(good, bad, [](auto& t, auto&) { t["7.weight"] = ones(Shape{2}); });
  nn::load(*dst, bad, {.strict = false});
  EXPECT_TRUE(Same(module_snapshot(*dst), module_snapshot(*src)));
}

// ------------------------------------------------------------------------------------------ checkpoints
TEST_F(Checkpoint, CheckpointRoundTripIsExact) {
  auto src = make_model(1, 7);
  optim::Adam opt_src(src->parameters(), {.lr = 1e-2, .amsgrad = true});
  Generator data(5);
  for (int i = 0; i < 3; ++i) train_step(*src, opt_src, data);
  Generator extra(11);
  (void)extra.next_normal();  // leaves a cached normal
  ASSERT_TRUE(extra.state().has_cached);
  const auto p = path("ckpt.safetensors");
  save_checkpoint(p, *src, opt_src, 1234567890123LL, {&data, &extra}, {{"run", "a"}});

  auto dst = make_model(2, 8);
  optim::Adam opt_dst(dst->parameters(), {.lr = 1e-2, .amsgrad = true});
  Generator d2(0), e2(0);
  std::map<std::string, std::string> md;
  EXPECT_EQ(load_checkpoint(p, *dst, opt_dst, {&d2, &e2}, &md), 1234567890123LL);
  EXPECT_EQ(md.at("run"), "a");
  EXPECT_EQ(md.at("oxmera.optimizer"), "Adam");
  EXPECT_TRUE(Same(module_snapshot(*dst), module_snapshot(*src)));
  EXPECT_TRUE(Same(snapshot(opt_dst.state_tensors()), snapshot(opt_src.state_tensors())));
  EXPECT_TRUE(same_state(d2, data));
  EXPECT_TRUE(same_state(e2, extra));
  EXPECT_TRUE(same_state(dropout_of(*dst).generator, dropout_of(*src).generator));
  EXPECT_EQ(e2.next_normal(), extra.next_normal());  // the cached value, bit for bit
  EXPECT_EQ(e2.next_u64(), extra.next_u64());

  // The weights load out of a checkpoint with nn::load and a prefix.
  auto w = make_model(3, 9);
  nn::load(*w, p, {.prefix = "model."});
  EXPECT_TRUE(Same(module_snapshot(*w), module_snapshot(*src)));

  // Reserved metadata keys and null generators are caller errors.
  EXPECT_OXM_ERROR(save_checkpoint(p, *src, opt_src, 0, {}, {{"oxmera.format", "x"}}), InvalidArgument, "reserved");
  EXPECT_OXM_ERROR(save_checkpoint(p, *src, opt_src, 0, {nullptr}), InvalidArgument, "generators[0]");
}

TEST_F(Checkpoint, CheckpointLoadErrorsChangeNothing) {
  auto src = make_model(1, 7);
  optim::Adam opt_src(src->parameters(), {.lr = 1e-2});
  Generator data(5);
  for (int i = 0; i < 2; ++i) train_step(*src, opt_src, data);
  const auto good = path("good.safetensors"), bad = path("bad.safetensors");
  save_checkpoint(good, *src, opt_src, 2, {&data});

  auto dst = make_model(2, 8);
  optim::Adam opt_dst(dst->parameters(), {.lr = 1e-2});
  Generator dgen(77);
  train_step(*dst, opt_dst, dgen);  // dst has its own optimizer state
  const Snapshot model_before = module_snapshot(*dst), optim_before = snapshot(opt_dst.state_tensors());
  const Generator gen_before = dgen, drop_before = dropout_of(*dst).generator;
  auto unchanged = [&](const char* what) {
    EXPECT_TRUE(Same(module_snapshot(*dst), model_before)) << what;
    EXPECT_TRUE(Same(snapshot(opt_dst.state_tensors()), optim_before)) << what;
    EXPECT_TRUE(same_state(dgen, gen_before)) << what;
    EXPECT_TRUE(same_state(dropout_of(*dst).generator, drop_before)) << what;
  };
  auto load_bad = [&] { return load_checkpoint(bad, *dst, opt_dst, {&dgen}); };

  rewrite(good, bad, [](auto& t, auto&) { t.erase("model.6.weight"); });
  EXPECT_OXM_ERROR(load_bad(), Io, "'model.6.weight'");
  unchanged("missing model tensor");
  rewrite(good, bad, [](auto& t, auto&) { t["model.9.bias"] = ones(Shape{1}); });
  EXPECT_OXM_ERROR(load_bad(), Io, "'model.9.bias'");
  unchanged("extra model tensor");
  rewrite(good, bad, [](auto& t, auto&) { t["model.6.bias"] = ones(Shape{3}, DType::F64); });
  EXPECT_OXM_ERROR(load_bad(), DTypeMismatch, "'model.6.bias'");
  unchanged("model dtype");
  rewrite(good, bad, [](auto& t, auto&) { t["model.0.running_mean"] = ones(Shape{1, 3}); });
  EXPECT_OXM_ERROR(load_bad(), ShapeMismatch, "'model.0.running_mean'");
  unchanged("model shape");
  rewrite(good, bad, [](auto& t, auto&) { t.erase("optim.group0.param7.exp_avg_sq"); });
  EXPECT_OXM_ERROR(load_bad(), InvalidArgument, "exp_avg_sq");
  unchanged("missing optimizer buffer");
  rewrite(good, bad, [](auto& t, auto&) { t["optim.group0.param3.exp_avg"] = zeros(Shape{7}); });
  EXPECT_OXM_ERROR(load_bad(), ShapeMismatch, "group0.param3.exp_avg");
  unchanged("optimizer buffer shape");
  rewrite(good, bad, [](auto& t, auto&) { t["rng.0"] = from_vector<int64_t>({1, 2, 3, 4, 0, 2}, Shape{6}); });
  EXPECT_OXM_ERROR(load_bad(), Io, "has_cached");
  unchanged("bad generator state");
  rewrite(good, bad, [](auto& t, auto&) { t.erase("rng.model.4"); });
  EXPECT_OXM_ERROR(load_bad(), Io, "'rng.model.4'");
  unchanged("missing dropout generator");
  rewrite(good, bad, [](auto& t, auto&) { t["step"] = from_vector<double>({2.0}, Shape{}); });
  EXPECT_OXM_ERROR(load_bad(), DTypeMismatch, "'step'");
  unchanged("step dtype");
  rewrite(good, bad, [](auto& t, auto&) { t["stray"] = ones(Shape{1}); });
  EXPECT_OXM_ERROR(load_bad(), Io, "'stray'");
  unchanged("stray tensor");

  // Wrong optimizer type, wrong number of generators, a plain nn::save file.
  {
    optim::AdamW other(dst->parameters());
    EXPECT_OXM_ERROR(load_checkpoint(good, *dst, other, {&dgen}), Io, "AdamW");
  }
  EXPECT_OXM_ERROR(load_checkpoint(good, *dst, opt_dst), Io, "1 generator state(s) but 0");
  Generator g2(1);
  EXPECT_OXM_ERROR(load_checkpoint(good, *dst, opt_dst, {&dgen, &g2}), Io, "but 2");
  EXPECT_OXM_ERROR(load_checkpoint(good, *dst, opt_dst, {nullptr}), InvalidArgument, "generators[0]");
  nn::save(*src, bad);
  EXPECT_OXM_ERROR(load_bad(), Io, "not an oxmera checkpoint");
  unchanged("wrong objects");

  // And the good file still loads.
  EXPECT_EQ(load_checkpoint(good, *dst, opt_dst, {&dgen}), 2);
  EXPECT_TRUE(Same(module_snapshot(*dst), module_snapshot(*src)));
  EXPECT_TRUE(Same(snapshot(opt_dst.state_tensors()), snapshot(opt_src.state_tensors())));
  EXPECT_TRUE(same_state(dgen, data));
}

// Training 2N steps in one go and N steps + checkpoint + fresh objects + load + N steps give bit-identical
// parameters, buffers, optimizer state and generators.
using OptFactory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;
struct ResumeCase {
  const char* name;
  OptFactory make;
};
void PrintTo(const ResumeCase& c, std::ostream* os) { *os << c.name; }
class CheckpointResume : public Checkpoint, public ::testing::WithParamInterface<ResumeCase> {};

TEST_P(CheckpointResume, ResumeIsBitIdentical) {
  constexpr int N = 4;
  const OptFactory& make = GetParam().make;

  auto ref = make_model(1, 7);
  auto ref_opt = make(ref->parameters());
  Generator ref_data(42);
  for (int i = 0; i < 2 * N; ++i) train_step(*ref, *ref_opt, ref_data);

  const auto p = path("resume.safetensors");
  {
    auto m = make_model(1, 7);
    auto opt = make(m->parameters());
    Generator data(42);
    for (int i = 0; i < N; ++i) train_step(*m, *opt, data);
    save_checkpoint(p, *m, *opt, N, {&data});
  }  // everything from the first half is gone

  auto m = make_model(123, 456);  // other init and Dropout seed: the load must restore both
  auto opt = make(m->parameters());
  Generator data(0);
  ASSERT_FALSE(Same(module_snapshot(*m), module_snapshot(*ref)));
  EXPECT_EQ(load_checkpoint(p, *m, *opt, {&data}), N);
  for (int i = 0; i < N; ++i) train_step(*m, *opt, data);

  EXPECT_TRUE(Same(module_snapshot(*m), module_snapshot(*ref)));  // bit patterns compared with ==
  EXPECT_TRUE(Same(snapshot(opt->state_tensors()), snapshot(ref_opt->state_tensors())));
  EXPECT_TRUE(same_state(data, ref_data));
  EXPECT_TRUE(same_state(dropout_of(*m).generator, dropout_of(*ref).generator));
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, CheckpointResume,
    ::testing::Values(ResumeCase{"Adam",
                                 [](std::vector<Tensor> p) -> std::unique_ptr<optim::Optimizer> {
                                   return std::make_unique<optim::Adam>(
                                       std::move(p), optim::AdamOptions{.lr = 1e-2, .amsgrad = true});
                                 }},
                      ResumeCase{"AdamW",
                                 [](std::vector<Tensor> p) -> std::unique_ptr<optim::Optimizer> {
                                   return std::make_unique<optim::AdamW>(std::move(p), optim::AdamWOptions{.lr = 1e-2});
                                 }},
                      ResumeCase{"SGD",
                                 [](std::vector<Tensor> p) -> std::unique_ptr<optim::Optimizer> {
                                   return std::make_unique<optim::SGD>(
                                       std::move(p), optim::SGDOptions{.lr = 1e-2, .momentum = 0.9, .nesterov = true});
                                 }},
                      ResumeCase{"RMSprop",
                                 [](std::vector<Tensor> p) -> std::unique_ptr<optim::Optimizer> {
                                   return std::make_unique<optim::RMSprop>(
                                       std::move(p),
                                       optim::RMSpropOptions{.lr = 1e-3, .momentum = 0.5, .centered = true});
                                 }}),
    [](const ::testing::TestParamInfo<ResumeCase>& info) { return std::string(info.param.name); });

// A child process saves a ~15 MB checkpoint over and over (alternating two models, step = save count) and is
// SIGKILLed at a random moment; the file must load as one complete version and stray temporary files must not
// disturb loading or later saves.
TEST_F(Checkpoint, KillDuringRepeatedSavesLeavesALoadableCheckpoint) {
  auto make_big = [](uint64_t seed) {
    Generator g(seed);
    auto m = std::make_shared<nn::Sequential>();
    m->push_back(std::make_shared<nn::Linear>(1024, 1024, true, g));
    m->push_back(std::make_shared<nn::Linear>(1024, 256, true, g));
    return m;
  };
  std::shared_ptr<nn::Sequential> models[2] = {make_big(1), make_big(2)};
  std::unique_ptr<optim::Adam> opts[2];
  Snapshot model_snap[2], optim_snap[2];
  Generator data(9);
  for (int k = 0; k < 2; ++k) {
    opts[k] = std::make_unique<optim::Adam>(models[k]->parameters());
    opts[k]->zero_grad();
    nn::mse_loss((*models[k])(randn(Shape{2, 1024}, data)), randn(Shape{2, 256}, data)).backward();
    opts[k]->step();
    model_snap[k] = module_snapshot(*models[k]);
    optim_snap[k] = snapshot(opts[k]->state_tensors());
  }
  const auto p = path("ckpt.safetensors");
  save_checkpoint(p, *models[0], *opts[0], 0);

  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  SCOPED_TRACE("random seed " + std::to_string(seed));
  auto fresh = make_big(3);
  optim::Adam fresh_opt(fresh->parameters());
  int kills_mid_save = 0;  // rounds whose kill left a temporary file (informational: the timing is random)
  // 4 rounds in the unit suites; the ctest checkpoint_kill_100 (Release) sets OXMERA_CHECKPOINT_KILL_ROUNDS=100.
  const char* rounds_env = std::getenv("OXMERA_CHECKPOINT_KILL_ROUNDS");
  const int rounds = rounds_env != nullptr ? std::clamp(std::atoi(rounds_env), 1, 100000) : 4;
  for (int round = 0; round < rounds; ++round) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(fds[0]);
      try {
        for (int64_t step = 1;; ++step) {
          save_checkpoint(p, *models[step % 2], *opts[step % 2], step);
          const char c = 1;
          if (::write(fds[1], &c, 1) != 1) _exit(4);
        }
      } catch (...) {
        _exit(3);
      }
    }
    ::close(fds[1]);
    // Wait for the child's first complete save, then kill it at a random moment of the following ones.
    pollfd pfd{fds[0], POLLIN, 0};
    const int ready = ::poll(&pfd, 1, 60000);
    char c = 0;
    const bool saved = ready == 1 && ::read(fds[0], &c, 1) == 1;
    if (saved)
      std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 150000)(rng)));
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ::close(fds[0]);
    ASSERT_TRUE(saved) << "the child never completed a save (exit status " << status << ")";
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the child died on its own: " << status;

    // The target is one complete version: the step says which model, and every byte matches it.
    const int64_t step = load_checkpoint(p, *fresh, fresh_opt);
    EXPECT_GE(step, 1);
    EXPECT_TRUE(Same(module_snapshot(*fresh), model_snap[step % 2])) << "step " << step;
    EXPECT_TRUE(Same(snapshot(fresh_opt.state_tensors()), optim_snap[step % 2])) << "step " << step;
    // Only the target and (maybe) the killed save's temporary file are in the directory.
    int strays = 0;
    for (const auto& name : listing()) {
      const bool tmp = name.rfind(".ckpt.safetensors.tmp.", 0) == 0;
      strays += tmp;
      EXPECT_TRUE(name == "ckpt.safetensors" || tmp) << name;
    }
    kills_mid_save += strays > 0;
    // A new save over it still works despite a stray temporary file.
    save_checkpoint(p, *models[0], *opts[0], 0);
    EXPECT_EQ(load_checkpoint(p, *fresh, fresh_opt), 0);
    EXPECT_TRUE(Same(module_snapshot(*fresh), model_snap[0]));
  }
  RecordProperty("kills_mid_save", kills_mid_save);
  // Every round above asserted a loadable, complete checkpoint; this line is the figure docs/LIMITATIONS.md quotes.
  std::printf("kill -9 rounds: %d, of which mid-save (a temporary file left): %d, unreadable checkpoints: %d\n", rounds,
              kills_mid_save, ::testing::Test::HasFailure() ? -1 : 0);
}

}  // namespace
