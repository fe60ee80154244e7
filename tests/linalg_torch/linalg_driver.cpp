// linalg parity driver: evaluates oxmera::linalg on cases read from stdin and prints values and input
// gradients, for test_linalg_parity.py to compare against torch.linalg (Debian's python3-torch 1.13).
//
// Input, one case per line (whitespace-separated; blank lines and '#' lines ignored):
//   <id> <op> <dtype> <nops> {<rank> <dims...> <values...>}* <nseed> {<seed value>}*
//   op: cholesky | logdet | det | solve | cholesky_solve | inverse | solve_triangular_lower |
//       solve_triangular_upper | eigh_w | eigh_vabs | eigh_vsq | diag | diag_embed | trace
//   (eigh_vabs = |eigenvectors|, eigh_vsq = eigenvectors * eigenvectors: sign-invariant functions).
//   dtype: f32 | f64. Every operand requires grad; nseed = 0: forward only, otherwise out.backward(seed)
//   with the seed in the output's shape.
// Output, one line per case:
//   <id> OK <rank> <dims...> <n> <values...> G <k> {<n> <values...>}*   (k = nops after a backward, else 0)
//   <id> ERR <ErrorKindName> <message...>
//   <id> EXC <what...>
#include <cstdint>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "oxmera/error.hpp"
#include "oxmera/linalg.hpp"
#include "oxmera/tensor.hpp"

using namespace oxmera;
namespace la = oxmera::linalg;

namespace {

Tensor read_tensor(std::istream& in, DType dt) {
  int64_t rank = 0;
  in >> rank;
  Shape shape;
  int64_t n = 1;
  for (int64_t d = 0; d < rank; ++d) {
    int64_t s = 0;
    in >> s;
    shape.push_back(s);
    n *= s;
  }
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) in >> x;
  if (!in) throw std::runtime_error("truncated tensor");
  return from_vector<double>(v, shape).to(dt);
}

void print_values(std::ostream& os, const Tensor& t) {
  std::vector<double> v = t.to(DType::F64).to_vector<double>();
  os << ' ' << v.size();
  for (double x : v) os << ' ' << x;
}

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

int main() {
  std::cout << std::setprecision(17);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    std::string id, op, dts;
    int nops = 0;
    in >> id >> op >> dts >> nops;
    try {
      const DType dt = dts == "f64" ? DType::F64 : DType::F32;
      std::vector<Tensor> ops;
      for (int i = 0; i < nops; ++i) ops.push_back(read_tensor(in, dt).requires_grad_(true));
      int64_t nseed = 0;
      in >> nseed;
      std::vector<double> seed(static_cast<size_t>(nseed));
      for (auto& x : seed) in >> x;
      Tensor out = run(op, ops);
      std::ostringstream os;
      os << std::setprecision(17) << id << " OK " << out.dim();
      for (int64_t d = 0; d < out.dim(); ++d) os << ' ' << out.size(d);
      print_values(os, out);
      if (nseed > 0) {
        out.backward(from_vector<double>(seed, out.shape()).to(dt));
        os << " G " << nops;
        for (const Tensor& t : ops) {
          Tensor g = t.grad();
          print_values(os, g.defined() ? g : zeros_like(t));
        }
      } else {
        os << " G 0";
      }
      std::cout << os.str() << '\n';
    } catch (const Error& e) {
      std::string msg = e.message();
      for (char& c : msg)
        if (c == '\n') c = ' ';
      std::cout << id << " ERR " << error_kind_name(e.kind()) << ' ' << msg << '\n';
    } catch (const std::exception& e) {
      std::cout << id << " EXC " << e.what() << '\n';
    }
  }
  return 0;
}
