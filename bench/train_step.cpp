// Time per training step (forward + loss + zero_grad + backward + Adam step) of two small models, the
// oxmera half of bench/train_compare.sh (the PyTorch twin is bench/train_step_torch.py).
//   mlp: 2-32-32-2 tanh MLP, 256 random "two-spirals" points cut into 8 batches of 32, cross entropy, Adam lr 0.01
//   cnn: Conv2d(1,8,3,p1)-ReLU-MaxPool2-Conv2d(8,16,3,p1)-ReLU-MaxPool2-Flatten-Linear(784,10), batch 64,
//        28x28x1 random images (4 pre-built batches), cross entropy, Adam lr 0.01
// Data values do not matter for timing; batches are pre-built so indexing is not timed (same in the twin).
// Usage: oxmera_train_bench [threads] [mlp_steps] [cnn_steps] [only: mlp|cnn|all]
// Prints one line per workload: "<name> threads=N steps=S median_us=M mean_us=A p10_us=.. p90_us=.."
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "oxmera/nn.hpp"
#include "oxmera/optim.hpp"
#include "oxmera/oxmera.hpp"

namespace ox = oxmera;
namespace nn = oxmera::nn;
using Clock = std::chrono::steady_clock;

namespace {

struct Batch {
  ox::Tensor x, y;
};

std::vector<Batch> make_batches(int n_batches, const ox::Shape& xshape, int64_t classes, uint64_t seed) {
  std::vector<Batch> out;
  for (int b = 0; b < n_batches; ++b) {
    ox::Tensor x = ox::randn(xshape, seed + 2 * b);
    std::vector<int64_t> labels(static_cast<size_t>(xshape[0]));
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>((i * 7 + b) % classes);
    out.push_back({x, ox::from_vector(labels, ox::Shape{xshape[0]})});
  }
  return out;
}

void report(const char* name, int threads, std::vector<double> us, double checksum) {
  std::sort(us.begin(), us.end());
  double sum = 0;
  for (double v : us) sum += v;
  const size_t n = us.size();
  std::printf("%s threads=%d steps=%zu median_us=%.2f mean_us=%.2f p10_us=%.2f p90_us=%.2f loss=%.4f\n", name, threads,
              n, us[n / 2], sum / n, us[n / 10], us[n * 9 / 10], checksum);
  std::fflush(stdout);
}

template <class Model>
void run(const char* name, Model& net, const std::vector<Batch>& batches, int threads, int warmup, int steps) {
  ox::optim::AdamOptions ao;
  ao.lr = 0.01;
  ox::optim::Adam opt(net.parameters(), ao);
  std::vector<double> us;
  us.reserve(static_cast<size_t>(steps));
  double last_loss = 0;
  for (int s = 0; s < warmup + steps; ++s) {
    const Batch& b = batches[static_cast<size_t>(s) % batches.size()];
    auto t0 = Clock::now();
    ox::Tensor loss = nn::cross_entropy(net(b.x), b.y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    auto t1 = Clock::now();
    if (s >= warmup) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    if (s + 1 == warmup + steps) last_loss = loss.item<float>();
  }
  report(name, threads, std::move(us), last_loss);
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int mlp_steps = argc > 2 ? std::atoi(argv[2]) : 2000;
  const int cnn_steps = argc > 3 ? std::atoi(argv[3]) : 200;
  const std::string only = argc > 4 ? argv[4] : "all";
  ox::set_num_threads(threads);
  ox::manual_seed(0);

  if (only == "all" || only == "mlp") {
    nn::Sequential mlp{std::make_shared<nn::Linear>(2, 32), std::make_shared<nn::Tanh>(),
                       std::make_shared<nn::Linear>(32, 32), std::make_shared<nn::Tanh>(),
                       std::make_shared<nn::Linear>(32, 2)};
    auto batches = make_batches(8, ox::Shape{32, 2}, 2, 1);  // 256 points = 8 batches of 32
    run("mlp", mlp, batches, threads, 200, mlp_steps);
  }
  if (only == "all" || only == "cnn") {
    nn::Conv2dOptions p1;
    p1.padding = {1, 1};
    nn::Sequential cnn{std::make_shared<nn::Conv2d>(1, 8, nn::Pair{3, 3}, p1),
                       std::make_shared<nn::ReLU>(),
                       std::make_shared<nn::MaxPool2d>(nn::Pair{2, 2}),
                       std::make_shared<nn::Conv2d>(8, 16, nn::Pair{3, 3}, p1),
                       std::make_shared<nn::ReLU>(),
                       std::make_shared<nn::MaxPool2d>(nn::Pair{2, 2}),
                       std::make_shared<nn::Flatten>(),
                       std::make_shared<nn::Linear>(16 * 7 * 7, 10)};
    auto batches = make_batches(4, ox::Shape{64, 1, 28, 28}, 10, 100);
    run("cnn", cnn, batches, threads, 20, cnn_steps);
  }
  return 0;
}
