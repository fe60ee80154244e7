// Parity driver: evaluates oxmera ops described on stdin and prints results on stdout, for
// tests/parity/test_torch_parity.py to compare against PyTorch.
//
// Protocol (one case per line, whitespace-separated tokens; blank lines and lines starting with '#' ignored):
//
//   <id> <op> <grad> <nparams> {<key>=<value>}* <ninputs> {<input>}* [<nseed> <seed values>...]
//
//   <grad>   1: run backward(seed) and print the gradients of sum(output * seed); 0: forward only.
//   <value>  an int, a double, a dtype name, or a comma-separated int list ("" = empty list).
//   <input>  <dtype> <nc> <rg> <rank> <d0..d{rank-1}> <values...>
//            dtype: f32 | f64 | i64 | u8.
//            nc = 1: the values are given for the shape with its last two dims swapped, and the driver
//              transposes the last two dims, so the op sees a non-contiguous view of the given logical shape.
//            rg = 1: the (stored) leaf requires grad (only honoured when <grad> is 1).
//            values: numel of the shape, row-major; "inf", "-inf", "nan" accepted.
//   seed     present only when <grad> is 1: <nseed> values of the output's dtype in row-major order.
//
// Output (one line per case):
//   <id> OK <dtype> <rank> <dims...> <n> <values...> [G <ninputs> {0 | 1 <n> <values...>}*]
//   <id> ERR <ErrorKindName> <message...>       oxmera::Error
//   <id> EXC <what...>                          any other exception (also protocol errors)
// Gradients are printed in each input's logical (op-visible) shape, row-major. Floats are printed with
// round-trip precision (%.9g for f32, %.17g for f64).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "oxmera/autograd.hpp"
#include "oxmera/error.hpp"
#include "oxmera/tensor.hpp"

using namespace oxmera;

namespace {

struct ProtocolError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Tokens {
 public:
  explicit Tokens(const std::string& line) : is_(line) {}
  std::string next() {
    std::string t;
    if (!(is_ >> t)) throw ProtocolError("unexpected end of line");
    return t;
  }
  bool more() {
    std::string t;
    std::streampos p = is_.tellg();
    if (!(is_ >> t)) return false;
    is_.seekg(p);
    return true;
  }
  int64_t next_int() { return parse_int(next()); }
  double next_double() { return parse_double(next()); }
  static int64_t parse_int(const std::string& s) {
    char* end = nullptr;
    long long v = std::strtoll(s.c_str(), &end, 10);
    if (end == s.c_str() || *end) throw ProtocolError("bad integer '" + s + "'");
    return v;
  }
  static double parse_double(const std::string& s) {
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    if (end == s.c_str() || *end) throw ProtocolError("bad number '" + s + "'");
    return v;
  }

 private:
  std::istringstream is_;
};

DType parse_dtype(const std::string& s) {
  if (s == "f32") return DType::F32;
  if (s == "f64") return DType::F64;
  if (s == "i64") return DType::I64;
  if (s == "u8") return DType::U8;
  throw ProtocolError("bad dtype '" + s + "'");
}

struct Params {
  std::map<std::string, std::string> kv;
  const std::string& get(const std::string& k) const {
    auto it = kv.find(k);
    if (it == kv.end()) throw ProtocolError("missing parameter '" + k + "'");
    return it->second;
  }
  bool has(const std::string& k) const { return kv.count(k) != 0; }
  int64_t i(const std::string& k) const { return Tokens::parse_int(get(k)); }
  int64_t i(const std::string& k, int64_t dflt) const { return has(k) ? i(k) : dflt; }
  double d(const std::string& k) const { return Tokens::parse_double(get(k)); }
  bool b(const std::string& k) const { return has(k) && i(k) != 0; }
  std::vector<int64_t> list(const std::string& k) const {
    std::vector<int64_t> out;
    const std::string& s = get(k);
    size_t pos = 0;
    while (pos < s.size()) {
      size_t c = s.find(',', pos);
      if (c == std::string::npos) c = s.size();
      out.push_back(Tokens::parse_int(s.substr(pos, c - pos)));
      pos = c + 1;
    }
    return out;
  }
};

template <class T>
Tensor make_tensor(Tokens& tok, const std::vector<int64_t>& shape, int64_t n) {
  std::vector<T> v(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) v[static_cast<size_t>(k)] = static_cast<T>(tok.next_double());
  return from_vector<T>(v, Shape(shape));
}

Tensor read_values(Tokens& tok, DType dt, const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  switch (dt) {
    case DType::F32: return make_tensor<float>(tok, shape, n);
    case DType::F64: return make_tensor<double>(tok, shape, n);
    case DType::I64: return make_tensor<int64_t>(tok, shape, n);
    case DType::U8: return make_tensor<uint8_t>(tok, shape, n);
  }
  throw ProtocolError("bad dtype");
}

struct Input {
  Tensor leaf;  // what was built from the values (requires grad when asked)
  Tensor op;    // what the op sees (leaf, or its last-two-dims transpose)
  bool nc = false;
};

void print_values(std::string& out, const Tensor& t) {
  char buf[64];
  out += std::to_string(t.numel());
  switch (t.dtype()) {
    case DType::F32:
      for (float v : t.to_vector<float>()) {
        std::snprintf(buf, sizeof buf, " %.9g", static_cast<double>(v));
        out += buf;
      }
      break;
    case DType::F64:
      for (double v : t.to_vector<double>()) {
        std::snprintf(buf, sizeof buf, " %.17g", v);
        out += buf;
      }
      break;
    case DType::I64:
      for (int64_t v : t.to_vector<int64_t>()) {
        out += ' ';
        out += std::to_string(v);
      }
      break;
    case DType::U8:
      for (uint8_t v : t.to_vector<uint8_t>()) {
        out += ' ';
        out += std::to_string(static_cast<int>(v));
      }
      break;
  }
}

Tensor apply(const std::string& op, const Params& p, const std::vector<Tensor>& in) {
  auto need = [&](size_t n) {
    if (in.size() != n) throw ProtocolError(op + " expects " + std::to_string(n) + " inputs");
  };
  // unary
  static const std::map<std::string, Tensor (Tensor::*)() const> unary = {
      {"neg", &Tensor::neg},         {"exp", &Tensor::exp},         {"log", &Tensor::log},
      {"abs", &Tensor::abs},         {"sqrt", &Tensor::sqrt},       {"rsqrt", &Tensor::rsqrt},
      {"sin", &Tensor::sin},         {"cos", &Tensor::cos},         {"tanh", &Tensor::tanh},
      {"relu", &Tensor::relu},       {"gelu", &Tensor::gelu},       {"sigmoid", &Tensor::sigmoid},
      {"square", &Tensor::square},   {"reciprocal", &Tensor::reciprocal}, {"log1p", &Tensor::log1p},
      {"expm1", &Tensor::expm1},     {"sign", &Tensor::sign},       {"contiguous", &Tensor::contiguous},
      {"clone", &Tensor::clone},     {"t", &Tensor::t}};
  if (auto it = unary.find(op); it != unary.end()) {
    need(1);
    return (in[0].*(it->second))();
  }
  static const std::map<std::string, Tensor (Tensor::*)(const Tensor&) const> binary_m = {
      {"pow", &Tensor::pow}, {"maximum", &Tensor::maximum}, {"minimum", &Tensor::minimum},
      {"eq", &Tensor::eq},   {"ne", &Tensor::ne},           {"lt", &Tensor::lt},
      {"le", &Tensor::le},   {"gt", &Tensor::gt},           {"ge", &Tensor::ge},
      {"matmul", &Tensor::matmul}};
  if (auto it = binary_m.find(op); it != binary_m.end()) {
    need(2);
    return (in[0].*(it->second))(in[1]);
  }
  if (op == "add") { need(2); return in[0] + in[1]; }
  if (op == "sub") { need(2); return in[0] - in[1]; }
  if (op == "mul") { need(2); return in[0] * in[1]; }
  if (op == "div") { need(2); return in[0] / in[1]; }
  if (op == "where") { need(3); return where(in[0], in[1], in[2]); }
  // tensor-scalar
  if (op == "add_s") { need(1); return in[0] + p.d("s"); }
  if (op == "sub_s") { need(1); return in[0] - p.d("s"); }
  if (op == "mul_s") { need(1); return in[0] * p.d("s"); }
  if (op == "div_s") { need(1); return in[0] / p.d("s"); }
  if (op == "rsub_s") { need(1); return p.d("s") - in[0]; }
  if (op == "rdiv_s") { need(1); return p.d("s") / in[0]; }
  if (op == "pow_s") { need(1); return in[0].pow(p.d("s")); }
  if (op == "clamp") { need(1); return in[0].clamp(p.d("lo"), p.d("hi")); }
  // reductions
  if (op == "sum") { need(1); return in[0].sum(Dims(p.list("dims")), p.b("keepdim")); }
  if (op == "mean") { need(1); return in[0].mean(Dims(p.list("dims")), p.b("keepdim")); }
  if (op == "max") { need(1); return in[0].max(Dims(p.list("dims")), p.b("keepdim")); }
  if (op == "min") { need(1); return in[0].min(Dims(p.list("dims")), p.b("keepdim")); }
  if (op == "argmax") { need(1); return in[0].argmax(p.i("dim"), p.b("keepdim")); }
  if (op == "argmin") { need(1); return in[0].argmin(p.i("dim"), p.b("keepdim")); }
  if (op == "softmax") { need(1); return in[0].softmax(p.i("dim")); }
  if (op == "log_softmax") { need(1); return in[0].log_softmax(p.i("dim")); }
  if (op == "logsumexp") { need(1); return in[0].logsumexp(p.i("dim"), p.b("keepdim")); }
  // views / conversion
  if (op == "reshape") { need(1); return in[0].reshape(Shape(p.list("shape"))); }
  if (op == "permute") { need(1); return in[0].permute(Dims(p.list("order"))); }
  if (op == "transpose") { need(1); return in[0].transpose(p.i("d0"), p.i("d1")); }
  if (op == "narrow") { need(1); return in[0].narrow(p.i("dim"), p.i("start"), p.i("length")); }
  if (op == "slice") { need(1); return in[0].slice(p.i("dim"), p.i("start"), p.i("end"), p.i("step", 1)); }
  if (op == "select") { need(1); return in[0].select(p.i("dim"), p.i("index")); }
  if (op == "unsqueeze") { need(1); return in[0].unsqueeze(p.i("dim")); }
  if (op == "squeeze") { need(1); return p.has("dim") ? in[0].squeeze(p.i("dim")) : in[0].squeeze(); }
  if (op == "flatten") { need(1); return in[0].flatten(p.i("start", 0), p.i("end", -1)); }
  if (op == "broadcast_to") { need(1); return in[0].broadcast_to(Shape(p.list("shape"))); }
  if (op == "to") { need(1); return in[0].to(parse_dtype(p.get("dtype"))); }
  throw ProtocolError("unknown op '" + op + "'");
}

std::string run_case(const std::string& line) {
  Tokens tok(line);
  std::string id = tok.next();
  std::string out = id;
  try {
    std::string op = tok.next();
    bool grad = tok.next_int() != 0;
    Params params;
    int64_t np = tok.next_int();
    for (int64_t k = 0; k < np; ++k) {
      std::string kv = tok.next();
      size_t eq = kv.find('=');
      if (eq == std::string::npos) throw ProtocolError("bad parameter '" + kv + "'");
      params.kv[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    int64_t ni = tok.next_int();
    std::vector<Input> inputs;
    std::vector<Tensor> op_inputs;
    for (int64_t k = 0; k < ni; ++k) {
      Input in;
      DType dt = parse_dtype(tok.next());
      in.nc = tok.next_int() != 0;
      bool rg = tok.next_int() != 0;
      int64_t rank = tok.next_int();
      std::vector<int64_t> shape(static_cast<size_t>(rank));
      for (auto& d : shape) d = tok.next_int();
      if (in.nc) {
        if (rank < 2) throw ProtocolError("nc needs rank >= 2");
        std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
      }
      in.leaf = read_values(tok, dt, shape);
      if (grad && rg) in.leaf.requires_grad_();
      in.op = in.nc ? in.leaf.transpose(-2, -1) : in.leaf;
      op_inputs.push_back(in.op);
      inputs.push_back(std::move(in));
    }
    Tensor result = apply(op, params, op_inputs);
    Tensor seed;
    if (grad) {
      int64_t ns = tok.next_int();
      if (ns != result.numel()) throw ProtocolError("seed has " + std::to_string(ns) + " values, output " +
                                                    std::to_string(result.numel()));
      seed = read_values(tok, result.dtype(), result.shape().vec());
    }
    if (tok.more()) throw ProtocolError("trailing tokens");
    if (grad) result.backward(seed);

    out += " OK ";
    out += dtype_name(result.dtype());
    out += ' ';
    out += std::to_string(result.dim());
    for (int64_t d : result.shape()) out += ' ' + std::to_string(d);
    out += ' ';
    print_values(out, result);
    if (grad) {
      out += " G " + std::to_string(inputs.size());
      for (const Input& in : inputs) {
        Tensor g = in.leaf.grad();
        if (!g.defined()) {
          out += " 0";
          continue;
        }
        if (in.nc) g = g.transpose(-2, -1);
        out += " 1 ";
        print_values(out, g);
      }
    }
  } catch (const Error& e) {
    out = id + " ERR " + error_kind_name(e.kind()) + " " + e.message();
  } catch (const std::exception& e) {
    out = id + " EXC " + e.what();
  }
  for (char& c : out)
    if (c == '\n' || c == '\r') c = ' ';
  return out;
}

}  // namespace

int main() {
  std::ios::sync_with_stdio(false);
  std::string line;
  std::string out;
  while (std::getline(std::cin, line)) {
    if (line.empty() || line[0] == '#') continue;
    out = run_case(line);
    out += '\n';
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  std::fflush(stdout);
  return 0;
}
