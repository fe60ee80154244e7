// GPU benchmarks (scripts/gpu-check.sh): sgemm 4096^3 through oxmera and through cuBLAS directly on the same
// data (alternating, best of 3 rounds), elementwise GB/s on 256M floats vs cudaMemcpy device-to-device, the
// host time from call to enqueue of a tiny op and its completed throughput, one demo training step CPU vs
// GPU (reading the loss each step, and without), and a 784-1024-1024-10 MLP step (batch 256) where a GPU
// should win, each also as a replayed CUDA graph; an LSTM and a transformer encoder layer step (the nn kernels) CPU vs
// GPU. Prints `key value unit` lines and the ratios issue #6 asks for; exits
// 77 (skip) without a usable GPU.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <vector>

#include <oxmera/oxmera.hpp>

using namespace oxmera;
using clk = std::chrono::steady_clock;

namespace {
double secs(clk::time_point a) { return std::chrono::duration<double>(clk::now() - a).count(); }
void sync(const Tensor& t) { (void)t.to(Device::cpu()).numel(); }  // the host read is the sync point

// The no-sync and graph steps' models: the demo-sized 2-32-32-2 ReLU MLP (batch 32) or the 784-1024-1024-10 one
// (batch 256), from one seed, with its input batch.
struct BenchMlp {
  int64_t in, batch;
  std::shared_ptr<nn::Sequential> model;
};
BenchMlp bench_mlp(bool big, Device dev) {
  Generator gen(2);
  const int64_t in = big ? 784 : 2, hid = big ? 1024 : 32, out = big ? 10 : 2, batch = big ? 256 : 32;
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(in, hid, true, gen), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(hid, hid, true, gen), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(hid, out, true, gen)});
  model->to(dev);
  return {in, batch, model};
}
// One training step of the benchmarks' classifiers: cross entropy, backward, Adam. Returns the loss (not read).
Tensor adam_step(nn::Sequential& model, optim::Adam& adam, const Tensor& x, const Tensor& y) {
  Tensor l = nn::cross_entropy(model(x), y);
  adam.zero_grad();
  l.backward();
  adam.step();
  return l;
}
}  // namespace

int main() {
  double copy_gbs = 0;
  init();
  const Device g = Device::cuda();
  if (!device_available(g)) {
    std::printf("skip: no usable CUDA device\n");
    return 77;
  }
  {  // sgemm 4096^3, oxmera and cuBLAS on the same random data, alternating; best of 3 rounds of 5 each
    const int64_t n = 4096;
    Tensor ha = randn({n, n}, 1), hb = randn({n, n}, 2);
    Tensor a = ha.to(g), b = hb.to(g);
    Tensor c = a.matmul(b);
    sync(c.sum());
    cublasHandle_t h;
    cublasCreate(&h);
    float *A, *B, *C;
    cudaMalloc(&A, n * n * 4);
    cudaMalloc(&B, n * n * 4);
    cudaMalloc(&C, n * n * 4);
    const std::vector<float> va = ha.to_vector<float>(), vb = hb.to_vector<float>();
    cudaMemcpy(A, va.data(), n * n * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(B, vb.data(), n * n * 4, cudaMemcpyHostToDevice);
    const float one = 1, zero = 0;
    cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, n, B, n, &zero, C, n);
    cudaDeviceSynchronize();
    double best_ox = 1e30, best_cb = 1e30;
    for (int round = 0; round < 3; ++round) {
      auto t0 = clk::now();
      for (int i = 0; i < 5; ++i) c = a.matmul(b);
      sync(c.slice(0, 0, 1));
      best_ox = std::min(best_ox, secs(t0) / 5);
      t0 = clk::now();
      for (int i = 0; i < 5; ++i) cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, n, B, n, &zero, C, n);
      cudaDeviceSynchronize();
      best_cb = std::min(best_cb, secs(t0) / 5);
    }
    const double flop = 2.0 * n * n * n;
    std::printf("sgemm_oxmera %.1f TFLOP/s\n", flop / best_ox / 1e12);
    std::printf("sgemm_cublas %.1f TFLOP/s\n", flop / best_cb / 1e12);
    std::printf("sgemm_oxmera_vs_cublas %.3f (goal >= 0.90)\n", best_cb / best_ox);
    // device-to-device copy bandwidth over 256M floats (read + write bytes)
    const size_t bytes = size_t{256} << 22;
    float *X, *Y;
    cudaFree(A);
    cudaFree(B);
    cudaFree(C);
    cublasDestroy(h);
    cudaMalloc(&X, bytes);
    cudaMalloc(&Y, bytes);
    cudaMemcpy(Y, X, bytes, cudaMemcpyDeviceToDevice);
    cudaDeviceSynchronize();
    auto t0 = clk::now();
    for (int i = 0; i < 5; ++i) cudaMemcpy(Y, X, bytes, cudaMemcpyDeviceToDevice);
    cudaDeviceSynchronize();
    copy_gbs = 2.0 * bytes / (secs(t0) / 5) / 1e9;
    std::printf("memcpy_d2d %.0f GB/s\n", copy_gbs);
    cudaFree(X);
    cudaFree(Y);
  }
  {  // elementwise on 256M floats: y = x * x (1 read + 1 write) and a + b (2 reads + 1 write)
    const int64_t n = int64_t{256} << 20;
    Tensor x = zeros({n}).to(g), y;
    y = x.square();
    sync(y.slice(0, 0, 1));
    auto t0 = clk::now();
    for (int i = 0; i < 5; ++i) y = x.square();
    sync(y.slice(0, 0, 1));
    const double sq = 8.0 * n / (secs(t0) / 5) / 1e9;
    std::printf("unary_square %.0f GB/s (%.2f of memcpy_d2d, goal >= 0.70)\n", sq, sq / copy_gbs);
    Tensor x2 = ones({n}).to(g);
    y = x + x2;
    sync(y.slice(0, 0, 1));
    t0 = clk::now();
    for (int i = 0; i < 5; ++i) y = x + x2;
    sync(y.slice(0, 0, 1));
    const double add = 12.0 * n / (secs(t0) / 5) / 1e9;
    std::printf("binary_add %.0f GB/s (%.2f of memcpy_d2d, goal >= 0.70)\n", add, add / copy_gbs);
  }
  {  // a tiny op: host time from call to enqueue (500 ops, no sync inside), then completed throughput
    Tensor t = ones({16}).to(g);
    sync(t + 1.0);
    double best = 1e30;
    for (int round = 0; round < 5; ++round) {
      auto t0 = clk::now();
      for (int i = 0; i < 500; ++i) t = t + 1.0;
      best = std::min(best, secs(t0) / 500);
      sync(t);
    }
    std::printf("tiny_op_call_to_enqueue %.2f us (goal <= 5)\n", best * 1e6);
    auto t0 = clk::now();
    for (int i = 0; i < 10000; ++i) t = t + 1.0;
    sync(t);
    std::printf("tiny_op_completed %.2f us per op (10000 ops, one sync)\n", secs(t0) / 10000 * 1e6);
  }
  double step_us[2] = {0, 0};
  for (Device dev : {Device::cpu(), g}) {  // one demo training step (2-32-32-2 MLP, batch 32, Adam)
    Generator gen(1);
    nn::Sequential model{std::make_shared<nn::Linear>(2, 32, true, gen), std::make_shared<nn::Tanh>(),
                         std::make_shared<nn::Linear>(32, 32, true, gen), std::make_shared<nn::Tanh>(),
                         std::make_shared<nn::Linear>(32, 2, true, gen)};
    model.to(dev);
    Tensor x = randn({32, 2}, 3).to(dev), y = zeros({32}, DType::I64);  // class targets stay on the CPU
    optim::Adam adam(model.parameters());
    auto step = [&] { return adam_step(model, adam, x, y).item<float>(); };
    step();
    auto t0 = clk::now();
    for (int i = 0; i < 100; ++i) step();
    step_us[dev.is_cpu() ? 0 : 1] = secs(t0) / 100 * 1e6;
    std::printf("train_step_%s %.1f us (%d CPU threads)\n", dev.is_cpu() ? "cpu" : "cuda",
                step_us[dev.is_cpu() ? 0 : 1], get_num_threads());
  }
  std::printf("train_step_cuda_vs_cpu %.2f (goal < 1: the GPU step faster)\n", step_us[1] / step_us[0]);
  // The same step without reading the loss back each time (throughput when the host never waits), and a
  // model big enough for a GPU to pay off: 784-1024-1024-10 ReLU MLP, batch 256, cross entropy + Adam.
  for (int big = 0; big < 2; ++big) {
    double us[2] = {0, 0};
    for (Device dev : {Device::cpu(), g}) {
      const BenchMlp m = bench_mlp(big, dev);
      nn::Sequential& model = *m.model;
      Tensor x = randn({m.batch, m.in}, 4).to(dev), y = zeros({m.batch}, DType::I64);
      optim::Adam adam(model.parameters());
      Tensor l;
      auto step = [&] { l = adam_step(model, adam, x, y); };
      step();
      (void)l.item<float>();
      const int n = big ? 20 : 200;
      auto t0 = clk::now();
      for (int i = 0; i < n; ++i) step();
      (void)l.item<float>();  // one wait at the end
      us[dev.is_cpu() ? 0 : 1] = secs(t0) / n * 1e6;
    }
    std::printf("%s_step_no_sync cpu %.1f us, cuda %.1f us, cuda/cpu %.3f (%d CPU threads)\n",
                big ? "mlp784x1024_b256" : "demo_mlp", us[0], us[1], us[1] / us[0], get_num_threads());
    // The GPU step captured once as a CUDA graph (cuda::Graph) and replayed: one launch per step.
    const BenchMlp m = bench_mlp(big, g);
    nn::Sequential& model = *m.model;
    Tensor x = randn({m.batch, m.in}, 4).to(g), y = zeros({m.batch}, DType::I64, g);
    optim::Adam adam(model.parameters());
    auto step = [&] { return adam_step(model, adam, x, y); };
    (void)step().item<float>();  // the optimizer's state, before the capture
    cuda::Graph graph;
    Tensor l;
    {
      cuda::GraphCapture capture(graph);
      l = step();
    }
    graph.replay();
    (void)l.item<float>();
    const int n = big ? 20 : 200;
    auto t0 = clk::now();
    for (int i = 0; i < n; ++i) graph.replay();
    (void)l.item<float>();
    const double graph_us = secs(t0) / n * 1e6;
    std::printf(
        "%s_step_graph cuda %.1f us, graph/cpu %.3f, graph/eager cuda %.3f (goal < 1: the replayed GPU step "
        "faster than the CPU's)\n",
        big ? "mlp784x1024_b256" : "demo_mlp", graph_us, graph_us / us[0], graph_us / us[1]);
  }
  // Layers with the CUDA nn kernels (cuda_nn.cu): an LSTM (hidden 64, sequence 32, batch 16, issue #15's size) and a
  // transformer encoder layer (d 64, 4 heads, GELU, norm first, causal; batch 16, context 64), one forward + backward
  // + SGD step each, CPU against GPU without a read-back per step.
  for (int which = 0; which < 2; ++which) {
    double us[2] = {0, 0};
    for (Device dev : {Device::cpu(), g}) {
      Generator gen(3);
      std::shared_ptr<nn::Module> net;
      Tensor x;
      std::function<Tensor()> loss;
      if (which == 0) {
        auto lstm = std::make_shared<nn::LSTM>(64, 64, nn::RNNOptions{}, gen);
        lstm->to(dev);
        x = randn({32, 16, 64}, 5).to(dev);
        loss = [lstm, &x] { return std::get<0>(lstm->forward(x)).square().mean(); };
        net = lstm;
      } else {
        auto layer = std::make_shared<nn::TransformerEncoderLayer>(
            64, 4,
            nn::TransformerEncoderLayerOptions{
                .dim_feedforward = 256, .dropout = 0, .activation = "gelu", .batch_first = true, .norm_first = true},
            gen);
        layer->to(dev);
        x = randn({16, 64, 64}, 6).to(dev);
        loss = [layer, &x] { return layer->forward(x, {}, {}, true).square().mean(); };
        net = layer;
      }
      optim::SGD sgd(net->parameters(), {.lr = 1e-3});
      Tensor l;
      auto step = [&] {
        l = loss();
        sgd.zero_grad();
        l.backward();
        sgd.step();
      };
      step();
      (void)l.item<float>();
      const int n = 30;
      auto t0 = clk::now();
      for (int i = 0; i < n; ++i) step();
      (void)l.item<float>();
      us[dev.is_cpu() ? 0 : 1] = secs(t0) / n * 1e6;
    }
    std::printf("%s_step_no_sync cpu %.1f us, cuda %.1f us, cuda/cpu %.3f (%d CPU threads)\n",
                which == 0 ? "lstm_h64_t32_b16" : "transformer_layer_d64_b16_t64", us[0], us[1], us[1] / us[0],
                get_num_threads());
  }
  return 0;
}
