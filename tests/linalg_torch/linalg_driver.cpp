// linalg parity driver: evaluates oxmera::linalg on cases read from stdin and prints values and input
// gradients, for test_linalg_parity.py to compare against torch.linalg (Debian's python3-torch 1.13).
//
// Protocol: tests/parity_common/driver.hpp, with op one of:
//   cholesky | logdet | det | solve | cholesky_solve | inverse | solve_triangular_lower |
//       solve_triangular_upper | eigh_w | eigh_vabs | eigh_vsq | diag | diag_embed | trace
//   (eigh_vabs = |eigenvectors|, eigh_vsq = eigenvectors * eigenvectors: sign-invariant functions).
#include <stdexcept>
#include <string>
#include <vector>

#include "../parity_common/driver.hpp"
#include "oxmera/error.hpp"
#include "oxmera/linalg.hpp"
#include "oxmera/tensor.hpp"

using namespace oxmera;
namespace la = oxmera::linalg;

namespace {

Tensor run(const std::string& op, const std::vector<Tensor>& x) {
  auto need = [&](size_t k) {
    if (x.size() != k) throw std::runtime_error(op + ": expected " + std::to_string(k) + " operands");
  };
  if (op == "cholesky") return need(1), la::cholesky(x[0]);
  if (op == "logdet") return need(1), la::logdet(x[0]);
  if (op == "det") return need(1), la::det(x[0]);
  if (op == "inverse") return need(1), la::inverse(x[0]);
  if (op == "solve") return need(2), la::solve(x[0], x[1]);
  if (op == "cholesky_solve") return need(2), la::cholesky_solve(x[0], x[1]);
  if (op == "solve_triangular_lower") return need(2), la::solve_triangular(x[0], x[1], false);
  if (op == "solve_triangular_upper") return need(2), la::solve_triangular(x[0], x[1], true);
  if (op == "eigh_w") return need(1), la::eigh(x[0]).eigenvalues;
  if (op == "eigh_vabs") return need(1), la::eigh(x[0]).eigenvectors.abs();
  if (op == "eigh_vsq") {
    need(1);
    Tensor v = la::eigh(x[0]).eigenvectors;
    return v * v;
  }
  if (op == "diag") return need(1), la::diag(x[0]);
  if (op == "diag_embed") return need(1), la::diag_embed(x[0]);
  if (op == "trace") return need(1), la::trace(x[0]);
  throw std::runtime_error("unknown op " + op);
}

}  // namespace

int main() { return oxmera_parity::driver_main(run); }
