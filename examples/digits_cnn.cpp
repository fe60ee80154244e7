// Trains a small CNN on scikit-learn's 8x8 digits (1797 images, 10 classes) read from IDX files, through the
// DataLoader with worker threads, then saves the model with nn::save, loads it into a fresh model and checks
// that the reloaded model scores the same. tests/digits/export_digits.py writes the IDX files; ctest's
// `digits_cnn` runs this program and requires >= 95 % test accuracy, and `digits_cnn_torch_parity` compares
// its first steps with the PyTorch twin bench/digits_cnn_torch.py (same initial parameters, via --dump-init).
//
// Model: Conv2d(1,16,3,p1)-ReLU-MaxPool2-Conv2d(16,32,3,p1)-ReLU-MaxPool2-Flatten-Linear(128,10); inputs are
// the pixel values (0..16) divided by 16; cross entropy, Adam. Split: a seeded random_split, 80 % (1437 images)
// train, 20 % (360) test; the loader shuffles each epoch (seeded). --dump-init writes every epoch's visit order
// next to the initial parameters, so the PyTorch twin sees the same batches.
//
// Usage: digits_cnn (--data DIR | --images FILE --labels FILE) [--epochs 15] [--batch 32] [--lr 0.003]
//                   [--workers 2] [--seed 0] [--threads 2] [--model FILE] [--dump-init FILE] [--steps N]
//                   [--min-accuracy A]
//   --data DIR        DIR/digits-images-idx3-ubyte and DIR/digits-labels-idx1-ubyte
//   --dump-init FILE  writes the initial parameters (safetensors, torch's nn.Sequential names) before training
//   --steps N         stops after N training steps, printing each step's loss ("step K loss L"); no test
//   --min-accuracy A  exits 1 when the test accuracy (or the reloaded model's) is below A (a fraction)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <oxmera/data.hpp>
#include <oxmera/formats.hpp>
#include <oxmera/io.hpp>
#include <oxmera/oxmera.hpp>

namespace ox = oxmera;
namespace nn = oxmera::nn;

namespace {

struct Options {
  std::string images, labels, model = "digits_cnn.safetensors", dump_init;
  int epochs = 15, workers = 2, threads = 1;
  int64_t batch = 32, steps = 0;
  double lr = 3e-3, min_accuracy = -1.0;
  uint64_t seed = 0;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "digits_cnn: %s\nusage: digits_cnn (--data DIR | --images FILE --labels FILE) [--epochs N] "
               "[--batch N] [--lr X] [--workers N] [--seed N] [--threads N] [--model FILE] [--dump-init FILE] "
               "[--steps N] [--min-accuracy A]\n",
               why);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage(("missing the value of " + a).c_str());
    const char* v = argv[++i];
    if (a == "--data") {
      o.images = std::string(v) + "/digits-images-idx3-ubyte";
      o.labels = std::string(v) + "/digits-labels-idx1-ubyte";
    } else if (a == "--images") {
      o.images = v;
    } else if (a == "--labels") {
      o.labels = v;
    } else if (a == "--epochs") {
      o.epochs = std::atoi(v);
    } else if (a == "--batch") {
      o.batch = std::atoll(v);
    } else if (a == "--lr") {
      o.lr = std::atof(v);
    } else if (a == "--workers") {
      o.workers = std::atoi(v);
    } else if (a == "--seed") {
      o.seed = std::strtoull(v, nullptr, 10);
    } else if (a == "--threads") {
      o.threads = std::atoi(v);
    } else if (a == "--model") {
      o.model = v;
    } else if (a == "--dump-init") {
      o.dump_init = v;
    } else if (a == "--steps") {
      o.steps = std::atoll(v);
    } else if (a == "--min-accuracy") {
      o.min_accuracy = std::atof(v);
    } else {
      usage(("unknown option " + a).c_str());
    }
  }
  if (o.images.empty() || o.labels.empty()) usage("give --data DIR, or --images and --labels");
  if (o.epochs < 1 || o.batch < 1 || o.workers < 0 || o.threads < 1 || o.steps < 0 || !(o.lr > 0))
    usage("--epochs, --batch and --threads must be >= 1, --workers and --steps >= 0, --lr > 0");
  return o;
}

std::shared_ptr<nn::Sequential> make_model(uint64_t seed) {
  ox::Generator gen(seed);
  nn::Conv2dOptions pad1;
  pad1.padding = {1, 1};
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Conv2d>(1, 16, nn::Pair{3, 3}, pad1, gen), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(nn::Pair{2, 2}), std::make_shared<nn::Conv2d>(16, 32, nn::Pair{3, 3}, pad1, gen),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(nn::Pair{2, 2}), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(32 * 2 * 2, 10, true, gen)});
}

// The shortest decimal that reads back as the same double (the twin parses the metadata with float()).
std::string exact(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

double accuracy(nn::Sequential& model, const ox::Tensor& x, const ox::Tensor& y) {
  ox::NoGradGuard no_grad;
  model.eval();
  const ox::Tensor correct = model.forward(x).argmax(1).eq(y).to(ox::DType::F64).sum();
  model.train();
  return correct.item<double>() / static_cast<double>(y.size(0));
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  ox::set_num_threads(opt.threads);
  try {
    const ox::Tensor images = ox::load_idx(opt.images), labels = ox::load_idx(opt.labels);
    if (images.dim() != 3 || images.size(1) != 8 || images.size(2) != 8 || labels.dim() != 1 ||
        labels.size(0) != images.size(0) || images.size(0) < 5)
      throw ox::Error(ox::ErrorKind::ShapeMismatch,
                      "digits_cnn: expected at least 5 images [N, 8, 8] and labels [N], got " + images.shape().str() +
                          " (" + opt.images + ") and " + labels.shape().str() + " (" + opt.labels + ")");
    const int64_t n = images.size(0), n_train = n * 4 / 5, n_test = n - n_train;
    const ox::Tensor x = images.to(ox::DType::F32).reshape({n, 1, 8, 8}) / 16.0;
    const ox::Tensor y = labels.to(ox::DType::I64);
    // A seeded random split: the file order groups the writers, so its last 20 % would test other writers only.
    ox::Generator split_gen(opt.seed + 1);
    auto parts =
        ox::data::random_split(ox::data::tensor_dataset({x, y}), std::vector<int64_t>{n_train, n_test}, split_gen);
    const ox::Tensor test_index = ox::from_vector(parts[1]->indices(), ox::Shape{n_test});
    const ox::Tensor x_test = x.index_select(0, test_index), y_test = y.index_select(0, test_index);

    auto model = make_model(opt.seed);
    ox::optim::AdamOptions ao;
    ao.lr = opt.lr;
    ox::optim::Adam adam(model->parameters(), ao);

    ox::data::DataLoaderOptions lo;
    lo.batch_size = opt.batch;
    lo.shuffle = true;
    lo.seed = opt.seed;
    lo.num_workers = opt.workers;
    ox::data::DataLoader loader(parts[0], lo);
    if (!opt.dump_init.empty()) {
      // The twin's exchange file: the initial parameters and every epoch's visit order as indices into the
      // files' examples (so the twin needs neither oxmera's split nor its shuffle), with the settings as metadata.
      std::vector<std::pair<std::string, ox::Tensor>> file = model->state_dict_deduplicated();
      std::vector<int64_t> visits;
      for (int e = 0; e < opt.epochs; ++e)
        for (int64_t i : loader.order(e)) visits.push_back(parts[0]->indices()[static_cast<size_t>(i)]);
      file.emplace_back("data.order", ox::from_vector(visits, ox::Shape{static_cast<int64_t>(visits.size())}));
      ox::save_safetensors(opt.dump_init, file,
                           {{"batch", std::to_string(opt.batch)},
                            {"lr", exact(opt.lr)},
                            {"epochs", std::to_string(opt.epochs)},
                            {"n_train", std::to_string(n_train)}});
    }
    std::printf("digits_cnn: %lld train / %lld test images, %lld parameters, batch %lld, %d workers, Adam lr %g\n",
                static_cast<long long>(n_train), static_cast<long long>(n_test),
                static_cast<long long>(model->num_parameters()), static_cast<long long>(opt.batch), opt.workers,
                opt.lr);

    const auto t_start = std::chrono::steady_clock::now();
    int64_t step = 0;
    for (int epoch = 1; epoch <= opt.epochs; ++epoch) {
      double loss_sum = 0.0;
      int64_t batches = 0;
      for (auto& batch : loader) {
        ox::Tensor loss = nn::cross_entropy(model->forward(batch[0]), batch[1]);
        adam.zero_grad();
        loss.backward();
        adam.step();
        const double l = loss.item<float>();
        loss_sum += l;
        ++batches;
        ++step;
        if (opt.steps > 0) {
          std::printf("step %lld loss %.9g\n", static_cast<long long>(step), l);
          if (step == opt.steps) break;
        }
      }
      if (opt.steps > 0 && step == opt.steps) return 0;
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
      std::printf("epoch %d loss %.4f test accuracy %.4f (%.2f s)\n", epoch, loss_sum / static_cast<double>(batches),
                  accuracy(*model, x_test, y_test), secs);
      std::fflush(stdout);
    }
    const double acc = accuracy(*model, x_test, y_test);
    const double train_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    std::printf("test accuracy %.4f (%lld/%lld) after %d epochs, %.2f s\n", acc,
                static_cast<long long>(acc * static_cast<double>(n_test) + 0.5), static_cast<long long>(n_test),
                opt.epochs, train_s);

    // Save, reload into a freshly initialised model (another seed, so a load that did nothing would show).
    nn::save(*model, opt.model, {{"example", "digits_cnn"}});
    auto reloaded = make_model(opt.seed + 1);
    nn::load(*reloaded, opt.model);
    const double acc_reloaded = accuracy(*reloaded, x_test, y_test);
    std::printf("reloaded %s: test accuracy %.4f\n", opt.model.c_str(), acc_reloaded);
    if (acc_reloaded != acc) {
      std::fprintf(stderr, "digits_cnn: the reloaded model scores %.4f, the trained one %.4f\n", acc_reloaded, acc);
      return 1;
    }
    if (opt.min_accuracy >= 0 && acc < opt.min_accuracy) {
      std::fprintf(stderr, "digits_cnn: test accuracy %.4f is below --min-accuracy %.4f\n", acc, opt.min_accuracy);
      return 1;
    }
  } catch (const ox::Error& e) {
    std::fprintf(stderr, "digits_cnn: %s\n", e.what());
    return 1;
  }
  return 0;
}
