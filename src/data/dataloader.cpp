#include "oxmera/data/dataloader.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "backend/cpu/parallel.hpp"
#include "oxmera/autograd.hpp"
#include "oxmera/error.hpp"
#include "oxmera/random.hpp"

namespace oxmera::data {

// ---- default_collate

Batch default_collate(std::vector<Example>&& examples) {
  OXM_CHECK(!examples.empty(), InvalidArgument, "default_collate: no examples");
  const size_t fields = examples[0].size();
  OXM_CHECK(fields > 0, InvalidArgument, "default_collate: example 0 has no fields");
  for (size_t e = 1; e < examples.size(); ++e)
    OXM_CHECK(examples[e].size() == fields, InvalidArgument, "default_collate: example ", e, " of the batch has ",
              examples[e].size(), " fields but example 0 has ", fields);
  Batch batch;
  batch.reserve(fields);
  std::vector<Tensor> column(examples.size());
  for (size_t f = 0; f < fields; ++f) {
    OXM_CHECK(examples[0][f].defined(), InvalidArgument, "default_collate: field ", f, " of example 0 is undefined");
    // Copies: the tensors are moved into `column` as they are checked.
    const Shape shape = examples[0][f].shape();
    const DType dtype = examples[0][f].dtype();
    const Device device = examples[0][f].device();
    for (size_t e = 0; e < examples.size(); ++e) {
      Tensor& t = examples[e][f];
      OXM_CHECK(t.defined(), InvalidArgument, "default_collate: field ", f, " of example ", e, " is undefined");
      OXM_CHECK(t.shape() == shape, ShapeMismatch, "default_collate: field ", f, " of example ", e,
                " of the batch has shape ", t.shape(), " but example 0's has shape ", shape,
                "; pad the examples or pass a custom collate function");
      OXM_CHECK(t.dtype() == dtype, DTypeMismatch, "default_collate: field ", f, " of example ", e, " of the batch is ",
                dtype_name(t.dtype()), " but example 0's is ", dtype_name(dtype));
      OXM_CHECK(t.device() == device, DeviceMismatch, "default_collate: field ", f, " of example ", e,
                " of the batch is on ", t.device().str(), " but example 0's is on ", device.str());
      column[e] = std::move(t);
    }
    batch.push_back(stack(column, 0));
  }
  return batch;
}

namespace detail {

struct LoaderConfig {
  DatasetPtr dataset;
  DataLoaderOptions options;
  int64_t num_batches = 0;
  bool pin = false;  // options.pin_memory and a backend can pin
};

namespace {

std::vector<int64_t> epoch_order(const LoaderConfig& cfg, int64_t epoch) {
  const DataLoaderOptions& opt = cfg.options;
  if (opt.sampler) {
    std::vector<int64_t> order = opt.sampler->order(opt.seed, epoch);
    OXM_CHECK(static_cast<int64_t>(order.size()) == opt.sampler->size(), InvalidArgument,
              "DataLoader: the sampler gave ", order.size(), " indices for epoch ", epoch, " but its size() is ",
              opt.sampler->size());
    return order;
  }
  const int64_t n = cfg.dataset->size();
  if (opt.shuffle) return RandomSampler(n).order(opt.seed, epoch);
  return SequentialSampler(n).order(opt.seed, epoch);
}

std::string indices_str(const std::vector<int64_t>& order, size_t begin, size_t end) {
  std::ostringstream os;
  os << "[";
  for (size_t k = begin; k < end && k < begin + 8; ++k) os << (k > begin ? ", " : "") << order[k];
  if (end - begin > 8) os << ", ... (" << end - begin << " examples)";
  os << "]";
  return os.str();
}

// The failure of one batch, as the Error the caller will see.
std::exception_ptr wrap_error(const std::string& where, std::exception_ptr original) {
  try {
    std::rethrow_exception(original);
  } catch (const Error& e) {
    return std::make_exception_ptr(Error(e.kind(), where + ": " + e.message()));
  } catch (const std::exception& e) {
    return std::make_exception_ptr(Error(ErrorKind::InvalidArgument, where + ": " + e.what()));
  } catch (...) {
    return std::make_exception_ptr(Error(ErrorKind::InvalidArgument, where + ": an exception of unknown type"));
  }
}

}  // namespace

struct BatchResult {
  Batch batch;
  std::exception_ptr error;
};

struct EpochRun;

// The worker threads and the hand-offs between them and the consumer. A pool serves one epoch at a time (`run`,
// null while idle); everything below, and the claim / slot state of the served epoch, is guarded by `mu`. Without
// persistent_workers each epoch makes its own pool and closes it when the epoch ends; with them the loader keeps
// one and each begin() attaches its epoch to it.
struct WorkerPool {
  std::mutex mu;
  std::condition_variable work_cv;   // workers wait for an epoch and room in its window
  std::condition_variable ready_cv;  // the consumer waits for the next batch
  std::condition_variable idle_cv;   // detach() waits for the workers to leave the epoch
  EpochRun* run = nullptr;
  int busy = 0;          // workers making a batch of `run`
  bool closing = false;  // set by close() (and cleared after a failed start)
  bool in_use = false;   // persistent: an epoch holds the pool (a second live epoch gets its own threads)
  std::vector<std::thread> threads;

  WorkerPool() = default;
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  ~WorkerPool() { close(); }

  // Starts n threads; on failure joins those started and throws.
  void start(int64_t n) {
    try {
      for (int64_t w = 0; w < n; ++w) threads.emplace_back([this, w] { worker(static_cast<int>(w)); });
    } catch (const std::system_error& e) {
      const size_t started = threads.size();
      close();
      {
        std::lock_guard<std::mutex> lock(mu);
        closing = false;  // a persistent pool tries again at the next epoch
      }
      OXM_FAIL(InvalidArgument, "DataLoader: could not start worker thread ", started + 1, " of ", n, " (", e.what(),
               "); use fewer num_workers");
    }
  }

  void close() noexcept {
    {
      std::lock_guard<std::mutex> lock(mu);
      closing = true;
    }
    work_cv.notify_all();
    for (std::thread& t : threads)
      if (t.joinable()) t.join();
    threads.clear();
  }

  void attach(EpochRun* r) {
    {
      std::lock_guard<std::mutex> lock(mu);
      run = r;
    }
    work_cv.notify_all();
  }

  // Once the served epoch's `stop` is set: waits until no worker is inside it (a fetch already running finishes
  // first), then leaves the pool idle.
  void detach() noexcept;
  void worker(int worker_id) noexcept;
};

struct EpochRun {
  std::shared_ptr<const LoaderConfig> cfg;
  int64_t epoch = 0;
  std::vector<int64_t> order;
  int64_t num_batches = 0;

  // The batch handed out last, and its index (-1 before the first; num_batches once finished).
  Batch current;
  int64_t current_index = -1;
  bool finished = false;

  // Workers (num_workers > 0): a batch b may be claimed once b < next_deliver + window, so slot b % window is
  // free (its previous batch, b - window, has been handed out) and at most `window` batches are in flight.
  // Guarded by pool->mu, except `stop`, which fetches read between examples.
  std::shared_ptr<WorkerPool> pool;
  bool pool_is_persistent = false;  // the loader's (given back idle at the end), else this epoch's own
  int64_t window = 0;
  int64_t next_claim = 0;
  int64_t next_deliver = 0;
  std::vector<std::optional<BatchResult>> slots;
  std::atomic<bool> stop{false};

  // `persistent`: the loader's pool, used when it is free (else this epoch starts its own threads).
  EpochRun(std::shared_ptr<const LoaderConfig> config, int64_t e, const std::shared_ptr<WorkerPool>& persistent)
      : cfg(std::move(config)), epoch(e), order(epoch_order(*cfg, e)), num_batches(cfg->num_batches) {
    const int workers = cfg->options.num_workers;
    if (workers == 0 || num_batches == 0) return;
    window = std::min<int64_t>(static_cast<int64_t>(workers) * cfg->options.prefetch_factor, num_batches);
    slots.resize(static_cast<size_t>(window));
    const int64_t nthreads = std::min<int64_t>(workers, num_batches);
    if (persistent) {
      std::lock_guard<std::mutex> lock(persistent->mu);
      if (!persistent->in_use) {
        persistent->in_use = true;
        pool = persistent;
        pool_is_persistent = true;
      }
    }
    if (!pool) {
      pool = std::make_shared<WorkerPool>();
      pool->start(nthreads);
    } else if (pool->threads.empty()) {
      try {
        pool->start(nthreads);  // the first epoch of a persistent pool (a failed start leaves it closed)
      } catch (...) {
        release_pool();
        throw;
      }
    }
    pool->attach(this);
  }

  EpochRun(const EpochRun&) = delete;
  EpochRun& operator=(const EpochRun&) = delete;
  ~EpochRun() { shutdown(); }

  bool claimable() const noexcept {
    return !stop.load(std::memory_order_relaxed) && next_claim < num_batches && next_claim < next_deliver + window;
  }

  // Ends this epoch's use of the workers: a persistent pool goes back to the loader, idle; an own one is closed.
  void shutdown() noexcept {
    if (!pool) return;
    stop.store(true);
    pool->detach();
    release_pool();
  }

  void release_pool() noexcept {
    if (pool_is_persistent) {
      std::lock_guard<std::mutex> lock(pool->mu);
      pool->in_use = false;
    } else {
      pool->close();
    }
    pool.reset();  // the last owner of a persistent pool (when the loader is gone) closes it here
  }

  // With pin_memory: the batch's CPU tensors into page-locked memory (the device move is then non_blocking).
  void pin(Batch& batch) const {
    if (!cfg->pin) return;
    for (Tensor& t : batch)
      if (t.defined() && t.device().is_cpu()) t = t.pin_memory();
  }

  // Fetches and collates batch b; never throws (the failure is returned, wrapped with the example index).
  BatchResult make_batch(int64_t b, int worker_id) const noexcept {
    BatchResult r;
    const DataLoaderOptions& opt = cfg->options;
    const detail::WorkerInfoScope info({worker_id, opt.num_workers, opt.seed, epoch});
    const NoGradGuard no_grad;  // loading never records a graph (nor builds one from several threads)
    const size_t begin = static_cast<size_t>(b * opt.batch_size);
    const size_t end = std::min(order.size(), begin + static_cast<size_t>(opt.batch_size));
    // A dataset with a batched fetch (TensorDataset) gives the whole batch at once when no collate function is set
    // and every index is in range (else the per-example path below reports the failing example, as always).
    if (!opt.collate && end > begin) {
      const int64_t n = cfg->dataset->size();
      const bool in_range =
          std::all_of(order.begin() + static_cast<std::ptrdiff_t>(begin),
                      order.begin() + static_cast<std::ptrdiff_t>(end), [n](int64_t i) { return i >= 0 && i < n; });
      if (in_range) {
        try {
          std::optional<std::vector<Tensor>> batch = cfg->dataset->get_batch(std::vector<int64_t>(
              order.begin() + static_cast<std::ptrdiff_t>(begin), order.begin() + static_cast<std::ptrdiff_t>(end)));
          if (batch) {
            r.batch = std::move(*batch);
            pin(r.batch);
            return r;
          }
        } catch (...) {
          r.error = wrap_error(::oxmera::detail::concat("DataLoader: fetching batch ", b, " of epoch ", epoch,
                                                        " (examples ", indices_str(order, begin, end), ") failed"),
                               std::current_exception());
          return r;
        }
      }
    }
    try {
      std::vector<Example> examples;
      examples.reserve(end - begin);
      for (size_t k = begin; k < end; ++k) {
        if (stop.load(std::memory_order_relaxed)) return r;
        try {
          examples.push_back(cfg->dataset->get(order[k]));
        } catch (...) {
          r.error = wrap_error(::oxmera::detail::concat("DataLoader: fetching example ", order[k], " (batch ", b,
                                                        " of epoch ", epoch, ") failed"),
                               std::current_exception());
          return r;
        }
      }
      try {
        r.batch = opt.collate ? opt.collate(std::move(examples)) : default_collate(std::move(examples));
        pin(r.batch);
      } catch (...) {
        r.error = wrap_error(::oxmera::detail::concat("DataLoader: collating batch ", b, " of epoch ", epoch,
                                                      " (examples ", indices_str(order, begin, end), ") failed"),
                             std::current_exception());
      }
    } catch (...) {  // e.g. bad_alloc while reserving or building the message
      r.error = std::current_exception();
    }
    return r;
  }

  // Hands out the next batch (throws the batch's error, ending the epoch).
  void advance() {
    if (finished) return;
    const int64_t b = current_index + 1;
    current = Batch{};
    if (b >= num_batches) {
      finish();
      return;
    }
    BatchResult r;
    bool wake = false;
    if (!pool) {
      r = make_batch(b, 0);
    } else {
      {
        std::unique_lock<std::mutex> lock(pool->mu);
        auto& slot = slots[static_cast<size_t>(b % window)];
        pool->ready_cv.wait(lock, [&] { return slot.has_value(); });
        r = std::move(*slot);
        slot.reset();
        next_deliver = b + 1;
        // A slot came free. Workers that are awake claim it; a sleeping one is woken only once half the window is
        // free (and each further free slot wakes one more), so fast batches are refilled in runs of window / 2
        // with a wake-up each, not one per batch, while the other half still waits for the consumer; none once
        // every batch is claimed. A wake-up is what the 2-worker epoch lost to the hand-built one on a 2-vCPU VM
        // (docs/LIMITATIONS.md).
        wake = next_claim < num_batches && next_deliver + window - next_claim >= std::max<int64_t>(1, window / 2);
      }
      if (wake) pool->work_cv.notify_one();
    }
    current_index = b;
    if (r.error) {
      finish();
      std::rethrow_exception(r.error);
    }
    const DataLoaderOptions& opt = cfg->options;
    try {
      if (opt.device)
        for (Tensor& t : r.batch)
          if (t.defined()) t = t.to(*opt.device, /*non_blocking=*/t.is_pinned());
      if (opt.on_batch) opt.on_batch(b, num_batches);
    } catch (...) {
      finish();
      throw;
    }
    current = std::move(r.batch);
  }

  void finish() noexcept {
    finished = true;
    current = Batch{};
    current_index = num_batches;
    shutdown();
  }
};

void WorkerPool::detach() noexcept {
  std::unique_lock<std::mutex> lock(mu);
  idle_cv.wait(lock, [&] { return busy == 0; });
  run = nullptr;
}

void WorkerPool::worker(int worker_id) noexcept {
  // One intra-op thread, as torch's workers (torch.set_num_threads(1)): a worker's kernels do not fork teams that
  // compete for the cores with the training step's.
  ::oxmera::detail::set_thread_cpu_threads(1);
  std::unique_lock<std::mutex> lock(mu);
  for (;;) {
    work_cv.wait(lock, [&] { return closing || (run != nullptr && run->claimable()); });
    if (closing) return;
    EpochRun* r = run;
    const int64_t b = r->next_claim++;
    ++busy;
    lock.unlock();
    BatchResult result = r->make_batch(b, worker_id);
    lock.lock();
    r->slots[static_cast<size_t>(b % r->window)] = std::move(result);
    --busy;
    const bool last_out = busy == 0 && r->stop.load(std::memory_order_relaxed);
    lock.unlock();
    ready_cv.notify_one();
    if (last_out) idle_cv.notify_all();
    lock.lock();
  }
}

}  // namespace detail

// ---- Iterator

DataLoader::Iterator::Iterator() noexcept = default;
DataLoader::Iterator::Iterator(Iterator&&) noexcept = default;
DataLoader::Iterator& DataLoader::Iterator::operator=(Iterator&&) noexcept = default;
DataLoader::Iterator::~Iterator() = default;
DataLoader::Iterator::Iterator(std::unique_ptr<detail::EpochRun> run) : run_(std::move(run)) {}

bool DataLoader::Iterator::done() const noexcept { return !run_ || run_->finished; }

Batch& DataLoader::Iterator::operator*() const {
  OXM_CHECK(!done(), InvalidArgument, "DataLoader::Iterator: dereferenced at the end of the epoch");
  return run_->current;
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  OXM_CHECK(!done(), InvalidArgument, "DataLoader::Iterator: advanced past the end of the epoch");
  run_->advance();
  return *this;
}

int64_t DataLoader::Iterator::batch_index() const { return run_ ? run_->current_index : -1; }
int64_t DataLoader::Iterator::epoch() const { return run_ ? run_->epoch : -1; }

// ---- DataLoader

namespace {
std::shared_ptr<detail::WorkerPool> persistent_pool(const detail::LoaderConfig& cfg) {
  if (!cfg.options.persistent_workers || cfg.options.num_workers == 0) return nullptr;
  return std::make_shared<detail::WorkerPool>();  // its threads start with the first epoch
}
}  // namespace

DataLoader::DataLoader(DatasetPtr dataset, DataLoaderOptions options) {
  OXM_CHECK(dataset != nullptr, InvalidArgument, "DataLoader: the dataset is null");
  OXM_CHECK(options.batch_size >= 1, InvalidArgument, "DataLoader: batch_size must be >= 1, got ", options.batch_size);
  OXM_CHECK(options.num_workers >= 0, InvalidArgument, "DataLoader: num_workers must be >= 0, got ",
            options.num_workers);
  OXM_CHECK(options.prefetch_factor >= 1, InvalidArgument, "DataLoader: prefetch_factor must be >= 1, got ",
            options.prefetch_factor);
  OXM_CHECK(!options.persistent_workers || options.num_workers > 0, InvalidArgument,
            "DataLoader: persistent_workers needs num_workers > 0 (as in torch)");
  OXM_CHECK(!(options.sampler && options.shuffle), InvalidArgument,
            "DataLoader: shuffle and sampler are exclusive (as in torch); use a RandomSampler, or shuffle without one");
  auto cfg = std::make_shared<detail::LoaderConfig>();
  const int64_t n = options.sampler ? options.sampler->size() : dataset->size();
  const int64_t bs = options.batch_size;
  cfg->num_batches = options.drop_last ? n / bs : n / bs + (n % bs != 0 ? 1 : 0);
  cfg->pin = options.pin_memory && pinned_memory_available();
  cfg->dataset = std::move(dataset);
  cfg->options = std::move(options);
  pool_ = persistent_pool(*cfg);
  config_ = std::move(cfg);
}

DataLoader::~DataLoader() = default;
// A copy gets its own workers (started at its first epoch).
DataLoader::DataLoader(const DataLoader& other)
    : config_(other.config_), pool_(persistent_pool(*other.config_)), next_epoch_(other.next_epoch_) {}
DataLoader& DataLoader::operator=(const DataLoader& other) {
  if (this != &other) {
    pool_ = persistent_pool(*other.config_);
    config_ = other.config_;
    next_epoch_ = other.next_epoch_;
  }
  return *this;
}
DataLoader::DataLoader(DataLoader&&) noexcept = default;
DataLoader& DataLoader::operator=(DataLoader&&) noexcept = default;

int64_t DataLoader::size() const { return config_->num_batches; }
bool DataLoader::pins_memory() const { return config_->pin; }
const DatasetPtr& DataLoader::dataset() const { return config_->dataset; }
const DataLoaderOptions& DataLoader::options() const { return config_->options; }

void DataLoader::set_epoch(int64_t epoch) {
  OXM_CHECK(epoch >= 0, InvalidArgument, "DataLoader::set_epoch: epoch must be >= 0, got ", epoch);
  next_epoch_ = epoch;
}

std::vector<int64_t> DataLoader::order(int64_t epoch) const {
  OXM_CHECK(epoch >= 0, InvalidArgument, "DataLoader::order: epoch must be >= 0, got ", epoch);
  return detail::epoch_order(*config_, epoch);
}

DataLoader::Iterator DataLoader::begin() { return iterate(next_epoch_++); }

DataLoader::Iterator DataLoader::iterate(int64_t epoch) const {
  OXM_CHECK(epoch >= 0, InvalidArgument, "DataLoader::iterate: epoch must be >= 0, got ", epoch);
  Iterator it(std::make_unique<detail::EpochRun>(config_, epoch, pool_));
  it.run_->advance();  // the first batch (or the end of an empty epoch)
  return it;
}

}  // namespace oxmera::data
