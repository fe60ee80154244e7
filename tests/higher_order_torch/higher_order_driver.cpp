// Higher-order parity driver: first derivatives with create_graph = true and Hessian-vector products of
// oxmera ops, for test_higher_order_parity.py to compare with torch.autograd.grad(..., create_graph=True)
// (Debian's python3-torch 1.13).
//
// Input, one case per line (whitespace-separated; tensors as in tests/parity_common/driver.hpp: rank, dims,
// values):
//   <id> <op> <dtype> <ndiff> {tensor}*ndiff <nextra> {tensor}*nextra <seed u> {direction v_i}*ndiff
//   The ndiff operands require grad; the extra ones (class targets, as floats) do not.
//   g = grad(out, diff, u, create_graph = true); hv = grad(sum_i <g_i, v_i>, diff).
// Output, one line per case:
//   <id> OK <n> <out values...> G <ndiff> {<n> <values...>}* H <ndiff> {<n> <values...>}*
//   <id> ERR <ErrorKindName> <message...>  |  <id> EXC <what...>
// op: logdet | cholesky | eigh_w | softmax_<dim> | log_softmax_<dim> |
//     ce_<reduction>_<label smoothing>_<ignore_index>_<weighted: 0 | 1>   (reduction: mean | sum | none; extra:
//     the class targets, then the class weight when weighted; torch does not differentiate the weight)
#include <iomanip>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "../parity_common/driver.hpp"
#include "oxmera/autograd.hpp"
#include "oxmera/error.hpp"
#include "oxmera/linalg.hpp"
#include "oxmera/nn/loss.hpp"
#include "oxmera/tensor.hpp"

using namespace oxmera;
namespace la = oxmera::linalg;

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::stringstream ss(s);
  std::string p;
  while (std::getline(ss, p, sep)) parts.push_back(p);
  return parts;
}

Tensor run(const std::string& op, const std::vector<Tensor>& x, const std::vector<Tensor>& extra) {
  if (op == "logdet") return la::logdet(x.at(0));
  if (op == "cholesky") return la::cholesky(x.at(0));
  if (op == "eigh_w") return la::eigh(x.at(0)).eigenvalues;
  const std::vector<std::string> p = split(op, '_');
  if (op.rfind("softmax_", 0) == 0) return x.at(0).softmax(std::stoll(p.at(1)));
  if (op.rfind("log_softmax_", 0) == 0) return x.at(0).log_softmax(std::stoll(p.at(2)));
  if (op.rfind("ce_", 0) == 0) {
    nn::CrossEntropyOptions o;
    o.reduction = p.at(1) == "mean" ? nn::Reduction::Mean : p.at(1) == "sum" ? nn::Reduction::Sum : nn::Reduction::None;
    o.label_smoothing = std::stod(p.at(2));
    o.ignore_index = std::stoll(p.at(3));
    if (p.at(4) == "1") o.weight = extra.at(1);
    return nn::cross_entropy(x.at(0), extra.at(0).to(DType::I64), o);
  }
  throw std::runtime_error("unknown op " + op);
}

void print_list(std::ostream& os, const char* tag, const std::vector<Tensor>& ts, const std::vector<Tensor>& like) {
  os << ' ' << tag << ' ' << ts.size();
  for (size_t i = 0; i < ts.size(); ++i)
    oxmera_parity::print_values(os, ts[i].defined() ? ts[i].detach() : zeros_like(like[i]));
}

}  // namespace

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    std::string id, op, dts;
    int ndiff = 0, nextra = 0;
    in >> id >> op >> dts >> ndiff;
    try {
      const DType dt = dts == "f64" ? DType::F64 : DType::F32;
      std::vector<Tensor> diff, extra, v;
      for (int i = 0; i < ndiff; ++i) diff.push_back(oxmera_parity::read_tensor(in, dt).requires_grad_(true));
      in >> nextra;
      for (int i = 0; i < nextra; ++i) extra.push_back(oxmera_parity::read_tensor(in, dt));
      Tensor u = oxmera_parity::read_tensor(in, dt);
      for (int i = 0; i < ndiff; ++i) v.push_back(oxmera_parity::read_tensor(in, dt));
      Tensor out = run(op, diff, extra);
      std::vector<Tensor> g = autograd::grad({out}, diff, {u.reshape(out.shape())}, false, true);
      Tensor gv;
      for (int i = 0; i < ndiff; ++i) {
        Tensor t = (g[i] * v[i]).sum();
        gv = gv.defined() ? gv + t : t;
      }
      std::vector<Tensor> hv = autograd::grad({gv}, diff, {}, false, false, true);
      std::ostringstream os;
      os << std::setprecision(17) << id << " OK";
      oxmera_parity::print_values(os, out.detach());
      print_list(os, "G", g, diff);
      print_list(os, "H", hv, diff);
      std::cout << os.str() << '\n';
    } catch (...) {
      oxmera_parity::print_failure(id);
    }
  }
  return 0;
}
