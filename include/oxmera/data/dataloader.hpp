#pragma once
// DataLoader: batches of a Dataset, optionally shuffled, fetched by worker threads ahead of the consumer.
//
//   auto ds = data::tensor_dataset({x, y});
//   data::DataLoader loader(ds, {.batch_size = 64, .shuffle = true, .seed = 7, .num_workers = 2});
//   for (int epoch = 0; epoch < 10; ++epoch)
//     for (auto& batch : loader) step(batch[0], batch[1]);  // each range-for runs the next epoch
//
// Guarantees:
// - The order of an epoch is a pure function of (seed, epoch): order(epoch) is the identity without shuffle,
//   else a Fisher-Yates permutation driven by a Generator seeded from (seed, epoch) (RandomSampler), or the
//   sampler's order(seed, epoch) when one is given (its size() sets the loader's). Batch b holds
//   order[b * batch_size ...]; batches arrive in that order for any num_workers (0 included), so a run is
//   reproducible whatever the worker count.
// - Memory is bounded: at most num_workers * prefetch_factor batches are being fetched or waiting, on top of the
//   one the consumer holds, however slowly it consumes. Sleeping workers are woken once half of that window is
//   free, so fast batches are refilled in runs (a larger prefetch_factor means fewer wake-ups).
// - An exception while fetching, transforming or collating is rethrown in the caller's thread, when the loop
//   reaches that batch, as an oxmera::Error of the original kind (InvalidArgument for a non-oxmera exception)
//   whose message names the example index, the batch and the original message; the epoch then ends.
// - Leaving the loop early (break, exception) destroys the iterator, which stops every worker and joins them
//   (with persistent_workers: waits until they are idle, and the next begin() reuses them).
// Workers are threads of this process (not processes, as torch's are), so the dataset's fetch(), transforms
// and collate function must be thread-safe. They run oxmera ops with one intra-op thread (get_num_threads() is 1
// there), as torch's workers do, and with gradient recording off (NoGradGuard); with num_workers 0 the fetches run
// in the caller's thread, with its thread count and gradient recording off.
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <vector>

#include "oxmera/data/dataset.hpp"
#include "oxmera/data/sampler.hpp"
#include "oxmera/device.hpp"
#include "oxmera/tensor.hpp"

namespace oxmera::data {

// One batch: its fields in the examples' order; by default field k is the examples' field k stacked.
using Batch = std::vector<Tensor>;

// torch's default_collate for tensors: field k of the batch is stack(examples' field k, 0). All examples must
// have the same number of fields (else InvalidArgument) and, per field, the same shape, dtype and device (else
// ShapeMismatch, DTypeMismatch, DeviceMismatch), each error naming the field and the first example that differs.
Batch default_collate(std::vector<Example>&& examples);

using Collate = std::function<Batch(std::vector<Example>&& examples)>;
// Called in the caller's thread as each batch is handed out: (batch index in the epoch, batches in the epoch).
using ProgressHook = std::function<void(int64_t batch_index, int64_t num_batches)>;

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  // The seed of the shuffle, the sampler and random_transform (e.g. gen.next_u64() to draw it from a Generator).
  uint64_t seed = 0;
  SamplerPtr sampler{};     // the indices of each epoch instead of 0 .. n-1 / the shuffle (not with shuffle)
  bool drop_last = false;   // drop the last batch when it is short
  int num_workers = 0;      // 0: batches are fetched in the caller's thread, when asked for
  int prefetch_factor = 2;  // batches fetched ahead per worker (num_workers > 0 only)
  // torch's persistent_workers=True (num_workers > 0 only): the worker threads start with the first epoch and
  // wait, idle, between epochs; each begin() hands them its epoch's order. They are joined when the loader and
  // every iterator from it are gone. Without it each epoch starts its threads in begin() and joins them at its
  // end. While one epoch holds them, another epoch begun from the same loader starts threads of its own.
  bool persistent_workers = false;
  Collate collate{};        // empty: default_collate
  ProgressHook on_batch{};  // empty: none
  // Each batch tensor is moved with .to(device), in the caller's thread, before it is handed out; a pinned one
  // (pin_memory) with non_blocking, so the copy is only enqueued on the device's stream and overlaps the
  // caller's work (the pinned block is reused only once the device has read it).
  std::optional<Device> device{};
  // torch's pin_memory=True: the workers (the caller's thread when num_workers is 0) copy each collated CPU
  // tensor into page-locked memory (Tensor::pin_memory), so the move to `device` is an asynchronous DMA. When
  // no backend can pin (no GPU), batches stay in ordinary memory, as torch does with a warning; pins_memory()
  // says which. Tensors the collate function put on another device are left as they are.
  bool pin_memory = false;
};

namespace detail {
struct EpochRun;
struct LoaderConfig;
struct WorkerPool;
}  // namespace detail

class DataLoader {
 public:
  // Move-only input iterator over one epoch's batches. It owns the epoch's workers: destroying it (or reaching
  // the end) stops and joins them (with persistent_workers: stops them and leaves them idle for the next epoch).
  class Iterator {
   public:
    using iterator_concept = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;

    Iterator() noexcept;
    Iterator(Iterator&&) noexcept;
    Iterator& operator=(Iterator&&) noexcept;
    ~Iterator();

    Batch& operator*() const;
    Batch* operator->() const { return &**this; }
    Iterator& operator++();
    void operator++(int) { ++*this; }
    // The index of the current batch in the epoch, and the epoch.
    int64_t batch_index() const;
    int64_t epoch() const;
    friend bool operator==(const Iterator& it, std::default_sentinel_t) noexcept { return it.done(); }

   private:
    friend class DataLoader;
    explicit Iterator(std::unique_ptr<detail::EpochRun> run);
    bool done() const noexcept;
    std::unique_ptr<detail::EpochRun> run_;
  };

  // InvalidArgument: a null dataset, batch_size < 1, num_workers < 0, prefetch_factor < 1, shuffle with a sampler,
  // persistent_workers with num_workers 0.
  explicit DataLoader(DatasetPtr dataset, DataLoaderOptions options = {});
  ~DataLoader();
  // Copies share the dataset and options (both immutable) and start at the same epoch(); with
  // persistent_workers each copy has its own workers.
  DataLoader(const DataLoader&);
  DataLoader& operator=(const DataLoader&);
  DataLoader(DataLoader&&) noexcept;
  DataLoader& operator=(DataLoader&&) noexcept;

  // Batches per epoch: ceil(n / batch_size), or floor with drop_last (n = the sampler's or the dataset's size).
  int64_t size() const;
  // Whether batches are collated into pinned memory: options().pin_memory and a backend that can pin (decided
  // when the loader is constructed).
  bool pins_memory() const;
  const DatasetPtr& dataset() const;
  const DataLoaderOptions& options() const;

  // The epoch the next begin() runs (0 at first); begin() runs it and advances it by one, so consecutive loops
  // see consecutive epochs. set_epoch picks the next one (e.g. when resuming), like DistributedSampler's.
  int64_t epoch() const noexcept { return next_epoch_; }
  void set_epoch(int64_t epoch);
  // The dataset indices of `epoch` in visit order (all n of them; drop_last drops the tail from the batches).
  // InvalidArgument when a sampler gives other than its size() indices.
  std::vector<int64_t> order(int64_t epoch) const;

  // Starts the next epoch: its workers, then waits for its first batch (an error in it is thrown here).
  Iterator begin();
  std::default_sentinel_t end() const noexcept { return {}; }
  // Starts `epoch` without changing epoch().
  Iterator iterate(int64_t epoch) const;

 private:
  std::shared_ptr<const detail::LoaderConfig> config_;
  std::shared_ptr<detail::WorkerPool> pool_;  // persistent_workers: the threads kept across epochs (else null)
  int64_t next_epoch_ = 0;
};

}  // namespace oxmera::data
