// Datasets and the DataLoader (include/oxmera/data/): order, coverage, batching, collation, bounded prefetch,
// error propagation and shutdown.
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <ranges>
#include <set>
#include <stdexcept>
#include <thread>

#include "test_util.hpp"

using namespace oxt;
namespace data = oxmera::data;

namespace {

// x[i] = i, y[i] = 10 i (i64), so a batch says which examples it holds.
std::shared_ptr<data::TensorDataset> index_dataset(int64_t n) {
  Tensor x = arange(n, DType::I64);
  return data::tensor_dataset({x, x * 10.0});
}

std::vector<int64_t> ints(const Tensor& t) { return t.to_vector<int64_t>(); }

// Every batch's field 0, in delivery order.
std::vector<std::vector<int64_t>> collect(data::DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (auto& batch : loader) {
    EXPECT_EQ(batch.size(), 2u);
    EXPECT_EQ(ints(batch[1]), [&] {
      auto v = ints(batch[0]);
      for (auto& e : v) e *= 10;
      return v;
    }()) << "fields of one example must travel together";
    out.push_back(ints(batch[0]));
  }
  return out;
}

// A dataset that counts its fetches and remembers how far they ran ahead of the consumer.
class CountingDataset final : public data::Dataset {
 public:
  CountingDataset(int64_t n, int64_t batch_size) : n_(n), batch_size_(batch_size) {}
  int64_t size() const override { return n_; }
  mutable std::atomic<int64_t> fetched{0};
  std::atomic<int64_t> consumed_batches{0};    // set by the test as it receives batches
  mutable std::atomic<int64_t> peak_ahead{0};  // max over fetches of fetched - consumed examples

 protected:
  data::Example fetch(int64_t index) const override {
    const int64_t f = ++fetched;
    const int64_t ahead = f - consumed_batches.load() * batch_size_;
    int64_t prev = peak_ahead.load();
    while (ahead > prev && !peak_ahead.compare_exchange_weak(prev, ahead)) {
    }
    return {scalar(static_cast<double>(index), DType::I64)};
  }

 private:
  int64_t n_, batch_size_;
};

// Fails at one index, with an oxmera::Error or a std::runtime_error.
class FailingDataset final : public data::Dataset {
 public:
  FailingDataset(int64_t n, int64_t bad, bool oxmera_error) : n_(n), bad_(bad), oxmera_error_(oxmera_error) {}
  int64_t size() const override { return n_; }

 protected:
  data::Example fetch(int64_t index) const override {
    if (index == bad_) {
      if (oxmera_error_) OXM_FAIL(Io, "record.bin: corrupt record at offset 4096");
      throw std::runtime_error("decoder exploded");
    }
    return {scalar(static_cast<double>(index), DType::I64)};
  }

 private:
  int64_t n_, bad_;
  bool oxmera_error_;
};

// Worker threads that ran a fetch of a ThreadCountingDataset, and how many of them have exited: a thread_local
// is constructed at a thread's first fetch and destroyed when the thread exits, before join() returns.
std::atomic<int> g_fetch_threads{0}, g_fetch_threads_exited{0};
struct FetchThreadMark {
  FetchThreadMark() { ++g_fetch_threads; }
  ~FetchThreadMark() { ++g_fetch_threads_exited; }
  FetchThreadMark(const FetchThreadMark&) = delete;
  FetchThreadMark& operator=(const FetchThreadMark&) = delete;
};

class ThreadCountingDataset final : public data::Dataset {
 public:
  explicit ThreadCountingDataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  mutable std::atomic<int64_t> fetched{0};

 protected:
  data::Example fetch(int64_t index) const override {
    thread_local FetchThreadMark mark;
    ++fetched;
    return {scalar(static_cast<double>(index), DType::I64), scalar(static_cast<double>(index * 10), DType::I64)};
  }

 private:
  int64_t n_;
};

}  // namespace

static_assert(std::input_iterator<data::DataLoader::Iterator>);
static_assert(std::sentinel_for<std::default_sentinel_t, data::DataLoader::Iterator>);
static_assert(std::ranges::input_range<data::DataLoader>);

// ---- datasets

TEST(DataDataset, TensorDatasetRowsAreViewsOfEachTensor) {
  Tensor x = arange(0.0, 12.0, 1.0, DType::F32).reshape({4, 3});
  Tensor y = arange(4, DType::I64);
  auto ds = data::tensor_dataset({x, y});
  EXPECT_EQ(ds->size(), 4);
  data::Example ex = ds->get(2);
  ASSERT_EQ(ex.size(), 2u);
  EXPECT_EQ(ex[0].shape(), Shape({3}));
  EXPECT_EQ(ex[0].to_vector<float>(), (std::vector<float>{6, 7, 8}));
  EXPECT_EQ(ex[1].dim(), 0);
  EXPECT_EQ(ex[1].item<int64_t>(), 2);
  EXPECT_TRUE(ex[0].shares_storage(x)) << "rows are views, not copies";
  EXPECT_OXM_ERROR(ds->get(4), IndexOutOfBounds, "index 4");
  EXPECT_OXM_ERROR(ds->get(-1), IndexOutOfBounds, "index -1");
  EXPECT_OXM_ERROR(data::tensor_dataset({x, arange(5, DType::I64)}), ShapeMismatch, "tensor 1 has shape [5]");
  EXPECT_OXM_ERROR(data::tensor_dataset({x, scalar(1.0)}), InvalidArgument, "0-d");
  EXPECT_OXM_ERROR(data::tensor_dataset({}), InvalidArgument, "at least one tensor");
}

TEST(DataDataset, SubsetConcatAndTransform) {
  auto a = index_dataset(5);
  auto sub = data::subset(a, {4, 0, 4});
  EXPECT_EQ(sub->size(), 3);
  EXPECT_EQ(sub->get(0)[0].item<int64_t>(), 4);
  EXPECT_EQ(sub->get(1)[1].item<int64_t>(), 0);
  EXPECT_EQ(sub->get(2)[0].item<int64_t>(), 4);
  EXPECT_OXM_ERROR(data::subset(a, {1, 5}), IndexOutOfBounds, "indices[1] = 5");

  auto b = index_dataset(2);
  auto cat = data::concat({a, sub, b});
  EXPECT_EQ(cat->size(), 10);
  std::vector<int64_t> seen;
  for (int64_t i = 0; i < cat->size(); ++i) seen.push_back(cat->get(i)[0].item<int64_t>());
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3, 4, 4, 0, 4, 0, 1}));
  EXPECT_OXM_ERROR(cat->get(10), IndexOutOfBounds, "index 10");
  EXPECT_OXM_ERROR(data::concat({a, nullptr}), InvalidArgument, "dataset 1 is null");

  auto doubled = data::transform(a, [](data::Example ex) {
    ex[0] = ex[0] * 2.0;
    ex.push_back(scalar(1.0));  // a transform may change the fields
    return ex;
  });
  EXPECT_EQ(doubled->size(), 5);
  data::Example ex = doubled->get(3);
  ASSERT_EQ(ex.size(), 3u);
  EXPECT_EQ(ex[0].item<int64_t>(), 6);
  EXPECT_EQ(ex[1].item<int64_t>(), 30);
  EXPECT_OXM_ERROR(data::transform(a, nullptr), InvalidArgument, "transform is empty");
}

TEST(DataDataset, RandomSplitSizesDisjointnessDeterminism) {
  auto ds = index_dataset(10);
  auto all_of = [](const std::vector<std::shared_ptr<data::Subset>>& parts) {
    std::vector<int64_t> all;
    for (const auto& p : parts) all.insert(all.end(), p->indices().begin(), p->indices().end());
    return all;
  };
  Generator g1(42);
  auto parts = data::random_split(ds, {7, 3}, g1);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0]->size(), 7);
  EXPECT_EQ(parts[1]->size(), 3);
  std::vector<int64_t> all = all_of(parts);
  std::vector<int64_t> sorted = all;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> iota(10);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(sorted, iota) << "the splits are disjoint and cover the dataset";
  EXPECT_NE(all, iota) << "the split is shuffled";
  EXPECT_EQ(parts[1]->get(0)[0].item<int64_t>(), parts[1]->indices()[0]);

  Generator g2(42);
  EXPECT_EQ(all_of(data::random_split(ds, {7, 3}, g2)), all) << "same seed, same split";
  Generator g3(43);
  EXPECT_NE(all_of(data::random_split(ds, {7, 3}, g3)), all) << "another seed, another split";
  Generator g4(42);
  const std::vector<int64_t> lengths{7, 3};
  EXPECT_EQ(all_of(data::random_split(ds, lengths, g4)), all) << "the std::vector<int64_t> overload";

  // Fractions: floor(n f), the remainder one by one from the first split (torch's rule).
  Generator g5(1);
  auto f = data::random_split(ds, {0.8, 0.2}, g5);
  EXPECT_EQ(f[0]->size(), 8);
  EXPECT_EQ(f[1]->size(), 2);
  auto five = index_dataset(5);
  auto h = data::random_split(five, {0.5, 0.5}, g5);
  EXPECT_EQ(h[0]->size(), 3);
  EXPECT_EQ(h[1]->size(), 2);
  auto t = data::random_split(five, {1.0 / 3, 1.0 / 3, 1.0 / 3}, g5);
  EXPECT_EQ(t[0]->size(), 2);
  EXPECT_EQ(t[1]->size(), 2);
  EXPECT_EQ(t[2]->size(), 1);

  Generator g6(0);
  EXPECT_OXM_ERROR(data::random_split(ds, {7, 4}, g6), InvalidArgument, "add up to more than");
  EXPECT_OXM_ERROR(data::random_split(ds, {6, 3}, g6), InvalidArgument, "add up to 9");
  EXPECT_OXM_ERROR(data::random_split(ds, {0.5, 0.6}, g6), InvalidArgument, "neither fractions");
  EXPECT_OXM_ERROR(data::random_split(ds, {-1, 11}, g6), InvalidArgument, "negative");
}

// ---- DataLoader: order and coverage

TEST(DataLoader, OrderIsAFunctionOfSeedAndEpochForAnyWorkerCount) {
  auto ds = index_dataset(103);
  auto run = [&](int workers, uint64_t seed, int64_t epoch) {
    data::DataLoader loader(ds, {.batch_size = 8, .shuffle = true, .seed = seed, .num_workers = workers});
    loader.set_epoch(epoch);
    return collect(loader);
  };
  const auto w0 = run(0, 5, 0);
  ASSERT_EQ(w0.size(), 13u);
  EXPECT_EQ(run(1, 5, 0), w0);
  EXPECT_EQ(run(4, 5, 0), w0);
  EXPECT_EQ(run(4, 5, 0), w0) << "same seed and epoch, same order";
  EXPECT_NE(run(4, 5, 1), w0) << "another epoch, another order";
  EXPECT_NE(run(0, 6, 0), w0) << "another seed, another order";

  // The batches are order(epoch) cut in batch_size pieces.
  data::DataLoader loader(ds, {.batch_size = 8, .shuffle = true, .seed = 5, .num_workers = 2});
  const std::vector<int64_t> order = loader.order(0);
  std::vector<int64_t> flat;
  for (const auto& b : w0) flat.insert(flat.end(), b.begin(), b.end());
  EXPECT_EQ(flat, order);

  // Consecutive loops run consecutive epochs.
  EXPECT_EQ(loader.epoch(), 0);
  EXPECT_EQ(collect(loader), w0);
  EXPECT_EQ(loader.epoch(), 1);
  EXPECT_EQ(collect(loader), run(0, 5, 1));
  auto it = loader.iterate(0);
  EXPECT_EQ(it.epoch(), 0);
  EXPECT_EQ(it.batch_index(), 0);
  EXPECT_EQ(ints((*it)[0]), w0[0]);
  EXPECT_EQ(loader.epoch(), 2) << "iterate() leaves epoch() alone";

  // Without shuffle the order is the identity.
  data::DataLoader plain(ds, {.batch_size = 50, .num_workers = 3});
  const auto p = collect(plain);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].front(), 0);
  EXPECT_EQ(p[2], (std::vector<int64_t>{100, 101, 102}));
}

TEST(DataLoader, EveryExampleExactlyOncePerEpoch) {
  auto ds = index_dataset(257);
  for (int workers : {0, 3}) {
    data::DataLoader loader(ds, {.batch_size = 16, .shuffle = true, .seed = 11, .num_workers = workers});
    for (int epoch = 0; epoch < 3; ++epoch) {
      std::vector<int64_t> seen;
      for (const auto& b : collect(loader)) seen.insert(seen.end(), b.begin(), b.end());
      std::sort(seen.begin(), seen.end());
      std::vector<int64_t> want(257);
      std::iota(want.begin(), want.end(), 0);
      EXPECT_EQ(seen, want) << "workers " << workers << ", epoch " << epoch;
    }
  }
}

TEST(DataLoader, DropLastBatchCountsAndLastBatchSize) {
  auto ds = index_dataset(10);
  data::DataLoader keep(ds, {.batch_size = 4});
  EXPECT_EQ(keep.size(), 3);
  auto k = collect(keep);
  ASSERT_EQ(k.size(), 3u);
  EXPECT_EQ(k[2].size(), 2u);
  data::DataLoader drop(ds, {.batch_size = 4, .drop_last = true, .num_workers = 2});
  EXPECT_EQ(drop.size(), 2);
  auto d = collect(drop);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[1].size(), 4u);
  auto even = index_dataset(8);
  EXPECT_EQ(data::DataLoader(even, {.batch_size = 4}).size(), 2);
  EXPECT_EQ(data::DataLoader(even, {.batch_size = 4, .drop_last = true}).size(), 2);
  EXPECT_EQ(data::DataLoader(even, {.batch_size = 9, .drop_last = true}).size(), 0);
  // An empty epoch: the loop body never runs.
  auto empty = data::tensor_dataset({zeros({0, 3})});
  data::DataLoader none(empty, {.batch_size = 4, .num_workers = 2});
  EXPECT_EQ(none.size(), 0);
  int bodies = 0;
  for (auto& b : none) bodies += static_cast<int>(b.size()) + 1;
  EXPECT_EQ(bodies, 0);
}

// ---- collation

TEST(DataLoader, DefaultCollateStacksEachField) {
  Tensor x = arange(0.0, 24.0, 1.0, DType::F32).reshape({4, 2, 3});
  data::DataLoader loader(data::tensor_dataset({x, arange(4, DType::I64)}), {.batch_size = 3});
  auto it = loader.begin();
  ASSERT_EQ(it->size(), 2u);
  EXPECT_EQ((*it)[0].shape(), Shape({3, 2, 3}));
  EXPECT_EQ((*it)[0].dtype(), DType::F32);
  EXPECT_EQ(values((*it)[0]), values(x.narrow(0, 0, 3)));
  EXPECT_EQ((*it)[1].dtype(), DType::I64);

  std::vector<data::Example> ragged{{zeros({2})}, {zeros({3})}};
  EXPECT_OXM_ERROR(data::default_collate(std::move(ragged)), ShapeMismatch, "field 0 of example 1");
  std::vector<data::Example> fields{{zeros({2}), zeros({1})}, {zeros({2})}};
  EXPECT_OXM_ERROR(data::default_collate(std::move(fields)), InvalidArgument, "example 1 of the batch has 1 fields");
  std::vector<data::Example> dtypes{{zeros({2})}, {zeros({2}, DType::F64)}};
  EXPECT_OXM_ERROR(data::default_collate(std::move(dtypes)), DTypeMismatch, "f64");
}

// TensorDataset (and a Subset of one) batch by one index_select per field; the loader takes that path without a
// collate function and must give exactly the batches of get() + default_collate, for any worker count.
TEST(DataLoader, BatchedFetchOfATensorDatasetEqualsPerExampleCollation) {
  Tensor x = randn({37, 2, 3}, 5);
  Tensor y = arange(37, DType::I64);
  auto ds = data::tensor_dataset({x, y});
  const std::vector<int64_t> idx{4, 0, 36, 4, 17};
  auto batch = ds->get_batch(idx);
  ASSERT_TRUE(batch.has_value());
  std::vector<data::Example> examples;
  for (int64_t i : idx) examples.push_back(ds->get(i));
  const data::Batch want = data::default_collate(std::move(examples));
  ASSERT_EQ(batch->size(), 2u);
  for (size_t f = 0; f < 2; ++f) {
    EXPECT_EQ((*batch)[f].shape(), want[f].shape());
    EXPECT_EQ((*batch)[f].dtype(), want[f].dtype());
    EXPECT_EQ(values((*batch)[f]), values(want[f]));
  }
  EXPECT_OXM_ERROR(ds->get_batch({1, 37}), IndexOutOfBounds, "index 37");
  // A Subset forwards to its parent; a transform (no batched fetch) says so with nullopt.
  auto sub = std::make_shared<data::Subset>(ds, std::vector<int64_t>{30, 2, 9});
  auto sub_batch = sub->get_batch({2, 0});
  ASSERT_TRUE(sub_batch.has_value());
  EXPECT_EQ(values((*sub_batch)[1]), (std::vector<double>{9, 30}));
  auto plain = data::transform(ds, [](data::Example ex) { return ex; });
  EXPECT_FALSE(plain->get_batch({0, 1}).has_value());

  for (int workers : {0, 2}) {
    const data::DataLoaderOptions opt{.batch_size = 8, .shuffle = true, .seed = 3, .num_workers = workers};
    data::DataLoader fast(ds, opt), slow(plain, opt);
    std::vector<data::Batch> got, ref;
    for (auto& b : fast) got.push_back(b);
    for (auto& b : slow) ref.push_back(b);
    ASSERT_EQ(got.size(), ref.size()) << workers;
    for (size_t b = 0; b < got.size(); ++b)
      for (size_t f = 0; f < 2; ++f) {
        EXPECT_EQ(got[b][f].shape(), ref[b][f].shape()) << "batch " << b << " workers " << workers;
        EXPECT_EQ(values(got[b][f]), values(ref[b][f])) << "batch " << b << " workers " << workers;
      }
  }
}

TEST(DataLoader, CustomCollate) {
  auto ds = index_dataset(10);
  // Sums field 0 and reports the batch size: a collate may return anything tensor-shaped.
  data::Collate sum_collate = [](std::vector<data::Example>&& examples) {
    int64_t s = 0;
    for (const auto& e : examples) s += e[0].item<int64_t>();
    return data::Batch{scalar(static_cast<double>(s), DType::I64),
                       scalar(static_cast<double>(examples.size()), DType::I64)};
  };
  for (int workers : {0, 2}) {
    data::DataLoader loader(ds, {.batch_size = 4, .num_workers = workers, .collate = sum_collate});
    std::vector<int64_t> sums, counts;
    for (auto& b : loader) {
      sums.push_back(b[0].item<int64_t>());
      counts.push_back(b[1].item<int64_t>());
    }
    EXPECT_EQ(sums, (std::vector<int64_t>{0 + 1 + 2 + 3, 4 + 5 + 6 + 7, 8 + 9}));
    EXPECT_EQ(counts, (std::vector<int64_t>{4, 4, 2}));
  }
  // A collate failure names the batch and its examples.
  data::DataLoader ragged(data::transform(ds,
                                          [](data::Example ex) {
                                            const int64_t i = ex[0].item<int64_t>();
                                            return data::Example{zeros({i == 6 ? 2 : 1})};
                                          }),
                          {.batch_size = 4, .num_workers = 2});
  auto it = ragged.begin();
  EXPECT_OXM_ERROR(++it, ShapeMismatch, "collating batch 1 of epoch 0 (examples [4, 5, 6, 7])");
  EXPECT_TRUE(it == ragged.end()) << "an error ends the epoch";
}

// ---- workers: bounded prefetch, errors, shutdown

TEST(DataLoader, PrefetchIsBoundedWhileTheConsumerPauses) {
  const int workers = 3, prefetch = 2;
  const int64_t bs = 4, window = workers * prefetch;
  auto ds = std::make_shared<CountingDataset>(400, bs);
  data::DataLoader loader(ds, {.batch_size = bs, .num_workers = workers, .prefetch_factor = prefetch});
  auto it = loader.begin();
  ds->consumed_batches = 1;
  // The workers fill the window (`window` batches after the first, or one less: a sleeping worker is woken once
  // half the window is free) and then stop, however long we wait.
  const int64_t full = (window + 1) * bs;
  for (int spins = 0; ds->fetched.load() < full - bs && spins < 120000; ++spins)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const int64_t filled = ds->fetched.load();
  EXPECT_GE(filled, full - bs) << "the workers prefetch num_workers * prefetch_factor batches";
  EXPECT_LE(filled, full) << "no fetch beyond the window while the consumer pauses";
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(ds->fetched.load(), filled);
  // Consume the rest, pausing now and then; no fetch ever runs more than the window ahead of the consumer.
  int64_t batches = 1;
  for (++it; it != loader.end(); ++it) {
    ds->consumed_batches = ++batches;
    if (batches % 10 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(batches, 100);
  EXPECT_EQ(ds->fetched.load(), 400);
  EXPECT_LE(ds->peak_ahead.load(), (window + 1) * bs);
}

TEST(DataLoader, WorkerExceptionIsRethrownNamingTheExample) {
  for (int workers : {0, 1, 3}) {
    for (bool oxmera_error : {true, false}) {
      auto ds = std::make_shared<FailingDataset>(100, 37, oxmera_error);
      data::DataLoader loader(ds, {.batch_size = 4, .num_workers = workers});
      int64_t before = 0;
      try {
        for (auto& b : loader) {
          EXPECT_EQ(b[0].size(0), 4);
          ++before;
        }
        ADD_FAILURE() << "no error";
      } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_EQ(e.kind(), oxmera_error ? ErrorKind::Io : ErrorKind::InvalidArgument) << msg;
        EXPECT_NE(msg.find("fetching example 37 (batch 9 of epoch 0)"), std::string::npos) << msg;
        EXPECT_NE(msg.find(oxmera_error ? "corrupt record at offset 4096" : "decoder exploded"), std::string::npos)
            << msg;
      }
      EXPECT_EQ(before, 9) << "the batches before the failing one arrive (workers " << workers << ")";
    }
  }
}

TEST(DataLoader, EarlyBreakStopsAndJoinsEveryWorker) {
  auto ds = std::make_shared<CountingDataset>(4000, 8);
  {
    data::DataLoader loader(ds, {.batch_size = 8, .shuffle = true, .seed = 3, .num_workers = 4});
    for (auto& b : loader) {
      EXPECT_EQ(b[0].size(0), 8);
      break;
    }
    // The iterator is gone, so its workers are joined: nothing fetches any more.
    const int64_t after = ds->fetched.load();
    EXPECT_LE(after, (4 * 2 + 1) * 8);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(ds->fetched.load(), after);
    // The loader is reusable after a break: the next loop runs the next epoch from its start.
    auto it = loader.begin();
    EXPECT_EQ(it.epoch(), 1);
    EXPECT_EQ(ints((*it)[0]), [&] {
      auto o = loader.order(1);
      return std::vector<int64_t>(o.begin(), o.begin() + 8);
    }());
  }  // destroying a live iterator and then the loader joins too
  EXPECT_EQ(ds.use_count(), 1) << "no worker or epoch keeps the dataset alive";
}

// ---- persistent workers

TEST(DataLoader, PersistentWorkersGiveTheBatchesOfZeroWorkersEveryEpoch) {
  // Field 2: a draw from the example's Generator, which depends on (seed, epoch, index) only.
  auto ds = data::random_transform(index_dataset(61), [](data::Example ex, Generator& gen) {
    ex.push_back(scalar(static_cast<double>(gen.next_u64() % 1000003), DType::I64));
    return ex;
  });
  auto epochs = [&](int workers, bool persistent) {
    data::DataLoader loader(ds, {.batch_size = 5,
                                 .shuffle = true,
                                 .seed = 21,
                                 .num_workers = workers,
                                 .prefetch_factor = 1,
                                 .persistent_workers = persistent});
    std::vector<std::vector<std::vector<int64_t>>> out;  // [epoch][batch] = field 0 then field 2
    for (int e = 0; e < 4; ++e) {
      out.emplace_back();
      for (auto& b : loader) {
        auto v = ints(b[0]);
        const auto d = ints(b[2]);
        v.insert(v.end(), d.begin(), d.end());
        out.back().push_back(v);
      }
    }
    return out;
  };
  const auto want = epochs(0, false);
  ASSERT_EQ(want.size(), 4u);
  ASSERT_EQ(want[0].size(), 13u);
  EXPECT_NE(want[0], want[1]) << "epochs differ";
  EXPECT_EQ(epochs(1, true), want);
  EXPECT_EQ(epochs(2, true), want);
  EXPECT_EQ(epochs(3, true), want);
  EXPECT_EQ(epochs(2, false), want);
  EXPECT_OXM_ERROR(data::DataLoader(ds, {.persistent_workers = true}), InvalidArgument,
                   "persistent_workers needs num_workers > 0");
}

TEST(DataLoader, PersistentWorkersStartOnceAndAreJoinedWithTheLoader) {
  auto ds = std::make_shared<ThreadCountingDataset>(40);
  // Without persistent workers each epoch starts (and joins) its own threads. (Counted are the threads that ran a
  // fetch: a fast worker may build every batch while the other sleeps.)
  g_fetch_threads = 0;
  g_fetch_threads_exited = 0;
  {
    data::DataLoader loader(ds, {.batch_size = 2, .num_workers = 2});
    for (int e = 0; e < 3; ++e)
      for (auto& b : loader) EXPECT_EQ(b[0].size(0), 2);
    EXPECT_GE(g_fetch_threads.load(), 3) << "each epoch's fetches ran on threads of its own";
    EXPECT_LE(g_fetch_threads.load(), 6);
    EXPECT_EQ(g_fetch_threads_exited.load(), g_fetch_threads.load());
  }
  // With them: two threads for all three epochs, alive between epochs, joined when the loader is destroyed idle.
  g_fetch_threads = 0;
  g_fetch_threads_exited = 0;
  {
    data::DataLoader loader(ds, {.batch_size = 2, .num_workers = 2, .persistent_workers = true});
    for (int e = 0; e < 3; ++e) {
      int64_t batches = 0;
      for (auto& b : loader) batches += b[0].size(0) == 2 ? 1 : 0;
      EXPECT_EQ(batches, 20);
    }
    EXPECT_GE(g_fetch_threads.load(), 1);
    EXPECT_LE(g_fetch_threads.load(), 2) << "the same two threads served every epoch";
    EXPECT_EQ(g_fetch_threads_exited.load(), 0) << "they wait between epochs";
  }
  EXPECT_EQ(g_fetch_threads_exited.load(), g_fetch_threads.load()) << "destroying the idle loader joined them";

  // Destroyed mid-epoch: the iterator first, then the loader.
  g_fetch_threads = 0;
  g_fetch_threads_exited = 0;
  {
    data::DataLoader loader(ds, {.batch_size = 1, .num_workers = 3, .persistent_workers = true});
    auto it = loader.begin();
    ++it;
  }
  EXPECT_EQ(g_fetch_threads_exited.load(), g_fetch_threads.load());
  // The loader first: the live iterator keeps the workers and finishes its epoch; its end joins them.
  g_fetch_threads = 0;
  g_fetch_threads_exited = 0;
  {
    std::optional<data::DataLoader> loader;
    loader.emplace(ds, data::DataLoaderOptions{.batch_size = 4, .num_workers = 2, .persistent_workers = true});
    auto it = loader->begin();
    loader.reset();
    std::vector<int64_t> seen;
    for (; it != std::default_sentinel; ++it) {
      const auto v = ints((*it)[0]);
      seen.insert(seen.end(), v.begin(), v.end());
    }
    std::vector<int64_t> want(40);
    std::iota(want.begin(), want.end(), 0);
    EXPECT_EQ(seen, want);
    EXPECT_EQ(g_fetch_threads_exited.load(), g_fetch_threads.load()) << "the epoch's end joined the workers";
  }
  EXPECT_EQ(g_fetch_threads_exited.load(), g_fetch_threads.load());
  EXPECT_EQ(ds.use_count(), 1) << "no worker or epoch keeps the dataset alive";
}

TEST(DataLoader, PersistentWorkersAfterAnEarlyBreak) {
  auto ds = std::make_shared<ThreadCountingDataset>(4000);
  data::DataLoader ref(ds, {.batch_size = 8, .shuffle = true, .seed = 3});
  ref.set_epoch(1);
  const auto want = collect(ref);
  data::DataLoader loader(ds,
                          {.batch_size = 8, .shuffle = true, .seed = 3, .num_workers = 4, .persistent_workers = true});
  const int64_t start = ds->fetched.load();
  for (auto& b : loader) {
    EXPECT_EQ(b[0].size(0), 8);
    break;
  }
  // The epoch is abandoned: the workers go idle instead of fetching the rest of it.
  const int64_t after = ds->fetched.load();
  EXPECT_LE(after - start, (4 * 2 + 1) * 8);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(ds->fetched.load(), after);
  // The next loop runs the next epoch from its start, on the same workers.
  EXPECT_EQ(collect(loader), want);
  // Two live epochs of one loader: the second gets threads of its own; both give their batches.
  auto a = loader.iterate(1);
  auto b = loader.iterate(1);
  std::vector<std::vector<int64_t>> got_a, got_b;
  for (; a != loader.end(); ++a) {
    got_a.push_back(ints((*a)[0]));
    if (b != loader.end()) {
      got_b.push_back(ints((*b)[0]));
      ++b;
    }
  }
  EXPECT_EQ(got_a, want);
  EXPECT_EQ(got_b, want);
  // A copy has workers of its own and the same batches.
  data::DataLoader copy = loader;
  copy.set_epoch(1);
  EXPECT_EQ(collect(copy), want);
  EXPECT_EQ(collect(loader), [&] {
    ref.set_epoch(2);
    return collect(ref);
  }());
}

TEST(DataLoader, PersistentWorkersAfterAnError) {
  // Example 37 fails in epoch 0 only.
  auto ds = data::transform(index_dataset(100), [](data::Example ex) {
    const auto info = data::worker_info();
    if (info && info->epoch == 0 && ex[0].item<int64_t>() == 37) throw std::runtime_error("decoder exploded");
    return ex;
  });
  data::DataLoader ref(index_dataset(100), {.batch_size = 4});
  ref.set_epoch(1);
  const auto want = collect(ref);
  for (int workers : {1, 3}) {
    data::DataLoader loader(ds, {.batch_size = 4, .num_workers = workers, .persistent_workers = true});
    int64_t before = 0;
    try {
      for (auto& b : loader) before += b[0].size(0) == 4 ? 1 : 0;
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find("fetching example 37 (batch 9 of epoch 0)"), std::string::npos) << e.what();
    }
    EXPECT_EQ(before, 9) << workers;
    EXPECT_EQ(collect(loader), want) << "the epoch after the error, on the same workers (" << workers << ")";
  }
}

TEST(DataLoader, ProgressHookTransformsInWorkersAndDevice) {
  auto ds = data::transform(index_dataset(9), [](data::Example ex) {
    ex[0] = ex[0] + 100.0;
    return ex;
  });
  std::vector<std::pair<int64_t, int64_t>> calls;
  data::DataLoader loader(ds, {.batch_size = 2,
                               .num_workers = 2,
                               .on_batch = [&](int64_t i, int64_t n) { calls.emplace_back(i, n); },
                               .device = Device::cpu()});
  std::vector<int64_t> firsts;
  for (auto& b : loader) {
    EXPECT_EQ(b[0].device(), Device::cpu());
    firsts.push_back(ints(b[0])[0]);
  }
  EXPECT_EQ(firsts, (std::vector<int64_t>{100, 102, 104, 106, 108}));
  ASSERT_EQ(calls.size(), 5u);
  for (size_t k = 0; k < calls.size(); ++k) {
    EXPECT_EQ(calls[k].first, static_cast<int64_t>(k));
    EXPECT_EQ(calls[k].second, 5);
  }
}

TEST(DataLoader, RejectsBadOptions) {
  auto ds = index_dataset(4);
  EXPECT_OXM_ERROR(data::DataLoader(nullptr), InvalidArgument, "dataset is null");
  EXPECT_OXM_ERROR(data::DataLoader(ds, {.batch_size = 0}), InvalidArgument, "batch_size must be >= 1, got 0");
  EXPECT_OXM_ERROR(data::DataLoader(ds, {.num_workers = -1}), InvalidArgument, "num_workers must be >= 0");
  EXPECT_OXM_ERROR(data::DataLoader(ds, {.num_workers = 1, .prefetch_factor = 0}), InvalidArgument,
                   "prefetch_factor must be >= 1");
  data::DataLoader loader(ds, {.batch_size = 4});
  auto it = loader.begin();
  ++it;
  EXPECT_TRUE(it == loader.end());
  EXPECT_OXM_ERROR(*it, InvalidArgument, "at the end of the epoch");
  EXPECT_OXM_ERROR(++it, InvalidArgument, "past the end");
}

TEST(DataLoader, RandomTransformsAreReproducibleForAnyWorkerCount) {
  // Field 2: a draw from the example's Generator.
  auto ds = data::random_transform(index_dataset(50), [](data::Example ex, Generator& gen) {
    ex.push_back(scalar(static_cast<double>(gen.next_u64() % 1000003), DType::I64));
    return ex;
  });
  auto draws = [&](int workers, int64_t epoch) {
    data::DataLoader loader(ds, {.batch_size = 7, .shuffle = true, .seed = 9, .num_workers = workers});
    std::map<int64_t, int64_t> by_index;
    for (auto it = loader.iterate(epoch); it != loader.end(); ++it) {
      const auto idx = ints((*it)[0]), d = ints((*it)[2]);
      for (size_t k = 0; k < idx.size(); ++k) by_index[idx[k]] = d[k];
    }
    return by_index;
  };
  const auto e0 = draws(0, 0);
  ASSERT_EQ(e0.size(), 50u);
  EXPECT_EQ(draws(1, 0), e0);
  EXPECT_EQ(draws(3, 0), e0);
  EXPECT_NE(draws(3, 1), e0) << "another epoch, other draws";
  std::set<int64_t> distinct;
  for (const auto& [i, d] : e0) distinct.insert(d);
  EXPECT_GT(distinct.size(), 40u) << "examples get different draws";
  // Outside a loader: seed 0, epoch 0, the same on every call.
  EXPECT_EQ(ds->get(4)[2].item<int64_t>(), ds->get(4)[2].item<int64_t>());
  EXPECT_FALSE(data::worker_info().has_value());
}

TEST(DataLoader, WorkerInfoInsideFetches) {
  std::mutex mu;
  std::set<int> ids;
  std::set<int64_t> epochs;
  int seen_workers = -1;
  uint64_t seen_seed = 0;
  auto ds = data::transform(index_dataset(40), [&](data::Example ex) {
    const auto info = data::worker_info();
    EXPECT_TRUE(info.has_value());
    if (info) {
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(info->worker_id);
      epochs.insert(info->epoch);
      seen_workers = info->num_workers;
      seen_seed = info->seed;
    }
    return ex;
  });
  data::DataLoader loader(ds, {.batch_size = 2, .seed = 77, .num_workers = 3});
  loader.set_epoch(5);
  for (auto& b : loader) EXPECT_EQ(b.size(), 2u);
  EXPECT_EQ(seen_workers, 3);
  EXPECT_EQ(seen_seed, 77u);
  EXPECT_EQ(epochs, (std::set<int64_t>{5}));
  ASSERT_FALSE(ids.empty());
  EXPECT_GE(*ids.begin(), 0);
  EXPECT_LT(*ids.rbegin(), 3);
}

TEST(DataLoader, WorkersRunOneIntraOpThread) {
  const int before = get_num_threads();
  set_num_threads(3);
  std::atomic<int> seen_min{1000}, seen_max{0};
  auto ds = data::transform(index_dataset(12), [&](data::Example ex) {
    const int n = get_num_threads();
    seen_min = std::min(seen_min.load(), n);
    seen_max = std::max(seen_max.load(), n);
    ex[0] = ex[0] + 0.0;  // a kernel in the worker
    return ex;
  });
  for (bool persistent : {false, true}) {
    seen_min = 1000;
    seen_max = 0;
    data::DataLoader loader(ds, {.batch_size = 2, .num_workers = 2, .persistent_workers = persistent});
    for (int e = 0; e < 2; ++e)
      for (auto& b : loader) EXPECT_EQ(b[0].size(0), 2);
    EXPECT_EQ(seen_min.load(), 1) << "as torch's workers (persistent " << persistent << ")";
    EXPECT_EQ(seen_max.load(), 1);
    EXPECT_EQ(get_num_threads(), 3) << "the caller's count is untouched";
  }
  seen_min = 1000;
  seen_max = 0;
  data::DataLoader inline_loader(ds, {.batch_size = 2});
  for (auto& b : inline_loader) EXPECT_EQ(b[0].size(0), 2);
  EXPECT_EQ(seen_min.load(), 3) << "with 0 workers the fetches run in the caller's thread, with its count";
  set_num_threads(before);
}

TEST(DataLoader, FetchesRecordNoGraphAndCopiesShareTheConfig) {
  Tensor w = arange(0.0, 6.0, 1.0, DType::F32).reshape({3, 2}).requires_grad_();
  data::DataLoader loader(data::tensor_dataset({w}), {.batch_size = 3, .num_workers = 1});
  data::DataLoader copy = loader;
  EXPECT_EQ(copy.size(), 1);
  for (auto& b : copy) {
    EXPECT_FALSE(b[0].requires_grad()) << "loading runs under NoGradGuard";
    EXPECT_EQ(values(b[0]), values(w));
  }
  EXPECT_EQ(copy.epoch(), 1);
  EXPECT_EQ(loader.epoch(), 0) << "copies advance their own epochs";
  EXPECT_TRUE(grad_enabled()) << "the caller's grad mode is untouched";
}

// ---- samplers

TEST(DataSampler, SequentialRandomAndTheLoadersShuffleAgree) {
  data::SequentialSampler seq(5);
  EXPECT_EQ(seq.order(1, 2), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  data::RandomSampler rnd(40);
  auto ds = index_dataset(40);
  data::DataLoader shuffled(ds, {.batch_size = 8, .shuffle = true, .seed = 3});
  EXPECT_EQ(rnd.order(3, 1), shuffled.order(1)) << "shuffle is RandomSampler";
  data::DataLoader sampled(
      ds, {.batch_size = 8, .seed = 3, .sampler = std::make_shared<data::RandomSampler>(40), .num_workers = 2});
  std::vector<int64_t> flat;
  for (const auto& b : collect(sampled)) flat.insert(flat.end(), b.begin(), b.end());
  EXPECT_EQ(flat, rnd.order(3, 0));
  EXPECT_OXM_ERROR(data::DataLoader(ds, {.shuffle = true, .sampler = std::make_shared<data::RandomSampler>(40)}),
                   InvalidArgument, "shuffle and sampler are exclusive");
}

TEST(DataSampler, WeightedRandomSampler) {
  // Weights 0, 1, 3: index 0 never, index 2 about three times as often as index 1.
  data::WeightedRandomSampler with(std::vector<double>{0.0, 1.0, 3.0}, 4000);
  EXPECT_EQ(with.size(), 4000);
  const auto o = with.order(5, 0);
  ASSERT_EQ(o.size(), 4000u);
  int64_t counts[3] = {0, 0, 0};
  for (int64_t i : o) {
    ASSERT_GE(i, 1);
    ASSERT_LE(i, 2);
    ++counts[i];
  }
  EXPECT_EQ(counts[0], 0);
  EXPECT_NEAR(static_cast<double>(counts[2]) / 4000.0, 0.75, 0.04);  // 4000 draws: sd 0.007
  EXPECT_EQ(with.order(5, 0), o) << "a pure function of (seed, epoch)";
  EXPECT_NE(with.order(5, 1), o);

  data::WeightedRandomSampler without(std::vector<double>{1.0, 0.0, 2.0, 5.0}, 3, false);
  const auto w = without.order(1, 0);
  EXPECT_EQ(std::set<int64_t>(w.begin(), w.end()), (std::set<int64_t>{0, 2, 3})) << "distinct, never weight 0";
  EXPECT_OXM_ERROR(data::WeightedRandomSampler(std::vector<double>{1.0, 0.0}, 2, false), InvalidArgument,
                   "only 1 weights are nonzero");
  EXPECT_OXM_ERROR(data::WeightedRandomSampler(std::vector<double>{1.0, -1.0}, 2), InvalidArgument, "weights[1]");
  EXPECT_OXM_ERROR(data::WeightedRandomSampler(std::vector<double>{0.0, 0.0}, 2), InvalidArgument, "sum to 0");

  // Through a loader: size() follows the sampler; a sampler index past the dataset names the example.
  data::DataLoader loader(index_dataset(3), {.batch_size = 10,
                                             .sampler = std::make_shared<data::WeightedRandomSampler>(
                                                 std::vector<double>{0.0, 1.0, 3.0}, 25)});
  EXPECT_EQ(loader.size(), 3);
  data::DataLoader past(index_dataset(2), {.batch_size = 10,
                                           .sampler = std::make_shared<data::WeightedRandomSampler>(
                                               std::vector<double>{0.0, 0.0, 1.0}, 5)});
  EXPECT_OXM_ERROR(past.begin(), IndexOutOfBounds, "fetching example 2");
}

TEST(DataSampler, DistributedSamplerSharesAnEpochAmongRanks) {
  // 10 examples over 3 ranks: 4 each, the order padded with its first 2 entries; with drop_last 3 each.
  std::vector<int64_t> all;
  for (int64_t r = 0; r < 3; ++r) {
    data::DistributedSampler s(10, 3, r, /*shuffle=*/true);
    EXPECT_EQ(s.size(), 4);
    const auto o = s.order(8, 2);
    all.insert(all.end(), o.begin(), o.end());
  }
  std::set<int64_t> distinct(all.begin(), all.end());
  EXPECT_EQ(distinct.size(), 10u) << "every example is on some rank";
  EXPECT_EQ(all.size(), 12u) << "two padded repeats";
  const auto perm = data::RandomSampler(10).order(8, 2);
  EXPECT_EQ(data::DistributedSampler(10, 3, 1).order(8, 2), (std::vector<int64_t>{perm[1], perm[4], perm[7], perm[0]}));
  data::DistributedSampler plain(10, 3, 2, /*shuffle=*/false, /*drop_last=*/true);
  EXPECT_EQ(plain.size(), 3);
  EXPECT_EQ(plain.order(0, 0), (std::vector<int64_t>{2, 5, 8}));
  EXPECT_OXM_ERROR(data::DistributedSampler(10, 3, 3), InvalidArgument, "rank 3");
}

// ---- pinned memory without a backend that can pin (a CPU build, or no GPU): torch 1.13 raises too
// (NotImplementedError, a RuntimeError, from torch.ones(2).pin_memory() without CUDA); the loader's
// pin_memory falls back to ordinary memory, as torch's does (with a warning there).

TEST(PinMemory, WithoutABackendThatCanPinIsATypedErrorAndTheLoaderFallsBack) {
  init();
  if (pinned_memory_available()) GTEST_SKIP() << "a backend that can pin host memory is registered (a GPU)";
  const Tensor x = arange(6, DType::F32).reshape({2, 3});
  EXPECT_FALSE(x.is_pinned());
  EXPECT_OXM_ERROR(x.pin_memory(), BackendUnavailable, "pin_memory");
  EXPECT_OXM_ERROR(x.pin_memory(), BackendUnavailable, "page-locked");
  EXPECT_OXM_ERROR(Tensor().pin_memory(), InvalidArgument, "pin_memory");
  // non_blocking without pinned memory (or to the CPU) is the ordinary copy.
  EXPECT_EQ(x.to(Device::cpu(), true).to_vector<float>(), x.to_vector<float>());

  auto ds = index_dataset(10);
  data::DataLoader pinned(ds, {.batch_size = 4, .shuffle = true, .seed = 3, .num_workers = 2, .pin_memory = true});
  data::DataLoader plain(ds, {.batch_size = 4, .shuffle = true, .seed = 3, .num_workers = 2});
  EXPECT_FALSE(pinned.pins_memory());
  EXPECT_FALSE(plain.pins_memory());
  EXPECT_EQ(collect(pinned), collect(plain));
  for (auto it = pinned.iterate(0); it != pinned.end(); ++it) EXPECT_FALSE((*it)[0].is_pinned());
}
