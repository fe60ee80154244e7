#pragma once
// Map-style datasets (torch.utils.data's Dataset, TensorDataset, Subset, ConcatDataset, random_split) and a
// per-example transform. A dataset is random access: size() examples, get(i) returns example i as a small
// vector of tensors (its fields, e.g. {input, target}). Datasets are shared, immutable objects handed around as
// DatasetPtr, so a Subset or a DataLoader keeps its parent alive.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

#include "oxmera/random.hpp"
#include "oxmera/tensor.hpp"

namespace oxmera::data {

// One example: its fields in a fixed order (e.g. {image, label}).
using Example = std::vector<Tensor>;

// The interface. Subclasses implement size() and fetch(); callers use get(), which checks the index.
// fetch() must be safe to call from several threads at once: the DataLoader's workers call it concurrently.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // Example `index`, 0 <= index < size() (IndexOutOfBounds otherwise).
  Example get(int64_t index) const;
  // The examples at `indices` already batched as default_collate would stack them (field k of the result is the
  // examples' field k stacked along a new dim 0), or nullopt when the dataset has no faster way than get() per
  // example (the default). The DataLoader asks for it when no collate function is given, like torch's
  // __getitems__. Each index is checked as get() checks it.
  std::optional<std::vector<Tensor>> get_batch(const std::vector<int64_t>& indices) const;

 protected:
  // Example `index`, already checked to be in range.
  virtual Example fetch(int64_t index) const = 0;
  // get_batch's work, indices already checked; the default has none (nullopt).
  virtual std::optional<std::vector<Tensor>> fetch_batch(const std::vector<int64_t>& indices) const;
};

using DatasetPtr = std::shared_ptr<const Dataset>;

// Rows of N tensors sharing their first dim: example i is {t[i] for each t} (views, no copy), like
// torch.utils.data.TensorDataset. At least one tensor; each of rank >= 1 with the same size(0).
class TensorDataset final : public Dataset {
 public:
  explicit TensorDataset(std::vector<Tensor> tensors);
  int64_t size() const override { return size_; }
  const std::vector<Tensor>& tensors() const noexcept { return tensors_; }

 protected:
  Example fetch(int64_t index) const override;
  // One index_select per tensor: the batch without a copy per example.
  std::optional<std::vector<Tensor>> fetch_batch(const std::vector<int64_t>& indices) const override;

 private:
  std::vector<Tensor> tensors_;
  int64_t size_ = 0;
};

// The examples of `dataset` at `indices`, in that order (indices may repeat); each index is checked once, here.
class Subset final : public Dataset {
 public:
  Subset(DatasetPtr dataset, std::vector<int64_t> indices);
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  const DatasetPtr& dataset() const noexcept { return dataset_; }
  const std::vector<int64_t>& indices() const noexcept { return indices_; }

 protected:
  Example fetch(int64_t index) const override;
  // The parent's batched fetch at the mapped indices, when it has one (random_split of a TensorDataset).
  std::optional<std::vector<Tensor>> fetch_batch(const std::vector<int64_t>& indices) const override;

 private:
  DatasetPtr dataset_;
  std::vector<int64_t> indices_;
};

// The datasets one after another: example i of the whole is example i - offset of the part that holds it.
class ConcatDataset final : public Dataset {
 public:
  explicit ConcatDataset(std::vector<DatasetPtr> datasets);
  int64_t size() const override { return cumulative_.empty() ? 0 : cumulative_.back(); }
  const std::vector<DatasetPtr>& datasets() const noexcept { return datasets_; }

 protected:
  Example fetch(int64_t index) const override;

 private:
  std::vector<DatasetPtr> datasets_;
  std::vector<int64_t> cumulative_;  // cumulative_[k]: examples in datasets_[0..k]
};

// A function applied to each example as it is fetched (augmentation, normalisation, casting). It runs in the
// DataLoader's worker threads, so it must be safe to call concurrently (no shared mutable state, or its own
// locking). A random augmentation takes a RandomTransform (below) rather than a shared Generator.
using Transform = std::function<Example(Example)>;

class MapDataset final : public Dataset {
 public:
  MapDataset(DatasetPtr dataset, Transform transform);
  int64_t size() const override { return dataset_->size(); }
  const DatasetPtr& dataset() const noexcept { return dataset_; }

 protected:
  Example fetch(int64_t index) const override;

 private:
  DatasetPtr dataset_;
  Transform transform_;
};

// What a fetch running under a DataLoader knows about its worker (torch's get_worker_info): worker_id in
// [0, num_workers) (0 and num_workers = 0 in the caller's thread), the loader's seed and the epoch.
struct WorkerInfo {
  int worker_id = 0;
  int num_workers = 0;
  uint64_t seed = 0;
  int64_t epoch = 0;
};
// The info of the DataLoader fetch running on this thread; std::nullopt outside one (a plain get()).
std::optional<WorkerInfo> worker_info();

// A transform that draws random numbers (augmentation). Its Generator is seeded from (the loader's seed, the
// epoch, the example's index in the wrapped dataset), so one example in one epoch gets the same draw whatever
// the number of workers and the order, and another epoch gets another draw. Outside a DataLoader seed and
// epoch are 0. Like Transform it runs in the workers; the Generator is its own.
using RandomTransform = std::function<Example(Example, Generator&)>;

class RandomMapDataset final : public Dataset {
 public:
  RandomMapDataset(DatasetPtr dataset, RandomTransform transform);
  int64_t size() const override { return dataset_->size(); }
  const DatasetPtr& dataset() const noexcept { return dataset_; }

 protected:
  Example fetch(int64_t index) const override;

 private:
  DatasetPtr dataset_;
  RandomTransform transform_;
};

// Shorthands: tensor_dataset({x, y}), subset(ds, {0, 2}), concat({a, b}), transform(ds, fn),
// random_transform(ds, fn).
std::shared_ptr<TensorDataset> tensor_dataset(std::vector<Tensor> tensors);
std::shared_ptr<Subset> subset(DatasetPtr dataset, std::vector<int64_t> indices);
std::shared_ptr<ConcatDataset> concat(std::vector<DatasetPtr> datasets);
std::shared_ptr<MapDataset> transform(DatasetPtr dataset, Transform transform);
std::shared_ptr<RandomMapDataset> random_transform(DatasetPtr dataset, RandomTransform transform);

// A uniformly random permutation of 0 .. n-1 (Fisher-Yates driven by `gen`, which advances).
std::vector<int64_t> random_permutation(int64_t n, Generator& gen);

// torch.utils.data.random_split: the dataset's examples in a random order (random_permutation with `gen`), cut
// into consecutive disjoint Subsets. `lengths` are either lengths summing to size() or fractions summing to 1
// (torch's rule: a sum within 1e-9 of 1 and not above it means fractions); fractions give floor(size * f)
// each and the remainder goes one by one to the splits from the first. Same generator state, same splits
// (the permutation is oxmera's, not torch's). Negative, non-finite or non-integral lengths, fractions outside
// [0, 1] and sums that match neither are InvalidArgument.
std::vector<std::shared_ptr<Subset>> random_split(DatasetPtr dataset, const std::vector<double>& lengths,
                                                  Generator& gen);
// The same with integer lengths held in a std::vector<int64_t> (a braced list takes the overload above).
template <class Lengths>
requires std::is_same_v<std::remove_cvref_t<Lengths>, std::vector<int64_t>> std::vector<std::shared_ptr<Subset>>
random_split(DatasetPtr dataset, const Lengths& lengths, Generator& gen);

namespace detail {
// Sets worker_info() for the current thread while it lives (the DataLoader's fetches).
class WorkerInfoScope {
 public:
  explicit WorkerInfoScope(const WorkerInfo& info) noexcept;
  ~WorkerInfoScope();
  WorkerInfoScope(const WorkerInfoScope&) = delete;
  WorkerInfoScope& operator=(const WorkerInfoScope&) = delete;

 private:
  std::optional<WorkerInfo> prev_;
};
std::vector<std::shared_ptr<Subset>> random_split_lengths(DatasetPtr dataset, const std::vector<int64_t>& lengths,
                                                          Generator& gen);
}  // namespace detail

template <class Lengths>
requires std::is_same_v<std::remove_cvref_t<Lengths>, std::vector<int64_t>> std::vector<std::shared_ptr<Subset>>
random_split(DatasetPtr dataset, const Lengths& lengths, Generator& gen) {
  return detail::random_split_lengths(std::move(dataset), lengths, gen);
}

}  // namespace oxmera::data
