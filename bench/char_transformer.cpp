// The character-level transformer LM step of issue #13, written with oxmera's public primitives the way a
// PyTorch user writes it (hand-written causal attention, functional layers), twin of
// bench/char_transformer_torch.py: same initial parameters, tokens and batches (read from the file that script's
// `init` writes), same optimizer. Prints the timing line of bench/train_step.cpp and the loss of every step.
// With `layers` (issue #15) the blocks are nn::TransformerEncoderLayer (norm_first, GELU, batch_first, causal
// through the fused attention) with the same weights, against torch's nn.TransformerEncoderLayer.
// Usage: oxmera_char_transformer FILE STEPS [THREADS [layers]]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <oxmera/oxmera.hpp>

using namespace oxmera;
namespace F = oxmera::nn::functional;
using namespace oxmera::indexing;

namespace {
constexpr int64_t V = 65, D = 64, H = 4, L = 2, T = 64, B = 16, kMaxSteps = 400;

Tensor forward(std::map<std::string, Tensor>& P, const Tensor& idx, const Tensor& causal) {
  const int64_t b = idx.size(0), t = idx.size(1);
  Tensor x = F::embedding(idx, P["tok_emb"]) + P["pos_emb"].index({Slice(None, t)});
  for (int64_t i = 0; i < L; ++i) {
    const std::string p = "h" + std::to_string(i) + ".";
    Tensor h = F::layer_norm(x, {D}, P[p + "ln1.weight"], P[p + "ln1.bias"]);
    Tensor qkv =
        F::linear(h, P[p + "qkv.weight"], P[p + "qkv.bias"]).view({b, t, 3, H, D / H}).permute({2, 0, 3, 1, 4});
    Tensor q = qkv.select(0, 0), k = qkv.select(0, 1), v = qkv.select(0, 2);
    Tensor att = q.matmul(k.transpose(-2, -1)) / std::sqrt(static_cast<double>(D / H));
    att = where(causal, att, -INFINITY).softmax(-1);
    Tensor y = att.matmul(v).permute({0, 2, 1, 3}).reshape({b, t, D});
    x = x + F::linear(y, P[p + "proj.weight"], P[p + "proj.bias"]);
    h = F::layer_norm(x, {D}, P[p + "ln2.weight"], P[p + "ln2.bias"]);
    h = F::linear(h, P[p + "fc1.weight"], P[p + "fc1.bias"]).gelu();
    x = x + F::linear(h, P[p + "fc2.weight"], P[p + "fc2.bias"]);
  }
  x = F::layer_norm(x, {D}, P["ln_f.weight"], P["ln_f.bias"]);
  return F::linear(x, P["head.weight"], P["head.bias"]);
}
// The blocks as nn::TransformerEncoderLayer, holding the file's block weights (q, k, v stacked as torch's
// in_proj_weight, which is what the hand-written view(b, t, 3, H, D / H) reads).
struct LayerModel {
  std::vector<std::shared_ptr<nn::TransformerEncoderLayer>> blocks;
  std::vector<Tensor> params;
  std::map<std::string, Tensor> P;  // embeddings, final norm, head
  LayerModel(const std::map<std::string, Tensor>& file) {
    const std::map<std::string, std::string> torch_name = {{"ln1.weight", "norm1.weight"},
                                                           {"ln1.bias", "norm1.bias"},
                                                           {"qkv.weight", "self_attn.in_proj_weight"},
                                                           {"qkv.bias", "self_attn.in_proj_bias"},
                                                           {"proj.weight", "self_attn.out_proj.weight"},
                                                           {"proj.bias", "self_attn.out_proj.bias"},
                                                           {"ln2.weight", "norm2.weight"},
                                                           {"ln2.bias", "norm2.bias"},
                                                           {"fc1.weight", "linear1.weight"},
                                                           {"fc1.bias", "linear1.bias"},
                                                           {"fc2.weight", "linear2.weight"},
                                                           {"fc2.bias", "linear2.bias"}};
    for (const char* n : {"tok_emb", "pos_emb", "ln_f.weight", "ln_f.bias", "head.weight", "head.bias"}) {
      P[n] = file.at(n).clone().requires_grad_();
      params.push_back(P[n]);
    }
    for (int64_t i = 0; i < L; ++i) {
      auto blk = std::make_shared<nn::TransformerEncoderLayer>(
          D, H,
          nn::TransformerEncoderLayerOptions{
              .dim_feedforward = 4 * D, .dropout = 0.0, .activation = "gelu", .batch_first = true, .norm_first = true});
      std::map<std::string, Tensor> mine;
      for (auto& [n, t] : blk->named_parameters()) mine[n] = t;
      const std::string p = "h" + std::to_string(i) + ".";
      NoGradGuard ng;
      for (auto& [ours, theirs] : torch_name) mine.at(theirs).copy_(file.at(p + ours));
      for (auto& t : blk->parameters()) params.push_back(t);
      blocks.push_back(blk);
    }
  }
  Tensor forward(const Tensor& idx) {
    const int64_t t = idx.size(1);
    Tensor x = F::embedding(idx, P["tok_emb"]) + P["pos_emb"].index({Slice(None, t)});
    for (auto& blk : blocks) x = blk->forward(x, {}, {}, /*is_causal=*/true);
    x = F::layer_norm(x, {D}, P["ln_f.weight"], P["ln_f.bias"]);
    return F::linear(x, P["head.weight"], P["head.bias"]);
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s FILE STEPS [THREADS]\n", argv[0]);
    return 2;
  }
  const int steps = std::atoi(argv[2]), threads = argc > 3 ? std::atoi(argv[3]) : 1;
  const bool layers = argc > 4 && std::string(argv[4]) == "layers";
  set_num_threads(threads);
  std::map<std::string, Tensor> file = load_safetensors(argv[1]);
  std::map<std::string, Tensor> P;
  std::vector<Tensor> params;
  std::optional<LayerModel> model;
  if (layers) {
    model.emplace(file);
    params = model->params;
  } else {
    for (auto& [name, t] : file) {
      if (name.rfind("data.", 0) == 0) continue;
      P[name] = t.clone().requires_grad_();
      params.push_back(P[name]);
    }
  }
  const Tensor toks = file["data.tokens"], offsets = file["data.offsets"];
  optim::AdamW opt(params, {.lr = 3e-3, .weight_decay = 0.01});
  const Tensor causal = (arange(T).unsqueeze(1) >= arange(T).unsqueeze(0)).to(DType::U8);
  const Tensor span = arange(T + 1);
  const int warmup = 5;
  std::vector<double> times, losses;
  for (int s = 0; s < warmup + steps; ++s) {
    Tensor rows = toks.index({offsets.select(0, s % kMaxSteps).unsqueeze(1) + span});
    Tensor x = rows.index({Slice(), Slice(None, T)}), y = rows.index({Slice(), Slice(1, None)});
    auto t0 = std::chrono::steady_clock::now();
    Tensor logits = layers ? model->forward(x) : forward(P, x, causal);
    Tensor loss = nn::cross_entropy(logits.reshape({B * T, V}), y.reshape({B * T}));
    opt.zero_grad();
    loss.backward();
    optim::clip_grad_norm_(params, 1.0);
    opt.step();
    auto t1 = std::chrono::steady_clock::now();
    losses.push_back(loss.item<float>());
    if (s >= warmup) times.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  double mean = 0;
  for (double v : sorted) mean += v / static_cast<double>(n);
  std::printf("chartf threads=%d steps=%zu median_us=%.2f mean_us=%.2f p10_us=%.2f p90_us=%.2f loss=%.6f\n", threads, n,
              sorted[n / 2], mean, sorted[n / 10], sorted[n * 9 / 10], losses.back());
  std::printf("losses");
  for (double v : losses) std::printf(" %.7f", v);
  std::printf("\n");
  return 0;
}
