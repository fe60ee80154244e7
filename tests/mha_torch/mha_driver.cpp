// Driver of test_mha_parity.py. One case per input line:
//   <id> <E> <H> <kdim> <vdim> <bias> <batch_first> <need_weights> <average> <mask> <kpm> <ntensors>
//   {<name> <rank> <dims...> <values...>}*
// mask: 0 none, 1 bool attn_mask (tensor "attn_mask", 1 = not allowed), 2 is_causal without a mask, 3 float
// attn_mask; kpm: 0 none, 1 bool key_padding_mask (tensor "kpm", 1 = ignore), 2 float. The other tensors are
// the state dict (loaded by name), "query", "key", "value", and the backward seeds "gout" / "gw" of the output
// and the weights (loss = sum(out * gout) + sum(w * gw)). Output, one line per case:
//   <id> OK {<name> <n> <values...>}*   names: out, weights (when returned), grad.<query|key|value|parameter>
//   or the failure line of parity_common/driver.hpp.
// TransformerEncoderLayer (dropout 0):
//   <id> ENC <d_model> <nhead> <dim_feedforward> <gelu> <batch_first> <norm_first> <mask> <kpm> <ntensors> {...}*
//   tensors: the state dict, "src", "attn_mask" / "kpm" as above, "gout"; output names out, grad.src,
//   grad.<parameter>.
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include "../parity_common/driver.hpp"
#include "oxmera/oxmera.hpp"

using namespace oxmera;

int main() {
  std::cout << std::setprecision(17);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    std::string id;
    in >> id;
    try {
      if (in >> std::ws && in.peek() == 'E') {
        std::string tag;
        int64_t d, h, ff;
        int gelu, bf, nf, mask, kpm, nt;
        in >> tag >> d >> h >> ff >> gelu >> bf >> nf >> mask >> kpm >> nt;
        std::map<std::string, Tensor> ts;
        for (int i = 0; i < nt; ++i) {
          std::string name;
          in >> name;
          ts[name] = oxmera_parity::read_tensor(in, DType::F32);
        }
        nn::TransformerEncoderLayer m(d, h,
                                      {.dim_feedforward = ff,
                                       .dropout = 0.0,
                                       .activation = gelu ? "gelu" : "relu",
                                       .batch_first = bf != 0,
                                       .norm_first = nf != 0});
        std::map<std::string, Tensor> sd;
        for (const auto& [k, t] : m.state_dict()) sd[k] = ts.at(k);
        m.load_state_dict(sd);
        Tensor src = ts.at("src").requires_grad_();
        Tensor am, kp;
        if (mask == 1) am = (ts.at("attn_mask") > 0.5).to(DType::U8);
        if (mask == 3) am = ts.at("attn_mask");
        if (kpm == 1) kp = (ts.at("kpm") > 0.5).to(DType::U8);
        if (kpm == 2) kp = ts.at("kpm");
        Tensor out = m.forward(src, am, kp, mask == 2);
        (out * ts.at("gout")).sum().backward();
        std::cout << id << " OK out";
        oxmera_parity::print_values(std::cout, out);
        std::cout << " grad.src";
        oxmera_parity::print_values(std::cout, src.grad());
        for (const auto& [name, t] : m.named_parameters()) {
          std::cout << " grad." << name;
          oxmera_parity::print_values(std::cout, t.grad());
        }
        std::cout << "\n";
        continue;
      }
      int64_t E, H, kdim, vdim;
      int bias, bf, nw, avg, mask, kpm, nt;
      in >> E >> H >> kdim >> vdim >> bias >> bf >> nw >> avg >> mask >> kpm >> nt;
      const DType dt = id.rfind("f64.", 0) == 0 ? DType::F64 : DType::F32;  // f64 cases: the module to(F64)
      std::map<std::string, Tensor> ts;
      for (int i = 0; i < nt; ++i) {
        std::string name;
        in >> name;
        ts[name] = oxmera_parity::read_tensor(in, dt);
      }
      nn::MultiheadAttention m(E, H, {.bias = bias != 0, .batch_first = bf != 0, .kdim = kdim, .vdim = vdim});
      m.to(dt);
      std::map<std::string, Tensor> sd;
      for (const auto& [k, t] : m.state_dict()) sd[k] = ts.at(k);
      m.load_state_dict(sd);
      Tensor q = ts.at("query").requires_grad_(), k = ts.at("key").requires_grad_(),
             v = ts.at("value").requires_grad_();
      Tensor am, kp;
      if (mask == 1) am = (ts.at("attn_mask") > 0.5).to(DType::U8);
      if (mask == 3) am = ts.at("attn_mask");
      if (kpm == 1) kp = (ts.at("kpm") > 0.5).to(DType::U8);
      if (kpm == 2) kp = ts.at("kpm");
      auto [out, w] = m.forward(q, k, v, kp, nw != 0, am, avg != 0, mask == 2);
      Tensor loss = (out * ts.at("gout")).sum();
      if (w.defined()) loss = loss + (w * ts.at("gw")).sum();
      loss.backward();
      std::cout << id << " OK out";
      oxmera_parity::print_values(std::cout, out);
      if (w.defined()) {
        std::cout << " weights";
        oxmera_parity::print_values(std::cout, w);
      }
      const std::pair<const char*, Tensor*> inputs[] = {{"query", &q}, {"key", &k}, {"value", &v}};
      for (const auto& [name, t] : inputs) {
        std::cout << " grad." << name;
        oxmera_parity::print_values(std::cout, t->grad());
      }
      for (const auto& [name, t] : m.named_parameters()) {
        std::cout << " grad." << name;
        oxmera_parity::print_values(std::cout, t.grad());
      }
      std::cout << "\n";
    } catch (...) {
      oxmera_parity::print_failure(id);
    }
  }
  return 0;
}
