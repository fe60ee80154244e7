// The character language models of `oxmera train` (see char_lm.hpp).
#include "char_lm.hpp"

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <utility>

#include "batch_order.hpp"

namespace oxmera::workloads {
namespace {

constexpr int64_t kMaxEvalWindows = 32;

// examples/transformer_lm.cpp's GPT at its defaults: tokens [B, T] -> logits [B, T, V].
class CharTransformer : public nn::Module {
 public:
  CharTransformer(int64_t vocab, int64_t context, uint64_t seed) : context_(context) {
    Generator gen(seed);
    const int64_t d_model = 64, heads = 4, layers = 2;
    register_module("tok_embed", &CharTransformer::tok_embed, std::make_shared<nn::Embedding>(vocab, d_model, gen));
    register_module("pos_embed", &CharTransformer::pos_embed, std::make_shared<nn::Embedding>(context, d_model, gen));
    // GPT-2's embedding scale (N(0, 1) would make the tied head's first logits ~sqrt(D) wide).
    nn::init::normal_(tok_embed->weight, 0.0, 0.02, gen);
    nn::init::normal_(pos_embed->weight, 0.0, 0.02, gen);
    nn::TransformerEncoderLayerOptions lo;
    lo.dim_feedforward = 256;
    lo.dropout = 0;
    lo.activation = "gelu";
    lo.batch_first = true;
    lo.norm_first = true;
    // Separately constructed (and so differently initialised) blocks, saved as blocks.K.
    register_module("blocks", &CharTransformer::block_list, std::make_shared<nn::ModuleList>());
    for (int64_t k = 0; k < layers; ++k) {
      blocks.push_back(std::make_shared<nn::TransformerEncoderLayer>(d_model, heads, lo, gen));
      block_list->push_back(blocks.back());
    }
    register_module("norm", &CharTransformer::norm, std::make_shared<nn::LayerNorm>(Shape{d_model}));
    register_module("head", &CharTransformer::head, std::make_shared<nn::Linear>(d_model, vocab, true, gen));
    head->weight = tok_embed->weight;  // tied, as GPT-2: one parameter, saved once
  }
  Tensor forward(const Tensor& tokens) override {
    const int64_t t = tokens.size(1);
    OXM_CHECK(t >= 1 && t <= context_, InvalidArgument, "oxmera train --model transformer: a window of ", t,
              " tokens; the model's context is 1 to ", context_);
    Tensor x = tok_embed->forward(tokens) + pos_embed->forward(arange(t, DType::I64, tokens.device()));
    for (const auto& block : blocks) x = block->forward(x, {}, {}, /*is_causal=*/true);
    return head->forward(norm->forward(x));
  }
  std::shared_ptr<nn::Embedding> tok_embed, pos_embed;
  std::shared_ptr<nn::ModuleList> block_list;
  std::vector<std::shared_ptr<nn::TransformerEncoderLayer>> blocks;
  std::shared_ptr<nn::LayerNorm> norm;
  std::shared_ptr<nn::Linear> head;

 private:
  int64_t context_;
};

// examples/lstm_lm.cpp's model at its defaults, batch first: tokens [B, T] -> logits [B, T, V].
class CharLSTM : public nn::Module {
 public:
  CharLSTM(int64_t vocab, uint64_t seed) {
    Generator gen(seed);
    const int64_t embed_dim = 32, hidden = 128;
    register_module("embed", &CharLSTM::embed, std::make_shared<nn::Embedding>(vocab, embed_dim, gen));
    register_module("lstm", &CharLSTM::lstm,
                    std::make_shared<nn::LSTM>(embed_dim, hidden, nn::RNNOptions{.batch_first = true}, gen));
    register_module("head", &CharLSTM::head, std::make_shared<nn::Linear>(hidden, vocab, true, gen));
  }
  Tensor forward(const Tensor& tokens) override {
    return head->forward(std::get<0>(lstm->forward(embed->forward(tokens))));
  }
  std::shared_ptr<nn::Embedding> embed;
  std::shared_ptr<nn::LSTM> lstm;
  std::shared_ptr<nn::Linear> head;
};

// Inputs and next-character targets [B, T] of the windows of `seq` tokens starting at `offsets`.
std::pair<Tensor, Tensor> windows(const std::vector<int64_t>& ids, const std::vector<int64_t>& offsets, int64_t seq) {
  const auto batch = static_cast<int64_t>(offsets.size());
  std::vector<int64_t> x(static_cast<size_t>(batch * seq)), y(x.size());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < seq; ++t) {
      const auto at = static_cast<size_t>(offsets[static_cast<size_t>(b)] + t);
      x[static_cast<size_t>(b * seq + t)] = ids[at];
      y[static_cast<size_t>(b * seq + t)] = ids[at + 1];
    }
  return {from_vector(x, Shape{batch, seq}), from_vector(y, Shape{batch, seq})};
}

std::string hex64(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

bool is_char_lm(const std::string& model) { return model == "transformer" || model == "lstm"; }

int64_t char_lm_context(const std::string& model) { return model == "transformer" ? 64 : 32; }

const char* char_lm_description(const std::string& model) {
  return model == "transformer" ? "Transformer 2x64 (4 heads, ff 256, pre-LN, causal, tied head), char LM"
                                : "LSTM 32-128, char LM";
}

TrainTask char_lm_task(const TrainOptions& opt, const Device& device) {
  const std::string what = "oxmera train --model " + opt.model;
  const int64_t seq = char_lm_context(opt.model);
  const std::string path = opt.data.empty() ? kDefaultCharLmText : opt.data;
  if (std::filesystem::is_directory(path))
    throw Error(ErrorKind::InvalidArgument,
                what + ": --data " + path + " is a folder; the language models read one text file");
  std::ifstream in(path, std::ios::binary);
  std::string text;
  if (in) text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (!in && !in.eof())  // also a directory: it opens, but reading it fails
    throw Error(ErrorKind::InvalidArgument,
                what + ": cannot read the text file '" + path +
                    "' (--data FILE: any text file, e.g. /usr/share/common-licenses/GPL-3)");
  // 90 % training text with room for one window, 10 % held out with room for one.
  const int64_t min_bytes = 10 * (seq + 2);
  if (static_cast<int64_t>(text.size()) < min_bytes)
    throw Error(ErrorKind::InvalidArgument, what + ": --data " + path + " has " + std::to_string(text.size()) +
                                                " bytes; the model's windows of " + std::to_string(seq) +
                                                " characters need at least " + std::to_string(min_bytes) +
                                                " (90 % to train on, 10 % held out for the accuracy)");
  // Vocabulary: the distinct bytes, in byte order.
  std::array<int64_t, 256> id_of{};
  id_of.fill(-1);
  for (unsigned char c : text) id_of[c] = 0;
  int64_t vocab = 0;
  for (auto& id : id_of)
    if (id == 0) id = vocab++;
  auto ids = std::make_shared<std::vector<int64_t>>(text.size());
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the text: a checkpoint resumes only on the same data
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    (*ids)[i] = id_of[c];
    h = (h ^ c) * 1099511628211ull;
  }
  const auto n = static_cast<int64_t>(text.size()), n_train = n * 9 / 10;

  TrainTask task;
  if (opt.model == "transformer") {
    auto model = std::make_shared<CharTransformer>(vocab, seq, opt.seed);
    model->to(device);
    // nanoGPT's split: decay on the matrices (embeddings, projections, tied head), none on biases and norms.
    optim::ParamGroup<optim::AdamWOptions> decay, no_decay;
    decay.options.lr = no_decay.options.lr = opt.lr;
    decay.options.weight_decay = 0.1;
    no_decay.options.weight_decay = 0;
    for (const Tensor& p : model->parameters()) (p.dim() >= 2 ? decay : no_decay).params.push_back(p);
    task.optimizer =
        std::make_unique<optim::AdamW>(std::vector<optim::ParamGroup<optim::AdamWOptions>>{decay, no_decay});
    task.model = model;
  } else {
    auto model = std::make_shared<CharLSTM>(vocab, opt.seed);
    model->to(device);
    optim::AdamOptions ao;
    ao.lr = opt.lr;
    task.optimizer = std::make_unique<optim::Adam>(model->parameters(), ao);
    task.model = model;
  }
  task.clip = 1.0;
  task.rows = opt.steps_per_epoch * opt.batch;
  task.tokens_per_row = seq;
  // Window starts: targets run to offset + seq, which must stay inside the training text.
  const auto starts = static_cast<uint64_t>(n_train - seq);
  const uint64_t seed = opt.seed, rows = static_cast<uint64_t>(task.rows);
  task.epoch_rows = [seed, rows, starts](int epoch) {
    SplitMix64 g{SplitMix64{seed}.next() + static_cast<uint64_t>(epoch)};
    std::vector<int64_t> offsets(rows);
    for (auto& o : offsets) o = static_cast<int64_t>(g.next() % starts);
    return offsets;
  };
  const auto vocab_size = vocab;
  task.batch = [ids, seq](const std::vector<int64_t>& offsets) {
    auto [x, y] = windows(*ids, offsets, seq);
    return std::vector<Tensor>{x, y};
  };
  task.batch_loss = [device, vocab_size](const std::vector<Tensor>& b, const Forward& forward) {
    return nn::cross_entropy(forward(b[0].to(device)).reshape({-1, vocab_size}), b[1].reshape({-1}));
  };
  auto eval_offsets = std::make_shared<std::vector<int64_t>>();
  for (int64_t o = n_train; o + seq < n && static_cast<int64_t>(eval_offsets->size()) < kMaxEvalWindows; o += seq)
    eval_offsets->push_back(o);
  task.eval_items = static_cast<int64_t>(eval_offsets->size());
  task.predictions_per_item = seq;
  nn::Module* model = task.model.get();
  task.correct = [ids, eval_offsets, seq, device, model](int64_t lo, int64_t hi) {
    auto [x, y] = windows(*ids, std::vector<int64_t>(eval_offsets->begin() + lo, eval_offsets->begin() + hi), seq);
    const std::vector<int64_t> pred = (*model)(x.to(device)).argmax(2).to(Device::cpu()).to_vector<int64_t>();
    const std::vector<int64_t> want = y.to_vector<int64_t>();
    int64_t correct = 0;
    for (size_t i = 0; i < pred.size(); ++i) correct += pred[i] == want[i];
    return correct;
  };
  task.identity = {{"train.data", std::to_string(n) + " bytes, FNV-1a " + hex64(h)},
                   {"train.steps_per_epoch", std::to_string(opt.steps_per_epoch)}};
  return task;
}

}  // namespace oxmera::workloads
