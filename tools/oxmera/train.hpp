#pragma once
#include <cstdint>
#include <functional>
#include <string>

namespace oxmera_cli {

struct TrainOptions {
  std::string device = "cpu";
  int epochs = 12;
  uint64_t seed = 7;
  int64_t batch = 32;
  double lr = 0.01;
  std::string metrics;  // JSON lines, one object per epoch
};

struct EpochStats {
  int epoch = 0;
  double loss = 0, accuracy = 0, samples_per_s = 0;
};

// Progress callbacks: on_batch(epoch, batch_index, batches_per_epoch) after each step; on_epoch after each
// epoch. Returns the final stats.
EpochStats run_demo_training(const TrainOptions& opt, const std::function<void(int, int64_t, int64_t)>& on_batch,
                             const std::function<void(const EpochStats&)>& on_epoch);

}  // namespace oxmera_cli
