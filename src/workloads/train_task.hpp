#pragma once
// What run_demo_training drives, whatever the model: the loop (batches, DDP shares, checkpoints, resume, stop
// requests, metrics) is written once over this; demo_training.cpp builds the spirals and digits tasks,
// char_lm.cpp the character language models.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <oxmera/oxmera.hpp>

namespace oxmera::workloads {

using Forward = std::function<Tensor(const Tensor&)>;

struct TrainTask {
  nn::ModulePtr model;                          // already on the training device
  std::unique_ptr<optim::Optimizer> optimizer;  // over model->parameters()
  double clip = 0;                              // clip_grad_norm_ max norm after each backward; 0: none
  int64_t rows = 0;                             // training rows per epoch (points; LMs: windows)
  int64_t tokens_per_row = 0;                   // LMs: the window length, for tokens/s; 0 otherwise
  // The epoch's rows in batch order: what `batch` is given, a contiguous slice per batch (and per rank).
  std::function<std::vector<int64_t>(int epoch)> epoch_rows;
  // The mean loss over some rows, in two parts so that a captured step (TrainOptions::graph) can feed the second
  // its static copies: `batch` builds the rows' tensors (inputs and targets, on any device), `batch_loss` computes
  // the mean loss from such tensors (or copies of them on the training device) through `forward` (the model, or
  // its DDP wrapper).
  std::function<std::vector<Tensor>(const std::vector<int64_t>& rows)> batch;
  std::function<Tensor(const std::vector<Tensor>& batch, const Forward& forward)> batch_loss;
  // Accuracy: `correct(lo, hi)` counts the right predictions on evaluation items lo..hi-1 (called in eval mode
  // under NoGradGuard); each item holds `predictions_per_item` predictions.
  int64_t eval_items = 0, predictions_per_item = 1;
  std::function<int64_t(int64_t lo, int64_t hi)> correct;
  // Checkpoint identity entries beyond seed/batch/lr/model (a checkpoint only resumes the same run).
  std::map<std::string, std::string> identity;
};

}  // namespace oxmera::workloads
