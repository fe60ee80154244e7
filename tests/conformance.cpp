// The conformance suite: cases generated from the op registry, run on conformance_target() against the CPU's
// f64 results (values and gradients); on the CPU itself also finite-difference gradchecks in f64. To add a case
// for a new structured op, add its builder to structured_builders(); elementwise ops need nothing here.
#include "conformance.hpp"

#include <map>

#include "oxmera/nn/functional.hpp"
#include "oxmera/nn/loss.hpp"

namespace oxc {
namespace {

using ops::OpInfo;
using ops::OpKind;

// ---------------------------------------------------------------- inputs
std::vector<double> uniform_values(const Shape& s, double lo, double hi, uint64_t seed) {
  return ((rand(s, seed, DType::F64) * (hi - lo)) + lo).to_vector<double>();
}
Tensor f64(const std::vector<double>& v, const Shape& s) { return from_vector<double>(v, s); }

// Values of an operand's domain; `kink`: kept at least 0.25 away from 0 (relu, abs, sign have kinks there; the
// finite differences of the gradcheck must not straddle one). `halves`: rounded to multiples of 0.5 (ties).
struct Gen {
  double lo, hi;
  bool kink = false, halves = false;
  Tensor operator()(const Shape& s, uint64_t seed) const {
    std::vector<double> v = uniform_values(s, lo, hi, seed);
    for (double& x : v) {
      if (kink && std::abs(x) < 0.25) x = x < 0 && lo <= -0.25 ? -0.25 : 0.25;
      if (halves) x = std::round(x * 2) / 2;
    }
    return f64(v, s);
  }
};

Input plain(Tensor t, bool grad = true) { return {std::move(t), {}, grad, false}; }
Input viewed(Tensor stored, std::function<Tensor(const Tensor&)> view) { return {std::move(stored), std::move(view)}; }
Input host_scalar(Tensor t) { return {std::move(t), {}, false, true}; }
Tensor ints(const Shape& s, int64_t lo, int64_t hi, uint64_t seed) {
  std::vector<double> v = uniform_values(s, static_cast<double>(lo), static_cast<double>(hi) + 1, seed);
  std::vector<int64_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = std::min<int64_t>(hi, static_cast<int64_t>(std::floor(v[i])));
  return from_vector<int64_t>(out, s);
}

// The layouts of a [5, 7] operand: contiguous, transposed, sliced (stride 2) and broadcast (stride 0).
std::vector<std::pair<std::string, Input>> layouts(const Gen& g, uint64_t seed) {
  return {{"contiguous", plain(g({5, 7}, seed))},
          {"transposed", viewed(g({7, 5}, seed + 1), [](const Tensor& t) { return t.t(); })},
          {"sliced", viewed(g({5, 15}, seed + 2), [](const Tensor& t) { return t.slice(1, 1, 15, 2); })},
          {"stride0", viewed(g({1, 7}, seed + 3), [](const Tensor& t) {
             return t.broadcast_to({5, 7});
           })}};
}

// ---------------------------------------------------------------- elementwise entries
using UnaryMethod = Tensor (*)(const Tensor&);
using BinaryMethod = Tensor (Tensor::*)(const Tensor&) const;
// The generated Tensor methods, so the suite calls what users call.
UnaryMethod unary_method(ops::UnaryOp op) {
  // Lambdas, so parameterised methods are called with their default arguments; null for Internal entries.
  static const UnaryMethod table[] = {
#define OXM_X(id, name, api, ...) OXM_UNARY_METHOD_OR_NULL_##api(name)
#define OXM_UNARY_METHOD_OR_NULL_Public(name) +[](const Tensor& t) { return t.name(); },
#define OXM_UNARY_METHOD_OR_NULL_Internal(name) nullptr,
      OXMERA_UNARY_OPS(OXM_X)
#undef OXM_UNARY_METHOD_OR_NULL_Public
#undef OXM_UNARY_METHOD_OR_NULL_Internal
#undef OXM_X
  };
  return table[static_cast<int>(op)];
}
BinaryMethod binary_method(ops::BinaryOp op) {
  static const BinaryMethod table[] = {
#define OXM_X(id, name, api, ...) OXM_IF_PUBLIC_OR_NULL_##api(name)
#define OXM_IF_PUBLIC_OR_NULL_Public(name) static_cast<BinaryMethod>(&Tensor::name),
#define OXM_IF_PUBLIC_OR_NULL_Internal(name) nullptr,
      OXMERA_BINARY_OPS(OXM_X)
#undef OXM_IF_PUBLIC_OR_NULL_Public
#undef OXM_IF_PUBLIC_OR_NULL_Internal
#undef OXM_X
  };
  return table[static_cast<int>(op)];
}

std::vector<Case> unary_cases(const OpInfo& info) {
  const auto op = static_cast<ops::UnaryOp>(info.id);
  const bool pub = info.is_public;
  auto call = [op, pub](const std::vector<Tensor>& v) { return pub ? unary_method(op)(v[0]) : ops::unary(op, v[0]); };
  const Gen g{info.lo[0], info.hi[0], info.lo[0] < 0 && info.hi[0] > 0};
  const bool grad = info.differentiable;
  std::vector<Case> cs;
  uint64_t seed = 1000 + 17 * info.id;
  for (auto& [name, in] : layouts(g, seed)) cs.push_back({name + " [5, 7]", {in}, call, grad});
  cs.push_back({"0-d", {plain(g({}, seed + 5))}, call, grad});
  cs.push_back({"empty [0, 7]", {plain(g({0, 7}, seed + 6))}, call, grad});
  cs.push_back({"large [3, 100003]", {plain(g({3, 100003}, seed + 7))}, call, grad});
  if (info.ints) cs.push_back({"i64 [4, 6]", {plain(ints({4, 6}, -5, 5, seed + 8))}, call, false});
  return cs;
}

std::vector<Case> binary_cases(const OpInfo& info) {
  const auto op = static_cast<ops::BinaryOp>(info.id);
  const bool pub = info.is_public;
  auto call = [op, pub](const std::vector<Tensor>& v) {
    return pub ? (v[0].*binary_method(op))(v[1]) : ops::binary(op, v[0], v[1]);
  };
  const bool grad = info.differentiable, ties = !info.differentiable;  // comparisons: make ties likely
  const Gen ga{info.lo[0], info.hi[0], false, ties}, gb{info.lo[1], info.hi[1], false, ties};
  std::vector<Case> cs;
  uint64_t seed = 5000 + 31 * info.id;
  const std::vector<std::pair<Shape, Shape>> pairs = {{{5, 7}, {5, 7}}, {{3, 1, 4}, {2, 4}}, {{4}, {}},
                                                      {{}, {2, 3}},     {{2, 1}, {1, 3}},    {{0, 3}, {1, 3}},
                                                      {{5, 7}, {7}},    {{200, 301}, {301}}};
  for (const auto& [sa, sb] : pairs)
    cs.push_back({sa.str() + " x " + sb.str(), {plain(ga(sa, ++seed)), plain(gb(sb, ++seed))}, call, grad});
  auto la = layouts(ga, seed += 10), lb = layouts(gb, seed += 10);
  for (size_t i = 0; i < la.size(); ++i) {
    const size_t j = (i + 1) % lb.size();  // every layout on each side, paired with another layout
    cs.push_back({la[i].first + " x " + lb[j].first, {la[i].second, lb[j].second}, call, grad});
  }
  cs.push_back({"[5, 7] x host scalar", {plain(ga({5, 7}, ++seed)), host_scalar(gb({}, ++seed))}, call, grad});
  cs.push_back({"host scalar x transposed [5, 7]",
                {host_scalar(ga({}, ++seed)), viewed(gb({7, 5}, ++seed), [](const Tensor& t) { return t.t(); })},
                call,
                grad});
  if (info.ints) {
    cs.push_back({"i64 [4, 6] x [6]", {plain(ints({4, 6}, -5, 5, ++seed)), plain(ints({6}, 1, 5, ++seed))}, call});
    cs.push_back(
        {"i64 [4, 6] x host scalar", {plain(ints({4, 6}, -5, 5, ++seed)), host_scalar(scalar(3, DType::I64))}, call});
  }
  return cs;
}

// ---------------------------------------------------------------- structured entries
using Builder = std::function<std::vector<Case>(const OpInfo&)>;
const Gen kReal{-2, 2};

std::vector<Case> reduction_cases(const std::string& name) {
  std::function<Tensor(const Tensor&, const Dims&, bool)> f;
  if (name == "sum") f = [](const Tensor& x, const Dims& d, bool k) { return x.sum(d, k); };
  if (name == "mean") f = [](const Tensor& x, const Dims& d, bool k) { return x.mean(d, k); };
  if (name == "max") f = [](const Tensor& x, const Dims& d, bool k) { return x.max(d, k); };
  if (name == "min") f = [](const Tensor& x, const Dims& d, bool k) { return x.min(d, k); };
  std::vector<Case> cs;
  uint64_t seed = 9000;
  const std::vector<std::pair<std::string, Input>> xs = {
      {"contiguous", plain(kReal({3, 4, 5}, ++seed))},
      {"permuted", viewed(kReal({5, 3, 4}, ++seed),
                          [](const Tensor& t) {
                            return t.permute({1, 2, 0});
                          })},
      {"broadcast", viewed(kReal({3, 1, 5}, ++seed), [](const Tensor& t) {
         return t.broadcast_to({3, 4, 5});
       })}};
  for (const auto& [lay, in] : xs)
    for (const Dims& dims : {Dims{}, Dims{0}, Dims{1}, Dims{2}, Dims{-1}, Dims{0, 2}, Dims{1, 2}})
      for (bool keep : {false, true})
        cs.push_back({lay + " dims " + dims.str() + (keep ? " keepdim" : ""),
                      {in},
                      [f, dims, keep](const std::vector<Tensor>& v) { return f(v[0], dims, keep); },
                      true,
                      10});
  auto over = [f](Dims d) { return [f, d](const std::vector<Tensor>& v) { return f(v[0], d, false); }; };
  cs.push_back({"large rows [3, 40000] dims [1]", {plain(kReal({3, 40000}, ++seed))}, over({1}), true, 200});
  cs.push_back({"large columns [40000, 3] dims [0]", {plain(kReal({40000, 3}, ++seed))}, over({0}), true, 200});
  cs.push_back({"0-d", {plain(kReal({}, ++seed))}, over({}), true});
  if (name == "sum") cs.push_back({"empty [0, 3] dims [0]", {plain(kReal({0, 3}, ++seed))}, over({0}), true});
  if (name != "mean") cs.push_back({"i64 [4, 6] dims [1]", {plain(ints({4, 6}, -9, 9, ++seed))}, over({1}), false});
  return cs;
}

std::vector<Case> arg_cases(bool is_max) {
  std::vector<Case> cs;
  for (int64_t dim : {0, 1, -1})
    for (bool keep : {false, true}) {
      auto call = [is_max, dim, keep](const std::vector<Tensor>& v) {
        return is_max ? v[0].argmax(dim, keep) : v[0].argmin(dim, keep);
      };
      cs.push_back({"[4, 6] dim " + std::to_string(dim) + (keep ? " keepdim" : ""),
                    {plain(kReal({4, 6}, 77 + static_cast<uint64_t>(dim + 1)))},
                    call});
      cs.push_back({"transposed dim " + std::to_string(dim),
                    {viewed(kReal({6, 4}, 80), [](const Tensor& t) { return t.t(); })},
                    call});
    }
  cs.push_back({"i64 ties dim 1", {plain(ints({4, 6}, -1, 1, 81))}, [is_max](const std::vector<Tensor>& v) {
                  return is_max ? v[0].argmax(1) : v[0].argmin(1);
                }});
  return cs;
}

std::vector<Case> softmax_cases(const std::string& name) {
  auto f = [name](const Tensor& x, int64_t dim) {
    if (name == "softmax") return x.softmax(dim);
    if (name == "log_softmax") return x.log_softmax(dim);
    return x.logsumexp(dim, dim == 0);
  };
  std::vector<Case> cs;
  const Gen g{-4, 4};
  for (int64_t dim : {0, 1, -1}) {
    auto call = [f, dim](const std::vector<Tensor>& v) { return f(v[0], dim); };
    cs.push_back({"[4, 7] dim " + std::to_string(dim), {plain(g({4, 7}, 90))}, call, true, 4});
    cs.push_back({"transposed dim " + std::to_string(dim),
                  {viewed(g({7, 4}, 91), [](const Tensor& t) { return t.t(); })},
                  call,
                  true,
                  4});
  }
  cs.push_back({"long rows [3, 5000] dim 1",
                {plain(g({3, 5000}, 92))},
                [f](const std::vector<Tensor>& v) { return f(v[0], 1); },
                true,
                20});
  cs.push_back(
      {"[0, 5] dim 1", {plain(g({0, 5}, 93))}, [f](const std::vector<Tensor>& v) { return f(v[0], 1); }, true});
  return cs;
}

std::vector<Case> index_cases(const std::string& name) {
  std::vector<Case> cs;
  const Tensor rows = from_vector<int64_t>({3, 0, 3, 1, 4, 3}, {6});  // duplicates accumulate in order
  if (name == "where") {
    auto call = [](const std::vector<Tensor>& v) { return where(v[0], v[1], v[2]); };
    Tensor mask_u8 = from_vector<uint8_t>({0, 1}, {2, 1});
    cs.push_back({"u8 mask [2, 1] x [2, 3] x [3]",
                  {plain(mask_u8, false), plain(kReal({2, 3}, 100)), plain(kReal({3}, 101))},
                  call,
                  true});
    Tensor mask_f = Gen{-1, 1}({4, 5}, 102).gt(scalar(0.0, DType::F64));
    cs.push_back({"float mask, transposed a",
                  {plain(mask_f, false), viewed(kReal({5, 4}, 103), [](const Tensor& t) { return t.t(); }),
                   plain(kReal({4, 5}, 104))},
                  call,
                  true});
  } else if (name == "index_select") {
    for (int64_t dim : {0, 1})
      cs.push_back({"[5, 6] dim " + std::to_string(dim) + " with duplicates",
                    {plain(kReal({5, 6}, 110 + static_cast<uint64_t>(dim))), plain(rows)},
                    [dim](const std::vector<Tensor>& v) { return v[0].index_select(dim, v[1]); },
                    true});
    cs.push_back({"host index",
                  {plain(kReal({5, 6}, 112)), host_scalar(rows)},
                  [](const std::vector<Tensor>& v) { return v[0].index_select(0, v[1]); },
                  true});
  } else if (name == "index_add") {
    cs.push_back({"[5, 4] dim 0 with duplicates",
                  {plain(kReal({5, 4}, 120)), plain(rows), plain(kReal({6, 4}, 121))},
                  [](const std::vector<Tensor>& v) { return v[0].index_add(0, v[1], v[2]); },
                  true});
    cs.push_back({"[4, 5] dim 1",
                  {plain(kReal({4, 5}, 122)), plain(rows), plain(kReal({4, 6}, 123))},
                  [](const std::vector<Tensor>& v) { return v[0].index_add(1, v[1], v[2]); },
                  true});
  } else if (name == "gather" || name == "scatter_add") {
    Tensor idx = ints({4, 3}, 0, 4, 130);
    if (name == "gather")
      cs.push_back({"[4, 5] dim 1",
                    {plain(kReal({4, 5}, 131)), plain(idx)},
                    [](const std::vector<Tensor>& v) { return v[0].gather(1, v[1]); },
                    true});
    else
      cs.push_back({"[4, 5] dim 1",
                    {plain(kReal({4, 5}, 132)), plain(idx), plain(kReal({4, 3}, 133))},
                    [](const std::vector<Tensor>& v) { return v[0].scatter_add(1, v[1], v[2]); },
                    true});
    Tensor idx0 = ints({6, 5}, 0, 3, 134);
    if (name == "gather")
      cs.push_back({"[4, 5] dim 0, transposed x",
                    {viewed(kReal({5, 4}, 135), [](const Tensor& t) { return t.t(); }), plain(idx0)},
                    [](const std::vector<Tensor>& v) { return v[0].gather(0, v[1]); },
                    true});
    else
      cs.push_back({"[4, 5] dim 0",
                    {plain(kReal({4, 5}, 136)), plain(idx0), plain(kReal({6, 5}, 137))},
                    [](const std::vector<Tensor>& v) { return v[0].scatter_add(0, v[1], v[2]); },
                    true});
  }
  return cs;
}

std::vector<Case> matmul_cases() {
  auto call = [](const std::vector<Tensor>& v) { return v[0].matmul(v[1]); };
  auto tr = [](const Tensor& t) { return t.transpose(-2, -1); };
  std::vector<Case> cs;
  uint64_t s = 140;
  const std::vector<std::pair<Shape, Shape>> pairs = {{{3, 4}, {4, 5}}, {{2, 3, 4}, {4, 5}}, {{2, 1, 3, 4}, {3, 4, 2}},
                                                      {{4}, {4, 5}},    {{3, 4}, {4}},       {{4}, {4}},
                                                      {{0, 4}, {4, 5}}, {{3, 0}, {0, 5}}};
  for (const auto& [sa, sb] : pairs)
    cs.push_back({sa.str() + " x " + sb.str(), {plain(kReal(sa, ++s)), plain(kReal(sb, ++s))}, call, true, 4});
  cs.push_back({"transposed x transposed [3, 4] x [4, 5]",
                {viewed(kReal({4, 3}, ++s), tr), viewed(kReal({5, 4}, ++s), tr)},
                call,
                true,
                4});
  cs.push_back({"[64, 96] x [96, 80]", {plain(kReal({64, 96}, ++s)), plain(kReal({96, 80}, ++s))}, call, true, 40});
  return cs;
}

std::vector<Case> layout_cases(const std::string& name) {
  std::vector<Case> cs;
  if (name == "contiguous") {
    auto call = [](const std::vector<Tensor>& v) { return v[0].contiguous(); };
    for (auto& [lay, in] : layouts(kReal, 150)) cs.push_back({lay, {in}, call, true});
    cs.push_back({"i64 transposed", {viewed(ints({3, 4}, -9, 9, 151), [](const Tensor& t) { return t.t(); })}, call});
  } else {  // to(dtype): float <-> i64 (exact values), float -> u8
    Tensor quarters = (ints({4, 5}, -40, 40, 152).to(DType::F64) * 0.25);
    cs.push_back(
        {"float -> i64", {plain(quarters, false)}, [](const std::vector<Tensor>& v) { return v[0].to(DType::I64); }});
    cs.push_back({"i64 -> float (transposed)",
                  {viewed(ints({5, 4}, -9, 9, 153), [](const Tensor& t) { return t.t(); })},
                  [](const std::vector<Tensor>& v) { return v[0].to(DType::F32); },
                  false,
                  1,
                  false});
    Case round_trip{"float -> f32 -> float (gradient passes through)",
                    {plain(kReal({4, 5}, 155))},
                    [](const std::vector<Tensor>& v) { return v[0].to(DType::F32).to(v[0].dtype()) * 2.0; },
                    true};
    round_trip.finite_differences = false;
    cs.push_back(round_trip);
    cs.push_back({"float -> u8",
                  {plain(ints({4, 5}, 0, 9, 154).to(DType::F64), false)},
                  [](const std::vector<Tensor>& v) { return v[0].to(DType::U8); }});
  }
  return cs;
}

std::vector<Case> fused_cases(const std::string& name) {
  std::vector<Case> cs;
  if (name == "cross_entropy") {
    const Tensor target = from_vector<int64_t>({0, 4, 2, 2, 1, 3}, {6});
    for (double ls : {0.0, 0.1}) {
      nn::CrossEntropyOptions o;
      o.label_smoothing = ls;
      auto call = [o](const std::vector<Tensor>& v) { return nn::cross_entropy(v[0], v[1], o); };
      const std::string tag = ls > 0 ? " label smoothing 0.1" : "";
      cs.push_back({"[6, 5]" + tag, {plain(Gen{-3, 3}({6, 5}, 160)), plain(target)}, call, true, 4});
      cs.push_back({"transposed [6, 5]" + tag,
                    {viewed(Gen{-3, 3}({5, 6}, 161), [](const Tensor& t) { return t.t(); }), plain(target)},
                    call,
                    true,
                    4});
    }
    nn::CrossEntropyOptions ig;
    ig.ignore_index = 2;
    cs.push_back({"[6, 5] ignore_index 2",
                  {plain(Gen{-3, 3}({6, 5}, 162)), plain(target)},
                  [ig](const std::vector<Tensor>& v) { return nn::cross_entropy(v[0], v[1], ig); },
                  true,
                  4});
    cs.push_back({"[5] one row",
                  {plain(Gen{-3, 3}({5}, 163)), plain(scalar(3, DType::I64))},
                  [](const std::vector<Tensor>& v) { return nn::cross_entropy(v[0], v[1]); },
                  true,
                  4});
  } else if (name == "conv2d") {
    namespace F = nn::functional;
    cs.push_back({"[2, 3, 6, 6] * [4, 3, 3, 3] padding 1",
                  {plain(kReal({2, 3, 6, 6}, 170)), plain(kReal({4, 3, 3, 3}, 171)), plain(kReal({4}, 172))},
                  [](const std::vector<Tensor>& v) {
                    return F::conv2d(v[0], v[1], v[2], {1, 1}, {1, 1});
                  },
                  true,
                  20});
    cs.push_back({"stride 2, dilation 2, groups 2",
                  {plain(kReal({1, 4, 9, 8}, 173)), plain(kReal({2, 2, 2, 3}, 174))},
                  [](const std::vector<Tensor>& v) {
                    return F::conv2d(v[0], v[1], {}, {2, 2}, {0, 1}, {2, 2}, 2);
                  },
                  true,
                  20});
  }
  return cs;
}

// ---- tril/triu, masked_fill, scans, sorting, splitting, statistics, repeat/flip/roll, any/all
using Call = std::function<Tensor(const std::vector<Tensor>&)>;
Tensor tr(const Tensor& t) { return t.transpose(-2, -1); }
// The inputs every case list below runs on: contiguous, a transposed view, a stride-2 slice (all [3, 4, 5]
// as the op sees them) and, for ops taking i64, an i64 tensor.
std::vector<std::pair<std::string, Input>> shaped_inputs(uint64_t seed, const Gen& g = kReal) {
  return {{"[3, 4, 5]", plain(g({3, 4, 5}, seed))},
          {"transposed [3, 4, 5]", viewed(g({3, 5, 4}, seed + 1), tr)},
          {"sliced [3, 4, 5]", viewed(g({3, 4, 10}, seed + 2), [](const Tensor& t) { return t.slice(2, 1, 10, 2); })}};
}
// Every piece scaled by its position, put back together: a piece out of place or of the wrong size fails.
Tensor reassemble(const std::vector<Tensor>& pieces, int64_t dim, bool stacked) {
  std::vector<Tensor> scaled;
  for (size_t i = 0; i < pieces.size(); ++i) scaled.push_back(pieces[i] * static_cast<double>(i + 1));
  return stacked ? stack(scaled, dim) : cat(scaled, dim);
}

std::vector<Case> structured_c_cases(const std::string& name) {
  std::vector<Case> cs;
  uint64_t seed = 20000 + 100 * static_cast<uint64_t>(std::hash<std::string>{}(name) % 97);
  // op(x) on every layout, on an empty tensor, and in i64 (forward only) where the op takes it
  auto each = [&](const std::string& what, Call call, bool grad, bool i64, double tol = 1, Shape empty = {0, 4, 5},
                  const Gen& g = kReal) {
    for (auto& [lay, in] : shaped_inputs(seed += 3, g)) cs.push_back({lay + " " + what, {in}, call, grad, tol});
    if (empty.empty() || empty[0] >= 0)  // {-1}: no empty case
      cs.push_back({empty.str() + " " + what, {plain(g(empty, ++seed))}, call, grad, tol});
    if (i64) cs.push_back({"i64 [3, 4, 5] " + what, {plain(ints({3, 4, 5}, -9, 9, ++seed))}, call, false});
  };
  if (name == "tril" || name == "triu") {
    const bool lower = name == "tril";
    for (int64_t k : {0, 1, -2, 7}) {
      Call call = [lower, k](const std::vector<Tensor>& v) { return lower ? v[0].tril(k) : v[0].triu(k); };
      each("diagonal " + std::to_string(k), call, true, true, 1, {2, 0, 3});
    }
  } else if (name == "masked_fill") {
    // the masks are inputs, so they live on the target device
    const Tensor mask = from_vector<uint8_t>({1, 0, 0, 1, 1}, {5});  // broadcast over [3, 4, 5]
    Call fill = [](const std::vector<Tensor>& v) { return v[0].masked_fill(v[1], 2.5); };
    for (auto& [lay, in] : shaped_inputs(seed += 3))
      cs.push_back({lay + " u8 mask [5], value 2.5", {in, plain(mask, false)}, fill, true});
    cs.push_back({"[0, 4, 5] u8 mask [5]", {plain(kReal({0, 4, 5}, ++seed)), plain(mask, false)}, fill, true});
    cs.push_back({"i64 [3, 4, 5] u8 mask [5]", {plain(ints({3, 4, 5}, -9, 9, ++seed)), plain(mask, false)}, fill});
    const Tensor causal = from_vector<uint8_t>({0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 0}, {4, 4});
    cs.push_back({"causal mask [4, 4] over [2, 4, 4], -inf, then softmax",
                  {plain(kReal({2, 4, 4}, ++seed)), plain(causal, false)},
                  [](const std::vector<Tensor>& v) { return v[0].masked_fill(v[1], -INFINITY).softmax(-1); },
                  true});
    cs.push_back({"mask of self's dtype, 0-d tensor value (gets the gradient)",
                  {plain(kReal({3, 4}, ++seed)), plain(kReal({}, ++seed))},
                  [](const std::vector<Tensor>& v) { return v[0].masked_fill(v[0].gt(zeros({}, v[0].dtype())), v[1]); },
                  true});
  } else if (name == "cumsum" || name == "cumprod") {
    const bool prod = name == "cumprod";
    for (int64_t dim : {0, 1, -1}) {
      Call call = [prod, dim](const std::vector<Tensor>& v) { return prod ? v[0].cumprod(dim) : v[0].cumsum(dim); };
      each("dim " + std::to_string(dim), call, true, true, 4);
    }
    cs.push_back({"long rows [2, 3000] dim 1",
                  {plain(Gen{0.999, 1.001}({2, 3000}, ++seed))},
                  [prod](const std::vector<Tensor>& v) { return prod ? v[0].cumprod(1) : v[0].cumsum(1); },
                  true,
                  100});
    cs.push_back({"0-d", {plain(kReal({}, ++seed))}, [prod](const std::vector<Tensor>& v) {
                    return prod ? v[0].cumprod(0) : v[0].cumsum(0);
                  }});
    if (prod) {  // one zero, two zeros, a zero first and last: the gradient's special cases
      Tensor z = f64({0.5, 0, 1.5, -2, 0.7, 0, 0, 1.2, 0, 1.1, -0.9, 1.3, 0.8, 1.4, -1.1, 0}, {4, 4});
      for (int64_t dim : {0, 1})
        cs.push_back({"zeros in the input, dim " + std::to_string(dim),
                      {plain(z)},
                      [dim](const std::vector<Tensor>& v) { return v[0].cumprod(dim); },
                      true});
    }
  } else if (name == "sort" || name == "argsort" || name == "topk") {
    for (int64_t dim : {0, 1, -1})
      for (bool desc : {false, true}) {
        const std::string tag = "dim " + std::to_string(dim) + (desc ? " descending" : "");
        if (name == "sort") {
          each(
              tag + " values", [dim, desc](const std::vector<Tensor>& v) { return std::get<0>(v[0].sort(dim, desc)); },
              true, true);
          each(
              tag + " indices", [dim, desc](const std::vector<Tensor>& v) { return std::get<1>(v[0].sort(dim, desc)); },
              false, true);
        } else if (name == "argsort") {
          each(
              tag, [dim, desc](const std::vector<Tensor>& v) { return v[0].argsort(dim, desc); }, false, true);
        } else {
          const bool largest = !desc;
          each("k 2 " + tag + (largest ? " largest" : " smallest") + " values",
               [dim, largest](const std::vector<Tensor>& v) { return std::get<0>(v[0].topk(2, dim, largest)); }, true,
               true, 1, {-1});
          each("k 2 " + tag + (largest ? " largest" : " smallest") + " indices",
               [dim, largest](const std::vector<Tensor>& v) { return std::get<1>(v[0].topk(2, dim, largest)); }, false,
               true, 1, {-1});
        }
      }
    // ties keep their order (stable), NaN is the largest
    Tensor ties = f64({1, NAN, 0, 1, 2, 0, NAN, 1}, {8});
    for (bool desc : {false, true}) {
      Call idx = [name, desc](const std::vector<Tensor>& v) {
        return name == "topk" ? std::get<1>(v[0].topk(5, 0, desc)) : v[0].argsort(0, desc);
      };
      cs.push_back({std::string("ties and NaN") + (desc ? " descending" : ""), {plain(ties, false)}, idx});
    }
    if (name == "topk")
      cs.push_back({"k 0 [3, 4]", {plain(kReal({3, 4}, ++seed))}, [](const std::vector<Tensor>& v) {
                      return std::get<0>(v[0].topk(0, 1));
                    }});
  } else if (name == "chunk" || name == "split" || name == "unbind") {
    for (int64_t dim : {0, 1, -1}) {
      const std::string tag = " dim " + std::to_string(dim);
      if (name == "chunk") {
        for (int64_t n : {1, 2, 3, 7})
          each(std::to_string(n) + " chunks" + tag,
               [n, dim](const std::vector<Tensor>& v) { return reassemble(v[0].chunk(n, dim), dim, false); }, true,
               true, 1, {3, 0, 5});
      } else if (name == "split") {
        for (int64_t size : {1, 2, 3})
          each("size " + std::to_string(size) + tag,
               [size, dim](const std::vector<Tensor>& v) { return reassemble(v[0].split(size, dim), dim, false); },
               true, true, 1, {3, 0, 5});
        each("sizes [1, 0, 2]" + tag,
             [dim](const std::vector<Tensor>& v) {
               const int64_t n = v[0].size(dim);
               return reassemble(v[0].split(std::vector<int64_t>{1, 0, n - 1}, dim), dim, false);
             },
             true, true, 1, {3, 4, 5});
      } else {
        each(
            "unbind" + tag, [dim](const std::vector<Tensor>& v) { return reassemble(v[0].unbind(dim), dim, true); },
            true, true, 1, dim == 1 ? Shape{0, 4, 5} : Shape{3, 0, 5});
      }
    }
  } else if (name == "var" || name == "std") {
    const bool is_std = name == "std";
    for (const Dims& dims : {Dims{}, Dims{1}, Dims{0, 2}, Dims{-1}})
      for (double corr : {1.0, 0.0, 2.0})
        for (bool keep : {false, true}) {
          Call call = [is_std, dims, corr, keep](const std::vector<Tensor>& v) {
            return is_std ? v[0].std(dims, corr, keep) : v[0].var(dims, corr, keep);
          };
          std::string tag =
              "dims " + dims.str() + " correction " + std::to_string(static_cast<int>(corr)) + (keep ? " keepdim" : "");
          for (auto& [lay, in] : shaped_inputs(seed += 3)) cs.push_back({lay + " " + tag, {in}, call, true, 10});
        }
    cs.push_back({"empty [0, 3] dims [1]", {plain(kReal({0, 3}, ++seed))}, [is_std](const std::vector<Tensor>& v) {
                    return is_std ? v[0].std({1}) : v[0].var({1});
                  }});
    cs.push_back({"large [3, 20000] dims [1]",
                  {plain(kReal({3, 20000}, ++seed))},
                  [is_std](const std::vector<Tensor>& v) { return is_std ? v[0].std(1) : v[0].var(1); },
                  true,
                  100});
  } else if (name == "norm") {
    for (double p : {2.0, 1.0, double(INFINITY), -double(INFINITY), 3.0, 0.0})
      for (const Dims& dims : {Dims{}, Dims{1}, Dims{0, 2}})
        for (bool keep : {false, true}) {
          // away from 0 and from ties: the 1- and inf-norms have kinks there
          // values away from 0 (the 1-norm's kink); the empty case reduces a non-empty extent for the inf-norms
          const bool inf_empty = std::isinf(p) && (dims.empty() || dims[0] == 0);
          each(
              "p " + std::to_string(p) + " dims " + dims.str() + (keep ? " keepdim" : ""),
              [p, dims, keep](const std::vector<Tensor>& v) { return v[0].norm(p, dims, keep); }, p != 0, false, 10,
              !inf_empty     ? Shape{0, 4, 5}
              : dims.empty() ? Shape{-1}
                             : Shape{3, 0, 5},
              p < 0 ? Gen{0.3, 2} : Gen{-2, 2, true});  // the kink-avoiding values tie at 0.25: the -inf-norm's
        }
    cs.push_back({"2-norm of a zero row (gradient 0)",
                  {plain(f64({0, 0, 0, 1, -2, 2}, {2, 3}))},
                  [](const std::vector<Tensor>& v) { return v[0].norm(2, {1}); },
                  true});
  } else if (name == "repeat" || name == "tile") {
    const bool tile = name == "tile";
    for (const Shape& r : {Shape{1, 1, 1}, Shape{2, 1, 3}, Shape{2, 1, 1, 2}, Shape{2, 0, 1}, Shape{3}, Shape{}}) {
      if (!tile && r.size() < 3) continue;
      each(
          "repeats " + r.str(),
          [r, tile](const std::vector<Tensor>& v) { return tile ? v[0].tile(r) : v[0].repeat(r); }, true, true, 4);
    }
  } else if (name == "flip" || name == "roll") {
    if (name == "flip") {
      for (const Dims& dims : {Dims{0}, Dims{-1}, Dims{0, 2}, Dims{}})
        each(
            "dims " + dims.str(), [dims](const std::vector<Tensor>& v) { return v[0].flip(dims); }, true, true);
    } else {
      // A pair, not a structured binding: clang 14 cannot capture bindings in a lambda.
      for (const auto& sd : std::vector<std::pair<Dims, Dims>>{
               {{1}, {0}}, {{-2}, {-1}}, {{7}, {1}}, {{1, -3}, {0, 2}}, {{3}, {}}, {{-25}, {}}})
        each(
            "shifts " + sd.first.str() + " dims " + sd.second.str(),
            [sd](const std::vector<Tensor>& v) { return v[0].roll(sd.first, sd.second); }, true, true);
    }
  } else if (name == "any" || name == "all") {
    const bool any = name == "any";
    // mostly zeros, some NaN: both answers occur
    std::vector<double> v = uniform_values({3, 4, 5}, 0, 1, ++seed);
    for (size_t i = 0; i < v.size(); ++i) v[i] = v[i] < 0.8 ? (any ? 0.0 : 1.5) : (i % 7 == 0 ? NAN : (any ? 1 : 0));
    Tensor x = f64(v, {3, 4, 5});
    std::vector<int64_t> vi(v.size());
    for (size_t i = 0; i < v.size(); ++i) vi[i] = std::isnan(v[i]) ? 3 : static_cast<int64_t>(v[i] * 2);
    const Tensor xi = from_vector<int64_t>(vi, {3, 4, 5});
    for (const Dims& dims : {Dims{}, Dims{1}, Dims{0, 2}, Dims{-1}})
      for (bool keep : {false, true}) {
        Call call = [any, dims, keep](const std::vector<Tensor>& t) {
          return any ? t[0].any(dims, keep) : t[0].all(dims, keep);
        };
        const std::string tag = "dims " + dims.str() + (keep ? " keepdim" : "");
        cs.push_back({tag, {plain(x, false)}, call});
        cs.push_back({"transposed " + tag, {viewed(x.transpose(1, 2).contiguous(), tr)}, call});
        cs.push_back({"i64 " + tag, {plain(xi)}, call});
      }
    cs.push_back({"empty [0, 3] dims [0]", {plain(kReal({0, 3}, ++seed), false)}, [any](const std::vector<Tensor>& t) {
                    return any ? t[0].any({0}) : t[0].all({0});
                  }});
  }
  return cs;
}

const std::map<std::string, Builder>& structured_builders() {
  static const std::map<std::string, Builder> m = {
      {"sum", [](const OpInfo& o) { return reduction_cases(o.name); }},
      {"mean", [](const OpInfo& o) { return reduction_cases(o.name); }},
      {"max", [](const OpInfo& o) { return reduction_cases(o.name); }},
      {"min", [](const OpInfo& o) { return reduction_cases(o.name); }},
      {"argmax", [](const OpInfo&) { return arg_cases(true); }},
      {"argmin", [](const OpInfo&) { return arg_cases(false); }},
      {"softmax", [](const OpInfo& o) { return softmax_cases(o.name); }},
      {"log_softmax", [](const OpInfo& o) { return softmax_cases(o.name); }},
      {"logsumexp", [](const OpInfo& o) { return softmax_cases(o.name); }},
      {"where", [](const OpInfo& o) { return index_cases(o.name); }},
      {"index_select", [](const OpInfo& o) { return index_cases(o.name); }},
      {"index_add", [](const OpInfo& o) { return index_cases(o.name); }},
      {"gather", [](const OpInfo& o) { return index_cases(o.name); }},
      {"scatter_add", [](const OpInfo& o) { return index_cases(o.name); }},
      {"matmul", [](const OpInfo&) { return matmul_cases(); }},
      {"contiguous", [](const OpInfo& o) { return layout_cases(o.name); }},
      {"to", [](const OpInfo& o) { return layout_cases(o.name); }},
      {"cross_entropy", [](const OpInfo& o) { return fused_cases(o.name); }},
      {"conv2d", [](const OpInfo& o) { return fused_cases(o.name); }},
      {"tril", [](const OpInfo& o) { return structured_c_cases(o.name); }},
      {"triu", [](const OpInfo& o) { return structured_c_cases(o.name); }},
      {"masked_fill", [](const OpInfo& o) { return structured_c_cases(o.name); }},
      {"cumsum", [](const OpInfo& o) { return structured_c_cases(o.name); }},
      {"cumprod", [](const OpInfo& o) { return structured_c_cases(o.name); }},
      {"sort", [](const OpInfo& o) { return structured_c_cases(o.name); }},
      {"argsort", [](const OpInfo& o) { return structured_c_cases(o.name); }},
      {"topk", [](const OpInfo& o) { return structured_c_cases(o.name); }},
      {"chunk", [](const OpInfo& o) { return structured_c_cases(o.name); }},
      {"split", [](const OpInfo& o) { return structured_c_cases(o.name); }},
      {"unbind", [](const OpInfo& o) { return structured_c_cases(o.name); }},
      {"var", [](const OpInfo& o) { return structured_c_cases(o.name); }},
      {"std", [](const OpInfo& o) { return structured_c_cases(o.name); }},
      {"norm", [](const OpInfo& o) { return structured_c_cases(o.name); }},
      {"repeat", [](const OpInfo& o) { return structured_c_cases(o.name); }},
      {"tile", [](const OpInfo& o) { return structured_c_cases(o.name); }},
      {"flip", [](const OpInfo& o) { return structured_c_cases(o.name); }},
      {"roll", [](const OpInfo& o) { return structured_c_cases(o.name); }},
      {"any", [](const OpInfo& o) { return structured_c_cases(o.name); }},
      {"all", [](const OpInfo& o) { return structured_c_cases(o.name); }},
  };
  return m;
}

// ---------------------------------------------------------------- the runner
struct Prepared {
  std::vector<Tensor> leaves, views;
};
Prepared prepare(const Case& c, DType dt, Device dev, bool track) {
  Prepared p;
  for (const Input& in : c.inputs) {
    Tensor s = in.stored;
    if (is_floating(s.dtype()) && c.cast_floats) s = s.to(dt);
    if (!in.host_scalar) s = s.to(dev);
    s = s.detach();  // a fresh leaf, even when no conversion happened
    if (track && in.grad && is_floating(s.dtype())) s.requires_grad_();
    p.views.push_back(in.view ? in.view(s) : s);
    p.leaves.push_back(std::move(s));
  }
  return p;
}

bool has_float_input(const Case& c) {
  for (const Input& in : c.inputs)
    if (is_floating(in.stored.dtype())) return true;
  return false;
}

void run_case(const std::string& op, const Case& c, const Target& t, DType dt) {
  const std::string what = op + " " + c.name + " " + dtype_name(dt) + " on " + t.device.str();
  const double rtol = (dt == DType::F64 ? 1e-10 : 2e-5) * c.tol, atol = (dt == DType::F64 ? 1e-12 : 2e-6) * c.tol;
  Prepared ref = prepare(c, DType::F64, Device::cpu(), c.grad);
  Tensor want = c.call(ref.views);
  Prepared got = prepare(c, dt, t.device, c.grad);
  Tensor out;
  try {
    out = c.call(got.views);
  } catch (const Error& e) {
    ADD_FAILURE() << what << ": " << e.what();
    return;
  }
  ASSERT_EQ(out.device(), t.device) << what;
  ASSERT_EQ(out.shape(), want.shape()) << what;
  const DType want_dtype = is_floating(want.dtype()) && has_float_input(c) && c.cast_floats ? dt : want.dtype();
  ASSERT_EQ(out.dtype(), want_dtype) << what;
  Tensor out_host = out.to(Device::cpu());
  if (is_floating(want.dtype()))
    expect_close(values(out_host), values(want), rtol, atol, what);
  else
    EXPECT_EQ(values(out_host.to(DType::F64)), values(want.to(DType::F64))) << what;
  if (!c.grad || !want.requires_grad()) return;
  Tensor seed = randn(want.shape(), 4242, DType::F64);
  want.backward(seed);
  out.backward(seed.to(dt).to(t.device));
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (!ref.leaves[i].requires_grad()) continue;
    const Tensor gw = ref.leaves[i].grad(), gg = got.leaves[i].grad();
    ASSERT_EQ(gg.defined(), gw.defined()) << what << " gradient of input " << i;
    if (!gw.defined()) continue;
    ASSERT_EQ(gg.device(), t.device) << what << " gradient of input " << i;
    expect_close(values(gg.to(Device::cpu())), values(gw), rtol * 5, atol * 5,
                 what + " gradient of input " + std::to_string(i));
  }
}

// Finite differences in f64 on the CPU (small cases: the cost is two evaluations per element) of the gradients
// (order 1: gradcheck) or of the gradients' own gradients (order 2: gradgradcheck, create_graph = true).
void finite_difference_case(const std::string& op, const Case& c, int order) {
  Prepared p = prepare(c, DType::F64, Device::cpu(), true);
  std::vector<Tensor> diff;
  int64_t numel = 0;
  for (const Tensor& l : p.leaves)
    if (l.requires_grad()) {
      diff.push_back(l);
      numel += l.numel();
    }
  if (diff.empty() || numel > (order == 1 ? 400 : 200)) return;
  auto f = [&](const std::vector<Tensor>& v) {
    std::vector<Tensor> views;
    size_t k = 0;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      const Tensor& leaf = p.leaves[i].requires_grad() ? v[k++] : p.leaves[i];
      views.push_back(c.inputs[i].view ? c.inputs[i].view(leaf) : leaf);
    }
    return c.call(views);
  };
  GradcheckResult r = order == 1 ? gradcheck(f, diff) : gradgradcheck(f, diff);
  EXPECT_TRUE(r.ok) << op << " " << c.name << ": " << r.message;
}

class Conformance : public ::testing::TestWithParam<const OpInfo*> {};
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ConformanceGradcheck);  // instantiated by the CPU suite only
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ConformanceGradgradcheck);

TEST_P(Conformance, ForwardAndGradientsMatchTheCpuInF64) {
  const Target t = conformance_target();
  if (!t.skip_reason.empty()) GTEST_SKIP() << t.skip_reason;
  const OpInfo& op = *GetParam();
  const std::vector<Case> cs = cases_for(op);
  ASSERT_FALSE(cs.empty()) << op.name << " has no conformance cases";
  int ran = 0;
  for (const Case& c : cs) {
    if (!has_float_input(c) || !c.cast_floats) {  // one run: no dtype to vary
      bool needs_ints = false;
      for (const Input& in : c.inputs) needs_ints |= in.stored.dtype() == DType::I64 && !in.host_scalar;
      if (needs_ints && !t.ints) continue;
      run_case(op.name, c, t, DType::F64);
      ++ran;
      continue;
    }
    for (DType dt : t.float_dtypes) {
      run_case(op.name, c, t, dt);
      ++ran;
    }
  }
  EXPECT_GT(ran, 0) << op.name;
}

TEST_P(ConformanceGradcheck, FiniteDifferencesInF64OnTheCpu) {
  const OpInfo& op = *GetParam();
  if (!op.differentiable) GTEST_SKIP() << op.name << " is not differentiable";
  int checked = 0, compared = 0;
  for (const Case& c : cases_for(op)) {
    if (!c.grad || !has_float_input(c)) continue;
    ++compared;
    if (!c.finite_differences) continue;
    finite_difference_case(op.name, c, 1);
    ++checked;
  }
  ASSERT_GT(compared, 0) << op.name << " is differentiable but no case checks its gradient";
  if (checked == 0) GTEST_SKIP() << op.name << ": gradients compared with the f64 CPU only (no finite differences)";
}

TEST_P(ConformanceGradgradcheck, SecondDerivativesByFiniteDifferencesInF64OnTheCpu) {
  const OpInfo& op = *GetParam();
  if (!op.differentiable) GTEST_SKIP() << op.name << " is not differentiable";
  int checked = 0;
  for (const Case& c : cases_for(op)) {
    if (!c.grad || !has_float_input(c) || !c.finite_differences) continue;
    finite_difference_case(op.name, c, 2);
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << op.name << ": no case with finite differences";
}

// Every entry carries what the generated code and the tests need; every entry has conformance cases.
TEST(Registry, EveryEntryHasItsFactsAndCases) {
  size_t n = 0;
  for (const OpInfo* e : registry_entries()) {
    const std::string name = e->name;
    ++n;
    EXPECT_FALSE(name.empty());
    EXPECT_NE(std::string(e->torch), "") << name << " has no torch expression";
    EXPECT_NE(std::string(e->doc), "") << name << " has no doc line";
    if (e->kind == OpKind::Unary || e->kind == OpKind::Binary) {
      EXPECT_NE(std::string(e->reference), "") << name << " has no f64 reference";
      for (int i = 0; i < (e->kind == OpKind::Unary ? 1 : 2); ++i)
        EXPECT_LT(e->lo[i], e->hi[i]) << name << " has an empty domain for operand " << i;
    }
    EXPECT_FALSE(cases_for(*e).empty()) << name << " has no conformance cases";
    EXPECT_EQ(ops::find_op(name), e) << name << " is not unique or not found by name";
  }
  EXPECT_EQ(n, ops::unary_ops().size() + ops::binary_ops().size() + ops::structured_ops().size());
  EXPECT_EQ(static_cast<size_t>(ops::UnaryOp::Count), ops::unary_ops().size());
  EXPECT_EQ(static_cast<size_t>(ops::BinaryOp::Count), ops::binary_ops().size());
}

INSTANTIATE_TEST_SUITE_P(Registry, Conformance, ::testing::ValuesIn(registry_entries()), registry_entry_name);

}  // namespace

std::vector<const ops::OpInfo*> registry_entries() {
  std::vector<const OpInfo*> v;
  for (auto table : {ops::unary_ops(), ops::binary_ops(), ops::structured_ops()})
    for (const OpInfo& e : table) v.push_back(&e);
  return v;
}
std::string registry_entry_name(const ::testing::TestParamInfo<const ops::OpInfo*>& p) {
  const char* kind = p.param->kind == OpKind::Unary ? "unary_" : p.param->kind == OpKind::Binary ? "binary_" : "";
  return std::string(kind) + p.param->name;
}

std::vector<Case> cases_for(const ops::OpInfo& op) {
  if (op.kind == OpKind::Unary) return unary_cases(op);
  if (op.kind == OpKind::Binary) return binary_cases(op);
  auto it = structured_builders().find(op.name);
  return it == structured_builders().end() ? std::vector<Case>{} : it->second(op);
}

}  // namespace oxc
