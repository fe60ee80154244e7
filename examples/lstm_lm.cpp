// A character-level LSTM language model on a text file (default: the GPL-3 text Debian ships): the bytes of
// the file are the corpus, its distinct bytes the vocabulary. Model: Embedding(V, E) - LSTM(E, H) - Linear(H,
// V), cross entropy on the next character, Adam, gradient norm clipped to --clip. Each step trains on --batch
// windows of --seq characters at offsets drawn from a std::mt19937_64 seeded with --seed (the same batches on
// every platform). Prints the loss every --print steps, then saves the model (nn::save, safetensors), loads it
// into a freshly initialised model and checks that its loss on the first batch equals the trained model's, and
// samples --sample characters (seeded; --temperature 0 picks greedily). --dump-init writes the initial
// parameters (torch's names), the token ids and every step's offsets, for the PyTorch twin
// bench/lstm_lm_torch.py; ctest's `lstm_lm_torch_parity` compares their first steps.
//
// Usage: lstm_lm [--text FILE] [--steps 300] [--batch 16] [--seq 32] [--embed 32] [--hidden 128] [--lr 0.003]
//                [--clip 1.0] [--seed 0] [--threads 1] [--print 50] [--sample 100] [--temperature 0.8]
//                [--dtype f32|f64] [--model FILE] [--dump-init FILE]
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <oxmera/io.hpp>
#include <oxmera/oxmera.hpp>

namespace ox = oxmera;
namespace nn = oxmera::nn;

namespace {

struct Options {
  std::string text = "/usr/share/common-licenses/GPL-3", model = "lstm_lm.safetensors", dump_init;
  int64_t steps = 300, batch = 16, seq = 32, embed = 32, hidden = 128, print = 50, sample = 100;
  double lr = 3e-3, clip = 1.0, temperature = 0.8;
  uint64_t seed = 0;
  int threads = 1;
  ox::DType dtype = ox::DType::F32;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "lstm_lm: %s\nusage: lstm_lm [--text FILE] [--steps N] [--batch N] [--seq N] [--embed N] "
               "[--hidden N] [--lr X] [--clip X] [--seed N] [--threads N] [--print N] [--sample N] "
               "[--temperature X] [--dtype f32|f64] [--model FILE] [--dump-init FILE]\n",
               why.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage("missing the value of " + a);
    const std::string v = argv[++i];
    const auto num = [&] { return std::atoll(v.c_str()); };
    if (a == "--text")
      o.text = v;
    else if (a == "--model")
      o.model = v;
    else if (a == "--dump-init")
      o.dump_init = v;
    else if (a == "--steps")
      o.steps = num();
    else if (a == "--batch")
      o.batch = num();
    else if (a == "--seq")
      o.seq = num();
    else if (a == "--embed")
      o.embed = num();
    else if (a == "--hidden")
      o.hidden = num();
    else if (a == "--print")
      o.print = num();
    else if (a == "--sample")
      o.sample = num();
    else if (a == "--threads")
      o.threads = static_cast<int>(num());
    else if (a == "--seed")
      o.seed = std::strtoull(v.c_str(), nullptr, 10);
    else if (a == "--lr")
      o.lr = std::atof(v.c_str());
    else if (a == "--clip")
      o.clip = std::atof(v.c_str());
    else if (a == "--temperature")
      o.temperature = std::atof(v.c_str());
    else if (a == "--dtype") {
      if (v != "f32" && v != "f64") usage("--dtype is f32 or f64, not " + v);
      o.dtype = v == "f64" ? ox::DType::F64 : ox::DType::F32;
    } else
      usage("unknown option " + a);
  }
  if (o.steps < 1 || o.batch < 1 || o.seq < 1 || o.embed < 1 || o.hidden < 1 || o.threads < 1 || o.print < 1 ||
      o.sample < 0 || !(o.lr > 0) || !(o.clip > 0) || !(o.temperature >= 0))
    usage(
        "--steps, --batch, --seq, --embed, --hidden, --threads, --print must be >= 1, --sample >= 0, --lr and "
        "--clip > 0, --temperature >= 0");
  return o;
}

// Embedding - LSTM - Linear; members named as the twin's torch attributes, so the state dicts match by name.
class CharLM : public nn::Module {
 public:
  CharLM(int64_t vocab, int64_t embed_dim, int64_t hidden, ox::DType dtype, uint64_t seed) {
    ox::Generator gen(seed);
    register_module("embed", &CharLM::embed, std::make_shared<nn::Embedding>(vocab, embed_dim, gen));
    register_module("lstm", &CharLM::lstm,
                    std::make_shared<nn::LSTM>(embed_dim, hidden, nn::RNNOptions{.dtype = dtype}, gen));
    register_module("head", &CharLM::head, std::make_shared<nn::Linear>(hidden, vocab, true, gen));
    to(dtype);
  }
  // tokens [T, B] (I64) -> (logits [T, B, V], (h, c)).
  std::pair<ox::Tensor, std::tuple<ox::Tensor, ox::Tensor>> logits(
      const ox::Tensor& tokens, const std::tuple<ox::Tensor, ox::Tensor>& state = {}) {
    auto [out, hc] = lstm->forward(embed->forward(tokens), state);
    return {head->forward(out), hc};
  }
  std::shared_ptr<nn::Embedding> embed;
  std::shared_ptr<nn::LSTM> lstm;
  std::shared_ptr<nn::Linear> head;
};

// Inputs [T, B] and next-character targets [T, B] of the windows starting at `offsets`.
std::pair<ox::Tensor, ox::Tensor> make_batch(const std::vector<int64_t>& ids, const int64_t* offsets, int64_t batch,
                                             int64_t seq) {
  std::vector<int64_t> x(static_cast<size_t>(seq * batch)), y(x.size());
  for (int64_t t = 0; t < seq; ++t)
    for (int64_t b = 0; b < batch; ++b) {
      const auto at = static_cast<size_t>(offsets[b] + t);
      x[static_cast<size_t>(t * batch + b)] = ids[at];
      y[static_cast<size_t>(t * batch + b)] = ids[at + 1];
    }
  return {ox::from_vector(x, ox::Shape{seq, batch}), ox::from_vector(y, ox::Shape{seq, batch})};
}

ox::Tensor lm_loss(CharLM& model, const ox::Tensor& x, const ox::Tensor& y) {
  const ox::Tensor logits = model.logits(x).first;
  return nn::cross_entropy(logits.reshape({-1, logits.size(2)}), y.reshape({-1}));
}

double as_double(const ox::Tensor& scalar) { return scalar.to(ox::DType::F64).item<double>(); }

std::string exact(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  ox::set_num_threads(opt.threads);
  try {
    std::ifstream in(opt.text, std::ios::binary);
    if (!in) throw ox::Error(ox::ErrorKind::InvalidArgument, "lstm_lm: cannot read the text file " + opt.text);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (static_cast<int64_t>(text.size()) < opt.seq + 2)
      throw ox::Error(ox::ErrorKind::InvalidArgument,
                      "lstm_lm: " + opt.text + " has " + std::to_string(text.size()) +
                          " bytes, fewer than --seq + 2 = " + std::to_string(opt.seq + 2));
    // Vocabulary: the distinct bytes, in byte order.
    std::array<int64_t, 256> id_of{};
    id_of.fill(-1);
    for (unsigned char c : text) id_of[c] = 0;
    std::vector<unsigned char> chars;
    for (int c = 0; c < 256; ++c)
      if (id_of[static_cast<size_t>(c)] == 0) {
        id_of[static_cast<size_t>(c)] = static_cast<int64_t>(chars.size());
        chars.push_back(static_cast<unsigned char>(c));
      }
    std::vector<int64_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = id_of[static_cast<unsigned char>(text[i])];
    const auto vocab = static_cast<int64_t>(chars.size());

    // Every step's window offsets up front: deterministic from the seed, and what --dump-init hands the twin.
    std::mt19937_64 rng(opt.seed);
    std::uniform_int_distribution<int64_t> pick(0, static_cast<int64_t>(ids.size()) - opt.seq - 2);
    std::vector<int64_t> offsets(static_cast<size_t>(opt.steps * opt.batch));
    for (auto& o : offsets) o = pick(rng);

    CharLM model(vocab, opt.embed, opt.hidden, opt.dtype, opt.seed);
    ox::optim::AdamOptions ao;
    ao.lr = opt.lr;
    ox::optim::Adam adam(model.parameters(), ao);
    if (!opt.dump_init.empty()) {
      std::vector<std::pair<std::string, ox::Tensor>> file = model.state_dict_deduplicated();
      file.emplace_back("data.ids", ox::from_vector(ids, ox::Shape{static_cast<int64_t>(ids.size())}));
      file.emplace_back("data.offsets", ox::from_vector(offsets, ox::Shape{opt.steps, opt.batch}));
      ox::save_safetensors(opt.dump_init, file,
                           {{"lr", exact(opt.lr)},
                            {"clip", exact(opt.clip)},
                            {"seq", std::to_string(opt.seq)},
                            {"embed", std::to_string(opt.embed)},
                            {"hidden", std::to_string(opt.hidden)},
                            {"vocab", std::to_string(vocab)}});
    }
    std::printf(
        "lstm_lm: %s, %zu characters, vocabulary %lld, %lld parameters, %s; batch %lld x seq %lld, "
        "Adam lr %g, clip %g\n",
        opt.text.c_str(), text.size(), static_cast<long long>(vocab), static_cast<long long>(model.num_parameters()),
        opt.dtype == ox::DType::F64 ? "f64" : "f32", static_cast<long long>(opt.batch), static_cast<long long>(opt.seq),
        opt.lr, opt.clip);

    const std::vector<ox::Tensor> params = model.parameters();
    double first_loss = 0, last_loss = 0;
    for (int64_t step = 1; step <= opt.steps; ++step) {
      auto [x, y] = make_batch(ids, offsets.data() + (step - 1) * opt.batch, opt.batch, opt.seq);
      ox::Tensor loss = lm_loss(model, x, y);
      adam.zero_grad();
      loss.backward();
      ox::optim::clip_grad_norm_(params, opt.clip);
      adam.step();
      last_loss = as_double(loss);
      if (step == 1) first_loss = last_loss;
      if (step % opt.print == 0 || step == 1 || step == opt.steps)
        std::printf("step %lld loss %.17g\n", static_cast<long long>(step), last_loss);
      std::fflush(stdout);
    }

    // Save, reload into a model initialised from another seed (a load that did nothing would show), and compare
    // the losses on the first batch.
    nn::save(model, opt.model, {{"example", "lstm_lm"}, {"vocab", std::to_string(vocab)}});
    CharLM reloaded(vocab, opt.embed, opt.hidden, opt.dtype, opt.seed + 1);
    nn::load(reloaded, opt.model);
    double trained = 0, loaded = 0;
    {
      ox::NoGradGuard no_grad;
      auto [x, y] = make_batch(ids, offsets.data(), opt.batch, opt.seq);
      trained = as_double(lm_loss(model, x, y));
      loaded = as_double(lm_loss(reloaded, x, y));
    }
    std::printf("reloaded %s: first-batch loss %.9g (trained model %.9g)\n", opt.model.c_str(), loaded, trained);
    if (loaded != trained) {
      std::fprintf(stderr, "lstm_lm: the reloaded model's loss %.17g differs from the trained one's %.17g\n", loaded,
                   trained);
      return 1;
    }

    // Sample from the reloaded model, one character at a time, starting from the text's first character.
    if (opt.sample > 0) {
      ox::NoGradGuard no_grad;
      std::mt19937_64 sample_rng(opt.seed + 2);
      std::string out(1, static_cast<char>(chars[static_cast<size_t>(ids[0])]));
      int64_t cur = ids[0];
      std::tuple<ox::Tensor, ox::Tensor> state;
      for (int64_t k = 0; k < opt.sample; ++k) {
        auto [logits, hc] = reloaded.logits(ox::from_vector(std::vector<int64_t>{cur}, ox::Shape{1, 1}), state);
        state = hc;
        const std::vector<double> z = logits.reshape({vocab}).to(ox::DType::F64).to_vector<double>();
        if (opt.temperature == 0) {
          cur = std::max_element(z.begin(), z.end()) - z.begin();
        } else {
          const double zmax = *std::max_element(z.begin(), z.end());
          std::vector<double> w(z.size());
          for (size_t i = 0; i < z.size(); ++i) w[i] = std::exp((z[i] - zmax) / opt.temperature);
          cur = std::discrete_distribution<int64_t>(w.begin(), w.end())(sample_rng);
        }
        out += static_cast<char>(chars[static_cast<size_t>(cur)]);
      }
      std::printf("sample (%lld characters, temperature %g):\n%s\n", static_cast<long long>(opt.sample),
                  opt.temperature, out.c_str());
    }
    std::printf("loss %.4f -> %.4f over %lld steps\n", first_loss, last_loss, static_cast<long long>(opt.steps));
  } catch (const ox::Error& e) {
    std::fprintf(stderr, "lstm_lm: %s\n", e.what());
    return 1;
  }
  return 0;
}
