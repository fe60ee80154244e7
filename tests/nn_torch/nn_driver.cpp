// nn parity driver: builds the models test_nn_parity.py builds in torch and prints, per model,
//   MODEL <name>
//   REPR <number of lines>, then the lines of repr()
//   STATE <count>, then "<key> <dim,dim,...>" per state_dict() entry (in order; "-" for 0-d)
//   PARAMS <count>, then the named_parameters() names (each tensor once)
//   NUMEL <num_parameters()>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "oxmera/nn.hpp"

using namespace oxmera;

namespace {

class Net : public nn::Cloneable<Net> {
 public:
  explicit Net(Generator& g) {
    register_module("proj", &Net::proj, std::make_shared<nn::Linear>(4, 4, true, g));
    register_module("blocks", &Net::blocks, std::make_shared<nn::ModuleList>());
    for (int i = 0; i < 2; ++i)
      blocks->push_back(std::make_shared<nn::Sequential>(nn::Sequential{std::make_shared<nn::Linear>(4, 8, true, g),
                                                                        std::make_shared<nn::Tanh>(),
                                                                        std::make_shared<nn::Linear>(8, 4, true, g)}));
    register_module("heads", &Net::heads,
                    std::make_shared<nn::ModuleDict>(nn::ModuleDict{{"a", std::make_shared<nn::Linear>(4, 2, true, g)},
                                                                    {"b", std::make_shared<nn::Sigmoid>()}}));
    register_module("norm", &Net::norm, std::make_shared<nn::LayerNorm>(Shape{4}));
    register_module(
        "conv", &Net::conv,
        std::make_shared<nn::Conv2d>(
            2, 4, nn::Pair{3, 1}, nn::Conv2dOptions{.stride = 2, .dilation = {1, 2}, .groups = 2, .bias = false}, g));
    register_module("pool", &Net::pool, std::make_shared<nn::AvgPool2d>(nn::Pair{2, 3}));
    register_module("bn", &Net::bn, std::make_shared<nn::BatchNorm2d>(3, 1e-3, 0.05, false));
    register_module("embed", &Net::embed, std::make_shared<nn::Embedding>(10, 4, g));
    register_module("decoder", &Net::decoder, std::make_shared<nn::Linear>(4, 10, true, g));
    decoder->weight = embed->weight;  // tied
  }
  std::shared_ptr<nn::Linear> proj, decoder;
  std::shared_ptr<nn::ModuleList> blocks;
  std::shared_ptr<nn::ModuleDict> heads;
  std::shared_ptr<nn::LayerNorm> norm;
  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::AvgPool2d> pool;
  std::shared_ptr<nn::BatchNorm2d> bn;
  std::shared_ptr<nn::Embedding> embed;
};

void report(const std::string& name, const nn::Module& m) {
  std::cout << "MODEL " << name << "\n";
  const std::string r = m.repr();
  size_t lines = 1;
  for (char c : r) lines += c == '\n';
  std::cout << "REPR " << lines << "\n" << r << "\n";
  const auto sd = m.state_dict();
  std::cout << "STATE " << sd.size() << "\n";
  for (const auto& [k, t] : sd) {
    std::string dims;
    for (size_t i = 0; i < t.shape().size(); ++i) {
      if (i) dims += ',';
      dims += std::to_string(t.shape()[i]);
    }
    std::cout << k << " " << (dims.empty() ? "-" : dims) << "\n";
  }
  const auto params = m.named_parameters();
  std::cout << "PARAMS " << params.size() << "\n";
  for (const auto& [k, t] : params) std::cout << k << "\n";
  std::cout << "NUMEL " << m.num_parameters() << "\n";
}

}  // namespace

int main() {
  Generator g(1);
  nn::Sequential cnn{std::make_shared<nn::Conv2d>(1, 4, 3, nn::Conv2dOptions{.padding = 1}, g),
                     std::make_shared<nn::BatchNorm2d>(4),
                     std::make_shared<nn::ReLU>(),
                     std::make_shared<nn::MaxPool2d>(2),
                     std::make_shared<nn::Flatten>(),
                     std::make_shared<nn::Linear>(64, 10, false, g),
                     std::make_shared<nn::Dropout>(0.25),
                     std::make_shared<nn::LayerNorm>(Shape{10})};
  report("cnn", cnn);
  Net net(g);
  report("net", net);
  return 0;
}
