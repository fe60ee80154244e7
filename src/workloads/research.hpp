#pragma once
// Library code of the oxmera_workloads target (src/workloads), linked by the CLI, the tests and the benchmarks.
// `oxmera bench research`: the "stacked seeds" research workload of ../shared/spec/research-workload.md.
//
// Three fits, each with R replicas stacked on a leading dim and trained in the same ops:
//   mlp-h16       f32, BCE with logits, Adam lr 1e-2, batch 64; held-out metric: accuracy per replica
//   linear-lag5   DPP set NLL through batched Cholesky, Adam lr 1e-2, batch 64
//   deepsets-H30  same data and loss, DeepSets quality via einsum, AdamW (wd 1e-4 on A, C, V; 0 on a, d)
// Fits 2/3 train in --dtype: auto = f64 on the CPU, f32 on a GPU (f64 never goes to a GPU); f32 on the CPU
// too on request, to compare a GPU run with the CPU at the same precision.
// Held-out metric of fits 2/3: the f64 k-DPP NLL -logdet(L_Y) + log e_k(eigh(L)), averaged over held-out steps,
// computed on the host from L widened to f64.
//
// Definitions shared with the PyTorch twin (bench/research_torch.py), which reads the --dump file:
//  - Batch order: epoch e (0-based) visits the training rows in the order of a Fisher-Yates shuffle
//    (for i = n-1 .. 1: j = splitmix64() % (i + 1); swap(p[i], p[j])) driven by SplitMix64 seeded with
//    seed + e; the last partial batch is kept. The dump holds these orders, so the twin uses the same.
//  - Loss of a step: sum over replicas of each replica's mean loss over the batch.
//  - Final training loss per replica: the unweighted mean, over the last epoch's batches, of that replica's
//    batch-mean loss (as computed during training, before each step's update).
//  - Timing: per fit, from optimizer construction to the held-out metric on the host (training + evaluation;
//    data generation, parameter initialisation and the dump are not timed).
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace oxmera::workloads {

struct ResearchOptions {
  std::string device = "cpu";  // a Device::parse name: cpu, cuda, cuda:N
  std::string dtype = "auto";  // training dtype of fits 2/3: auto (f64 on cpu, f32 on cuda) | f32 | f64
  int epochs = 100;
  int replicas = 3;
  uint64_t seed = 0;
  std::string fit = "all";  // all | mlp-h16 | linear-lag5 | deepsets-H30
  std::string dump;         // safetensors file with data, batch orders and initial parameters ("" = none)
  std::string out;          // JSON summary file ("" = none)
  // Capture one full-batch training step of each fit as a CUDA graph and replay it (GPU devices only; the first
  // full batch runs eagerly, short batches too). Same results as the eager run, fewer launches.
  bool graph = false;
};

struct FitResult {
  std::string name;
  std::string metric_name;               // "accuracy" or "kdpp_nll"
  double seconds = 0;                    // training + evaluation
  std::vector<double> first_epoch_loss;  // per replica, same definition as train_loss but for epoch 0
  std::vector<double> train_loss;        // per replica, mean over the last epoch's batches
  std::vector<double> metric;            // per replica, held out
};

// Runs the selected fits; throws oxmera::Error (e.g. BackendUnavailable for a device without a backend,
// InvalidArgument for a device name Device::parse refuses) or std::invalid_argument for other bad options.
std::vector<FitResult> research_fits(const ResearchOptions& options);

// CLI entry point (`oxmera bench research`): runs research_fits, prints the summary to `out`, writes the --out
// JSON and the --dump file when asked. Returns 0; errors propagate as exceptions (oxmera::Error keeps its kind,
// e.g. [BackendUnavailable] for --device cuda without a CUDA backend) for main() to print.
int run_research(const ResearchOptions& options, std::ostream& out);

// e_k(lambda) in f64 by the standard recurrence E_j <- E_j + lambda_n E_{j-1} (E_0 = 1).
double elementary_symmetric(const std::vector<double>& lambda, int k);

// Constants of the workload (spec), exposed for the tests.
inline constexpr int kMlpRows = 4096, kMlpFeatures = 8, kMlpHidden = 16;
inline constexpr int kSeries = 16, kSteps = 1024, kLags = 5, kSetSize = 4, kDsHidden = 30;
inline constexpr int kBatch = 64;

}  // namespace oxmera::workloads

// The names the CLI and the tests were written with.
namespace oxmera_cli {
using oxmera::workloads::elementary_symmetric;
using oxmera::workloads::FitResult;
using oxmera::workloads::research_fits;
using oxmera::workloads::ResearchOptions;
using oxmera::workloads::run_research;
}  // namespace oxmera_cli
