// The demo task of `oxmera train`: two interleaved spirals, MLP 2-32-32-2 with tanh, Adam, cross entropy.
#include "demo_training.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <vector>

#include <oxmera/oxmera.hpp>

#include "batch_order.hpp"

namespace oxmera::workloads {
namespace {

struct Spirals {
  Tensor x;       // [n, 2] f32
  Tensor labels;  // [n] i64
};

// 256 points, 2 classes, one turn per arm, Gaussian noise 0.08.
Spirals make_spirals(int64_t n, double noise, uint64_t seed) {
  Generator gen(seed);
  std::vector<float> xs;
  std::vector<int64_t> ys;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t cls = i % 2;
    const double frac = static_cast<double>(i / 2) / static_cast<double>(n / 2);
    const double r = 0.1 + 0.9 * frac, angle = 2.0 * M_PI * frac + static_cast<double>(cls) * M_PI;
    xs.push_back(static_cast<float>(r * std::cos(angle) + noise * gen.next_normal()));
    xs.push_back(static_cast<float>(r * std::sin(angle) + noise * gen.next_normal()));
    ys.push_back(cls);
  }
  return {from_vector(xs, {n, 2}), from_vector(ys, {n})};
}

}  // namespace

EpochStats run_demo_training(const TrainOptions& opt, const std::function<void(int, int64_t, int64_t)>& on_batch,
                             const std::function<void(const EpochStats&)>& on_epoch) {
  if (opt.epochs < 1) throw std::invalid_argument("--epochs must be >= 1");
  if (opt.batch < 1) throw std::invalid_argument("--batch must be >= 1");
  if (!(opt.lr > 0)) throw std::invalid_argument("--lr must be > 0");
  const Device device = Device::parse(opt.device);
  init();
  const int64_t n = 256;
  Spirals data = make_spirals(n, 0.08, opt.seed);
  Generator gen(opt.seed);
  nn::Sequential model{std::make_shared<nn::Linear>(2, 32, true, gen), std::make_shared<nn::Tanh>(),
                       std::make_shared<nn::Linear>(32, 32, true, gen), std::make_shared<nn::Tanh>(),
                       std::make_shared<nn::Linear>(32, 2, true, gen)};
  model.to(device);
  // Class labels and batch indices stay on the CPU whatever the device: they are validated there and copied
  // over asynchronously (on a GPU, a device index would be read back to be validated).
  Tensor x = data.x.to(device), labels = data.labels;
  optim::AdamOptions ao;
  ao.lr = opt.lr;
  optim::Adam adam(model.parameters(), ao);
  const int64_t batches_per_epoch = (n + opt.batch - 1) / opt.batch;
  // The run's identity: a checkpoint only resumes a run with the same data, model and schedule.
  char lr_hex[64];
  std::snprintf(lr_hex, sizeof lr_hex, "%a", opt.lr);
  const std::map<std::string, std::string> identity = {
      {"train.seed", std::to_string(opt.seed)}, {"train.batch", std::to_string(opt.batch)}, {"train.lr", lr_hex}};
  int64_t step = 0;
  double resumed_loss_sum = 0;
  if (!opt.resume.empty()) {
    std::map<std::string, std::string> md;
    step = load_checkpoint(opt.resume, model, adam, {}, &md);
    for (const auto& [k, v] : identity) {
      auto it = md.find(k);
      if (it == md.end() || it->second != v)
        throw std::runtime_error("--resume " + opt.resume + ": the checkpoint was written by a run with a different " +
                                 k.substr(6) + " (" + (it == md.end() ? std::string("none") : it->second) + " vs " + v +
                                 ")");
    }
    auto ls = md.find("train.epoch_loss_sum");
    if (ls != md.end()) resumed_loss_sum = std::strtod(ls->second.c_str(), nullptr);
  }
  auto save = [&](double epoch_loss_sum) {
    if (opt.checkpoint.empty()) return;
    auto md = identity;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%a", epoch_loss_sum);  // hex float: exact
    md["train.epoch_loss_sum"] = buf;
    save_checkpoint(opt.checkpoint, model, adam, step, {}, md);
  };
  std::ofstream metrics;
  if (!opt.metrics.empty()) {
    metrics.open(opt.metrics);
    if (!metrics) throw std::runtime_error("cannot open --metrics file " + opt.metrics);
  }
  const int64_t batches = batches_per_epoch;
  EpochStats stats;
  const int first_epoch = static_cast<int>(step / batches) + 1;
  for (int epoch = first_epoch; epoch <= opt.epochs; ++epoch) {
    auto t0 = std::chrono::steady_clock::now();
    auto order = shuffled_order(n, opt.seed + static_cast<uint64_t>(epoch));
    const int64_t first_batch = epoch == first_epoch ? step % batches : 0;
    double loss_sum = epoch == first_epoch ? resumed_loss_sum : 0.0;
    // Batch losses are read back once per epoch (one wait for a GPU, not one per step), in order, so the sum
    // is the same as reading each at once.
    std::vector<Tensor> pending;
    std::vector<int64_t> pending_rows;
    auto flush = [&] {
      if (pending.empty()) return;
      const std::vector<float> v = stack(pending).to(Device::cpu()).to_vector<float>();
      for (size_t i = 0; i < v.size(); ++i) loss_sum += v[i] * static_cast<double>(pending_rows[i]);
      pending.clear();
      pending_rows.clear();
    };
    for (int64_t b = first_batch; b < batches; ++b) {
      const int64_t lo = b * opt.batch, hi = std::min(n, lo + opt.batch);
      Tensor idx = from_vector(std::vector<int64_t>(order.begin() + lo, order.begin() + hi), {hi - lo});
      Tensor loss = nn::cross_entropy(model(x.index_select(0, idx)), labels.index_select(0, idx));
      adam.zero_grad();
      loss.backward();
      adam.step();
      pending.push_back(loss.detach());
      pending_rows.push_back(hi - lo);
      ++step;
      if (on_batch) on_batch(epoch, b + 1, batches);
      if (opt.stop && *opt.stop && b + 1 < batches) {
        flush();
        save(loss_sum);
        stats.stopped_by = *opt.stop;
        return stats;
      }
    }
    flush();
    save(0.0);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    Tensor pred;
    {
      NoGradGuard ng;
      pred = model(x).argmax(1);
    }
    auto p = pred.to_vector<int64_t>();
    auto y = data.labels.to_vector<int64_t>();
    int64_t correct = 0;
    for (int64_t i = 0; i < n; ++i) correct += p[i] == y[i];
    stats = {epoch, loss_sum / static_cast<double>(n), static_cast<double>(correct) / static_cast<double>(n),
             static_cast<double>(n) / std::max(secs, 1e-9)};
    if (metrics) {
      metrics << "{\"epoch\": " << stats.epoch << ", \"loss\": " << stats.loss << ", \"accuracy\": " << stats.accuracy
              << ", \"samples_per_s\": " << stats.samples_per_s << "}\n";
      metrics.flush();
    }
    if (on_epoch) on_epoch(stats);
    if (opt.stop && *opt.stop) {  // the epoch's checkpoint is already saved
      stats.stopped_by = *opt.stop;
      return stats;
    }
  }
  return stats;
}

}  // namespace oxmera::workloads
