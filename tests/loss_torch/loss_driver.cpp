// Loss parity driver: evaluates oxmera::nn losses described on stdin and prints values and gradients, for
// test_loss_parity.py to compare against torch.nn.functional.
//
// Input, one case per line (whitespace-separated; blank lines and '#' lines ignored):
//   <id> <loss> <reduction> <ignore_index> <label_smoothing> <ntensors> {<tensor>}* <nseed> {<seed value>}*
//   loss:      mse | nll | ce | bce
//   reduction: mean | sum | none
//   tensor:    <name> <dtype> <rg> <rank> <dims...> <values...>
//              name: input | target | weight | pos_weight; dtype: f32 | f64 | i64; rg = 1: requires grad.
//   seed:      nseed = 0: forward only; otherwise output.backward(seed) with the seed in the output's shape.
// Output, one line per case:
//   <id> OK <n> <values...> G <k> {<name> <n> <values...>}*     (k tensors that required grad)
//   <id> ERR <ErrorKindName> <message...>
//   <id> EXC <what...>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "oxmera/error.hpp"
#include "oxmera/nn/loss.hpp"
#include "oxmera/tensor.hpp"

using namespace oxmera;

namespace {

struct Named {
  std::string name;
  Tensor t;
  bool rg = false;
};

DType parse_dtype(const std::string& s) {
  if (s == "f32") return DType::F32;
  if (s == "f64") return DType::F64;
  if (s == "i64") return DType::I64;
  throw std::runtime_error("bad dtype " + s);
}

double parse_double(const std::string& s) {
  if (s == "inf") return HUGE_VAL;
  if (s == "-inf") return -HUGE_VAL;
  if (s == "nan") return NAN;
  return std::stod(s);
}

nn::Reduction parse_reduction(const std::string& s) {
  if (s == "mean") return nn::Reduction::Mean;
  if (s == "sum") return nn::Reduction::Sum;
  if (s == "none") return nn::Reduction::None;
  throw std::runtime_error("bad reduction " + s);
}

Tensor read_tensor(std::istream& in, DType dt) {
  int64_t rank = 0;
  in >> rank;
  Shape shape;
  for (int64_t i = 0; i < rank; ++i) {
    int64_t d = 0;
    in >> d;
    shape.push_back(d);
  }
  const int64_t n = shape.product();
  std::string tok;
  if (dt == DType::I64) {
    std::vector<int64_t> v(static_cast<size_t>(n));
    for (auto& x : v) {
      in >> tok;
      x = std::stoll(tok);
    }
    return from_vector(v, shape);
  }
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) {
    in >> tok;
    x = parse_double(tok);
  }
  return from_vector(v, shape).to(dt);
}

void print_values(std::ostream& os, const Tensor& t) {
  std::vector<double> v = t.to(DType::F64).to_vector<double>();
  os << ' ' << v.size();
  char buf[64];
  for (double x : v) {
    auto [p, ec] = std::to_chars(buf, buf + sizeof buf, x);
    os << ' ' << std::string_view(buf, static_cast<size_t>(p - buf));
  }
}

std::string run_case(const std::string& line) {
  std::istringstream in(line);
  std::string id, loss, red;
  int64_t ignore_index = -100;
  double ls = 0;
  int ntensors = 0;
  in >> id >> loss >> red >> ignore_index >> ls >> ntensors;
  std::vector<Named> ts;
  Tensor input, target, weight, pos_weight;
  for (int i = 0; i < ntensors; ++i) {
    Named nt;
    std::string dt;
    int rg = 0;
    in >> nt.name >> dt >> rg;
    nt.t = read_tensor(in, parse_dtype(dt));
    nt.rg = rg != 0;
    if (nt.rg) nt.t.requires_grad_();
    if (nt.name == "input")
      input = nt.t;
    else if (nt.name == "target")
      target = nt.t;
    else if (nt.name == "weight")
      weight = nt.t;
    else if (nt.name == "pos_weight")
      pos_weight = nt.t;
    else
      throw std::runtime_error("bad tensor name " + nt.name);
    ts.push_back(nt);
  }
  int64_t nseed = 0;
  in >> nseed;
  std::vector<double> seed(static_cast<size_t>(nseed));
  for (auto& s : seed) {
    std::string tok;
    in >> tok;
    s = parse_double(tok);
  }
  if (!in) throw std::runtime_error("truncated line");
  std::ostringstream os;
  try {
    const nn::Reduction r = parse_reduction(red);
    Tensor out;
    if (loss == "mse") {
      out = nn::MSELoss(r)(input, target);
    } else if (loss == "nll") {
      out = nn::NLLLoss(weight, r, ignore_index)(input, target);
    } else if (loss == "ce") {
      nn::CrossEntropyOptions o;
      o.weight = weight;
      o.label_smoothing = ls;
      o.reduction = r;
      o.ignore_index = ignore_index;
      out = nn::CrossEntropyLoss(o)(input, target);
    } else if (loss == "bce") {
      out = nn::BCEWithLogitsLoss(weight, r, pos_weight)(input, target);
    } else {
      throw std::runtime_error("bad loss " + loss);
    }
    os << id << " OK";
    print_values(os, out);
    if (nseed > 0) {
      out.backward(from_vector(seed, out.shape()).to(out.dtype()));
      int k = 0;
      for (auto& nt : ts) k += nt.rg;
      os << " G " << k;
      for (auto& nt : ts) {
        if (!nt.rg) continue;
        os << ' ' << nt.name;
        Tensor g = nt.t.grad();
        print_values(os, g.defined() ? g : zeros(nt.t.shape(), nt.t.dtype()));
      }
    }
  } catch (const Error& e) {
    std::ostringstream es;
    es << id << " ERR " << error_kind_name(e.kind()) << ' ' << e.message();
    std::string s = es.str();
    for (char& c : s)
      if (c == '\n') c = ' ';
    return s;
  }
  return os.str();
}

}  // namespace

int main() {
  std::ios::sync_with_stdio(false);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty() || line[0] == '#') continue;
    try {
      std::cout << run_case(line) << '\n';
    } catch (const std::exception& e) {
      std::string id = line.substr(0, line.find(' '));
      std::cout << id << " EXC " << e.what() << '\n';
    }
  }
  return 0;
}
