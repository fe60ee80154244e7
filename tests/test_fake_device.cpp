// The device-side code paths of the tensor layer, run without a GPU: a test-only backend registered for
// DeviceKind::CUDA keeps its tensors in host memory, forwards every kernel to the CPU backend and implements
// the optional small-linear-algebra kernels with the same per-matrix code the CUDA kernels run
// (src/backend/common/spd_math.hpp). So the branches a GPU takes in linalg (logdet/cholesky/solve_triangular
// on the device, their tensor-op backward rules), in the index ops (CPU index for device data) and in the
// research workload (`--device cuda`, f32) execute here, against the CPU, also under ASan in CI. On a
// machine with a real GPU registered the suite skips itself (tests/test_cuda.cpp covers that case).
#include <unistd.h>
#include <functional>
#include <limits>

#include <filesystem>

#include <cstdio>
#include <map>
#include <thread>

#include "demo_training.hpp"
#include "fake_device.hpp"
#include "research.hpp"
#include "test_util.hpp"

using namespace oxt;
namespace la = oxmera::linalg;

namespace {

oxt_fake::HostMemoryDevice* g_device = nullptr;
const Device kDev = Device::cuda();

bool use_fake_device() {
  g_device = oxt_fake::register_host_memory_device();
  return g_device != nullptr;
}

#define NEED_FAKE_DEVICE()                                                                           \
  do {                                                                                               \
    if (!use_fake_device()) GTEST_SKIP() << "a real CUDA backend is registered (see test_cuda.cpp)"; \
  } while (0)

Tensor dev(const Tensor& t) { return t.to(kDev); }
Tensor host(const Tensor& t) { return t.to(Device::cpu()); }
void expect_match(const Tensor& got, const Tensor& want, const std::string& what, double rtol, double atol) {
  ASSERT_EQ(got.device(), kDev) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  expect_close(values(host(got)), values(want), rtol, atol, what);
}
// One intra-op thread for a test's scope: on a loaded machine the CPU runs' waiting threads spin (>10x slower), and
// the comparisons do not depend on it.
struct OneIntraOpThread {
  int was = get_num_threads();
  OneIntraOpThread() { set_num_threads(1); }
  ~OneIntraOpThread() { set_num_threads(was); }
};
// `oxmera train --model transformer|lstm` at a test's size: the GPL-3 text, batches of 4 windows, 3 steps per epoch.
oxmera_cli::TrainOptions small_char_lm(const char* model) {
  oxmera_cli::TrainOptions o;
  o.model = model;
  o.data = "/usr/share/common-licenses/GPL-3";
  o.lr = 3e-3;
  o.batch = 4;
  o.steps_per_epoch = 3;
  return o;
}
Tensor spd(const Shape& s, uint64_t seed) {
  const int64_t n = s[s.size() - 1];
  Tensor B = rand(s, seed) * 2.0 - 1.0;
  return (matmul(B, B.transpose(-1, -2)) / static_cast<double>(n) + eye(n) * 0.5).detach();
}

TEST(FakeDevice, LogdetCholeskyAndSolvesTakeTheDevicePathAndMatchCpu) {
  NEED_FAKE_DEVICE();
  uint64_t seed = 10;
  for (int64_t n : {int64_t{1}, int64_t{4}, int64_t{16}, int64_t{32}, int64_t{40}}) {
    const std::string tag = "n " + std::to_string(n);
    const int64_t calls0 = g_device->linalg_kernel_calls;
    Tensor a = spd({2, 3, n, n}, ++seed).requires_grad_(), ad = dev(a.detach()).requires_grad_();
    Tensor w = rand({2, 3}, ++seed), W = rand({2, 3, n, n}, ++seed);
    Tensor ld = la::logdet(a), ldd = la::logdet(ad);
    expect_match(ldd, ld, "logdet " + tag, 1e-6, 1e-6);
    Tensor L = la::cholesky(a), Ld = la::cholesky(ad);
    expect_match(Ld, L, "cholesky " + tag, 1e-6, 1e-6);
    ((ld * w).sum() + (L * W).sum()).backward();
    ((ldd * dev(w)).sum() + (Ld * dev(W)).sum()).backward();
    ASSERT_EQ(ad.grad().device(), kDev);
    expect_match(ad.grad(), a.grad(), "logdet + cholesky grad " + tag, 1e-4, 1e-5);
    for (bool upper : {false, true}) {
      Tensor T = (upper ? L.detach().transpose(-1, -2) : L.detach()).contiguous().requires_grad_();
      Tensor Td = dev(T.detach()).requires_grad_();
      Tensor b = rand({3, n, 2}, ++seed).requires_grad_(), bd = dev(b.detach()).requires_grad_();
      Tensor x = la::solve_triangular(T, b, upper), xd = la::solve_triangular(Td, bd, upper);
      expect_match(xd, x, "solve_triangular " + tag, 1e-5, 1e-5);
      Tensor V = rand(x.shape(), ++seed);
      (x * V).sum().backward();
      (xd * dev(V)).sum().backward();
      expect_match(Td.grad(), T.grad(), "solve_triangular dT " + tag, 1e-4, 1e-5);
      expect_match(bd.grad(), b.grad(), "solve_triangular db " + tag, 1e-4, 1e-5);
      EXPECT_EQ(b.detach().to_vector<float>(), host(bd.detach()).to_vector<float>()) << "b was overwritten";
    }
    NoGradGuard ng;
    Tensor rhs = rand({2, 3, n, 4}, ++seed);
    expect_match(la::solve(dev(a.detach()), dev(rhs)), la::solve(a.detach(), rhs), "solve " + tag, 1e-4, 1e-5);
    expect_match(la::inverse(dev(a.detach())), la::inverse(a.detach()), "inverse " + tag, 1e-4, 1e-5);
    expect_match(la::det(dev(a.detach())), la::det(a.detach()), "det " + tag, 1e-5, 1e-6);
    if (n <= 32) {
      EXPECT_GT(g_device->linalg_kernel_calls, calls0) << tag;
    } else {
      EXPECT_EQ(g_device->linalg_kernel_calls, calls0) << "n > 32 must take the host path";
    }
  }
}

// create_graph through the device rules (logdet's saved inverse, cholesky's tensor-op backward): the
// Hessian-vector product is recorded on the device and matches the CPU's.
TEST(FakeDevice, LogdetAndCholeskySecondDerivativesOnTheDeviceMatchCpu) {
  NEED_FAKE_DEVICE();
  Tensor a = spd({2, 4, 4}, 90).requires_grad_(), ad = dev(a.detach()).requires_grad_();
  Tensor V = rand({2, 4, 4}, 91);
  V = V + V.transpose(-1, -2);
  auto hvp = [](const Tensor& x, const Tensor& v) {
    Tensor g = autograd::grad({la::logdet(x).sum() + la::cholesky(x).square().sum()}, {x}, {}, false, true)[0];
    return autograd::grad({(g * v).sum()}, {x})[0];
  };
  const int64_t calls0 = g_device->linalg_kernel_calls;
  Tensor h = hvp(a, V), hd = hvp(ad, dev(V));
  EXPECT_GT(g_device->linalg_kernel_calls, calls0);
  expect_match(hd, h, "Hessian-vector product of logdet + |cholesky|^2", 1e-3, 1e-4);
  EXPECT_GT(values(h.abs().max())[0], 1e-2) << "a test that can fail";
}

TEST(FakeDevice, LinalgErrorsNameTheMatrixAsOnTheCpu) {
  NEED_FAKE_DEVICE();
  Tensor bad = eye(4).expand({3, 6, 4, 4}).contiguous();
  bad.select(0, 2).select(0, 5).select(0, 1).select(0, 1).fill_(-1.0);
  // logdet and solve_triangular report at the next read-back (they do not wait for their checks), cholesky at once
  EXPECT_OXM_ERROR(la::logdet(dev(bad)).to(Device::cpu()), NotPositiveDefinite, "batch index 17 [2, 5]");
  EXPECT_OXM_ERROR(host(la::logdet(dev(bad))), NotPositiveDefinite, "Cholesky pivot 1 is not > 0");
  EXPECT_OXM_ERROR(la::cholesky(dev(bad)), NotPositiveDefinite, "batch index 17 [2, 5]");
  EXPECT_OXM_ERROR(la::cholesky(dev(bad)), NotPositiveDefinite, "pivot 1 is -1");
  Tensor sing = eye(5).expand({4, 5, 5}).contiguous();
  sing.select(0, 3).select(0, 2).select(0, 2).fill_(0.0);
  EXPECT_OXM_ERROR(la::solve_triangular(dev(sing), dev(ones({4, 5, 1})), false).sum().item<float>(), InvalidArgument,
                   "batch index 3 [3] has a zero on its diagonal at row 2");
  // the same inputs on the CPU give the same messages
  EXPECT_OXM_ERROR(la::logdet(bad), NotPositiveDefinite, "batch index 17 [2, 5]");
  EXPECT_OXM_ERROR(la::solve_triangular(sing, ones({4, 5, 1}), false), InvalidArgument,
                   "batch index 3 [3] has a zero on its diagonal at row 2");
}

// On a GPU, logdet and solve_triangular do not wait for their checks (a read-back per call): the failures are
// kept on the device and read with the device's next read-back, or once kMaxPendingChecks (256) calls are pending.
TEST(FakeDevice, SmallLinearAlgebraChecksDoNotWait) {
  NEED_FAKE_DEVICE();
  Tensor a = dev(spd({8, 6, 6}, 31)), rhs = dev(rand({8, 6, 1}, 32));
  (void)host(la::logdet(a));
  const int64_t reads0 = g_device->device_to_host, calls0 = g_device->linalg_kernel_calls;
  Tensor acc = zeros({8}, DType::F32, kDev);
  for (int i = 0; i < 300; ++i) acc = acc + la::logdet(a) + la::solve_triangular(a, rhs, false).sum({1, 2});
  EXPECT_EQ(g_device->linalg_kernel_calls - calls0, 600);
  EXPECT_EQ(g_device->device_to_host - reads0, 2) << "one read of the failure word per 256 checked calls";
  const int64_t reads1 = g_device->device_to_host;
  (void)host(acc);
  EXPECT_EQ(g_device->device_to_host - reads1, 2) << "the result, then the pending checks' word";
  (void)host(acc);
  EXPECT_EQ(g_device->device_to_host - reads1, 3) << "nothing pending: the result alone";
  // With a gradient the logdet saves its inverse on the device: still no wait.
  Tensor ag = a.detach().requires_grad_();
  const int64_t reads2 = g_device->device_to_host;
  la::logdet(ag).sum().backward();
  EXPECT_EQ(g_device->device_to_host, reads2);
  expect_match(ag.grad(), la::inverse(a.to(Device::cpu())), "logdet gradient", 1e-4, 1e-5);
}

// A device index is range-checked on the device (the IndexCheck kernel) and reported at the next read-back, as the
// small linear algebra is: no read-back per index op. An out-of-range position is clamped meanwhile (no kernel
// reads outside the table), and the error names the op and the first bad position of the earliest failing call.
TEST(FakeDevice, DeviceIndexChecksDoNotWait) {
  NEED_FAKE_DEVICE();
  const Tensor table = rand({5, 3}, 61), tabled = dev(table);
  (void)host(tabled);  // nothing pending from earlier tests
  const int64_t reads0 = g_device->device_to_host;
  const Tensor idx = dev(from_vector<int64_t>({0, 4, 2, 4}, {4}));
  Tensor acc = zeros({4, 3}, DType::F32, kDev);
  for (int i = 0; i < 100; ++i) acc = acc + tabled.index_select(0, idx);
  Tensor gi = dev(from_vector<int64_t>({0, 2, 1, 1, 0, 2}, {2, 3}));
  Tensor gathered = tabled.narrow(0, 0, 2).gather(1, gi);
  Tensor xd = tabled.detach().requires_grad_();
  (xd.index_select(0, idx).sum() + xd.gather(1, dev(from_vector<int64_t>({2, 1, 0, 0, 1}, {5, 1}))).sum()).backward();
  EXPECT_EQ(g_device->device_to_host - reads0, 0) << "no index op read its index back";
  expect_match(acc, table.index_select(0, from_vector<int64_t>({0, 4, 2, 4}, {4})) * 100.0, "index_select", 1e-5, 1e-6);
  EXPECT_EQ(g_device->device_to_host - reads0, 2) << "the result, then the pending checks' word";
  expect_match(gathered, table.narrow(0, 0, 2).gather(1, from_vector<int64_t>({0, 2, 1, 1, 0, 2}, {2, 3})), "gather", 0,
               0);
  // Out of range: no error at the calls; the earliest failing call's first bad position at the next read-back.
  const Tensor bad = dev(from_vector<int64_t>({1, 7, -1}, {3}));
  Tensor rows = tabled.index_select(0, bad);
  Tensor added = tabled.index_add(0, dev(from_vector<int64_t>({0, 9}, {2})), dev(ones({2, 3})));
  EXPECT_OXM_ERROR((void)host(rows), IndexOutOfBounds, "index_select: the index at position 1 is out of range");
  Tensor clamped = host(rows);  // reported once; the clamped rows meanwhile
  expect_close(values(clamped), values(table.index_select(0, from_vector<int64_t>({1, 4, 0}, {3}))), 0, 0,
               "clamped rows");
  (void)host(added);  // its failure was collected with the first one's (one word): not reported again
  // Without the check kernel the index is read back and checked at the call, as before.
  g_device->offer_fused = false;
  EXPECT_OXM_ERROR(tabled.index_select(0, bad), IndexOutOfBounds, "index 7");
  g_device->offer_fused = true;
}

TEST(FakeDevice, IndexOpsTakeCpuOrDeviceIndicesForDeviceData) {
  NEED_FAKE_DEVICE();
  Tensor x = rand({6, 5}, 51).requires_grad_();
  Tensor idx = from_vector<int64_t>({4, 0, 4, 2, 4, 5, 0}, {7});
  Tensor w = rand({7, 5}, 52);
  (x.index_select(0, idx) * w).sum().backward();
  for (const Tensor& i : {idx, dev(idx)}) {  // a CPU index, then a device index
    Tensor xd = dev(x.detach()).requires_grad_();
    Tensor y = xd.index_select(0, i);
    expect_match(y, x.detach().index_select(0, idx), "index_select", 0, 0);
    (y * dev(w)).sum().backward();
    expect_match(xd.grad(), x.grad(), "index_select grad", 1e-6, 1e-7);
    expect_match(dev(x.detach()).index_add(0, i, dev(w)), x.detach().index_add(0, idx, w), "index_add", 1e-6, 1e-7);
  }
  Tensor gi = from_vector<int64_t>({0, 2, 1, 1, 4, 0, 3, 3, 2, 0, 1, 4}, {6, 2});
  expect_match(dev(x.detach()).gather(1, gi), x.detach().gather(1, gi), "gather, cpu index", 0, 0);
  Tensor s2 = rand({6, 2}, 53);
  expect_match(dev(x.detach()).scatter_add(1, gi, dev(s2)), x.detach().scatter_add(1, gi, s2), "scatter_add", 1e-6,
               1e-7);
  EXPECT_OXM_ERROR(x.index_select(0, dev(idx)), DeviceMismatch, "pass the index on the cpu");
  EXPECT_OXM_ERROR(dev(x.detach()).index_select(0, from_vector<int64_t>({6}, {1})), IndexOutOfBounds, "index 6");
  // (class targets on the CPU for device logits: Cuda.ClassTargetsMayStayOnTheCpu, run on this device by
  // the cuda_suite_on_test_device ctest)
}

// `oxmera train --device cuda`: the same run as on the CPU, and a checkpoint written on the device resumes
// bit-identically there.
TEST(FakeDevice, DemoTrainingOnTheDeviceMatchesTheCpuAndResumes) {
  NEED_FAKE_DEVICE();
  oxmera_cli::TrainOptions o;
  o.epochs = 3;
  const auto none = [](int, int64_t, int64_t) {};
  const auto quiet = [](const oxmera_cli::EpochStats&) {};
  const oxmera_cli::EpochStats cpu = oxmera_cli::run_demo_training(o, none, quiet);
  o.device = "cuda";
  const int64_t d0 = g_device->device_to_host;
  const oxmera_cli::EpochStats gpu = oxmera_cli::run_demo_training(o, none, quiet);
  // Two waits per epoch (the epoch's batch losses at once, the accuracy), not one per step.
  EXPECT_EQ(g_device->device_to_host - d0, 2 * o.epochs);
  EXPECT_NEAR(gpu.loss, cpu.loss, 1e-5 * cpu.loss);
  EXPECT_EQ(gpu.accuracy, cpu.accuracy);
  const std::string ckpt = "fake_device_ckpt_" + std::to_string(::getpid()) + ".safetensors";
  o.epochs = 2;
  o.checkpoint = ckpt;
  (void)oxmera_cli::run_demo_training(o, none, quiet);
  o.epochs = 3;
  o.checkpoint.clear();
  o.resume = ckpt;
  const oxmera_cli::EpochStats resumed = oxmera_cli::run_demo_training(o, none, quiet);
  std::remove(ckpt.c_str());
  EXPECT_EQ(resumed.loss, gpu.loss);
  EXPECT_EQ(resumed.accuracy, gpu.accuracy);
}

// `oxmera train --model transformer|lstm --device cuda`: the character LMs' windows, embeddings, causal
// attention / LSTM and clipping on the device follow the CPU run, and a device checkpoint resumes bit-identically.
TEST(FakeDevice, CharLmTrainingOnTheDeviceMatchesTheCpuAndResumes) {
  NEED_FAKE_DEVICE();
  const OneIntraOpThread one_thread;
  for (const char* model : {"transformer", "lstm"}) {
    SCOPED_TRACE(model);
    oxmera_cli::TrainOptions o = small_char_lm(model);
    o.epochs = 3;
    const auto none = [](int, int64_t, int64_t) {};
    const auto quiet = [](const oxmera_cli::EpochStats&) {};
    const oxmera_cli::EpochStats cpu = oxmera_cli::run_demo_training(o, none, quiet);
    o.device = "cuda";
    const oxmera_cli::EpochStats gpu = oxmera_cli::run_demo_training(o, none, quiet);
    EXPECT_NEAR(gpu.loss, cpu.loss, 1e-5 * cpu.loss);
    EXPECT_NEAR(gpu.accuracy, cpu.accuracy, 0.01);
    EXPECT_GT(gpu.tokens_per_s, 0);
    const std::string ckpt = "fake_device_lm_ckpt_" + std::to_string(::getpid()) + ".safetensors";
    o.epochs = 2;
    o.checkpoint = ckpt;
    (void)oxmera_cli::run_demo_training(o, none, quiet);
    o.epochs = 3;
    o.checkpoint.clear();
    o.resume = ckpt;
    const oxmera_cli::EpochStats resumed = oxmera_cli::run_demo_training(o, none, quiet);
    std::remove(ckpt.c_str());
    EXPECT_EQ(resumed.loss, gpu.loss);
    EXPECT_EQ(resumed.accuracy, gpu.accuracy);
  }
}

// `oxmera train --graph --device cuda`: the step captured once and replayed for every full batch follows the eager
// run of every model (mlp: 8 batches of 32 spiral points per epoch; the LMs clip their
// gradient norm on the device inside the graph), with one graph launch per replayed step.
TEST(FakeDevice, TrainingWithACapturedStepFollowsTheEagerRun) {
  NEED_FAKE_DEVICE();
  const OneIntraOpThread one_thread;
  // Both runs without the device's fused kernels: inside a capture this device offers only two of them, and the
  // transformer's fused attention and layer norm round differently from their composites, which Adam's first steps
  // amplify (1.7e-4 relative in the loss after 6 steps); with the same kernels on both sides the runs agree closely.
  const bool fused = g_device->offer_fused;
  g_device->offer_fused = false;
  struct RestoreFused {
    bool was;
    ~RestoreFused() { g_device->offer_fused = was; }
  } restore_fused{fused};
  const auto none = [](int, int64_t, int64_t) {};
  const auto quiet = [](const oxmera_cli::EpochStats&) {};
  // The CNN on 95 synthetic 8x8 "digits" (IDX files as the digits export writes them): 76 training images, batches
  // of 16, 4 full batches per epoch.
  const std::string digits = testing::TempDir() + "oxmera_graph_digits";
  std::filesystem::create_directories(digits);
  save_idx(digits + "/digits-images-idx3-ubyte", randint(0, 17, {95, 8, 8}, 3, DType::U8));
  save_idx(digits + "/digits-labels-idx1-ubyte", randint(0, 10, {95}, 4, DType::U8));
  for (const char* model : {"mlp", "transformer", "lstm", "cnn"}) {
    SCOPED_TRACE(model);
    const std::string name = model;
    oxmera_cli::TrainOptions o = name == "mlp" || name == "cnn" ? oxmera_cli::TrainOptions{} : small_char_lm(model);
    if (name == "cnn") {
      o.model = "cnn";
      o.data = digits;
      o.batch = 16;
    }
    o.device = "cuda";
    o.epochs = 2;
    const oxmera_cli::EpochStats eager = oxmera_cli::run_demo_training(o, none, quiet);
    o.graph = true;
    const int64_t captured = g_device->graphs_captured, replays = g_device->graph_replays;
    const oxmera_cli::EpochStats graphed = oxmera_cli::run_demo_training(o, none, quiet);
    EXPECT_EQ(g_device->graphs_captured - captured, 1);
    const int64_t full_batches = name == "mlp" ? 2 * (256 / 32) : name == "cnn" ? 2 * 4 : 2 * 3;
    EXPECT_EQ(g_device->graph_replays - replays, full_batches - 1) << "every full batch after the first";
    // 1e-4: the captured step clips on the device in f32 and, without the fused kernel, computes Adam's bias
    // corrections in f32 (2e-5 relative here); a replay that did not run is off by far more.
    EXPECT_NEAR(graphed.loss, eager.loss, 1e-4 * eager.loss);
    EXPECT_NEAR(graphed.accuracy, eager.accuracy, 0.02);
  }
  oxmera_cli::TrainOptions cpu;
  cpu.graph = true;
  cpu.epochs = 1;
  EXPECT_THROW((void)oxmera_cli::run_demo_training(cpu, none, quiet), Error);  // --graph needs a GPU
}

// `oxmera bench research --device cuda` takes the device linalg path for its DPP fits (its results against
// the CPU: Cuda.ResearchShortRunMatchesCpuF32, run on this device by cuda_suite_on_test_device).
TEST(FakeDevice, ResearchWorkloadTakesTheDeviceLinalgPath) {
  NEED_FAKE_DEVICE();
  oxmera_cli::ResearchOptions o;
  o.epochs = 1;
  o.replicas = 2;
  o.fit = "linear-lag5";
  o.device = "cuda";  // dtype auto: f32 on a GPU
  const int64_t linalg0 = g_device->linalg_kernel_calls;
  const auto r = oxmera_cli::research_fits(o);
  EXPECT_GT(g_device->linalg_kernel_calls, linalg0) << "the DPP fit did not take the device linalg path";
  ASSERT_EQ(r.size(), 1u);
  EXPECT_TRUE(std::isfinite(r[0].train_loss[0]) && std::isfinite(r[0].metric[1]));
  o.dtype = "f64";
  EXPECT_THROW(oxmera_cli::research_fits(o), std::invalid_argument);
  EXPECT_GT(memory_stats(kDev).system_allocations, 0);
}

// `oxmera bench research --graph`: every fit's full-batch step captured once and replayed (the DPP fits' logdet
// checks and pair indices stay on the device) gives the eager run's losses and metrics; the replays do the work.
TEST(FakeDevice, ResearchWithACapturedStepFollowsTheEagerRun) {
  NEED_FAKE_DEVICE();
  OneIntraOpThread one;
  oxmera_cli::ResearchOptions o;
  o.epochs = 2;
  o.replicas = 2;
  o.seed = 5;
  o.device = "cuda";
  const auto eager = oxmera_cli::research_fits(o);
  o.graph = true;
  const int64_t replays0 = g_device->graph_replays, captured0 = g_device->graphs_captured;
  const auto replayed = oxmera_cli::research_fits(o);
  EXPECT_EQ(g_device->graphs_captured - captured0, 3) << "one graph per fit";
  // 3277 training rows of the MLP (51 full batches of 64 per epoch), 815 training steps of the DPP fits (12 full
  // batches): each fit's first full batch runs eagerly, every later one (the captured one included) is a replay.
  EXPECT_EQ(g_device->graph_replays - replays0, (2 * 51 - 1) + 2 * (2 * 12 - 1));
  ASSERT_EQ(replayed.size(), eager.size());
  for (size_t f = 0; f < eager.size(); ++f)
    for (size_t r = 0; r < 2; ++r) {
      const std::string tag = eager[f].name + " replica " + std::to_string(r);
      EXPECT_NEAR(replayed[f].first_epoch_loss[r], eager[f].first_epoch_loss[r],
                  1e-5 * std::abs(eager[f].first_epoch_loss[r]))
          << tag;
      EXPECT_NEAR(replayed[f].train_loss[r], eager[f].train_loss[r], 1e-5 * std::abs(eager[f].train_loss[r])) << tag;
      EXPECT_NEAR(replayed[f].metric[r], eager[f].metric[r], 1e-5 * std::abs(eager[f].metric[r]) + 1e-6) << tag;
    }
  o.device = "cpu";
  EXPECT_THROW(oxmera_cli::research_fits(o), std::invalid_argument);
}

}  // namespace

// Scalar operands of device tensors travel to the kernel by value: one launch for `x * 2.0`, no fill, no upload.
// A 0-d CPU tensor that does not require grad may join a device tensor the same way (as in torch); anything
// else on the CPU is DeviceMismatch.
TEST(FakeDevice, ScalarOperandsArePassedByValue) {
  NEED_FAKE_DEVICE();
  Tensor x = rand({3, 5}, 81) + 0.5, xd = dev(x);
  const int64_t k0 = g_device->kernel_calls, h0 = g_device->host_to_device;
  Tensor y = xd * 2.0;
  EXPECT_EQ(g_device->kernel_calls - k0, 1);
  EXPECT_EQ(g_device->host_to_device - h0, 0);
  expect_match(y, x * 2.0, "x * 2", 0, 0);
  expect_match(2.0 - xd, 2.0 - x, "2 - x", 0, 0);
  expect_match(2.0 / xd, 2.0 / x, "2 / x", 0, 0);
  expect_match(xd.pow(2.5), x.pow(2.5), "x ^ 2.5", 0, 0);
  expect_match(xd.maximum(scalar(0.9)), x.maximum(scalar(0.9)), "maximum with a cpu 0-d tensor", 0, 0);
  expect_match(xd.clamp(0.7, 1.2), x.clamp(0.7, 1.2), "clamp", 0, 0);
  const int64_t k1 = g_device->kernel_calls;
  expect_match(xd.mean({1}), x.mean({1}), "mean", 1e-7, 0);
  EXPECT_EQ(g_device->kernel_calls - k1, 2);  // the sum and the scaling
  // Gradients through scalar forms match the CPU's.
  for (double e : {0.0, 1.0, 2.5, -1.5}) {
    Tensor xc = x.detach().requires_grad_(), xg = dev(x).requires_grad_();
    ((xc.pow(e) * 3.0 - 1.0) / 2.0).sum().backward();
    ((xg.pow(e) * 3.0 - 1.0) / 2.0).sum().backward();
    expect_match(xg.grad(), xc.grad(), "grad of (x^" + std::to_string(e) + " * 3 - 1) / 2", 1e-6, 1e-6);
  }
  // An i64 scalar a double cannot hold exactly is uploaded instead, not rounded.
  const int64_t big = (int64_t{1} << 60) + 1;
  Tensor iv = from_vector<int64_t>({1, 2, 3}, {3});
  EXPECT_EQ(host(dev(iv) + from_vector<int64_t>({big}, Shape{})).to_vector<int64_t>(),
            (std::vector<int64_t>{big + 1, big + 2, big + 3}));
  // What may not mix.
  EXPECT_OXM_ERROR(xd + scalar(1.0).requires_grad_(), DeviceMismatch, "0-d cpu tensor");
  EXPECT_OXM_ERROR(xd + ones({1}), DeviceMismatch, "add");
  EXPECT_OXM_ERROR(where(xd.gt(scalar(1.0)), xd, scalar(0.0)), DeviceMismatch, "where");
}

// A backend failure while the collected optimizer updates run leaves the optimizer as it was: step counts and
// lazily created state buffers are rolled back, so the next step is the step that failed.
TEST(FakeDevice, FailedOptimizerStepLeavesNoTrace) {
  NEED_FAKE_DEVICE();
  for (int kind = 0; kind < 2; ++kind) {
    auto make = [&](std::vector<Tensor> ps) -> std::unique_ptr<optim::Optimizer> {
      if (kind == 0) return std::make_unique<optim::SGD>(ps, optim::SGDOptions{0.1, 0.9});
      return std::make_unique<optim::Adam>(ps);
    };
    Tensor a = dev(rand({4, 3}, 91)).requires_grad_(), b = dev(rand({5}, 92)).requires_grad_();
    Tensor a2 = dev(rand({4, 3}, 91)).requires_grad_(), b2 = dev(rand({5}, 92)).requires_grad_();
    auto opt = make({a, b}), ref = make({a2, b2});
    auto step = [](optim::Optimizer& o, const Tensor& x, const Tensor& y) {
      o.zero_grad();
      ((x * x).sum() + y.sin().sum()).backward();
      o.step();
    };
    g_device->fail_next_optimizer_steps = true;  // on the first step: no state may be left behind
    EXPECT_OXM_ERROR(step(*opt, a, b), Backend, "failed on request");
    EXPECT_TRUE(opt->state_tensors().empty()) << kind;
    step(*opt, a, b);
    step(*ref, a2, b2);
    const auto before = opt->state_tensors();
    g_device->fail_next_optimizer_steps = true;
    EXPECT_OXM_ERROR(step(*opt, a, b), Backend, "failed on request");
    const auto after = opt->state_tensors();
    ASSERT_EQ(after.size(), before.size()) << kind;
    for (size_t i = 0; i < after.size(); ++i) {
      EXPECT_EQ(after[i].first, before[i].first);
      EXPECT_EQ(values(host(after[i].second)), values(host(before[i].second))) << after[i].first;
    }
    for (int i = 0; i < 3; ++i) {
      step(*opt, a, b);
      step(*ref, a2, b2);
    }
    EXPECT_EQ(values(host(a)), values(host(a2))) << kind;
    EXPECT_EQ(values(host(b)), values(host(b2))) << kind;
  }
}

// One optimizer over parameters on two devices: when the second device's batch fails, the first device's
// updates have happened and keep their step and state; only the failed batch is rolled back.
TEST(FakeDevice, FailedOptimizerStepOnOneOfTwoDevicesKeepsTheOther) {
  NEED_FAKE_DEVICE();
  Tensor c = rand({3}, 95).requires_grad_(), d = dev(rand({4}, 96)).requires_grad_();
  optim::Adam opt({c, d});
  auto step = [&] {
    opt.zero_grad();
    (c.square().sum() + host(d.square().sum())).backward();
    opt.step();
  };
  const std::vector<double> c0 = values(c.detach()), d0 = values(host(d.detach()));
  g_device->fail_next_optimizer_steps = true;
  EXPECT_OXM_ERROR(step(), Backend, "failed on request");
  EXPECT_NE(values(c.detach()), c0);        // the CPU batch ran
  EXPECT_EQ(values(host(d.detach())), d0);  // the device batch did not
  std::map<std::string, int64_t> steps;
  for (const auto& [name, t] : opt.state_tensors())
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".step") == 0) steps[name] = host(t).item<int64_t>();
  EXPECT_EQ(steps, (std::map<std::string, int64_t>{{"group0.param0.step", 1}}));
  step();
  EXPECT_NE(values(host(d.detach())), d0);
}

// A device tensor moved to the CPU keeps its history: the gradient flows back to the device.
TEST(FakeDevice, MovingToTheCpuKeepsTheGradient) {
  NEED_FAKE_DEVICE();
  Tensor x = dev(from_vector<float>({1, -2, 3}, {3})).requires_grad_();
  Tensor y = (x * x).sum().to(Device::cpu());
  EXPECT_TRUE(y.requires_grad());
  y.backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().device(), kDev);
  EXPECT_EQ(values(host(x.grad())), (std::vector<double>{2, -4, 6}));
}

// What one training step of the demo-sized MLP (bench_cuda's train_step) asks of a device: kernel launches
// and transfers. A GPU step of this size is bound by launch latency, so this count is its cost model; it fell
// from 52 kernels, 7 uploads and 2 read-backs to 22, 2 and 1 with the one-pass unary backward, the fused cross
// entropy, the layout-matched weight gradient and one optimizer launch for all parameters; filling the backward
// seed on the device made it 23 kernels and 1 upload, the fused linear layer (its GEMM written over the bias rows)
// 20. Set g_device->trace to see the list.
TEST(FakeDevice, DemoTrainingStepLaunchBudget) {
  NEED_FAKE_DEVICE();
  Generator gen(1);
  nn::Sequential model{std::make_shared<nn::Linear>(2, 32, true, gen), std::make_shared<nn::Tanh>(),
                       std::make_shared<nn::Linear>(32, 32, true, gen), std::make_shared<nn::Tanh>(),
                       std::make_shared<nn::Linear>(32, 2, true, gen)};
  model.to(kDev);
  Tensor x = dev(randn({32, 2}, 3)), y = from_vector<int64_t>(std::vector<int64_t>(32, 1), {32});
  optim::Adam adam(model.parameters());
  auto step = [&] {
    Tensor l = nn::cross_entropy(model(x), y);
    adam.zero_grad();
    l.backward();
    adam.step();
    return l.item<float>();
  };
  const float first = step();
  const int64_t k0 = g_device->kernel_calls, h0 = g_device->host_to_device, d0 = g_device->device_to_host;
  const float second = step();
  EXPECT_LT(second, first);
  // forward 5 (3 linear, 2 tanh), loss 2, backward 12 (the seed's fill, loss 1, 3 bias sums, 5 GEMM, 2 tanh),
  // Adam 1
  EXPECT_EQ(g_device->kernel_calls - k0, 20);
  EXPECT_EQ(g_device->host_to_device - h0, 1);  // the class targets (the backward seed is filled on the device)
  EXPECT_EQ(g_device->device_to_host - d0, 1);  // loss.item()
}

// The launches the CUDA backend's nn kernels save: one forward + backward of a transformer encoder layer (norm
// first, GELU, causal), a 2-layer LSTM over 8 steps and a conv + max-pool block, counted on the test device with
// the nn kernels and without them (their composites; the other fused ops offered in both). Printed for the record.
TEST(FakeDevice, NnKernelsCutTheLaunchesOfALayerStep) {
  NEED_FAKE_DEVICE();
  auto count = [&](const std::function<Tensor()>& step) {
    step();  // warm: lazily built state (causal masks, parameter layouts)
    const int64_t k0 = g_device->kernel_calls;
    step();
    return g_device->kernel_calls - k0;
  };
  Generator gen(5);
  nn::TransformerEncoderLayer layer(
      32, 4, {.dim_feedforward = 64, .dropout = 0, .activation = "gelu", .batch_first = true, .norm_first = true}, gen);
  layer.to(kDev);
  Tensor src = dev(randn({4, 16, 32}, 6));
  nn::RNNOptions ro;
  ro.num_layers = 2;
  nn::LSTM lstm(16, 32, ro, gen);
  lstm.to(kDev);
  Tensor seq = dev(randn({8, 4, 16}, 7));
  Tensor img = dev(randn({4, 3, 12, 12}, 8)), w = dev(randn({8, 3, 3, 3}, 9)).requires_grad_();
  const std::vector<std::pair<std::string, std::function<Tensor()>>> steps = {
      {"transformer layer",
       [&] {
         Tensor l = layer.forward(src, {}, {}, true).square().mean();
         l.backward();
         return l;
       }},
      {"lstm",
       [&] {
         Tensor l = std::get<0>(lstm.forward(seq)).square().mean();
         l.backward();
         return l;
       }},
      {"conv + max_pool", [&] {
         Tensor l =
             nn::functional::max_pool2d(nn::functional::conv2d(img, w, {}, {1, 1}, {1, 1}), {2, 2}).square().mean();
         l.backward();
         return l;
       }}};
  for (const auto& [what, step] : steps) {
    g_device->trace = std::getenv("OXMERA_TRACE") != nullptr;
    const int64_t with = count(step);
    g_device->trace = false;
    g_device->offer_nn = false;
    const int64_t without = count(step);
    g_device->offer_nn = true;
    std::printf("  %s: %lld kernels with the nn kernels, %lld with their composites\n", what.c_str(),
                static_cast<long long>(with), static_cast<long long>(without));
    EXPECT_LT(with, without) << what;
  }
}

// clip_grad_norm_ with every grad on the device reads the joint norm back once (not once per parameter), and gives
// the CPU's norm and clipped grads, for each norm type and with clipping off (max_norm above the norm): with the list
// kernels (TensorListNorm / TensorListScale: three launches in all for six grads) and with the per-grad ops.
TEST(FakeDevice, ClipGradNormReadsTheNormOnce) {
  NEED_FAKE_DEVICE();
  for (bool list_kernels : {true, false})
    for (double norm_type : {2.0, 1.0, 3.0, std::numeric_limits<double>::infinity()})
      for (double max_norm : {0.5, 1e6}) {
        g_device->offer_fused = list_kernels;
        std::vector<Tensor> cpu_params, dev_params;
        for (int i = 0; i < 6; ++i) {
          Tensor g = randn({3 + i, 4}, 40 + i);
          Tensor p = zeros({3 + i, 4}), pd = dev(p);
          p.set_grad(g.clone());
          pd.set_grad(dev(g));
          cpu_params.push_back(p);
          dev_params.push_back(pd);
        }
        (void)host(dev(zeros({1})));  // runs the checks earlier tests left pending (their word's read-back)
        const double want = optim::clip_grad_norm_(cpu_params, max_norm, norm_type);
        const int64_t d0 = g_device->device_to_host, k0 = g_device->kernel_calls;
        const double got = optim::clip_grad_norm_(dev_params, max_norm, norm_type);
        const std::string what = "norm_type " + std::to_string(norm_type) + " max_norm " + std::to_string(max_norm) +
                                 (list_kernels ? " (list kernels)" : " (per-grad ops)");
        EXPECT_EQ(g_device->device_to_host - d0, 1) << what;
        if (list_kernels) {
          EXPECT_LE(g_device->kernel_calls - k0, 3) << what;
        }
        EXPECT_NEAR(got, want, 1e-6 * want) << what;
        for (size_t i = 0; i < cpu_params.size(); ++i)
          expect_close(values(host(dev_params[i].grad())), values(cpu_params[i].grad()), 1e-6, 1e-7,
                       what + ": grad " + std::to_string(i));
      }
  g_device->offer_fused = true;
}

// A GPT-style step as a user writes it — token and position embeddings (device tokens), a 2-layer causal
// TransformerEncoder, a head, cross entropy, backward, clip_grad_norm_, AdamW — counted on the test device after a
// warm-up step: two small reads (the clipped norm and, after it, the deferred index checks' word: the token and
// target checks), the two layers' causal masks as the only uploads, and a launch count that fails this test if it
// grows (each fused op is one launch here).
TEST(FakeDevice, TransformerLmStepLaunchBudget) {
  NEED_FAKE_DEVICE();
  Generator gen(9);
  const int64_t V = 40, D = 32, T = 16, B = 4;
  nn::Embedding tok(V, D, gen), pos(T, D, gen);
  nn::TransformerEncoder enc(
      nn::TransformerEncoderLayer(
          D, 4, {.dim_feedforward = 64, .dropout = 0, .activation = "gelu", .batch_first = true, .norm_first = true},
          gen),
      2, nullptr, gen);
  nn::Linear head(D, V, true, gen);
  tok.to(kDev);
  pos.to(kDev);
  enc.to(kDev);
  head.to(kDev);
  std::vector<Tensor> params;
  for (nn::Module* m : std::initializer_list<nn::Module*>{&tok, &pos, &enc, &head})
    for (const Tensor& p : m->parameters()) params.push_back(p);
  optim::AdamW opt(params, {.lr = 1e-3});
  const Tensor tokens = dev(randint(0, V, {B, T}, 10)), targets = dev(randint(0, V, {B * T}, 11));
  const Tensor positions = dev(arange(T, DType::I64));
  auto step = [&] {
    Tensor x = tok.forward(tokens) + pos.forward(positions);
    Tensor logits = head.forward(enc.forward(x, {}, {}, true));
    Tensor loss = nn::cross_entropy(logits.reshape({B * T, V}), targets);
    opt.zero_grad();
    loss.backward();
    optim::clip_grad_norm_(params, 1.0);
    opt.step();
    return loss;
  };
  (void)host(step());
  const int64_t k0 = g_device->kernel_calls, h0 = g_device->host_to_device, d0 = g_device->device_to_host;
  g_device->trace = std::getenv("OXMERA_TRACE") != nullptr;
  (void)step();
  g_device->trace = false;
  const int64_t kernels = g_device->kernel_calls - k0;
  std::printf("  transformer LM step: %lld kernels, %lld uploads, %lld reads\n", static_cast<long long>(kernels),
              static_cast<long long>(g_device->host_to_device - h0),
              static_cast<long long>(g_device->device_to_host - d0));
  EXPECT_EQ(g_device->device_to_host - d0, 2) << "the clipped norm, then the pending index checks' word";
  EXPECT_EQ(g_device->host_to_device - h0, 2) << "the two layers' causal masks";
  // embeddings 5 (2 of them index checks), 2 layers x 16 forward, head and loss 9 (the targets' count set, their
  // check, the empty-mean check, cross entropy, the count's + 1 and cast, sum, division), backward 73, clip 3, AdamW 1
  EXPECT_LE(kernels, 123) << "a step asks for more launches than it did";
}

// Cross entropy with class targets on the device: checked and counted there (no read-back at the call), the same
// loss and gradient as on the CPU for every reduction, ignored rows and label smoothing; an out-of-range target is
// reported at the next read-back, and so is a mean over only ignored targets (EmptyReduction; the loss is NaN).
TEST(FakeDevice, CrossEntropyChecksDeviceTargetsWithoutAWait) {
  NEED_FAKE_DEVICE();
  const Tensor logits = randn({6, 5}, 81), target = from_vector<int64_t>({0, 4, -100, 2, 2, 1}, {6});
  for (nn::Reduction red : {nn::Reduction::Mean, nn::Reduction::Sum, nn::Reduction::None})
    for (double ls : {0.0, 0.2}) {
      const std::string what =
          "reduction " + std::to_string(static_cast<int>(red)) + " smoothing " + std::to_string(ls);
      Tensor x = logits.clone().requires_grad_(), xd = dev(logits).requires_grad_();
      const Tensor td = dev(target);
      (void)host(xd);  // nothing pending
      const int64_t reads0 = g_device->device_to_host, up0 = g_device->host_to_device;
      nn::CrossEntropyOptions o;
      o.label_smoothing = ls;
      o.reduction = red;
      Tensor l = nn::cross_entropy(x, target, o), ld = nn::cross_entropy(xd, td, o);
      Tensor w = red == nn::Reduction::None ? randn({6}, 82) : ones({});
      (l * w).sum().backward();
      (ld * dev(w)).sum().backward();
      EXPECT_EQ(g_device->device_to_host - reads0, 0) << what << ": no read-back of the targets";
      EXPECT_EQ(g_device->host_to_device - up0, 1) << what << ": the weights w alone";
      expect_match(ld, l, what + ": loss", 1e-6, 1e-6);
      expect_match(xd.grad(), x.grad(), what + ": gradient", 1e-6, 1e-7);
    }
  const Tensor bad = dev(from_vector<int64_t>({0, 5, 1, -2, 3, 3}, {6}));
  Tensor l = nn::cross_entropy(dev(logits), bad);
  EXPECT_OXM_ERROR((void)host(l), IndexOutOfBounds, "cross_entropy: the target at flat position 1");
  const Tensor ignored = dev(full({6}, -100.0, DType::I64));
  Tensor empty_mean = nn::cross_entropy(dev(logits), ignored);
  EXPECT_OXM_ERROR((void)host(empty_mean), EmptyReduction, "zero targets");
  EXPECT_TRUE(std::isnan(host(empty_mean).item<float>())) << "0 / 0 meanwhile";
  nn::CrossEntropyOptions sum;
  sum.reduction = nn::Reduction::Sum;
  EXPECT_EQ(host(nn::cross_entropy(dev(logits), ignored, sum)).item<float>(), 0.0f) << "a sum over nothing";
  EXPECT_OXM_ERROR(nn::cross_entropy(logits, host(ignored)), EmptyReduction, "zero targets");  // the host's check
}

// A backward builds its zeros, ones and identities on the device (a fill kernel), never as a host buffer uploaded:
// index_select, gather and view backwards (which also keep the index's device copy rather than uploading it
// again), unfold (conv) backward, attention, the loss seed. (tril/triu still upload their [rows, cols] mask: one
// small transfer, so a causal mask is not exercised here.)
TEST(FakeDevice, BackwardMakesNoHostToDeviceCopies) {
  NEED_FAKE_DEVICE();
  Tensor x = dev(rand({4, 6}, 91)).requires_grad_();
  Tensor idx = dev(from_vector<int64_t>({0, 2, 2, 3}, {4}));
  Tensor gidx = dev(from_vector<int64_t>({5, 0, 1, 1, 2, 4, 3, 3}, {4, 2}));
  Tensor img = dev(rand({2, 3, 5, 5}, 92)).requires_grad_(), w = dev(rand({4, 3, 3, 3}, 93)).requires_grad_();
  Tensor q = dev(rand({2, 5, 8}, 94)).requires_grad_();
  const int64_t h0 = g_device->host_to_device, k0 = g_device->kernel_calls;
  g_device->trace = std::getenv("OXMERA_TRACE") != nullptr;
  Tensor y = x.index_select(0, idx).sum() + x.slice(1, 1, 4).sum() + x.select(0, 1).sum() + x.diagonal().sum() +
             x.gather(1, gidx).sum() + nn::functional::conv2d(img, w, {}, {1, 1}, {1, 1}).sum() +
             nn::functional::scaled_dot_product_attention(q, q, q).sum();
  y.backward();
  g_device->trace = false;
  EXPECT_EQ(g_device->host_to_device - h0, 0);
  EXPECT_GT(g_device->kernel_calls - k0, 10);
  // the results are those of the CPU
  Tensor xc = host(x.detach()).requires_grad_(), imgc = host(img.detach()).requires_grad_();
  Tensor wc = host(w.detach()).requires_grad_(), qc = host(q.detach()).requires_grad_();
  Tensor yc = xc.index_select(0, host(idx)).sum() + xc.slice(1, 1, 4).sum() + xc.select(0, 1).sum() +
              xc.diagonal().sum() + xc.gather(1, host(gidx)).sum() +
              nn::functional::conv2d(imgc, wc, {}, {1, 1}, {1, 1}).sum() +
              nn::functional::scaled_dot_product_attention(qc, qc, qc).sum();
  yc.backward();
  expect_match(x.grad(), xc.grad(), "x.grad", 1e-6, 1e-6);
  expect_match(w.grad(), wc.grad(), "w.grad", 1e-5, 1e-5);
  expect_match(q.grad(), qc.grad(), "q.grad", 1e-5, 1e-5);
  // factories on a device: filled there, no upload
  const int64_t h1 = g_device->host_to_device;
  Tensor e = eye(3, DType::F32, kDev), z = zeros({2, 2}, DType::I64, kDev), f = full({2}, 2.5, DType::F32, kDev);
  EXPECT_EQ(g_device->host_to_device - h1, 0);
  expect_match(e, eye(3), "eye on the device", 0, 0);
  expect_match(z, zeros({2, 2}, DType::I64), "zeros on the device", 0, 0);
  expect_match(f, full({2}, 2.5), "full on the device", 0, 0);
  EXPECT_EQ(ones({0, 3}, DType::F32, kDev).numel(), 0);
  EXPECT_THROW(full({2}, -1.0, DType::U8, kDev), Error);
}

// Indexing, index_put_, scalar comparisons / where and sampling keep device data on the device and agree
// with the CPU.
TEST(FakeDevice, IndexingAndSamplingOnTheDeviceMatchTheCpu) {
  NEED_FAKE_DEVICE();
  using namespace oxmera::indexing;
  Tensor x = rand({3, 4, 5}, 3) * 2.0 - 1.0;
  Tensor xd = dev(x);
  Tensor i = from_vector<int64_t>({2, -1, 0}, {3});
  expect_match(xd.index({Slice(), dev(i), Slice(1, None, 2)}), x.index({Slice(), i, Slice(1, None, 2)}),
               "advanced index", 0, 0);
  expect_match(xd.index({xd > 0.0}), x.index({x > 0.0}), "mask index", 0, 0);
  expect_match(where(xd > 0.0, xd, 0.0), where(x > 0.0, x, 0.0), "where with a scalar", 0, 0);
  Tensor yd = dev(zeros({3, 4, 5})), y = zeros({3, 4, 5});
  yd.index_put_({dev(i), 1}, 2.0);
  y.index_put_({i, 1}, 2.0);
  yd.index_put_({yd == 0.0}, -1.0);
  y.index_put_({y == 0.0}, -1.0);
  expect_match(yd, y, "index_put_", 0, 0);
  yd.mul_(dev(from_vector<float>({1, 2, 3, 4, 5}, {5}))).sub_(1.0);
  y.mul_(from_vector<float>({1, 2, 3, 4, 5}, {5})).sub_(1.0);
  expect_match(yd, y, "in-place with a tensor", 0, 0);
  Tensor p = from_vector<float>({0.2f, 0.8f, 0, 1}, {2, 2});
  Tensor md = multinomial(dev(p), 1, false, 4), bd = bernoulli(dev(p), 4);
  expect_match(md, multinomial(p, 1, false, 4), "multinomial", 0, 0);
  expect_match(bd, bernoulli(p, 4), "bernoulli", 0, 0);
}

// ---- pinned host memory and non_blocking copies. The test device pins with malloc (counted) and queues a copy
// from pinned memory until its next operation, as a stream would, so these tests see the ordering too.

// pin_memory gives a pinned, contiguous CPU copy with the same values (self when already pinned), differentiable;
// every pinned block goes back to the device's pinned allocator.
TEST(FakeDevice, PinMemoryGivesAPinnedCopyWithTheSameValues) {
  NEED_FAKE_DEVICE();
  ASSERT_TRUE(pinned_memory_available());
  const int64_t a0 = g_device->pinned_allocations, f0 = g_device->pinned_frees, b0 = g_device->pinned_bytes;
  {
    Tensor x = randn({5, 7}, 21);
    Tensor p = x.pin_memory();
    EXPECT_TRUE(p.is_pinned());
    EXPECT_FALSE(x.is_pinned());
    EXPECT_EQ(p.device(), Device::cpu());
    EXPECT_TRUE(p.is_contiguous());
    EXPECT_FALSE(p.shares_storage(x));
    EXPECT_EQ(values(p), values(x));
    EXPECT_TRUE(p.pin_memory().is_same(p));
    EXPECT_TRUE(p.narrow(0, 1, 2).is_pinned());  // a view of pinned storage is pinned (torch: the data pointer)
    EXPECT_EQ(g_device->pinned_allocations - a0, 1);
    EXPECT_EQ(g_device->pinned_bytes - b0, 5 * 7 * 4);
    // A strided source: the pinned copy is contiguous, in logical order; other dtypes too.
    Tensor pt = x.t().pin_memory();
    EXPECT_TRUE(pt.is_contiguous());
    EXPECT_EQ(pt.shape(), (Shape{7, 5}));
    EXPECT_EQ(values(pt), values(x.t().contiguous()));
    const Tensor i = arange(9, DType::I64);
    EXPECT_EQ(i.pin_memory().to_vector<int64_t>(), i.to_vector<int64_t>());
    EXPECT_TRUE(empty({0, 3}, DType::F32).pin_memory().is_pinned());
    // CPU ops read pinned tensors as any other.
    EXPECT_EQ(values(p * 2.0), values(x * 2.0));
    // Differentiable: the gradient is the identity.
    Tensor w = randn({3}, 4).requires_grad_();
    (w.pin_memory() * 3.0).sum().backward();
    ASSERT_TRUE(w.grad().defined());
    EXPECT_EQ(values(w.grad()), (std::vector<double>{3, 3, 3}));
    // Only CPU tensors can be pinned.
    EXPECT_OXM_ERROR(dev(x).pin_memory(), DeviceMismatch, "pin_memory");
    EXPECT_FALSE(dev(x).is_pinned());
  }
  EXPECT_EQ(g_device->pinned_allocations - a0, g_device->pinned_frees - f0) << "every pinned block is freed";
  EXPECT_EQ(g_device->pinned_bytes.load(), b0);
}

// to(device, non_blocking) from pinned memory queues the copy (the asynchronous path); the next operation on the
// device sees the data; freeing the pinned source before the copy ran is safe (the queue runs first). From
// pageable memory, or without non_blocking, the copy is the ordinary synchronous one.
TEST(FakeDevice, NonBlockingCopyFromPinnedMemoryIsAsynchronousAndOrdered) {
  NEED_FAKE_DEVICE();
  const Tensor x = randn({64, 3}, 5);
  const int64_t async0 = g_device->async_host_to_device, sync0 = g_device->host_to_device;
  Tensor p = x.pin_memory();
  Tensor y = p.to(kDev, true);
  EXPECT_EQ(y.device(), kDev);
  EXPECT_EQ(g_device->async_host_to_device - async0, 1);
  EXPECT_EQ(g_device->host_to_device - sync0, 0);
  EXPECT_EQ(g_device->queued_copies(), 1u) << "the copy is only enqueued";
  Tensor z = y * 2.0;  // a kernel after the copy on the stream
  EXPECT_EQ(g_device->queued_copies(), 0u);
  EXPECT_EQ(values(host(z)), values(x * 2.0));

  // The source dies while its copy is still queued: its block is not freed before the copy ran.
  const int64_t waited0 = g_device->pinned_frees_after_queued_copy;
  Tensor y2;
  {
    Tensor p2 = (x + 1.0).pin_memory();
    y2 = p2.to(kDev, true);
  }
  EXPECT_EQ(g_device->pinned_frees_after_queued_copy - waited0, 1);
  EXPECT_EQ(values(host(y2)), values(x + 1.0));

  // Pageable source with non_blocking, and pinned without it: synchronous copies.
  const int64_t async1 = g_device->async_host_to_device, sync1 = g_device->host_to_device;
  EXPECT_EQ(values(host(x.to(kDev, true))), values(x));
  EXPECT_EQ(values(host(p.to(kDev))), values(x));
  EXPECT_EQ(g_device->async_host_to_device - async1, 0);
  EXPECT_EQ(g_device->host_to_device - sync1, 2);
  // synchronize() waits for the queue.
  Tensor y3 = p.to(kDev, true);
  EXPECT_EQ(g_device->queued_copies(), 1u);
  g_device->synchronize();
  EXPECT_EQ(g_device->queued_copies(), 0u);
  EXPECT_EQ(values(host(y3)), values(x));
}

// The DataLoader with pin_memory and a device: the workers pin each batch and the move is the asynchronous
// copy; the batches equal the unpinned loader's for 0 and 2 workers; every pinned block is freed. A device
// that cannot pin leaves the loader unpinned.
TEST(FakeDevice, DataLoaderPinsBatchesAndCopiesThemAsynchronously) {
  NEED_FAKE_DEVICE();
  namespace data = oxmera::data;
  const Tensor images = randn({37, 1, 4, 4}, 8);
  const Tensor labels = arange(37, DType::I64);
  auto ds = data::tensor_dataset({images, labels});
  const int64_t a0 = g_device->pinned_allocations, f0 = g_device->pinned_frees, b0 = g_device->pinned_bytes;
  for (int workers : {0, 2}) {
    data::DataLoaderOptions opt{.batch_size = 8, .shuffle = true, .seed = 9, .num_workers = workers};
    opt.device = kDev;
    data::DataLoader plain(ds, opt);
    opt.pin_memory = true;
    data::DataLoader pinned(ds, opt);
    EXPECT_TRUE(pinned.pins_memory());
    EXPECT_FALSE(plain.pins_memory());
    std::vector<std::vector<double>> want, got;
    for (auto& b : plain) {
      ASSERT_EQ(b[0].device(), kDev);
      want.push_back(values(host(b[0])));
      want.push_back(values(host(b[1])));
    }
    const int64_t async0 = g_device->async_host_to_device;
    for (auto& b : pinned) {
      ASSERT_EQ(b.size(), 2u);
      ASSERT_EQ(b[0].device(), kDev);
      EXPECT_EQ(b[1].dtype(), DType::I64);
      got.push_back(values(host(b[0])));
      got.push_back(values(host(b[1])));
    }
    EXPECT_EQ(got, want) << workers << " workers";
    EXPECT_EQ(g_device->async_host_to_device - async0, 2 * pinned.size()) << "both fields of every batch";
    // Without a device the batches are pinned CPU tensors.
    opt.device.reset();
    data::DataLoader host_only(ds, opt);
    for (auto& b : host_only) {
      EXPECT_TRUE(b[0].is_pinned());
      EXPECT_TRUE(b[1].is_pinned());
    }
  }
  EXPECT_GT(g_device->pinned_allocations - a0, 0);
  EXPECT_EQ(g_device->pinned_allocations - a0, g_device->pinned_frees - f0) << "every pinned batch is freed";
  EXPECT_EQ(g_device->pinned_bytes.load(), b0);

  g_device->offer_pinned = false;
  data::DataLoaderOptions opt{.batch_size = 8, .num_workers = 2, .pin_memory = true};
  opt.device = kDev;
  const bool can_pin = pinned_memory_available();
  data::DataLoader loader(ds, opt);
  const bool pins = loader.pins_memory();
  const int64_t async1 = g_device->async_host_to_device;
  int64_t n = 0;
  for (auto& b : loader) n += b[0].size(0);
  g_device->offer_pinned = true;
  EXPECT_FALSE(can_pin);
  EXPECT_FALSE(pins);
  EXPECT_EQ(n, 37);
  EXPECT_EQ(g_device->async_host_to_device - async1, 0);
}

// A capture records and runs nothing, as a GPU's does: the kernels run at each replay, a replay makes no
// host-device transfer, and the capture's pool keeps its blocks until the graph is reset.
TEST(FakeDevice, GraphCaptureRecordsAndReplayRunsTheKernels) {
  NEED_FAKE_DEVICE();
  Tensor x = dev(from_vector<float>({1, 2, 3}, {3}));
  cuda::Graph g;
  Tensor y;
  const size_t pool_before = g_device->pool_blocks();
  int64_t kernels_before = 0;
  {
    cuda::GraphCapture capture(g);  // (fills the graph's index-error count first, eagerly)
    kernels_before = g_device->kernel_calls.load();
    y = (x * 2.0).exp() + 1.0;
  }
  EXPECT_EQ(g_device->kernel_calls.load(), kernels_before) << "nothing ran during the capture";
  EXPECT_GT(g_device->pool_blocks(), pool_before) << "the capture allocated from its pool";
  const int64_t h2d = g_device->host_to_device.load(), d2h = g_device->device_to_host.load();
  g.replay();
  EXPECT_EQ(g_device->kernel_calls.load(), kernels_before + 3) << "mul, exp, add";
  EXPECT_EQ(g_device->host_to_device.load(), h2d);
  EXPECT_EQ(g_device->device_to_host.load(), d2h);
  expect_match(y, (from_vector<float>({1, 2, 3}, {3}) * 2.0).exp() + 1.0, "first replay", 1e-6, 0);
  x.fill_(0.5);
  g.replay();
  expect_match(y, full({3}, std::exp(1.0) + 1.0), "replay after new input", 1e-6, 0);
  g.reset();
  EXPECT_EQ(g_device->pool_blocks(), pool_before) << "reset gives the pool back";
  expect_match(y, full({3}, std::exp(1.0) + 1.0), "a captured tensor outlives its graph", 1e-6, 0);
  g_device->offer_graphs = false;
  std::string what;
  try {
    g.capture_begin();
  } catch (const Error& e) {
    what = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::NotImplemented);
  }
  g_device->offer_graphs = true;
  EXPECT_NE(what.find("cannot capture"), std::string::npos) << what;
}

// While one thread captures, another thread's CPU work keeps its ordinary checks: cross_entropy still throws on an
// out-of-range class target there (inside the capture it would give NaN), and clip_grad_norm_ returns the norm.
TEST(FakeDevice, ACaptureOnOneThreadLeavesOtherThreadsCpuWorkAlone) {
  NEED_FAKE_DEVICE();
  Tensor x = dev(from_vector<float>({1, 2, 3}, {3}));
  cuda::Graph g;
  std::string cpu_error;
  double norm = 0;
  {
    cuda::GraphCapture capture(g);
    (void)(x * 2.0);
    std::thread other([&] {
      EXPECT_FALSE(cuda::is_capturing());
      try {
        (void)nn::cross_entropy(from_vector<float>({0.1f, 0.2f}, {1, 2}), from_vector<int64_t>({5}, {1}));
      } catch (const Error& e) {
        cpu_error = e.what();
      }
      Tensor p = from_vector<float>({3, 4}, {2}).requires_grad_();
      (p * p).sum().backward();
      norm = optim::clip_grad_norm_({p}, 1.0);
    });
    other.join();
  }
  EXPECT_NE(cpu_error.find("out of range"), std::string::npos) << cpu_error;
  EXPECT_NEAR(norm, 10.0, 1e-6);
}
