// GPU benchmarks (scripts/gpu-check.sh): sgemm 4096^3 through oxmera and through cuBLAS directly, elementwise
// GB/s on 256M floats vs cudaMemcpy device-to-device, per-op launch overhead of a tiny op, and one demo
// training step CPU vs GPU. Prints `key value unit` lines; exits 77 (skip) without a usable GPU.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>

#include <oxmera/oxmera.hpp>

using namespace oxmera;
using clk = std::chrono::steady_clock;

namespace {
double secs(clk::time_point a) { return std::chrono::duration<double>(clk::now() - a).count(); }
void sync(const Tensor& t) { (void)t.to(Device::cpu()).numel(); }  // the host read is the sync point
}  // namespace

int main() {
  init();
  const Device g = Device::cuda();
  if (!device_available(g)) {
    std::printf("skip: no usable CUDA device\n");
    return 77;
  }
  {  // sgemm 4096^3
    const int64_t n = 4096;
    Tensor a = randn({n, n}, 1).to(g), b = randn({n, n}, 2).to(g);
    Tensor c = a.matmul(b);
    sync(c.sum());
    auto t0 = clk::now();
    for (int i = 0; i < 5; ++i) c = a.matmul(b);
    sync(c.sum());
    const double s = secs(t0) / 5;
    std::printf("sgemm_oxmera %.1f TFLOP/s\n", 2.0 * n * n * n / s / 1e12);
    cublasHandle_t h;
    cublasCreate(&h);
    float *A, *B, *C;
    cudaMalloc(&A, n * n * 4);
    cudaMalloc(&B, n * n * 4);
    cudaMalloc(&C, n * n * 4);
    const float one = 1, zero = 0;
    cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, n, B, n, &zero, C, n);
    cudaDeviceSynchronize();
    t0 = clk::now();
    for (int i = 0; i < 5; ++i) cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, n, B, n, &zero, C, n);
    cudaDeviceSynchronize();
    std::printf("sgemm_cublas %.1f TFLOP/s\n", 2.0 * n * n * n / (secs(t0) / 5) / 1e12);
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
    t0 = clk::now();
    for (int i = 0; i < 5; ++i) cudaMemcpy(Y, X, bytes, cudaMemcpyDeviceToDevice);
    cudaDeviceSynchronize();
    std::printf("memcpy_d2d %.0f GB/s\n", 2.0 * bytes / (secs(t0) / 5) / 1e9);
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
    std::printf("unary_square %.0f GB/s\n", 8.0 * n / (secs(t0) / 5) / 1e9);
    t0 = clk::now();
    for (int i = 0; i < 5; ++i) y = x + x;
    sync(y.slice(0, 0, 1));
    std::printf("binary_add %.0f GB/s\n", 12.0 * n / (secs(t0) / 5) / 1e9);
  }
  {  // launch overhead: 10000 tiny ops, one sync at the end
    Tensor t = ones({16}).to(g);
    sync(t + 1.0);
    auto t0 = clk::now();
    for (int i = 0; i < 10000; ++i) t = t + 1.0;
    sync(t);
    std::printf("tiny_op_overhead %.2f us\n", secs(t0) / 10000 * 1e6);
  }
  for (Device dev : {Device::cpu(), g}) {  // one demo training step (2-32-32-2 MLP, batch 32, Adam)
    Generator gen(1);
    nn::Sequential model{std::make_shared<nn::Linear>(2, 32, true, gen), std::make_shared<nn::Tanh>(),
                         std::make_shared<nn::Linear>(32, 32, true, gen), std::make_shared<nn::Tanh>(),
                         std::make_shared<nn::Linear>(32, 2, true, gen)};
    model.to(dev);
    Tensor x = randn({32, 2}, 3).to(dev), y = zeros({32}, DType::I64).to(dev);
    optim::Adam adam(model.parameters());
    auto step = [&] {
      Tensor l = nn::cross_entropy(model(x), y);
      adam.zero_grad();
      l.backward();
      adam.step();
      return l.item<float>();
    };
    step();
    auto t0 = clk::now();
    for (int i = 0; i < 100; ++i) step();
    std::printf("train_step_%s %.1f us\n", dev.is_cpu() ? "cpu" : "cuda", secs(t0) / 100 * 1e6);
  }
  return 0;
}
