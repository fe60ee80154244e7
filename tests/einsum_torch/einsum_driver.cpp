// einsum parity driver: evaluates oxmera::einsum on cases read from stdin and prints values and gradients, for
// test_einsum_parity.py to compare against torch.einsum.
//
// Input, one case per line (whitespace-separated; blank lines and '#' lines ignored):
//   <id> <spec> <dtype> <nops> {<rank> <dims...> <values...>}* <nseed> {<seed value>}*
//   spec: '_' stands for a space; dtype: f32 | f64. Every operand requires grad; nseed = 0: forward only,
//   otherwise out.backward(seed) with the seed in the output's shape.
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

#include "oxmera/einsum.hpp"
#include "oxmera/error.hpp"
#include "oxmera/tensor.hpp"

using namespace oxmera;

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

}  // namespace

int main() {
  std::cout << std::setprecision(17);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    std::string id, spec, dts;
    int nops = 0;
    in >> id >> spec >> dts >> nops;
    for (char& c : spec)
      if (c == '_') c = ' ';
    try {
      const DType dt = dts == "f64" ? DType::F64 : DType::F32;
      std::vector<Tensor> ops;
      for (int i = 0; i < nops; ++i) ops.push_back(read_tensor(in, dt).requires_grad_(true));
      int64_t nseed = 0;
      in >> nseed;
      std::vector<double> seed(static_cast<size_t>(nseed));
      for (auto& x : seed) in >> x;
      Tensor out = einsum(spec, ops);
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
      std::cout << id << " ERR " << error_kind_name(e.kind()) << ' ' << e.message() << '\n';
    } catch (const std::exception& e) {
      std::cout << id << " EXC " << e.what() << '\n';
    }
  }
  return 0;
}
