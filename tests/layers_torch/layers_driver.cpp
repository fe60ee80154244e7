// layers parity driver: for every case and dtype (f32; f64 through Module::to(DType::F64)) prints
//   CASE <name> <f32|f64>
//   T <tag> <dims,...|-> <values...>   tags: X (input), P:<name> (parameters and buffers before the forward),
//   C (the upstream gradient), Y (output), GX (input gradient), G:<name> (parameter gradients), B:<name> (buffers
//   after the forward)
// test_layers_parity.py builds the same layers in torch, copies P, and compares Y, GX, G and B.
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "oxmera/autograd.hpp"
#include "oxmera/nn.hpp"

using namespace oxmera;

namespace {

void print(const std::string& tag, const Tensor& t) {
  Tensor v = t.detach().to(DType::F64).contiguous();
  std::string dims;
  for (size_t i = 0; i < t.shape().size(); ++i) {
    if (i) dims.push_back(',');
    dims.append(std::to_string(t.shape()[i]));
  }
  std::printf("T %s %s", tag.c_str(), dims.empty() ? "-" : dims.c_str());
  const double* p = v.data_ptr<double>();
  for (int64_t i = 0; i < v.numel(); ++i) std::printf(" %.17g", p[i]);
  std::printf("\n");
}

struct Case {
  std::string name;
  std::function<nn::ModulePtr(Generator&)> make;
  Shape input;
  bool indices = false;  // Embedding: i64 input in [0, 6)
};

void run(const Case& c, DType dtype) {
  Generator gen(42);
  nn::ModulePtr m = c.make(gen);
  if (dtype == DType::F64) m->to(DType::F64);
  std::printf("CASE %s %s\n", c.name.c_str(), dtype == DType::F64 ? "f64" : "f32");
  Tensor x;
  if (c.indices) {
    x = from_vector(std::vector<int64_t>{2, 0, 5, 2, 1, 3, 2, 4}, c.input);
  } else {
    x = (randn(c.input, gen, DType::F64)).to(dtype).requires_grad_();
  }
  print("X", x);
  for (const auto& [n, t] : m->state_dict()) print("P:" + n, t);
  Tensor y = m->forward(x);
  Tensor up = randn(y.shape(), gen, DType::F64).to(dtype);
  print("C", up);
  print("Y", y);
  y.backward(up);
  if (!c.indices) print("GX", x.grad());
  for (const auto& [n, t] : m->named_parameters())
    if (t.grad().defined()) print("G:" + n, t.grad());
  for (const auto& [n, t] : m->named_buffers()) print("B:" + n, t);
}

}  // namespace

int main() {
  std::vector<Case> cases = {
      {"conv1d",
       [](Generator& g) {
         return std::make_shared<nn::Conv1d>(
             4, 6, 3, nn::Conv1dOptions{.stride = 2, .padding = 1, .dilation = 2, .groups = 2}, g);
       },
       {2, 4, 9}},
      {"conv1d_nobias",
       [](Generator& g) { return std::make_shared<nn::Conv1d>(3, 2, 2, nn::Conv1dOptions{.bias = false}, g); },
       {3, 6}},
      {"conv_transpose2d",
       [](Generator& g) {
         return std::make_shared<nn::ConvTranspose2d>(
             4, 6, nn::Pair{2, 3},
             nn::ConvTranspose2dOptions{
                 .stride = {2, 1}, .padding = {1, 0}, .output_padding = {1, 0}, .groups = 2, .dilation = {1, 2}},
             g);
       },
       {2, 4, 3, 4}},
      {"conv_transpose2d_plain",
       [](Generator& g) { return std::make_shared<nn::ConvTranspose2d>(3, 2, 3, nn::ConvTranspose2dOptions{}, g); },
       {1, 3, 4, 4}},
      {"batchnorm1d_2d", [](Generator&) { return std::make_shared<nn::BatchNorm1d>(3); }, {5, 3}},
      {"batchnorm1d_3d", [](Generator&) { return std::make_shared<nn::BatchNorm1d>(3, 1e-3, 0.2); }, {4, 3, 5}},
      {"groupnorm", [](Generator&) { return std::make_shared<nn::GroupNorm>(2, 6); }, {2, 6, 3, 2}},
      {"groupnorm_noaffine", [](Generator&) { return std::make_shared<nn::GroupNorm>(3, 3, 1e-3, false); }, {2, 3, 4}},
      {"rmsnorm", [](Generator&) { return std::make_shared<nn::RMSNorm>(Shape{4}); }, {3, 5, 4}},
      {"rmsnorm_eps2d",
       [](Generator&) {
         return std::make_shared<nn::RMSNorm>(Shape{5, 4}, 1e-3);
       },
       {3, 5, 4}},
      {"adaptive_avg_pool2d",
       [](Generator&) {
         return std::make_shared<nn::AdaptiveAvgPool2d>(nn::Pair{3, 4});
       },
       {2, 3, 5, 7}},
      {"embedding_padding",
       [](Generator& g) { return std::make_shared<nn::Embedding>(6, 3, nn::EmbeddingOptions{.padding_idx = 2}, g); },
       {2, 4},
       true},
      {"gelu", [](Generator&) { return std::make_shared<nn::GELU>(); }, {3, 4}},
      {"gelu_tanh", [](Generator&) { return std::make_shared<nn::GELU>("tanh"); }, {3, 4}},
      {"silu", [](Generator&) { return std::make_shared<nn::SiLU>(); }, {3, 4}},
      {"mish", [](Generator&) { return std::make_shared<nn::Mish>(); }, {3, 4}},
      {"softplus", [](Generator&) { return std::make_shared<nn::Softplus>(2.0, 1.0); }, {3, 4}},
      {"elu", [](Generator&) { return std::make_shared<nn::ELU>(0.5); }, {3, 4}},
      {"leaky_relu", [](Generator&) { return std::make_shared<nn::LeakyReLU>(0.2); }, {3, 4}},
      {"hardtanh", [](Generator&) { return std::make_shared<nn::Hardtanh>(-0.5, 0.5); }, {3, 4}},
      {"softmax", [](Generator&) { return std::make_shared<nn::Softmax>(1); }, {3, 4}},
      {"log_softmax", [](Generator&) { return std::make_shared<nn::LogSoftmax>(0); }, {3, 4}},
      {"identity", [](Generator&) { return std::make_shared<nn::Identity>(); }, {3, 4}},
      {"model",
       [](Generator& g) {
         return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
             std::make_shared<nn::Conv1d>(2, 4, 3, nn::Conv1dOptions{}, g), std::make_shared<nn::BatchNorm1d>(4),
             std::make_shared<nn::SiLU>(), std::make_shared<nn::Flatten>(),
             std::make_shared<nn::Linear>(12, 2, true, g)});
       },
       {3, 2, 5}},
  };
  for (const auto& c : cases) {
    run(c, DType::F32);
    run(c, DType::F64);
  }
  return 0;
}
