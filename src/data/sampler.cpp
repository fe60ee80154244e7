#include "oxmera/data/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "oxmera/data/dataset.hpp"
#include "oxmera/error.hpp"
#include "oxmera/random.hpp"

namespace oxmera::data {

namespace {

// SplitMix64's finaliser: spreads (seed, epoch) over the Generator's seed space.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

Generator epoch_generator(uint64_t seed, int64_t epoch) {
  return Generator(mix64(seed + 0x9e3779b97f4a7c15ULL) ^ mix64(static_cast<uint64_t>(epoch)));
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = i;
  return p;
}

}  // namespace

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  OXM_CHECK(n >= 0, InvalidArgument, "SequentialSampler: n must be >= 0, got ", n);
}
std::vector<int64_t> SequentialSampler::order(uint64_t, int64_t) const { return iota(n_); }

RandomSampler::RandomSampler(int64_t n) : n_(n) {
  OXM_CHECK(n >= 0, InvalidArgument, "RandomSampler: n must be >= 0, got ", n);
}
std::vector<int64_t> RandomSampler::order(uint64_t seed, int64_t epoch) const {
  Generator gen = epoch_generator(seed, epoch);
  return random_permutation(n_, gen);
}

WeightedRandomSampler::WeightedRandomSampler(std::vector<double> weights, int64_t num_samples, bool replacement)
    : weights_(std::move(weights)), num_samples_(num_samples), replacement_(replacement) {
  OXM_CHECK(!weights_.empty(), InvalidArgument, "WeightedRandomSampler: no weights");
  OXM_CHECK(num_samples >= 0, InvalidArgument, "WeightedRandomSampler: num_samples must be >= 0, got ", num_samples);
  double total = 0.0;
  int64_t nonzero = 0;
  cumulative_.reserve(weights_.size());
  for (size_t i = 0; i < weights_.size(); ++i) {
    OXM_CHECK(std::isfinite(weights_[i]) && weights_[i] >= 0.0, InvalidArgument, "WeightedRandomSampler: weights[", i,
              "] = ", weights_[i], " is negative or not finite");
    total += weights_[i];
    nonzero += weights_[i] > 0.0 ? 1 : 0;
    cumulative_.push_back(total);
  }
  OXM_CHECK(total > 0.0, InvalidArgument, "WeightedRandomSampler: the weights sum to 0");
  OXM_CHECK(replacement || num_samples <= nonzero, InvalidArgument, "WeightedRandomSampler: ", num_samples,
            " samples without replacement but only ", nonzero, " weights are nonzero");
}

std::vector<int64_t> WeightedRandomSampler::order(uint64_t seed, int64_t epoch) const {
  Generator gen = epoch_generator(seed, epoch);
  const auto n = static_cast<int64_t>(weights_.size());
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(num_samples_));
  if (replacement_) {
    int64_t last_positive = n - 1;
    while (weights_[static_cast<size_t>(last_positive)] <= 0.0) --last_positive;
    for (int64_t s = 0; s < num_samples_; ++s) {
      const double u = gen.next_double() * cumulative_.back();
      auto i = static_cast<int64_t>(std::upper_bound(cumulative_.begin(), cumulative_.end(), u) - cumulative_.begin());
      out.push_back(std::min(i, last_positive));  // u rounding up to the total picks the last positive weight
    }
    return out;
  }
  // Without replacement (Efraimidis-Spirakis): the num_samples largest keys log(u) / w, zero weights never.
  std::vector<std::pair<double, int64_t>> keys;
  keys.reserve(weights_.size());
  for (int64_t i = 0; i < n; ++i) {
    const double w = weights_[static_cast<size_t>(i)];
    const double u = gen.next_double();
    if (w > 0.0) keys.emplace_back(std::log1p(-u) / w, i);  // log(1 - u), u in [0, 1): finite
  }
  std::stable_sort(keys.begin(), keys.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (int64_t s = 0; s < num_samples_; ++s) out.push_back(keys[static_cast<size_t>(s)].second);
  return out;
}

DistributedSampler::DistributedSampler(int64_t n, int64_t num_replicas, int64_t rank, bool shuffle, bool drop_last)
    : n_(n), num_replicas_(num_replicas), rank_(rank), shuffle_(shuffle), drop_last_(drop_last) {
  OXM_CHECK(n >= 0, InvalidArgument, "DistributedSampler: n must be >= 0, got ", n);
  OXM_CHECK(num_replicas >= 1, InvalidArgument, "DistributedSampler: num_replicas must be >= 1, got ", num_replicas);
  OXM_CHECK(rank >= 0 && rank < num_replicas, InvalidArgument, "DistributedSampler: rank ", rank,
            " is outside [0, num_replicas = ", num_replicas, ")");
  per_rank_ = drop_last ? n / num_replicas : (n + num_replicas - 1) / num_replicas;
}

std::vector<int64_t> DistributedSampler::order(uint64_t seed, int64_t epoch) const {
  std::vector<int64_t> all = shuffle_ ? RandomSampler(n_).order(seed, epoch) : iota(n_);
  const int64_t total = per_rank_ * num_replicas_;
  if (!all.empty())
    for (int64_t k = n_; k < total; ++k) all.push_back(all[static_cast<size_t>(k - n_) % static_cast<size_t>(n_)]);
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(per_rank_));
  for (int64_t k = rank_; k < total; k += num_replicas_) out.push_back(all[static_cast<size_t>(k)]);
  return out;
}

}  // namespace oxmera::data
