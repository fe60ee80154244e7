// Time per higher-order step, the oxmera half of bench/higher_order_compare.sh (PyTorch twin: higher_order_torch.py).
//   hvp:   Hessian-vector product of a 2-32-32-2 tanh MLP loss (nn::Linear layers, batch 32, f32) w.r.t. its six
//          parameters: g = grad(loss, params, create_graph), hv = grad(<g, v>, params). The loss is the negative log
//          likelihood built from log_softmax + gather + mean (the fused cross entropy has no second derivative yet).
//   fxhvp: the same product by autograd::functional::hvp (torch.autograd.functional.hvp in the twin: three
//          backward passes, the double-vjp trick).
//   wgan:  one WGAN-GP critic step on a 2-32-32-1 tanh MLP critic, batch 64: D(fake).mean() - D(real).mean()
//          + 10 (||grad_x D(xhat)|| - 1)^2 with xhat = eps real + (1 - eps) fake (create_graph), zero_grad,
//          backward into the critic's weights, Adam step (lr 1e-4, betas (0.5, 0.9)).
// Inputs are pre-built (8 batches; eps included) so data generation is not timed (same in the twin).
// Usage: oxmera_higher_order_bench [threads] [steps] [only: hvp|fxhvp|wgan|all]
// Prints one line per workload: "<name> threads=N steps=S median_us=M mean_us=A p10_us=.. p90_us=.. check=.."
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "oxmera/nn.hpp"
#include "oxmera/optim.hpp"
#include "oxmera/oxmera.hpp"

namespace ox = oxmera;
namespace nn = oxmera::nn;
namespace fx = oxmera::autograd::functional;
using Clock = std::chrono::steady_clock;

namespace {

void report(const char* name, int threads, std::vector<double> us, double check) {
  std::sort(us.begin(), us.end());
  double sum = 0;
  for (double v : us) sum += v;
  const size_t n = us.size();
  std::printf("%s threads=%d steps=%zu median_us=%.2f mean_us=%.2f p10_us=%.2f p90_us=%.2f check=%.6g\n", name, threads,
              n, us[n / 2], sum / n, us[n / 10], us[n * 9 / 10], check);
  std::fflush(stdout);
}

nn::Sequential make_mlp(int64_t out) {
  return nn::Sequential{std::make_shared<nn::Linear>(2, 32), std::make_shared<nn::Tanh>(),
                        std::make_shared<nn::Linear>(32, 32), std::make_shared<nn::Tanh>(),
                        std::make_shared<nn::Linear>(32, out)};
}

template <class Body>
void time_steps(const char* name, int threads, int warmup, int steps, Body body) {
  std::vector<double> us;
  us.reserve(static_cast<size_t>(steps));
  double check = 0;
  for (int s = 0; s < warmup + steps; ++s) {
    auto t0 = Clock::now();
    double c = body(s);
    auto t1 = Clock::now();
    if (s >= warmup) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    if (s + 1 == warmup + steps) check = c;
  }
  report(name, threads, std::move(us), check);
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 1000;
  const std::string only = argc > 3 ? argv[3] : "all";
  ox::set_num_threads(threads);
  ox::manual_seed(0);
  const int warmup = std::max(20, steps / 10);

  if (only == "all" || only == "hvp" || only == "fxhvp") {
    nn::Sequential net = make_mlp(2);
    std::vector<ox::Tensor> params = net.parameters();
    std::vector<ox::Tensor> xs, ys, vs;
    for (int b = 0; b < 8; ++b) {
      xs.push_back(ox::randn({32, 2}, 10 + b));
      std::vector<int64_t> labels(32);
      for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>((i * 7 + b) % 2);
      ys.push_back(ox::from_vector(labels, ox::Shape{32, 1}));
    }
    for (size_t i = 0; i < params.size(); ++i) vs.push_back(ox::randn(params[i].shape(), 100 + i));
    auto nll = [&](const ox::Tensor& x, const ox::Tensor& y) { return -net(x).log_softmax(1).gather(1, y).mean(); };
    if (only != "fxhvp")
      time_steps("hvp", threads, warmup, steps, [&](int s) {
        const size_t b = static_cast<size_t>(s) % xs.size();
        std::vector<ox::Tensor> g = ox::autograd::grad({nll(xs[b], ys[b])}, params, {}, false, true);
        ox::Tensor dot = (g[0] * vs[0]).sum();
        for (size_t i = 1; i < g.size(); ++i) dot = dot + (g[i] * vs[i]).sum();
        std::vector<ox::Tensor> hv = ox::autograd::grad({dot}, params);
        return hv[0].sum().item<float>();
      });
    if (only != "hvp")
      time_steps("fxhvp", threads, warmup, steps, [&](int s) {
        const size_t b = static_cast<size_t>(s) % xs.size();
        auto f = [&](const std::vector<ox::Tensor>& p) {
          // The parameters as explicit inputs: a functional forward of the same network.
          ox::Tensor h = nn::functional::linear(xs[b], p[0], p[1]).tanh();
          h = nn::functional::linear(h, p[2], p[3]).tanh();
          return -nn::functional::linear(h, p[4], p[5]).log_softmax(1).gather(1, ys[b]).mean();
        };
        return fx::hvp(f, params, vs).second[0].sum().item<float>();
      });
  }
  if (only == "all" || only == "wgan") {
    nn::Sequential critic = make_mlp(1);
    ox::optim::AdamOptions ao;
    ao.lr = 1e-4;
    ao.betas = {0.5, 0.9};
    ox::optim::Adam opt(critic.parameters(), ao);
    std::vector<ox::Tensor> real, fake, eps;
    for (int b = 0; b < 8; ++b) {
      real.push_back(ox::randn({64, 2}, 200 + b));
      fake.push_back(ox::randn({64, 2}, 300 + b) + 1.0);
      eps.push_back(ox::rand({64, 1}, 400 + b));
    }
    time_steps("wgan", threads, warmup, steps, [&](int s) {
      const size_t b = static_cast<size_t>(s) % real.size();
      ox::Tensor xhat = (eps[b] * real[b] + (1.0 - eps[b]) * fake[b]).requires_grad_(true);
      ox::Tensor gx = ox::autograd::grad({critic(xhat).sum()}, {xhat}, {}, false, true)[0];
      ox::Tensor gp = (gx.norm(2.0, {1}) - 1.0).square().mean();
      ox::Tensor loss = critic(fake[b]).mean() - critic(real[b]).mean() + 10.0 * gp;
      opt.zero_grad();
      loss.backward();
      opt.step();
      return loss.item<float>();
    });
  }
  return 0;
}
