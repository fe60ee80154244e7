// Trains a 2-32-32-2 tanh MLP on two interleaved spirals with the bare tensor API: autograd and a hand-written
// Adam, no nn or optim module, so it shows (and ctest's `demo_training` checks) that tensors and autograd alone
// can learn. `oxmera train` runs the same task with nn and optim (src/workloads/demo_training.cpp).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include <oxmera/oxmera.hpp>

using namespace oxmera;

namespace {

struct Data {
  Tensor x;       // [N, 2] f32
  Tensor onehot;  // [N, 2] f32
  std::vector<int64_t> labels;
};

Data spirals(int64_t n, double noise, uint64_t seed) {
  Generator gen(seed);
  std::vector<float> xs;
  std::vector<float> oh;
  Data d;
  for (int64_t i = 0; i < n; ++i) {
    // Two interleaved arms of one turn each; point k of class c sits at radius k/(n/2).
    int64_t cls = i % 2;
    double frac = static_cast<double>(i / 2) / static_cast<double>(n / 2);
    double r = 0.1 + 0.9 * frac;
    double angle = 2.0 * M_PI * frac + static_cast<double>(cls) * M_PI;
    xs.push_back(static_cast<float>(r * std::cos(angle) + noise * gen.next_normal()));
    xs.push_back(static_cast<float>(r * std::sin(angle) + noise * gen.next_normal()));
    oh.push_back(cls == 0 ? 1.f : 0.f);
    oh.push_back(cls == 1 ? 1.f : 0.f);
    d.labels.push_back(cls);
  }
  d.x = from_vector(xs, {n, 2});
  d.onehot = from_vector(oh, {n, 2});
  return d;
}

Tensor init_weight(int64_t in, int64_t out, uint64_t seed) {
  double bound = std::sqrt(6.0 / static_cast<double>(in + out));  // xavier uniform
  return ((rand({in, out}, seed) * 2.0 - 1.0) * bound).requires_grad_();
}

}  // namespace

int main(int argc, char** argv) {
  int epochs = argc > 1 ? std::atoi(argv[1]) : 200;
  const int64_t n = 256, batch = 32;
  Data data = spirals(n, 0.08, 7);
  std::vector<Tensor> params = {init_weight(2, 32, 1),  zeros({32}).requires_grad_(),
                                init_weight(32, 32, 2), zeros({32}).requires_grad_(),
                                init_weight(32, 2, 3),  zeros({2}).requires_grad_()};
  std::vector<Tensor> m1, m2;
  for (auto& p : params) {
    m1.push_back(zeros_like(p));
    m2.push_back(zeros_like(p));
  }
  const double lr = 0.03, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  int64_t step = 0;
  auto forward = [&](const Tensor& x) {
    Tensor h = (x.matmul(params[0]) + params[1]).tanh();
    h = (h.matmul(params[2]) + params[3]).tanh();
    return h.matmul(params[4]) + params[5];
  };
  std::printf("oxmera %s — MLP 2-32-32-2 on two spirals (%lld points), Adam, batch %lld\n", kVersion,
              static_cast<long long>(n), static_cast<long long>(batch));
  std::printf("BLAS: %s\n", blas_name());
  double final_acc = 0.0;
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    auto t0 = std::chrono::steady_clock::now();
    double loss_sum = 0.0;
    for (int64_t b = 0; b < n; b += batch) {
      Tensor xb = data.x.narrow(0, b, batch), yb = data.onehot.narrow(0, b, batch);
      Tensor loss = -(forward(xb).log_softmax(1) * yb).sum({1}).mean();
      for (auto& p : params) p.zero_grad();
      loss.backward();
      loss_sum += loss.item<float>();
      NoGradGuard ng;
      ++step;
      const double c1 = 1.0 - std::pow(beta1, static_cast<double>(step));
      const double c2 = 1.0 - std::pow(beta2, static_cast<double>(step));
      for (size_t i = 0; i < params.size(); ++i) {
        Tensor g = params[i].grad();
        m1[i].mul_(beta1).add_(g, 1.0 - beta1);
        m2[i].mul_(beta2).add_(g * g, 1.0 - beta2);
        params[i].add_((m1[i] / c1) / ((m2[i] / c2).sqrt() + eps), -lr);
      }
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    Tensor pred;
    {
      NoGradGuard ng;
      pred = forward(data.x).argmax(1);
    }
    auto p = pred.to_vector<int64_t>();
    int64_t correct = 0;
    for (int64_t i = 0; i < n; ++i) correct += p[i] == data.labels[i];
    final_acc = static_cast<double>(correct) / static_cast<double>(n);
    if (epoch % 20 == 0 || epoch == 1 || epoch == epochs)
      std::printf("epoch %3d  loss %.4f  accuracy %5.1f%%  %8.0f samples/s\n", epoch,
                  loss_sum / static_cast<double>(n / batch), 100.0 * final_acc, static_cast<double>(n) / secs);
  }
  return final_acc >= 0.9 ? 0 : 1;
}
