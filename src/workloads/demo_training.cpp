// The tasks of `oxmera train`: two interleaved spirals with an MLP (the default), or the digits CNN.
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

// A task: the model, its training rows and the rows its accuracy is measured on.
struct Task {
  std::shared_ptr<nn::Sequential> model;
  Tensor x, labels;            // training rows (labels i64)
  Tensor eval_x, eval_labels;  // accuracy rows
};

Task spirals_task(uint64_t seed) {
  Spirals data = make_spirals(256, 0.08, seed);
  Generator gen(seed);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(2, 32, true, gen), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(32, 32, true, gen), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(32, 2, true, gen)});
  return {model, data.x, data.labels, data.x, data.labels};
}

// The digits of examples/digits_cnn.cpp: pixels / 16 as [N, 1, 8, 8], a random 80/20 split seeded by `seed`.
Task digits_task(const std::string& dir, uint64_t seed) {
  const std::string images_path = dir + "/digits-images-idx3-ubyte", labels_path = dir + "/digits-labels-idx1-ubyte";
  const Tensor images = load_idx(images_path), labels = load_idx(labels_path);
  if (images.dim() != 3 || images.size(1) != 8 || images.size(2) != 8 || labels.dim() != 1 ||
      labels.size(0) != images.size(0) || images.size(0) < 5)
    throw Error(ErrorKind::ShapeMismatch,
                "oxmera train --model cnn: expected at least 5 images [N, 8, 8] and labels "
                "[N], got " +
                    images.shape().str() + " (" + images_path + ") and " + labels.shape().str() + " (" + labels_path +
                    ")");
  const int64_t n = images.size(0), n_train = n * 4 / 5;
  const Tensor x = images.to(DType::F32).reshape({n, 1, 8, 8}) / 16.0, y = labels.to(DType::I64);
  Generator split_gen(seed + 1);
  std::vector<int64_t> order = data::random_permutation(n, split_gen);
  const Tensor train_idx = from_vector(std::vector<int64_t>(order.begin(), order.begin() + n_train), {n_train});
  const Tensor test_idx = from_vector(std::vector<int64_t>(order.begin() + n_train, order.end()), {n - n_train});
  Generator gen(seed);
  nn::Conv2dOptions pad1;
  pad1.padding = {1, 1};
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Conv2d>(1, 16, nn::Pair{3, 3}, pad1, gen), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(nn::Pair{2, 2}), std::make_shared<nn::Conv2d>(16, 32, nn::Pair{3, 3}, pad1, gen),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(nn::Pair{2, 2}), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(32 * 2 * 2, 10, true, gen)});
  return {model, x.index_select(0, train_idx), y.index_select(0, train_idx), x.index_select(0, test_idx),
          y.index_select(0, test_idx)};
}

}  // namespace

const char* model_description(const TrainOptions& opt) {
  return opt.model == "cnn" ? "CNN 16-32 (digits 8x8)" : "MLP 2-32-32-2 (tanh)";
}

EpochStats run_demo_training(const TrainOptions& opt, const std::function<void(int, int64_t, int64_t)>& on_batch,
                             const std::function<void(const EpochStats&)>& on_epoch) {
  if (opt.epochs < 1) throw std::invalid_argument("--epochs must be >= 1");
  if (opt.batch < 1) throw std::invalid_argument("--batch must be >= 1");
  if (!(opt.lr > 0)) throw std::invalid_argument("--lr must be > 0");
  const Device device = Device::parse(opt.device);
  if (opt.model != "mlp" && opt.model != "cnn")
    throw std::invalid_argument("--model must be mlp or cnn, not '" + opt.model + "'");
  if (opt.model == "cnn" && opt.data.empty())
    throw std::invalid_argument(
        "--model cnn needs --data DIR (the digits IDX files: tests/digits/export_digits.py DIR)");
  init();
  Task task = opt.model == "cnn" ? digits_task(opt.data, opt.seed) : spirals_task(opt.seed);
  nn::Sequential& model = *task.model;
  const int64_t n = task.x.size(0);
  model.to(device);
  // Class labels and batch indices stay on the CPU whatever the device: they are validated there and copied
  // over asynchronously (on a GPU, a device index would be read back to be validated).
  Tensor x = task.x.to(device), labels = task.labels, eval_x = task.eval_x.to(device);
  optim::AdamOptions ao;
  ao.lr = opt.lr;
  optim::Adam adam(model.parameters(), ao);
  const int64_t batches_per_epoch = (n + opt.batch - 1) / opt.batch;
  // The run's identity: a checkpoint only resumes a run with the same data, model and schedule.
  char lr_hex[64];
  std::snprintf(lr_hex, sizeof lr_hex, "%a", opt.lr);
  std::map<std::string, std::string> identity = {
      {"train.seed", std::to_string(opt.seed)}, {"train.batch", std::to_string(opt.batch)}, {"train.lr", lr_hex}};
  if (opt.model != "mlp") identity["train.model"] = opt.model;  // absent for mlp: older checkpoints still resume
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
      model.eval();
      pred = model(eval_x).argmax(1).to(Device::cpu());
      model.train();
    }
    auto p = pred.to_vector<int64_t>();
    auto y = task.eval_labels.to_vector<int64_t>();
    int64_t correct = 0;
    for (size_t i = 0; i < y.size(); ++i) correct += p[i] == y[i];
    stats = {epoch, loss_sum / static_cast<double>(n), static_cast<double>(correct) / static_cast<double>(y.size()),
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
