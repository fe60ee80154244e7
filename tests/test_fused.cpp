// Fused ops as backend offerings (src/ops/fused.hpp): every registry entry has a name, an offering and a
// composite fallback; each fallback gives the values of the backend kernel it replaces (f32 and f64, against
// the CPU's kernels, run on the CPU itself, or for the small linear algebra against the kernel the test device runs and
// the host path); and with the host-memory test device offering no fused op at all, models (losses, convolutions,
// optimizers, the demo training run) still train and match the CPU, which runs the fused kernels (f32: a GPU kind
// holds f32 tensors only).
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/common/nn_math.hpp"
#include "backend/cpu/blas.hpp"
#include "demo_training.hpp"
#include "fake_device.hpp"
#include "ops/fused.hpp"
#include "test_util.hpp"

using namespace oxt;
namespace ops = oxmera::ops;
namespace d = oxmera::detail;
namespace la = oxmera::linalg;

namespace {

const Device kCpu = Device::cpu(), kDev = Device::cuda();

// Runs `call` with the CPU backend's kernel (which must offer it) and, on a copy of the outputs the caller
// prepares in `fallback_call`, with the registry's fallback.
void run_both(ops::FusedCall& kernel_call, ops::FusedCall& fallback_call) {
  ASSERT_TRUE(d::cpu_backend().supports(kernel_call)) << ops::fused_op_name(ops::fused_op(kernel_call));
  ops::run_fused(kernel_call, kCpu);
  ops::run_fused_fallback(fallback_call, kCpu);
}

std::string dname(DType t) { return t == DType::F64 ? "f64" : "f32"; }
double tol(DType t) { return t == DType::F64 ? 1e-12 : 2e-6; }

TEST(FusedRegistry, EveryOpHasANameAFallbackAndAnOffering) {
  for (int i = 0; i < ops::kNumFusedOps; ++i) {
    const ops::FusedOpInfo& info = ops::fused_op_info(static_cast<ops::FusedOp>(i));
    EXPECT_EQ(static_cast<int>(info.op), i);
    ASSERT_NE(info.name, nullptr);
    EXPECT_GT(std::string(info.name).size(), 0u) << i;
    EXPECT_NE(info.fallback, nullptr) << info.name;
    ASSERT_NE(info.offered_by, nullptr);
    EXPECT_GT(std::string(info.offered_by).size(), 0u) << info.name;
  }
}

// A backend that offers nothing has the defaults: supports() is false and run() names the op and the backend.
TEST(FusedRegistry, TheDefaultBackendOffersNothing) {
  oxt_fake::HostMemoryDevice bare;  // not registered
  Tensor x = randn({2, 3}, 1), t = from_vector<int64_t>({0, 2}, {2}), loss = empty({2}), lse = empty({2});
  ops::FusedCall call = ops::CrossEntropyCall{x.impl(), t.impl(), 0, 1, loss.impl(), lse.impl()};
  EXPECT_TRUE(bare.supports(call));  // the test device forwards to the CPU
  bare.offer_fused = false;
  EXPECT_FALSE(bare.supports(call));
  EXPECT_OXM_ERROR(bare.d::Backend::run(call), NotImplemented, "cross_entropy: the host-memory test device backend");
  EXPECT_FALSE(bare.d::Backend::supports(call));
}

TEST(FusedFallback, CrossEntropyAndItsBackwardMatchTheCpuKernels) {
  for (DType dt : {DType::F32, DType::F64})
    for (auto [R, C] : {std::pair<int64_t, int64_t>{1, 1}, {5, 3}, {7, 40}, {64, 10}})
      for (double ls : {0.0, 0.2})
        for (bool strided : {false, true}) {
          const std::string what = dname(dt) + " [" + std::to_string(R) + ", " + std::to_string(C) + "] ls " +
                                   std::to_string(ls) + (strided ? " strided" : "");
          Tensor x = (randn({strided ? C : R, strided ? R : C}, 3, dt) * 4.0);
          if (strided) x = x.t();
          std::vector<int64_t> tv(static_cast<size_t>(R));
          for (int64_t r = 0; r < R; ++r) tv[static_cast<size_t>(r)] = r % 4 == 2 ? -1 : (r * 7) % C;
          Tensor t = from_vector<int64_t>(tv, {R});
          const double scale = 1.0 / 3.0;
          Tensor l1 = empty({R}, dt), e1 = empty({R}, dt), l2 = empty({R}, dt), e2 = empty({R}, dt);
          ops::FusedCall k = ops::CrossEntropyCall{x.impl(), t.impl(), ls, scale, l1.impl(), e1.impl()};
          ops::FusedCall f = ops::CrossEntropyCall{x.impl(), t.impl(), ls, scale, l2.impl(), e2.impl()};
          run_both(k, f);
          expect_close(values(l2), values(l1), tol(dt), tol(dt), "loss " + what);
          expect_close(values(e2), values(e1), tol(dt), tol(dt), "lse " + what);
          for (bool broadcast_g : {false, true}) {
            Tensor g = broadcast_g ? scalar(0.7, dt).expand({R}) : randn({R}, 5, dt);
            Tensor g1 = empty({R, C}, dt), g2 = empty({R, C}, dt);
            ops::FusedCall kb =
                ops::CrossEntropyBackwardCall{x.impl(), t.impl(), e1.impl(), g.impl(), ls, scale, g1.impl()};
            ops::FusedCall fb =
                ops::CrossEntropyBackwardCall{x.impl(), t.impl(), e1.impl(), g.impl(), ls, scale, g2.impl()};
            run_both(kb, fb);
            expect_close(values(g2), values(g1), tol(dt), tol(dt), "grad " + what);
          }
        }
}

TEST(FusedFallback, SoftmaxBackwardMatchesTheCpuKernel) {
  for (DType dt : {DType::F32, DType::F64})
    for (const Shape& shape : {Shape{1}, Shape{3, 5}, Shape{2, 4, 64}, Shape{3, 300}, Shape{1, 17}})
      for (bool log : {false, true}) {
        const std::string what = dname(dt) + (log ? " log_softmax " : " softmax ") + std::to_string(shape.back());
        const int64_t last = static_cast<int64_t>(shape.size()) - 1;
        Tensor x = randn(shape, 7, dt) * 3.0;
        Tensor y = log ? x.log_softmax(last) : x.softmax(last), g = randn(shape, 8, dt);
        Tensor g1 = empty(shape, dt), g2 = empty(shape, dt);
        ops::FusedCall k = ops::SoftmaxBackwardCall{y.impl(), g.impl(), g1.impl(), last, log};
        ops::FusedCall f = ops::SoftmaxBackwardCall{y.impl(), g.impl(), g2.impl(), last, log};
        run_both(k, f);
        expect_close(values(g2), values(g1), tol(dt), tol(dt), what);
      }
  // Not the last dim, or a strided gradient: not offered (the fallback runs), and the gradient is still right.
  Tensor x = randn({4, 6}, 9), g = randn({6, 4}, 10).t();
  Tensor y = x.softmax(0), out = empty({4, 6});
  EXPECT_FALSE(d::cpu_backend().supports(ops::FusedCall{ops::SoftmaxBackwardCall{y.impl(), g.impl(), out.impl(), 0}}));
  Tensor xr = x.clone().requires_grad_();
  xr.softmax(1).backward(g);
  Tensor yr = x.softmax(1);
  expect_close(values(xr.grad()), values(yr * (g - (g * yr).sum({1}, true))), 1e-6, 1e-6, "strided g");
}

TEST(FusedFallback, LayerNormAndItsBackwardMatchTheCpuKernels) {
  // (the kernel takes rows in blocks of 16 and sums 16 vectors before widening to f64, its column sums go in blocks
  // of 256: the shapes cross each of those edges)
  for (DType dt : {DType::F32, DType::F64})
    for (auto [R, n] : {std::pair<int64_t, int64_t>{1, 1}, {5, 3}, {7, 64}, {3, 300}, {33, 17}, {17, 600}, {40, 256}})
      for (int affine = 0; affine < 4; ++affine) {
        const std::string what =
            dname(dt) + " [" + std::to_string(R) + ", " + std::to_string(n) + "] affine " + std::to_string(affine);
        Tensor x = randn({R, n}, 3, dt) * 2.0 + 0.5;
        Tensor w = randn({n}, 4, dt), b = randn({n}, 5, dt), g = randn({R, n}, 6, dt);
        const d::TensorImpl* wp = affine & 1 ? w.impl() : nullptr;
        const d::TensorImpl* bp = affine & 2 ? b.impl() : nullptr;
        Tensor y1 = empty({R, n}, dt), m1 = empty({R, 1}, dt), r1 = empty({R, 1}, dt);
        Tensor y2 = empty({R, n}, dt), m2 = empty({R, 1}, dt), r2 = empty({R, 1}, dt);
        ops::FusedCall k = ops::LayerNormCall{x.impl(), wp, bp, 1e-5, n, y1.impl(), m1.impl(), r1.impl()};
        ops::FusedCall f = ops::LayerNormCall{x.impl(), wp, bp, 1e-5, n, y2.impl(), m2.impl(), r2.impl()};
        run_both(k, f);
        expect_close(values(y2), values(y1), tol(dt), tol(dt), "y " + what);
        expect_close(values(m2), values(m1), tol(dt), tol(dt), "mean " + what);
        expect_close(values(r2), values(r1), tol(dt), tol(dt), "rstd " + what);
        Tensor gx1 = empty({R, n}, dt), gw1 = empty({n}, dt), gb1 = empty({n}, dt);
        Tensor gx2 = empty({R, n}, dt), gw2 = empty({n}, dt), gb2 = empty({n}, dt);
        ops::FusedCall kb = ops::LayerNormBackwardCall{x.impl(), g.impl(),   wp,         m1.impl(), r1.impl(),
                                                       n,        gx1.impl(), gw1.impl(), gb1.impl()};
        ops::FusedCall fb = ops::LayerNormBackwardCall{x.impl(), g.impl(),   wp,         m1.impl(), r1.impl(),
                                                       n,        gx2.impl(), gw2.impl(), gb2.impl()};
        run_both(kb, fb);
        expect_close(values(gx2), values(gx1), 5 * tol(dt), 5 * tol(dt), "grad x " + what);
        expect_close(values(gw2), values(gw1), 5 * tol(dt), 5 * tol(dt), "grad weight " + what);
        expect_close(values(gb2), values(gb1), 5 * tol(dt), 5 * tol(dt), "grad bias " + what);
      }
  // A normalized_shape of two dims: weight, bias and their gradients are [4, 5] (the fallback once broadcast them
  // against rows of 20 and threw).
  Tensor x = randn({3, 4, 5}, 3) * 2.0, w = randn({4, 5}, 4), b = randn({4, 5}, 5), g = randn({3, 4, 5}, 6);
  Tensor y1 = empty({3, 4, 5}), m1 = empty({3, 1, 1}), r1 = empty({3, 1, 1});
  Tensor y2 = empty({3, 4, 5}), m2 = empty({3, 1, 1}), r2 = empty({3, 1, 1});
  ops::FusedCall k = ops::LayerNormCall{x.impl(), w.impl(), b.impl(), 1e-5, 20, y1.impl(), m1.impl(), r1.impl()};
  ops::FusedCall f = ops::LayerNormCall{x.impl(), w.impl(), b.impl(), 1e-5, 20, y2.impl(), m2.impl(), r2.impl()};
  run_both(k, f);
  expect_close(values(y2), values(y1), 2e-6, 2e-6, "y, normalized_shape [4, 5]");
  Tensor gx1 = empty({3, 4, 5}), gw1 = empty({4, 5}), gb1 = empty({4, 5});
  Tensor gx2 = empty({3, 4, 5}), gw2 = empty({4, 5}), gb2 = empty({4, 5});
  ops::FusedCall kb = ops::LayerNormBackwardCall{x.impl(), g.impl(),   w.impl(),   m1.impl(), r1.impl(),
                                                 20,       gx1.impl(), gw1.impl(), gb1.impl()};
  ops::FusedCall fb = ops::LayerNormBackwardCall{x.impl(), g.impl(),   w.impl(),   m1.impl(), r1.impl(),
                                                 20,       gx2.impl(), gw2.impl(), gb2.impl()};
  run_both(kb, fb);
  expect_close(values(gx2), values(gx1), 1e-5, 1e-5, "grad x, normalized_shape [4, 5]");
  expect_close(values(gw2), values(gw1), 1e-5, 1e-5, "grad weight, normalized_shape [4, 5]");
  expect_close(values(gb2), values(gb1), 1e-5, 1e-5, "grad bias, normalized_shape [4, 5]");
}

// clip_grad_norm_'s list norm and scale: the CPU kernels (one pass per tensor, terms summed in f64 lanes, fixed blocks
// above 32768 elements) against the fallback's ops, for p = 1, 2, 3 and inf, f32 / f64 tensors (mixed in one list)
// into an f32 or f64 out, sizes around the vector and block edges, an empty tensor, and NaN through the max.
TEST(FusedFallback, TensorListNormAndScaleMatchTheCpuKernels) {
  std::vector<Tensor> ts;
  int seed = 60;
  for (int64_t n : {1, 15, 17, 64, 1000, 32768, 70001}) ts.push_back(randn({n}, seed++) * 3.0);
  ts.push_back(randn({3, 5}, seed++, DType::F64));
  ts.push_back(empty({0}));
  std::vector<const d::TensorImpl*> list;
  for (const Tensor& t : ts) list.push_back(t.impl());
  for (DType od : {DType::F32, DType::F64})
    for (double p : {1.0, 2.0, 3.0, std::numeric_limits<double>::infinity()}) {
      const std::string what = "p " + std::to_string(p) + " out " + dname(od);
      Tensor o1 = empty({static_cast<int64_t>(list.size())}, od), o2 = empty({static_cast<int64_t>(list.size())}, od);
      ops::FusedCall k = ops::TensorListNormCall{list.data(), list.size(), p, o1.impl()};
      ops::FusedCall f = ops::TensorListNormCall{list.data(), list.size(), p, o2.impl()};
      run_both(k, f);
      // (the fallback's sums of the f32 tensors are f32 values: f32 precision whatever out's dtype)
      expect_close(values(o1), values(o2), 2e-6, 1e-12, what);
      EXPECT_EQ(values(o1).back(), 0.0) << what << ": the empty tensor";
    }
  // NaN propagates through the max, and a strided tensor is not offered (the fallback runs)
  Tensor bad = from_vector<float>({1.f, std::nanf(""), -7.f}, {3});
  const d::TensorImpl* one[] = {bad.impl()};
  Tensor o = empty({1}, DType::F64);
  ops::FusedCall nan_call = ops::TensorListNormCall{one, 1, std::numeric_limits<double>::infinity(), o.impl()};
  ASSERT_TRUE(d::cpu_backend().supports(nan_call));
  ops::run_fused(nan_call, kCpu);
  EXPECT_TRUE(std::isnan(values(o)[0]));
  Tensor strided = randn({4, 6}, 70).t();
  const d::TensorImpl* st[] = {strided.impl()};
  EXPECT_FALSE(d::cpu_backend().supports(ops::FusedCall{ops::TensorListNormCall{st, 1, 2.0, o.impl()}}));
  // scale: every tensor multiplied in place, as mul_ does
  std::vector<Tensor> a, b;
  std::vector<d::TensorImpl*> la_, lb;
  for (const Tensor& t : ts) {
    a.push_back(t.clone());
    b.push_back(t.clone());
    la_.push_back(a.back().impl());
    lb.push_back(b.back().impl());
  }
  ops::FusedCall ks = ops::TensorListScaleCall{la_.data(), la_.size(), 0.37};
  ops::FusedCall fs = ops::TensorListScaleCall{lb.data(), lb.size(), 0.37};
  run_both(ks, fs);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(values(a[i]), values(b[i])) << "scale, tensor " << i;
}

// linear: the CPU's bias rows + beta-1 GEMM against the fallback (GEMM, then the bias added), with and without a
// bias, row- and column-major operands (a transposed x, a transposed weight), K = 0 and empty outputs; and both
// against the plain f64 reference x w^T + b.
TEST(FusedFallback, LinearMatchesTheCpuKernelAndTheReference) {
  for (DType dt : {DType::F32, DType::F64})
    for (auto [M, K, N] : {std::array<int64_t, 3>{1, 1, 1}, {5, 3, 7}, {33, 64, 17}, {4, 0, 3}, {0, 5, 2}, {3, 4, 0}})
      for (int variant = 0; variant < 8; ++variant) {
        const bool with_bias = variant & 1, x_cols = variant & 2, w_cols = variant & 4;
        const std::string what = dname(dt) + " [" + std::to_string(M) + ", " + std::to_string(K) + "] x [" +
                                 std::to_string(N) + ", " + std::to_string(K) + "]^T variant " +
                                 std::to_string(variant);
        // A column-major operand: the transpose of a contiguous tensor of the transposed shape.
        Tensor x = x_cols ? randn({K, M}, 3, dt).t() : randn({M, K}, 3, dt);
        Tensor w = w_cols ? randn({K, N}, 4, dt).t() : randn({N, K}, 4, dt);
        Tensor b = randn({N}, 5, dt);
        const d::TensorImpl* bp = with_bias ? b.impl() : nullptr;
        Tensor y1 = full({M, N}, 123.0, dt), y2 = full({M, N}, -7.0, dt);
        ops::FusedCall k = ops::LinearCall{x.impl(), w.impl(), bp, y1.impl()};
        ops::FusedCall f = ops::LinearCall{x.impl(), w.impl(), bp, y2.impl()};
        run_both(k, f);
        const std::vector<double> xv = values(x), wv = values(w), bv = values(b);
        std::vector<double> ref(static_cast<size_t>(M * N));
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double s = with_bias ? bv[static_cast<size_t>(j)] : 0.0;
            for (int64_t q = 0; q < K; ++q)
              s += xv[static_cast<size_t>(i * K + q)] * wv[static_cast<size_t>(j * K + q)];
            ref[static_cast<size_t>(i * N + j)] = s;
          }
        expect_close(values(y1), ref, 10 * tol(dt), 10 * tol(dt), "kernel " + what);
        expect_close(values(y2), ref, 10 * tol(dt), 10 * tol(dt), "fallback " + what);
        {  // the GELU epilogue: out = gelu(u) and gelu_grad = gelu'(u) for u = x w^T (+ bias)
          Tensor o1 = full({M, N}, 5.0, dt), d1 = full({M, N}, 5.0, dt), o2 = full({M, N}, -5.0, dt),
                 d2 = full({M, N}, -5.0, dt);
          ops::LinearCall kg{x.impl(), w.impl(), bp, o1.impl()}, fg{x.impl(), w.impl(), bp, o2.impl()};
          kg.gelu_grad = d1.impl();
          fg.gelu_grad = d2.impl();
          ops::FusedCall kgc = kg, fgc = fg;
          run_both(kgc, fgc);
          std::vector<double> act(ref.size()), der(ref.size());
          for (size_t i = 0; i < ref.size(); ++i) {
            const double u = ref[i], cdf = 0.5 * std::erfc(-u / std::sqrt(2.0));
            act[i] = u * cdf;
            der[i] = cdf + u * std::exp(-0.5 * u * u) / std::sqrt(2.0 * M_PI);
          }
          expect_close(values(o1), act, 10 * tol(dt), 10 * tol(dt), "gelu kernel " + what);
          expect_close(values(d1), der, 10 * tol(dt), 10 * tol(dt), "gelu' kernel " + what);
          expect_close(values(o2), act, 10 * tol(dt), 10 * tol(dt), "gelu fallback " + what);
          expect_close(values(d2), der, 10 * tol(dt), 10 * tol(dt), "gelu' fallback " + what);
        }
        // accumulate: out += x w^T (+ bias) over what out holds.
        Tensor a1 = full({M, N}, 0.25, dt), a2 = full({M, N}, 0.25, dt);
        ops::FusedCall ka = ops::LinearCall{x.impl(), w.impl(), bp, a1.impl(), true};
        ops::FusedCall fa = ops::LinearCall{x.impl(), w.impl(), bp, a2.impl(), true};
        run_both(ka, fa);
        for (double& r : ref) r += 0.25;
        expect_close(values(a1), ref, 10 * tol(dt), 10 * tol(dt), "accumulating kernel " + what);
        expect_close(values(a2), ref, 10 * tol(dt), 10 * tol(dt), "accumulating fallback " + what);
      }
}

// linear with stacked replicas: x [R, M, K] (its own rows per replica, or one [M, K] broadcast with batch stride
// 0), weight [R, N, K], bias [R, N]; shapes on both sides of the small-output (beta = 0, bias after) and small A B^T
// (B^T copied out) rules of the CPU kernel and its GEMM.
TEST(FusedFallback, StackedLinearMatchesTheCpuKernelAndTheReference) {
  constexpr int64_t R = 3;
  for (DType dt : {DType::F32, DType::F64})
    for (auto [M, K, N] :
         {std::array<int64_t, 3>{64, 8, 16}, {70, 3, 1}, {65, 16, 1}, {5, 3, 7}, {300, 40, 130}, {4, 0, 3}, {0, 5, 2}})
      for (int variant = 0; variant < 8; ++variant) {
        const bool with_bias = variant & 1, shared_x = variant & 2, w_cols = variant & 4;
        const std::string what = dname(dt) + " [" + std::to_string(R) + ", " + std::to_string(M) + ", " +
                                 std::to_string(K) + "] x [" + std::to_string(N) + ", " + std::to_string(K) +
                                 "]^T variant " + std::to_string(variant);
        Tensor x = shared_x ? randn({M, K}, 3, dt).unsqueeze(0).expand({R, M, K}) : randn({R, M, K}, 3, dt);
        Tensor w = w_cols ? randn({R, K, N}, 4, dt).transpose(1, 2) : randn({R, N, K}, 4, dt);
        Tensor b = randn({R, N}, 5, dt);
        const d::TensorImpl* bp = with_bias ? b.impl() : nullptr;
        Tensor y1 = full({R, M, N}, 123.0, dt), y2 = full({R, M, N}, -7.0, dt);
        ops::FusedCall k = ops::LinearCall{x.impl(), w.impl(), bp, y1.impl()};
        ops::FusedCall f = ops::LinearCall{x.impl(), w.impl(), bp, y2.impl()};
        run_both(k, f);
        const std::vector<double> xv = values(x), wv = values(w), bv = values(b);
        std::vector<double> ref(static_cast<size_t>(R * M * N));
        for (int64_t r = 0; r < R; ++r)
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) {
              double s = with_bias ? bv[static_cast<size_t>(r * N + j)] : 0.0;
              for (int64_t q = 0; q < K; ++q)
                s += xv[static_cast<size_t>((r * M + i) * K + q)] * wv[static_cast<size_t>((r * N + j) * K + q)];
              ref[static_cast<size_t>((r * M + i) * N + j)] = s;
            }
        expect_close(values(y1), ref, 10 * tol(dt), 10 * tol(dt), "kernel " + what);
        expect_close(values(y2), ref, 10 * tol(dt), 10 * tol(dt), "fallback " + what);
      }
}

// The CPU GEMM (OpenBLAS, or the portable kernel without it) against a plain f64 loop, row-major
// C = alpha op(A) op(B) + beta C, for every transposition, shapes inside and outside the small A B^T rule (B^T
// copied out, or used in place when it is a single row), padded leading dimensions, alpha != 1 and beta != 0.
TEST(CpuGemm, MatchesTheReferenceAroundTheSmallTransposedRule) {
  struct Case {
    int64_t m, n, k;
  };
  const std::vector<Case> cases = {{64, 16, 8}, {64, 1, 16},  {64, 1, 17},   {256, 32, 32}, {255, 2, 64},
                                   {63, 16, 8}, {64, 16, 17}, {1024, 8, 64}, {16, 8, 2},    {3, 5, 7}};
  for (const Case& c : cases)
    for (int variant = 0; variant < 8; ++variant) {
      const bool ta = variant & 1, tb = variant & 2, padded = variant & 4;
      const int64_t pad = padded ? 3 : 0;
      const int64_t lda = (ta ? c.m : c.k) + pad, ldb = (tb ? c.k : c.n) + pad, ldc = c.n + pad;
      const int64_t a_rows = ta ? c.k : c.m, b_rows = tb ? c.n : c.k;
      std::vector<double> a(static_cast<size_t>(a_rows * lda)), b(static_cast<size_t>(b_rows * ldb)),
          cm(static_cast<size_t>(c.m * ldc));
      Generator g(static_cast<uint64_t>(c.m * 131 + c.n * 17 + c.k + variant));
      for (auto* v : {&a, &b, &cm})
        for (double& e : *v) e = 2.0 * g.next_double() - 1.0;
      const double alpha = 0.75, beta = padded ? 0.5 : 0.0;
      std::vector<double> ref = cm;
      for (int64_t i = 0; i < c.m; ++i)
        for (int64_t j = 0; j < c.n; ++j) {
          double s = 0;
          for (int64_t p = 0; p < c.k; ++p)
            s += a[static_cast<size_t>(ta ? p * lda + i : i * lda + p)] *
                 b[static_cast<size_t>(tb ? j * ldb + p : p * ldb + j)];
          double& r = ref[static_cast<size_t>(i * ldc + j)];
          r = alpha * s + (beta == 0.0 ? 0.0 : beta * r);
        }
      const d::GemmArgs args{ta, tb, c.m, c.n, c.k, lda, ldb, ldc};
      const std::string what = "m " + std::to_string(c.m) + " n " + std::to_string(c.n) + " k " + std::to_string(c.k) +
                               " variant " + std::to_string(variant);
      std::vector<double> cd = cm;
      d::dgemm(args, alpha, a.data(), b.data(), beta, cd.data());
      std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end()), cf(cm.begin(), cm.end());
      d::sgemm(args, float(alpha), af.data(), bf.data(), float(beta), cf.data());
      for (int64_t i = 0; i < c.m; ++i)
        for (int64_t j = 0; j < c.n; ++j) {
          const size_t at = static_cast<size_t>(i * ldc + j);
          ASSERT_NEAR(cd[at], ref[at], 1e-12 * (1 + c.k)) << "dgemm " << what << " at " << i << ", " << j;
          ASSERT_NEAR(cf[at], ref[at], 1e-5 * (1 + c.k)) << "sgemm " << what << " at " << i << ", " << j;
        }
      // The padding between rows of C is never written.
      for (int64_t i = 0; i < c.m; ++i)
        for (int64_t j = c.n; j < ldc; ++j) {
          const size_t at = static_cast<size_t>(i * ldc + j);
          ASSERT_EQ(cd[at], cm[at]) << "dgemm wrote padding, " << what;
          ASSERT_EQ(cf[at], float(cm[at])) << "sgemm wrote padding, " << what;
        }
    }
}

TEST(FusedFallback, Im2colAndCol2imMatchTheCpuKernels) {
  struct G {
    int64_t H, W, kh, kw, sh, sw, ph, pw, dh, dw;
  };
  const std::vector<G> geoms = {{5, 5, 3, 3, 1, 1, 0, 0, 1, 1},
                                {6, 7, 3, 2, 2, 1, 1, 2, 1, 1},
                                {9, 8, 3, 3, 2, 3, 2, 1, 2, 2},
                                {4, 4, 1, 1, 1, 1, 0, 0, 1, 1},
                                {3, 5, 2, 4, 1, 2, 1, 0, 1, 1}};
  for (DType dt : {DType::F32, DType::F64})
    for (const G& q : geoms)
      for (double pad_value : {0.0, -std::numeric_limits<double>::infinity()}) {
        d::ConvGeometry g{q.kh, q.kw, q.sh, q.sw, q.ph, q.pw, q.dh, q.dw, 0, 0};
        g.oh = (q.H + 2 * q.ph - q.dh * (q.kh - 1) - 1) / q.sh + 1;
        g.ow = (q.W + 2 * q.pw - q.dw * (q.kw - 1) - 1) / q.sw + 1;
        const std::string what = dname(dt) + " H" + std::to_string(q.H) + " k" + std::to_string(q.kh) + "x" +
                                 std::to_string(q.kw) + " pad " + std::to_string(pad_value);
        const int64_t N = 2, C = 3, K = q.kh * q.kw, L = g.oh * g.ow;
        Tensor x = randn({C, N, q.H, q.W}, 11, dt).transpose(0, 1);  // any strides
        Tensor c1 = empty({N, C * K, L}, dt), c2 = empty({N, C * K, L}, dt);
        ops::FusedCall k = ops::Im2colCall{x.impl(), c1.impl(), g, pad_value};
        ops::FusedCall f = ops::Im2colCall{x.impl(), c2.impl(), g, pad_value};
        run_both(k, f);
        EXPECT_EQ(values(c2), values(c1)) << "im2col " << what;
        if (pad_value != 0) continue;
        Tensor cols = randn({N, C * K, L}, 12, dt);
        Tensor x1 = zeros({N, C, q.H, q.W}, dt), x2 = zeros({N, C, q.H, q.W}, dt);
        ops::FusedCall kb = ops::Col2imCall{cols.impl(), x1.impl(), g};
        ops::FusedCall fb = ops::Col2imCall{cols.impl(), x2.impl(), g};
        run_both(kb, fb);
        expect_close(values(x2), values(x1), tol(dt), tol(dt), "col2im " + what);
        // The ones row (conv2d's bias column): the same columns with one more row of ones per image, and col2im
        // skipping it; zero_first ignores what x_grad held (NaN here).
        Tensor o1 = empty({N, C * K + 1, L}, dt), o2 = empty({N, C * K + 1, L}, dt);
        ops::FusedCall ko = ops::Im2colCall{x.impl(), o1.impl(), g, pad_value, true};
        ops::FusedCall fo = ops::Im2colCall{x.impl(), o2.impl(), g, pad_value, true};
        run_both(ko, fo);
        EXPECT_EQ(values(o1.narrow(1, 0, C * K)), values(c1)) << "im2col ones_row, kernel " << what;
        EXPECT_EQ(values(o2.narrow(1, 0, C * K)), values(c1)) << "im2col ones_row, fallback " << what;
        for (double v : values(o1.narrow(1, C * K, 1))) EXPECT_EQ(v, 1.0) << what;
        for (double v : values(o2.narrow(1, C * K, 1))) EXPECT_EQ(v, 1.0) << what;
        Tensor cols1 = cat({cols, randn({N, 1, L}, 13, dt)}, 1);
        Tensor x3 = full({N, C, q.H, q.W}, NAN, dt), x4 = full({N, C, q.H, q.W}, NAN, dt);
        ops::FusedCall kz = ops::Col2imCall{cols1.impl(), x3.impl(), g, true, true};
        ops::FusedCall fz = ops::Col2imCall{cols1.impl(), x4.impl(), g, true, true};
        run_both(kz, fz);
        EXPECT_EQ(bits(x3), bits(x1)) << "col2im ones_row zero_first, kernel " << what;
        expect_close(values(x4), values(x1), tol(dt), tol(dt), "col2im ones_row zero_first, fallback " + what);
      }
}

// max pooling: values and indices (bit for bit) and the backward scatter against the fallback, f32 and f64, a
// strided input, padding, dilation, stride != kernel, ties, NaN and -inf, an empty batch and a window that lies
// entirely in the padding (-inf, index -1, no gradient).
TEST(FusedFallback, MaxPool2dAndItsBackwardMatchTheCpuKernels) {
  struct G {
    int64_t N, H, W, kh, kw, sh, sw, ph, pw, dh, dw;
  };
  const std::vector<G> geoms = {{2, 6, 6, 2, 2, 2, 2, 0, 0, 1, 1},
                                {2, 7, 5, 3, 2, 2, 1, 1, 1, 1, 1},
                                {1, 9, 8, 3, 3, 1, 2, 1, 1, 2, 2},
                                {2, 5, 7, 2, 4, 3, 1, 1, 2, 1, 1},
                                {2, 4, 4, 1, 1, 1, 1, 0, 0, 1, 1},
                                {0, 6, 6, 2, 2, 2, 2, 0, 0, 1, 1},
                                {1, 1, 3, 2, 2, 1, 1, 1, 1, 2, 1},
                                // 2 x 2 at stride 2 (the AVX-512 row kernel): 14 outputs a row, 16 + 4, an odd
                                // width whose last column no window reads, and 16 + 1
                                {2, 28, 28, 2, 2, 2, 2, 0, 0, 1, 1},
                                {1, 9, 41, 2, 2, 2, 2, 0, 0, 1, 1},
                                {1, 4, 34, 2, 2, 2, 2, 0, 0, 1, 1}};
  for (DType dt : {DType::F32, DType::F64})
    for (const G& q : geoms)
      for (int values_kind = 0; values_kind < 3; ++values_kind) {  // distinct, ties, ties + NaN + -inf
        d::ConvGeometry g{q.kh, q.kw, q.sh, q.sw, q.ph, q.pw, q.dh, q.dw, 0, 0};
        g.oh = (q.H + 2 * q.ph - q.dh * (q.kh - 1) - 1) / q.sh + 1;
        g.ow = (q.W + 2 * q.pw - q.dw * (q.kw - 1) - 1) / q.sw + 1;
        const std::string what = dname(dt) + " N" + std::to_string(q.N) + " H" + std::to_string(q.H) + " k" +
                                 std::to_string(q.kh) + "x" + std::to_string(q.kw) + " values " +
                                 std::to_string(values_kind);
        const int64_t C = 3;
        Tensor base = randn({C, q.N, q.H, q.W}, 21, dt);
        if (values_kind > 0) base = (base * 1.5).round();
        if (values_kind == 2) {
          std::vector<double> v = values(base);
          for (size_t i = 0; i < v.size(); ++i) {
            if (i % 5 == 1) v[i] = NAN;
            if (i % 7 == 3) v[i] = -INFINITY;
          }
          base = from_vector<double>(v, base.shape()).to(dt);
        }
        Tensor x = base.transpose(0, 1);  // any strides
        const Shape os{q.N, C, g.oh, g.ow};
        Tensor o1 = empty(os, dt), o2 = empty(os, dt), i1 = empty(os, DType::I64), i2 = empty(os, DType::I64);
        ops::FusedCall k = ops::MaxPool2dCall{x.impl(), o1.impl(), i1.impl(), g};
        ops::FusedCall f = ops::MaxPool2dCall{x.impl(), o2.impl(), i2.impl(), g};
        run_both(k, f);
        EXPECT_EQ(bits(o2), bits(o1)) << "max_pool2d values " << what;
        EXPECT_EQ(i2.to_vector<int64_t>(), i1.to_vector<int64_t>()) << "max_pool2d indices " << what;
        if (q.H == 1) {  // every window has no in-image row
          for (double v : values(o1)) EXPECT_EQ(v, -INFINITY) << what;
          for (int64_t v : i1.to_vector<int64_t>()) EXPECT_EQ(v, -1) << what;
        }
        Tensor gy = randn(os, 22, dt);
        Tensor x1 = zeros({q.N, C, q.H, q.W}, dt), x2 = zeros({q.N, C, q.H, q.W}, dt);
        ops::FusedCall kb = ops::MaxPool2dBackwardCall{gy.impl(), i1.impl(), x1.impl()};
        ops::FusedCall fb = ops::MaxPool2dBackwardCall{gy.impl(), i1.impl(), x2.impl()};
        run_both(kb, fb);
        expect_close(values(x2), values(x1), tol(dt), tol(dt), "max_pool2d backward " + what);
        // zero_first: what grad_x held before is ignored (NaN here), and the result is the same.
        Tensor x3 = full({q.N, C, q.H, q.W}, NAN, dt), x4 = full({q.N, C, q.H, q.W}, NAN, dt);
        ops::FusedCall kz = ops::MaxPool2dBackwardCall{gy.impl(), i1.impl(), x3.impl(), true};
        ops::FusedCall fz = ops::MaxPool2dBackwardCall{gy.impl(), i1.impl(), x4.impl(), true};
        run_both(kz, fz);
        EXPECT_EQ(bits(x3), bits(x1)) << "max_pool2d backward, zero_first, kernel " << what;
        expect_close(values(x4), values(x1), tol(dt), tol(dt), "max_pool2d backward, zero_first, fallback " + what);
        double gsum = 0;  // what reaches x: every output's gradient but those of empty windows
        const std::vector<int64_t> iv = i1.to_vector<int64_t>();
        const std::vector<double> gv = values(gy);
        for (size_t l = 0; l < iv.size(); ++l) gsum += iv[l] >= 0 ? gv[l] : 0.0;
        EXPECT_NEAR(values(x1.sum())[0], gsum, 1e-4) << what;
      }
}

// Every optimizer kind and option the kernels branch on, three steps each, f32 and f64.
TEST(FusedFallback, OptimizerStepsMatchTheCpuKernel) {
  using K = d::OptimizerStep::Kind;
  std::vector<d::OptimizerStep> cases;
  auto add = [&](K kind, auto&& set) {
    d::OptimizerStep s;
    s.kind = kind;
    s.lr = 0.05;
    set(s);
    cases.push_back(s);
  };
  add(K::SGD, [](auto&) {});
  add(K::SGD, [](auto& s) { s.weight_decay = 0.1, s.momentum = 0.9, s.dampening = 0.1, s.maximize = true; });
  add(K::SGD, [](auto& s) { s.momentum = 0.8, s.nesterov = true; });
  add(K::Adam, [](auto&) {});
  add(K::Adam, [](auto& s) { s.weight_decay = 0.05, s.amsgrad = true, s.maximize = true; });
  add(K::AdamW, [](auto& s) { s.weight_decay = 0.02; });
  add(K::AdamW, [](auto& s) { s.weight_decay = 0.02, s.amsgrad = true, s.beta1 = 0.5, s.eps = 1e-3; });
  add(K::RMSprop, [](auto&) {});
  add(K::RMSprop, [](auto& s) { s.momentum = 0.5, s.centered = true, s.weight_decay = 0.1; });
  add(K::RMSprop, [](auto& s) { s.centered = true, s.alpha = 0.9, s.maximize = true; });
  for (DType dt : {DType::F32, DType::F64})
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      const std::string what = dname(dt) + " case " + std::to_string(ci);
      // Two parameters (one empty) per list, kernel copy and fallback copy.
      Tensor p[2][2], st[2][2][3];
      const Shape shapes[2] = {{7, 5}, {0}};
      for (int side = 0; side < 2; ++side)
        for (int j = 0; j < 2; ++j) {
          p[side][j] = randn(shapes[j], 20 + j, dt);
          for (int b = 0; b < 3; ++b) st[side][j][b] = zeros(shapes[j], dt);
        }
      for (int64_t step = 1; step <= 3; ++step) {
        d::OptimizerUpdate u[2][2];
        Tensor grads[2];
        for (int j = 0; j < 2; ++j) grads[j] = randn(shapes[j], 30 + 10 * static_cast<uint64_t>(step) + j, dt);
        for (int side = 0; side < 2; ++side)
          for (int j = 0; j < 2; ++j) {
            d::OptimizerStep s = cases[ci];
            s.step = step;
            s.first_step = step == 1;
            u[side][j] = {s,
                          p[side][j].impl(),
                          grads[j].impl(),
                          {st[side][j][0].impl(), st[side][j][1].impl(), st[side][j][2].impl()}};
          }
        ops::FusedCall k = ops::OptimizerStepsCall{u[0], 2};
        ops::FusedCall f = ops::OptimizerStepsCall{u[1], 2};
        run_both(k, f);
      }
      const double t = dt == DType::F64 ? 1e-12 : 2e-6;
      expect_close(values(p[1][0]), values(p[0][0]), t, t, "param " + what);
      for (int b = 0; b < 3; ++b)
        expect_close(values(st[1][0][b]), values(st[0][0][b]), t, t, "state " + std::to_string(b) + " " + what);
    }
  // A bad list updates nothing, as the kernels' checks.
  Tensor a = randn({3}, 1), ga = randn({3}, 2), bad = randn({4}, 3), gbad = randn({4}, 4);
  const std::vector<double> a0 = values(a);
  d::OptimizerStep adam;
  adam.kind = K::Adam;
  d::OptimizerUpdate u[2] = {{d::OptimizerStep{}, a.impl(), ga.impl(), {}}, {adam, bad.impl(), gbad.impl(), {}}};
  ops::FusedCall f = ops::OptimizerStepsCall{u, 2};
  EXPECT_OXM_ERROR(ops::run_fused_fallback(f, kCpu), InvalidArgument, "missing state buffer exp_avg");
  EXPECT_EQ(values(a), a0);
}

Tensor spd(const Shape& s, uint64_t seed, DType dt) {
  const int64_t n = s[s.size() - 1];
  Tensor B = rand(s, seed, dt) * 2.0 - 1.0;
  return (matmul(B, B.transpose(-1, -2)) / static_cast<double>(n) + eye(n, dt) * 0.5).detach();
}

// The small linear algebra's fallback (a host round trip through the per-matrix code) against linalg's host
// path in f64 and f32 (any n), and its failure reports.
TEST(FusedFallback, SmallLinalgMatchesTheHostPath) {
  for (DType dt : {DType::F32, DType::F64})
    for (int64_t n : {int64_t{1}, int64_t{4}, int64_t{17}, int64_t{40}}) {
      const std::string what = dname(dt) + " n " + std::to_string(n);
      const double t = dt == DType::F64 ? 1e-10 : 2e-4;
      Tensor a = spd({3, n, n}, 40 + static_cast<uint64_t>(n), dt);
      Tensor ld = empty({3}, dt), inv = empty({3, n, n}, dt), L = empty({3, n, n}, dt);
      ops::FusedCall c1 = ops::LogdetSpdCall{a.impl(), 3, n, ld.impl(), inv.impl(), {}, {}};
      ops::run_fused_fallback(c1, kCpu);
      EXPECT_LT(std::get<ops::LogdetSpdCall>(c1).fail.batch, 0) << what;
      expect_close(values(ld), values(la::logdet(a)), t, t, "logdet " + what);
      expect_close(values(inv), values(la::inverse(a)), t, t, "inverse " + what);
      ops::FusedCall c2 = ops::CholeskySpdCall{a.impl(), 3, n, L.impl(), {}, {}};
      ops::run_fused_fallback(c2, kCpu);
      expect_close(values(L), values(la::cholesky(a)), t, t, "cholesky " + what);
      for (bool upper : {false, true}) {
        Tensor T = (upper ? L.transpose(-1, -2) : L).contiguous(), b = randn({3, n, 2}, 7, dt);
        Tensor x = b.clone();
        ops::FusedCall c3 = ops::SolveTriangularSmallCall{T.impl(), x.impl(), 3, n, 2, upper, {}, {}};
        ops::run_fused_fallback(c3, kCpu);
        expect_close(values(x), values(la::solve_triangular(T, b, upper)), t, t, "solve_triangular " + what);
      }
    }
  Tensor bad = eye(3, DType::F64).expand({4, 3, 3}).contiguous();
  bad.select(0, 2).select(0, 1).select(0, 1).fill_(-2.0);
  Tensor ld = empty({4}, DType::F64), L = empty({4, 3, 3}, DType::F64);
  ops::FusedCall c1 = ops::LogdetSpdCall{bad.impl(), 4, 3, ld.impl(), nullptr, {}, {}};
  ops::run_fused_fallback(c1, kCpu);
  const auto& f1 = std::get<ops::LogdetSpdCall>(c1).fail;
  EXPECT_EQ(f1.batch, 2);
  EXPECT_EQ(f1.pivot, 1);
  EXPECT_EQ(f1.value, -2.0);
  ops::FusedCall c2 = ops::CholeskySpdCall{bad.impl(), 4, 3, L.impl(), {}, {}};
  ops::run_fused_fallback(c2, kCpu);
  EXPECT_EQ(std::get<ops::CholeskySpdCall>(c2).fail.batch, 2);
  Tensor sing = eye(3, DType::F64).expand({2, 3, 3}).contiguous(), x = ones({2, 3, 1}, DType::F64);
  sing.select(0, 1).select(0, 2).select(0, 2).fill_(0.0);
  ops::FusedCall c3 = ops::SolveTriangularSmallCall{sing.impl(), x.impl(), 2, 3, 1, false, {}, {}};
  ops::run_fused_fallback(c3, kCpu);
  EXPECT_EQ(std::get<ops::SolveTriangularSmallCall>(c3).fail.batch, 1);
  EXPECT_EQ(std::get<ops::SolveTriangularSmallCall>(c3).fail.pivot, 2);
}

// ---------------------------------------------------------------- a device that offers no fused op
oxt_fake::HostMemoryDevice* g_device = nullptr;

// Switches the test device's fused kernels off for one test (on again afterwards).
struct NoFusedOps {
  NoFusedOps() { g_device->offer_fused = false; }
  ~NoFusedOps() { g_device->offer_fused = true; }
};

#define NEED_FAKE_DEVICE()                                                                            \
  do {                                                                                                \
    g_device = oxt_fake::register_host_memory_device();                                               \
    if (g_device == nullptr) GTEST_SKIP() << "a real CUDA backend is registered (see test_cuda.cpp)"; \
  } while (0)

Tensor dev(const Tensor& t) { return t.to(kDev); }
Tensor host(const Tensor& t) { return t.to(kCpu); }
void expect_match(const Tensor& got, const Tensor& want, const std::string& what, double rtol, double atol) {
  ASSERT_EQ(got.device(), kDev) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  expect_close(values(host(got)), values(want), rtol, atol, what);
}

TEST(NoFusedOps, TheTestDeviceOffersWhatTheCpuOffersAndTheSmallLinalg) {
  NEED_FAKE_DEVICE();
  Tensor x = dev(randn({4, 3}, 1)), t = dev(from_vector<int64_t>({0, 2, 1, 1}, {4}));
  Tensor loss = dev(empty({4})), lse = dev(empty({4}));
  ops::FusedCall ce = ops::CrossEntropyCall{x.impl(), t.impl(), 0, 1, loss.impl(), lse.impl()};
  Tensor a = dev(eye(4)), a40 = dev(eye(40));
  ops::FusedCall ch = ops::CholeskySpdCall{a.impl(), 1, 4, nullptr, {}, {}};
  ops::FusedCall ch40 = ops::CholeskySpdCall{a40.impl(), 1, 40, nullptr, {}, {}};
  EXPECT_TRUE(ops::fused_supported(ce, kDev));
  EXPECT_TRUE(ops::fused_supported(ch, kDev));
  EXPECT_FALSE(ops::fused_supported(ch40, kDev));
  EXPECT_FALSE(ops::fused_supported(ch, kCpu));  // the CPU's linalg is its host path
  NoFusedOps off;
  EXPECT_FALSE(ops::fused_supported(ce, kDev));
  EXPECT_FALSE(ops::fused_supported(ch, kDev));
}

// Scans and sort indices: the test device runs the CUDA kernels' per-row functions (the insertion sort among
// them), and with its offerings off the host fallback makes a round trip; both match the CPU, ties and NaN
// included. (The conformance suite runs every case of these ops on the test device as well.)
TEST(NoFusedOps, ScansAndSortsMatchTheCpuWithAndWithoutTheDeviceKernels) {
  NEED_FAKE_DEVICE();
  Tensor x = from_vector<float>({1, NAN, 0, 1, 2, 0, NAN, 1, -3, 0.5f, 2, 2}, {3, 4});
  Tensor z = from_vector<float>({0.5f, 0, 1.5f, -2, 0.7f, 0, 0, 1.2f, 0, 1.1f, -0.9f, 1.3f}, {3, 4});
  for (bool offered : {true, false}) {
    g_device->offer_fused = offered;
    const std::string tag = offered ? " (device kernels)" : " (fallback)";
    const int64_t calls0 = g_device->fused_kernel_calls;
    for (int64_t dim : {0, 1})
      for (bool desc : {false, true}) {
        const std::string what = "dim " + std::to_string(dim) + (desc ? " descending" : "") + tag;
        EXPECT_EQ(host(dev(x).argsort(dim, desc)).to_vector<int64_t>(), x.argsort(dim, desc).to_vector<int64_t>())
            << "argsort " << what;
        EXPECT_EQ(host(std::get<1>(dev(z).topk(2, dim, !desc))).to_vector<int64_t>(),
                  std::get<1>(z.topk(2, dim, !desc)).to_vector<int64_t>())
            << "topk " << what;
      }
    for (int64_t dim : {0, 1}) {
      expect_match(dev(z).cumsum(dim), z.cumsum(dim), "cumsum" + tag, 1e-6, 1e-6);
      Tensor zc = z.detach().requires_grad_(), zd = dev(z).detach().requires_grad_();
      Tensor seed = randn({3, 4}, 5);
      (zc.cumprod(dim) * seed).sum().backward();
      (zd.cumprod(dim) * dev(seed)).sum().backward();
      expect_match(zd.grad(), zc.grad(), "cumprod gradient with zeros" + tag, 1e-6, 1e-6);
    }
    Tensor iv = from_vector<int64_t>({3, -1, 3, 0, 2, 2, -5, 7}, {2, 4});
    EXPECT_EQ(host(dev(iv).cumprod(1)).to_vector<int64_t>(), iv.cumprod(1).to_vector<int64_t>()) << tag;
    EXPECT_EQ(host(dev(iv).argsort(1)).to_vector<int64_t>(), iv.argsort(1).to_vector<int64_t>()) << tag;
    if (offered)
      EXPECT_GT(g_device->fused_kernel_calls, calls0);
    else
      EXPECT_EQ(g_device->fused_kernel_calls, calls0);
  }
  g_device->offer_fused = true;
}

// Cross entropy (ignore_index, label smoothing, every reduction) and its gradient through the fallbacks.
TEST(NoFusedOps, CrossEntropyMatchesTheCpusFusedKernels) {
  NEED_FAKE_DEVICE();
  NoFusedOps off;
  const int64_t fused0 = g_device->fused_kernel_calls;
  for (DType dt : {DType::F32})  // a GPU kind holds f32 tensors only
    for (nn::Reduction red : {nn::Reduction::Mean, nn::Reduction::Sum, nn::Reduction::None})
      for (double ls : {0.0, 0.1})
        for (const Shape& s : {Shape{6, 5}, Shape{5}}) {
          nn::CrossEntropyOptions o;
          o.reduction = red;
          o.label_smoothing = ls;
          o.ignore_index = 3;
          Tensor x = (randn(s, 61, dt) * 3.0).requires_grad_(), xd = dev(x.detach()).requires_grad_();
          Tensor t = s.size() == 1 ? scalar(1.0, DType::I64) : from_vector<int64_t>({0, 3, 4, 1, 3, 2}, {6});
          Tensor l = nn::cross_entropy(x, t, o), ld = nn::cross_entropy(xd, t, o);
          const std::string what = dname(dt) + " " + s.str() + " ls " + std::to_string(ls);
          const double tl = dt == DType::F64 ? 1e-12 : 1e-5;
          expect_match(ld, l, "loss " + what, tl, tl);
          Tensor w = randn(l.shape(), 62, dt);
          (l * w).sum().backward();
          (ld * dev(w)).sum().backward();
          expect_match(xd.grad(), x.grad(), "grad " + what, tl, tl);
        }
  EXPECT_EQ(g_device->fused_kernel_calls, fused0) << "a fused kernel ran on a device that offers none";
}

// conv2d (stride, padding, dilation, groups), max and avg pooling: forward and gradients through the im2col /
// col2im fallbacks.
TEST(NoFusedOps, ConvolutionAndPoolingMatchTheCpu) {
  NEED_FAKE_DEVICE();
  NoFusedOps off;
  const int64_t fused0 = g_device->fused_kernel_calls;
  for (DType dt : {DType::F32}) {  // a GPU kind holds f32 tensors only
    const double t = dt == DType::F64 ? 1e-12 : 1e-5;
    Tensor x = randn({2, 4, 9, 8}, 71, dt).requires_grad_(), w = randn({6, 2, 3, 3}, 72, dt).requires_grad_();
    Tensor b = randn({6}, 73, dt).requires_grad_();
    Tensor xd = dev(x.detach()).requires_grad_(), wd = dev(w.detach()).requires_grad_();
    Tensor bd = dev(b.detach()).requires_grad_();
    Tensor y = nn::functional::conv2d(x, w, b, {2, 1}, {1, 2}, {1, 2}, 2);
    Tensor yd = nn::functional::conv2d(xd, wd, bd, {2, 1}, {1, 2}, {1, 2}, 2);
    expect_match(yd, y, "conv2d " + dname(dt), t, t);
    auto [m, mi] = nn::functional::max_pool2d_with_indices(x, {3, 2}, {2, 2}, {1, 1});
    auto [md, mid] = nn::functional::max_pool2d_with_indices(xd, {3, 2}, {2, 2}, {1, 1});
    expect_match(md, m, "max_pool2d " + dname(dt), 0, 0);
    EXPECT_EQ(bits(mid), bits(mi)) << "max_pool2d indices";
    Tensor a = nn::functional::avg_pool2d(x, {2, 2});
    Tensor ad = nn::functional::avg_pool2d(xd, {2, 2});
    expect_match(ad, a, "avg_pool2d " + dname(dt), t, t);
    Tensor gy = randn(y.shape(), 74, dt), gm = randn(m.shape(), 75, dt), ga = randn(a.shape(), 76, dt);
    ((y * gy).sum() + (m * gm).sum() + (a * ga).sum()).backward();
    ((yd * dev(gy)).sum() + (md * dev(gm)).sum() + (ad * dev(ga)).sum()).backward();
    expect_match(xd.grad(), x.grad(), "dx " + dname(dt), t, t);
    expect_match(wd.grad(), w.grad(), "dw " + dname(dt), t, t);
    expect_match(bd.grad(), b.grad(), "db " + dname(dt), t, t);
  }
  EXPECT_EQ(g_device->fused_kernel_calls, fused0) << "a fused kernel ran on a device that offers none";
}

// Every optimizer, with the options that change its formula, over five steps: per-parameter tensor ops on the
// device against the CPU's fused kernel.
// The recurrent layers on the test device, with its fused cells (the CPU kernels) and without them (the composite
// fallbacks there): outputs, final states and every parameter gradient match the CPU's fused kernels.
TEST(NoFusedOps, RecurrentLayersMatchTheCpuWithAndWithoutFusedCells) {
  NEED_FAKE_DEVICE();
  nn::RNNOptions o;
  o.num_layers = 2;
  o.bidirectional = true;
  for (bool offered : {true, false})
    for (const char* kind : {"LSTM", "GRU", "RNN"}) {
      g_device->offer_fused = offered;
      const std::string tag = std::string(kind) + (offered ? " (device kernels)" : " (fallback)");
      auto make = [&]() -> std::shared_ptr<nn::RNNBase> {
        Generator gen(7);
        if (std::string(kind) == "LSTM") return std::make_shared<nn::LSTM>(3, 4, o, gen);
        if (std::string(kind) == "GRU") return std::make_shared<nn::GRU>(3, 4, o, gen);
        return std::make_shared<nn::RNN>(3, 4, o, gen);
      };
      auto cpu_net = make(), dev_net = make();
      dev_net->to(kDev);
      auto run = [&](nn::RNNBase& net, const Tensor& x) -> std::pair<Tensor, Tensor> {
        if (auto* l = dynamic_cast<nn::LSTM*>(&net)) {
          auto [y, st] = l->forward(x);
          return {y, std::get<0>(st) + std::get<1>(st) * 0.5};
        }
        if (auto* g = dynamic_cast<nn::GRU*>(&net)) {
          auto [y, h] = g->forward(x);
          return {y, h};
        }
        auto [y, h] = static_cast<nn::RNN&>(net).forward(x);
        return {y, h};
      };
      Tensor x = randn({5, 2, 3}, 11);
      const int64_t calls0 = g_device->fused_kernel_calls;
      auto [y, h] = run(*cpu_net, x);
      auto [yd, hd] = run(*dev_net, dev(x));
      expect_match(yd, y, "output " + tag, 1e-5, 1e-5);
      expect_match(hd, h, "final state " + tag, 1e-5, 1e-5);
      Tensor wy = randn(y.shape(), 12), wh = randn(h.shape(), 13);
      ((y * wy).sum() + (h * wh).sum()).backward();
      ((yd * dev(wy)).sum() + (hd * dev(wh)).sum()).backward();
      const auto pc = cpu_net->named_parameters(), pd = dev_net->named_parameters();
      ASSERT_EQ(pc.size(), pd.size());
      for (size_t i = 0; i < pc.size(); ++i)
        expect_match(pd[i].second.grad(), pc[i].second.grad(), pc[i].first + " " + tag, 1e-5, 1e-5);
      if (offered)
        EXPECT_GT(g_device->fused_kernel_calls, calls0) << tag;
      else
        EXPECT_EQ(g_device->fused_kernel_calls, calls0) << tag;
    }
  g_device->offer_fused = true;
}

TEST(NoFusedOps, OptimizersMatchTheCpusFusedKernel) {
  NEED_FAKE_DEVICE();
  NoFusedOps off;
  const int64_t fused0 = g_device->fused_kernel_calls;
  using Make = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;
  const std::vector<std::pair<std::string, Make>> makers = {
      {"SGD", [](auto ps) { return std::make_unique<optim::SGD>(ps, optim::SGDOptions{0.1}); }},
      {"SGD nesterov",
       [](auto ps) {
         optim::SGDOptions o{0.1, 0.9};
         o.nesterov = true;
         o.weight_decay = 0.01;
         return std::make_unique<optim::SGD>(ps, o);
       }},
      {"Adam amsgrad",
       [](auto ps) {
         optim::AdamOptions o;
         o.lr = 0.01;
         o.amsgrad = true;
         o.weight_decay = 0.1;
         return std::make_unique<optim::Adam>(ps, o);
       }},
      {"AdamW", [](auto ps) { return std::make_unique<optim::AdamW>(ps); }},
      {"RMSprop centered momentum",
       [](auto ps) {
         optim::RMSpropOptions o;
         o.momentum = 0.5;
         o.centered = true;
         return std::make_unique<optim::RMSprop>(ps, o);
       }},
  };
  for (DType dt : {DType::F32})  // a GPU kind holds f32 tensors only
    for (const auto& [name, make] : makers) {
      Tensor a = randn({5, 4}, 81, dt).requires_grad_(), b = randn({3}, 82, dt).requires_grad_();
      Tensor ad = dev(a.detach()).requires_grad_(), bd = dev(b.detach()).requires_grad_();
      auto opt = make({a, b}), optd = make({ad, bd});
      for (int i = 0; i < 5; ++i) {
        opt->zero_grad();
        ((a * a).sum() + b.sin().sum() + (a.sum({0}).narrow(0, 0, 3) * b).sum()).backward();
        opt->step();
        optd->zero_grad();
        ((ad * ad).sum() + bd.sin().sum() + (ad.sum({0}).narrow(0, 0, 3) * bd).sum()).backward();
        optd->step();
      }
      const double t = dt == DType::F64 ? 1e-12 : 1e-5;
      expect_match(ad.detach(), a.detach(), name + " " + dname(dt) + " a", t, t);
      expect_match(bd.detach(), b.detach(), name + " " + dname(dt) + " b", t, t);
      const auto s = opt->state_tensors(), sd = optd->state_tensors();
      ASSERT_EQ(s.size(), sd.size());
      for (size_t i = 0; i < s.size(); ++i) {
        EXPECT_EQ(sd[i].first, s[i].first);
        expect_close(values(host(sd[i].second)), values(s[i].second), t, t, name + " " + s[i].first);
      }
    }
  EXPECT_EQ(g_device->fused_kernel_calls, fused0) << "a fused kernel ran on a device that offers none";
}

// The demo training run (`oxmera train --device cuda`: MLP, cross entropy, Adam) on a device without fused ops
// learns what the CPU learns.
TEST(NoFusedOps, DemoTrainingMatchesTheCpu) {
  NEED_FAKE_DEVICE();
  oxmera_cli::TrainOptions o;
  o.epochs = 3;
  const auto none = [](int, int64_t, int64_t) {};
  const auto quiet = [](const oxmera_cli::EpochStats&) {};
  const oxmera_cli::EpochStats cpu = oxmera_cli::run_demo_training(o, none, quiet);
  NoFusedOps off;
  const int64_t fused0 = g_device->fused_kernel_calls;
  o.device = "cuda";
  const oxmera_cli::EpochStats gpu = oxmera_cli::run_demo_training(o, none, quiet);
  EXPECT_EQ(g_device->fused_kernel_calls, fused0);
  EXPECT_NEAR(gpu.loss, cpu.loss, 1e-4 * cpu.loss);
  EXPECT_EQ(gpu.accuracy, cpu.accuracy);
}

// Small linear algebra on a device without kernels takes linalg's host path (as a backend without them always
// did), values and gradients as on the CPU.
TEST(NoFusedOps, LinalgTakesTheHostPath) {
  NEED_FAKE_DEVICE();
  NoFusedOps off;
  const int64_t linalg0 = g_device->linalg_kernel_calls;
  Tensor a = spd({2, 4, 4}, 91, DType::F32).requires_grad_(), ad = dev(a.detach()).requires_grad_();
  Tensor ld = la::logdet(a), ldd = la::logdet(ad), L = la::cholesky(a), Ld = la::cholesky(ad);
  expect_match(ldd, ld, "logdet", 1e-6, 1e-6);
  expect_match(Ld, L, "cholesky", 1e-6, 1e-6);
  Tensor W = randn({2, 4, 4}, 92);
  (ld.sum() + (L * W).sum()).backward();
  (ldd.sum() + (Ld * dev(W)).sum()).backward();
  expect_match(ad.grad(), a.grad(), "logdet + cholesky grad", 1e-5, 1e-5);
  EXPECT_EQ(g_device->linalg_kernel_calls, linalg0);
}

// The fallbacks run on the device itself: the same launch-counted device, only ordinary kernels.
TEST(NoFusedOps, RunFusedOnADeviceWithoutKernelsRunsTheFallbackThere) {
  NEED_FAKE_DEVICE();
  NoFusedOps off;
  Tensor a = spd({3, 5, 5}, 93, DType::F32), ad = dev(a);
  Tensor ld = dev(empty({3})), L = dev(empty({3, 5, 5}));
  ops::FusedCall c1 = ops::LogdetSpdCall{ad.impl(), 3, 5, ld.impl(), nullptr, {}, {}};
  ops::run_fused(c1, kDev);
  expect_match(ld, la::logdet(a), "logdet", 1e-5, 1e-5);
  ops::FusedCall c2 = ops::CholeskySpdCall{ad.impl(), 3, 5, L.impl(), {}, {}};
  ops::run_fused(c2, kDev);
  expect_match(L, la::cholesky(a), "cholesky", 1e-5, 1e-5);
}

// ---------------------------------------------------------------- the CUDA backend's nn kernels
// The test device runs cuda_nn.cu's per-element and per-row code (src/backend/common/nn_math.hpp, a warp's lanes
// in reverse order) for the calls the CUDA backend takes (nn_kernel_takes: f32); each is compared with the CPU
// backend's kernel on the same inputs. Max pooling (a gather per input position on the device, a scatter on the
// CPU) gives the same bits: the same sums in the same order.

// Runs `run` (which runs `call` on the test device) and checks that the device's kernel took it.
template <class F>
void expect_device_kernel(ops::FusedCall& call, const std::string& what, F run) {
  ASSERT_TRUE(ops::fused_supported(call, kDev)) << what;
  const int64_t calls0 = g_device->fused_kernel_calls;
  run();
  EXPECT_EQ(g_device->fused_kernel_calls - calls0, 1) << what << ": the device kernel did not run";
}

TEST(DeviceNnKernels, CellsMatchTheCpuKernels) {
  NEED_FAKE_DEVICE();
  for (auto [B, H] : {std::pair<int64_t, int64_t>{1, 1}, {3, 5}, {16, 64}, {2, 37}}) {
    const std::string shape = " [" + std::to_string(B) + ", " + std::to_string(H) + "]";
    {  // LSTM, with every combination of absent gradients
      Tensor gates = randn({B, 4 * H}, 31) * 3.0, cp = randn({B, H}, 32);
      Tensor a1 = empty({B, 4 * H}), h1 = empty({B, H}), c1 = empty({B, H});
      Tensor gd = dev(gates), cpd = dev(cp), a2 = dev(empty({B, 4 * H})), h2 = dev(empty({B, H})),
             c2 = dev(empty({B, H}));
      ops::FusedCall k = ops::LstmCellCall{gates.impl(), cp.impl(), B, H, a1.impl(), h1.impl(), c1.impl()};
      ops::FusedCall kd = ops::LstmCellCall{gd.impl(), cpd.impl(), B, H, a2.impl(), h2.impl(), c2.impl()};
      ops::run_fused(k, kCpu);
      expect_device_kernel(kd, "lstm_cell" + shape, [&] { ops::run_fused(kd, kDev); });
      expect_match(a2, a1, "lstm acts" + shape, 2e-6, 2e-6);
      expect_match(h2, h1, "lstm h" + shape, 2e-6, 2e-6);
      expect_match(c2, c1, "lstm c" + shape, 2e-6, 2e-6);
      {  // the pre-activations as two summands
        Tensor g2 = randn({B, 4 * H}, 30), g2d = dev(g2);
        Tensor a3 = empty({B, 4 * H}), h3 = empty({B, H}), c3 = empty({B, H});
        Tensor a4 = dev(empty({B, 4 * H})), h4 = dev(empty({B, H})), c4 = dev(empty({B, H}));
        ops::FusedCall k2 =
            ops::LstmCellCall{gates.impl(), cp.impl(), B, H, a3.impl(), h3.impl(), c3.impl(), g2.impl()};
        ops::FusedCall k2d =
            ops::LstmCellCall{gd.impl(), cpd.impl(), B, H, a4.impl(), h4.impl(), c4.impl(), g2d.impl()};
        ops::run_fused(k2, kCpu);
        expect_device_kernel(k2d, "lstm_cell, two summands" + shape, [&] { ops::run_fused(k2d, kDev); });
        expect_match(a4, a3, "lstm acts, two summands" + shape, 2e-6, 2e-6);
        expect_match(h4, h3, "lstm h, two summands" + shape, 2e-6, 2e-6);
        expect_match(c4, c3, "lstm c, two summands" + shape, 2e-6, 2e-6);
      }
      Tensor gh = randn({B, H}, 33), gc = randn({B, H}, 34);
      for (int which = 0; which < 4; ++which) {
        const std::string what = "lstm_cell backward" + shape + " gradients " + std::to_string(which);
        const d::TensorImpl *ghp = which & 1 ? gh.impl() : nullptr, *gcp = which & 2 ? gc.impl() : nullptr;
        Tensor ghd = dev(gh), gcd = dev(gc);
        const d::TensorImpl *ghdp = which & 1 ? ghd.impl() : nullptr, *gcdp = which & 2 ? gcd.impl() : nullptr;
        Tensor dg1 = empty({B, 4 * H}), dc1 = empty({B, H}), dg2 = dev(empty({B, 4 * H})), dc2 = dev(empty({B, H}));
        ops::FusedCall kb =
            ops::LstmCellBackwardCall{a1.impl(), cp.impl(), c1.impl(), ghp, gcp, B, H, dg1.impl(), dc1.impl()};
        ops::FusedCall kbd =
            ops::LstmCellBackwardCall{a2.impl(), cpd.impl(), c2.impl(), ghdp, gcdp, B, H, dg2.impl(), dc2.impl()};
        ops::run_fused(kb, kCpu);
        expect_device_kernel(kbd, what, [&] { ops::run_fused(kbd, kDev); });
        expect_match(dg2, dg1, what + " gates", 1e-5, 1e-5);
        expect_match(dc2, dc1, what + " c_prev", 1e-5, 1e-5);
      }
    }
    {  // GRU
      Tensor gi = randn({B, 3 * H}, 35) * 2.0, gh = randn({B, 3 * H}, 36) * 2.0, hp = randn({B, H}, 37);
      Tensor a1 = empty({B, 4 * H}), h1 = empty({B, H}), a2 = dev(empty({B, 4 * H})), h2 = dev(empty({B, H}));
      Tensor gid = dev(gi), ghd = dev(gh), hpd = dev(hp);
      ops::FusedCall k = ops::GruCellCall{gi.impl(), gh.impl(), hp.impl(), B, H, a1.impl(), h1.impl()};
      ops::FusedCall kd = ops::GruCellCall{gid.impl(), ghd.impl(), hpd.impl(), B, H, a2.impl(), h2.impl()};
      ops::run_fused(k, kCpu);
      expect_device_kernel(kd, "gru_cell" + shape, [&] { ops::run_fused(kd, kDev); });
      expect_match(a2, a1, "gru acts" + shape, 2e-6, 2e-6);
      expect_match(h2, h1, "gru h" + shape, 2e-6, 2e-6);
      Tensor g = randn({B, H}, 38), gdv = dev(g);
      Tensor di1 = empty({B, 3 * H}), dh1 = empty({B, 3 * H}), dp1 = empty({B, H});
      Tensor di2 = dev(empty({B, 3 * H})), dh2 = dev(empty({B, 3 * H})), dp2 = dev(empty({B, H}));
      ops::FusedCall kb =
          ops::GruCellBackwardCall{a1.impl(), hp.impl(), g.impl(), B, H, di1.impl(), dh1.impl(), dp1.impl()};
      ops::FusedCall kbd =
          ops::GruCellBackwardCall{a2.impl(), hpd.impl(), gdv.impl(), B, H, di2.impl(), dh2.impl(), dp2.impl()};
      ops::run_fused(kb, kCpu);
      expect_device_kernel(kbd, "gru_cell backward" + shape, [&] { ops::run_fused(kbd, kDev); });
      expect_match(di2, di1, "gru grad gi" + shape, 1e-5, 1e-5);
      expect_match(dh2, dh1, "gru grad gh" + shape, 1e-5, 1e-5);
      expect_match(dp2, dp1, "gru grad h_prev" + shape, 1e-5, 1e-5);
    }
    for (bool relu : {false, true}) {  // the plain RNN step, NaN included
      Tensor xt = randn({B, H}, 39) * 2.0, hh = randn({B, H}, 40);
      if (B * H > 3) {
        std::vector<double> v = values(xt);
        v[2] = NAN;
        xt = from_vector<double>(v, xt.shape()).to(DType::F32);
      }
      Tensor o1 = empty({B, H}), o2 = dev(empty({B, H})), xtd = dev(xt), hhd = dev(hh);
      ops::FusedCall k = ops::RnnCellCall{xt.impl(), hh.impl(), B * H, relu, o1.impl()};
      ops::FusedCall kd = ops::RnnCellCall{xtd.impl(), hhd.impl(), B * H, relu, o2.impl()};
      ops::run_fused(k, kCpu);
      expect_device_kernel(kd, "rnn_cell" + shape, [&] { ops::run_fused(kd, kDev); });
      expect_match(o2, o1, std::string(relu ? "relu" : "tanh") + " rnn_cell" + shape, 2e-6, 2e-6);
    }
  }
  // f64 is not taken (CUDA's kernels are f32): the composite runs.
  Tensor g64 = randn({2, 8}, 41, DType::F64), c64 = randn({2, 2}, 42, DType::F64), o64 = empty({2, 2}, DType::F64);
  EXPECT_FALSE(d::nn_kernel_takes(ops::LstmCellCall{g64.impl(), c64.impl(), 2, 2, g64.impl(), o64.impl(), o64.impl()}));
}

TEST(DeviceNnKernels, RowsMatchTheCpuKernels) {
  NEED_FAKE_DEVICE();
  for (auto [R, n] : {std::pair<int64_t, int64_t>{1, 1}, {5, 3}, {7, 64}, {3, 300}, {70, 33}})
    for (int affine = 0; affine < 4; ++affine) {
      const std::string what =
          " [" + std::to_string(R) + ", " + std::to_string(n) + "] affine " + std::to_string(affine);
      Tensor x = randn({R, n}, 43) * 2.0 + 0.5, w = randn({n}, 44), b = randn({n}, 45), g = randn({R, n}, 46);
      Tensor xd = dev(x), wd = dev(w), bd = dev(b), gd = dev(g);
      const d::TensorImpl *wp = affine & 1 ? w.impl() : nullptr, *bp = affine & 2 ? b.impl() : nullptr;
      const d::TensorImpl *wdp = affine & 1 ? wd.impl() : nullptr, *bdp = affine & 2 ? bd.impl() : nullptr;
      Tensor y1 = empty({R, n}), m1 = empty({R, 1}), r1 = empty({R, 1});
      Tensor y2 = dev(empty({R, n})), m2 = dev(empty({R, 1})), r2 = dev(empty({R, 1}));
      ops::FusedCall k = ops::LayerNormCall{x.impl(), wp, bp, 1e-5, n, y1.impl(), m1.impl(), r1.impl()};
      ops::FusedCall kd = ops::LayerNormCall{xd.impl(), wdp, bdp, 1e-5, n, y2.impl(), m2.impl(), r2.impl()};
      ops::run_fused(k, kCpu);
      expect_device_kernel(kd, "layer_norm" + what, [&] { ops::run_fused(kd, kDev); });
      expect_match(y2, y1, "layer_norm y" + what, 1e-5, 1e-5);
      expect_match(m2, m1, "layer_norm mean" + what, 1e-6, 1e-6);
      expect_match(r2, r1, "layer_norm rstd" + what, 1e-6, 1e-6);
      for (bool params : {true, false}) {
        Tensor gx1 = empty({R, n}), gw1 = empty({n}), gb1 = empty({n});
        Tensor gx2 = dev(empty({R, n})), gw2 = dev(empty({n})), gb2 = dev(empty({n}));
        ops::FusedCall kb = ops::LayerNormBackwardCall{x.impl(),
                                                       g.impl(),
                                                       wp,
                                                       m1.impl(),
                                                       r1.impl(),
                                                       n,
                                                       gx1.impl(),
                                                       params ? gw1.impl() : nullptr,
                                                       params ? gb1.impl() : nullptr};
        ops::FusedCall kbd = ops::LayerNormBackwardCall{xd.impl(),
                                                        gd.impl(),
                                                        wdp,
                                                        m2.impl(),
                                                        r2.impl(),
                                                        n,
                                                        gx2.impl(),
                                                        params ? gw2.impl() : nullptr,
                                                        params ? gb2.impl() : nullptr};
        ops::run_fused(kb, kCpu);
        expect_device_kernel(kbd, "layer_norm backward" + what, [&] { ops::run_fused(kbd, kDev); });
        expect_match(gx2, gx1, "layer_norm grad x" + what, 1e-5, 1e-5);
        if (params) {  // R = 70: three row chunks summed in order
          expect_match(gw2, gw1, "layer_norm grad weight" + what, 1e-5, 1e-5);
          expect_match(gb2, gb1, "layer_norm grad bias" + what, 1e-5, 1e-5);
        }
      }
    }
  for (const Shape& shape : {Shape{}, Shape{1}, Shape{3, 5}, Shape{2, 4, 64}, Shape{3, 300}, Shape{1, 17}})
    for (bool log : {false, true}) {
      const std::string what = std::string(log ? "log_softmax" : "softmax") + " backward, rank " +
                               std::to_string(shape.size()) +
                               (shape.empty() ? "" : " n " + std::to_string(shape.back()));
      const int64_t last = shape.empty() ? 0 : static_cast<int64_t>(shape.size()) - 1;
      Tensor x = randn(shape, 47) * 3.0;
      Tensor y = log ? x.log_softmax(last) : x.softmax(last), g = randn(shape, 48);
      Tensor yd = dev(y), gd = dev(g), o1 = empty(shape), o2 = dev(empty(shape));
      ops::FusedCall k = ops::SoftmaxBackwardCall{y.impl(), g.impl(), o1.impl(), last, log};
      ops::FusedCall kd = ops::SoftmaxBackwardCall{yd.impl(), gd.impl(), o2.impl(), last, log};
      ops::run_fused_fallback(k, kCpu);  // the CPU kernel takes no 0-d tensor; the fallback is the reference
      expect_device_kernel(kd, what, [&] { ops::run_fused(kd, kDev); });
      expect_match(o2, o1, what, 1e-5, 1e-5);
    }
  // Not the last dim: not taken (the composite runs on the device).
  Tensor y = dev(randn({4, 6}, 49).softmax(0)), g = dev(randn({4, 6}, 50)), out = dev(empty({4, 6}));
  EXPECT_FALSE(d::nn_kernel_takes(ops::SoftmaxBackwardCall{y.impl(), g.impl(), out.impl(), 0}));
}

TEST(DeviceNnKernels, MaxPoolingMatchesTheCpuKernelBitForBit) {
  NEED_FAKE_DEVICE();
  struct G {
    int64_t N, H, W, kh, kw, sh, sw, ph, pw, dh, dw;
  };
  const std::vector<G> geoms = {
      {2, 6, 6, 2, 2, 2, 2, 0, 0, 1, 1},   {2, 7, 5, 3, 2, 2, 1, 1, 1, 1, 1},  {1, 9, 8, 3, 3, 1, 2, 1, 1, 2, 2},
      {2, 5, 7, 2, 4, 3, 1, 1, 2, 1, 1},   {2, 4, 4, 1, 1, 1, 1, 0, 0, 1, 1},  {1, 1, 3, 2, 2, 1, 1, 1, 1, 2, 1},
      {2, 28, 28, 2, 2, 2, 2, 0, 0, 1, 1}, {1, 9, 41, 3, 3, 2, 2, 1, 1, 1, 1}, {1, 10, 10, 3, 3, 1, 1, 1, 1, 3, 3}};
  for (const G& q : geoms)
    for (int values_kind = 0; values_kind < 3; ++values_kind) {  // distinct, ties, ties + NaN + -inf
      d::ConvGeometry g{q.kh, q.kw, q.sh, q.sw, q.ph, q.pw, q.dh, q.dw, 0, 0};
      g.oh = (q.H + 2 * q.ph - q.dh * (q.kh - 1) - 1) / q.sh + 1;
      g.ow = (q.W + 2 * q.pw - q.dw * (q.kw - 1) - 1) / q.sw + 1;
      std::ostringstream name;  // (a chain of string + to_string trips GCC 12's -Wrestrict false positive)
      name << "N" << q.N << " H" << q.H << " W" << q.W << " k" << q.kh << "x" << q.kw << " d" << q.dh << " values "
           << values_kind;
      const std::string what = name.str();
      const int64_t C = 3;
      Tensor base = randn({C, q.N, q.H, q.W}, 51);
      if (values_kind > 0) base = (base * 1.5).round();
      if (values_kind == 2) {
        std::vector<double> v = values(base);
        for (size_t i = 0; i < v.size(); ++i) {
          if (i % 5 == 1) v[i] = NAN;
          if (i % 7 == 3) v[i] = -INFINITY;
        }
        base = from_vector<double>(v, base.shape()).to(DType::F32);
      }
      Tensor x = base.transpose(0, 1), xd = dev(base).transpose(0, 1);  // any strides
      const Shape os{q.N, C, g.oh, g.ow};
      Tensor o1 = empty(os), i1 = empty(os, DType::I64), o2 = dev(empty(os)), i2 = dev(empty(os, DType::I64));
      ops::FusedCall k = ops::MaxPool2dCall{x.impl(), o1.impl(), i1.impl(), g};
      ops::FusedCall kd = ops::MaxPool2dCall{xd.impl(), o2.impl(), i2.impl(), g};
      ops::run_fused(k, kCpu);
      expect_device_kernel(kd, "max_pool2d " + what, [&] { ops::run_fused(kd, kDev); });
      EXPECT_EQ(bits(host(o2)), bits(o1)) << "max_pool2d values " << what;
      EXPECT_EQ(host(i2).to_vector<int64_t>(), i1.to_vector<int64_t>()) << "max_pool2d indices " << what;
      Tensor gy = randn(os, 52), gyd = dev(gy);
      for (bool zero_first : {true, false}) {
        Tensor x1 = full({q.N, C, q.H, q.W}, zero_first ? NAN : 0.25);
        Tensor x2 = dev(x1);
        ops::FusedCall kb = ops::MaxPool2dBackwardCall{gy.impl(), i1.impl(), x1.impl(), zero_first, g};
        ops::FusedCall kbd = ops::MaxPool2dBackwardCall{gyd.impl(), i2.impl(), x2.impl(), zero_first, g};
        ops::run_fused(kb, kCpu);
        expect_device_kernel(kbd, "max_pool2d backward " + what, [&] { ops::run_fused(kbd, kDev); });
        EXPECT_EQ(bits(host(x2)), bits(x1)) << "max_pool2d backward, zero_first " << zero_first << " " << what;
      }
      // Without the forward's geometry the gather has no candidates: not taken (the composite runs).
      Tensor x3 = dev(empty({q.N, C, q.H, q.W}));
      EXPECT_FALSE(d::nn_kernel_takes(ops::MaxPool2dBackwardCall{gyd.impl(), i2.impl(), x3.impl(), true}));
    }
}

// clip_grad_norm_'s list kernels on the test device (the CUDA kernels' terms) against their fallbacks: every norm
// type, an empty tensor, NaN through the inf norm; the scale multiplies every tensor in place.
TEST(DeviceListKernels, NormAndScaleMatchTheFallbacks) {
  NEED_FAKE_DEVICE();
  std::vector<Tensor> ts = {dev(randn({3, 4}, 70)), dev(randn({0}, 71)), dev(randn({5000}, 72)), dev(randn({7}, 73))};
  std::vector<const d::TensorImpl*> list;
  for (const Tensor& t : ts) list.push_back(t.impl());
  for (double p : {2.0, 1.0, 3.0, std::numeric_limits<double>::infinity()}) {
    Tensor k = dev(empty({4})), f = dev(empty({4}));
    ops::FusedCall kc = ops::TensorListNormCall{list.data(), list.size(), p, k.impl()};
    ops::FusedCall fc = ops::TensorListNormCall{list.data(), list.size(), p, f.impl()};
    expect_device_kernel(kc, "tensor list norm", [&] { ops::run_fused(kc, kDev); });
    ops::run_fused_fallback(fc, kDev);
    expect_close(values(host(k)), values(host(f)), 2e-6, 1e-7, "norm terms, p = " + std::to_string(p));
    EXPECT_EQ(values(host(k))[1], 0.0) << "an empty tensor";
  }
  Tensor withnan = dev(from_vector<double>({1, NAN, -3}, {3}).to(DType::F32)), k = dev(empty({1}));
  const d::TensorImpl* one[] = {withnan.impl()};
  ops::FusedCall kc = ops::TensorListNormCall{one, 1, std::numeric_limits<double>::infinity(), k.impl()};
  ops::run_fused(kc, kDev);
  EXPECT_TRUE(std::isnan(values(host(k))[0])) << "NaN through the inf norm";
  std::vector<Tensor> copies;
  std::vector<d::TensorImpl*> targets;
  for (const Tensor& t : ts) {
    copies.push_back(host(t));
    targets.push_back(t.impl());
  }
  ops::FusedCall sc = ops::TensorListScaleCall{targets.data(), targets.size(), 0.25};
  expect_device_kernel(sc, "tensor list scale", [&] { ops::run_fused(sc, kDev); });
  for (size_t i = 0; i < ts.size(); ++i) expect_match(ts[i], copies[i] * 0.25, "scaled " + std::to_string(i), 0, 0);
}

// What the kernels save: a layer norm forward, an LSTM step's gates and max pooling are one device kernel each
// (their composites were 5 to 30 ordinary kernels), counted through the public API.
TEST(DeviceNnKernels, EachLayerIsOneKernel) {
  NEED_FAKE_DEVICE();
  Tensor x = dev(randn({8, 16}, 53)), w = dev(randn({16}, 54)), b = dev(randn({16}, 55));
  int64_t k0 = g_device->kernel_calls;
  Tensor y = nn::functional::layer_norm(x, {16}, w, b);
  EXPECT_EQ(g_device->kernel_calls - k0, 1) << "layer_norm";
  Tensor img = dev(randn({2, 3, 8, 8}, 56));
  k0 = g_device->kernel_calls;
  Tensor p = nn::functional::max_pool2d(img, {2, 2});
  EXPECT_EQ(g_device->kernel_calls - k0, 1) << "max_pool2d";
  {
    NoFusedOps off;
    k0 = g_device->kernel_calls;
    Tensor y2 = nn::functional::layer_norm(x, {16}, w, b);
    EXPECT_GE(g_device->kernel_calls - k0, 5) << "layer_norm's composite";
    expect_match(y2, host(y), "layer_norm with and without the kernel", 1e-5, 1e-5);
  }
}

}  // namespace
