// Micro-benchmarks for oxmera CPU ops (Google Benchmark).
//
//   ./build-bench/bench/oxmera_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// Names are kept short and stable so results can be compared across commits (see docs/bench-notes.md).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "oxmera/oxmera.hpp"

namespace ox = oxmera;

namespace {

// Repetitions on a shared machine: the minimum is the least disturbed sample (the median is kept too).
double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

constexpr int64_t kLarge = 16 * 1024 * 1024;  // 16M floats = 64 MiB per tensor

// Elementwise c = a + b on a freshly allocated result, for small (overhead-bound) shapes.
void add_fresh(benchmark::State& state, const ox::Shape& shape) {
  ox::NoGradGuard ng;
  ox::Tensor a = ox::randn(shape, 1);
  ox::Tensor b = ox::randn(shape, 2);
  for (auto _ : state) {
    ox::Tensor c = a + b;
    benchmark::DoNotOptimize(c.impl());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());  // items/s == ops/s
}

void BM_AddTiny(benchmark::State& state) { add_fresh(state, ox::Shape{4}); }
BENCHMARK(BM_AddTiny)->ComputeStatistics("min", min_of);

void BM_AddSmall(benchmark::State& state) { add_fresh(state, ox::Shape{64, 16}); }
BENCHMARK(BM_AddSmall)->ComputeStatistics("min", min_of);

// Forward + backward of a tiny graph: y = relu(x*w + b).sum().
void BM_TinyGraph(benchmark::State& state) {
  ox::Tensor x = ox::randn({64, 16}, 1);
  ox::Tensor w = ox::randn({64, 16}, 2).requires_grad_();
  ox::Tensor b = ox::randn({64, 16}, 3).requires_grad_();
  for (auto _ : state) {
    w.zero_grad();
    b.zero_grad();
    ox::Tensor y = (x * w + b).relu().sum();
    y.backward();
    benchmark::DoNotOptimize(y.impl());
    benchmark::DoNotOptimize(w.grad().impl());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TinyGraph)->ComputeStatistics("min", min_of);

void BM_AddLarge(benchmark::State& state) {
  ox::NoGradGuard ng;
  ox::Tensor a = ox::randn({kLarge}, 1);
  ox::Tensor b = ox::randn({kLarge}, 2);
  for (auto _ : state) {
    ox::Tensor c = a + b;
    benchmark::DoNotOptimize(c.impl());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kLarge * 12);  // read a, read b, write c
}
BENCHMARK(BM_AddLarge)->ComputeStatistics("min", min_of)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_AddLargeInplace(benchmark::State& state) {
  ox::NoGradGuard ng;
  ox::Tensor a = ox::randn({kLarge}, 1);
  ox::Tensor b = ox::randn({kLarge}, 2);
  for (auto _ : state) {
    a.add_(b);
    benchmark::DoNotOptimize(a.impl());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kLarge * 12);  // read a, read b, write a
}
BENCHMARK(BM_AddLargeInplace)->ComputeStatistics("min", min_of)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Sum(benchmark::State& state) {
  ox::NoGradGuard ng;
  ox::Tensor a = ox::randn({kLarge}, 1);
  for (auto _ : state) {
    ox::Tensor s = a.sum();
    benchmark::DoNotOptimize(s.impl());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kLarge * 4);
}
BENCHMARK(BM_Sum)->ComputeStatistics("min", min_of)->Unit(benchmark::kMillisecond)->UseRealTime();

void sum_dim(benchmark::State& state, int64_t dim) {
  ox::NoGradGuard ng;
  constexpr int64_t n = 4096;
  ox::Tensor a = ox::randn({n, n}, 1);
  for (auto _ : state) {
    ox::Tensor s = a.sum({dim});
    benchmark::DoNotOptimize(s.impl());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * n * 4);
}
void BM_SumRows(benchmark::State& state) { sum_dim(state, 1); }
BENCHMARK(BM_SumRows)->ComputeStatistics("min", min_of)->Unit(benchmark::kMillisecond)->UseRealTime();
void BM_SumCols(benchmark::State& state) { sum_dim(state, 0); }
BENCHMARK(BM_SumCols)->ComputeStatistics("min", min_of)->Unit(benchmark::kMillisecond)->UseRealTime();
// A Linear's bias gradient in the char transformer: the column sums of g [1024, 256].
void BM_SumColsSmall(benchmark::State& state) {
  ox::NoGradGuard ng;
  ox::Tensor a = ox::randn({1024, 256}, 1);
  for (auto _ : state) {
    ox::Tensor s = a.sum({0});
    benchmark::DoNotOptimize(s.impl());
  }
}
BENCHMARK(BM_SumColsSmall)->ComputeStatistics("min", min_of)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The research workload's small reductions: [3, 64, 16, 16] f64 over the last dim (3072 rows of 16) and over
// dim 2 (a middle dim; the outputs stay contiguous).
void sum_small(benchmark::State& state, int64_t dim) {
  ox::NoGradGuard ng;
  ox::Tensor a = ox::randn({3, 64, 16, 16}, 1, ox::DType::F64);
  for (auto _ : state) {
    ox::Tensor s = a.sum({dim}, true);
    benchmark::DoNotOptimize(s.impl());
    benchmark::ClobberMemory();
  }
}
void BM_SumShortRowsF64(benchmark::State& state) { sum_small(state, 3); }
BENCHMARK(BM_SumShortRowsF64)->ComputeStatistics("min", min_of)->Unit(benchmark::kMicrosecond);
void BM_SumMiddleDimF64(benchmark::State& state) { sum_small(state, 2); }
BENCHMARK(BM_SumMiddleDimF64)->ComputeStatistics("min", min_of)->Unit(benchmark::kMicrosecond);

void BM_Softmax(benchmark::State& state) {
  ox::NoGradGuard ng;
  ox::Tensor a = ox::randn({1024, 4096}, 1);
  for (auto _ : state) {
    ox::Tensor s = a.softmax(1);
    benchmark::DoNotOptimize(s.impl());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * int64_t{1024} * 4096 * 8);  // read + write
}
BENCHMARK(BM_Softmax)->ComputeStatistics("min", min_of)->Unit(benchmark::kMillisecond)->UseRealTime();

void gemm(benchmark::State& state, ox::DType dt) {
  ox::NoGradGuard ng;
  const int64_t n = state.range(0);
  ox::Tensor a = ox::randn({n, n}, 1, dt);
  ox::Tensor b = ox::randn({n, n}, 2, dt);
  for (auto _ : state) {
    ox::Tensor c = a.matmul(b);
    benchmark::DoNotOptimize(c.impl());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOPS"] =
      benchmark::Counter(2.0 * double(n) * double(n) * double(n) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
void BM_Sgemm(benchmark::State& state) { gemm(state, ox::DType::F32); }
BENCHMARK(BM_Sgemm)
    ->ComputeStatistics("min", min_of)
    ->RangeMultiplier(2)
    ->Range(64, 2048)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
void BM_Dgemm(benchmark::State& state) { gemm(state, ox::DType::F64); }
BENCHMARK(BM_Dgemm)->ComputeStatistics("min", min_of)->Arg(1024)->Unit(benchmark::kMicrosecond)->UseRealTime();

// A small layer's forward, x [M, K] weight [N, K]^T + bias (F::linear, the call nn::Linear makes): the shapes of the
// research MLP (64, 16, 8), the demo MLP (256, 32, 32 and 256, 32, 2) and the transformer's qkv (1024, 192, 64).
void BM_LinearSmall(benchmark::State& state) {
  ox::NoGradGuard ng;
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  ox::Tensor x = ox::randn({m, k}, 1), w = ox::randn({n, k}, 2), b = ox::randn({n}, 3);
  for (auto _ : state) {
    ox::Tensor y = ox::nn::functional::linear(x, w, b);
    benchmark::DoNotOptimize(y.impl());
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_LinearSmall)
    ->Args({64, 16, 8})
    ->Args({256, 32, 32})
    ->Args({256, 32, 2})
    ->Args({1024, 192, 64})
    ->ComputeStatistics("min", min_of)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

void batched(benchmark::State& state, const ox::Shape& sa, const ox::Shape& sb) {
  ox::NoGradGuard ng;
  ox::Tensor a = ox::randn(sa, 1);
  ox::Tensor b = ox::randn(sb, 2);
  for (auto _ : state) {
    ox::Tensor c = a.matmul(b);
    benchmark::DoNotOptimize(c.impl());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOPS"] =
      benchmark::Counter(2.0 * 192 * 16 * 16 * 16 * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
void BM_BatchedMatmulSmall(benchmark::State& state) { batched(state, {192, 16, 16}, {192, 16, 16}); }
BENCHMARK(BM_BatchedMatmulSmall)->ComputeStatistics("min", min_of)->Unit(benchmark::kMicrosecond)->UseRealTime();
void BM_BatchedMatmulBcast(benchmark::State& state) { batched(state, {192, 16, 16}, {16, 16}); }
BENCHMARK(BM_BatchedMatmulBcast)->ComputeStatistics("min", min_of)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

// Forward + backward of logdet via Cholesky on a batch of SPD matrices (issue #3's goal vs torch 1.13).
static void BM_CholeskyLogdet(benchmark::State& state) {
  using oxmera::Tensor;
  const int64_t n = state.range(0);
  Tensor x = oxmera::randn({3, 64, n, n}, 7);
  Tensor a = (x.matmul(x.transpose(-2, -1)) / static_cast<double>(n) + oxmera::eye(n) * 0.5).detach().requires_grad_();
  for (auto _ : state) {
    Tensor y = oxmera::linalg::logdet(a).sum();
    y.backward();
    a.zero_grad();
    benchmark::DoNotOptimize(y);
  }
}
BENCHMARK(BM_CholeskyLogdet)
    ->Arg(4)
    ->Arg(16)
    ->ComputeStatistics("min", min_of)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// Issue #13's structured ops at the shapes users reach for (bench/structured_torch.py is the torch twin; run
// both with bench/structured_compare.sh). Forward only, f32, 1 thread in the comparison.
ox::Tensor structured_x() { return ox::randn({1024, 1024}, 11); }
template <class F>
void structured(benchmark::State& state, F f) {
  ox::NoGradGuard ng;
  for (auto _ : state) {
    ox::Tensor y = f();
    benchmark::DoNotOptimize(y.impl());
  }
}
void BM_CausalMaskedFill(benchmark::State& state) {  // attention scores [16, 4, 64, 64]
  ox::Tensor s = ox::randn({16, 4, 64, 64}, 12), mask = ox::ones({64, 64}).triu(1);
  structured(state, [&] { return s.masked_fill(mask, -INFINITY); });
}
BENCHMARK(BM_CausalMaskedFill)->ComputeStatistics("min", min_of)->Unit(benchmark::kMicrosecond)->UseRealTime();
// scaled_dot_product_attention forward + backward, f32, causal: the CPU's fused kernels (the default) against the
// composite (batched GEMM, softmax, batched GEMM) at [N, H, L, E] = args; arg 4: 0 fused, 1 composite.
void BM_SdpaFwdBwd(benchmark::State& state) {
  const int64_t N = state.range(0), H = state.range(1), L = state.range(2), E = state.range(3);
  const bool composite = state.range(4) != 0;
  ox::Tensor q = ox::randn({N, H, L, E}, 1).requires_grad_(), k = ox::randn({N, H, L, E}, 2).requires_grad_(),
             v = ox::randn({N, H, L, E}, 3).requires_grad_(), g = ox::randn({N, H, L, E}, 4);
  namespace F = ox::nn::functional;
  for (auto _ : state) {
    ox::Tensor y = composite ? F::scaled_dot_product_attention_composite(q, k, v, {}, 0.0, true)
                             : F::scaled_dot_product_attention(q, k, v, {}, 0.0, true);
    auto grads = ox::autograd::grad({(y * g).sum()}, {q, k, v});
    benchmark::DoNotOptimize(grads[0].impl());
  }
}
BENCHMARK(BM_SdpaFwdBwd)
    ->ArgsProduct({{16}, {4}, {64}, {16}, {0, 1}})
    ->ArgsProduct({{4}, {4}, {256}, {32}, {0, 1}})
    ->ArgsProduct({{1}, {4}, {1024}, {64}, {0, 1}})
    ->ArgsProduct({{8}, {8}, {128}, {64}, {0, 1}})
    ->ComputeStatistics("min", min_of)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
// nn::functional::layer_norm forward (+ backward with arg 1) over rows of 64, the char transformer's [16 * 64, 64].
void BM_LayerNorm(benchmark::State& state) {
  const bool backward = state.range(0) != 0;
  ox::Tensor x = ox::randn({1024, 64}, 1).requires_grad_(), w = ox::ones({64}).requires_grad_(),
             b = ox::zeros({64}).requires_grad_(), g = ox::randn({1024, 64}, 2);
  for (auto _ : state) {
    if (backward) {
      ox::Tensor y = ox::nn::functional::layer_norm(x, {64}, w, b);
      auto grads = ox::autograd::grad({(y * g).sum()}, {x, w, b});
      benchmark::DoNotOptimize(grads[0].impl());
    } else {
      ox::NoGradGuard ng;
      ox::Tensor y = ox::nn::functional::layer_norm(x, {64}, w, b);
      benchmark::DoNotOptimize(y.impl());
    }
  }
}
BENCHMARK(BM_LayerNorm)->Arg(0)->Arg(1)->ComputeStatistics("min", min_of)->Unit(benchmark::kMicrosecond)->UseRealTime();
void BM_Tril(benchmark::State& state) {
  ox::Tensor x = structured_x();
  structured(state, [&] { return x.tril(); });
}
BENCHMARK(BM_Tril)->ComputeStatistics("min", min_of)->Unit(benchmark::kMicrosecond)->UseRealTime();
void BM_CumsumRows(benchmark::State& state) {
  ox::Tensor x = structured_x();
  structured(state, [&] { return x.cumsum(1); });
}
BENCHMARK(BM_CumsumRows)->ComputeStatistics("min", min_of)->Unit(benchmark::kMicrosecond)->UseRealTime();
void BM_SortRows(benchmark::State& state) {
  ox::Tensor x = structured_x();
  structured(state, [&] { return std::get<0>(x.sort(1)); });
}
BENCHMARK(BM_SortRows)->ComputeStatistics("min", min_of)->Unit(benchmark::kMicrosecond)->UseRealTime();
void BM_Topk5Rows(benchmark::State& state) {
  ox::Tensor x = structured_x();
  structured(state, [&] { return std::get<0>(x.topk(5, 1)); });
}
BENCHMARK(BM_Topk5Rows)->ComputeStatistics("min", min_of)->Unit(benchmark::kMicrosecond)->UseRealTime();
void BM_VarRows(benchmark::State& state) {
  ox::Tensor x = structured_x();
  structured(state, [&] { return x.var(1); });
}
BENCHMARK(BM_VarRows)->ComputeStatistics("min", min_of)->Unit(benchmark::kMicrosecond)->UseRealTime();
void BM_NormRows(benchmark::State& state) {
  ox::Tensor x = structured_x();
  structured(state, [&] { return x.norm(2, {1}); });
}
BENCHMARK(BM_NormRows)->ComputeStatistics("min", min_of)->Unit(benchmark::kMicrosecond)->UseRealTime();
void BM_FlipCols(benchmark::State& state) {
  ox::Tensor x = structured_x();
  structured(state, [&] { return x.flip({1}); });
}
BENCHMARK(BM_FlipCols)->ComputeStatistics("min", min_of)->Unit(benchmark::kMicrosecond)->UseRealTime();
void BM_Repeat2x2(benchmark::State& state) {
  ox::Tensor x = structured_x();
  structured(state, [&] { return x.repeat({2, 2}); });
}
BENCHMARK(BM_Repeat2x2)->ComputeStatistics("min", min_of)->Unit(benchmark::kMicrosecond)->UseRealTime();
// Transposing copies (contiguous() of a permuted view), f32: a square matrix, the per-image [K, L] -> [L, K] of a
// folded convolution, and attention's [B, L, H, E] -> [B, H, L, E] head split (contiguous runs of E).
void BM_TransposeCopy1024(benchmark::State& state) {
  ox::Tensor x = ox::randn({1024, 1024}, 1);
  structured(state, [&] { return x.t().contiguous(); });
}
BENCHMARK(BM_TransposeCopy1024)->ComputeStatistics("min", min_of)->Unit(benchmark::kMicrosecond)->UseRealTime();
void BM_TransposeCopyBatched(benchmark::State& state) {
  ox::Tensor x = ox::randn({32, 144, 16}, 1);
  structured(state, [&] { return x.transpose(1, 2).contiguous(); });
}
BENCHMARK(BM_TransposeCopyBatched)->ComputeStatistics("min", min_of)->Unit(benchmark::kMicrosecond)->UseRealTime();
void BM_HeadSplitCopy(benchmark::State& state) {
  ox::Tensor x = ox::randn({16, 64, 4, 16}, 1);
  structured(state, [&] { return x.permute({0, 2, 1, 3}).contiguous(); });
}
BENCHMARK(BM_HeadSplitCopy)->ComputeStatistics("min", min_of)->Unit(benchmark::kMicrosecond)->UseRealTime();
// ---------------------------------------------------------------- the plain RNN step, [16, 64] f32
// One step's activation of xt + hh, forward and backward (the LSTM benchmark's batch and hidden size): the fused
// nn::rnn_cell_gates (one pass forward) against the composite it replaced, (xt + hh).tanh().
void rnn_step(benchmark::State& state, bool fused) {
  ox::Tensor xt = ox::randn({16, 64}, 1).requires_grad_(), hh = ox::randn({16, 64}, 2).requires_grad_();
  const ox::Tensor g = ox::randn({16, 64}, 3);
  for (auto _ : state) {
    ox::Tensor h = fused ? ox::nn::rnn_cell_gates(xt, hh) : (xt + hh).tanh();
    auto grads = ox::autograd::grad({h}, {xt, hh}, {g});
    benchmark::DoNotOptimize(grads[0].impl());
  }
}
void BM_RnnStepFused(benchmark::State& state) { rnn_step(state, true); }
BENCHMARK(BM_RnnStepFused)->ComputeStatistics("min", min_of)->Unit(benchmark::kMicrosecond);
void BM_RnnStepComposite(benchmark::State& state) { rnn_step(state, false); }
BENCHMARK(BM_RnnStepComposite)->ComputeStatistics("min", min_of)->Unit(benchmark::kMicrosecond);

// ---------------------------------------------------------------- transcendental ops, [1024, 4096] f32
// Forward (BM_Tx/<op>/fwd) and forward + backward with a given output gradient (BM_Tx/<op>/fwdbwd) of each op the
// CPU runs with vectorised math; bench/transcendental_compare.sh runs these next to bench/transcendental_torch.py
// (same ops, shapes and input distributions) at 1 thread.
namespace tx {

struct TxOp {
  const char* name;
  int inputs;     // 1, or 2 for pow (both differentiable)
  double lo, hi;  // inputs uniform in [lo, hi) (pow's exponent: [-2, 2))
  ox::Tensor (*f)(const ox::Tensor&, const ox::Tensor&);
};
const TxOp kOps[] = {
    {"exp", 1, -4, 4, [](const ox::Tensor& x, const ox::Tensor&) { return x.exp(); }},
    {"log", 1, 0.01, 10, [](const ox::Tensor& x, const ox::Tensor&) { return x.log(); }},
    {"tanh", 1, -4, 4, [](const ox::Tensor& x, const ox::Tensor&) { return x.tanh(); }},
    {"erf", 1, -4, 4, [](const ox::Tensor& x, const ox::Tensor&) { return x.erf(); }},
    {"sigmoid", 1, -8, 8, [](const ox::Tensor& x, const ox::Tensor&) { return x.sigmoid(); }},
    {"gelu", 1, -4, 4, [](const ox::Tensor& x, const ox::Tensor&) { return x.gelu(); }},
    {"gelu_tanh", 1, -4, 4, [](const ox::Tensor& x, const ox::Tensor&) { return x.gelu("tanh"); }},
    {"silu", 1, -8, 8, [](const ox::Tensor& x, const ox::Tensor&) { return x.silu(); }},
    {"softplus", 1, -8, 8, [](const ox::Tensor& x, const ox::Tensor&) { return x.softplus(); }},
    {"sin", 1, -10, 10, [](const ox::Tensor& x, const ox::Tensor&) { return x.sin(); }},
    {"cos", 1, -10, 10, [](const ox::Tensor& x, const ox::Tensor&) { return x.cos(); }},
    {"pow", 2, 0.1, 4, [](const ox::Tensor& a, const ox::Tensor& b) { return a.pow(b); }},
};

void run(benchmark::State& state, const TxOp& op, bool backward) {
  const ox::Shape shape{1024, 4096};
  ox::Tensor x = (ox::rand(shape, 1) * (op.hi - op.lo) + op.lo).requires_grad_(backward);
  ox::Tensor b = (ox::rand(shape, 2) * 4.0 - 2.0).requires_grad_(backward && op.inputs == 2);
  ox::Tensor g = ox::randn(shape, 3);
  for (auto _ : state) {
    if (backward) {
      x.zero_grad();
      b.zero_grad();
      ox::Tensor y = op.f(x, b);
      y.backward(g);
      benchmark::DoNotOptimize(x.grad().impl());
    } else {
      ox::NoGradGuard ng;
      ox::Tensor y = op.f(x, b);
      benchmark::DoNotOptimize(y.impl());
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * shape.product());
}

const bool registered = [] {
  for (const TxOp& op : kOps)
    for (bool bwd : {false, true})
      benchmark::RegisterBenchmark((std::string("BM_Tx/") + op.name + (bwd ? "/fwdbwd" : "/fwd")).c_str(),
                                   [&op, bwd](benchmark::State& s) { run(s, op, bwd); })
          ->ComputeStatistics("min", min_of)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
  return true;
}();

}  // namespace tx

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("blas", ox::blas_name());
  benchmark::AddCustomContext("oxmera_threads", std::to_string(ox::get_num_threads()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
