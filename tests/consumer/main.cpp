#include <oxmera/oxmera.hpp>

int main() {
  oxmera::Tensor w = oxmera::ones({2, 2}).requires_grad_();
  oxmera::Tensor y = w.matmul(oxmera::ones({2, 1})).sum();
  y.backward();
  return w.grad().sum().item<float>() == 4.0f ? 0 : 1;
}
