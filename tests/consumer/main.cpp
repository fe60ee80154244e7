#include <oxmera/oxmera.hpp>

int main() {
  oxmera::Tensor w = oxmera::ones({2, 2}).requires_grad_();
  oxmera::Tensor y = w.matmul(oxmera::ones({2, 1})).sum();
  y.backward();
  // Links oxmera::distributed, and through it MPI when oxmera was built with it (a private dependency the
  // installed package finds again).
  const bool mpi_ok = !oxmera::distributed::backend_description().empty();
  return (w.grad().sum().item<float>() == 4.0f && mpi_ok) ? 0 : 1;
}
