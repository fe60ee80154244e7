// Driver of test_transformer_parity.py. One case per input line:
//   <id> <kind> <f32|f64> <in.safetensors> <out.safetensors> {key=value}*
// kind: declayer | encoder | decoder | transformer; the keys are the script's case config (d, h, ff, gelu, bf, nf,
// eval, n, norm, ne, nd, and the mask kinds tm / mm / sm: 1 bool, 2 the causal flag, 3 float, 4
// generate_square_subsequent_mask; tk / mk / sk: 1 bool, 2 float). The input file holds torch's state dict under
// "sd." (loaded by name, strict), src / tgt / memory, the masks and the seed "gout" (loss = sum(out * gout)).
// The output file gets out, grad.<input> and grad.<parameter> (F64); the line printed is "<id> OK" or the failure
// line of parity_common/driver.hpp.
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

#include "../parity_common/driver.hpp"
#include "oxmera/oxmera.hpp"

using namespace oxmera;

namespace {

using Config = std::map<std::string, int64_t>;

int64_t get(const Config& c, const std::string& key) {
  auto it = c.find(key);
  return it == c.end() ? 0 : it->second;
}

// The attention mask of kind c[key] over [L, L'] from the file (or built: causal flag / generated mask).
Tensor attn_mask(const Config& c, const std::string& key, const std::map<std::string, Tensor>& in,
                 const std::string& name, int64_t L, DType dt, bool& causal) {
  switch (get(c, key)) {
    case 1:
    case 3:
      return in.at(name);
    case 2:
      causal = true;
      return {};
    case 4:
      return nn::Transformer::generate_square_subsequent_mask(L, dt);
    default:
      return {};
  }
}

Tensor kp_mask(const Config& c, const std::string& key, const std::map<std::string, Tensor>& in,
               const std::string& name) {
  return get(c, key) ? in.at(name) : Tensor();
}

}  // namespace

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string id, kind, dts, in_path, out_path, kv;
    ls >> id >> kind >> dts >> in_path >> out_path;
    try {
      Config c;
      while (ls >> kv) {
        const auto eq = kv.find('=');
        c[kv.substr(0, eq)] = std::stoll(kv.substr(eq + 1));
      }
      const DType dt = dts == "f64" ? DType::F64 : DType::F32;
      const int64_t d = get(c, "d"), h = get(c, "h"), T = get(c, "T"), S = get(c, "S");
      const nn::TransformerEncoderLayerOptions lo{.dim_feedforward = get(c, "ff"),
                                                  .dropout = get(c, "eval") ? 0.1 : 0.0,
                                                  .activation = get(c, "gelu") ? "gelu" : "relu",
                                                  .batch_first = get(c, "bf") != 0,
                                                  .norm_first = get(c, "nf") != 0};
      auto final_norm = [&] { return get(c, "norm") ? std::make_shared<nn::LayerNorm>(Shape{d}) : nullptr; };
      std::shared_ptr<nn::Module> m;
      std::shared_ptr<nn::TransformerDecoderLayer> declayer;
      std::shared_ptr<nn::TransformerEncoder> encoder;
      std::shared_ptr<nn::TransformerDecoder> decoder;
      std::shared_ptr<nn::Transformer> transformer;
      if (kind == "declayer") {
        m = declayer = std::make_shared<nn::TransformerDecoderLayer>(d, h, lo);
      } else if (kind == "encoder") {
        m = encoder =
            std::make_shared<nn::TransformerEncoder>(nn::TransformerEncoderLayer(d, h, lo), get(c, "n"), final_norm());
      } else if (kind == "decoder") {
        m = decoder =
            std::make_shared<nn::TransformerDecoder>(nn::TransformerDecoderLayer(d, h, lo), get(c, "n"), final_norm());
      } else {
        m = transformer =
            std::make_shared<nn::Transformer>(d, h,
                                              nn::TransformerOptions{.num_encoder_layers = get(c, "ne"),
                                                                     .num_decoder_layers = get(c, "nd"),
                                                                     .dim_feedforward = lo.dim_feedforward,
                                                                     .dropout = lo.dropout,
                                                                     .activation = lo.activation,
                                                                     .batch_first = lo.batch_first,
                                                                     .norm_first = lo.norm_first});
      }
      m->to(dt);
      if (get(c, "eval")) m->eval();
      nn::load(*m, in_path, {.strict = true, .prefix = "sd."});  // torch's state dict by name
      const std::map<std::string, Tensor> in = load_safetensors(in_path);
      std::map<std::string, Tensor> inputs;
      for (const char* name : {"src", "tgt", "memory"})
        if (in.count(name)) inputs[name] = Tensor(in.at(name)).requires_grad_();
      Tensor out;
      if (encoder) {
        bool causal = false;
        const Tensor sm = attn_mask(c, "sm", in, "src_mask", S, dt, causal);
        out = encoder->forward(inputs.at("src"), sm, kp_mask(c, "sk", in, "src_kpm"), causal);
      } else {
        bool tc = false, mc = false;
        const Tensor tm = attn_mask(c, "tm", in, "tgt_mask", T, dt, tc);
        const Tensor mm = attn_mask(c, "mm", in, "memory_mask", T, dt, mc);
        const Tensor tk = kp_mask(c, "tk", in, "tgt_kpm"), mk = kp_mask(c, "mk", in, "memory_kpm");
        if (transformer) {
          bool sc = false;
          const Tensor sm = attn_mask(c, "sm", in, "src_mask", S, dt, sc);
          out = transformer->forward(inputs.at("src"), inputs.at("tgt"), sm, tm, mm, kp_mask(c, "sk", in, "src_kpm"),
                                     tk, mk, sc, tc, mc);
        } else if (decoder) {
          out = decoder->forward(inputs.at("tgt"), inputs.at("memory"), tm, mm, tk, mk, tc, mc);
        } else {
          out = declayer->forward(inputs.at("tgt"), inputs.at("memory"), tm, mm, tk, mk, tc, mc);
        }
      }
      (out * in.at("gout")).sum().backward();
      std::map<std::string, Tensor> res{{"out", out.detach().to(DType::F64)}};
      for (const auto& [name, t] : inputs) res["grad." + name] = t.grad().to(DType::F64);
      for (const auto& [name, p] : m->named_parameters()) {
        if (!p.grad().defined()) throw std::runtime_error("no gradient for " + name);
        res["grad." + name] = p.grad().to(DType::F64);
      }
      save_safetensors(out_path, res);
      std::cout << id << " OK\n";
    } catch (...) {
      oxmera_parity::print_failure(id);
    }
  }
  return 0;
}
