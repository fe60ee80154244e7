// Parity driver: evaluates oxmera ops described on stdin and prints results on stdout, for
// tests/parity/test_torch_parity.py to compare against PyTorch.
//
// Protocol (one case per line, whitespace-separated tokens; blank lines and lines starting with '#' ignored):
//
//   <id> <op> <grad> <nparams> {<key>=<value>}* <ninputs> {<input>}* [<nseed> <seed values>...]
//
//   <grad>   1: run backward(seed) and print the gradients of sum(output * seed); 0: forward only.
//   <value>  an int, a double, a dtype name, or a comma-separated int list ("" = empty list).
//   <input>  <dtype> <layout> <rg> <rank> <d0..d{rank-1}> <values...>
//            dtype: f32 | f64 | i64 | u8.
//            layout = 0: contiguous. The op always sees a tensor of the given (logical) shape, but:
//            layout = 1: the values are given for the shape with its last two dims swapped, and the driver
//              transposes the last two dims (a non-contiguous view).
//            layout = 2: the values are given for the shape with its last dim doubled, and the driver takes
//              every other element of the last dim (slice(-1, 0, 2n, 2): a view with a non-unit stride).
//            rg = 1: the (stored) leaf requires grad (only honoured when <grad> is 1).
//            values: numel of the shape, row-major; "inf", "-inf", "nan" accepted.
//   seed     present only when <grad> is 1: <nseed> values of the output's dtype in row-major order.
//
// Output (one line per case):
//   <id> OK <dtype> <rank> <dims...> <n> <values...> [G <ninputs> {0 | 1 <n> <values...>}*]
//   <id> ERR <ErrorKindName> <message...>       oxmera::Error
//   <id> EXC <what...>                          any other exception (also protocol errors)
// Gradients are printed in each input's logical (op-visible) shape, row-major. Floats are printed with
// their shortest round-trip form (std::to_chars): "inf", "-inf", "nan" for non-finite values.
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <vector>

#include "oxmera/autograd.hpp"
#include "oxmera/error.hpp"
#include "oxmera/nn/functional.hpp"
#include "oxmera/op_registry.hpp"
#include "oxmera/tensor.hpp"

using namespace oxmera;

namespace {

struct ProtocolError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Whitespace tokenizer over one line; numbers are parsed with std::from_chars (fast, locale-free).
class Tokens {
 public:
  explicit Tokens(const std::string& line) : p_(line.data()), end_(line.data() + line.size()) {}
  std::string_view next() {
    skip();
    if (p_ == end_) throw ProtocolError("unexpected end of line");
    const char* b = p_;
    while (p_ != end_ && !is_space(*p_)) ++p_;
    return std::string_view(b, static_cast<size_t>(p_ - b));
  }
  bool more() {
    skip();
    return p_ != end_;
  }
  int64_t next_int() { return parse_int(next()); }
  double next_double() { return parse_double(next()); }
  static int64_t parse_int(std::string_view s) {
    int64_t v = 0;
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || ptr != s.data() + s.size()) throw ProtocolError("bad integer '" + std::string(s) + "'");
    return v;
  }
  static double parse_double(std::string_view s) {
    double v = 0;
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || ptr != s.data() + s.size()) throw ProtocolError("bad number '" + std::string(s) + "'");
    return v;
  }

 private:
  static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }
  void skip() {
    while (p_ != end_ && is_space(*p_)) ++p_;
  }
  const char* p_;
  const char* end_;
};

DType parse_dtype(std::string_view s) {
  if (s == "f32") return DType::F32;
  if (s == "f64") return DType::F64;
  if (s == "i64") return DType::I64;
  if (s == "u8") return DType::U8;
  throw ProtocolError("bad dtype '" + std::string(s) + "'");
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
      out.push_back(Tokens::parse_int(std::string_view(s).substr(pos, c - pos)));
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
    case DType::F32:
      return make_tensor<float>(tok, shape, n);
    case DType::F64:
      return make_tensor<double>(tok, shape, n);
    case DType::I64:
      return make_tensor<int64_t>(tok, shape, n);
    case DType::U8:
      return make_tensor<uint8_t>(tok, shape, n);
  }
  throw ProtocolError("bad dtype");
}

struct Input {
  Tensor leaf;  // what was built from the values (requires grad when asked)
  Tensor op;    // what the op sees (leaf, or a strided view of it)
  int layout = 0;
};

template <class T>
void append_num(std::string& out, T v) {
  char buf[64];
  buf[0] = ' ';
  auto [ptr, ec] = std::to_chars(buf + 1, buf + sizeof buf, v);  // shortest round-trip form for floats
  out.append(buf, static_cast<size_t>(ptr - buf));
}

void print_values(std::string& out, const Tensor& t) {
  out += std::to_string(t.numel());
  switch (t.dtype()) {
    case DType::F32:
      for (float v : t.to_vector<float>()) append_num(out, v);
      break;
    case DType::F64:
      for (double v : t.to_vector<double>()) append_num(out, v);
      break;
    case DType::I64:
      for (int64_t v : t.to_vector<int64_t>()) append_num(out, v);
      break;
    case DType::U8:
      for (uint8_t v : t.to_vector<uint8_t>()) append_num(out, static_cast<int>(v));
      break;
  }
}

// The view the op sees of a stored tensor (and the logical part of the stored tensor's gradient).
Tensor unlayout(const Tensor& stored, int layout) {
  if (layout == 1) return stored.transpose(-2, -1);
  if (layout == 2) return stored.slice(-1, 0, stored.size(-1), 2);
  return stored;
}

Tensor apply(const std::string& op, const Params& p, const std::vector<Tensor>& in) {
  auto need = [&](size_t n) {
    if (in.size() != n) throw ProtocolError(op + " expects " + std::to_string(n) + " inputs");
  };
  // every elementwise entry of the op registry, by name
  if (const ops::OpInfo* e = ops::find_op(op); e && (e->kind == ops::OpKind::Unary || e->kind == ops::OpKind::Binary)) {
    if (e->kind == ops::OpKind::Unary) {
      need(1);
      // the entry's parameters: the case's values where it gives them, else the registry's defaults
      ops::OpParams prm;
      for (int k = 0; k < e->nparams; ++k)
        prm.v[k] = p.has(e->param_names[k]) ? p.d(e->param_names[k]) : e->param_defaults[k];
      return ops::unary(static_cast<ops::UnaryOp>(e->id), in[0], prm);
    }
    need(2);
    return ops::binary(static_cast<ops::BinaryOp>(e->id), in[0], in[1]);
  }
  static const std::map<std::string, Tensor (Tensor::*)() const> unary = {
      {"contiguous", &Tensor::contiguous}, {"clone", &Tensor::clone}, {"t", &Tensor::t}};
  if (auto it = unary.find(op); it != unary.end()) {
    need(1);
    return (in[0].*(it->second))();
  }
  if (op == "matmul") {
    need(2);
    return in[0].matmul(in[1]);
  }
  if (op == "where") {
    need(3);
    return where(in[0], in[1], in[2]);
  }
  // tensor-scalar
  if (op == "add_s") {
    need(1);
    return in[0] + p.d("s");
  }
  if (op == "sub_s") {
    need(1);
    return in[0] - p.d("s");
  }
  if (op == "mul_s") {
    need(1);
    return in[0] * p.d("s");
  }
  if (op == "div_s") {
    need(1);
    return in[0] / p.d("s");
  }
  if (op == "rsub_s") {
    need(1);
    return p.d("s") - in[0];
  }
  if (op == "rdiv_s") {
    need(1);
    return p.d("s") / in[0];
  }
  if (op == "pow_s") {
    need(1);
    return in[0].pow(p.d("s"));
  }
  if (op == "clamp") {
    need(1);
    return in[0].clamp(p.d("lo"), p.d("hi"));
  }
  if (op == "clamp_t") {  // tensor bounds; "omit" = lo or hi: that bound is an undefined tensor
    need(3);
    const std::string omit = p.has("omit") ? p.get("omit") : "";
    return in[0].clamp(omit == "lo" ? Tensor() : in[1], omit == "hi" ? Tensor() : in[2]);
  }
  if (op == "clamp_min_t" || op == "clamp_max_t") {
    need(2);
    return op == "clamp_min_t" ? in[0].clamp_min(in[1]) : in[0].clamp_max(in[1]);
  }
  if (op == "clamp_min_s" || op == "clamp_max_s") {
    need(1);
    return op == "clamp_min_s" ? in[0].clamp_min(p.d("s")) : in[0].clamp_max(p.d("s"));
  }
  if (op == "gelu_approx") {
    need(1);
    return in[0].gelu(p.get("approximate"));
  }
  // reductions
  if (op == "sum") {
    need(1);
    return in[0].sum(Dims(p.list("dims")), p.b("keepdim"));
  }
  if (op == "mean") {
    need(1);
    return in[0].mean(Dims(p.list("dims")), p.b("keepdim"));
  }
  if (op == "max") {
    need(1);
    return in[0].max(Dims(p.list("dims")), p.b("keepdim"));
  }
  if (op == "min") {
    need(1);
    return in[0].min(Dims(p.list("dims")), p.b("keepdim"));
  }
  if (op == "argmax") {
    need(1);
    return in[0].argmax(p.i("dim"), p.b("keepdim"));
  }
  if (op == "argmin") {
    need(1);
    return in[0].argmin(p.i("dim"), p.b("keepdim"));
  }
  if (op == "softmax") {
    need(1);
    return in[0].softmax(p.i("dim"));
  }
  if (op == "log_softmax") {
    need(1);
    return in[0].log_softmax(p.i("dim"));
  }
  if (op == "logsumexp") {
    need(1);
    return in[0].logsumexp(p.i("dim"), p.b("keepdim"));
  }
  // structured ops of issue #13; tuple results pick one with out=0|1, piece lists come back as
  // cat / stack of piece i times (i + 1) (test_torch_parity.py does the same in torch)
  auto reassemble = [](const std::vector<Tensor>& pieces, int64_t dim, bool stacked) {
    std::vector<Tensor> scaled;
    for (size_t i = 0; i < pieces.size(); ++i) scaled.push_back(pieces[i] * static_cast<double>(i + 1));
    return stacked ? stack(scaled, dim) : cat(scaled, dim);
  };
  auto pick = [&](const std::tuple<Tensor, Tensor>& t) { return p.i("out") == 0 ? std::get<0>(t) : std::get<1>(t); };
  if (op == "tril" || op == "triu") {
    need(1);
    return op == "tril" ? in[0].tril(p.i("diagonal")) : in[0].triu(p.i("diagonal"));
  }
  if (op == "masked_fill") {
    if (in.size() == 3) return in[0].masked_fill(in[1], in[2]);
    need(2);
    return in[0].masked_fill(in[1], p.d("value"));
  }
  if (op == "cumsum" || op == "cumprod") {
    need(1);
    return op == "cumsum" ? in[0].cumsum(p.i("dim")) : in[0].cumprod(p.i("dim"));
  }
  if (op == "sort") {
    need(1);
    return pick(in[0].sort(p.i("dim"), p.b("descending")));
  }
  if (op == "argsort") {
    need(1);
    return in[0].argsort(p.i("dim"), p.b("descending"));
  }
  if (op == "topk") {
    need(1);
    return pick(in[0].topk(p.i("k"), p.i("dim"), p.b("largest")));
  }
  if (op == "max_pool2d") {
    need(1);
    auto pair = [&](const char* k) {
      const std::vector<int64_t> v = p.list(k);
      if (v.size() != 2) throw ProtocolError(std::string(k) + " must be two ints");
      return nn::functional::Pair(v[0], v[1]);
    };
    return pick(nn::functional::max_pool2d_with_indices(in[0], pair("kernel"), pair("stride"), pair("padding"),
                                                        pair("dilation")));
  }
  if (op == "max_dim" || op == "min_dim") {
    need(1);
    return pick(op == "max_dim" ? in[0].max(p.i("dim"), p.b("keepdim")) : in[0].min(p.i("dim"), p.b("keepdim")));
  }
  if (op == "chunk") {
    need(1);
    return reassemble(in[0].chunk(p.i("chunks"), p.i("dim")), p.i("dim"), false);
  }
  if (op == "split") {
    need(1);
    return reassemble(p.has("sizes") ? in[0].split(p.list("sizes"), p.i("dim")) : in[0].split(p.i("size"), p.i("dim")),
                      p.i("dim"), false);
  }
  if (op == "unbind") {
    need(1);
    return reassemble(in[0].unbind(p.i("dim")), p.i("dim"), true);
  }
  if (op == "var" || op == "std") {
    need(1);
    const Dims dims(p.list("dims"));
    return op == "var" ? in[0].var(dims, p.d("correction"), p.b("keepdim"))
                       : in[0].std(dims, p.d("correction"), p.b("keepdim"));
  }
  if (op == "norm") {
    need(1);
    return in[0].norm(p.d("p"), Dims(p.list("dims")), p.b("keepdim"));
  }
  if (op == "repeat" || op == "tile") {
    need(1);
    return op == "repeat" ? in[0].repeat(Shape(p.list("reps"))) : in[0].tile(Shape(p.list("reps")));
  }
  if (op == "flip") {
    need(1);
    return in[0].flip(Dims(p.list("dims")));
  }
  if (op == "roll") {
    need(1);
    return in[0].roll(Dims(p.list("shifts")), Dims(p.list("dims")));
  }
  if (op == "any" || op == "all") {
    need(1);
    return op == "any" ? in[0].any(Dims(p.list("dims")), p.b("keepdim"))
                       : in[0].all(Dims(p.list("dims")), p.b("keepdim"));
  }
  // views / conversion
  if (op == "reshape") {
    need(1);
    return in[0].reshape(Shape(p.list("shape")));
  }
  if (op == "permute") {
    need(1);
    return in[0].permute(Dims(p.list("order")));
  }
  if (op == "transpose") {
    need(1);
    return in[0].transpose(p.i("d0"), p.i("d1"));
  }
  if (op == "narrow") {
    need(1);
    return in[0].narrow(p.i("dim"), p.i("start"), p.i("length"));
  }
  if (op == "slice") {
    need(1);
    return in[0].slice(p.i("dim"), p.i("start"), p.i("end"), p.i("step", 1));
  }
  if (op == "select") {
    need(1);
    return in[0].select(p.i("dim"), p.i("index"));
  }
  if (op == "unsqueeze") {
    need(1);
    return in[0].unsqueeze(p.i("dim"));
  }
  if (op == "squeeze") {
    need(1);
    return p.has("dim") ? in[0].squeeze(p.i("dim")) : in[0].squeeze();
  }
  if (op == "flatten") {
    need(1);
    return in[0].flatten(p.i("start", 0), p.i("end", -1));
  }
  if (op == "broadcast_to") {
    need(1);
    return in[0].broadcast_to(Shape(p.list("shape")));
  }
  if (op == "to") {
    need(1);
    return in[0].to(parse_dtype(p.get("dtype")));
  }
  // composites: one input used several times (gradient accumulation in the tape)
  if (op == "x_mul_x") {
    need(1);
    return in[0] * in[0];
  }
  if (op == "x_plus_xt") {
    need(1);
    return in[0] + in[0].t();
  }
  if (op == "softmax_x_matmul_xt") {
    need(1);
    return in[0].softmax(-1).matmul(in[0].t());
  }
  if (op == "rows_sum") {
    need(1);
    return in[0].select(0, 0) * in[0].select(0, 1) + in[0].narrow(0, 1, 1).squeeze(0);
  }
  throw ProtocolError("unknown op '" + op + "'");
}

std::string run_case(const std::string& line) {
  Tokens tok(line);
  std::string id(tok.next());
  std::string out = id;
  try {
    std::string op(tok.next());
    bool grad = tok.next_int() != 0;
    Params params;
    int64_t np = tok.next_int();
    for (int64_t k = 0; k < np; ++k) {
      std::string kv(tok.next());
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
      in.layout = static_cast<int>(tok.next_int());
      bool rg = tok.next_int() != 0;
      int64_t rank = tok.next_int();
      std::vector<int64_t> shape(static_cast<size_t>(rank));
      for (auto& d : shape) d = tok.next_int();
      if (in.layout == 1) {
        if (rank < 2) throw ProtocolError("layout 1 needs rank >= 2");
        std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
      } else if (in.layout == 2) {
        if (rank < 1) throw ProtocolError("layout 2 needs rank >= 1");
        shape.back() *= 2;
      } else if (in.layout != 0) {
        throw ProtocolError("bad layout");
      }
      in.leaf = read_values(tok, dt, shape);
      if (grad && rg) in.leaf.requires_grad_();
      in.op = unlayout(in.leaf, in.layout);
      op_inputs.push_back(in.op);
      inputs.push_back(std::move(in));
    }
    Tensor result = apply(op, params, op_inputs);
    Tensor seed;
    if (grad) {
      int64_t ns = tok.next_int();
      if (ns != result.numel())
        throw ProtocolError("seed has " + std::to_string(ns) + " values, output " + std::to_string(result.numel()));
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
        g = unlayout(g, in.layout);
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

// `--registry`: one line per elementwise registry entry, for the Python side to generate its cases:
//   <name> <arity> <differentiable> <public> <lo_a> <hi_a> <lo_b> <hi_b> <params> <torch expression...>
// <params>: "-" or name=default,... (the unary entry's scalar parameters, named in the torch expression).
void print_registry() {
  for (auto table : {ops::unary_ops(), ops::binary_ops()})
    for (const ops::OpInfo& e : table) {
      std::string params;
      for (int k = 0; k < e.nparams; ++k) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%s%s=%.17g", k ? "," : "", e.param_names[k], e.param_defaults[k]);
        params += buf;
      }
      std::printf("%s %d %d %d %.17g %.17g %.17g %.17g %s %s\n", e.name, e.kind == ops::OpKind::Unary ? 1 : 2,
                  e.differentiable ? 1 : 0, e.is_public ? 1 : 0, e.lo[0], e.hi[0], e.lo[1], e.hi[1],
                  params.empty() ? "-" : params.c_str(), e.torch);
    }
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "--registry") {
    print_registry();
    return 0;
  }
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
