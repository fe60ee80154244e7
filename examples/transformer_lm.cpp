// A character-level GPT-style transformer language model on a text file (default: the GPL-3 text Debian ships):
// the bytes of the file are the corpus, its distinct bytes the vocabulary. Model: token Embedding(V, D) plus a
// learned position Embedding(--seq, D), --layers pre-LayerNorm blocks (nn::TransformerEncoderLayer with
// norm_first, GELU, dropout 0, causal self-attention through is_causal), a final LayerNorm and a Linear(D, V)
// head whose weight is the token embedding's (--tie 1, as GPT-2; --tie 0 gives the head its own). Cross entropy
// on the next character, AdamW (weight decay on the matrices only, as nanoGPT), gradient norm clipped to --clip.
// Each step trains on --batch windows of --seq characters at offsets drawn from a std::mt19937_64 seeded with
// --seed (the same batches on every platform). Prints the loss every --print steps and the time per step of
// steps 2-N, then saves the model (nn::save, safetensors), loads it into a model initialised from another seed and
// checks that its loss on the first batch equals the trained model's bit for bit, and samples --sample characters
// (seeded; --temperature 0 picks greedily). --dump-init writes the initial parameters (torch's names), the token ids
// and every step's offsets, for the PyTorch twin bench/transformer_lm_torch.py; ctest's `transformer_lm_torch_parity`
// compares their first steps. --init FILE starts from the parameters in a safetensors file instead (torch's names, the
// twin's `--save-init` output or an earlier --dump-init; tensors named data.* are ignored), so a model
// initialised in PyTorch trains here from the same start.
//
// Usage: transformer_lm [--text FILE] [--steps 300] [--batch 16] [--seq 64] [--d-model 64] [--heads 4]
//                       [--layers 2] [--ff 256] [--tie 1] [--lr 0.003] [--weight-decay 0.1] [--clip 1.0]
//                       [--seed 0] [--threads 1] [--print 50] [--sample 200] [--temperature 0.8]
//                       [--dtype f32|f64] [--model FILE] [--dump-init FILE] [--init FILE]
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
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
  std::string text = "/usr/share/common-licenses/GPL-3", model = "transformer_lm.safetensors", dump_init, init;
  int64_t steps = 300, batch = 16, seq = 64, d_model = 64, heads = 4, layers = 2, ff = 256, print = 50, sample = 200;
  bool tie = true;
  double lr = 3e-3, weight_decay = 0.1, clip = 1.0, temperature = 0.8;
  uint64_t seed = 0;
  int threads = 1;
  ox::DType dtype = ox::DType::F32;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "transformer_lm: %s\nusage: transformer_lm [--text FILE] [--steps N] [--batch N] [--seq N] "
               "[--d-model N] [--heads N] [--layers N] [--ff N] [--tie 0|1] [--lr X] [--weight-decay X] [--clip X] "
               "[--seed N] [--threads N] [--print N] [--sample N] [--temperature X] [--dtype f32|f64] "
               "[--model FILE] [--dump-init FILE] [--init FILE]\n",
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
    else if (a == "--init")
      o.init = v;
    else if (a == "--steps")
      o.steps = num();
    else if (a == "--batch")
      o.batch = num();
    else if (a == "--seq")
      o.seq = num();
    else if (a == "--d-model")
      o.d_model = num();
    else if (a == "--heads")
      o.heads = num();
    else if (a == "--layers")
      o.layers = num();
    else if (a == "--ff")
      o.ff = num();
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
    else if (a == "--weight-decay")
      o.weight_decay = std::atof(v.c_str());
    else if (a == "--clip")
      o.clip = std::atof(v.c_str());
    else if (a == "--temperature")
      o.temperature = std::atof(v.c_str());
    else if (a == "--tie") {
      if (v != "0" && v != "1") usage("--tie is 0 or 1, not " + v);
      o.tie = v == "1";
    } else if (a == "--dtype") {
      if (v != "f32" && v != "f64") usage("--dtype is f32 or f64, not " + v);
      o.dtype = v == "f64" ? ox::DType::F64 : ox::DType::F32;
    } else
      usage("unknown option " + a);
  }
  if (o.steps < 1 || o.batch < 1 || o.seq < 1 || o.d_model < 1 || o.heads < 1 || o.layers < 1 || o.ff < 1 ||
      o.threads < 1 || o.print < 1 || o.sample < 0 || !(o.lr > 0) || !(o.weight_decay >= 0) || !(o.clip > 0) ||
      !(o.temperature >= 0))
    usage(
        "--steps, --batch, --seq, --d-model, --heads, --layers, --ff, --threads, --print must be >= 1, --sample "
        ">= 0, --lr and --clip > 0, --weight-decay and --temperature >= 0");
  if (o.d_model % o.heads != 0)
    usage("--d-model " + std::to_string(o.d_model) + " is not divisible by --heads " + std::to_string(o.heads));
  return o;
}

// Token and position embeddings, pre-norm blocks, final norm, head; members named as the twin's torch attributes
// (blocks.0.self_attn.in_proj_weight, ...), so the state dicts match by name.
class GPT : public nn::Module {
 public:
  GPT(int64_t vocab, const Options& o, uint64_t seed) : context(o.seq) {
    ox::Generator gen(seed);
    register_module("tok_embed", &GPT::tok_embed, std::make_shared<nn::Embedding>(vocab, o.d_model, gen));
    register_module("pos_embed", &GPT::pos_embed, std::make_shared<nn::Embedding>(o.seq, o.d_model, gen));
    // GPT-2's embedding scale; nn.Embedding's N(0, 1) would make the tied head's first logits ~sqrt(D) wide.
    nn::init::normal_(tok_embed->weight, 0.0, 0.02, gen);
    nn::init::normal_(pos_embed->weight, 0.0, 0.02, gen);
    nn::TransformerEncoderLayerOptions lo;
    lo.dim_feedforward = o.ff;
    lo.dropout = 0;
    lo.activation = "gelu";
    lo.batch_first = true;
    lo.norm_first = true;
    // Separately constructed layers (nn::TransformerEncoder would deep-copy one, so every block would start
    // equal); the ModuleList holds the same objects, so they are named blocks.K and saved.
    register_module("blocks", &GPT::block_list, std::make_shared<nn::ModuleList>());
    for (int64_t k = 0; k < o.layers; ++k) {
      blocks.push_back(std::make_shared<nn::TransformerEncoderLayer>(o.d_model, o.heads, lo, gen));
      block_list->push_back(blocks.back());
    }
    register_module("norm", &GPT::norm, std::make_shared<nn::LayerNorm>(ox::Shape{o.d_model}));
    register_module("head", &GPT::head, std::make_shared<nn::Linear>(o.d_model, vocab, true, gen));
    // Tying through the member: parameters(), state_dict_deduplicated() and nn::save see one tensor, listed
    // under its first name, tok_embed.weight.
    if (o.tie) head->weight = tok_embed->weight;
    to(o.dtype);
  }
  // tokens [B, T] (I64, T <= context) -> logits [B, T, V]; position t attends to positions <= t.
  ox::Tensor logits(const ox::Tensor& tokens) {
    const int64_t t = tokens.size(1);
    OXM_CHECK(t >= 1 && t <= context, InvalidArgument, "transformer_lm: a window of ", t,
              " tokens; the model's context is 1 to ", context);
    ox::Tensor x = tok_embed->forward(tokens) + pos_embed->forward(ox::arange(t));
    for (const auto& block : blocks) x = block->forward(x, {}, {}, /*is_causal=*/true);
    return head->forward(norm->forward(x));
  }
  int64_t context;
  std::shared_ptr<nn::Embedding> tok_embed, pos_embed;
  std::shared_ptr<nn::ModuleList> block_list;
  std::vector<std::shared_ptr<nn::TransformerEncoderLayer>> blocks;
  std::shared_ptr<nn::LayerNorm> norm;
  std::shared_ptr<nn::Linear> head;
};

// Inputs [B, T] and next-character targets [B, T] of the windows starting at `offsets`.
std::pair<ox::Tensor, ox::Tensor> make_batch(const std::vector<int64_t>& ids, const int64_t* offsets, int64_t batch,
                                             int64_t seq) {
  std::vector<int64_t> x(static_cast<size_t>(seq * batch)), y(x.size());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < seq; ++t) {
      const auto at = static_cast<size_t>(offsets[b] + t);
      x[static_cast<size_t>(b * seq + t)] = ids[at];
      y[static_cast<size_t>(b * seq + t)] = ids[at + 1];
    }
  return {ox::from_vector(x, ox::Shape{batch, seq}), ox::from_vector(y, ox::Shape{batch, seq})};
}

ox::Tensor lm_loss(GPT& model, const ox::Tensor& x, const ox::Tensor& y) {
  const ox::Tensor logits = model.logits(x);
  return nn::cross_entropy(logits.reshape({-1, logits.size(2)}), y.reshape({-1}));
}

// The parameters of `path` into `model`, all of them (a missing or unknown name, or a wrong shape, is an error
// naming it); data.* entries (a --dump-init file's token ids and windows) are skipped. A tied model takes one
// tensor for tok_embed.weight and head.weight: a file whose two differ holds an untied model.
void load_initial(GPT& model, const std::string& path, bool tie) {
  std::map<std::string, ox::Tensor> file = ox::load_safetensors(path);
  std::erase_if(file, [](const auto& kv) { return kv.first.rfind("data.", 0) == 0; });
  const auto tok = file.find("tok_embed.weight"), head = file.find("head.weight");
  if (tie && tok != file.end() && head != file.end()) {
    if (tok->second.to(ox::DType::F64).to_vector<double>() != head->second.to(ox::DType::F64).to_vector<double>())
      throw ox::Error(ox::ErrorKind::InvalidArgument,
                      "transformer_lm: --init " + path +
                          " has a head.weight different from tok_embed.weight (an untied model); run with --tie 0");
    file.erase(head);
  }
  try {
    model.load_state_dict(file, /*strict=*/true);
  } catch (const ox::Error& e) {
    throw ox::Error(e.kind(), "transformer_lm: --init " + path +
                                  " does not fit the model (--d-model, --heads, --layers, --ff, --seq, --tie and the "
                                  "text's vocabulary must be the file's): " +
                                  e.what());
  }
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
    if (!in) throw ox::Error(ox::ErrorKind::InvalidArgument, "transformer_lm: cannot read the text file " + opt.text);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (static_cast<int64_t>(text.size()) < opt.seq + 2)
      throw ox::Error(ox::ErrorKind::InvalidArgument,
                      "transformer_lm: " + opt.text + " has " + std::to_string(text.size()) +
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

    GPT model(vocab, opt, opt.seed);
    if (!opt.init.empty()) load_initial(model, opt.init, opt.tie);
    // Weight decay on the matrices (embeddings, projections, head), none on biases and LayerNorm gains.
    ox::optim::ParamGroup<ox::optim::AdamWOptions> decay, no_decay;
    decay.options.lr = no_decay.options.lr = opt.lr;
    decay.options.weight_decay = opt.weight_decay;
    no_decay.options.weight_decay = 0;
    for (const ox::Tensor& p : model.parameters()) (p.dim() >= 2 ? decay : no_decay).params.push_back(p);
    ox::optim::AdamW adamw({decay, no_decay});
    if (!opt.dump_init.empty()) {
      std::vector<std::pair<std::string, ox::Tensor>> file = model.state_dict_deduplicated();
      file.emplace_back("data.ids", ox::from_vector(ids, ox::Shape{static_cast<int64_t>(ids.size())}));
      file.emplace_back("data.offsets", ox::from_vector(offsets, ox::Shape{opt.steps, opt.batch}));
      ox::save_safetensors(opt.dump_init, file,
                           {{"lr", exact(opt.lr)},
                            {"weight_decay", exact(opt.weight_decay)},
                            {"clip", exact(opt.clip)},
                            {"seq", std::to_string(opt.seq)},
                            {"d_model", std::to_string(opt.d_model)},
                            {"heads", std::to_string(opt.heads)},
                            {"layers", std::to_string(opt.layers)},
                            {"ff", std::to_string(opt.ff)},
                            {"tie", opt.tie ? "1" : "0"},
                            {"vocab", std::to_string(vocab)}});
    }
    std::printf(
        "transformer_lm: %s, %zu characters, vocabulary %lld, %lld parameters, %s; %lld pre-norm blocks, d_model "
        "%lld, %lld heads, ff %lld, head %s; batch %lld x seq %lld, AdamW lr %g weight decay %g, clip %g\n",
        opt.text.c_str(), text.size(), static_cast<long long>(vocab), static_cast<long long>(model.num_parameters()),
        opt.dtype == ox::DType::F64 ? "f64" : "f32", static_cast<long long>(opt.layers),
        static_cast<long long>(opt.d_model), static_cast<long long>(opt.heads), static_cast<long long>(opt.ff),
        opt.tie ? "tied" : "untied", static_cast<long long>(opt.batch), static_cast<long long>(opt.seq), opt.lr,
        opt.weight_decay, opt.clip);

    const std::vector<ox::Tensor> params = model.parameters();
    double first_loss = 0, last_loss = 0;
    // Wall time of steps 2..N (step 1 also warms the allocator and the kernels' first-touch pages); the twin
    // prints the same line, which is what docs/LIMITATIONS.md's ratio compares.
    std::chrono::steady_clock::time_point after_first;
    for (int64_t step = 1; step <= opt.steps; ++step) {
      auto [x, y] = make_batch(ids, offsets.data() + (step - 1) * opt.batch, opt.batch, opt.seq);
      ox::Tensor loss = lm_loss(model, x, y);
      adamw.zero_grad();
      loss.backward();
      ox::optim::clip_grad_norm_(params, opt.clip);
      adamw.step();
      last_loss = as_double(loss);
      if (step == 1) first_loss = last_loss;
      if (step % opt.print == 0 || step == 1 || step == opt.steps)
        std::printf("step %lld loss %.17g\n", static_cast<long long>(step), last_loss);
      std::fflush(stdout);
      if (step == 1) after_first = std::chrono::steady_clock::now();
    }
    if (opt.steps >= 2) {
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - after_first).count();
      std::printf("time %.3f ms/step over steps 2-%lld\n", ms / static_cast<double>(opt.steps - 1),
                  static_cast<long long>(opt.steps));
    }
    if (opt.tie && !model.head->weight.is_same(model.tok_embed->weight)) {
      std::fprintf(stderr, "transformer_lm: the head's weight is no longer the token embedding after training\n");
      return 1;
    }

    // Save, reload into a model initialised from another seed (a load that did nothing would show), and compare
    // the losses on the first batch.
    nn::save(model, opt.model, {{"example", "transformer_lm"}, {"vocab", std::to_string(vocab)}});
    GPT reloaded(vocab, opt, opt.seed + 1);
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
      std::fprintf(stderr, "transformer_lm: the reloaded model's loss %.17g differs from the trained one's %.17g\n",
                   loaded, trained);
      return 1;
    }

    // Sample from the reloaded model, one character at a time, starting from the text's first character; the
    // window is the last --seq characters (the position embedding's length).
    if (opt.sample > 0) {
      ox::NoGradGuard no_grad;
      std::mt19937_64 sample_rng(opt.seed + 2);
      std::vector<int64_t> window{ids[0]};
      std::string out(1, static_cast<char>(chars[static_cast<size_t>(ids[0])]));
      for (int64_t k = 0; k < opt.sample; ++k) {
        const auto t = static_cast<int64_t>(window.size());
        const ox::Tensor logits = reloaded.logits(ox::from_vector(window, ox::Shape{1, t}));
        const std::vector<double> z = logits.select(1, t - 1).reshape({vocab}).to(ox::DType::F64).to_vector<double>();
        int64_t next = 0;
        if (opt.temperature == 0) {
          next = std::max_element(z.begin(), z.end()) - z.begin();
        } else {
          const double zmax = *std::max_element(z.begin(), z.end());
          std::vector<double> w(z.size());
          for (size_t i = 0; i < z.size(); ++i) w[i] = std::exp((z[i] - zmax) / opt.temperature);
          next = std::discrete_distribution<int64_t>(w.begin(), w.end())(sample_rng);
        }
        out += static_cast<char>(chars[static_cast<size_t>(next)]);
        window.push_back(next);
        if (static_cast<int64_t>(window.size()) > opt.seq) window.erase(window.begin());
      }
      std::printf("sample (%lld characters, temperature %g):\n%s\n", static_cast<long long>(opt.sample),
                  opt.temperature, out.c_str());
    }
    std::printf("loss %.4f -> %.4f over %lld steps\n", first_loss, last_loss, static_cast<long long>(opt.steps));
  } catch (const ox::Error& e) {
    std::fprintf(stderr, "transformer_lm: %s\n", e.what());
    return 1;
  }
  return 0;
}
