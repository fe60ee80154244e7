#include "oxmera/data/dataset.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <utility>

#include "oxmera/error.hpp"

namespace oxmera::data {

Example Dataset::get(int64_t index) const {
  const int64_t n = size();
  OXM_CHECK(index >= 0 && index < n, IndexOutOfBounds, "Dataset::get: index ", index,
            " is out of range for a dataset of ", n, " examples (valid: 0 .. ", n - 1, ")");
  return fetch(index);
}

std::optional<std::vector<Tensor>> Dataset::get_batch(const std::vector<int64_t>& indices) const {
  const int64_t n = size();
  for (int64_t index : indices)
    OXM_CHECK(index >= 0 && index < n, IndexOutOfBounds, "Dataset::get_batch: index ", index,
              " is out of range for a dataset of ", n, " examples (valid: 0 .. ", n - 1, ")");
  return fetch_batch(indices);
}

std::optional<std::vector<Tensor>> Dataset::fetch_batch(const std::vector<int64_t>&) const { return std::nullopt; }

// ---- TensorDataset

TensorDataset::TensorDataset(std::vector<Tensor> tensors) : tensors_(std::move(tensors)) {
  OXM_CHECK(!tensors_.empty(), InvalidArgument, "TensorDataset: needs at least one tensor");
  for (size_t k = 0; k < tensors_.size(); ++k) {
    const Tensor& t = tensors_[k];
    OXM_CHECK(t.defined(), InvalidArgument, "TensorDataset: tensor ", k, " is undefined");
    OXM_CHECK(t.dim() >= 1, InvalidArgument, "TensorDataset: tensor ", k,
              " is 0-d; every tensor needs a first dim indexing the examples");
    OXM_CHECK(t.size(0) == tensors_[0].size(0), ShapeMismatch, "TensorDataset: tensor ", k, " has shape ", t.shape(),
              " but tensor 0 has shape ", tensors_[0].shape(), "; all tensors must share their first dim (", "size ",
              tensors_[0].size(0), ")");
  }
  size_ = tensors_[0].size(0);
}

Example TensorDataset::fetch(int64_t index) const {
  Example ex;
  ex.reserve(tensors_.size());
  for (const Tensor& t : tensors_) ex.push_back(t.select(0, index));
  return ex;
}

std::optional<std::vector<Tensor>> TensorDataset::fetch_batch(const std::vector<int64_t>& indices) const {
  if (indices.empty()) return std::nullopt;  // default_collate's error for an empty batch
  const Tensor index = from_vector(indices, Shape{static_cast<int64_t>(indices.size())});
  std::vector<Tensor> batch;
  batch.reserve(tensors_.size());
  for (const Tensor& t : tensors_)
    batch.push_back(t.index_select(0, t.device().is_cpu() ? index : index.to(t.device())));
  return batch;
}

// ---- Subset

Subset::Subset(DatasetPtr dataset, std::vector<int64_t> indices)
    : dataset_(std::move(dataset)), indices_(std::move(indices)) {
  OXM_CHECK(dataset_ != nullptr, InvalidArgument, "Subset: the dataset is null");
  const int64_t n = dataset_->size();
  for (size_t k = 0; k < indices_.size(); ++k)
    OXM_CHECK(indices_[k] >= 0 && indices_[k] < n, IndexOutOfBounds, "Subset: indices[", k, "] = ", indices_[k],
              " is out of range for a dataset of ", n, " examples");
}

Example Subset::fetch(int64_t index) const { return dataset_->get(indices_[static_cast<size_t>(index)]); }

std::optional<std::vector<Tensor>> Subset::fetch_batch(const std::vector<int64_t>& indices) const {
  std::vector<int64_t> mapped;
  mapped.reserve(indices.size());
  for (int64_t i : indices) mapped.push_back(indices_[static_cast<size_t>(i)]);
  return dataset_->get_batch(mapped);
}

// ---- ConcatDataset

ConcatDataset::ConcatDataset(std::vector<DatasetPtr> datasets) : datasets_(std::move(datasets)) {
  OXM_CHECK(!datasets_.empty(), InvalidArgument, "ConcatDataset: needs at least one dataset");
  int64_t total = 0;
  for (size_t k = 0; k < datasets_.size(); ++k) {
    OXM_CHECK(datasets_[k] != nullptr, InvalidArgument, "ConcatDataset: dataset ", k, " is null");
    total += datasets_[k]->size();
    cumulative_.push_back(total);
  }
}

Example ConcatDataset::fetch(int64_t index) const {
  // The first part whose cumulative size exceeds index holds it.
  const auto it = std::upper_bound(cumulative_.begin(), cumulative_.end(), index);
  const size_t part = static_cast<size_t>(it - cumulative_.begin());
  const int64_t offset = part == 0 ? 0 : cumulative_[part - 1];
  return datasets_[part]->get(index - offset);
}

// ---- MapDataset

MapDataset::MapDataset(DatasetPtr dataset, Transform transform)
    : dataset_(std::move(dataset)), transform_(std::move(transform)) {
  OXM_CHECK(dataset_ != nullptr, InvalidArgument, "MapDataset: the dataset is null");
  OXM_CHECK(static_cast<bool>(transform_), InvalidArgument, "MapDataset: the transform is empty");
}

Example MapDataset::fetch(int64_t index) const { return transform_(dataset_->get(index)); }

// ---- worker info, RandomMapDataset

namespace {
thread_local std::optional<WorkerInfo> t_worker_info;

// SplitMix64's finaliser.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
}  // namespace

std::optional<WorkerInfo> worker_info() { return t_worker_info; }

namespace detail {
WorkerInfoScope::WorkerInfoScope(const WorkerInfo& info) noexcept : prev_(t_worker_info) { t_worker_info = info; }
WorkerInfoScope::~WorkerInfoScope() { t_worker_info = prev_; }
}  // namespace detail

RandomMapDataset::RandomMapDataset(DatasetPtr dataset, RandomTransform transform)
    : dataset_(std::move(dataset)), transform_(std::move(transform)) {
  OXM_CHECK(dataset_ != nullptr, InvalidArgument, "RandomMapDataset: the dataset is null");
  OXM_CHECK(static_cast<bool>(transform_), InvalidArgument, "RandomMapDataset: the transform is empty");
}

Example RandomMapDataset::fetch(int64_t index) const {
  const WorkerInfo info = t_worker_info.value_or(WorkerInfo{});
  // Chained mixes: distinct (seed, epoch, index) triples give unrelated streams.
  uint64_t h = mix64(info.seed ^ 0x5851f42d4c957f2dULL);
  h = mix64(h ^ static_cast<uint64_t>(info.epoch));
  h = mix64(h ^ static_cast<uint64_t>(index));
  Generator gen(h);
  return transform_(dataset_->get(index), gen);
}

// ---- shorthands

std::shared_ptr<TensorDataset> tensor_dataset(std::vector<Tensor> tensors) {
  return std::make_shared<TensorDataset>(std::move(tensors));
}
std::shared_ptr<Subset> subset(DatasetPtr dataset, std::vector<int64_t> indices) {
  return std::make_shared<Subset>(std::move(dataset), std::move(indices));
}
std::shared_ptr<ConcatDataset> concat(std::vector<DatasetPtr> datasets) {
  return std::make_shared<ConcatDataset>(std::move(datasets));
}
std::shared_ptr<MapDataset> transform(DatasetPtr dataset, Transform fn) {
  return std::make_shared<MapDataset>(std::move(dataset), std::move(fn));
}
std::shared_ptr<RandomMapDataset> random_transform(DatasetPtr dataset, RandomTransform fn) {
  return std::make_shared<RandomMapDataset>(std::move(dataset), std::move(fn));
}

// ---- random_permutation / random_split

std::vector<int64_t> random_permutation(int64_t n, Generator& gen) {
  OXM_CHECK(n >= 0, InvalidArgument, "random_permutation: n must be >= 0, got ", n);
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = i;
  // Fisher-Yates; the modulo's bias is below n / 2^64.
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(gen.next_u64() % static_cast<uint64_t>(i + 1));
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(j)]);
  }
  return p;
}

namespace {

std::string list_str(const std::vector<double>& v) {
  std::ostringstream os;
  os << "[";
  for (size_t k = 0; k < v.size(); ++k) os << (k ? ", " : "") << v[k];
  os << "]";
  return os.str();
}

}  // namespace

namespace detail {

std::vector<std::shared_ptr<Subset>> random_split_lengths(DatasetPtr dataset, const std::vector<int64_t>& lengths,
                                                          Generator& gen) {
  OXM_CHECK(dataset != nullptr, InvalidArgument, "random_split: the dataset is null");
  const int64_t n = dataset->size();
  int64_t total = 0;
  for (size_t k = 0; k < lengths.size(); ++k) {
    OXM_CHECK(lengths[k] >= 0, InvalidArgument, "random_split: lengths[", k, "] = ", lengths[k], " is negative");
    OXM_CHECK(lengths[k] <= n - total, InvalidArgument, "random_split: the lengths add up to more than the dataset's ",
              n, " examples (at lengths[", k, "])");
    total += lengths[k];
  }
  OXM_CHECK(total == n, InvalidArgument, "random_split: the lengths add up to ", total, " but the dataset has ", n,
            " examples; give lengths summing to ", n, " or fractions summing to 1");
  const std::vector<int64_t> perm = random_permutation(n, gen);
  std::vector<std::shared_ptr<Subset>> out;
  out.reserve(lengths.size());
  size_t at = 0;
  for (int64_t len : lengths) {
    std::vector<int64_t> idx(perm.begin() + static_cast<std::ptrdiff_t>(at),
                             perm.begin() + static_cast<std::ptrdiff_t>(at + static_cast<size_t>(len)));
    at += static_cast<size_t>(len);
    out.push_back(std::make_shared<Subset>(dataset, std::move(idx)));
  }
  return out;
}

}  // namespace detail

std::vector<std::shared_ptr<Subset>> random_split(DatasetPtr dataset, const std::vector<double>& lengths,
                                                  Generator& gen) {
  OXM_CHECK(dataset != nullptr, InvalidArgument, "random_split: the dataset is null");
  OXM_CHECK(!lengths.empty(), InvalidArgument, "random_split: no lengths given");
  const int64_t n = dataset->size();
  double sum = 0.0;
  for (size_t k = 0; k < lengths.size(); ++k) {
    OXM_CHECK(std::isfinite(lengths[k]) && lengths[k] >= 0.0, InvalidArgument, "random_split: lengths[", k,
              "] = ", lengths[k], " is negative or not finite (in ", list_str(lengths), ")");
    sum += lengths[k];
  }
  std::vector<int64_t> counts(lengths.size());
  if (std::abs(sum - 1.0) <= 1e-9 && sum <= 1.0) {
    // Fractions (torch's rule): floor(n * f) each, then the remainder one by one from the first split.
    int64_t given = 0;
    for (size_t k = 0; k < lengths.size(); ++k) {
      OXM_CHECK(lengths[k] <= 1.0, InvalidArgument, "random_split: fraction ", lengths[k], " is above 1");
      counts[k] = static_cast<int64_t>(std::floor(static_cast<double>(n) * lengths[k]));
      given += counts[k];
    }
    for (int64_t r = 0; r < n - given; ++r) counts[static_cast<size_t>(r) % counts.size()] += 1;
  } else {
    for (size_t k = 0; k < lengths.size(); ++k) {
      OXM_CHECK(lengths[k] == std::floor(lengths[k]) && lengths[k] <= 9007199254740992.0, InvalidArgument,
                "random_split: lengths ", list_str(lengths),
                " are neither fractions summing to 1 nor whole lengths (lengths[", k, "] = ", lengths[k], ")");
      counts[k] = static_cast<int64_t>(lengths[k]);
    }
  }
  return detail::random_split_lengths(std::move(dataset), counts, gen);
}

}  // namespace oxmera::data
