// Every op of the op table against a plain f64 reference, on contiguous, broadcast, non-contiguous
// (transposed, sliced, stride-0) and empty inputs.
#include <algorithm>
#include <map>

#include "ops/op_defs.hpp"
#include "ops/ops_internal.hpp"
#include "test_util.hpp"

using namespace oxt;

namespace {

struct UnaryRef {
  std::function<double(double)> f;
  double lo, hi;  // input domain used for random tests
};

// The registry's independent f64 references (its `ref` column) and domains, keyed by name.
const std::map<std::string, UnaryRef>& unary_refs() {
  static const std::map<std::string, UnaryRef> m = {
#define OXM_X(id, name, api, dtypes, grad, cost, lo, hi, params, ref, ...) \
  {#name, {[](double x) -> double { OXM_PARAM_LOCALS(params) return ref; }, lo, hi}},
      OXMERA_UNARY_OPS(OXM_X)
#undef OXM_X
  };
  return m;
}

const std::map<std::string, std::function<double(double, double)>>& binary_refs() {
  static const std::map<std::string, std::function<double(double, double)>> m = {
#define OXM_X(id, name, api, dtypes, grad, cost, alo, ahi, blo, bhi, ref, ...) \
  {#name, [](double a, double b) -> double { return ref; }},
      OXMERA_BINARY_OPS(OXM_X)
#undef OXM_X
  };
  return m;
}

// The registry's entries with std::string names (for messages).
struct OpEntry {
  std::string name;
  bool ints, differentiable;
  double lo[2], hi[2];
};
std::vector<OpEntry> entries(std::span<const ops::OpInfo> table) {
  std::vector<OpEntry> v;
  for (const ops::OpInfo& e : table)
    v.push_back({e.name, e.ints, e.differentiable, {e.lo[0], e.lo[1]}, {e.hi[0], e.hi[1]}});
  return v;
}
std::vector<OpEntry> unary_table() { return entries(ops::unary_ops()); }
std::vector<OpEntry> binary_table() { return entries(ops::binary_ops()); }

Tensor call_unary(const std::string& name, const Tensor& x) {
  const ops::OpInfo* op = ops::find_op(name);
  return ops::unary(static_cast<ops::UnaryOp>(op->id), x);
}
Tensor call_binary(const std::string& name, const Tensor& a, const Tensor& b) {
  const ops::OpInfo* op = ops::find_op(name);
  return ops::binary(static_cast<ops::BinaryOp>(op->id), a, b);
}

// Uniform values in [lo, hi) as a tensor of `dtype`.
Tensor uniform(const Shape& s, double lo, double hi, uint64_t seed, DType dtype) {
  return (rand(s, seed, DType::F64) * (hi - lo) + lo).to(dtype);
}

// Input layouts every elementwise op is run on: name -> tensor of logical shape `s` built differently.
std::vector<std::pair<std::string, Tensor>> layouts(const Shape& s, double lo, double hi, uint64_t seed, DType dt) {
  std::vector<std::pair<std::string, Tensor>> v;
  v.push_back({"contiguous", uniform(s, lo, hi, seed, dt)});
  if (s.size() == 2) {
    v.push_back({"transposed", uniform({s[1], s[0]}, lo, hi, seed + 1, dt).t()});
    v.push_back({"sliced", uniform({s[0], 2 * s[1] + 1}, lo, hi, seed + 2, dt).slice(1, 1, 2 * s[1] + 1, 2)});
    v.push_back({"stride0", uniform({1, s[1]}, lo, hi, seed + 3, dt).broadcast_to(s)});
  }
  return v;
}

double tol_for(DType dt) { return dt == DType::F64 ? 1e-12 : 2e-6; }

}  // namespace

TEST(OpTable, NamesComeFromTheRegistry) {
  EXPECT_STREQ(ops::unary_name(ops::UnaryOp::Gelu), "gelu");
  EXPECT_STREQ(ops::binary_name(ops::BinaryOp::Maximum), "maximum");
  EXPECT_STREQ(ops::defs::Tanh::name, "tanh");
  EXPECT_EQ(ops::defs::Tanh::id, ops::UnaryOp::Tanh);
  EXPECT_TRUE(ops::defs::Abs::ints);
  EXPECT_FALSE(ops::defs::Eq::diff);
  EXPECT_EQ(ops::find_op("logsumexp")->kind, ops::OpKind::Reduction);
  EXPECT_EQ(ops::find_op("no_such_op"), nullptr);
}

TEST(UnaryOps, AgainstF64Reference) {
  uint64_t seed = 10;
  for (const auto& op : unary_table()) {
    const UnaryRef& ref = unary_refs().at(op.name);
    for (DType dt : {DType::F32, DType::F64}) {
      for (const Shape& s : {Shape{5, 7}, Shape{}, Shape{0, 3}, Shape{40000}}) {
        for (auto& [layout, x] : layouts(s, ref.lo, ref.hi, ++seed, dt)) {
          Tensor y = call_unary(op.name, x);
          EXPECT_EQ(y.shape(), s);
          EXPECT_EQ(y.dtype(), dt);
          std::vector<double> in = values(x), want(in.size());
          std::transform(in.begin(), in.end(), want.begin(), ref.f);
          expect_close(values(y), want, tol_for(dt), tol_for(dt),
                       op.name + " " + dtype_name(dt) + " " + s.str() + " " + layout);
        }
      }
    }
    Tensor xi = from_vector<int64_t>({-3, 0, 4}, {3});
    if (op.ints) {
      std::vector<int64_t> got = call_unary(op.name, xi).to_vector<int64_t>();
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_EQ(got[i], static_cast<int64_t>(ref.f(static_cast<double>(xi.to_vector<int64_t>()[i])))) << op.name;
    } else {
      EXPECT_OXM_ERROR(call_unary(op.name, xi), UnsupportedDType, op.name);
    }
    EXPECT_OXM_ERROR(call_unary(op.name, ones({2}, DType::U8)), UnsupportedDType, "u8");
  }
}

TEST(UnaryOps, SpecialValues) {
  Tensor x = from_vector<double>({NAN, INFINITY, -INFINITY, 0.0, -0.0}, {5});
  auto r = x.relu().to_vector<double>();
  EXPECT_TRUE(std::isnan(r[0]));
  EXPECT_EQ(r[1], INFINITY);
  EXPECT_EQ(r[2], 0.0);
  auto s = x.sigmoid().to_vector<double>();
  EXPECT_EQ(s[1], 1.0);
  EXPECT_EQ(s[2], 0.0);
  EXPECT_TRUE(std::isnan(x.sign().to_vector<double>()[0]));
  // torch's 1 / (1 + e^-x): 0 once e^100 overflows f32 (the exact value, 3.8e-44, is subnormal); exact above.
  EXPECT_EQ(from_vector<float>({-100.f}, {1}).sigmoid().item<float>(), 1.f / (1.f + std::exp(100.f)));
  EXPECT_EQ(from_vector<float>({-80.f}, {1}).sigmoid().item<float>(), 1.f / (1.f + std::exp(80.f)));
  EXPECT_GT(from_vector<float>({-80.f}, {1}).sigmoid().item<float>(), 0.f);
}

TEST(BinaryOps, AgainstF64ReferenceWithBroadcasting) {
  const std::vector<std::pair<Shape, Shape>> pairs = {{{5, 7}, {5, 7}}, {{3, 1, 4}, {2, 4}}, {{4}, {}},
                                                      {{}, {2, 3}},     {{0, 3}, {1, 3}},    {{2, 1}, {1, 3}},
                                                      {{6000}, {6000}}};
  uint64_t seed = 100;
  for (const auto& op : binary_table()) {
    const auto& ref = binary_refs().at(op.name);
    for (DType dt : {DType::F32, DType::F64}) {
      for (const auto& [sa, sb] : pairs) {
        Tensor a = uniform(sa, op.lo[0], op.hi[0], ++seed, dt);
        Tensor b = uniform(sb, op.lo[1], op.hi[1], ++seed, dt);
        if (!op.differentiable) {
          // Make ties likely: round to halves.
          a = ((a * 2.0).to(DType::I64).to(dt)) / 2.0;
          b = ((b * 2.0).to(DType::I64).to(dt)) / 2.0;
        }
        Tensor y = call_binary(op.name, a, b);
        Shape so = broadcast_shapes(sa, sb, "test");
        ASSERT_EQ(y.shape(), so) << op.name;
        auto va = values(a), vb = values(b);
        std::vector<double> want(static_cast<size_t>(so.product()));
        for (int64_t i = 0; i < so.product(); ++i)
          want[i] = ref(va[bcast_index(i, so, sa)], vb[bcast_index(i, so, sb)]);
        expect_close(values(y), want, tol_for(dt) * 4, tol_for(dt) * 4,
                     op.name + " " + dtype_name(dt) + " " + sa.str() + " x " + sb.str());
      }
      // Non-contiguous operands of the same logical shape.
      for (auto& [la, a] : layouts({6, 5}, op.lo[0], op.hi[0], ++seed, dt)) {
        for (auto& [lb, b] : layouts({6, 5}, op.lo[1], op.hi[1], ++seed, dt)) {
          Tensor y = call_binary(op.name, a, b);
          auto va = values(a), vb = values(b);
          std::vector<double> want(va.size());
          for (size_t i = 0; i < va.size(); ++i) want[i] = ref(va[i], vb[i]);
          expect_close(values(y), want, tol_for(dt) * 4, tol_for(dt) * 4, op.name + " " + la + " x " + lb);
        }
      }
    }
    if (op.ints) {
      Tensor a = from_vector<int64_t>({-3, 5, 7}, {3}), b = from_vector<int64_t>({2, 5, -1}, {3});
      auto got = call_binary(op.name, a, b).to_vector<int64_t>();
      for (int i = 0; i < 3; ++i)
        EXPECT_EQ(got[i],
                  static_cast<int64_t>(ref(double(a.to_vector<int64_t>()[i]), double(b.to_vector<int64_t>()[i]))))
            << op.name;
    }
    EXPECT_OXM_ERROR(call_binary(op.name, ones({2}), ones({2}, DType::F64)), DTypeMismatch, "f32 and f64");
    EXPECT_OXM_ERROR(call_binary(op.name, ones({2}), ones({3})), BroadcastIncompatible, op.name);
  }
}

TEST(BinaryOps, ScalarFormsAndOperators) {
  Tensor a = from_vector<double>({1, 2, 4}, {3});
  EXPECT_EQ((a + 1.0).to_vector<double>(), std::vector<double>({2, 3, 5}));
  EXPECT_EQ((1.0 - a).to_vector<double>(), std::vector<double>({0, -1, -3}));
  EXPECT_EQ((a * 2.0).to_vector<double>(), std::vector<double>({2, 4, 8}));
  EXPECT_EQ((4.0 / a).to_vector<double>(), std::vector<double>({4, 2, 1}));
  EXPECT_EQ((a / 2.0).to_vector<double>(), std::vector<double>({0.5, 1, 2}));
  EXPECT_EQ((-a).to_vector<double>(), std::vector<double>({-1, -2, -4}));
  EXPECT_EQ(a.pow(2.0).to_vector<double>(), std::vector<double>({1, 4, 16}));
  EXPECT_EQ(a.pow(0.5).to_vector<double>()[3 - 1], 2.0);
  EXPECT_EQ(a.clamp(1.5, 3).to_vector<double>(), std::vector<double>({1.5, 2, 3}));
  EXPECT_OXM_ERROR(a.clamp(2, 1), InvalidArgument, "clamp");
  Tensor i = from_vector<int64_t>({7, -7}, {2});
  EXPECT_EQ((i + 1.0).to_vector<int64_t>(), std::vector<int64_t>({8, -6}));
  EXPECT_OXM_ERROR(i / 2.0, UnsupportedDType, "div");
}

TEST(BinaryOps, NaNPropagationAndWhere) {
  Tensor a = from_vector<float>({NAN, 1, 3}, {3}), b = from_vector<float>({0, NAN, 2}, {3});
  auto mx = maximum(a, b).to_vector<float>(), mn = minimum(a, b).to_vector<float>();
  EXPECT_TRUE(std::isnan(mx[0]) && std::isnan(mx[1]));
  EXPECT_EQ(mx[2], 3.f);
  EXPECT_TRUE(std::isnan(mn[0]) && std::isnan(mn[1]));
  EXPECT_EQ(mn[2], 2.f);
  Tensor m = from_vector<float>({1, 0, 1}, {3});
  EXPECT_EQ(where(m, ones({3}), zeros({3})).to_vector<float>(), std::vector<float>({1, 0, 1}));
  Tensor mu8 = from_vector<uint8_t>({0, 1}, {2, 1});
  Tensor w = where(mu8, from_vector<float>({1, 2, 3}, {3}), scalar(-1.0));
  EXPECT_EQ(w.shape(), Shape({2, 3}));
  EXPECT_EQ(w.to_vector<float>(), std::vector<float>({-1, -1, -1, 1, 2, 3}));
  EXPECT_OXM_ERROR(where(ones({3}, DType::F64), ones({3}), ones({3})), DTypeMismatch, "mask");
  EXPECT_OXM_ERROR(where(ones({3}), ones({3}), ones({3}, DType::F64)), DTypeMismatch, "where");
}

// ---------------------------------------------------------------- reductions
namespace {
// Reference reduction of x (shape s, values v) over mask; returns keepdim-shaped values.
std::vector<double> ref_reduce(const std::vector<double>& v, const Shape& s, uint64_t mask, const std::string& op) {
  Shape keep = s;
  for (size_t d = 0; d < s.size(); ++d)
    if (mask >> d & 1) keep[d] = 1;
  const int64_t M = keep.product();
  std::vector<double> out(static_cast<size_t>(M));
  std::vector<int64_t> cnt(static_cast<size_t>(M), 0);
  for (int64_t i = 0; i < M; ++i) out[i] = op == "max" ? -INFINITY : (op == "min" ? INFINITY : 0.0);
  auto st = rm_strides(s), kst = rm_strides(keep);
  for (int64_t i = 0; i < s.product(); ++i) {
    int64_t o = 0;
    for (size_t d = 0; d < s.size(); ++d)
      if (!(mask >> d & 1)) o += ((i / st[d]) % s[d]) * kst[d];
    double x = v[i];
    if (op == "sum" || op == "mean") out[o] += x;
    if (op == "max") out[o] = (std::isnan(x) || std::isnan(out[o])) ? NAN : std::max(out[o], x);
    if (op == "min") out[o] = (std::isnan(x) || std::isnan(out[o])) ? NAN : std::min(out[o], x);
    ++cnt[o];
  }
  if (op == "mean")
    for (int64_t i = 0; i < M; ++i) out[i] /= static_cast<double>(cnt[i]);
  return out;
}
Tensor call_reduce(const std::string& op, const Tensor& x, const Dims& dims, bool keep) {
  if (op == "sum") return x.sum(dims, keep);
  if (op == "mean") return x.mean(dims, keep);
  if (op == "max") return x.max(dims, keep);
  return x.min(dims, keep);
}
}  // namespace

TEST(Reductions, AgainstReferenceOverDimSets) {
  const std::vector<Dims> dim_sets = {{}, {0}, {1}, {2}, {-1}, {0, 2}, {1, 2}, {0, 1, 2}, {2, 0}};
  uint64_t seed = 500;
  for (const std::string op : {"sum", "mean", "max", "min"}) {
    for (DType dt : {DType::F32, DType::F64}) {
      for (int layout = 0; layout < 3; ++layout) {
        Tensor x = layout == 0   ? uniform({3, 4, 5}, -2, 2, ++seed, dt)
                   : layout == 1 ? uniform({5, 3, 4}, -2, 2, ++seed, dt).permute({1, 2, 0})
                                 : uniform({3, 1, 5}, -2, 2, ++seed, dt).broadcast_to({3, 4, 5});
        auto v = values(x);
        for (const Dims& dims : dim_sets) {
          for (bool keep : {false, true}) {
            Tensor y = call_reduce(op, x, dims, keep);
            uint64_t mask = 0;
            if (dims.empty()) mask = 7;
            for (int64_t d : dims) mask |= uint64_t{1} << ((d + 3) % 3);
            Shape want_shape;
            for (int d = 0; d < 3; ++d) {
              if (!(mask >> d & 1))
                want_shape.push_back(x.shape()[d]);
              else if (keep)
                want_shape.push_back(1);
            }
            EXPECT_EQ(y.shape(), want_shape) << op << " " << dims;
            expect_close(values(y), ref_reduce(v, x.shape(), mask, op), tol_for(dt) * 10, tol_for(dt) * 10,
                         op + " " + dtype_name(dt) + " layout " + std::to_string(layout) + " dims " + dims.str());
          }
        }
      }
    }
  }
  EXPECT_OXM_ERROR(ones({2, 3}).sum({0, 0}), InvalidArgument, "more than once");
  EXPECT_OXM_ERROR(ones({2, 3}).sum({2}), IndexOutOfBounds, "dim 2");
  EXPECT_OXM_ERROR(ones({2}, DType::I64).mean(), UnsupportedDType, "mean");
  EXPECT_EQ(from_vector<int64_t>({1, 2, 3}, {3}).sum().item<int64_t>(), 6);
  EXPECT_EQ(from_vector<int64_t>({1, 5, 3}, {3}).max().item<int64_t>(), 5);
}

TEST(Reductions, LargeAndColumnPaths) {
  for (DType dt : {DType::F32, DType::F64}) {
    Tensor x = uniform({300, 517}, -1, 1, 3, dt);
    auto v = values(x);
    expect_close(values(x.sum({0})), ref_reduce(v, x.shape(), 1, "sum"), 1e-5, 1e-5, "column sum");
    expect_close(values(x.sum({1})), ref_reduce(v, x.shape(), 2, "sum"), 1e-5, 1e-5, "row sum");
    expect_close(values(x.max({0})), ref_reduce(v, x.shape(), 1, "max"), 0, 0, "column max");
    expect_close(values(x.t().sum({1})), ref_reduce(v, x.shape(), 1, "sum"), 1e-5, 1e-5, "transposed row sum");
  }
}

TEST(Reductions, EmptyExtentTable) {
  Tensor e = zeros({0, 3});
  EXPECT_EQ(e.sum().item<float>(), 0.0f);
  EXPECT_EQ(e.sum({0}).to_vector<float>(), std::vector<float>(3, 0.0f));
  EXPECT_EQ(e.max({0}).to_vector<float>(), std::vector<float>(3, -INFINITY));
  EXPECT_EQ(e.min({0}).to_vector<float>(), std::vector<float>(3, INFINITY));
  EXPECT_EQ(e.max().item<float>(), -INFINITY);
  EXPECT_OXM_ERROR(e.mean(), EmptyReduction, "mean");
  EXPECT_OXM_ERROR(e.mean({0}), EmptyReduction, "[0, 3]");
  EXPECT_OXM_ERROR(e.argmax(0), EmptyReduction, "argmax");
  // A non-empty reduced axis of a tensor with an empty other axis is fine: [0,3].mean({1}) is [0].
  Tensor m = e.mean({1});
  EXPECT_EQ(m.shape(), Shape({0}));
  EXPECT_EQ(e.argmax(1).shape(), Shape({0}));
  EXPECT_EQ(e.sum({1}).shape(), Shape({0}));
  EXPECT_OXM_ERROR(zeros({0}, DType::I64).max(), EmptyReduction, "i64");
  EXPECT_EQ(zeros({0}, DType::I64).sum().item<int64_t>(), 0);
}

TEST(Reductions, CompensatedSumOfCancellingValues) {
  // 100k values with heavy cancellation: large +/- pairs plus small terms.
  const int64_t n = 100000;
  std::vector<float> v(n);
  std::vector<double> vd(n);
  Generator g(9);
  for (int64_t i = 0; i < n; ++i) {
    float big = (i % 2 ? 1.0e4f : -1.0e4f) * static_cast<float>(1 + (i / 2) % 7);
    float small = static_cast<float>(g.next_double());
    v[i] = (i % 4 < 2) ? big : small;
  }
  double truth = 0;
  for (int64_t i = 0; i < n; ++i) truth += static_cast<double>(v[i]);
  float got = from_vector(v, {n}).sum().item<float>();
  EXPECT_LE(std::abs(got - truth), 1e-3 * std::abs(truth)) << got << " vs " << truth;
  for (int64_t i = 0; i < n; ++i) vd[i] = static_cast<double>(v[i]) * 1.000001;
  double truth_d = 0;
  for (double d : vd) truth_d += d;
  EXPECT_NEAR(from_vector(vd, {n}).sum().item<double>(), truth_d, 1e-9 * std::abs(truth_d));
}

TEST(Reductions, DeterministicAcrossThreadCounts) {
  Tensor x = randn({1 << 20}, 4);
  Tensor y = randn({2048, 513}, 5);
  int prev = get_num_threads();
  set_num_threads(1);
  float s1 = x.sum().item<float>();
  auto c1 = y.sum({0}).to_vector<float>();
  auto sm1 = y.softmax(1).to_vector<float>();
  set_num_threads(2);
  float s2 = x.sum().item<float>();
  auto c2 = y.sum({0}).to_vector<float>();
  auto sm2 = y.softmax(1).to_vector<float>();
  set_num_threads(prev);
  EXPECT_EQ(s1, s2);
  EXPECT_EQ(c1, c2);
  EXPECT_EQ(sm1, sm2);
}

TEST(ArgReductions, IndicesTiesNaNAndErrors) {
  Tensor x = from_vector<double>({1, 5, 5, 2, 0, 0}, {2, 3});
  EXPECT_EQ(x.argmax(1).to_vector<int64_t>(), std::vector<int64_t>({1, 0}));  // first of ties
  EXPECT_EQ(x.argmin(1).to_vector<int64_t>(), std::vector<int64_t>({0, 1}));
  EXPECT_EQ(x.argmax(0).to_vector<int64_t>(), std::vector<int64_t>({1, 0, 0}));
  EXPECT_EQ(x.argmax(-1, true).shape(), Shape({2, 1}));
  EXPECT_EQ(x.argmax(1).dtype(), DType::I64);
  EXPECT_EQ(x.t().argmax(1).to_vector<int64_t>(), std::vector<int64_t>({1, 0, 0}));
  EXPECT_OXM_ERROR(from_vector<float>({1, NAN}, {2}).argmax(0), InvalidArgument, "NaN");
  EXPECT_OXM_ERROR(x.argmax(2), IndexOutOfBounds, "dim 2");
  EXPECT_EQ(scalar(3.0).argmax(0).item<int64_t>(), 0);
  EXPECT_EQ(from_vector<int64_t>({3, 9, 1}, {3}).argmax(0).item<int64_t>(), 1);
}

TEST(Softmax, AgainstReference) {
  for (DType dt : {DType::F32, DType::F64}) {
    for (int64_t dim : {0, 1, -1}) {
      for (bool transposed : {false, true}) {
        Tensor x = transposed ? uniform({6, 4}, -5, 5, 7, dt).t() : uniform({4, 6}, -5, 5, 7, dt);
        Shape s = x.shape();
        auto v = values(x);
        int64_t d = dim < 0 ? dim + 2 : dim;
        std::vector<double> sm(v.size()), lsm(v.size());
        for (int64_t o = 0; o < s[1 - d]; ++o) {
          auto idx = [&](int64_t i) { return d == 1 ? o * s[1] + i : i * s[1] + o; };
          double mx = -INFINITY, z = 0;
          for (int64_t i = 0; i < s[d]; ++i) mx = std::max(mx, v[idx(i)]);
          for (int64_t i = 0; i < s[d]; ++i) z += std::exp(v[idx(i)] - mx);
          for (int64_t i = 0; i < s[d]; ++i) {
            sm[idx(i)] = std::exp(v[idx(i)] - mx) / z;
            lsm[idx(i)] = v[idx(i)] - mx - std::log(z);
          }
        }
        expect_close(values(x.softmax(dim)), sm, tol_for(dt) * 4, tol_for(dt), "softmax");
        expect_close(values(x.log_softmax(dim)), lsm, tol_for(dt) * 4, tol_for(dt) * 4, "log_softmax");
      }
    }
  }
  // Stability with huge logits and -inf entries.
  Tensor big = from_vector<float>({1000, 1001, -INFINITY}, {3});
  auto p = big.softmax(0).to_vector<float>();
  EXPECT_NEAR(p[0], 1 / (1 + std::exp(1.0)), 1e-6);
  EXPECT_EQ(p[2], 0.0f);
  EXPECT_NEAR(big.logsumexp(0).item<float>(), 1001 + std::log1p(std::exp(-1.0)), 1e-3);
  EXPECT_EQ(from_vector<float>({-INFINITY, -INFINITY}, {2}).logsumexp(0).item<float>(), -INFINITY);
  EXPECT_OXM_ERROR(ones({2}, DType::I64).softmax(0), UnsupportedDType, "softmax");
  EXPECT_EQ(zeros({0, 3}).softmax(1).shape(), Shape({0, 3}));
}

// ---------------------------------------------------------------- matmul
namespace {
std::vector<double> ref_matmul(const Tensor& a, const Tensor& b, Shape* out_shape) {
  const Shape &sa = a.shape(), &sb = b.shape();
  const int64_t m = sa[sa.size() - 2], k = sa.back(), n = sb.back();
  Shape ba(sa.begin(), sa.size() - 2), bb(sb.begin(), sb.size() - 2);
  Shape batch = broadcast_shapes(ba, bb, "ref");
  Shape so = batch;
  so.push_back(m);
  so.push_back(n);
  *out_shape = so;
  auto va = values(a), vb = values(b);
  std::vector<double> out(static_cast<size_t>(so.product()), 0.0);
  for (int64_t bi = 0; bi < batch.product(); ++bi) {
    int64_t ia = bcast_index(bi, batch, ba), ib = bcast_index(bi, batch, bb);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) s += va[ia * m * k + i * k + p] * vb[ib * k * n + p * n + j];
        out[bi * m * n + i * n + j] = s;
      }
  }
  return out;
}
}  // namespace

TEST(Matmul, BatchBroadcastingAndLayouts) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 4}, {4, 5}},     {{2, 1, 3, 4}, {5, 4, 6}},  {{3, 4}, {2, 4, 5}},   {{2, 3, 4}, {4, 5}},
      {{1, 1}, {1, 1}},     {{0, 4}, {4, 3}},           {{3, 0}, {0, 2}},      {{2, 5, 3}, {2, 3, 0}},
      {{64, 70}, {70, 33}}, {{192, 4, 4}, {192, 4, 4}}, {{7, 1, 16}, {16, 9}}, {{3, 200}, {200, 1}}};
  uint64_t seed = 900;
  for (DType dt : {DType::F32, DType::F64}) {
    for (const auto& [sa, sb] : cases) {
      Tensor a = uniform(sa, -1, 1, ++seed, dt), b = uniform(sb, -1, 1, ++seed, dt);
      Shape so;
      auto want = ref_matmul(a, b, &so);
      Tensor c = a.matmul(b);
      ASSERT_EQ(c.shape(), so) << sa << " x " << sb;
      double k = static_cast<double>(sa.back());
      double tol = dt == DType::F64 ? 1e-12 : 1e-5 * std::sqrt(std::max(k, 1.0));
      expect_close(values(c), want, tol, tol, "matmul " + sa.str() + " x " + sb.str());
      // Transposed and sliced operands (col-major and copied paths).
      if (sa.size() == 2 && sb.size() == 2 && sa[0] > 0 && sa[1] > 0) {
        Tensor at = uniform({sa[1], sa[0]}, -1, 1, ++seed, dt).t();
        Tensor bs = uniform({sb[0], sb[1] * 2}, -1, 1, ++seed, dt).slice(1, 0, sb[1] * 2, 2);
        auto want2 = ref_matmul(at, bs, &so);
        expect_close(values(at.matmul(bs)), want2, tol, tol, "strided matmul " + sa.str());
      }
    }
  }
  // Broadcast batches are not materialised: a stride-0 batch view works directly.
  Tensor w = uniform({4, 4}, -1, 1, 1, DType::F64).unsqueeze(0).broadcast_to({8, 4, 4});
  Tensor x = uniform({8, 3, 4}, -1, 1, 2, DType::F64);
  Shape so;
  expect_close(values(x.matmul(w)), ref_matmul(x, w, &so), 1e-12, 1e-12, "stride-0 batch");
  EXPECT_EQ(zeros({3, 0}).matmul(zeros({0, 2})).to_vector<float>(), std::vector<float>(6, 0.0f));
  // torch's vector forms: [k] @ [..., k, n] -> [..., n], [..., m, k] @ [k] -> [..., m], [k] @ [k] -> []
  Tensor v = from_vector<double>({1, 2, 3}, {3});
  Tensor M = from_vector<double>({1, 0, 2, 1, 0, 3}, {3, 2});  // rows [1 0] [2 1] [0 3]
  Tensor vM = v.matmul(M), Mv = M.t().matmul(v), vv = v.matmul(v);
  EXPECT_EQ(vM.shape(), Shape({2}));
  EXPECT_EQ(vM.to_vector<double>(), std::vector<double>({5, 11}));
  EXPECT_EQ(Mv.to_vector<double>(), std::vector<double>({5, 11}));
  EXPECT_EQ(vv.shape(), Shape({}));
  EXPECT_EQ(vv.item<double>(), 14.0);
  EXPECT_EQ(v.matmul(M.unsqueeze(0).broadcast_to({4, 3, 2})).shape(), Shape({4, 2}));
  EXPECT_EQ(M.t().unsqueeze(0).broadcast_to({4, 2, 3}).matmul(v).shape(), Shape({4, 2}));
  EXPECT_OXM_ERROR(ones({3}).matmul(ones({2, 2})), ShapeMismatch, "[3] x [2, 2]");
  EXPECT_OXM_ERROR(scalar(2.0).matmul(ones({3, 2})), InvalidArgument, "rank >= 1");
  EXPECT_OXM_ERROR(ones({3, 4}).matmul(ones({5, 2})), ShapeMismatch, "[3, 4] x [5, 2]");
  EXPECT_OXM_ERROR(ones({2, 3, 4}).matmul(ones({3, 4, 2})), BroadcastIncompatible, "matmul");
  EXPECT_OXM_ERROR(ones({3, 4}).matmul(ones({4, 2}, DType::F64)), DTypeMismatch, "matmul");
  EXPECT_OXM_ERROR(ones({3, 4}, DType::I64).matmul(ones({4, 2}, DType::I64)), UnsupportedDType, "matmul");
}

#include "backend/cpu/vec_math.hpp"

TEST(VecMath, ExpF32MatchesLibmWithinFewUlp) {
  double worst = 0;
  for (int i = -236000; i <= 200000; ++i) {
    float x = static_cast<float>(i) * 4.4e-4f;  // [-103.8, 88]
    float got = oxmera::detail::exp_f32(x);
    double want = std::exp(static_cast<double>(x));
    if (want < 1.2e-38) {  // subnormal results: absolute error within a couple of subnormal steps
      EXPECT_LE(std::abs(got - want), 3e-45) << x;
      continue;
    }
    worst = std::max(worst, std::abs(got - want) / want);
  }
  EXPECT_LT(worst, 4e-7);
  EXPECT_EQ(oxmera::detail::exp_f32(-INFINITY), 0.0f);
  EXPECT_EQ(oxmera::detail::exp_f32(INFINITY), INFINITY);
  EXPECT_EQ(oxmera::detail::exp_f32(100.f), INFINITY);
  EXPECT_NEAR(oxmera::detail::exp_f32(-100.f), std::exp(-100.0), 3e-45);
  EXPECT_EQ(oxmera::detail::exp_f32(-110.f), 0.0f);
  EXPECT_TRUE(std::isnan(oxmera::detail::exp_f32(NAN)));
  EXPECT_EQ(oxmera::detail::exp_f32(0.f), 1.0f);
}

TEST(Softmax, LongContiguousRowsAndNaN) {
  for (int64_t d : {1, 7, 16, 33, 4096}) {
    Tensor x = randn({3, d}, 17) * 4.0;
    auto v = values(x);
    std::vector<double> want(v.size());
    for (int64_t r = 0; r < 3; ++r) {
      double mx = -INFINITY, z = 0;
      for (int64_t i = 0; i < d; ++i) mx = std::max(mx, v[r * d + i]);
      for (int64_t i = 0; i < d; ++i) z += std::exp(v[r * d + i] - mx);
      for (int64_t i = 0; i < d; ++i) want[r * d + i] = std::exp(v[r * d + i] - mx) / z;
    }
    expect_close(values(x.softmax(1)), want, 2e-6, 1e-9, "softmax row " + std::to_string(d));
  }
  auto n = from_vector<float>({1, NAN, 2}, {3}).softmax(0).to_vector<float>();
  for (float f : n) EXPECT_TRUE(std::isnan(f));
}

// The registry's sigmoid with the CPU's vectorised math (what the kernels run).
float sigmoid_vec(float x) { return ops::defs::Sigmoid::fwd<float, oxmera::detail::VecMath>(x); }

TEST(VecMath, TanhAndSigmoidF32MatchLibm) {
  double worst_t = 0, worst_s = 0;
  for (int i = -100000; i <= 100000; ++i) {
    const float x = static_cast<float>(i) * 2e-4f;  // [-20, 20], dense around the 0.4 switch
    const double t = std::tanh(static_cast<double>(x)), sg = 1.0 / (1.0 + std::exp(-static_cast<double>(x)));
    if (t != 0) worst_t = std::max(worst_t, std::abs(oxmera::detail::tanh_f32(x) - t) / std::abs(t));
    worst_s = std::max(worst_s, std::abs(sigmoid_vec(x) - sg) / sg);
  }
  EXPECT_LT(worst_t, 1e-6);
  EXPECT_LT(worst_s, 1e-6);
  EXPECT_EQ(oxmera::detail::tanh_f32(1e-30f), 1e-30f);
  EXPECT_EQ(oxmera::detail::tanh_f32(100.f), 1.0f);
  EXPECT_EQ(oxmera::detail::tanh_f32(-100.f), -1.0f);
  EXPECT_TRUE(std::isnan(oxmera::detail::tanh_f32(NAN)));
  EXPECT_EQ(sigmoid_vec(-INFINITY), 0.0f);
  EXPECT_EQ(sigmoid_vec(INFINITY), 1.0f);
  EXPECT_TRUE(std::isnan(sigmoid_vec(NAN)));
}
