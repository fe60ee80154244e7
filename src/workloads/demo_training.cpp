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

#include <oxmera/nn/data_parallel.hpp>
#include <oxmera/oxmera.hpp>

#include "batch_order.hpp"
#include "char_lm.hpp"
#include "train_task.hpp"

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

// The spirals and digits tasks: a classifier, its training rows x/labels and its accuracy rows, trained with
// Adam in a shuffled order per epoch.
TrainTask classifier_task(std::shared_ptr<nn::Sequential> model, const Tensor& train_x, const Tensor& train_labels,
                          const Tensor& eval_x_cpu, const Tensor& eval_labels, const TrainOptions& opt,
                          const Device& device) {
  model->to(device);
  TrainTask task;
  task.model = model;
  optim::AdamOptions ao;
  ao.lr = opt.lr;
  task.optimizer = std::make_unique<optim::Adam>(model->parameters(), ao);
  task.rows = train_x.size(0);
  const uint64_t seed = opt.seed;
  const int64_t n = task.rows;
  task.epoch_rows = [seed, n](int epoch) { return shuffled_order(n, seed + static_cast<uint64_t>(epoch)); };
  // Class labels and batch indices stay on the CPU whatever the device: they are validated there and copied
  // over asynchronously (on a GPU, a device index would be read back to be validated).
  const Tensor x = train_x.to(device), labels = train_labels;
  task.batch = [x, labels](const std::vector<int64_t>& rows) {
    const Tensor idx = from_vector(rows, {static_cast<int64_t>(rows.size())});
    return std::vector<Tensor>{x.index_select(0, idx), labels.index_select(0, idx)};
  };
  task.batch_loss = [](const std::vector<Tensor>& b, const Forward& forward) {
    return nn::cross_entropy(forward(b[0]), b[1]);
  };
  const Tensor eval_x = eval_x_cpu.to(device);
  task.eval_items = eval_x.size(0);
  nn::Sequential* m = model.get();
  task.correct = [m, eval_x, eval_labels](int64_t lo, int64_t hi) {
    const int64_t n_eval = eval_x.size(0);
    const auto p = (*m)(lo == 0 && hi == n_eval ? eval_x : eval_x.slice(0, lo, hi))
                       .argmax(1)
                       .to(Device::cpu())
                       .to_vector<int64_t>();
    const auto y = eval_labels.to_vector<int64_t>();
    int64_t correct = 0;
    for (int64_t i = lo; i < hi; ++i) correct += p[static_cast<size_t>(i - lo)] == y[static_cast<size_t>(i)];
    return correct;
  };
  return task;
}

TrainTask spirals_task(const TrainOptions& opt, const Device& device) {
  Spirals data = make_spirals(256, 0.08, opt.seed);
  Generator gen(opt.seed);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(2, 32, true, gen), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(32, 32, true, gen), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(32, 2, true, gen)});
  return classifier_task(model, data.x, data.labels, data.x, data.labels, opt, device);
}

// The digits of examples/digits_cnn.cpp: pixels / 16 as [N, 1, 8, 8], a random 80/20 split seeded by `seed`.
TrainTask digits_task(const TrainOptions& opt, const Device& device) {
  const std::string& dir = opt.data;
  const uint64_t seed = opt.seed;
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
  return classifier_task(model, x.index_select(0, train_idx), y.index_select(0, train_idx), x.index_select(0, test_idx),
                         y.index_select(0, test_idx), opt, device);
}

// DDP makes the replicas' parameters equal, but the batch order, schedule and data come from each rank's own
// options: ranks started with different ones (a per-rank --seed, another checkpoint) would train apart without
// an error. One all-reduce (Max of the fingerprint and of its negation) tells whether every rank has the same.
void check_ranks_agree(const std::map<std::string, std::string>& identity, int epochs, int64_t rows, int64_t step) {
  std::string text =
      "epochs=" + std::to_string(epochs) + ";rows=" + std::to_string(rows) + ";step=" + std::to_string(step);
  for (const auto& [k, v] : identity) text += ";" + k + "=" + v;
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  const auto fingerprint = static_cast<int64_t>(h >> 2);  // 62 bits: its negation does not overflow
  Tensor t = from_vector(std::vector<int64_t>{fingerprint, -fingerprint}, {2});
  distributed::all_reduce(t, distributed::ReduceOp::Max);
  const std::vector<int64_t> v = t.to_vector<int64_t>();
  OXM_CHECK(v[0] == -v[1], InvalidArgument,
            "oxmera train --distributed: the ranks were started with different training options or data (this "
            "rank: ",
            text, "); give every rank the same --seed, --batch, --lr, --epochs, --model, --data and --resume file");
}

}  // namespace

const char* model_description(const TrainOptions& opt) {
  if (is_char_lm(opt.model)) return char_lm_description(opt.model);
  return opt.model == "cnn" ? "CNN 16-32 (digits 8x8)" : "MLP 2-32-32-2 (tanh)";
}

std::string run_description(const TrainOptions& opt) {
  char buf[512];
  if (is_char_lm(opt.model))
    std::snprintf(buf, sizeof buf, "%s, %s lr %g%s, clip 1, batch %lld x %lld chars, %lld steps/epoch",
                  opt.data.empty() ? kDefaultCharLmText : opt.data.c_str(),
                  opt.model == "transformer" ? "AdamW" : "Adam", opt.lr,
                  opt.model == "transformer" ? " (weight decay 0.1)" : "", static_cast<long long>(opt.batch),
                  static_cast<long long>(char_lm_context(opt.model)), static_cast<long long>(opt.steps_per_epoch));
  else
    std::snprintf(buf, sizeof buf, "%s, Adam lr %g, batch %lld", opt.model == "cnn" ? opt.data.c_str() : "two spirals",
                  opt.lr, static_cast<long long>(opt.batch));
  return buf;
}

Device rank_device(const std::string& requested, int local_rank, int device_count) {
  const Device d = Device::parse(requested);
  if (!d.is_cuda() || requested.find(':') != std::string::npos || device_count <= 0 || local_rank < 0) return d;
  return Device::cuda(local_rank % device_count);
}

namespace {
// The CUDA devices this process can use (today's backend drives cuda:0 only: 0 or 1).
int cuda_device_count() {
  int n = 0;
  while (n < 64 && device_available(Device::cuda(n))) ++n;
  return n;
}
}  // namespace

int init_distributed_training() {
  try {
    distributed::init();
  } catch (const Error& e) {
    throw Error(e.kind(), "oxmera train --distributed: " + e.message());
  }
  return distributed::world_size();
}

EpochStats run_demo_training(const TrainOptions& opt, const std::function<void(int, int64_t, int64_t)>& on_batch,
                             const std::function<void(const EpochStats&)>& on_epoch) {
  if (opt.epochs < 1) throw std::invalid_argument("--epochs must be >= 1");
  if (opt.batch < 1) throw std::invalid_argument("--batch must be >= 1");
  if (!(opt.lr > 0)) throw std::invalid_argument("--lr must be > 0");
  Device::parse(opt.device);  // a typed error for a bad name, before anything starts
  if (opt.model != "mlp" && opt.model != "cnn" && !is_char_lm(opt.model))
    throw std::invalid_argument("--model must be mlp, cnn, transformer or lstm, not '" + opt.model + "'");
  if (opt.steps_per_epoch < 1) throw std::invalid_argument("--steps-per-epoch must be >= 1");
  if (opt.model == "cnn" && opt.data.empty())
    throw std::invalid_argument(
        "--model cnn needs --data DIR (the digits IDX files: tests/digits/export_digits.py DIR)");
  const bool dist = opt.distributed;
  const int world = dist ? init_distributed_training() : 1;
  const int rank = dist ? distributed::rank() : 0;
  init();
  // A bare --device cuda: each rank of a node on its own GPU (cuda:local_rank modulo the node's count).
  const Device device =
      dist ? rank_device(opt.device, distributed::local_rank(), cuda_device_count()) : Device::parse(opt.device);
  const bool root = rank == 0;
  if (opt.batch % world != 0)
    throw Error(ErrorKind::InvalidArgument, "oxmera train --distributed: --batch " + std::to_string(opt.batch) +
                                                " is the global batch, split evenly over the " + std::to_string(world) +
                                                " ranks, and is not divisible by " + std::to_string(world) +
                                                "; choose a multiple of the world size (e.g. --batch " +
                                                std::to_string((opt.batch / world + 1) * world) + ")");
  TrainTask task = is_char_lm(opt.model) ? char_lm_task(opt, device)
                   : opt.model == "cnn"  ? digits_task(opt, device)
                                         : spirals_task(opt, device);
  nn::Module& model = *task.model;
  optim::Optimizer& adam = *task.optimizer;
  const std::vector<Tensor> params = model.parameters();
  const int64_t n = task.rows;
  const int64_t batches_per_epoch = (n + opt.batch - 1) / opt.batch;
  // The run's identity: a checkpoint only resumes a run with the same data, model and schedule. The world size
  // is not part of it: a checkpoint holds what one process training on the global batch would hold.
  char lr_hex[64];
  std::snprintf(lr_hex, sizeof lr_hex, "%a", opt.lr);
  std::map<std::string, std::string> identity = {
      {"train.seed", std::to_string(opt.seed)}, {"train.batch", std::to_string(opt.batch)}, {"train.lr", lr_hex}};
  if (opt.model != "mlp") identity["train.model"] = opt.model;  // absent for mlp: older checkpoints still resume
  identity.insert(task.identity.begin(), task.identity.end());
  int64_t step = 0;
  double resumed_loss_sum = 0;
  if (!opt.resume.empty()) {  // every rank loads the same file: the replicas start identical
    auto check_identity = [&](const std::map<std::string, std::string>& md) {
      // The model first (an mlp checkpoint has no train.model): it explains every other difference.
      const auto file_model = md.find("train.model");
      const std::string was = file_model == md.end() ? "mlp" : file_model->second;
      if (was != opt.model)
        throw std::runtime_error("--resume " + opt.resume + ": the checkpoint was written by a run with a different " +
                                 "model (" + was + " vs " + opt.model + ")");
      for (const auto& [k, v] : identity) {
        auto it = md.find(k);
        if (it == md.end() || it->second != v)
          throw std::runtime_error("--resume " + opt.resume +
                                   ": the checkpoint was written by a run with a different " + k.substr(6) + " (" +
                                   (it == md.end() ? std::string("none") : it->second) + " vs " + v + ")");
      }
    };
    std::map<std::string, std::string> md;
    try {
      step = load_checkpoint(opt.resume, model, adam, {}, &md);
    } catch (const Error& e) {
      // Another model or text (another vocabulary) fails the load on a shape: name the run option instead,
      // when the file's metadata tells it.
      std::map<std::string, std::string> file_md;
      try {
        file_md = load_safetensors_with_metadata(opt.resume).metadata;
      } catch (const Error&) {
        throw e;
      }
      check_identity(file_md);
      throw;
    }
    check_identity(md);
    auto ls = md.find("train.epoch_loss_sum");
    if (ls != md.end()) resumed_loss_sum = std::strtod(ls->second.c_str(), nullptr);
  }
  if (dist) check_ranks_agree(identity, opt.epochs, n, step);
  // After the load: DDP broadcasts rank 0's parameters, and the hooks it installs average every backward's
  // gradients over the ranks.
  std::unique_ptr<nn::DistributedDataParallel> ddp;
  // The loop holds no gradient across steps, so the reduced averages may stay in the buckets (no copy back).
  if (dist)
    ddp = std::make_unique<nn::DistributedDataParallel>(
        task.model, distributed::ProcessGroup{}, nn::DistributedDataParallelOptions{.gradient_as_bucket_view = true});
  // The sums every rank adds its own share to (loss, correct predictions), summed over the ranks.
  auto global_sum = [&](double local) {
    if (!dist) return local;
    Tensor t = from_vector(std::vector<double>{local}, {1});
    distributed::all_reduce(t);
    return t.to_vector<double>()[0];
  };
  // The stop request as every rank sees it: the largest over the ranks, so that all stop after the same step
  // (a signal reaches the ranks at different moments).
  auto stop_requested = [&]() -> int {
    if (!opt.stop) return 0;
    const int local = *opt.stop;
    if (!dist) return local;
    Tensor t = from_vector(std::vector<int64_t>{local}, {1});
    distributed::all_reduce(t, distributed::ReduceOp::Max);
    return static_cast<int>(t.to_vector<int64_t>()[0]);
  };
  auto save = [&](double epoch_loss_sum) {
    if (opt.checkpoint.empty()) return;
    if (root) {
      auto md = identity;
      char buf[64];
      std::snprintf(buf, sizeof buf, "%a", epoch_loss_sum);  // hex float: exact
      md["train.epoch_loss_sum"] = buf;
      save_checkpoint(opt.checkpoint, model, adam, step, {}, md);
    }
    if (dist) distributed::barrier();  // nobody runs ahead of (or exits before) a checkpoint being written
  };
  std::ofstream metrics;
  if (!opt.metrics.empty() && root) {
    metrics.open(opt.metrics);
    if (!metrics) throw std::runtime_error("cannot open --metrics file " + opt.metrics);
    metrics.precision(17);  // round-trip doubles: runs are compared through this file
  }
  const int64_t batches = batches_per_epoch;
  // --graph: a CUDA graph of one full-batch step, captured at the second full batch of the run and replayed for
  // every full batch after it (a short last batch runs eagerly).
  if (opt.graph && dist)
    throw Error(ErrorKind::InvalidArgument,
                "oxmera train --graph: not with --distributed (DDP's collectives wait on the host, which a CUDA graph "
                "cannot capture)");
  if (opt.graph && device.is_cpu())
    throw Error(ErrorKind::InvalidArgument,
                "oxmera train --graph: CUDA graphs capture GPU work; use --device cuda (the CPU runs its steps "
                "directly)");
  cuda::Graph graph;
  std::vector<Tensor> statics;  // the captured step's inputs: each batch is copied into them
  Tensor graph_loss;            // the captured step's loss, rewritten by every replay
  bool warmed = false;          // a full-batch step ran eagerly (the optimizer has its state)
  EpochStats stats;
  const int first_epoch = static_cast<int>(step / batches) + 1;
  for (int epoch = first_epoch; epoch <= opt.epochs; ++epoch) {
    auto t0 = std::chrono::steady_clock::now();
    const std::vector<int64_t> order = task.epoch_rows(epoch);
    const int64_t first_batch = epoch == first_epoch ? step % batches : 0;
    // This rank's part of the global sum; the resumed part of the epoch is counted once, by rank 0 (which is
    // also the whole sum's first term, so a single process adds in the order of an uninterrupted run).
    double loss_sum = epoch == first_epoch && root ? resumed_loss_sum : 0.0;
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
      const int64_t lo = b * opt.batch, hi = std::min(n, lo + opt.batch), rows = hi - lo;
      // This rank's contiguous share of the global batch. Full batches split evenly; the last one of an epoch
      // may not, so each rank's mean loss is weighted by share * world / rows: DDP's average over the ranks is
      // then the mean over the global batch, exactly as one process computes it. A rank whose share is empty
      // (fewer rows than ranks) runs one row weighted by 0, so that every parameter still gets its (zero)
      // gradient and the reduction completes.
      const int64_t share_lo = lo + rows * rank / world, share_hi = lo + rows * (rank + 1) / world;
      const int64_t share = share_hi - share_lo;
      const int64_t run_lo = share > 0 ? share_lo : lo, run_hi = share > 0 ? share_hi : lo + 1;
      Tensor loss;
      if (opt.graph && rows == opt.batch && warmed) {
        // The captured step (TrainOptions::graph): this batch into the static inputs, then one replay.
        const std::vector<Tensor> b = task.batch(std::vector<int64_t>(order.begin() + lo, order.begin() + hi));
        if (!graph.captured()) {
          for (const Tensor& t : b) statics.push_back(t.to(device).clone());
          cuda::GraphCapture capture(graph, device);
          adam.zero_grad();
          const Tensor l = task.batch_loss(statics, [&](const Tensor& xb) { return model(xb); });
          l.backward();
          if (task.clip > 0) optim::clip_grad_norm_(params, task.clip);
          adam.step();
          graph_loss = l.detach();
        } else {
          for (size_t i = 0; i < b.size(); ++i) statics[i].copy_(b[i].to(device));
        }
        graph.replay();
        loss = graph_loss.clone();  // the next replay rewrites graph_loss
      } else {
        loss = task.batch_loss(task.batch(std::vector<int64_t>(order.begin() + run_lo, order.begin() + run_hi)),
                               [&](const Tensor& xb) { return ddp ? (*ddp)(xb) : model(xb); });
        const double weight = static_cast<double>(share * world) / static_cast<double>(rows);
        Tensor objective = weight == 1.0 ? loss : loss * weight;
        adam.zero_grad();
        objective.backward();
        if (task.clip > 0) optim::clip_grad_norm_(params, task.clip);  // of the averaged gradients, under DDP
        adam.step();
        warmed = warmed || rows == opt.batch;  // the optimizer's state exists: the next full batch is captured
      }
      pending.push_back(loss.detach());
      pending_rows.push_back(share);
      ++step;
      if (on_batch) on_batch(epoch, b + 1, batches);
      const int stop_now = stop_requested();
      if (stop_now && b + 1 < batches) {
        flush();
        save(global_sum(loss_sum));
        stats.stopped_by = stop_now;
        return stats;
      }
    }
    flush();
    save(0.0);
    const double epoch_loss_sum = global_sum(loss_sum);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // Accuracy: each rank predicts its contiguous share of the evaluation rows.
    const int64_t n_eval = task.eval_items;
    const int64_t eval_lo = n_eval * rank / world, eval_hi = n_eval * (rank + 1) / world;
    int64_t correct = 0;
    if (eval_hi > eval_lo) {
      NoGradGuard ng;
      model.eval();
      correct = task.correct(eval_lo, eval_hi);
      model.train();
    }
    const double correct_total = global_sum(static_cast<double>(correct));
    stats = {epoch, epoch_loss_sum / static_cast<double>(n),
             correct_total / static_cast<double>(n_eval * task.predictions_per_item),
             static_cast<double>(n) / std::max(secs, 1e-9)};
    stats.tokens_per_s = stats.samples_per_s * static_cast<double>(task.tokens_per_row);
    if (metrics) {
      metrics << "{\"epoch\": " << stats.epoch << ", \"loss\": " << stats.loss << ", \"accuracy\": " << stats.accuracy
              << ", \"samples_per_s\": " << stats.samples_per_s;
      if (task.tokens_per_row > 0) metrics << ", \"tokens_per_s\": " << stats.tokens_per_s;
      metrics << "}\n";
      metrics.flush();
    }
    if (on_epoch) on_epoch(stats);
    const int stop_now = stop_requested();
    if (stop_now) {  // the epoch's checkpoint is already saved
      stats.stopped_by = stop_now;
      return stats;
    }
  }
  return stats;
}

}  // namespace oxmera::workloads
