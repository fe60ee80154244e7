#pragma once
// The stdin/stdout protocol shared by the einsum and linalg parity drivers, so each driver only says how to
// run one case.
//
// Input, one case per line (whitespace-separated; blank lines and '#' lines ignored):
//   <id> <op> <dtype> <nops> {<rank> <dims...> <values...>}* <nseed> {<seed value>}*
//   dtype: f32 | f64. Every operand requires grad; nseed = 0: forward only, otherwise out.backward(seed)
//   with the seed in the output's shape.
// Output, one line per case:
//   <id> OK <rank> <dims...> <n> <values...> G <k> {<n> <values...>}*   (k = nops after a backward, else 0)
//   <id> ERR <ErrorKindName> <message...>
//   <id> EXC <what...>
#include <cstdint>
#include <functional>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "oxmera/error.hpp"
#include "oxmera/tensor.hpp"

namespace oxmera_parity {

using oxmera::DType;
using oxmera::Tensor;

inline Tensor read_tensor(std::istream& in, DType dt) {
  int64_t rank = 0;
  in >> rank;
  oxmera::Shape shape;
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
  return oxmera::from_vector<double>(v, shape).to(dt);
}

inline void print_values(std::ostream& os, const Tensor& t) {
  std::vector<double> v = t.to(DType::F64).to_vector<double>();
  os << ' ' << v.size();
  for (double x : v) os << ' ' << x;
}

// Inside a catch: the protocol's line for case `id` failing, "<id> ERR <kind> <message on one line>" for an
// oxmera::Error (the parity scripts compare the kind with torch's refusal), "<id> EXC <what>" otherwise.
inline void print_failure(const std::string& id) {
  try {
    throw;
  } catch (const oxmera::Error& e) {
    std::string msg = e.message();
    for (char& c : msg)
      if (c == '\n') c = ' ';
    std::cout << id << " ERR " << oxmera::error_kind_name(e.kind()) << ' ' << msg << '\n';
  } catch (const std::exception& e) {
    std::cout << id << " EXC " << e.what() << '\n';
  }
}

// Runs every case on stdin through `run(op, operands)`.
inline int driver_main(const std::function<Tensor(const std::string&, const std::vector<Tensor>&)>& run) {
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
        out.backward(oxmera::from_vector<double>(seed, out.shape()).to(dt));
        os << " G " << nops;
        for (const Tensor& t : ops) {
          Tensor g = t.grad();
          print_values(os, g.defined() ? g : oxmera::zeros_like(t));
        }
      } else {
        os << " G 0";
      }
      std::cout << os.str() << '\n';
    } catch (...) {
      print_failure(id);
    }
  }
  return 0;
}

}  // namespace oxmera_parity
