#pragma once
// `oxmera train`'s tasks, in the oxmera_workloads library so the CLI and the tests run the same compiled loop:
//   mlp (the default): two spirals, MLP 2-32-32-2 with tanh, Adam, cross entropy; accuracy on the training points
//   cnn: scikit-learn's 8x8 digits read from IDX files in `data` (digits-images-idx3-ubyte, digits-labels-idx1-ubyte,
//        as tests/digits/export_digits.py writes them), the CNN of examples/digits_cnn.cpp, a seeded 80/20 split;
//        accuracy on the held-out 20 %
//   transformer, lstm: character language models on a text file (char_lm.hpp); next-character accuracy on the
//        held-out last 10 %
#include <cstdint>
#include <functional>
#include <string>

#include "oxmera/device.hpp"

namespace oxmera::workloads {

struct TrainOptions {
  std::string model = "mlp";   // mlp, cnn, transformer or lstm (char_lm.hpp)
  std::string data;            // cnn: the folder of the digits IDX files; transformer, lstm: a text file
                               // (empty: /usr/share/common-licenses/GPL-3)
  std::string device = "cpu";  // a Device::parse name: cpu, cuda, cuda:N
  int epochs = 30;
  uint64_t seed = 7;
  int64_t batch = 32;
  double lr = 0.03;
  int64_t steps_per_epoch = 50;  // transformer, lstm: an epoch is this many steps of `batch` windows
  std::string metrics;           // JSON lines, one object per epoch
  std::string checkpoint;        // saved atomically at each epoch end, and after the current step on a stop request
  std::string resume;            // continue bit-identically from this checkpoint
  // One of the processes of an `mpirun -np N` job: the model is wrapped in nn::DistributedDataParallel and every
  // global batch of `batch` rows (divisible by N) is split into N contiguous shares, so N processes follow the
  // trajectory of one process (up to the order of float reductions). Losses and accuracies are the global ones;
  // only rank 0 writes `metrics` and `checkpoint` (a single-process checkpoint: it resumes at any world size).
  // The callbacks are called on every rank: the caller decides who prints.
  bool distributed = false;
  // Capture one training step as a CUDA graph (cuda::Graph) and replay it for every full batch: the first full
  // batch of the run runs eagerly (the optimizer's state), the step is captured at the second, and a short last
  // batch of an epoch runs eagerly. Needs a GPU (a device that can capture); not with `distributed`.
  bool graph = false;
  // When it becomes non-zero (a signal number, set by a handler), training stops after the current step,
  // saves the checkpoint (if any) and returns with EpochStats::stopped_by set.
  const volatile int* stop = nullptr;
};

struct EpochStats {
  int epoch = 0;
  double loss = 0, accuracy = 0, samples_per_s = 0;  // language models: nats/char, next-char accuracy, windows/s
  double tokens_per_s = 0;                           // language models: characters/s; 0 for the classifiers
  int stopped_by = 0;                                // the stop value when interrupted, else 0
};

// What the front ends print as the model: "MLP 2-32-32-2 (tanh)", "CNN 16-32 (digits 8x8)", ...
const char* model_description(const TrainOptions& opt);
// The rest of the header line: the data, optimizer and batch ("two spirals, Adam lr 0.03, batch 32").
std::string run_description(const TrainOptions& opt);

// `oxmera train --distributed`: starts oxmera::distributed (idempotent) and returns the world size. The typed
// errors of distributed::init() (BackendUnavailable without MPI, InvalidArgument when not started by a
// launcher), with the command and the way to start it prepended.
int init_distributed_training();

// The device one rank of `oxmera train --distributed` trains on, as torch users pick it by hand: a bare "cuda"
// is cuda:(local_rank % device_count), so the ranks of a node spread over its GPUs; "cuda:N" and "cpu" are
// taken as given. With device_count <= 0 (no GPU visible) or local_rank < 0 it is cuda:0, whose first use then
// says why it is unavailable. InvalidArgument for a name Device::parse rejects.
Device rank_device(const std::string& requested, int local_rank, int device_count);

// Progress callbacks: on_batch(epoch, batch_index, batches_per_epoch) after each step; on_epoch after each
// epoch. Returns the final stats.
EpochStats run_demo_training(const TrainOptions& opt, const std::function<void(int, int64_t, int64_t)>& on_batch,
                             const std::function<void(const EpochStats&)>& on_epoch);

}  // namespace oxmera::workloads

// The names the CLI and the tests were written with.
namespace oxmera_cli {
using oxmera::workloads::EpochStats;
using oxmera::workloads::init_distributed_training;
using oxmera::workloads::model_description;
using oxmera::workloads::rank_device;
using oxmera::workloads::run_demo_training;
using oxmera::workloads::run_description;
using oxmera::workloads::TrainOptions;
}  // namespace oxmera_cli
