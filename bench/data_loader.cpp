// One training epoch of a small CNN, fed
//   prebuilt: by hand, index_select of the epoch's permutation slice from the image and label tensors
//   loader0 / loader2: by data::DataLoader over a TensorDataset with 0 / 2 worker threads
//   persist2: the same with 2 persistent_workers: one loader for all rounds, its threads started in the
//             warm-up round and kept (each timed epoch is a begin() on it)
//   flip0 / flip2: the same through a random_transform that flips each image left-right with probability 1/2
//                  (cheap per-example work)
//   decode0 / decode2: a transform standing in for decoding, 200 elementwise ops on each image (per-example work
//                  of the order of the training step's; workers only help where a core is free)
//   wait0 / wait2: a transform that sleeps 0.2 ms per example (a stand-in for waiting on a file read), which
//                  the workers overlap with the training step without needing a free core
// The data and the model:
//   --data DIR: the digits CNN of examples/digits_cnn.cpp (Conv2d(1,16,3,p1)-ReLU-MaxPool2-Conv2d(16,32,3,p1)-
//               ReLU-MaxPool2-Flatten-Linear(128,10), Adam lr 0.003, batches of 32) on scikit-learn's digits as
//               tests/digits/export_digits.py writes them to DIR (IDX), pixels / 16, over the first 1437 images
//               (the example's training-set size; bench/data_loader_compare.sh exports them and passes this)
//   without:    bench/train_step.cpp's CNN (Conv2d(1,8,3,p1)-ReLU-MaxPool2-Conv2d(8,16,3,p1)-ReLU-MaxPool2-
//               Flatten-Linear(784,10), Adam lr 0.01) over 1024 random 28x28 images in batches of 64
// The model runs with `threads` intra-op threads (default 1). Rounds alternate the modes; each prints its
// median epoch time over the rounds.
// Usage: oxmera_data_loader_bench [--data DIR] [threads] [rounds]; env MODES (e.g. "prebuilt,loader2"): only
// those modes (for perf stat / perf record of one of them); LOADER_ONLY=1: the epochs only take the batches (no
// model step), which times what the loader itself costs the consumer, printed in ms with 3 decimals; PREFETCH=n:
// the loaders' prefetch_factor (default 2)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "oxmera/formats.hpp"
#include "oxmera/oxmera.hpp"

namespace ox = oxmera;
namespace nn = oxmera::nn;
namespace data = oxmera::data;
using Clock = std::chrono::steady_clock;

namespace {

std::shared_ptr<nn::Sequential> make_cnn() {
  ox::manual_seed(0);
  nn::Conv2dOptions p1;
  p1.padding = {1, 1};
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Conv2d>(1, 8, nn::Pair{3, 3}, p1), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(nn::Pair{2, 2}), std::make_shared<nn::Conv2d>(8, 16, nn::Pair{3, 3}, p1),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(nn::Pair{2, 2}), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(16 * 7 * 7, 10)});
}

// examples/digits_cnn.cpp's model (make_model there, seed 0).
std::shared_ptr<nn::Sequential> make_digits_cnn() {
  ox::Generator gen(0);
  nn::Conv2dOptions pad1;
  pad1.padding = {1, 1};
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Conv2d>(1, 16, nn::Pair{3, 3}, pad1, gen), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(nn::Pair{2, 2}), std::make_shared<nn::Conv2d>(16, 32, nn::Pair{3, 3}, pad1, gen),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(nn::Pair{2, 2}), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(32 * 2 * 2, 10, true, gen)});
}

bool g_digits = false;
bool g_loader_only = false;  // env LOADER_ONLY=1: the epochs take the batches and train nothing

// Trains one epoch on the batches `next` hands out (false: the epoch is over); returns seconds.
double epoch_seconds(const std::function<bool(ox::Tensor&, ox::Tensor&)>& next) {
  auto net = g_digits ? make_digits_cnn() : make_cnn();
  ox::optim::AdamOptions ao;
  ao.lr = g_digits ? 3e-3 : 0.01;
  ox::optim::Adam opt(net->parameters(), ao);
  const auto t0 = Clock::now();
  ox::Tensor x, y;
  while (next(x, y)) {
    if (g_loader_only) continue;
    ox::Tensor loss = nn::cross_entropy((*net)(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string data_dir;
  if (argc > 2 && std::string(argv[1]) == "--data") {
    data_dir = argv[2];
    argv += 2;
    argc -= 2;
  }
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  ox::set_num_threads(threads);
  g_digits = !data_dir.empty();
  g_loader_only = std::getenv("LOADER_ONLY") != nullptr && std::string(std::getenv("LOADER_ONLY")) == "1";
  int64_t n = 1024, bs = 64;
  ox::Tensor images, labels;
  if (g_digits) {
    try {
      const ox::Tensor all_images = ox::load_idx(data_dir + "/digits-images-idx3-ubyte");
      const ox::Tensor all_labels = ox::load_idx(data_dir + "/digits-labels-idx1-ubyte");
      n = all_images.size(0) * 4 / 5;  // 1437 of 1797: the example's training-set size
      bs = 32;
      images = (all_images.narrow(0, 0, n).to(ox::DType::F32).reshape({n, 1, 8, 8}) / 16.0).contiguous();
      labels = all_labels.narrow(0, 0, n).to(ox::DType::I64).contiguous();
    } catch (const ox::Error& e) {
      std::fprintf(stderr, "oxmera_data_loader_bench: %s\n", e.what());
      return 1;
    }
  } else {
    images = ox::randn({n, 1, 28, 28}, 7);
    std::vector<int64_t> label_values(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) label_values[static_cast<size_t>(i)] = (i * 7) % 10;
    labels = ox::from_vector(label_values, ox::Shape{n});
  }
  auto ds = data::tensor_dataset({images, labels});
  auto flipped = data::random_transform(ds, [](data::Example ex, ox::Generator& gen) {
    if (gen.next_double() < 0.5) ex[0] = ex[0].flip({2});
    return ex;
  });

  auto decoded = data::transform(ds, [](data::Example ex) {
    for (int k = 0; k < 200; ++k) ex[0] = (ex[0] * 0.999).tanh();
    return ex;
  });

  auto waiting = data::transform(ds, [](data::Example ex) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    return ex;
  });

  std::map<std::string, std::vector<double>> times;
  std::vector<std::string> modes{"prebuilt", "loader0", "loader2", "persist2", "flip0",
                                 "flip2",    "decode0", "decode2", "wait0",    "wait2"};
  if (const char* only = std::getenv("MODES")) {
    const std::string list = std::string(",") + only + ",";
    std::erase_if(modes, [&](const std::string& m) { return list.find("," + m + ",") == std::string::npos; });
  }
  const int prefetch = std::getenv("PREFETCH") ? std::atoi(std::getenv("PREFETCH")) : 2;
  data::DataLoader persistent(ds, {.batch_size = bs,
                                   .shuffle = true,
                                   .seed = 1,
                                   .num_workers = 2,
                                   .prefetch_factor = prefetch,
                                   .persistent_workers = true});
  for (int r = 0; r < rounds + 1; ++r) {  // round 0 warms up
    for (const std::string& mode : modes) {
      double s = 0;
      if (mode == "prebuilt") {
        ox::Generator gen(static_cast<uint64_t>(r));
        const std::vector<int64_t> perm = data::random_permutation(n, gen);
        int64_t at = 0;
        s = epoch_seconds([&](ox::Tensor& x, ox::Tensor& y) {
          if (at >= n) return false;
          const int64_t len = std::min(bs, n - at);
          std::vector<int64_t> idx(perm.begin() + at, perm.begin() + at + len);
          const ox::Tensor index = ox::from_vector(idx, ox::Shape{len});
          x = images.index_select(0, index);
          y = labels.index_select(0, index);
          at += len;
          return true;
        });
      } else {
        const int workers = mode.back() == '2' ? 2 : 0;
        const data::DatasetPtr source = mode[0] == 'f'   ? data::DatasetPtr(flipped)
                                        : mode[0] == 'd' ? data::DatasetPtr(decoded)
                                        : mode[0] == 'w' ? data::DatasetPtr(waiting)
                                                         : data::DatasetPtr(ds);
        std::optional<data::DataLoader> own;
        if (mode != "persist2")
          own.emplace(
              source,
              data::DataLoaderOptions{
                  .batch_size = bs, .shuffle = true, .seed = 1, .num_workers = workers, .prefetch_factor = prefetch});
        data::DataLoader& loader = own ? *own : persistent;
        loader.set_epoch(r);
        std::optional<data::DataLoader::Iterator> it;  // started inside the timed epoch
        s = epoch_seconds([&](ox::Tensor& x, ox::Tensor& y) {
          if (!it)
            it.emplace(loader.begin());
          else
            ++*it;
          if (*it == loader.end()) return false;
          x = (**it)[0];
          y = (**it)[1];
          return true;
        });
      }
      if (r > 0) times[mode].push_back(s);
    }
  }
  for (const std::string& mode : modes) {
    std::vector<double>& t = times[mode];
    std::sort(t.begin(), t.end());
    const int digits = g_loader_only ? 3 : 1;
    std::printf("%s data=%s threads=%d rounds=%d median_ms=%.*f min_ms=%.*f max_ms=%.*f\n", mode.c_str(),
                g_digits ? "digits" : "random", threads, rounds, digits, 1e3 * t[t.size() / 2], digits, 1e3 * t.front(),
                digits, 1e3 * t.back());
  }
  return 0;
}
