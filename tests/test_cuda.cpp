// The CUDA backend against the CPU backend: the conformance suite over every op of the registry (an
// instantiation of tests/conformance.cpp), every one-pass backward kernel called directly (host-scalar operands),
// reductions, softmax, arg-reductions, index ops, where, matmul (strided and pointer-array batches), conv
// (im2col/col2im), autograd end to end (second derivatives too), optimizers, logdet on the device, the allocator
// (reuse, OOM), an 8-thread stress, the demo training and a short research-workload run. Without a usable GPU every
// test reports itself skipped with the reason.
#include <atomic>
#include <chrono>
#include <optional>
#include <thread>

#include "conformance.hpp"
#include "distributed/nccl.hpp"
#include "ops/device_stream.hpp"
#include "ops/op_defs.hpp"
#include "ops/ops_internal.hpp"
#include "research.hpp"
#include "tensor/tensor_impl.hpp"
#include "test_util.hpp"

using namespace oxt;

namespace {

const Device kGpu = Device::cuda();

#define NEED_GPU()                                      \
  do {                                                  \
    init();                                             \
    if (!device_available(kGpu)) {                      \
      std::string why;                                  \
      try {                                             \
        (void)empty({1}, DType::F32, kGpu);             \
      } catch (const Error& e) {                        \
        why = e.what();                                 \
      }                                                 \
      GTEST_SKIP() << "no usable CUDA device: " << why; \
    }                                                   \
  } while (0)

Tensor uni(const Shape& s, double lo, double hi, uint64_t seed) { return rand(s, seed) * (hi - lo) + lo; }
Tensor gpu(const Tensor& t) { return t.to(kGpu); }
Tensor host(const Tensor& t) { return t.to(Device::cpu()); }

// The kind of the error `f` throws (nothing when it throws none), with its text in `what`.
template <class F>
std::optional<ErrorKind> error_kind(F&& f, std::string* what = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (what) *what = e.what();
    return e.kind();
  }
  return std::nullopt;
}

// Elementwise: 1e-5 relative (plus a tiny absolute floor for values near 0).
void expect_match(const Tensor& got_gpu, const Tensor& want_cpu, const std::string& what, double rtol = 1e-5,
                  double atol = 1e-6) {
  ASSERT_EQ(got_gpu.device(), kGpu) << what;
  ASSERT_EQ(got_gpu.shape(), want_cpu.shape()) << what;
  ASSERT_EQ(got_gpu.dtype(), want_cpu.dtype()) << what;
  expect_close(values(host(got_gpu)), values(want_cpu), rtol, atol, what);
}

// The registry's test domain of a unary op.
struct Domain {
  double lo, hi;
};
Domain domain_of(ops::UnaryOp op) { return {ops::info(op).lo[0], ops::info(op).hi[0]}; }

}  // namespace

// Every op of the registry — random, broadcast, non-contiguous, stride-0, host-scalar and empty inputs, forward
// and gradients — runs here through the conformance suite (tests/conformance.cpp) on this target.
oxc::Target oxc::conformance_target() {
  init();
  oxc::Target t{kGpu, {DType::F32}, true, ""};
  if (!device_available(kGpu)) t.skip_reason = "no usable CUDA device: " + device_description(kGpu);
  return t;
}

// The one-pass backward kernel of every differentiable unary op (defs::*::grad) against the CPU's, with a
// non-contiguous and a broadcast gradient.
TEST(Cuda, UnaryGradKernelsMatchCpu) {
  NEED_GPU();
  int checked = 0;
#define OXM_X(id, ...)                                                                                                \
  if (ops::defs::id::diff) {                                                                                          \
    const Domain dom = domain_of(ops::UnaryOp::id);                                                                   \
    const std::string name = std::string(ops::defs::id::name) + " grad";                                              \
    Tensor x = uni({5, 7}, dom.lo, dom.hi, 31), y = ops::unary(ops::UnaryOp::id, x);                                  \
    Tensor g = uni({7, 5}, -2, 2, 32).t(), gb = uni({1, 7}, -2, 2, 33).broadcast_to({5, 7});                          \
    const ops::OpParams prm = ops::default_params(ops::UnaryOp::id);                                                  \
    expect_match(ops::unary_grad(ops::UnaryOp::id, gpu(g.contiguous()), gpu(x), gpu(y), prm),                         \
                 ops::unary_grad(ops::UnaryOp::id, g, x, y, prm), name);                                              \
    expect_match(ops::unary_grad(ops::UnaryOp::id, gpu(g.t().contiguous()).t(), gpu(x), gpu(y), prm),                 \
                 ops::unary_grad(ops::UnaryOp::id, g, x, y, prm), name + " (transposed g)");                          \
    expect_match(ops::unary_grad(ops::UnaryOp::id, gpu(gb.slice(0, 0, 1)).broadcast_to({5, 7}), gpu(x), gpu(y), prm), \
                 ops::unary_grad(ops::UnaryOp::id, gb, x, y, prm), name + " (broadcast g)");                          \
    ++checked;                                                                                                        \
  }
  OXMERA_UNARY_OPS(OXM_X)
#undef OXM_X
  int differentiable = 0;
  for (const ops::OpInfo& e : ops::unary_ops()) differentiable += e.differentiable;
  EXPECT_EQ(checked, differentiable);
}

// The one-pass gradient kernels of every differentiable binary op (defs::*::grad_a / grad_b), both sides, with
// broadcast operands, a transposed g, and a host scalar (0-d CPU tensor) as either operand.
TEST(Cuda, BinaryGradKernelsMatchCpu) {
  NEED_GPU();
  int checked = 0;
#define OXM_X(id, ...)                                                                                          \
  if (ops::defs::id::diff) {                                                                                    \
    const bool pw = ops::BinaryOp::id == ops::BinaryOp::Pow;                                                    \
    Tensor a = uni({5, 7}, pw ? 0.2 : -2, 2, 51), b = uni({1, 7}, pw ? -1.5 : 0.5, 2, 52);                      \
    Tensor g = uni({7, 5}, -2, 2, 53).t();                                                                      \
    Tensor sa = scalar(pw ? 1.3 : -0.75), sb = scalar(pw ? 2.5 : 1.25);                                         \
    for (int side : {0, 1}) {                                                                                   \
      const std::string name = std::string(ops::defs::id::name) + " grad side " + std::to_string(side);         \
      Tensor gg = gpu(g.t().contiguous()).t();                                                                  \
      expect_match(ops::binary_grad(ops::BinaryOp::id, side, gg, gpu(a), gpu(b)),                               \
                   ops::binary_grad(ops::BinaryOp::id, side, g, a, b), name);                                   \
      expect_match(ops::binary_grad(ops::BinaryOp::id, side, gg, sa, gpu(b.broadcast_to({5, 7}).contiguous())), \
                   ops::binary_grad(ops::BinaryOp::id, side, g, sa, b.broadcast_to({5, 7})), name + " host a"); \
      expect_match(ops::binary_grad(ops::BinaryOp::id, side, gg, gpu(a), sb),                                   \
                   ops::binary_grad(ops::BinaryOp::id, side, g, a, sb), name + " host b");                      \
    }                                                                                                           \
    ++checked;                                                                                                  \
  }
  OXMERA_BINARY_OPS(OXM_X)
#undef OXM_X
  EXPECT_EQ(checked, 10);
}

TEST(Cuda, NaNPropagationWhereAndCasts) {
  NEED_GPU();
  Tensor a = from_vector<float>({1, NAN, -2, 0}, {4}), b = from_vector<float>({NAN, 1, 3, -0.0f}, {4});
  expect_match(maximum(gpu(a), gpu(b)), maximum(a, b), "maximum nan");
  expect_match(gpu(a).relu(), a.relu(), "relu nan");
  Tensor m = a > b;
  expect_match(where(gpu(m), gpu(a), gpu(b)), where(m, a, b), "where f32 mask");
  Tensor mu = m.to(DType::U8);
  expect_match(where(gpu(mu), gpu(a), gpu(b)), where(mu, a, b), "where u8 mask");
  Tensor i = from_vector<int64_t>({3, -1, 7}, {3});
  expect_match(gpu(i).to(DType::F32), i.to(DType::F32), "i64 -> f32");
  EXPECT_EQ(host(gpu(uni({3}, -4, 4, 1)).to(DType::I64)).to_vector<int64_t>(),
            uni({3}, -4, 4, 1).to(DType::I64).to_vector<int64_t>());
  EXPECT_OXM_ERROR(uni({2}, 0, 1, 1).to(DType::F64).to(kGpu), UnsupportedDType, "f64");
  Tensor z = gpu(uni({4, 5}, 0, 1, 2)).t();
  Tensor zc = z.contiguous();  // strided copy on the device
  expect_match(zc, host(z).contiguous(), "strided copy");
  Tensor f = gpu(zeros({3, 4}));
  f.slice(1, 0, 4, 2).fill_(2.5);
  expect_match(
      f,
      [] {
        Tensor c = zeros({3, 4});
        c.slice(1, 0, 4, 2).fill_(2.5);
        return c;
      }(),
      "strided fill");
}

TEST(Cuda, ReductionsOverDimSets) {
  NEED_GPU();
  Tensor x = uni({6, 5, 4, 3}, -2, 2, 31);
  const std::vector<Dims> sets = {{}, {0}, {1}, {3}, {0, 2}, {1, 3}, {0, 1, 2, 3}};
  for (const auto& d : sets) {
    const double k = static_cast<double>(d.empty() ? x.numel() : 1);
    expect_match(gpu(x).sum(d), x.sum(d), "sum", 1e-5 * std::sqrt(std::max(k, 360.0)), 1e-5);
    expect_match(gpu(x).mean(d, true), x.mean(d, true), "mean", 1e-5 * 20, 1e-6);
    expect_match(gpu(x).max(d), x.max(d), "max", 0, 0);
    expect_match(gpu(x).min(d), x.min(d), "min", 0, 0);
    expect_match(gpu(x).permute({2, 0, 3, 1}).sum(d), x.permute({2, 0, 3, 1}).sum(d), "sum permuted", 1e-4, 1e-5);
  }
  // long rows (chunked two-pass path), many short rows (thread-per-output path), column sums, empty extents
  Tensor big = uni({3, 300000}, -1, 1, 32);
  expect_match(gpu(big).sum({1}), big.sum({1}), "long rows", 1e-5 * std::sqrt(300000.0), 1e-4);
  expect_match(gpu(big).sum(), big.sum(), "full sum", 1e-5 * std::sqrt(900000.0), 1e-3);
  Tensor many = uni({20000, 7}, -1, 1, 33);
  expect_match(gpu(many).sum({1}), many.sum({1}), "short rows", 1e-5, 1e-6);
  expect_match(gpu(many).sum({0}), many.sum({0}), "column sum", 1e-5 * std::sqrt(20000.0), 1e-4);
  // column reductions (outputs contiguous in x): few outputs over long columns, many outputs, a strided
  // reduced dim, max/min, and the [4096, 4096] dim-0 sum of the benchmarks
  Tensor cols = uni({100000, 9}, -1, 1, 34);
  expect_match(gpu(cols).sum({0}), cols.sum({0}), "few long columns", 1e-5 * std::sqrt(100000.0), 1e-4);
  expect_match(gpu(cols).max({0}), cols.max({0}), "column max", 0, 0);
  expect_match(gpu(cols).min({0}), cols.min({0}), "column min", 0, 0);
  Tensor wide = uni({300, 5000}, -1, 1, 35);
  expect_match(gpu(wide).sum({0}), wide.sum({0}), "many columns", 1e-5 * std::sqrt(300.0), 1e-5);
  expect_match(gpu(wide).slice(0, 0, 300, 3).sum({0}), wide.slice(0, 0, 300, 3).sum({0}), "strided rows", 1e-4, 1e-5);
  Tensor tall = uni({3000, 200}, -1, 1, 38);  // column kernel (M 200, R 1000) over a reduced dim of stride 600
  expect_match(gpu(tall).slice(0, 0, 3000, 3).sum({0}), tall.slice(0, 0, 3000, 3).sum({0}), "column kernel, strided",
               1e-5 * std::sqrt(1000.0), 1e-4);
  expect_match(gpu(tall).max({0}), tall.max({0}), "column kernel max", 0, 0);
  Tensor cube = uni({40, 50, 16}, -1, 1, 36);
  expect_match(gpu(cube).sum({0, 1}), cube.sum({0, 1}), "two reduced dims", 1e-5 * std::sqrt(2000.0), 1e-4);
  Tensor sq = uni({4096, 4096}, -1, 1, 37);
  expect_match(gpu(sq).sum({0}), sq.sum({0}), "4096^2 dim 0", 1e-5 * std::sqrt(4096.0), 1e-4);
  EXPECT_EQ(host(gpu(cols).sum({0})).to_vector<float>(), host(gpu(cols).sum({0})).to_vector<float>());
  expect_match(gpu(zeros({0, 4})).sum({0}), zeros({0, 4}).sum({0}), "empty sum", 0, 0);
  // determinism: the same reduction twice is bit-identical
  EXPECT_EQ(host(gpu(big).sum()).item<float>(), host(gpu(big).sum()).item<float>());
}

TEST(Cuda, SoftmaxAndArgReductions) {
  NEED_GPU();
  for (const Shape& s : std::vector<Shape>{{4, 7}, {3, 1000}, {2, 5, 3}}) {
    Tensor x = uni(s, -5, 5, 41);
    for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
      expect_match(gpu(x).softmax(d), x.softmax(d), "softmax", 1e-5, 1e-7);
      expect_match(gpu(x).log_softmax(d), x.log_softmax(d), "log_softmax", 1e-5, 1e-6);
      EXPECT_EQ(host(gpu(x).argmax(d)).to_vector<int64_t>(), x.argmax(d).to_vector<int64_t>());
      EXPECT_EQ(host(gpu(x).argmin(d)).to_vector<int64_t>(), x.argmin(d).to_vector<int64_t>());
    }
  }
  Tensor ties = from_vector<float>({1, 3, 3, 0, 3}, {5});
  EXPECT_EQ(host(gpu(ties).argmax(0)).item<int64_t>(), 1);
  Tensor nan = from_vector<float>({1, NAN, 3}, {3});
  EXPECT_THROW(gpu(nan).argmax(0), Error);
}

TEST(Cuda, IndexOpsAreDeterministicAndMatchCpu) {
  NEED_GPU();
  Tensor x = uni({6, 5}, -1, 1, 51);
  Tensor idx = from_vector<int64_t>({4, 0, 4, 2, 4, 5, 0}, {7});
  expect_match(gpu(x).index_select(0, gpu(idx)), x.index_select(0, idx), "index_select 0", 0, 0);
  Tensor idx1 = from_vector<int64_t>({1, 1, 3}, {3});
  expect_match(gpu(x).t().index_select(1, gpu(idx1)), x.t().index_select(1, idx1), "index_select strided", 0, 0);
  Tensor src = uni({7, 5}, -1, 1, 52);
  expect_match(gpu(x).index_add(0, gpu(idx), gpu(src)), x.index_add(0, idx, src), "index_add", 1e-6, 1e-7);
  Tensor gi = from_vector<int64_t>({0, 2, 1, 1, 4, 0, 3, 3, 2, 0, 1, 4}, {6, 2});
  expect_match(gpu(x).gather(1, gpu(gi)), x.gather(1, gi), "gather", 0, 0);
  Tensor s2 = uni({6, 2}, -1, 1, 53);
  expect_match(gpu(x).scatter_add(1, gpu(gi), gpu(s2)), x.scatter_add(1, gi, s2), "scatter_add", 1e-6, 1e-7);
  // i64 data (class labels) can be selected on the device
  Tensor lab = from_vector<int64_t>({0, 1, 1, 0, 1, 0}, {6});
  EXPECT_EQ(host(gpu(lab).index_select(0, gpu(idx.slice(0, 0, 4)))).to_vector<int64_t>(),
            lab.index_select(0, idx.slice(0, 0, 4)).to_vector<int64_t>());
  // duplicates: bit-identical across runs
  Tensor many = from_vector<int64_t>(std::vector<int64_t>(1000, 3), {1000});
  Tensor big = uni({1000, 8}, -1, 1, 54);
  Tensor r1 = host(gpu(zeros({6, 8})).index_add(0, gpu(many), gpu(big)));
  Tensor r2 = host(gpu(zeros({6, 8})).index_add(0, gpu(many), gpu(big)));
  EXPECT_EQ(r1.to_vector<float>(), r2.to_vector<float>());
  EXPECT_EQ(r1.to_vector<float>(), zeros({6, 8}).index_add(0, many, big).to_vector<float>());
  // A CPU index may index device data (validated on the host, copied over); gradients flow either way.
  {
    Tensor xg = gpu(x).requires_grad_(), xc = x.detach().requires_grad_();
    Tensor w = uni({7, 5}, -1, 1, 58);
    (xg.index_select(0, idx) * gpu(w)).sum().backward();  // idx on the CPU
    (xc.index_select(0, idx) * w).sum().backward();
    expect_match(xg.grad(), xc.grad(), "index_select grad, cpu index", 1e-6, 1e-7);
    expect_match(gpu(x).index_add(0, idx, gpu(src)), x.index_add(0, idx, src), "index_add, cpu index", 1e-6, 1e-7);
    expect_match(gpu(x).gather(1, gi), x.gather(1, gi), "gather, cpu index", 0, 0);
    expect_match(gpu(x).scatter_add(1, gi, gpu(s2)), x.scatter_add(1, gi, s2), "scatter_add, cpu index", 1e-6, 1e-7);
    EXPECT_THROW((void)x.index_select(0, gpu(idx)), Error);  // a device index for cpu data: DeviceMismatch
  }
  // Long index lists (sorted path: > 32 indices) along an inner dim of a strided out, random with repeats,
  // and the DPP workload's pattern (unique flat positions): bit-identical to the CPU's ascending-order adds.
  std::vector<int64_t> rnd(5000);
  for (size_t i = 0; i < rnd.size(); ++i) rnd[i] = static_cast<int64_t>((i * 7919 + i / 3) % 300);
  Tensor ridx = from_vector(rnd, {5000});
  Tensor base = uni({300, 4}, -1, 1, 55).t();  // [4, 300], stride (1, 4)
  Tensor rsrc = uni({4, 5000}, -1, 1, 56);
  EXPECT_EQ(host(gpu(base).index_add(1, gpu(ridx), gpu(rsrc))).to_vector<float>(),
            base.index_add(1, ridx, rsrc).to_vector<float>());
  std::vector<int64_t> flat;
  for (int64_t b = 0; b < 64; ++b)
    for (int64_t i : {1, 4, 9, 13})
      for (int64_t j : {1, 4, 9, 13}) flat.push_back(b * 256 + i * 16 + j);
  Tensor fidx = from_vector(flat, {static_cast<int64_t>(flat.size())});
  Tensor fsrc = uni({3, static_cast<int64_t>(flat.size())}, -1, 1, 57);
  EXPECT_EQ(host(gpu(zeros({3, 64 * 256})).index_add(1, gpu(fidx), gpu(fsrc))).to_vector<float>(),
            zeros({3, 64 * 256}).index_add(1, fidx, fsrc).to_vector<float>());
  // scatter_add along a long index dim (sorted path: > 32 positions per output line), repeats included,
  // bit-identical to the CPU's row-major adds; also on a transposed (strided) index and i64 data
  std::vector<int64_t> sv(4 * 300);
  for (size_t i = 0; i < sv.size(); ++i) sv[i] = static_cast<int64_t>((i * 37 + i / 7) % 50);
  Tensor sgi = from_vector(sv, {4, 300});
  Tensor sgs = uni({4, 300}, -1, 1, 60);
  Tensor sbase = uni({4, 50}, -1, 1, 61);
  EXPECT_EQ(host(gpu(sbase).scatter_add(1, gpu(sgi), gpu(sgs))).to_vector<float>(),
            sbase.scatter_add(1, sgi, sgs).to_vector<float>());
  Tensor sgiT = from_vector(sv, {300, 4}).t();  // [4, 300] with strides (1, 4)
  EXPECT_EQ(host(gpu(sbase).scatter_add(1, gpu(from_vector(sv, {300, 4})).t(), gpu(sgs))).to_vector<float>(),
            sbase.scatter_add(1, sgiT, sgs).to_vector<float>());
  Tensor ones_i = from_vector(std::vector<int64_t>(4 * 300, 1), {4, 300});
  EXPECT_EQ(host(gpu(zeros({4, 50}, DType::I64)).scatter_add(1, gpu(sgi), gpu(ones_i))).to_vector<int64_t>(),
            zeros({4, 50}, DType::I64).scatter_add(1, sgi, ones_i).to_vector<int64_t>());
  // sorted path with a strided device index and with i64 data
  Tensor sidx = gpu(ridx).slice(0, 0, 5000, 2);  // 2500 indices, stride 2
  Tensor ssrc = uni({2500, 3}, -1, 1, 59);
  EXPECT_EQ(host(gpu(zeros({300, 3})).index_add(0, sidx, gpu(ssrc))).to_vector<float>(),
            zeros({300, 3}).index_add(0, ridx.slice(0, 0, 5000, 2), ssrc).to_vector<float>());
  Tensor isrc = from_vector(std::vector<int64_t>(5000, 1), {5000});
  EXPECT_EQ(host(gpu(zeros({300}, DType::I64)).index_add(0, gpu(ridx), gpu(isrc))).to_vector<int64_t>(),
            zeros({300}, DType::I64).index_add(0, ridx, isrc).to_vector<int64_t>());
}

TEST(Cuda, MatmulLayoutsAndBatches) {
  NEED_GPU();
  auto check = [](const Tensor& a, const Tensor& b, const std::string& what) {
    const double k = static_cast<double>(a.shape()[a.dim() - 1]);
    expect_match(matmul(gpu(a), gpu(b)), matmul(a, b), what, 1e-5 * std::sqrt(k), 1e-5 * std::sqrt(k));
  };
  check(uni({33, 17}, -1, 1, 61), uni({17, 29}, -1, 1, 62), "2d");
  check(uni({17, 33}, -1, 1, 63).t(), uni({29, 17}, -1, 1, 64).t(), "transposed");
  check(uni({4, 8, 16}, -1, 1, 65), uni({4, 16, 5}, -1, 1, 66), "batched");
  check(uni({8, 16}, -1, 1, 67), uni({3, 16, 5}, -1, 1, 68), "broadcast a (stride 0)");
  check(uni({2, 1, 8, 16}, -1, 1, 69), uni({1, 3, 16, 5}, -1, 1, 70), "pointer-array batch");
  check(uni({5, 0}, -1, 1, 71), uni({0, 4}, -1, 1, 72), "k = 0");
  check(uni({0, 3}, -1, 1, 73), uni({3, 4}, -1, 1, 74), "m = 0");
  check(uni({1, 300}, -1, 1, 75), uni({300, 1}, -1, 1, 76), "dot");
}

TEST(Cuda, ConvolutionAndPoolingThroughIm2col) {
  NEED_GPU();
  Tensor x = uni({2, 3, 9, 8}, -1, 1, 81).requires_grad_(), w = uni({4, 3, 3, 3}, -1, 1, 82).requires_grad_();
  Tensor xg = gpu(x.detach()).requires_grad_(), wg = gpu(w.detach()).requires_grad_();
  Tensor y = nn::functional::conv2d(x, w, {}, {2, 1}, {1, 2});
  Tensor yg = nn::functional::conv2d(xg, wg, {}, {2, 1}, {1, 2});
  expect_match(yg, y, "conv2d", 1e-4, 1e-5);
  y.sum().backward();
  yg.sum().backward();
  expect_match(xg.grad(), x.grad(), "conv2d dx (col2im)", 1e-4, 1e-5);
  expect_match(wg.grad(), w.grad(), "conv2d dw", 1e-4, 1e-4);
  expect_match(nn::functional::max_pool2d(gpu(x.detach()), {2, 2}), nn::functional::max_pool2d(x.detach(), {2, 2}),
               "max_pool2d", 0, 0);
}

// The nn kernels (cuda_nn.cu): layer norm, softmax / log_softmax, max pooling (padding, dilation, ties) and the
// LSTM, GRU and RNN layers, forward and parameter gradients against the CPU.
TEST(Cuda, NnKernelsMatchCpu) {
  NEED_GPU();
  {  // layer norm over the last two dims, rows of 96, 70 rows (three chunks of the weight / bias gradient sums)
    Tensor x = uni({7, 10, 8, 12}, -2, 2, 91).requires_grad_(), w = uni({8, 12}, -1, 1, 92).requires_grad_(),
           b = uni({8, 12}, -1, 1, 93).requires_grad_();
    Tensor xg = gpu(x.detach()).requires_grad_(), wg = gpu(w.detach()).requires_grad_(),
           bg = gpu(b.detach()).requires_grad_();
    Tensor y = nn::functional::layer_norm(x, {8, 12}, w, b), yg = nn::functional::layer_norm(xg, {8, 12}, wg, bg);
    expect_match(yg, y, "layer_norm", 1e-5, 1e-5);
    Tensor r = uni(y.shape(), -1, 1, 94);
    (y * r).sum().backward();
    (yg * gpu(r)).sum().backward();
    expect_match(xg.grad(), x.grad(), "layer_norm dx", 1e-4, 1e-5);
    expect_match(wg.grad(), w.grad(), "layer_norm dw", 1e-4, 1e-5);
    expect_match(bg.grad(), b.grad(), "layer_norm db", 1e-4, 1e-5);
  }
  for (bool log : {false, true}) {
    Tensor x = uni({6, 200}, -4, 4, 95).requires_grad_(), xg = gpu(x.detach()).requires_grad_();
    Tensor y = log ? x.log_softmax(1) : x.softmax(1), yg = log ? xg.log_softmax(1) : xg.softmax(1);
    Tensor r = uni(y.shape(), -1, 1, 96);
    (y * r).sum().backward();
    (yg * gpu(r)).sum().backward();
    expect_match(xg.grad(), x.grad(), log ? "log_softmax dx" : "softmax dx", 1e-4, 1e-5);
  }
  {  // pooling: rounded values (ties), padding, dilation; the gradient sums overlapping windows
    Tensor x = (uni({2, 3, 11, 9}, -3, 3, 97)).round().requires_grad_(), xg = gpu(x.detach()).requires_grad_();
    auto [y, i] = nn::functional::max_pool2d_with_indices(x, {3, 3}, {2, 1}, {1, 1}, {2, 1});
    auto [yg, ig] = nn::functional::max_pool2d_with_indices(xg, {3, 3}, {2, 1}, {1, 1}, {2, 1});
    expect_match(yg, y, "max_pool2d", 0, 0);
    EXPECT_EQ(host(ig).to_vector<int64_t>(), i.to_vector<int64_t>());
    Tensor r = uni(y.shape(), -1, 1, 98);
    (y * r).sum().backward();
    (yg * gpu(r)).sum().backward();
    expect_match(xg.grad(), x.grad(), "max_pool2d dx", 0, 0);
  }
  nn::RNNOptions o;
  o.num_layers = 2;
  o.bidirectional = true;
  o.batch_first = true;
  for (const char* kind : {"LSTM", "GRU", "RNN"}) {
    auto make = [&]() -> std::shared_ptr<nn::RNNBase> {
      Generator gen(17);
      if (std::string(kind) == "LSTM") return std::make_shared<nn::LSTM>(5, 7, o, gen);
      if (std::string(kind) == "GRU") return std::make_shared<nn::GRU>(5, 7, o, gen);
      return std::make_shared<nn::RNN>(5, 7, o, gen);
    };
    auto cpu_net = make(), gpu_net = make();
    gpu_net->to(kGpu);
    Tensor x = uni({3, 6, 5}, -1, 1, 99);
    auto output = [&](nn::RNNBase& net, const Tensor& in) -> Tensor {
      if (auto* l = dynamic_cast<nn::LSTM*>(&net)) return std::get<0>(l->forward(in));
      if (auto* g = dynamic_cast<nn::GRU*>(&net)) return std::get<0>(g->forward(in));
      return std::get<0>(static_cast<nn::RNN&>(net).forward(in));
    };
    Tensor y = output(*cpu_net, x), yg = output(*gpu_net, gpu(x));
    expect_match(yg, y, std::string(kind) + " output", 1e-5, 1e-5);
    Tensor r = uni(y.shape(), -1, 1, 100);
    (y * r).sum().backward();
    (yg * gpu(r)).sum().backward();
    const auto pc = cpu_net->named_parameters(), pg = gpu_net->named_parameters();
    ASSERT_EQ(pc.size(), pg.size());
    for (size_t k = 0; k < pc.size(); ++k)
      expect_match(pg[k].second.grad(), pc[k].second.grad(), std::string(kind) + " " + pc[k].first, 1e-4, 1e-5);
  }
}

TEST(Cuda, AutogradEndToEnd) {
  NEED_GPU();
  Tensor w = uni({6, 4}, -1, 1, 91).requires_grad_(), b = uni({4}, -1, 1, 92).requires_grad_();
  Tensor wg = gpu(w.detach()).requires_grad_(), bg = gpu(b.detach()).requires_grad_();
  Tensor x = uni({8, 6}, -1, 1, 93);
  auto loss = [&](const Tensor& W, const Tensor& B, const Tensor& X) {
    Tensor h = (X.matmul(W) + B).tanh();
    return (h.log_softmax(1) * h.sigmoid()).sum() + h.square().mean() + maximum(h, h.exp() - 1.5).sum();
  };
  Tensor l = loss(w, b, x), lg = loss(wg, bg, gpu(x));
  expect_match(lg, l, "loss", 1e-5, 1e-5);
  l.backward();
  lg.backward();
  EXPECT_EQ(wg.grad().device(), kGpu);
  expect_match(wg.grad(), w.grad(), "dW", 1e-4, 1e-5);
  expect_match(bg.grad(), b.grad(), "db", 1e-4, 1e-5);
}

TEST(Cuda, OptimizersOverTenSteps) {
  NEED_GPU();
  auto run = [](Device dev, int which) {
    Tensor p = uni({257}, -1, 1, 101).to(dev).requires_grad_();
    std::unique_ptr<optim::Optimizer> opt;
    if (which == 0)
      opt = std::make_unique<optim::SGD>(std::vector<Tensor>{p}, optim::SGDOptions{0.1, 0.9, 0, 0.01, true});
    if (which == 1) {
      optim::AdamOptions o;
      o.weight_decay = 0.01;
      o.amsgrad = true;
      opt = std::make_unique<optim::Adam>(std::vector<Tensor>{p}, o);
    }
    if (which == 2) opt = std::make_unique<optim::AdamW>(std::vector<Tensor>{p}, optim::AdamWOptions{});
    if (which == 3) {
      optim::RMSpropOptions o;
      o.momentum = 0.5;
      o.centered = true;
      opt = std::make_unique<optim::RMSprop>(std::vector<Tensor>{p}, o);
    }
    Tensor target = uni({257}, -1, 1, 102).to(dev);
    for (int i = 0; i < 10; ++i) {
      opt->zero_grad();
      ((p - target).square() * (p.sin() + 2.0)).sum().backward();
      opt->step();
    }
    return p.detach();
  };
  for (int which = 0; which < 4; ++which)
    expect_match(run(kGpu, which), run(Device::cpu(), which), "optimizer " + std::to_string(which), 1e-4, 1e-5);
}

// optimizer_steps: one launch per 24 parameters (chunks of 4096 elements per block). 30 parameters of sizes
// around the chunk size (and an empty one) in two groups with different options, every kind, against the CPU.
TEST(Cuda, GroupedOptimizerStepsMatchCpu) {
  NEED_GPU();
  const int64_t sizes[] = {0, 1, 7, 4095, 4096, 4097, 10000, 33};
  auto run = [&](Device dev, int which) {
    std::vector<Tensor> a, b;
    for (int i = 0; i < 30; ++i) {
      Tensor p = uni({sizes[i % 8]}, -1, 1, 200 + static_cast<uint64_t>(i)).to(dev).requires_grad_();
      (i % 3 == 0 ? b : a).push_back(p);
    }
    std::unique_ptr<optim::Optimizer> opt;
    if (which == 0)
      opt = std::make_unique<optim::SGD>(std::vector<optim::ParamGroup<optim::SGDOptions>>{
          {a, optim::SGDOptions{0.1, 0.9, 0, 0.01, true}}, {b, optim::SGDOptions{0.05}}});
    if (which == 1) {
      optim::AdamOptions o1, o2;
      o1.amsgrad = true;
      o2.lr = 0.02;
      o2.weight_decay = 0.1;
      opt = std::make_unique<optim::Adam>(std::vector<optim::ParamGroup<optim::AdamOptions>>{{a, o1}, {b, o2}});
    }
    if (which == 2) {
      optim::AdamWOptions o2;
      o2.weight_decay = 0.3;
      opt = std::make_unique<optim::AdamW>(
          std::vector<optim::ParamGroup<optim::AdamWOptions>>{{a, optim::AdamWOptions{}}, {b, o2}});
    }
    if (which == 3) {
      optim::RMSpropOptions o1, o2;
      o1.momentum = 0.5;
      o1.centered = true;
      o2.lr = 0.003;
      opt = std::make_unique<optim::RMSprop>(std::vector<optim::ParamGroup<optim::RMSpropOptions>>{{a, o1}, {b, o2}});
    }
    for (int step = 0; step < 5; ++step) {
      opt->zero_grad();
      Tensor loss = scalar(0.0).to(dev);
      for (const auto* group : {&a, &b})
        for (const Tensor& p : *group)
          if (!(step == 2 && p.numel() == 7)) loss = loss + (p.sin() * p).sum();  // one size skips a step
      loss.backward();
      opt->step();
    }
    std::vector<Tensor> out;
    for (const auto* group : {&a, &b})
      for (const Tensor& p : *group) out.push_back(p.detach());
    return out;
  };
  for (int which = 0; which < 4; ++which) {
    auto g = run(kGpu, which), c = run(Device::cpu(), which);
    for (size_t i = 0; i < g.size(); ++i)
      expect_match(g[i], c[i], "optimizer " + std::to_string(which) + " parameter " + std::to_string(i), 1e-4, 1e-5);
  }
}

TEST(Cuda, AllocatorReusesBlocksAndReportsOutOfMemory) {
  NEED_GPU();
  empty_cache(kGpu);
  { Tensor a = empty({1 << 20}, DType::F32, kGpu); }
  const MemoryStats s0 = memory_stats(kGpu);
  for (int i = 0; i < 10; ++i) Tensor a = empty({1 << 20}, DType::F32, kGpu);
  const MemoryStats s1 = memory_stats(kGpu);
  EXPECT_EQ(s1.system_allocations, s0.system_allocations);
  EXPECT_GE(s1.cache_hits, s0.cache_hits + 10);
  EXPECT_GE(s1.reserved_bytes, int64_t{4} << 20);
  EXPECT_GE(s1.peak_allocated_bytes, int64_t{4} << 20);
  empty_cache(kGpu);
  EXPECT_EQ(memory_stats(kGpu).reserved_bytes, memory_stats(kGpu).allocated_bytes);
  try {
    (void)empty({int64_t{1} << 48}, DType::F32, kGpu);  // 1 PiB
    ADD_FAILURE() << "expected OutOfMemory";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::OutOfMemory);
    EXPECT_NE(std::string(e.what()).find("reserved"), std::string::npos) << e.what();
  }
  Tensor ok = gpu(ones({4}));  // the device still works after an OOM
  EXPECT_EQ(host(ok.sum()).item<float>(), 4.f);
}

TEST(Cuda, EightThreadsIssuingOps) {
  NEED_GPU();
  std::atomic<int> bad{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 8; ++t)
    ts.emplace_back([t, &bad] {
      try {
        Tensor a = uni({64, 64}, -1, 1, 200 + t), b = uni({64, 64}, -1, 1, 300 + t);
        Tensor want = (a.matmul(b).tanh() + a).sum({1}).softmax(0);
        Tensor ag = gpu(a), bg = gpu(b);
        for (int i = 0; i < 50; ++i) {
          Tensor got = host((ag.matmul(bg).tanh() + ag).sum({1}).softmax(0));
          auto g = got.to_vector<float>(), w = want.to_vector<float>();
          for (size_t j = 0; j < g.size(); ++j)
            if (std::abs(g[j] - w[j]) > 1e-5 + 1e-4 * std::abs(w[j])) ++bad;
        }
      } catch (...) {
        ++bad;
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad.load(), 0);
}

// logdet runs on the device for n <= 32 (one thread per matrix, f64 inside) and through the host above;
// values and gradients match the CPU, and a matrix that is not positive definite is named by batch index.
TEST(Cuda, LogdetOnTheDeviceMatchesCpu) {
  NEED_GPU();
  uint64_t seed = 300;
  for (const Shape& s : {Shape{3, 64, 4, 4}, Shape{4, 6, 6}, Shape{3, 64, 16, 16}, Shape{2, 32, 32}, Shape{5, 40, 40},
                         Shape{7, 1, 1}, Shape{16, 16}, Shape{0, 4, 4}}) {
    const int64_t n = s[s.size() - 1];
    Tensor B = uni(s, -1, 1, ++seed);
    Tensor a = (matmul(B, B.transpose(-1, -2)) / static_cast<double>(n) + eye(n) * 0.5).detach().requires_grad_();
    Tensor ag = gpu(a.detach()).requires_grad_();
    Tensor w = uni(Shape(s.data(), s.size() - 2), 0.5, 1.5, ++seed);
    Tensor l = linalg::logdet(a), lg = linalg::logdet(ag);
    expect_match(lg, l, "logdet " + s.str(), 1e-5, 1e-5);
    (l * w).sum().backward();
    (lg * gpu(w)).sum().backward();
    expect_match(ag.grad(), a.grad(), "logdet grad " + s.str(), 1e-4, 1e-5);
    NoGradGuard ng;
    expect_match(linalg::logdet(gpu(a.detach())), l.detach(), "logdet without grad " + s.str(), 1e-5, 1e-5);
  }
  // A matrix that is not positive definite: logdet does not wait for its check on the device; the failure is
  // thrown at the next read-back (the earliest failing call's), and the failing entry is NaN. (On a device without
  // the small-linalg kernels, the host path reports at the call.)
  Tensor bad = eye(4).expand({3, 6, 4, 4}).contiguous();
  bad.select(0, 2).select(0, 5).select(0, 1).select(0, 1).fill_(-1.0);
  Tensor later_bad = eye(4).expand({5, 4, 4}).contiguous();
  later_bad.select(0, 1).select(0, 0).select(0, 0).fill_(0.0);
  Tensor ld, ld_later;
  std::string what;
  const std::optional<ErrorKind> kind = error_kind(
      [&] {
        ld = linalg::logdet(gpu(bad));
        ld_later = linalg::logdet(gpu(later_bad));
        (void)host(ld);
      },
      &what);
  EXPECT_EQ(kind, ErrorKind::NotPositiveDefinite);
  EXPECT_NE(what.find("batch index 17 [2, 5]"), std::string::npos) << what;
  EXPECT_NE(what.find("Cholesky pivot 1"), std::string::npos) << what;
  if (ld_later.defined()) {  // the device's kernels: both calls ran, the earlier one's failure was reported
    EXPECT_NE(what.find("found at the next read-back"), std::string::npos) << what;
    const Tensor got = host(ld);  // reported once: the checks are done
    EXPECT_TRUE(std::isnan(got.select(0, 2).select(0, 5).item<float>()));
    EXPECT_EQ(got.select(0, 2).select(0, 4).item<float>(), 0.0f);
    EXPECT_TRUE(std::isnan(host(ld_later).select(0, 1).item<float>()));
  }
  // On the CPU the error comes at once.
  EXPECT_OXM_ERROR(linalg::logdet(bad), NotPositiveDefinite, "batch index 17 [2, 5]");
}

// cholesky_ex (torch.linalg.cholesky_ex): per-matrix info codes instead of an error, on the CPU and on the device
// (no wait there), NaN factors for the failing matrices; check_errors gives cholesky's error.
TEST(Cuda, CholeskyExReportsInfoWithoutAnError) {
  NEED_GPU();
  Tensor a = eye(4).expand({2, 3, 4, 4}).contiguous() * 2.0;
  a.select(0, 1).select(0, 0).select(0, 2).select(0, 2).fill_(-3.0);  // batch 3: the leading minor of order 3 fails
  a.select(0, 1).select(0, 2).select(0, 0).select(0, 0).fill_(0.0);   // batch 5: order 1
  for (Device dev : {Device::cpu(), kGpu}) {
    const std::string tag = dev.str();
    const Tensor in = dev.is_cpu() ? a : gpu(a);
    linalg::CholeskyExResult r = linalg::cholesky_ex(in);
    EXPECT_EQ(r.info.device(), dev) << tag;
    EXPECT_EQ(r.info.dtype(), DType::I64) << tag;
    EXPECT_EQ(r.info.shape(), (Shape{2, 3})) << tag;
    EXPECT_EQ(host(r.info).reshape({6}).to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0, 3, 0, 1})) << tag;
    const Tensor L = host(r.L);
    EXPECT_TRUE(std::isnan(L.select(0, 1).select(0, 0).select(0, 3).select(0, 3).item<float>())) << tag;
    expect_close(values(L.select(0, 0)), values(linalg::cholesky(a.select(0, 0))), 1e-6, 1e-6,
                 "cholesky_ex good batch " + tag);
    EXPECT_OXM_ERROR(linalg::cholesky_ex(in, true), NotPositiveDefinite, "batch index 3 [1, 0]");
    linalg::CholeskyExResult ok = linalg::cholesky_ex(in.select(0, 0), true);
    EXPECT_EQ(host(ok.info).to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0})) << tag;
  }
}

// cholesky and solve_triangular run on the device for n <= 32 (and cholesky_solve, solve, inverse through
// them); values and gradients match the CPU, broadcast batches included, and the errors name the matrix.
TEST(Cuda, CholeskyAndTriangularSolvesOnTheDeviceMatchCpu) {
  NEED_GPU();
  uint64_t seed = 400;
  for (int64_t n : {int64_t{3}, int64_t{16}, int64_t{32}, int64_t{40}}) {
    const std::string tag = "n " + std::to_string(n);
    Tensor B = uni({2, 3, n, n}, -1, 1, ++seed);
    Tensor a = (matmul(B, B.transpose(-1, -2)) / static_cast<double>(n) + eye(n) * 0.5).detach().requires_grad_();
    Tensor ag = gpu(a.detach()).requires_grad_();
    Tensor W = uni({2, 3, n, n}, -1, 1, ++seed);
    Tensor L = linalg::cholesky(a), Lg = linalg::cholesky(ag);
    expect_match(Lg, L, "cholesky " + tag, 1e-5, 1e-5);
    (L * W).sum().backward();
    (Lg * gpu(W)).sum().backward();
    expect_match(ag.grad(), a.grad(), "cholesky grad " + tag, 1e-3, 1e-4);
    // solve_triangular, lower and upper, with a batch-broadcast right-hand side and gradients for both
    for (bool upper : {false, true}) {
      Tensor T = (upper ? L.detach().transpose(-1, -2) : L.detach()).contiguous().requires_grad_();
      Tensor Tg = gpu(T.detach()).requires_grad_();
      Tensor rhs = uni({3, n, 2}, -1, 1, ++seed).requires_grad_(), rhsg = gpu(rhs.detach()).requires_grad_();
      Tensor x = linalg::solve_triangular(T, rhs, upper), xg = linalg::solve_triangular(Tg, rhsg, upper);
      expect_match(xg, x, "solve_triangular " + tag, 1e-4, 1e-5);
      Tensor V = uni(x.shape(), -1, 1, ++seed);
      (x * V).sum().backward();
      (xg * gpu(V)).sum().backward();
      expect_match(Tg.grad(), T.grad(), "solve_triangular dT " + tag, 1e-3, 1e-4);
      expect_match(rhsg.grad(), rhs.grad(), "solve_triangular db " + tag, 1e-3, 1e-4);
    }
    NoGradGuard ng;
    Tensor rhs = uni({2, 3, n, 4}, -1, 1, ++seed);
    expect_match(linalg::solve(gpu(a.detach()), gpu(rhs)), linalg::solve(a.detach(), rhs), "solve " + tag, 1e-3, 1e-4);
    expect_match(linalg::inverse(gpu(a.detach())), linalg::inverse(a.detach()), "inverse " + tag, 1e-3, 1e-4);
  }
  Tensor bad = eye(5).expand({4, 5, 5}).contiguous();
  bad.select(0, 3).select(0, 2).select(0, 2).fill_(0.0);
  EXPECT_OXM_ERROR(linalg::cholesky(gpu(bad)), NotPositiveDefinite, "batch index 3 [3]");
  EXPECT_OXM_ERROR(linalg::cholesky(gpu(bad)), NotPositiveDefinite, "pivot 2 is 0");
  // solve_triangular does not wait for its check on the device: the zero diagonal is reported at the next
  // read-back, and that matrix's solution is NaN (at the call on a device without the kernels).
  Tensor x;
  std::string what;
  const std::optional<ErrorKind> kind = error_kind(
      [&] {
        x = linalg::solve_triangular(gpu(bad), gpu(ones({4, 5, 1})), false);
        (void)host(x);
      },
      &what);
  EXPECT_EQ(kind, ErrorKind::InvalidArgument);
  EXPECT_NE(what.find("zero on its diagonal at row 2"), std::string::npos) << what;
  if (x.defined()) {
    const Tensor xs = host(x);
    EXPECT_TRUE(std::isnan(xs.select(0, 3).select(0, 0).item<float>()));
    EXPECT_EQ(xs.select(0, 2).select(0, 4).item<float>(), 1.0f);
  }
}

// The research workload (2 epochs, f32) on the GPU tracks the same run on the CPU.
TEST(Cuda, ResearchShortRunMatchesCpuF32) {
  NEED_GPU();
  oxmera_cli::ResearchOptions o;
  o.epochs = 2;
  o.replicas = 2;
  o.seed = 3;
  o.dtype = "f32";
  const auto cpu = oxmera_cli::research_fits(o);
  o.device = "cuda";
  const auto cuda = oxmera_cli::research_fits(o);
  ASSERT_EQ(cpu.size(), cuda.size());
  for (size_t f = 0; f < cpu.size(); ++f)
    for (size_t r = 0; r < 2; ++r) {
      EXPECT_NEAR(cuda[f].train_loss[r], cpu[f].train_loss[r], 1e-3 * std::abs(cpu[f].train_loss[r])) << cpu[f].name;
      EXPECT_NEAR(cuda[f].metric[r], cpu[f].metric[r], 1e-3 * std::abs(cpu[f].metric[r])) << cpu[f].name;
    }
}

// The fused cross-entropy kernels (one block per row; 32 or 256 threads by class count) against the CPU.
TEST(Cuda, FusedCrossEntropyMatchesCpu) {
  NEED_GPU();
  for (auto [N, C] : {std::pair<int64_t, int64_t>{37, 10}, {300, 1000}, {1, 2}})
    for (bool transposed : {false, true})
      for (double ls : {0.0, 0.2})
        for (nn::Reduction red : {nn::Reduction::Mean, nn::Reduction::Sum, nn::Reduction::None}) {
          Tensor x = transposed ? uni({C, N}, -4, 4, 71).t() : uni({N, C}, -4, 4, 71);
          std::vector<int64_t> tv(static_cast<size_t>(N));
          for (int64_t i = 0; i < N; ++i) tv[static_cast<size_t>(i)] = i % 7 == 3 ? -100 : (i * 5) % C;
          Tensor t = from_vector<int64_t>(tv, {N});
          nn::CrossEntropyOptions o;
          o.label_smoothing = ls;
          o.reduction = red;
          Tensor xc = x.detach().requires_grad_();
          Tensor xg = (transposed ? gpu(x.t().contiguous()).t() : gpu(x.contiguous())).detach().requires_grad_();
          Tensor lc = nn::cross_entropy(xc, t, o), lg = nn::cross_entropy(xg, t, o);
          const std::string what = "cross_entropy [" + std::to_string(N) + ", " + std::to_string(C) + "]" +
                                   (transposed ? " transposed" : "") + " ls " + std::to_string(ls);
          expect_match(lg, lc, what, 1e-5, 1e-5);
          Tensor w = uni(lc.shape(), 0.5, 1.5, 72);
          (lc * w).sum().backward();
          (lg * gpu(w)).sum().backward();
          expect_match(xg.grad(), xc.grad(), what + " grad", 1e-5, 1e-6);
        }
}

// create_graph = true on the device: the first derivative and a Hessian-vector product of the fused cross entropy
// (label smoothing, ignored rows) and of logdet + |cholesky|^2 (the device rules) match the CPU's.
TEST(Cuda, SecondDerivativesOfCrossEntropyAndLogdetMatchCpu) {
  NEED_GPU();
  auto hvp = [](const Tensor& x, const Tensor& v, const std::function<Tensor(const Tensor&)>& f) {
    Tensor g = autograd::grad({f(x)}, {x}, {}, false, true)[0];
    return std::pair<Tensor, Tensor>{g.detach(), autograd::grad({(g * v).sum()}, {x})[0]};
  };
  std::vector<int64_t> tv(37);
  for (int64_t i = 0; i < 37; ++i) tv[static_cast<size_t>(i)] = i % 7 == 3 ? -100 : (i * 5) % 10;
  const Tensor t = from_vector<int64_t>(tv, {37});
  nn::CrossEntropyOptions o;
  o.label_smoothing = 0.2;
  auto ce = [&](const Tensor& x) { return nn::cross_entropy(x, x.device().is_cpu() ? t : gpu(t), o); };
  Tensor x = uni({37, 10}, -3, 3, 81).requires_grad_(), v = uni({37, 10}, -1, 1, 82);
  Tensor xg = gpu(x.detach()).requires_grad_();
  auto [g, h] = hvp(x, v, ce);
  auto [gg, hg] = hvp(xg, gpu(v), ce);
  expect_match(gg, g, "cross_entropy grad with create_graph", 1e-5, 1e-6);
  expect_match(hg, h, "cross_entropy Hessian-vector product", 1e-4, 1e-6);
  Tensor B = uni({3, 8, 8}, -1, 1, 83);
  Tensor a = (matmul(B, B.transpose(-1, -2)) / 8.0 + eye(8) * 0.5).detach().requires_grad_();
  Tensor ag = gpu(a.detach()).requires_grad_(), w = uni({3, 8, 8}, -1, 1, 84);
  auto ld = [](const Tensor& m) { return linalg::logdet(m).sum() + linalg::cholesky(m).square().sum(); };
  auto [lg, lh] = hvp(a, w, ld);
  auto [lgg, lhg] = hvp(ag, gpu(w), ld);
  expect_match(lgg, lg, "logdet + |cholesky|^2 grad with create_graph", 1e-4, 1e-5);
  expect_match(lhg, lh, "logdet + |cholesky|^2 Hessian-vector product", 1e-3, 1e-4);
}

// Class targets may stay on the CPU for GPU logits (no read-back to validate them).
TEST(Cuda, ClassTargetsMayStayOnTheCpu) {
  NEED_GPU();
  Tensor logits = uni({6, 4}, -2, 2, 61).requires_grad_();
  Tensor lg = gpu(logits.detach()).requires_grad_();
  Tensor y = from_vector<int64_t>({0, 3, 1, 1, 2, 0}, {6});
  Tensor l = nn::cross_entropy(logits, y), lc = nn::cross_entropy(lg, y), ld = nn::cross_entropy(lg, gpu(y));
  expect_match(lc, l, "cross_entropy, cpu target", 1e-5, 1e-6);
  expect_match(ld, l, "cross_entropy, gpu target", 1e-5, 1e-6);
  l.backward();
  lc.backward();
  expect_match(lg.grad(), logits.grad(), "cross_entropy grad, cpu target", 1e-5, 1e-6);
}

TEST(Cuda, DemoTrainingReachesTheCpuLoss) {
  NEED_GPU();
  auto train = [](Device dev) {
    Generator gen(5);
    nn::Sequential model{std::make_shared<nn::Linear>(2, 32, true, gen), std::make_shared<nn::Tanh>(),
                         std::make_shared<nn::Linear>(32, 2, true, gen)};
    model.to(dev);
    Tensor x = uni({128, 2}, -1, 1, 7).to(dev);
    Tensor y = uni({128}, 0, 2, 8).to(DType::I64).to(dev);
    optim::Adam adam(model.parameters(), optim::AdamOptions{0.05});
    double loss = 0;
    for (int i = 0; i < 60; ++i) {
      Tensor l = nn::cross_entropy(model(x), y);
      adam.zero_grad();
      l.backward();
      adam.step();
      loss = host(l).item<float>();
    }
    return loss;
  };
  const double cpu = train(Device::cpu()), cuda = train(kGpu);
  EXPECT_NEAR(cuda, cpu, 1e-3 + 1e-3 * cpu);
}

// Pinned host memory and non_blocking copies: a pinned copy keeps the values; copies from pinned blocks are only
// enqueued and the kernels after them see the data, also while the source blocks are freed and reused at once
// (the pool's stream-ordered free); the DataLoader with pin_memory yields the unpinned loader's batches.
TEST(Cuda, PinnedMemoryAndNonBlockingCopies) {
  NEED_GPU();
  ASSERT_TRUE(pinned_memory_available());
  const Tensor x = uni({256, 1024}, -1, 1, 41);  // 1 MiB: past the 64 KiB staging slots
  Tensor p = x.pin_memory();
  EXPECT_TRUE(p.is_pinned());
  EXPECT_EQ(p.device(), Device::cpu());
  EXPECT_EQ(values(p), values(x));
  expect_match(p.to(kGpu, true) * 2.0, x * 2.0, "non_blocking from pinned");
  // Many copies in flight from blocks freed right after their copy was enqueued, each checked after the loop.
  std::vector<Tensor> on_gpu, want;
  for (int k = 0; k < 16; ++k) {
    Tensor src = x + static_cast<double>(k);
    want.push_back(src);
    on_gpu.push_back(src.pin_memory().to(kGpu, true) + 1.0);  // the pinned block dies here
  }
  for (int k = 0; k < 16; ++k)
    expect_match(on_gpu[static_cast<size_t>(k)], want[static_cast<size_t>(k)] + 1.0, "copy " + std::to_string(k));
  empty_cache(kGpu);  // gives the cached pinned blocks back too

  namespace data = oxmera::data;
  auto ds = data::tensor_dataset({uni({100, 3, 8, 8}, 0, 1, 42), arange(100, DType::I64)});
  data::DataLoaderOptions opt{.batch_size = 16, .shuffle = true, .seed = 2, .num_workers = 2};
  opt.device = kGpu;
  data::DataLoader plain(ds, opt);
  opt.pin_memory = true;
  data::DataLoader pinned(ds, opt);
  EXPECT_TRUE(pinned.pins_memory());
  std::vector<std::vector<double>> a, b;
  for (auto& batch : plain)
    for (const Tensor& t : batch) a.push_back(values(host(t)));
  for (auto& batch : pinned)
    for (const Tensor& t : batch) {
      EXPECT_EQ(t.device(), kGpu);
      b.push_back(values(host(t)));
    }
  EXPECT_EQ(a, b);
}

// NCCL with one rank (which needs no peer) on the backend's stream: the declarations the distributed layer restates
// (src/distributed/nccl.hpp), the stream handle and the markers it uses (ops/device_stream.hpp), against the real
// library and device, kernels before and after each collective. Skipped where libnccl.so.2 does not load.
TEST(CudaNccl, OneRankCollectivesOnTheBackendStream) {
  NEED_GPU();
  if (!detail::device_memory_is_cuda(kGpu)) GTEST_SKIP() << "this device's memory is not CUDA memory (the test device)";
  namespace nc = oxmera::distributed::detail;
  std::string why;
  const nc::NcclApi* api = nc::nccl_api(&why);
  if (api == nullptr) GTEST_SKIP() << "no NCCL: " << why;
  nc::NcclUniqueId id{};
  int rc = api->get_unique_id(&id);
  ASSERT_EQ(rc, nc::kNcclSuccess) << api->error("ncclGetUniqueId", rc);
  nc::NcclComm comm = nullptr;
  rc = api->comm_init_rank(&comm, 1, id, 0);
  ASSERT_EQ(rc, nc::kNcclSuccess) << api->error("ncclCommInitRank", rc);
  void* stream = detail::device_native_stream(kGpu);
  auto finish = [&](const char* what) {
    void* marker = detail::device_record_marker(kGpu);
    const auto start = std::chrono::steady_clock::now();
    bool reached = false;
    while (!(reached = detail::device_marker_reached(kGpu, marker)) &&
           std::chrono::steady_clock::now() - start < std::chrono::seconds(20))
      std::this_thread::yield();
    detail::device_release_marker(kGpu, marker);
    EXPECT_TRUE(reached) << what << ": the marker behind it was not reached in 20 s";
    int async = nc::kNcclSuccess;
    EXPECT_EQ(api->comm_get_async_error(comm, &async), nc::kNcclSuccess) << what;
    EXPECT_EQ(async, nc::kNcclSuccess) << what << ": " << api->error("the collective", async);
  };
  const Tensor a = uni({1031}, -1, 1, 41);
  Tensor x = gpu(a) * 2.0;  // a kernel just before: NCCL must read its output
  Tensor y = empty({1031}, DType::F32, kGpu);
  rc = api->all_reduce(x.impl()->byte_ptr(), y.impl()->byte_ptr(), 1031, nc::kNcclFloat32, nc::kNcclSum, comm, stream);
  ASSERT_EQ(rc, nc::kNcclSuccess) << api->error("ncclAllReduce", rc);
  Tensor z = y + 1.0;  // a kernel just after: it must read NCCL's output
  finish("ncclAllReduce");
  expect_match(z, a * 2.0 + 1.0, "one-rank all-reduce between two kernels", 0, 0);
  Tensor b = gpu(full({7}, 3.0, DType::I64)) + gpu(full({7}, 4.0, DType::I64));
  rc = api->broadcast(b.impl()->byte_ptr(), b.impl()->byte_ptr(), 7, nc::kNcclInt64, 0, comm, stream);
  ASSERT_EQ(rc, nc::kNcclSuccess) << api->error("ncclBroadcast", rc);
  Tensor g = empty({1, 7}, DType::I64, kGpu);
  rc = api->all_gather(b.impl()->byte_ptr(), g.impl()->byte_ptr(), 7, nc::kNcclInt64, comm, stream);
  ASSERT_EQ(rc, nc::kNcclSuccess) << api->error("ncclAllGather", rc);
  Tensor s = empty({7}, DType::I64, kGpu);
  rc = api->reduce_scatter(g.impl()->byte_ptr(), s.impl()->byte_ptr(), 7, nc::kNcclInt64, nc::kNcclMax, comm, stream);
  ASSERT_EQ(rc, nc::kNcclSuccess) << api->error("ncclReduceScatter", rc);
  finish("ncclBroadcast, ncclAllGather, ncclReduceScatter");
  EXPECT_EQ(host(s).to_vector<int64_t>(), std::vector<int64_t>(7, 7));
  EXPECT_EQ(host(g).to_vector<int64_t>(), std::vector<int64_t>(7, 7));
  rc = api->comm_destroy(comm);
  EXPECT_EQ(rc, nc::kNcclSuccess) << api->error("ncclCommDestroy", rc);
}

// ---------------------------------------------------------------- CUDA graphs (oxmera::cuda::Graph)
namespace {

std::shared_ptr<nn::Sequential> graph_test_model() {
  Generator gen(5);
  auto m = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(2, 16, true, gen), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(16, 3, true, gen)});
  m->to(kGpu);
  return m;
}

Tensor train_step(nn::Sequential& model, optim::Optimizer& opt, const Tensor& x, const Tensor& y) {
  opt.zero_grad();
  Tensor loss = nn::cross_entropy(model(x), y);
  loss.backward();
  opt.step();
  return loss;
}

// A training step captured once and replayed on new batches (copied into the static inputs) gives the losses,
// parameters and optimizer state (step counts included) of the same steps run eagerly.
template <class MakeOptimizer>
void expect_replays_match_eager_steps(MakeOptimizer make_optimizer, const std::string& what) {
  constexpr int kSteps = 6;
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < kSteps; ++i) {
    xs.push_back(uni({64, 2}, -1, 1, 100 + i));
    ys.push_back(uni({64}, 0, 3, 200 + i).to(DType::I64));
  }
  auto eager = graph_test_model(), graphed = graph_test_model();
  auto eager_opt = make_optimizer(eager->parameters());
  auto graphed_opt = make_optimizer(graphed->parameters());
  std::vector<float> eager_loss;
  for (int i = 0; i < kSteps; ++i) {
    const Tensor l = train_step(*eager, *eager_opt, gpu(xs[i]), gpu(ys[i]));
    eager_loss.push_back(host(l).item<float>());
  }

  Tensor x = gpu(xs[0]), y = gpu(ys[0]);
  const Tensor warm_up = train_step(*graphed, *graphed_opt, x, y);  // eager: creates the optimizer state
  EXPECT_NEAR(host(warm_up).item<float>(), eager_loss[0], 1e-5) << what;
  cuda::Graph graph;
  Tensor loss;
  {
    cuda::GraphCapture capture(graph);
    EXPECT_TRUE(cuda::is_capturing());
    loss = train_step(*graphed, *graphed_opt, x, y);
  }
  ASSERT_TRUE(graph.captured()) << what;
  EXPECT_FALSE(cuda::is_capturing());
  for (int i = 1; i < kSteps; ++i) {
    x.copy_(gpu(xs[i]));
    y.copy_(gpu(ys[i]));
    graph.replay();
    EXPECT_NEAR(host(loss).item<float>(), eager_loss[i], 1e-5 * (1 + std::abs(eager_loss[i])))
        << what << ": replay " << i;
  }
  // Parameters and state: 1e-4 (a device without the fused optimizer kernel computes Adam's bias corrections of a
  // captured step in f32 tensor ops, where the kernels use double; a replay that did not run is off by far more).
  const auto pe = eager->parameters(), pg = graphed->parameters();
  ASSERT_EQ(pe.size(), pg.size());
  for (size_t k = 0; k < pe.size(); ++k)
    expect_close(values(host(pg[k])), values(host(pe[k])), 1e-4, 1e-5, what + ": parameter " + std::to_string(k));
  const auto se = eager_opt->state_tensors(), sg = graphed_opt->state_tensors();
  ASSERT_EQ(se.size(), sg.size()) << what;
  for (size_t k = 0; k < se.size(); ++k) {
    ASSERT_EQ(se[k].first, sg[k].first) << what;
    const Tensor got = host(sg[k].second), want = host(se[k].second);
    if (want.dtype() == DType::I64)
      EXPECT_EQ(got.item<int64_t>(), want.item<int64_t>()) << what << ": " << se[k].first;
    else
      expect_close(values(got), values(want), 1e-4, 1e-5, what + ": " + se[k].first);
  }
}

}  // namespace

TEST(CudaGraph, ReplayedTrainingStepsMatchEagerSteps) {
  NEED_GPU();
  using Params = std::vector<Tensor>;
  expect_replays_match_eager_steps(
      [](Params p) {
        optim::SGDOptions o{0.1};
        o.momentum = 0.9;
        o.weight_decay = 1e-3;
        o.nesterov = true;
        return std::make_unique<optim::SGD>(std::move(p), o);
      },
      "SGD (nesterov momentum, weight decay)");
  expect_replays_match_eager_steps(
      [](Params p) {
        optim::RMSpropOptions o{0.01};
        o.momentum = 0.5;
        o.centered = true;
        return std::make_unique<optim::RMSprop>(std::move(p), o);
      },
      "RMSprop (centered, momentum)");
  // Adam's bias corrections follow the step count, which the replay advances on the device.
  expect_replays_match_eager_steps(
      [](Params p) { return std::make_unique<optim::Adam>(std::move(p), optim::AdamOptions{0.05}); }, "Adam");
  expect_replays_match_eager_steps(
      [](Params p) {
        optim::AdamWOptions o{0.05};
        o.amsgrad = true;
        return std::make_unique<optim::AdamW>(std::move(p), o);
      },
      "AdamW (amsgrad)");
}

TEST(CudaGraph, RefusesWhatAReplayCouldNotRepeat) {
  NEED_GPU();
  const Tensor x = gpu(uni({4, 3}, -1, 1, 1));
  cuda::Graph g;
  std::string what;
  EXPECT_EQ(error_kind([&] { g.replay(); }, &what), ErrorKind::InvalidArgument);
  EXPECT_NE(what.find("nothing captured"), std::string::npos) << what;
  EXPECT_EQ(error_kind([&] { g.capture_begin(Device::cpu()); }), ErrorKind::InvalidArgument);
  // Reading a result, copying host data in (new data, random numbers) and waiting: refused, the capture dropped.
  EXPECT_EQ(error_kind(
                [&] {
                  cuda::GraphCapture capture(g);
                  (void)host(x * 2.0);
                },
                &what),
            ErrorKind::InvalidArgument);
  EXPECT_NE(what.find("captured"), std::string::npos) << what;
  EXPECT_FALSE(g.captured());
  EXPECT_FALSE(cuda::is_capturing());
  EXPECT_EQ(error_kind([&] {
              cuda::GraphCapture capture(g);
              (void)(x.sum() * 2.0).item<float>();
            }),
            ErrorKind::InvalidArgument);
  EXPECT_EQ(error_kind(
                [&] {
                  cuda::GraphCapture capture(g);
                  (void)(x + gpu(uni({4, 3}, 0, 1, 3)));
                },
                &what),
            ErrorKind::InvalidArgument);
  EXPECT_NE(what.find("random"), std::string::npos) << what;
  EXPECT_FALSE(g.captured());
  {
    cuda::GraphCapture capture(g);
    cuda::Graph other;
    EXPECT_EQ(error_kind([&] { other.capture_begin(); }), ErrorKind::InvalidArgument);  // one capture at a time
    EXPECT_EQ(error_kind([&] { g.replay(); }), ErrorKind::InvalidArgument);             // still open
    (void)(x * 3.0);
  }
  EXPECT_TRUE(g.captured());
  EXPECT_EQ(error_kind([&] { g.capture_begin(); }), ErrorKind::InvalidArgument);  // holds a graph: reset() first
  g.reset();
  EXPECT_FALSE(g.captured());
  expect_match(x * 2.0, host(x) * 2.0, "eager work after the refused captures");
}

// Optimizer state is never created inside a capture (its zeros would be written at every replay), and what the
// capture baked in (hyperparameters, the state buffers, the optimizer itself) is checked before every replay.
TEST(CudaGraph, OptimizerStepsAreCheckedBeforeEveryReplay) {
  NEED_GPU();
  auto model = graph_test_model();
  const Tensor x = gpu(uni({8, 2}, -1, 1, 4)), y = gpu(uni({8}, 0, 3, 5).to(DType::I64));
  auto opt = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions{0.1, 0.9});
  cuda::Graph g;
  std::string what;
  EXPECT_EQ(error_kind(
                [&] {
                  cuda::GraphCapture capture(g);
                  (void)train_step(*model, *opt, x, y);
                },
                &what),
            ErrorKind::InvalidArgument);
  EXPECT_NE(what.find("warm-up"), std::string::npos) << what;
  EXPECT_TRUE(opt->state_tensors().empty()) << "the refused step created no state";
  (void)host(train_step(*model, *opt, x, y));  // warm-up: momentum buffers exist now
  {
    cuda::GraphCapture capture(g);
    (void)train_step(*model, *opt, x, y);
  }
  g.replay();
  opt->set_lr(0, 0.05);  // an lr schedule after the capture: the graph still holds 0.1
  EXPECT_EQ(error_kind([&] { g.replay(); }, &what), ErrorKind::InvalidArgument);
  EXPECT_NE(what.find("lr"), std::string::npos) << what;
  opt->set_lr(0, 0.1);
  g.replay();
  const Tensor w = host(model->parameters()[0]);
  opt.reset();  // the optimizer is gone: the graph refuses rather than run its step
  EXPECT_EQ(error_kind([&] { g.replay(); }, &what), ErrorKind::InvalidArgument);
  expect_close(values(host(model->parameters()[0])), values(w), 0, 0, "no replay after the refusal");
}

// The capture's memory belongs to the graph: a block freed during the capture is not handed to eager work while the
// graph lives (a replay writes it), tensors made in the capture hold the newest replay's values, and reset() gives
// the memory back.
TEST(CudaGraph, CapturedMemoryStaysTheGraphsUntilReset) {
  NEED_GPU();
  Tensor x = gpu(uni({256}, -1, 1, 6));
  cuda::Graph g;
  Tensor out;
  const void* freed_in_capture = nullptr;
  {
    cuda::GraphCapture capture(g);
    Tensor t = x + 1.0;
    freed_in_capture = t.impl()->storage->data;
    out = t * 3.0;
  }
  std::vector<Tensor> eager;
  for (int i = 0; i < 8; ++i) {
    eager.push_back(empty({256}, DType::F32, kGpu));
    EXPECT_NE(static_cast<const void*>(eager.back().impl()->storage->data), freed_in_capture);
  }
  for (uint64_t seed : {7, 8}) {
    const Tensor v = uni({256}, -1, 1, seed);
    x.copy_(gpu(v));
    g.replay();
    expect_match(out, (v + 1.0) * 3.0, "replay with seed " + std::to_string(seed));
  }
  g.reset();
  expect_match(out, (host(x) + 1.0) * 3.0, "a captured tensor after reset keeps its values");
}

// Index values are not on the host inside a capture: the captured ops clamp them on the device (no kernel reads
// outside a tensor) and report the clamped ones, and replay() throws (IndexOutOfBounds). Class targets out of
// range make cross_entropy's loss NaN.
TEST(CudaGraph, OutOfRangeIndicesInAReplayAreReported) {
  NEED_GPU();
  const Tensor table = gpu(uni({5, 3}, -1, 1, 9));
  Tensor idx = gpu(from_vector<int64_t>({0, 4, 2}, {3}));
  cuda::Graph g;
  Tensor rows;
  {
    cuda::GraphCapture capture(g);
    rows = table.index_select(0, idx);
  }
  g.replay();
  expect_match(rows, host(table).index_select(0, from_vector<int64_t>({0, 4, 2}, {3})), "in-range lookup");
  idx.copy_(gpu(from_vector<int64_t>({1, 5, -1}, {3})));
  std::string what;
  EXPECT_EQ(error_kind([&] { g.replay(); }, &what), ErrorKind::IndexOutOfBounds);
  // The first out-of-range position (of two) is named (the deferred check's report; a device without the check
  // kernel counts them instead: "2 index value(s)").
  EXPECT_TRUE(what.find("position 1") != std::string::npos || what.find("2 index value(s)") != std::string::npos)
      << what;
  idx.copy_(gpu(from_vector<int64_t>({3, 3, 1}, {3})));
  g.replay();  // the count starts again from zero
  expect_match(rows, host(table).index_select(0, from_vector<int64_t>({3, 3, 1}, {3})), "after the error");

  const Tensor logits = gpu(uni({4, 3}, -1, 1, 10));
  Tensor target = gpu(from_vector<int64_t>({0, 2, 1, -100}, {4}));
  cuda::Graph ce;
  Tensor loss;
  {
    cuda::GraphCapture capture(ce);
    loss = nn::cross_entropy(logits, target);
  }
  ce.replay();
  EXPECT_NEAR(host(loss).item<float>(), nn::cross_entropy(host(logits), host(target)).item<float>(), 1e-5)
      << "ignore_index on the device";
  target.copy_(gpu(from_vector<int64_t>({0, 3, 1, 1}, {4})));
  ce.replay();
  EXPECT_TRUE(std::isnan(host(loss).item<float>())) << "a class target out of range";
}

// The small linear algebra inside a capture: logdet and solve_triangular report failing matrices on the device, and
// replay() reads that report (one wait) and throws the op's own error after a failing replay; the next good replay
// runs normally. cholesky, which waits for its check, is refused; cholesky_ex (info on the device) is captured.
TEST(CudaGraph, SmallLinearAlgebraFailuresInAReplayAreReported) {
  NEED_GPU();
  if (std::getenv("OXMERA_TEST_DEVICE_NO_FUSED"))
    GTEST_SKIP() << "the test device offers no small-linalg kernels in this run (their host path cannot be captured)";
  Tensor B = uni({3, 4, 4}, -1, 1, 21);
  const Tensor good = matmul(B, B.transpose(-1, -2)) + eye(4);
  Tensor a = gpu(good), rhs = gpu(uni({3, 4, 2}, -1, 1, 22));
  (void)host(linalg::logdet(a));  // kernels loaded, nothing pending
  cuda::Graph g;
  Tensor ld, x, info;
  {
    cuda::GraphCapture capture(g);
    ld = linalg::logdet(a);
    x = linalg::solve_triangular(a, rhs, false);
    info = linalg::cholesky_ex(a).info;
    EXPECT_OXM_ERROR(linalg::cholesky(a), InvalidArgument, "reads its failure flags on the host");
  }
  g.replay();
  expect_match(ld, linalg::logdet(good), "captured logdet", 1e-5, 1e-5);
  expect_match(x, linalg::solve_triangular(good, host(rhs), false), "captured solve_triangular", 1e-4, 1e-5);
  EXPECT_EQ(host(info).to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0}));
  Tensor bad = good.clone();
  bad.select(0, 1).select(0, 2).select(0, 2).fill_(-5.0);
  a.copy_(gpu(bad));
  std::string what;
  EXPECT_EQ(error_kind([&] { g.replay(); }, &what), ErrorKind::NotPositiveDefinite);
  EXPECT_NE(what.find("batch index 1"), std::string::npos) << what;
  EXPECT_NE(what.find("found after cuda::Graph::replay()"), std::string::npos) << what;
  EXPECT_TRUE(std::isnan(host(ld).select(0, 1).item<float>()));
  EXPECT_EQ(host(info).to_vector<int64_t>(), (std::vector<int64_t>{0, 3, 0}));
  a.copy_(gpu(good));
  g.replay();  // the report starts again from nothing
  expect_match(ld, linalg::logdet(good), "after the error", 1e-5, 1e-5);
}

// Dropout inside a capture draws its mask on the device (Philox) from a seed taken once from the generator and an
// offset each replay advances: a new mask at every replay, kept fraction near 1 - p, kept values scaled by 1/(1-p),
// the gradient following the mask; the same generator state gives the same sequence of masks.
TEST(CudaGraph, DropoutDrawsAFreshMaskOnTheDeviceAtEveryReplay) {
  NEED_GPU();
  if (std::getenv("OXMERA_TEST_DEVICE_NO_FUSED"))
    GTEST_SKIP() << "the test device offers no dropout kernel in this run (dropout in a capture needs one)";
  const int64_t n = 4096;
  const double p = 0.25;
  Tensor x = gpu(uni({n}, 1, 2, 5)).requires_grad_();
  const std::vector<float> xv = host(x).to_vector<float>();
  auto replays = [&](uint64_t seed) {
    Generator gen(seed);
    cuda::Graph g;
    Tensor y, gx;
    x.zero_grad();
    {
      cuda::GraphCapture capture(g);
      y = nn::functional::dropout(x, p, true, gen);
      (y * 3.0).sum().backward();
      gx = x.grad();
    }
    std::vector<std::vector<float>> masks;
    for (int r = 0; r < 3; ++r) {
      g.replay();
      const std::vector<float> yv = host(y).to_vector<float>(), gv = host(gx).to_vector<float>();
      std::vector<float> m(static_cast<size_t>(n));
      int64_t kept = 0;
      for (size_t i = 0; i < m.size(); ++i) {
        m[i] = yv[i] != 0.0f;
        kept += yv[i] != 0.0f;
        if (yv[i] != 0.0f) {
          EXPECT_NEAR(yv[i], xv[i] / (1 - p), 1e-5) << i;
          EXPECT_NEAR(gv[i], 3.0 / (1 - p), 1e-5) << i;
        } else {
          EXPECT_EQ(gv[i], 0.0f) << i;
        }
      }
      EXPECT_NEAR(static_cast<double>(kept) / n, 1 - p, 0.03) << "replay " << r;
      masks.push_back(m);
    }
    return masks;
  };
  const auto a = replays(11), b = replays(11), c = replays(12);
  EXPECT_NE(a[0], a[1]);
  EXPECT_NE(a[1], a[2]);
  EXPECT_EQ(a, b) << "the same generator state gives the same masks";
  EXPECT_NE(a[0], c[0]);
}

// A tensor made before the capture, read by the captured work and dropped inside the capture: its memory is kept for
// the graph (neither eager work after the capture nor a later allocation of the capture may reuse it), so every
// replay reads its values.
TEST(CudaGraph, MemoryFreedDuringTheCaptureIsKeptForTheGraph) {
  NEED_GPU();
  const Tensor v = uni({512}, -1, 1, 11);
  Tensor y = gpu(v) * 2.0;  // before the capture
  cuda::Graph g;
  Tensor out;
  {
    cuda::GraphCapture capture(g);
    out = y + 1.0;
    y = Tensor();                                       // the graph still reads its block
    Tensor later = full({512}, 7.0, DType::F32, kGpu);  // same size: must not get that block
    out = out + later * 0.0;
  }
  std::vector<Tensor> eager;
  for (int i = 0; i < 16; ++i) eager.push_back(full({512}, 99.0, DType::F32, kGpu));  // same size: would reuse it
  g.replay();
  expect_match(out, v * 2.0 + 1.0, "replay after eager allocations");
  g.replay();
  expect_match(out, v * 2.0 + 1.0, "second replay");
}
