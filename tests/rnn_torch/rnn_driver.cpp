// rnn parity driver: rnn_driver <kind: rnn_tanh|rnn_relu|lstm|gru> <f32|f64> <input_size> <hidden> <num_layers>
//   <bidirectional 0|1> <batch_first 0|1> <bias 0|1> <in.safetensors> <out.safetensors>
// in: torch's state dict (its names) plus x, and optionally h0 (c0), and the seeds gout, gh (gc).
// out: out, h_n (c_n), and grad.<name> for x, h0, c0 and every parameter, of
//   loss = sum(out * gout) + sum(h_n * gh) (+ sum(c_n * gc)).
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "oxmera/io.hpp"
#include "oxmera/nn.hpp"

using namespace oxmera;

int main(int argc, char** argv) {
  if (argc != 11) {
    std::cerr << "usage: rnn_driver kind dtype input_size hidden num_layers bidir batch_first bias in out\n";
    return 2;
  }
  const std::string kind = argv[1];
  nn::RNNOptions o;
  o.dtype = std::string(argv[2]) == "f64" ? DType::F64 : DType::F32;
  const int64_t in = std::stoll(argv[3]), hid = std::stoll(argv[4]);
  o.num_layers = std::stoll(argv[5]);
  o.bidirectional = std::string(argv[6]) == "1";
  o.batch_first = std::string(argv[7]) == "1";
  o.bias = std::string(argv[8]) == "1";
  if (kind == "rnn_relu") o.nonlinearity = "relu";
  std::map<std::string, Tensor> file = load_safetensors(argv[9]);
  auto take = [&](const std::string& k) {
    auto it = file.find(k);
    if (it == file.end()) return Tensor();
    Tensor t = it->second;
    file.erase(it);
    return t.requires_grad_(true);
  };
  Tensor x = take("x"), h0 = take("h0"), c0 = take("c0"), gout = take("gout"), gh = take("gh"), gc = take("gc");
  std::shared_ptr<nn::RNNBase> m;
  Tensor out, h, c;
  if (kind == "lstm") {
    auto l = std::make_shared<nn::LSTM>(in, hid, o);
    l->load_state_dict(file);  // strict: every torch name must match
    auto [y, hc] = l->forward(x, {h0, c0});
    out = y;
    h = std::get<0>(hc);
    c = std::get<1>(hc);
    m = l;
  } else if (kind == "gru") {
    auto g = std::make_shared<nn::GRU>(in, hid, o);
    g->load_state_dict(file);
    std::tie(out, h) = g->forward(x, h0);
    m = g;
  } else {
    auto r = std::make_shared<nn::RNN>(in, hid, o);
    r->load_state_dict(file);
    std::tie(out, h) = r->forward(x, h0);
    m = r;
  }
  Tensor loss = (out * gout.detach()).sum() + (h * gh.detach()).sum();
  if (c.defined()) loss = loss + (c * gc.detach()).sum();
  loss.backward();
  std::map<std::string, Tensor> res{{"out", out.detach().contiguous()}, {"h_n", h.detach().contiguous()}};
  if (c.defined()) res["c_n"] = c.detach().contiguous();
  res["grad.x"] = x.grad();
  if (h0.defined()) res["grad.h0"] = h0.grad();
  if (c0.defined()) res["grad.c0"] = c0.grad();
  for (const auto& [k, p] : m->named_parameters()) res["grad." + k] = p.grad();
  save_safetensors(argv[10], res);
  return 0;
}
