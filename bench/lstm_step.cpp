// One LSTM training step (nn::LSTM hidden 64, input 64, sequence 32, batch 16; mse loss on the output; SGD),
// the twin of lstm_torch.py, from the same initial weights and data (written by `lstm_torch.py init`).
// Usage: oxmera_lstm_step FILE STEPS [THREADS]; prints "lstm ... median_us=..." and the losses.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "oxmera/io.hpp"
#include "oxmera/nn.hpp"
#include "oxmera/optim.hpp"
#include "oxmera/oxmera.hpp"

using namespace oxmera;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s FILE STEPS [THREADS]\n", argv[0]);
    return 2;
  }
  const int steps = std::atoi(argv[2]), threads = argc > 3 ? std::atoi(argv[3]) : 1;
  set_num_threads(threads);
  std::map<std::string, Tensor> file = load_safetensors(argv[1]);
  const Tensor x = file["data.x"], y = file["data.y"];
  file.erase("data.x");
  file.erase("data.y");
  auto lstm = std::make_shared<nn::LSTM>(64, 64);
  lstm->load_state_dict(file);
  optim::SGD opt(lstm->parameters(), {.lr = 0.1});
  const int warmup = 5;
  std::vector<double> times, losses;
  for (int s = 0; s < warmup + steps; ++s) {
    auto t0 = std::chrono::steady_clock::now();
    auto [out, hc] = lstm->forward(x);
    Tensor loss = nn::mse_loss(out, y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    auto t1 = std::chrono::steady_clock::now();
    losses.push_back(loss.item<float>());
    if (s >= warmup) times.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  std::printf("lstm threads=%d steps=%zu median_us=%.2f p10_us=%.2f p90_us=%.2f loss=%.6f\n", threads, n, sorted[n / 2],
              sorted[n / 10], sorted[n * 9 / 10], losses.back());
  std::printf("losses");
  for (double v : losses) std::printf(" %.7f", v);
  std::printf("\n");
  return 0;
}
