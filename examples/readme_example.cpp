// The README's code, compiled in CI so the README cannot drift from the API.
#include <oxmera/oxmera.hpp>

using namespace oxmera;

int main() {
  {
    Tensor x = randn({64, 16}, /*seed=*/1);
    Tensor w = randn({16, 4}, 2).requires_grad_();
    Tensor b = zeros({4}).requires_grad_();
    Tensor loss = (x.matmul(w) + b).relu().sum();
    loss.backward();  // w.grad(), b.grad()
    {
      NoGradGuard no_grad;  // in-place updates of parameters
      w.add_(w.grad(), -0.01);
    }
  }
  Tensor x = randn({32, 2}, 3);
  Tensor labels = (x.narrow(1, 0, 1).squeeze(1) > zeros({32})).to(DType::I64);
  nn::Sequential model{std::make_shared<nn::Linear>(2, 32), std::make_shared<nn::Tanh>(),
                       std::make_shared<nn::Linear>(32, 2)};
  optim::Adam opt(model.parameters(), {.lr = 0.01});
  double first = 0, last = 0;
  for (int step = 0; step < 100; ++step) {
    Tensor loss = nn::cross_entropy(model(x), labels);  // labels: i64 class indices
    opt.zero_grad();
    loss.backward();
    opt.step();
    if (step == 0) first = loss.item<float>();
    last = loss.item<float>();
  }
  nn::save(model, "model.safetensors");  // parameters by dotted name ("0.weight", ...)
  nn::load(model, "model.safetensors");
  return last < first ? 0 : 1;
}
