// The bad-input sweep (issue #17 item 2), generated from the op registry: every registry entry is called with
// undefined tensors, wrong dtypes, mixed devices, out-of-range and negative dims, overflowing sizes, 0-size and
// 0-d tensors, NaN / Inf, broadcast (stride-0) and non-contiguous views and aliased in-place outputs. Each call
// must give the right result or throw oxmera::Error of the expected kind; another exception type, a wrong kind,
// a result where an error was due, or tensor memory still held after the call fails the test. Crashes and
// undefined behaviour are caught by the ASan+UBSan suite, which runs this file too.
//
// The mixed-device cases use the host-memory test device in the CUDA slot (tests/fake_device.hpp).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "fake_device.hpp"
#include "test_util.hpp"

using namespace oxt;

namespace {

constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// The sweep's tally, printed at the end of the suite (docs/LIMITATIONS.md quotes it).
struct Tally {
  int64_t cases = 0, results = 0;
  std::map<std::string, int64_t> errors;  // by kind
  ~Tally() {
    if (cases == 0) return;
    std::printf("[sweep] %lld cases: %lld correct results", static_cast<long long>(cases),
                static_cast<long long>(results));
    for (auto& [k, n] : errors) std::printf(", %lld %s", static_cast<long long>(n), k.c_str());
    std::printf("\n");
  }
};
Tally& tally() {
  static Tally t;
  return t;
}

// An expected outcome: a typed error of one of `kinds`, or (kinds empty) a result the checker accepts.
struct Expect {
  std::vector<ErrorKind> kinds;
  std::function<void(const Tensor&)> check;  // results only; empty: any result is wrong... unless kinds is empty
};
Expect error(std::initializer_list<ErrorKind> kinds) { return {kinds, {}}; }
Expect result(std::function<void(const Tensor&)> check) { return {{}, std::move(check)}; }

std::string kinds_str(const std::vector<ErrorKind>& kinds) {
  std::string s;
  for (ErrorKind k : kinds) s += std::string(s.empty() ? "" : " or ") + error_kind_name(k);
  return s;
}

// Runs one call of the sweep and judges its outcome.
void probe(const std::string& what, const std::function<Tensor()>& call, const Expect& expect) {
  ++tally().cases;
  const int64_t before = memory_stats().allocated_bytes;
  {
    Tensor out;
    bool threw = false;
    try {
      out = call();
    } catch (const Error& e) {
      threw = true;
      ++tally().errors[error_kind_name(e.kind())];
      if (expect.kinds.empty()) {
        ADD_FAILURE() << what << ": expected a result, got " << error_kind_name(e.kind()) << ": " << e.what();
      } else {
        bool ok = false;
        for (ErrorKind k : expect.kinds) ok = ok || k == e.kind();
        EXPECT_TRUE(ok) << what << ": expected " << kinds_str(expect.kinds) << ", got " << error_kind_name(e.kind())
                        << ": " << e.what();
        // A typed error names what went wrong: never an empty message.
        EXPECT_GT(std::string(e.what()).size(), 20u) << what << ": " << e.what();
      }
    } catch (const std::exception& e) {
      threw = true;
      ADD_FAILURE() << what << ": threw a " << typeid(e).name() << " that is not oxmera::Error: " << e.what();
    } catch (...) {
      threw = true;
      ADD_FAILURE() << what << ": threw something that is not a std::exception";
    }
    if (!threw) {
      if (!expect.kinds.empty()) {
        ADD_FAILURE() << what << ": expected " << kinds_str(expect.kinds) << ", got a result"
                      << (out.defined() ? " of shape " + out.shape().str() : std::string(" (undefined)"));
      } else {
        ++tally().results;
        if (expect.check) expect.check(out);
      }
    }
  }
  // Whatever happened, the call holds no tensor memory afterwards (an error part-way leaks nothing).
  EXPECT_EQ(memory_stats().allocated_bytes, before) << what << ": tensor memory still held after the call";
}

Tensor u8(const Shape& s) { return zeros(s, DType::U8); }
Tensor f32(const Shape& s) { return ones(s, DType::F32); }
Tensor i64(const Shape& s) { return zeros(s, DType::I64); }
Tensor on_device(const Tensor& t) { return t.to(Device::cuda()); }

// The values a float op is called with besides the ordinary ones: signed zeros and infinities, NaN, subnormals,
// the largest finite numbers, and the arguments where exp/log-style kernels switch branches or overflow.
std::vector<double> special_values(DType dt) {
  const bool f = dt == DType::F32;
  return {kNaN,
          kInf,
          -kInf,
          0.0,
          -0.0,
          f ? 1e-40 : 5e-324,
          f ? -1e-40 : -5e-324,
          f ? 3.4e38 : 1.7e308,
          f ? -3.4e38 : -1.7e308,
          1e30,
          -1e30,
          88.8,
          -104.0,
          710.0,
          -746.0,
          20.0,
          -20.0,
          1e-7,
          0.5,
          -1.0};
}

// |got - want| within a relative tolerance; NaN must match NaN, infinities and their signs exactly.
void expect_value(double got, double want, double rtol, const std::string& what) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what << ": got " << got << ", want NaN";
  } else if (std::isinf(want) || std::isinf(got)) {
    EXPECT_EQ(got, want) << what;
  } else {
    EXPECT_LE(std::abs(got - want), rtol * std::abs(want) + (rtol * 1e-30))
        << what << ": got " << got << ", want " << want;
  }
}

// ------------------------------------------------------------------ unary entries
using UnaryRef = double (*)(double);
const UnaryRef kUnaryRefs[] = {
#define OXM_X(id, name, api, dtypes, grad, cost, lo, hi, params, ref, ...) \
  +[](double x) -> double { OXM_PARAM_LOCALS(params) return ref; },
    OXMERA_UNARY_OPS(OXM_X)
#undef OXM_X
};

// NaN in, NaN out (torch), except the ops that ask what the value is.
bool nan_answers_itself(ops::UnaryOp op) {
  return op == ops::UnaryOp::IsNan || op == ops::UnaryOp::IsInf || op == ops::UnaryOp::IsFinite;
}

// The f32 kernels' accuracy at the special values: exact for the cheap ops, a few ulps for the transcendental ones
// (docs/LIMITATIONS.md gives the measured maximum errors); where the f64 result is within an f32 ulp of overflow
// or underflow the f32 result may round either way, so those are compared through their own rounding.
double unary_rtol(const ops::OpInfo& info, DType dt) {
  // The cheap ops are exact but for the rounding of an f32 parameter (leaky_relu's slope is 0.01f, as torch's).
  if (!info.costly) return dt == DType::F32 ? 0x1p-23 : 0;
  return dt == DType::F32 ? 4e-6 : 1e-13;
}

void sweep_unary(const ops::OpInfo& info) {
  const auto op = static_cast<ops::UnaryOp>(info.id);
  const std::string n = info.name;
  auto call = [op](const Tensor& x) { return ops::unary(op, x); };
  probe(
      n + "(undefined)", [&] { return call(Tensor()); }, error({ErrorKind::InvalidArgument}));
  probe(
      n + "(u8 [3])", [&] { return call(u8({3})); }, error({ErrorKind::UnsupportedDType}));
  if (!info.ints)
    probe(
        n + "(i64 [3])", [&] { return call(i64({3})); }, error({ErrorKind::UnsupportedDType}));
  // 0-size shapes of every rank give a 0-size result of the same shape; 0-d gives 0-d.
  for (const Shape& s : {Shape{0}, Shape{3, 0, 2}, Shape{0, 0}, Shape{}}) {
    probe(
        n + "(f32 " + s.str() + ")", [&] { return call(f32(s)); },
        result([s, n](const Tensor& y) { EXPECT_EQ(y.shape(), s) << n; }));
  }
  // A 0-size slice at the end of a buffer and a 0-size broadcast.
  probe(
      n + "(f64 [4, 3].narrow(0, 4, 0))",
      [&] {
        return call(ones({4, 3}, DType::F64).narrow(0, 4, 0));
      },
      result([](const Tensor& y) {
        EXPECT_EQ(y.shape(), (Shape{0, 3}));
      }));
  probe(
      n + "(f32 [1, 3].expand([0, 3]))",
      [&] {
        return call(f32({1, 3}).expand({0, 3}));
      },
      result([](const Tensor& y) {
        EXPECT_EQ(y.shape(), (Shape{0, 3}));
      }));
  // The special values, laid out contiguously, transposed and broadcast.
  for (DType dt : {DType::F32, DType::F64}) {
    const auto vals = special_values(dt);
    const int64_t m = static_cast<int64_t>(vals.size());
    const Tensor x = from_vector<double>(vals, {m}).to(dt);
    std::vector<double> want(vals.size());
    for (size_t i = 0; i < vals.size(); ++i) {
      const double xi = values(x)[i];  // the value the op sees (rounded to f32)
      want[i] = std::isnan(xi) && !nan_answers_itself(op) ? kNaN : kUnaryRefs[info.id](xi);
      if (dt == DType::F32) want[i] = static_cast<double>(static_cast<float>(want[i]));
    }
    const double rtol = unary_rtol(info, dt);
    const std::string tag = n + "(" + dtype_name(dt) + " special values";
    auto check = [want, rtol, tag, vals](const Tensor& y) {
      auto got = values(y.contiguous().reshape({-1}));
      ASSERT_EQ(got.size() % want.size(), 0u) << tag;
      for (size_t i = 0; i < got.size(); ++i)
        expect_value(got[i], want[i % want.size()], rtol, tag + ") at x = " + std::to_string(vals[i % want.size()]));
    };
    probe(
        tag + ")", [&] { return call(x); }, result(check));
    probe(
        tag + ", broadcast [3, m])",
        [&] {
          return call(x.unsqueeze(0).expand({3, m}));
        },
        result([check](const Tensor& y) { check(y); }));
    // A transposed [m, 2] view whose columns both hold the values: element (i, j) is vals[i].
    probe(
        tag + ", transposed)",
        [&] {
          return call(stack({x, x}, 0).t());
        },
        result([check](const Tensor& y) { check(y.t()); }));
  }
}

// ------------------------------------------------------------------ binary entries
using BinaryRef = double (*)(double, double);
const BinaryRef kBinaryRefs[] = {
#define OXM_X(id, name, api, dtypes, grad, cost, alo, ahi, blo, bhi, ref, ...) \
  +[](double a, double b) -> double { return ref; },
    OXMERA_BINARY_OPS(OXM_X)
#undef OXM_X
};

bool is_comparison(ops::BinaryOp op) {
  using B = ops::BinaryOp;
  return op == B::Eq || op == B::Ne || op == B::Lt || op == B::Le || op == B::Gt || op == B::Ge;
}

void sweep_binary(const ops::OpInfo& info) {
  const auto op = static_cast<ops::BinaryOp>(info.id);
  const std::string n = info.name;
  auto call = [op](const Tensor& a, const Tensor& b) { return ops::binary(op, a, b); };
  probe(
      n + "(undefined, [3])", [&] { return call(Tensor(), f32({3})); }, error({ErrorKind::InvalidArgument}));
  probe(
      n + "([3], undefined)", [&] { return call(f32({3}), Tensor()); }, error({ErrorKind::InvalidArgument}));
  probe(
      n + "([2, 3], [4])",
      [&] {
        return call(f32({2, 3}), f32({4}));
      },
      error({ErrorKind::BroadcastIncompatible}));
  probe(
      n + "([0, 3], [2, 3])",
      [&] {
        return call(f32({0, 3}), f32({2, 3}));
      },
      error({ErrorKind::BroadcastIncompatible}));
  probe(
      n + "(u8, u8)", [&] { return call(u8({3}), u8({3})); }, error({ErrorKind::UnsupportedDType}));
  probe(
      n + "(f32, f64)", [&] { return call(f32({3}), ones({3}, DType::F64)); }, error({ErrorKind::DTypeMismatch}));
  probe(
      n + "(f32, i64)", [&] { return call(f32({3}), i64({3})); }, error({ErrorKind::DTypeMismatch}));
  if (!info.ints)
    probe(
        n + "(i64, i64)", [&] { return call(i64({3}), i64({3})); }, error({ErrorKind::UnsupportedDType}));
  probe(
      n + "(cpu [3], device [3])", [&] { return call(f32({3}), on_device(f32({3}))); },
      error({ErrorKind::DeviceMismatch}));
  probe(
      n + "(device [3], cpu [2, 3])",
      [&] {
        return call(on_device(f32({3})), f32({2, 3}));
      },
      error({ErrorKind::DeviceMismatch}));
  // 0-size operands broadcast to a 0-size result.
  probe(
      n + "([0, 3], [3])",
      [&] {
        return call(f32({0, 3}), f32({3}));
      },
      result([](const Tensor& y) {
        EXPECT_EQ(y.shape(), (Shape{0, 3}));
      }));
  probe(
      n + "([4, 0, 1], [1, 5])",
      [&] {
        return call(f32({4, 0, 1}), f32({1, 5}));
      },
      result([](const Tensor& y) {
        EXPECT_EQ(y.shape(), (Shape{4, 0, 5}));
      }));
  // Every pair of special values (a along dim 0, b along dim 1, so the result is their outer table).
  for (DType dt : {DType::F32, DType::F64}) {
    std::vector<double> vals = {kNaN, kInf, -kInf, 0.0, -0.0, 1.0, -1.0, 0.5, 2.0, -3.0, 1e30, -1e30};
    if (dt == DType::F64) vals.push_back(1e300);
    const int64_t m = static_cast<int64_t>(vals.size());
    const Tensor a = from_vector<double>(vals, {m, 1}).to(dt), b = from_vector<double>(vals, {1, m}).to(dt);
    const auto av = values(a);
    const double rtol = info.costly ? (dt == DType::F32 ? 4e-6 : 1e-13) : 0;
    const std::string tag = n + "(" + dtype_name(dt) + " special values)";
    probe(
        tag, [&] { return call(a, b); }, result([&](const Tensor& y) {
          auto got = values(y);
          ASSERT_EQ(got.size(), av.size() * av.size()) << tag;
          for (size_t i = 0; i < av.size(); ++i)
            for (size_t j = 0; j < av.size(); ++j) {
              double want = kBinaryRefs[info.id](av[i], av[j]);
              // torch's stable form m + log(exp(-m) + exp(-x - m)) is NaN at x = -inf for every target; the
              // kernel keeps that formula (parity), the reference's algebra gives inf for targets above 1.
              if (op == ops::BinaryOp::BceLogits && av[i] == -kInf) want = kNaN;
              if (dt == DType::F32) want = static_cast<double>(static_cast<float>(want));
              expect_value(got[i * av.size() + j], want, rtol,
                           tag + " at a = " + std::to_string(av[i]) + ", b = " + std::to_string(av[j]));
            }
        }));
  }
  // i64: a zero divisor is an error for the ops that divide; everything else is defined (wrapping) at the extremes.
  if (info.ints) {
    const Tensor a = from_vector<int64_t>({kI64Max, kI64Min, -1, 0, 7}, {5});
    const Tensor z = from_vector<int64_t>({1, 1, 1, 0, 1}, {5});
    const bool divides = op == ops::BinaryOp::Remainder || op == ops::BinaryOp::Fmod;
    if (divides) {
      probe(
          n + "(i64, zero divisor)", [&] { return call(a, z); }, error({ErrorKind::InvalidArgument}));
      probe(
          n + "(INT64_MIN, -1)",
          [&] { return call(from_vector<int64_t>({kI64Min}, {1}), from_vector<int64_t>({-1}, {1})); },
          result([&](const Tensor& y) { EXPECT_EQ(y.to_vector<int64_t>()[0], 0) << n; }));
    } else {
      probe(
          n + "(i64 extremes)", [&] { return call(a, a); }, result([&](const Tensor& y) { EXPECT_EQ(y.numel(), 5); }));
    }
  }
  (void)is_comparison;
}

// In-place arithmetic: the output must not be a broadcast view (several elements share memory), must not need
// broadcasting itself, and must match the operand's dtype and device.
TEST(Sweep, InPlaceArithmeticRefusesOutputsItCannotWrite) {
  oxt_fake::register_host_memory_device();
  using F = std::function<void(Tensor&, const Tensor&)>;
  const std::vector<std::pair<std::string, F>> ops = {
      {"add_", [](Tensor& a, const Tensor& b) { a.add_(b); }},
      {"sub_", [](Tensor& a, const Tensor& b) { a.sub_(b); }},
      {"mul_", [](Tensor& a, const Tensor& b) { a.mul_(b); }},
      {"div_", [](Tensor& a, const Tensor& b) { a.div_(b); }},
      {"copy_", [](Tensor& a, const Tensor& b) { a.copy_(b); }},
  };
  for (auto& op : ops) {
    // References, not a structured binding: clang 14 cannot capture bindings in the lambdas below.
    const auto& n = op.first;
    const auto& f = op.second;
    auto run = [f](Tensor a, const Tensor& b) {
      f(a, b);
      return a;
    };
    probe(
        n + " into a stride-0 view",
        [&] {
          return run(f32({1, 3}).expand({2, 3}), f32({2, 3}));
        },
        error({ErrorKind::InvalidArgument}));
    probe(
        n + " [1, 3] <- [2, 3]",
        [&] {
          return run(f32({1, 3}), f32({2, 3}));
        },
        error({ErrorKind::BroadcastIncompatible, ErrorKind::ShapeMismatch}));
    // copy_ converts between dtypes (torch); the arithmetic refuses a wider operand (docs/LIMITATIONS.md).
    probe(
        n + " f32 <- f64", [&] { return run(f32({3}), full({3}, 0.1, DType::F64)); },
        n == "copy_" ? result([](const Tensor& y) {
          EXPECT_EQ(y.dtype(), DType::F32);
          for (double v : values(y)) EXPECT_EQ(v, static_cast<double>(0.1f));
        })
                     : error({ErrorKind::DTypeMismatch}));
    probe(
        n + " cpu <- device", [&] { return run(f32({3}), on_device(f32({3}))); }, error({ErrorKind::DeviceMismatch}));
    probe(
        n + " undefined <- [3]", [&] { return run(Tensor(), f32({3})); }, error({ErrorKind::InvalidArgument}));
    probe(
        n + " [3] <- undefined", [&] { return run(f32({3}), Tensor()); }, error({ErrorKind::InvalidArgument}));
    // Aliased: the operand is the output itself, or a view of the same memory; the result is as if read first.
    probe(
        n + " x <- x",
        [&] {
          Tensor x = full({3}, 2.0, DType::F32);
          return run(x, x);
        },
        result([&](const Tensor& y) {
          const double want = n == "add_" ? 4 : n == "sub_" ? 0 : n == "mul_" ? 4 : n == "div_" ? 1 : 2;
          for (double v : values(y)) EXPECT_EQ(v, want) << n;
        }));
    // A leaf that requires grad may not be written in place while grad mode is on.
    probe(
        n + " into a leaf that requires grad", [&] { return run(f32({3}).requires_grad_(), f32({3})); },
        error({ErrorKind::InvalidArgument}));
  }
}

// ------------------------------------------------------------------ structured entries
// The bad calls of each structured entry: (what, call, expected). Every entry must have some (a registry entry
// added without them fails RegistryCoversEveryEntry).
struct BadCall {
  std::string what;
  std::function<Tensor()> call;
  Expect expect;
};
using Builder = std::function<std::vector<BadCall>()>;

Tensor first(const std::tuple<Tensor, Tensor>& t) { return std::get<0>(t); }
Tensor piece(const std::vector<Tensor>& v) { return v.empty() ? Tensor() : v[0]; }

const Expect kIndex = error({ErrorKind::IndexOutOfBounds});
const Expect kUndef = error({ErrorKind::InvalidArgument});
const Expect kDtype = error({ErrorKind::UnsupportedDType, ErrorKind::DTypeMismatch});
const Expect kArg = error({ErrorKind::InvalidArgument});
const Expect kShape = error({ErrorKind::ShapeMismatch, ErrorKind::BroadcastIncompatible});
const Expect kDevice = error({ErrorKind::DeviceMismatch});

// Probes of a op taking one dim: out of range both ways, at the int64 extremes, and on an undefined / u8 tensor.
std::vector<BadCall> dim_probes(const std::string& n, const std::function<Tensor(const Tensor&, int64_t)>& f,
                                bool u8_refused = true) {
  std::vector<BadCall> v;
  for (int64_t d : {int64_t{2}, int64_t{-3}, kI64Max, kI64Min})
    v.push_back({n + " dim " + std::to_string(d) + " of [2, 3]", [f, d] { return f(f32({2, 3}), d); }, kIndex});
  v.push_back({n + " dim 1 of 0-d", [f] { return f(scalar(1.0), 1); },
               error({ErrorKind::IndexOutOfBounds, ErrorKind::InvalidArgument})});
  v.push_back({n + " undefined", [f] { return f(Tensor(), 0); }, kUndef});
  if (u8_refused) v.push_back({n + " u8", [f] { return f(u8({2, 3}), 0); }, kDtype});
  return v;
}
std::vector<BadCall> dims_probes(const std::string& n, const std::function<Tensor(const Tensor&, const Dims&)>& f) {
  std::vector<BadCall> v;
  for (const Dims& d : {Dims{2}, Dims{-3}, Dims{kI64Max}, Dims{kI64Min}, Dims{0, 0}, Dims{1, -1}})
    v.push_back({n + " dims " + Shape(d).str() + " of [2, 3]",
                 [f, d] {
                   return f(f32({2, 3}), d);
                 },
                 d.size() == 2 ? error({ErrorKind::InvalidArgument, ErrorKind::IndexOutOfBounds}) : kIndex});
  v.push_back({n + " undefined", [f] { return f(Tensor(), {}); }, kUndef});
  v.push_back({n + " u8", [f] { return f(u8({2, 3}), {}); }, kDtype});
  return v;
}
template <class... B>
std::vector<BadCall> join(B... parts) {
  std::vector<BadCall> v;
  (v.insert(v.end(), parts.begin(), parts.end()), ...);
  return v;
}

Expect empty_result_of(const Shape& s) {
  return result([s](const Tensor& y) { EXPECT_EQ(y.shape(), s); });
}

const std::map<std::string, Builder>& structured_builders() {
  static const std::map<std::string, Builder> b = [] {
    std::map<std::string, Builder> m;
    auto reduction = [&m](const std::string& n, std::function<Tensor(const Tensor&, const Dims&)> f, bool float_only,
                          Expect empty) {
      m[n] = [n, f, float_only, empty] {
        auto v = dims_probes(n, f);
        if (float_only) v.push_back({n + " i64", [f] { return f(i64({2, 3}), {}); }, kDtype});
        // Over an empty dim (spec/behaviour.md): sum/any/all give their identities, max/min -inf/+inf for floats
        // and EmptyReduction for i64, mean EmptyReduction (0/0); var/std give NaN as torch.
        v.push_back({n + " over the empty dim of [0, 3]", [f] { return f(f32({0, 3}), {0}); }, empty});
        if (!float_only && n != "sum" && n != "any" && n != "all")
          v.push_back({n + " i64 over the empty dim of [0, 3]",
                       [f] {
                         return f(i64({0, 3}), {0});
                       },
                       error({ErrorKind::EmptyReduction})});
        v.push_back({n + " over the non-empty dim of [0, 3]",
                     [f] {
                       return f(f32({0, 3}), {1});
                     },
                     result([](const Tensor& y) { EXPECT_EQ(y.numel(), 0); })});
        return v;
      };
    };
    auto all_equal = [](double want) {
      return result([want](const Tensor& y) {
        EXPECT_EQ(y.shape(), Shape({3}));
        for (double v : values(y)) {
          if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(v));
          } else {
            EXPECT_EQ(v, want);
          }
        }
      });
    };
    reduction(
        "sum", [](const Tensor& x, const Dims& d) { return x.sum(d); }, false, all_equal(0));
    reduction(
        "mean", [](const Tensor& x, const Dims& d) { return x.mean(d); }, true, error({ErrorKind::EmptyReduction}));
    reduction(
        "max", [](const Tensor& x, const Dims& d) { return x.max(d); }, false, all_equal(-kInf));
    reduction(
        "min", [](const Tensor& x, const Dims& d) { return x.min(d); }, false, all_equal(kInf));
    reduction(
        "var", [](const Tensor& x, const Dims& d) { return x.var(d); }, true, all_equal(kNaN));
    reduction(
        "std", [](const Tensor& x, const Dims& d) { return x.std(d); }, true, all_equal(kNaN));
    reduction(
        "any", [](const Tensor& x, const Dims& d) { return x.any(d); }, false, all_equal(0));
    reduction(
        "all", [](const Tensor& x, const Dims& d) { return x.all(d); }, false, all_equal(1));
    m["norm"] = [] {
      auto v = dims_probes("norm", [](const Tensor& x, const Dims& d) { return x.norm(2.0, d); });
      // Negative p is defined (torch.linalg.vector_norm): (sum |x|^p)^(1/p), 1/3 for three ones at p = -1.
      v.push_back({"norm p = -1", [] { return f32({3}).norm(-1.0); },
                   result([](const Tensor& y) { EXPECT_NEAR(y.item<float>(), 1.0 / 3, 1e-7); })});
      v.push_back({"norm p = NaN", [] { return f32({3}).norm(kNaN); }, kArg});
      v.push_back({"norm i64", [] { return i64({3}).norm(); }, kDtype});
      v.push_back({"norm of [0]", [] { return f32({0}).norm(); },
                   result([](const Tensor& y) { EXPECT_EQ(y.item<float>(), 0.f); })});
      return v;
    };
    m["var"] = [f = m["var"]] {
      auto v = f();
      // Any finite correction is defined (divide by N - correction): 0 for constant input.
      v.push_back({"var correction -1", [] { return full({3}, 2.0, DType::F32).var({}, -1.0); },
                   result([](const Tensor& y) { EXPECT_EQ(y.item<float>(), 0.f); })});
      v.push_back({"var correction -1 of [1, 2, 3]",
                   [] {
                     return from_vector<double>({1, 2, 3}, {3}).var({}, -1.0);
                   },
                   result([](const Tensor& y) { EXPECT_NEAR(y.item<double>(), 2.0 / 4, 1e-15); })});
      v.push_back({"var correction NaN", [] { return f32({3}).var({}, kNaN); }, kArg});
      return v;
    };
    auto one_dim = [&m](const std::string& n, std::function<Tensor(const Tensor&, int64_t)> f, bool float_only,
                        Expect on_empty, bool u8_refused = true) {
      m[n] = [n, f, float_only, on_empty, u8_refused] {
        auto v = dim_probes(n, f, u8_refused);
        if (float_only) v.push_back({n + " i64", [f] { return f(i64({2, 3}), 0); }, kDtype});
        v.push_back({n + " along the empty dim of [0, 3]", [f] { return f(f32({0, 3}), 0); }, on_empty});
        return v;
      };
    };
    const Expect empty_result = result([](const Tensor& y) { EXPECT_EQ(y.numel(), 0); });
    one_dim(
        "argmax", [](const Tensor& x, int64_t d) { return x.argmax(d); }, false, error({ErrorKind::EmptyReduction}));
    one_dim(
        "argmin", [](const Tensor& x, int64_t d) { return x.argmin(d); }, false, error({ErrorKind::EmptyReduction}));
    one_dim(
        "softmax", [](const Tensor& x, int64_t d) { return x.softmax(d); }, true, empty_result);
    one_dim(
        "log_softmax", [](const Tensor& x, int64_t d) { return x.log_softmax(d); }, true, empty_result);
    one_dim(
        "logsumexp", [](const Tensor& x, int64_t d) { return x.logsumexp(d); }, true, result({}));
    one_dim(
        "cumsum", [](const Tensor& x, int64_t d) { return x.cumsum(d); }, false, empty_result);
    one_dim(
        "cumprod", [](const Tensor& x, int64_t d) { return x.cumprod(d); }, false, empty_result);
    one_dim(
        "sort", [](const Tensor& x, int64_t d) { return first(x.sort(d)); }, false, empty_result);
    one_dim(
        "argsort", [](const Tensor& x, int64_t d) { return x.argsort(d); }, false, empty_result);
    // unbind is a view: every dtype, u8 included (torch).
    one_dim(
        "unbind", [](const Tensor& x, int64_t d) { return piece(x.unbind(d)); }, false, result({}), false);
    m["topk"] = [] {
      auto v = dim_probes("topk", [](const Tensor& x, int64_t d) { return first(x.topk(1, d)); });
      for (int64_t k : {int64_t{-1}, int64_t{4}, kI64Max, kI64Min})
        v.push_back({"topk k = " + std::to_string(k) + " of [3]", [k] { return first(f32({3}).topk(k)); }, kArg});
      v.push_back({"topk k = 0 of [0]", [] { return first(f32({0}).topk(0)); }, empty_result_of({0})});
      return v;
    };
    m["chunk"] = [] {
      auto v = dim_probes(
          "chunk", [](const Tensor& x, int64_t d) { return piece(x.chunk(2, d)); }, false);
      for (int64_t c : {int64_t{0}, int64_t{-1}, kI64Min})
        v.push_back({"chunk " + std::to_string(c) + " pieces", [c] { return piece(f32({4}).chunk(c)); }, kArg});
      v.push_back({"chunk INT64_MAX pieces of [4]", [] { return piece(f32({4}).chunk(kI64Max)); },
                   result([](const Tensor& y) { EXPECT_EQ(y.numel(), 1); })});
      return v;
    };
    m["split"] = [] {
      auto v = dim_probes(
          "split", [](const Tensor& x, int64_t d) { return piece(x.split(1, d)); }, false);
      for (int64_t s : {int64_t{0}, int64_t{-1}, kI64Min})
        v.push_back({"split size " + std::to_string(s), [s] { return piece(f32({4}).split_size(s)); }, kArg});
      v.push_back({"split sizes {1, 2} of [4]",
                   [] {
                     return piece(f32({4}).split(std::vector<int64_t>{1, 2}));
                   },
                   kShape});
      v.push_back({"split sizes {5, -1} of [4]",
                   [] {
                     return piece(f32({4}).split(std::vector<int64_t>{5, -1}));
                   },
                   kArg});
      v.push_back({"split sizes {INT64_MAX, INT64_MAX, 2} of [4]",
                   [] {
                     return piece(f32({4}).split(std::vector<int64_t>{kI64Max, kI64Max, 2}));
                   },
                   kShape});
      return v;
    };
    m["tril"] = [] {
      std::vector<BadCall> v = {
          {"tril of [3]", [] { return f32({3}).tril(); }, kArg},
          {"tril undefined", [] { return Tensor().tril(); }, kUndef},
          {"tril u8",
           [] {
             return u8({2, 2}).tril();
           },
           kDtype},
          {"tril diagonal INT64_MAX",
           [] {
             return f32({2, 2}).tril(kI64Max);
           },
           result([](const Tensor& y) { EXPECT_EQ(values(y), std::vector<double>(4, 1.0)); })},
          {"tril diagonal INT64_MIN",
           [] {
             return f32({2, 2}).tril(kI64Min);
           },
           result([](const Tensor& y) { EXPECT_EQ(values(y), std::vector<double>(4, 0.0)); })},
      };
      return v;
    };
    m["triu"] = [] {
      std::vector<BadCall> v = {
          {"triu of 0-d", [] { return scalar(1.0).triu(); }, kArg},
          {"triu undefined", [] { return Tensor().triu(); }, kUndef},
          {"triu diagonal INT64_MIN",
           [] {
             return f32({2, 2}).triu(kI64Min);
           },
           result([](const Tensor& y) { EXPECT_EQ(values(y), std::vector<double>(4, 1.0)); })},
          {"triu diagonal INT64_MAX",
           [] {
             return f32({2, 2}).triu(kI64Max);
           },
           result([](const Tensor& y) { EXPECT_EQ(values(y), std::vector<double>(4, 0.0)); })},
      };
      return v;
    };
    m["masked_fill"] = [] {
      return std::vector<BadCall>{
          {"masked_fill mask [4] on [2, 3]",
           [] {
             return f32({2, 3}).masked_fill(u8({4}), 0.0);
           },
           kShape},
          {"masked_fill mask [2, 2, 3] on [2, 3]",
           [] {
             return f32({2, 3}).masked_fill(u8({2, 2, 3}), 0.0);
           },
           kShape},
          {"masked_fill f64 mask on f32", [] { return f32({3}).masked_fill(ones({3}, DType::F64), 0.0); }, kDtype},
          {"masked_fill undefined mask", [] { return f32({3}).masked_fill(Tensor(), 0.0); }, kUndef},
          {"masked_fill [3] value", [] { return f32({3}).masked_fill(u8({3}), f32({3})); }, kArg},
          {"masked_fill device mask", [] { return f32({3}).masked_fill(on_device(u8({3})), 0.0); }, kDevice},
          {"masked_fill NaN", [] { return f32({2}).masked_fill(ones({2}, DType::U8), kNaN); },
           result([](const Tensor& y) {
             for (double v : values(y)) EXPECT_TRUE(std::isnan(v));
           })},
      };
    };
    m["where"] = [] {
      return std::vector<BadCall>{
          {"where undefined mask", [] { return where(Tensor(), f32({3}), f32({3})); }, kUndef},
          {"where undefined branch", [] { return where(u8({3}), Tensor(), f32({3})); }, kUndef},
          {"where [2] x [3] x [3]", [] { return where(u8({2}), f32({3}), f32({3})); }, kShape},
          {"where f32 x f64 branches", [] { return where(u8({3}), f32({3}), ones({3}, DType::F64)); }, kDtype},
          {"where i64 mask on f32", [] { return where(i64({3}), f32({3}), f32({3})); }, kDtype},
          {"where device branch", [] { return where(u8({3}), f32({3}), on_device(f32({3}))); }, kDevice},
      };
    };
    auto index_common = [](const std::string& n, std::function<Tensor(const Tensor& x, int64_t, const Tensor&)> f) {
      std::vector<BadCall> v;
      for (int64_t i : {int64_t{-1}, int64_t{2}, kI64Max, kI64Min})
        v.push_back({n + " index " + std::to_string(i) + " into size 2",
                     [f, i] {
                       return f(f32({2, 3}), 0, from_vector<int64_t>({0, i}, {2}));
                     },
                     kIndex});
      v.push_back({n + " f32 index", [f] { return f(f32({2, 3}), 0, f32({2})); }, kDtype});
      v.push_back({n + " undefined index", [f] { return f(f32({2, 3}), 0, Tensor()); }, kUndef});
      v.push_back({n + " undefined self", [f] { return f(Tensor(), 0, i64({2})); }, kUndef});
      v.push_back({n + " dim 2", [f] { return f(f32({2, 3}), 2, i64({2})); }, kIndex});
      v.push_back({n + " device index", [f] { return f(f32({2, 3}), 0, on_device(i64({2}))); }, kDevice});
      return v;
    };
    m["index_select"] = [index_common] {
      auto v = index_common("index_select",
                            [](const Tensor& x, int64_t d, const Tensor& i) { return x.index_select(d, i); });
      v.push_back({"index_select 2-d index", [] { return f32({2, 3}).index_select(0, i64({2, 2})); }, kArg});
      v.push_back({"index_select from the empty dim", [] { return f32({0, 3}).index_select(0, i64({1})); }, kIndex});
      v.push_back({"index_select an empty index",
                   [] {
                     return f32({0, 3}).index_select(0, i64({0}));
                   },
                   result([](const Tensor& y) {
                     EXPECT_EQ(y.shape(), (Shape{0, 3}));
                   })});
      return v;
    };
    m["gather"] = [index_common] {
      auto v = index_common("gather", [](const Tensor& x, int64_t d, const Tensor& i) {
        return x.gather(d, i.dim() == 1 ? i.unsqueeze(1) : i);
      });
      v.push_back({"gather rank-1 index on rank 2", [] { return f32({2, 3}).gather(0, i64({2})); }, kShape});
      v.push_back({"gather index larger than self off dim", [] { return f32({2, 3}).gather(0, i64({2, 4})); }, kShape});
      return v;
    };
    m["index_add"] = [index_common] {
      auto v = index_common("index_add", [](const Tensor& x, int64_t d, const Tensor& i) {
        return x.index_add(d, i, f32({i.defined() && i.dim() == 1 ? i.size(0) : 2, 3}));
      });
      v.push_back({"index_add src of the wrong shape",
                   [] {
                     return f32({2, 3}).index_add(0, i64({2}), f32({2, 4}));
                   },
                   kShape});
      v.push_back({"index_add src f64",
                   [] {
                     return f32({2, 3}).index_add(0, i64({2}), ones({2, 3}, DType::F64));
                   },
                   kDtype});
      v.push_back({"index_add undefined src", [] { return f32({2, 3}).index_add(0, i64({2}), Tensor()); }, kUndef});
      return v;
    };
    m["scatter_add"] = [index_common] {
      auto v = index_common("scatter_add", [](const Tensor& x, int64_t d, const Tensor& i) {
        Tensor idx = i.defined() && i.dim() == 1 ? i.unsqueeze(1) : i;
        return x.scatter_add(d, idx, f32({2, 1}));
      });
      v.push_back({"scatter_add src smaller than index",
                   [] {
                     return f32({2, 3}).scatter_add(0, i64({2, 2}), f32({1, 1}));
                   },
                   kShape});
      v.push_back({"scatter_add src f64",
                   [] {
                     return f32({2, 3}).scatter_add(0, i64({2, 1}), ones({2, 1}, DType::F64));
                   },
                   kDtype});
      return v;
    };
    m["matmul"] = [] {
      return std::vector<BadCall>{
          {"matmul [2, 3] x [4, 2]",
           [] {
             return matmul(f32({2, 3}), f32({4, 2}));
           },
           kShape},
          {"matmul 0-d", [] { return matmul(scalar(1.0f), f32({3})); }, kArg},
          {"matmul [2, 2, 3] x [3, 3, 2] batch",
           [] {
             return matmul(f32({2, 2, 3}), f32({3, 3, 2}));
           },
           kShape},
          {"matmul i64",
           [] {
             return matmul(i64({2, 2}), i64({2, 2}));
           },
           kDtype},
          {"matmul f32 x f64",
           [] {
             return matmul(f32({2, 2}), ones({2, 2}, DType::F64));
           },
           kDtype},
          {"matmul undefined",
           [] {
             return matmul(Tensor(), f32({2, 2}));
           },
           kUndef},
          {"matmul device",
           [] {
             return matmul(f32({2, 2}), on_device(f32({2, 2})));
           },
           kDevice},
          {"matmul [0, 3] x [3, 0]",
           [] {
             return matmul(f32({0, 3}), f32({3, 0}));
           },
           result([](const Tensor& y) {
             EXPECT_EQ(y.shape(), (Shape{0, 0}));
           })},
          {"matmul [2, 0] x [0, 3] is zeros",
           [] {
             return matmul(f32({2, 0}), f32({0, 3}));
           },
           result([](const Tensor& y) { EXPECT_EQ(values(y), std::vector<double>(6, 0.0)); })},
      };
    };
    m["contiguous"] = [] {
      return std::vector<BadCall>{
          {"contiguous undefined", [] { return Tensor().contiguous(); }, kUndef},
          // torch allows it (numel 0); oxmera refuses a layout whose span, zero dims counted as 1, overflows.
          {"contiguous of a [0, 2^62, 2^62] broadcast",
           [] {
             return f32({0, 1, 1}).expand({0, int64_t{1} << 62, int64_t{1} << 62}).contiguous();
           },
           kArg},
          {"contiguous of a [2^40, 2^40] broadcast",
           [] {
             return f32({1, 1}).expand({int64_t{1} << 40, int64_t{1} << 40}).contiguous();
           },
           error({ErrorKind::OutOfMemory, ErrorKind::InvalidArgument})},
      };
    };
    m["to"] = [] {
      return std::vector<BadCall>{
          {"to undefined", [] { return Tensor().to(DType::F64); }, kUndef},
          {"to u8 of NaN and -1",
           [] {
             return from_vector<double>({kNaN, -1.0, 300.0}, {3}).to(DType::U8);
           },
           result([](const Tensor& y) { EXPECT_EQ(y.numel(), 3); })},
          {"to i64 of +-inf",
           [] {
             return from_vector<double>({kInf, -kInf}, {2}).to(DType::I64);
           },
           result([](const Tensor& y) {
             EXPECT_EQ(y.to_vector<int64_t>(), (std::vector<int64_t>{kI64Max, kI64Min}));
           })},
      };
    };
    m["cross_entropy"] = [] {
      return std::vector<BadCall>{
          {"cross_entropy target 3 of 3 classes",
           [] {
             return nn::cross_entropy(f32({2, 3}), from_vector<int64_t>({0, 3}, {2}));
           },
           kIndex},
          {"cross_entropy target -2",
           [] {
             return nn::cross_entropy(f32({2, 3}), from_vector<int64_t>({0, -2}, {2}));
           },
           kIndex},
          {"cross_entropy target INT64_MIN",
           [] {
             return nn::cross_entropy(f32({2, 3}), from_vector<int64_t>({0, kI64Min}, {2}));
           },
           kIndex},
          {"cross_entropy target of the wrong shape",
           [] {
             return nn::cross_entropy(f32({2, 3}), i64({3}));
           },
           kShape},
          {"cross_entropy f32 target of the wrong shape",
           [] {
             return nn::cross_entropy(f32({2, 3}), f32({2, 4}));
           },
           error({ErrorKind::ShapeMismatch, ErrorKind::DTypeMismatch})},  // the message names both fixes,
          {"cross_entropy u8 target",
           [] {
             return nn::cross_entropy(f32({2, 3}), u8({2}));
           },
           kDtype},
          {"cross_entropy i64 logits",
           [] {
             return nn::cross_entropy(i64({2, 3}), i64({2}));
           },
           kDtype},
          {"cross_entropy undefined", [] { return nn::cross_entropy(Tensor(), i64({2})); }, kUndef},
          {"cross_entropy 0-d logits", [] { return nn::cross_entropy(scalar(1.0f), i64({})); }, kShape},
          {"cross_entropy label_smoothing 2",
           [] {
             nn::CrossEntropyOptions o;
             o.label_smoothing = 2;
             return nn::cross_entropy(f32({2, 3}), i64({2}), o);
           },
           kArg},
          {"cross_entropy device target",
           [] {
             return nn::cross_entropy(f32({2, 3}), on_device(i64({2})));
           },
           kDevice},
          // torch returns NaN; oxmera refuses the 0/0 as mean does (docs/LIMITATIONS.md).
          {"cross_entropy of an empty batch (mean)",
           [] {
             return nn::cross_entropy(f32({0, 3}), i64({0}));
           },
           error({ErrorKind::EmptyReduction})},
      };
    };
    m["conv2d"] = [] {
      return std::vector<BadCall>{
          {"conv2d rank-3 input",
           [] {
             return nn::functional::conv2d(f32({1, 2, 5}), f32({1, 2, 3, 3}));
           },
           kShape},
          {"conv2d channel mismatch",
           [] {
             return nn::functional::conv2d(f32({1, 2, 5, 5}), f32({1, 3, 3, 3}));
           },
           kShape},
          {"conv2d kernel larger than the input",
           [] {
             return nn::functional::conv2d(f32({1, 1, 2, 2}), f32({1, 1, 3, 3}));
           },
           kArg},
          {"conv2d stride 0",
           [] {
             return nn::functional::conv2d(f32({1, 1, 5, 5}), f32({1, 1, 3, 3}), {}, {0, 1});
           },
           kArg},
          {"conv2d negative padding",
           [] {
             return nn::functional::conv2d(f32({1, 1, 5, 5}), f32({1, 1, 3, 3}), {}, {1, 1}, {-1, 0});
           },
           kArg},
          {"conv2d dilation 0",
           [] {
             return nn::functional::conv2d(f32({1, 1, 5, 5}), f32({1, 1, 3, 3}), {}, {1, 1}, {0, 0}, {0, 1});
           },
           kArg},
          {"conv2d groups 0",
           [] {
             return nn::functional::conv2d(f32({1, 2, 5, 5}), f32({2, 2, 3, 3}), {}, {1, 1}, {0, 0}, {1, 1}, 0);
           },
           kArg},
          {"conv2d groups not dividing",
           [] {
             return nn::functional::conv2d(f32({1, 3, 5, 5}), f32({2, 1, 3, 3}), {}, {1, 1}, {0, 0}, {1, 1}, 2);
           },
           error({ErrorKind::InvalidArgument, ErrorKind::ShapeMismatch})},
          {"conv2d bias of the wrong size",
           [] {
             return nn::functional::conv2d(f32({1, 1, 5, 5}), f32({2, 1, 3, 3}), f32({3}));
           },
           kShape},
          {"conv2d padding INT64_MAX",
           [] {
             return nn::functional::conv2d(f32({1, 1, 5, 5}), f32({1, 1, 3, 3}), {}, {1, 1}, {kI64Max, 0});
           },
           kArg},
          // The int64 extremes of every geometry argument are errors, never a wrapped output size (torch 1.13
          // returns a [1, 1, 1, 3] result for the padding case).
          {"conv2d dilation INT64_MAX",
           [] {
             return nn::functional::conv2d(f32({1, 1, 5, 5}), f32({1, 1, 3, 3}), {}, {1, 1}, {0, 0}, {kI64Max, 1});
           },
           kArg},
          {"conv2d stride INT64_MAX",
           [] {
             return nn::functional::conv2d(f32({1, 1, 5, 5}), f32({1, 1, 3, 3}), {}, {kI64Max, kI64Max});
           },
           result([](const Tensor& y) {
             EXPECT_EQ(y.shape(), (Shape{1, 1, 1, 1}));
           })},
          {"unfold kernel INT64_MAX",
           [] {
             return nn::functional::unfold(f32({1, 1, 5, 5}), {kI64Max, kI64Max});
           },
           kArg},
          {"unfold padding 2^62 (the window count overflows)",
           [] {
             return nn::functional::unfold(f32({1, 1, 5, 5}), {1, 1}, {1, 1}, {int64_t{1} << 62, int64_t{1} << 62});
           },
           kArg},
          {"max_pool2d padding INT64_MAX",
           [] {
             return nn::functional::max_pool2d(f32({1, 1, 5, 5}), {3, 3}, {1, 1}, {kI64Max, 0});
           },
           kArg},
          {"avg_pool2d padding INT64_MAX",
           [] {
             return nn::functional::avg_pool2d(f32({1, 1, 5, 5}), {3, 3}, {1, 1}, {kI64Max, 0});
           },
           kArg},
          {"conv_transpose2d stride INT64_MAX",
           [] {
             return nn::functional::conv_transpose2d(f32({1, 1, 5, 5}), f32({1, 1, 3, 3}), {}, {kI64Max, 1});
           },
           kArg},
          {"conv_transpose2d padding INT64_MAX",
           [] {
             return nn::functional::conv_transpose2d(f32({1, 1, 5, 5}), f32({1, 1, 3, 3}), {}, {1, 1}, {kI64Max, 0});
           },
           kArg},
          {"conv_transpose2d dilation INT64_MAX",
           [] {
             return nn::functional::conv_transpose2d(f32({1, 1, 5, 5}), f32({1, 1, 3, 3}), {}, {1, 1}, {0, 0}, {0, 0},
                                                     1, {kI64Max, 1});
           },
           kArg},
          {"conv2d f64 weight",
           [] {
             return nn::functional::conv2d(f32({1, 1, 5, 5}), ones({1, 1, 3, 3}, DType::F64));
           },
           kDtype},
          {"conv2d undefined weight",
           [] {
             return nn::functional::conv2d(f32({1, 1, 5, 5}), Tensor());
           },
           kUndef},
          {"conv2d device weight",
           [] {
             return nn::functional::conv2d(f32({1, 1, 5, 5}), on_device(f32({1, 1, 3, 3})));
           },
           kDevice},
          {"conv2d empty batch",
           [] {
             return nn::functional::conv2d(f32({0, 1, 5, 5}), f32({2, 1, 3, 3}));
           },
           result([](const Tensor& y) {
             EXPECT_EQ(y.shape(), (Shape{0, 2, 3, 3}));
           })},
      };
    };
    m["repeat"] = [] {
      return std::vector<BadCall>{
          {"repeat fewer repeats than dims",
           [] {
             return f32({2, 3}).repeat({2});
           },
           kArg},
          {"repeat -1", [] { return f32({2}).repeat({-1}); }, kArg},
          {"repeat overflowing", [] { return f32({2}).repeat({kI64Max}); },
           error({ErrorKind::InvalidArgument, ErrorKind::OutOfMemory})},
          {"repeat 0", [] { return f32({2}).repeat({0}); }, result([](const Tensor& y) { EXPECT_EQ(y.numel(), 0); })},
          {"repeat undefined", [] { return Tensor().repeat({2}); }, kUndef},
      };
    };
    m["tile"] = [] {
      return std::vector<BadCall>{
          {"tile -2",
           [] {
             return f32({2, 3}).tile({-2});
           },
           kArg},
          {"tile overflowing",
           [] {
             return f32({2, 3}).tile({kI64Max, kI64Max});
           },
           error({ErrorKind::InvalidArgument, ErrorKind::OutOfMemory})},
          {"tile undefined", [] { return Tensor().tile({2}); }, kUndef},
      };
    };
    m["flip"] = [] {
      auto v = dims_probes("flip", [](const Tensor& x, const Dims& d) { return x.flip(d.empty() ? Dims{0} : d); });
      v.pop_back();  // flip of u8 is defined (a layout op)
      return v;
    };
    m["roll"] = [] {
      return std::vector<BadCall>{
          {"roll dim 2 of [2, 3]",
           [] {
             return f32({2, 3}).roll({1}, {2});
           },
           kIndex},
          {"roll shifts and dims of different lengths",
           [] {
             return f32({2, 3}).roll({1, 1}, {0});
           },
           kArg},
          {"roll INT64_MIN",
           [] {
             return f32({2, 3}).roll({kI64Min}, {1});
           },
           result([](const Tensor& y) { EXPECT_EQ(y.numel(), 6); })},
          {"roll of [0]", [] { return f32({0}).roll({3}); }, result([](const Tensor& y) { EXPECT_EQ(y.numel(), 0); })},
          {"roll undefined", [] { return Tensor().roll({1}); }, kUndef},
      };
    };
    return m;
  }();
  return b;
}

class SweepEntry : public ::testing::TestWithParam<const ops::OpInfo*> {
 protected:
  void SetUp() override { oxt_fake::register_host_memory_device(); }
};

TEST_P(SweepEntry, BadInputsGiveTypedErrorsAndEdgeInputsCorrectResults) {
  const ops::OpInfo& info = *GetParam();
  if (info.kind == ops::OpKind::Unary) {
    sweep_unary(info);
  } else if (info.kind == ops::OpKind::Binary) {
    sweep_binary(info);
  } else {
    auto it = structured_builders().find(info.name);
    ASSERT_NE(it, structured_builders().end())
        << "registry entry '" << info.name << "' has no bad-input cases in tests/test_sweep.cpp: add them";
    for (const auto& c : it->second()) probe(c.what, c.call, c.expect);
  }
}

// ------------------------------------------------------------------ beyond the registry: layers, losses, optimizers,
// linalg (issue #17 item 2: "same for nn layers, losses, optimizers and linalg"). Each case is a bad call a user
// makes with the error kind it must raise, or an edge input with the result it must give.
void run_cases(const std::vector<BadCall>& cases) {
  for (const auto& c : cases) probe(c.what, c.call, c.expect);
}
Expect shape_of(const Shape& s) {
  return result([s](const Tensor& y) { EXPECT_EQ(y.shape(), s); });
}

TEST(Sweep, LayersRefuseMisShapedAndMisTypedInputs) {
  oxt_fake::register_host_memory_device();
  manual_seed(3);
  auto linear = std::make_shared<nn::Linear>(3, 2);
  auto conv = std::make_shared<nn::Conv2d>(3, 4, nn::Pair{3, 3});
  auto emb = std::make_shared<nn::Embedding>(10, 4);
  auto ln = std::make_shared<nn::LayerNorm>(Shape{4});
  auto bn = std::make_shared<nn::BatchNorm2d>(3);
  auto gn = std::make_shared<nn::GroupNorm>(2, 4);
  auto rms = std::make_shared<nn::RMSNorm>(Shape{4});
  auto lstm = std::make_shared<nn::LSTM>(3, 4);
  auto gru = std::make_shared<nn::GRU>(3, 4);
  auto mha = std::make_shared<nn::MultiheadAttention>(8, 2);
  auto mha_out = [mha](const Tensor& q, const Tensor& k, const Tensor& v) {
    return std::get<0>(mha->forward(q, k, v));
  };
  run_cases({
      {"Linear(3, 2) of [4, 5]",
       [=] {
         return linear->forward(f32({4, 5}));
       },
       kShape},
      {"Linear(3, 2) of f64",
       [=] {
         return linear->forward(ones({4, 3}, DType::F64));
       },
       kDtype},
      {"Linear(3, 2) of i64",
       [=] {
         return linear->forward(i64({4, 3}));
       },
       kDtype},
      {"Linear(3, 2) of undefined", [=] { return linear->forward(Tensor()); }, kUndef},
      {"Linear(3, 2) of a device tensor",
       [=] {
         return linear->forward(on_device(f32({4, 3})));
       },
       kDevice},
      {"Linear(3, 2) of [0, 3]",
       [=] {
         return linear->forward(f32({0, 3}));
       },
       shape_of({0, 2})},
      {"Linear(3, 2) of [3] (unbatched)", [=] { return linear->forward(f32({3})); }, shape_of({2})},
      {"Linear(-1, 2)",
       [] {
         return nn::Linear(-1, 2).forward(f32({1, 1}));
       },
       kArg},
      {"Conv2d(3, 4, 3) of [1, 2, 5, 5]",
       [=] {
         return conv->forward(f32({1, 2, 5, 5}));
       },
       kShape},
      {"Conv2d(3, 4, 3) of [2, 5]",
       [=] {
         return conv->forward(f32({2, 5}));
       },
       kShape},
      {"Conv2d(3, 4, 3) of [1, 3, 2, 2] (smaller than the kernel)",
       [=] {
         return conv->forward(f32({1, 3, 2, 2}));
       },
       kArg},
      {"Conv2d(3, 4, 3) of [0, 3, 5, 5]",
       [=] {
         return conv->forward(f32({0, 3, 5, 5}));
       },
       shape_of({0, 4, 3, 3})},
      {"Embedding(10, 4) of index 10",
       [=] {
         return emb->forward(from_vector<int64_t>({1, 10}, {2}));
       },
       kIndex},
      {"Embedding(10, 4) of index -1", [=] { return emb->forward(from_vector<int64_t>({-1}, {1})); }, kIndex},
      {"Embedding(10, 4) of INT64_MIN", [=] { return emb->forward(from_vector<int64_t>({kI64Min}, {1})); }, kIndex},
      {"Embedding(10, 4) of f32 indices", [=] { return emb->forward(f32({2})); }, kDtype},
      {"Embedding(10, 4) of [0] indices", [=] { return emb->forward(i64({0})); }, shape_of({0, 4})},
      {"Embedding(0, 4)", [] { return nn::Embedding(0, 4).forward(i64({1})); },
       error({ErrorKind::InvalidArgument, ErrorKind::IndexOutOfBounds})},
      {"LayerNorm([4]) of [2, 3]",
       [=] {
         return ln->forward(f32({2, 3}));
       },
       kShape},
      {"LayerNorm([4]) of [0, 4]",
       [=] {
         return ln->forward(f32({0, 4}));
       },
       shape_of({0, 4})},
      {"LayerNorm([4]) of f64",
       [=] {
         return ln->forward(ones({2, 4}, DType::F64));
       },
       kDtype},
      {"BatchNorm2d(3) of [2, 4, 5, 5]",
       [=] {
         return bn->forward(f32({2, 4, 5, 5}));
       },
       kShape},
      {"BatchNorm2d(3) of [2, 3, 5]",
       [=] {
         return bn->forward(f32({2, 3, 5}));
       },
       kShape},
      {"BatchNorm2d(3) training on one value per channel",
       [=] {
         return bn->forward(f32({1, 3, 1, 1}));
       },
       error({ErrorKind::InvalidArgument, ErrorKind::ShapeMismatch})},
      {"GroupNorm(3 groups, 4 channels)",
       [] {
         return nn::GroupNorm(3, 4).forward(f32({2, 4, 3}));
       },
       kArg},
      {"GroupNorm(2, 4) of [2, 6, 3]",
       [=] {
         return gn->forward(f32({2, 6, 3}));
       },
       kShape},
      {"RMSNorm([4]) of [2, 3]",
       [=] {
         return rms->forward(f32({2, 3}));
       },
       kShape},
      {"Dropout(1.5)", [] { return nn::Dropout(1.5).forward(f32({3})); }, kArg},
      {"Dropout(-0.1)", [] { return nn::Dropout(-0.1).forward(f32({3})); }, kArg},
      {"Dropout(NaN)", [] { return nn::Dropout(kNaN).forward(f32({3})); }, kArg},
      {"MaxPool2d(0) of [1, 1, 4, 4]",
       [] {
         return nn::MaxPool2d({0, 0}).forward(f32({1, 1, 4, 4}));
       },
       kArg},
      {"Flatten(2, 1) of [2, 3, 4]",
       [] {
         return nn::Flatten(2, 1).forward(f32({2, 3, 4}));
       },
       kArg},
      {"LSTM(3, 4) of [5, 2, 6]",
       [=] {
         return std::get<0>(lstm->forward(f32({5, 2, 6})));
       },
       kShape},
      {"LSTM(3, 4) of [5, 3] (unbatched)",
       [=] {
         return std::get<0>(lstm->forward(f32({5, 3})));
       },
       shape_of({5, 4})},
      {"LSTM(3, 4) with h0 of the wrong shape",
       [=] {
         return std::get<0>(lstm->forward(f32({5, 2, 3}), {f32({1, 3, 4}), f32({1, 2, 4})}));
       },
       kShape},
      {"LSTM(3, 4) with h0 but no c0",
       [=] {
         return std::get<0>(lstm->forward(f32({5, 2, 3}), {f32({1, 2, 4}), Tensor()}));
       },
       kArg},
      {"LSTM(3, 4) of f64",
       [=] {
         return std::get<0>(lstm->forward(ones({5, 2, 3}, DType::F64)));
       },
       kDtype},
      {"LSTM(3, 4) of [5, 2, 3] on a device",
       [=] {
         return std::get<0>(lstm->forward(on_device(f32({5, 2, 3}))));
       },
       kDevice},
      {"GRU(3, 4) of [5, 2, 6]",
       [=] {
         return std::get<0>(gru->forward(f32({5, 2, 6})));
       },
       kShape},
      {"GRU(3, 4) of 4-d input",
       [=] {
         return std::get<0>(gru->forward(f32({5, 2, 3, 1})));
       },
       kShape},
      {"LSTM(3, 0)",
       [] {
         return std::get<0>(nn::LSTM(3, 0).forward(f32({5, 2, 3})));
       },
       kArg},
      {"LSTM(3, 4, num_layers 0)",
       [] {
         nn::RNNOptions o;
         o.num_layers = 0;
         return std::get<0>(nn::LSTM(3, 4, o).forward(f32({5, 2, 3})));
       },
       kArg},
      {"LSTM(3, 4, dropout 2)",
       [] {
         nn::RNNOptions o;
         o.dropout = 2;
         return std::get<0>(nn::LSTM(3, 4, o).forward(f32({5, 2, 3})));
       },
       kArg},
      {"RNN nonlinearity 'sigmoid'",
       [] {
         nn::RNNOptions o;
         o.nonlinearity = "sigmoid";
         return std::get<0>(nn::RNN(3, 4, o).forward(f32({5, 2, 3})));
       },
       kArg},
      {"MultiheadAttention(8, 3)",
       [] {
         return std::get<0>(nn::MultiheadAttention(8, 3).forward(f32({2, 1, 8}), f32({2, 1, 8}), f32({2, 1, 8})));
       },
       kArg},
      {"MultiheadAttention(8, 2) of embed 7",
       [=] {
         return mha_out(f32({5, 2, 7}), f32({5, 2, 7}), f32({5, 2, 7}));
       },
       kShape},
      {"MultiheadAttention(8, 2) batch 2 vs 3",
       [=] {
         return mha_out(f32({5, 2, 8}), f32({6, 3, 8}), f32({6, 3, 8}));
       },
       kShape},
      {"MultiheadAttention(8, 2) key 6 vs value 5",
       [=] {
         return mha_out(f32({5, 2, 8}), f32({6, 2, 8}), f32({5, 2, 8}));
       },
       kShape},
      {"MultiheadAttention(8, 2) of f64",
       [=] {
         return mha_out(ones({5, 2, 8}, DType::F64), ones({5, 2, 8}, DType::F64), ones({5, 2, 8}, DType::F64));
       },
       kDtype},
      {"MultiheadAttention(8, 2) attn_mask of the wrong shape",
       [=] {
         return std::get<0>(mha->forward(f32({5, 2, 8}), f32({6, 2, 8}), f32({6, 2, 8}), {}, false, f32({5, 5})));
       },
       kShape},
      {"TransformerEncoderLayer(8, 3)",
       [] {
         return nn::TransformerEncoderLayer(8, 3).forward(f32({2, 1, 8}));
       },
       kArg},
      {"scaled_dot_product_attention q [2, 4, 8] k [2, 5, 7]",
       [] {
         return nn::functional::scaled_dot_product_attention(f32({2, 4, 8}), f32({2, 5, 7}), f32({2, 5, 8}));
       },
       kShape},
      {"scaled_dot_product_attention 1-d",
       [] { return nn::functional::scaled_dot_product_attention(f32({8}), f32({8}), f32({8})); },
       error({ErrorKind::ShapeMismatch, ErrorKind::InvalidArgument})},
      // Zero keys: each output is a weighted sum of nothing, zeros (torch's math path gives the same).
      {"scaled_dot_product_attention of zero keys",
       [] {
         return nn::functional::scaled_dot_product_attention(f32({2, 4, 8}), f32({2, 0, 8}), f32({2, 0, 8}));
       },
       result([](const Tensor& y) {
         EXPECT_EQ(y.shape(), (Shape{2, 4, 8}));
         EXPECT_EQ(values(y), std::vector<double>(64, 0.0));
       })},
  });
}

TEST(Sweep, LossesRefuseMismatchedTargets) {
  oxt_fake::register_host_memory_device();
  run_cases({
      {"mse_loss [3] vs [4]", [] { return nn::mse_loss(f32({3}), f32({4})); }, kShape},
      {"mse_loss f32 vs f64", [] { return nn::mse_loss(f32({3}), ones({3}, DType::F64)); }, kDtype},
      {"mse_loss i64", [] { return nn::mse_loss(i64({3}), i64({3})); }, kDtype},
      {"mse_loss device target", [] { return nn::mse_loss(f32({3}), on_device(f32({3}))); }, kDevice},
      {"mse_loss of [0] (mean)", [] { return nn::mse_loss(f32({0}), f32({0})); }, error({ErrorKind::EmptyReduction})},
      {"mse_loss of [0] (sum)", [] { return nn::mse_loss(f32({0}), f32({0}), nn::Reduction::Sum); },
       result([](const Tensor& y) { EXPECT_EQ(y.item<float>(), 0.f); })},
      {"nll_loss target 3 of 3 classes",
       [] {
         return nn::nll_loss(f32({2, 3}), from_vector<int64_t>({0, 3}, {2}));
       },
       kIndex},
      {"nll_loss weight of the wrong size",
       [] {
         return nn::nll_loss(f32({2, 3}), i64({2}), f32({4}));
       },
       kShape},
      {"nll_loss f32 target",
       [] {
         return nn::nll_loss(f32({2, 3}), f32({2}));
       },
       kDtype},
      {"bce_with_logits [3] vs [4]", [] { return nn::binary_cross_entropy_with_logits(f32({3}), f32({4})); }, kShape},
      {"bce_with_logits f64 target",
       [] { return nn::binary_cross_entropy_with_logits(f32({3}), ones({3}, DType::F64)); }, kDtype},
      {"bce_with_logits i64 target", [] { return nn::binary_cross_entropy_with_logits(f32({3}), i64({3})); }, kDtype},
      {"bce_with_logits weight [4]", [] { return nn::binary_cross_entropy_with_logits(f32({3}), f32({3}), f32({4})); },
       kShape},
  });
}

TEST(Sweep, OptimizersRefuseBadOptionsAndLeaveParametersOnAFailedStep) {
  oxt_fake::register_host_memory_device();  // ctest runs each test in its own process
  auto leaf = [] { return ones({3}, DType::F32).requires_grad_(); };
  auto sgd = [=](optim::SGDOptions o) {
    Tensor p = leaf();
    optim::SGD opt({p}, o);
    return p;
  };
  auto adam = [=](optim::AdamOptions o) {
    Tensor p = leaf();
    optim::Adam opt({p}, o);
    return p;
  };
  auto rmsprop = [=](optim::RMSpropOptions o) {
    Tensor p = leaf();
    optim::RMSprop opt({p}, o);
    return p;
  };
  run_cases({
      {"SGD lr -1", [=] { return sgd({.lr = -1}); }, kArg},
      {"SGD lr NaN", [=] { return sgd({.lr = kNaN}); }, kArg},
      {"SGD lr inf", [=] { return sgd({.lr = kInf}); }, kArg},
      {"SGD momentum -0.5", [=] { return sgd({.lr = 0.1, .momentum = -0.5}); }, kArg},
      {"SGD weight_decay -1", [=] { return sgd({.lr = 0.1, .weight_decay = -1}); }, kArg},
      {"SGD nesterov without momentum", [=] { return sgd({.lr = 0.1, .nesterov = true}); }, kArg},
      {"Adam beta1 1",
       [=] {
         return adam({.betas = {1.0, 0.999}});
       },
       kArg},
      {"Adam beta2 -0.1",
       [=] {
         return adam({.betas = {0.9, -0.1}});
       },
       kArg},
      {"Adam beta1 NaN",
       [=] {
         return adam({.betas = {kNaN, 0.999}});
       },
       kArg},
      {"Adam eps -1", [=] { return adam({.eps = -1}); }, kArg},
      {"Adam eps NaN", [=] { return adam({.eps = kNaN}); }, kArg},
      {"RMSprop alpha -1", [=] { return rmsprop({.alpha = -1}); }, kArg},
      {"RMSprop alpha NaN", [=] { return rmsprop({.alpha = kNaN}); }, kArg},
      {"RMSprop momentum NaN", [=] { return rmsprop({.momentum = kNaN}); }, kArg},
      {"SGD of no parameters",
       [] {
         optim::SGD opt(std::vector<Tensor>{}, {.lr = 0.1});
         return Tensor();
       },
       kArg},
      {"Adam of no parameters",
       [] {
         optim::Adam opt(std::vector<Tensor>{}, {});
         return Tensor();
       },
       kArg},
      {"AdamW of no parameters",
       [] {
         optim::AdamW opt(std::vector<Tensor>{}, {});
         return Tensor();
       },
       kArg},
      {"RMSprop of no parameters",
       [] {
         optim::RMSprop opt(std::vector<Tensor>{}, {});
         return Tensor();
       },
       kArg},
      {"Adam of an i64 parameter",
       [] {
         optim::Adam opt({i64({3})}, {});
         return Tensor();
       },
       kDtype},
      {"Adam of a non-leaf",
       [=] {
         Tensor p = leaf();
         optim::Adam opt({p * 2.0}, {});
         return Tensor();
       },
       kArg},
      {"Adam of an undefined parameter",
       [] {
         optim::Adam opt({Tensor()}, {});
         return Tensor();
       },
       kArg},
      {"Adam of the same parameter twice",
       [=] {
         Tensor p = leaf();
         optim::Adam opt({p, p}, {});
         return Tensor();
       },
       kArg},
      {"Adam of a transposed parameter",
       [] {
         Tensor p = ones({2, 3}, DType::F32).t().requires_grad_();
         optim::Adam opt({p}, {});
         return Tensor();
       },
       kArg},
      {"Adam set_lr(-1) then step",
       [=] {
         Tensor p = leaf();
         optim::Adam opt({p}, {});
         p.set_grad(ones({3}, DType::F32));
         opt.set_lr(0, -1);
         opt.step();
         return p;
       },
       kArg},
  });
  // set_grad names what differs.
  run_cases({
      {"set_grad of the wrong shape",
       [] {
         Tensor p = ones({2}, DType::F32).requires_grad_();
         p.set_grad(ones({3}, DType::F32));
         return p;
       },
       kShape},
      {"set_grad of the wrong dtype",
       [] {
         Tensor p = ones({2}, DType::F32).requires_grad_();
         p.set_grad(ones({2}, DType::F64));
         return p;
       },
       kDtype},
      {"set_grad on a device",
       [] {
         Tensor p = ones({2}, DType::F32).requires_grad_();
         p.set_grad(on_device(ones({2}, DType::F32)));
         return p;
       },
       kDevice},
  });
  // A step that fails on its second group's options changes no parameter and no optimizer state.
  {
    Tensor a = full({3}, 1.0, DType::F32).requires_grad_(), b = full({2}, 2.0, DType::F32).requires_grad_();
    optim::Adam opt(std::vector<optim::ParamGroup<optim::AdamOptions>>{{{a}, {.lr = 0.1}}, {{b}, {.lr = 0.1}}});
    a.set_grad(ones({3}, DType::F32));
    b.set_grad(ones({2}, DType::F32));
    opt.step();  // a first, good step: state exists
    const auto a0 = values(a), b0 = values(b);
    const auto state0 = opt.state_tensors();
    opt.set_lr(1, kNaN);
    probe(
        "Adam.step with group 1's lr NaN",
        [&] {
          opt.step();
          return a;
        },
        kArg);
    EXPECT_EQ(values(a), a0);
    EXPECT_EQ(values(b), b0);
    const auto state1 = opt.state_tensors();
    ASSERT_EQ(state1.size(), state0.size());
    for (size_t i = 0; i < state0.size(); ++i) EXPECT_EQ(values(state1[i].second), values(state0[i].second));
  }
}

TEST(Sweep, LinalgRefusesNonSquareMisTypedAndIndefiniteInputs) {
  oxt_fake::register_host_memory_device();
  const Tensor spd = from_vector<double>({4, 1, 1, 3}, {2, 2});
  const Tensor indefinite = from_vector<double>({1, 2, 2, 1}, {2, 2});
  const Tensor asym = from_vector<double>({1, 2, 0, 1}, {2, 2});
  const Tensor nan_m = from_vector<double>({kNaN, 0, 0, 1}, {2, 2});
  run_cases({
      {"cholesky [2, 3]",
       [] {
         return linalg::cholesky(ones({2, 3}, DType::F64));
       },
       kShape},
      {"cholesky [3]", [] { return linalg::cholesky(ones({3}, DType::F64)); },
       error({ErrorKind::ShapeMismatch, ErrorKind::InvalidArgument})},
      {"cholesky i64",
       [] {
         return linalg::cholesky(i64({2, 2}));
       },
       kDtype},
      {"cholesky undefined", [] { return linalg::cholesky(Tensor()); }, kUndef},
      {"cholesky indefinite", [=] { return linalg::cholesky(indefinite); }, error({ErrorKind::NotPositiveDefinite})},
      {"cholesky of NaN", [=] { return linalg::cholesky(nan_m); },
       error({ErrorKind::NotPositiveDefinite, ErrorKind::InvalidArgument})},
      {"cholesky [0, 0]",
       [] {
         return linalg::cholesky(ones({0, 0}, DType::F64));
       },
       shape_of({0, 0})},
      {"cholesky [3, 0, 0]",
       [] {
         return linalg::cholesky(ones({3, 0, 0}, DType::F64));
       },
       shape_of({3, 0, 0})},
      {"cholesky [0, 2, 2]",
       [] {
         return linalg::cholesky(ones({0, 2, 2}, DType::F64));
       },
       shape_of({0, 2, 2})},
      {"logdet indefinite", [=] { return linalg::logdet(indefinite); }, error({ErrorKind::NotPositiveDefinite})},
      {"det [2, 3]",
       [] {
         return linalg::det(ones({2, 3}, DType::F64));
       },
       kShape},
      {"solve a [2, 2] b [3, 1]",
       [=] {
         return linalg::solve(spd, ones({3, 1}, DType::F64));
       },
       kShape},
      {"solve f64 a, f32 b",
       [=] {
         return linalg::solve(spd, ones({2, 1}, DType::F32));
       },
       kDtype},
      {"solve device b",
       [=] {
         return linalg::solve(spd.to(DType::F32), on_device(ones({2, 1}, DType::F32)));
       },
       kDevice},
      // The mis-shaped b is named even though this a (all ones) would also fail to factorise.
      {"solve batch 2 vs 3",
       [] {
         return linalg::solve(ones({2, 2, 2}, DType::F64), ones({3, 2, 1}, DType::F64));
       },
       kShape},
      {"solve a [2, 2] of ones, b [3, 1]",
       [] {
         return linalg::solve(ones({2, 2}, DType::F64), ones({3, 1}, DType::F64));
       },
       kShape},
      {"solve a [2, 2] b [2, 0]",
       [=] {
         return linalg::solve(spd, ones({2, 0}, DType::F64));
       },
       shape_of({2, 0})},
      {"cholesky_solve b [3, 1] L [2, 2]",
       [=] {
         return linalg::cholesky_solve(ones({3, 1}, DType::F64), spd);
       },
       kShape},
      {"inverse [2, 3]",
       [] {
         return linalg::inverse(ones({2, 3}, DType::F64));
       },
       kShape},
      {"inverse indefinite", [=] { return linalg::inverse(indefinite); }, error({ErrorKind::NotPositiveDefinite})},
      {"solve_triangular [2, 3]",
       [] {
         return linalg::solve_triangular(ones({2, 3}, DType::F64), ones({2, 1}, DType::F64), false);
       },
       kShape},
      {"eigh not symmetric", [=] { return linalg::eigh(asym).eigenvalues; }, error({ErrorKind::NotSymmetric})},
      {"eigh [2, 3]",
       [] {
         return linalg::eigh(ones({2, 3}, DType::F64)).eigenvalues;
       },
       kShape},
      {"eigh i64",
       [] {
         return linalg::eigh(i64({2, 2})).eigenvalues;
       },
       kDtype},
      // A non-finite matrix has no eigendecomposition (torch: fails to converge), wherever the NaN or inf is.
      {"eigh of NaN off the diagonal",
       [] {
         return linalg::eigh(from_vector<double>({1, kNaN, kNaN, 2}, {2, 2})).eigenvalues;
       },
       kArg},
      {"eigh of NaN on the diagonal", [=] { return linalg::eigh(nan_m).eigenvalues; }, kArg},
      {"eigh of inf",
       [] {
         return linalg::eigh(from_vector<double>({kInf, 0, 0, 1}, {2, 2})).eigenvalues;
       },
       kArg},
      {"eigh [0, 0]",
       [] {
         return linalg::eigh(ones({0, 0}, DType::F64)).eigenvalues;
       },
       shape_of({0})},
      {"eigh [1, 1]",
       [] {
         return linalg::eigh(full({1, 1}, 5.0, DType::F64)).eigenvalues;
       },
       result([](const Tensor& y) { EXPECT_EQ(values(y), std::vector<double>{5.0}); })},
      {"trace [3]", [] { return linalg::trace(ones({3}, DType::F64)); },
       error({ErrorKind::ShapeMismatch, ErrorKind::InvalidArgument})},
      {"diag_embed 0-d", [] { return linalg::diag_embed(scalar(1.0)); },
       error({ErrorKind::ShapeMismatch, ErrorKind::InvalidArgument})},
  });
}

std::vector<const ops::OpInfo*> all_entries() {
  std::vector<const ops::OpInfo*> v;
  for (auto& i : ops::unary_ops()) v.push_back(&i);
  for (auto& i : ops::binary_ops()) v.push_back(&i);
  for (auto& i : ops::structured_ops()) v.push_back(&i);
  return v;
}
INSTANTIATE_TEST_SUITE_P(Registry, SweepEntry, ::testing::ValuesIn(all_entries()),
                         [](const ::testing::TestParamInfo<const ops::OpInfo*>& p) {
                           const char* prefix = p.param->kind == ops::OpKind::Unary    ? "unary_"
                                                : p.param->kind == ops::OpKind::Binary ? "binary_"
                                                                                       : "";
                           return std::string(prefix) + p.param->name;
                         });

}  // namespace
