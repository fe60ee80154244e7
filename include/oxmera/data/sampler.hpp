#pragma once
// Samplers: the dataset indices a DataLoader visits in one epoch (torch.utils.data's samplers). An order must
// be a pure function of (seed, epoch) so that a run is reproducible for any number of workers; the loader
// passes its options' seed. size() is the same every epoch (it gives the loader's size()).
#include <cstdint>
#include <memory>
#include <vector>

namespace oxmera::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  // Indices per epoch.
  virtual int64_t size() const = 0;
  // The indices of `epoch`, size() of them (each in [0, the dataset's size), checked as it is fetched).
  virtual std::vector<int64_t> order(uint64_t seed, int64_t epoch) const = 0;
};

using SamplerPtr = std::shared_ptr<const Sampler>;

// 0 .. n-1.
class SequentialSampler final : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  int64_t size() const override { return n_; }
  std::vector<int64_t> order(uint64_t seed, int64_t epoch) const override;

 private:
  int64_t n_;
};

// A permutation of 0 .. n-1 per (seed, epoch): what DataLoaderOptions::shuffle uses.
class RandomSampler final : public Sampler {
 public:
  explicit RandomSampler(int64_t n);
  int64_t size() const override { return n_; }
  std::vector<int64_t> order(uint64_t seed, int64_t epoch) const override;

 private:
  int64_t n_;
};

// num_samples indices drawn with probability proportional to weights[i] (torch's WeightedRandomSampler):
// with replacement, independent draws; without, a weighted permutation's first num_samples (num_samples <=
// the number of nonzero weights). Weights must be finite, >= 0, with a positive sum (InvalidArgument).
class WeightedRandomSampler final : public Sampler {
 public:
  WeightedRandomSampler(std::vector<double> weights, int64_t num_samples, bool replacement = true);
  int64_t size() const override { return num_samples_; }
  std::vector<int64_t> order(uint64_t seed, int64_t epoch) const override;

 private:
  std::vector<double> weights_;
  std::vector<double> cumulative_;
  int64_t num_samples_;
  bool replacement_;
};

// Rank `rank`'s share of n examples among num_replicas processes (torch's DistributedSampler): the epoch's
// order (shuffled by (seed, epoch) when `shuffle`, the same on every rank) is padded by repeating its start to
// a multiple of num_replicas, or with drop_last cut to one, and rank r takes positions r, r + num_replicas, ...
class DistributedSampler final : public Sampler {
 public:
  DistributedSampler(int64_t n, int64_t num_replicas, int64_t rank, bool shuffle = true, bool drop_last = false);
  int64_t size() const override { return per_rank_; }
  std::vector<int64_t> order(uint64_t seed, int64_t epoch) const override;

 private:
  int64_t n_, num_replicas_, rank_;
  bool shuffle_, drop_last_;
  int64_t per_rank_;
};

}  // namespace oxmera::data
