// Accuracy of the CPU's vectorised elementary functions (src/backend/cpu/vec_math.hpp) against the C library's
// long double functions: sweeps over each function's range (and beyond it), special values (+-inf, NaN, +-0,
// subnormals, the overflow and underflow boundaries of exp, large |x| for sin/cos), each with an asserted max-ULP
// bound. Checked twice: the functions themselves, and the registry's ops on a tensor (the kernel that runs them,
// dispatched to this machine's ISA level, with the C-library pass for large sin/cos arguments).
#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "backend/cpu/vec_math.hpp"
#include "test_util.hpp"

using namespace oxt;
namespace vm = oxmera::detail::vm;

namespace {

// |got - ref| in units in the last place of T at ref; 0 when both are the same NaN / inf, inf on a mismatch there.
template <class T>
double ulp_error(T got, long double ref) {
  if (std::isnan(ref)) return std::isnan(got) ? 0 : INFINITY;
  if (std::isnan(got)) return INFINITY;
  const long double maxv = std::numeric_limits<T>::max();
  if (std::fabs(ref) > maxv) {
    // beyond T's range: inf, or the largest finite value where rounding allows it
    return (std::isinf(got) && std::signbit(got) == std::signbit(ref)) || std::fabs(got) == maxv ? 0 : INFINITY;
  }
  if (std::isinf(got)) return INFINITY;
  const T r = static_cast<T>(ref);
  const T a = std::fabs(r);
  T spacing = std::nextafter(a, std::numeric_limits<T>::infinity()) - a;
  if (a == std::numeric_limits<T>::max()) spacing = a - std::nextafter(a, T(0));
  return static_cast<double>(std::fabs(static_cast<long double>(got) - ref) / spacing);
}

struct Sweep {
  std::vector<double> xs;
};

// Uniform samples in [lo, hi] plus an even grid (so the ends are hit), as T.
template <class T>
std::vector<T> uniform_points(double lo, double hi, int n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<T> v;
  for (int i = 0; i < n; ++i) v.push_back(static_cast<T>(d(rng)));
  for (int i = 0; i <= 200; ++i) v.push_back(static_cast<T>(lo + (hi - lo) * i / 200));
  return v;
}
// Magnitudes log-uniform over [2^elo, 2^ehi], both signs when `both`.
template <class T>
std::vector<T> log_points(int elo, int ehi, int n, bool both, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> e(elo, ehi);
  std::vector<T> v;
  for (int i = 0; i < n; ++i) {
    T x = static_cast<T>(std::exp2(e(rng)));
    v.push_back(both && (i & 1) ? -x : x);
  }
  return v;
}
template <class T>
std::vector<T> specials() {
  using L = std::numeric_limits<T>;
  return {T(0),           -T(0),           L::infinity(),    -L::infinity(),
          L::quiet_NaN(), L::denorm_min(), -L::denorm_min(), L::min(),
          -L::min(),      L::min() / 3,    L::max(),         -L::max(),
          T(1),           T(-1),           T(0.5),           T(-0.5),
          T(1e-30),       T(-1e-30)};
}

template <class T>
using Fn = std::function<T(T)>;
using Ref = std::function<long double(long double)>;

// Max ULP error of f against ref over xs; reports the worst input.
template <class T>
double max_ulp(const Fn<T>& f, const Ref& ref, const std::vector<T>& xs, T* worst = nullptr) {
  double m = 0;
  for (T x : xs) {
    const double e = ulp_error<T>(f(x), ref(static_cast<long double>(x)));
    if (e > m) {
      m = e;
      if (worst) *worst = x;
    }
  }
  return m;
}

// The same through the registry op on a tensor (contiguous, so the vectorised loop runs).
template <class T>
double max_ulp_op(const std::function<Tensor(const Tensor&)>& op, const Ref& ref, const std::vector<T>& xs) {
  Tensor t = from_vector<T>(xs, {static_cast<int64_t>(xs.size())});
  std::vector<T> got = op(t).template to_vector<T>();
  double m = 0;
  for (size_t i = 0; i < xs.size(); ++i) m = std::max(m, ulp_error<T>(got[i], ref(static_cast<long double>(xs[i]))));
  return m;
}

template <class T>
std::vector<T> concat(std::vector<T> a, const std::vector<T>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

template <class T>
struct Case {
  const char* name;
  Fn<T> f;
  Ref ref;
  std::function<Tensor(const Tensor&)> op;  // the registry op running it, or null
  std::vector<T> xs;
  double bound;  // max ULP asserted
};

template <class T>
std::vector<Case<T>> cases() {
  constexpr bool f32 = std::is_same_v<T, float>;
  const auto sp = specials<T>();
  const double ehi = f32 ? 89 : 710, elo = f32 ? -110 : -750;
  std::vector<T> exp_pts = concat(uniform_points<T>(elo, ehi, 20000, 1), uniform_points<T>(-2, 2, 5000, 2));
  exp_pts = concat(exp_pts, sp);
  for (T b : {T(vm::ExpLimits<T>::hi), T(vm::ExpLimits<T>::lo), T(f32 ? 88.72283935546875 : 709.79),
              T(f32 ? -87.33654 : -708.39641853226408), T(f32 ? -103.97208 : -745.13321910194110)})
    for (T v : {b, std::nextafter(b, T(-INFINITY)), std::nextafter(b, T(INFINITY))}) exp_pts.push_back(v);
  // exp_in_sum is exp where e^x is a normal float (below, any value up to 2^-126: SpecialValues checks that)
  auto exp_in_sum_pts = exp_pts;
  std::erase_if(exp_in_sum_pts, [&](T x) { return f32 && x < T(-86.6); });
  const auto log_pts = concat(
      concat(log_points<T>(f32 ? -149 : -1074, f32 ? 127 : 1023, 20000, false, 3), uniform_points<T>(0.5, 2, 5000, 4)),
      concat(sp, uniform_points<T>(-3, -0.001, 100, 5)));
  const auto log1p_pts = concat(concat(uniform_points<T>(-1, 3, 20000, 6), log_points<T>(-60, 60, 5000, false, 7)),
                                concat(sp, log_points<T>(-60, -1, 2000, true, 8)));
  auto softplus_tail_pts =
      concat(concat(uniform_points<T>(0, f32 ? 110 : 750, 20000, 17), uniform_points<T>(0, 3, 5000, 18)),
             concat(log_points<T>(-140, 3, 3000, false, 19), sp));
  std::erase_if(softplus_tail_pts, [](T x) { return x < 0; });  // a >= 0 by contract (NaN stays)
  const auto tanh_pts =
      concat(concat(uniform_points<T>(-25, 25, 20000, 9), log_points<T>(-140, 3, 5000, true, 10)), sp);
  const auto erf_pts = concat(concat(uniform_points<T>(-7, 7, 20000, 11), log_points<T>(-140, 2, 5000, true, 12)), sp);
  // gelu = x Phi(x) keeps relative accuracy in its lower tail (no 1 + erf cancellation): f32 to a few ulp down to
  // -13.2 (beyond, where |gelu| < 1e-38, f32 gives 0); f64 to a few ulp down to -4.2 and to about 1e-12
  // relative (the erfcx fit of erf's [3, 6] piece is tuned for erf's absolute error) down to -8; beyond, the result is
  // 0 (|gelu| < 1e-15 there).
  const auto gelu_pts =
      concat(concat(uniform_points<T>(f32 ? -13.2 : -4.2, 8, 20000, 20), uniform_points<T>(-3, 3, 5000, 21)),
             concat(log_points<T>(-140, 2, 5000, true, 22), sp));
  const Fn<T> gelu_f = [](T x) {
    T g;
    return x * vm::normal_cdf(x, g);
  };
  const Ref gelu_ref = [](long double x) { return 0.5L * x * std::erfc(-x * 0.70710678118654752440084436210485L); };
  const std::function<Tensor(const Tensor&)> gelu_op = [](const Tensor& t) { return t.gelu(); };
  const auto gelu_tail_pts = uniform_points<T>(f32 ? -13.2 : -8, -4.2, 5000, 23);
  const double tl = vm::trig_limit<T>;
  const auto trig_pts = concat(concat(uniform_points<T>(-10, 10, 20000, 13), uniform_points<T>(-tl, tl, 20000, 14)),
                               concat(log_points<T>(-140, 0, 2000, true, 15), sp));
  auto trig_fn_pts = trig_pts;  // the functions alone: within their documented range (no inf: NaN is right there)
  std::erase_if(trig_fn_pts, [&](T x) { return std::fabs(x) > tl && !std::isinf(x); });
  const auto trig_op_pts = concat(trig_pts, log_points<T>(13, f32 ? 127 : 1023, 2000, true, 16));  // kernel fix-up
  return {
      {"exp", [](T x) { return vm::exp(x); }, [](long double x) { return std::exp(x); },
       [](const Tensor& t) { return t.exp(); }, exp_pts, 2},
      {"e^x in 1+e^x", [](T x) { return vm::exp_in_sum(x); }, [](long double x) { return std::exp(x); }, nullptr,
       exp_in_sum_pts, 2},
      {"expm1", [](T x) { return vm::expm1(x); }, [](long double x) { return std::expm1(x); },
       [](const Tensor& t) { return t.expm1(); }, exp_pts, 3},
      {"log", [](T x) { return vm::log(x); }, [](long double x) { return std::log(x); },
       [](const Tensor& t) { return t.log(); }, log_pts, 2},
      {"log1p", [](T x) { return vm::log1p(x); }, [](long double x) { return std::log1p(x); },
       [](const Tensor& t) { return t.log1p(); }, log1p_pts, 3},
      {"log1p(e^-a)", [](T x) { return vm::log1p_exp_neg(x); }, [](long double x) { return std::log1p(std::exp(-x)); },
       nullptr, softplus_tail_pts, 3},
      {"tanh", [](T x) { return vm::tanh(x); }, [](long double x) { return std::tanh(x); },
       [](const Tensor& t) { return t.tanh(); }, tanh_pts, 3},
      {"erf", [](T x) { return vm::erf(x); }, [](long double x) { return std::erf(x); },
       [](const Tensor& t) { return t.erf(); }, erf_pts, 3},
      {"gelu", gelu_f, gelu_ref, gelu_op, gelu_pts, f32 ? 12 : 8},
      {"gelu tail", gelu_f, gelu_ref, gelu_op, gelu_tail_pts, f32 ? 12 : 6000},
      {"e^(-x^2/2)",
       [](T x) {
         T g;
         vm::normal_cdf(x, g);
         return g;
       },
       [](long double x) { return std::exp(-0.5L * x * x); }, nullptr, gelu_pts, 2},
      {"sin", [](T x) { return vm::sin(x); }, [](long double x) { return std::sin(x); }, nullptr, trig_fn_pts, 2.5},
      {"cos", [](T x) { return vm::cos(x); }, [](long double x) { return std::cos(x); }, nullptr, trig_fn_pts, 2.5},
      {"sin (op)", nullptr, [](long double x) { return std::sin(x); }, [](const Tensor& t) { return t.sin(); },
       trig_op_pts, 2.5},
      {"cos (op)", nullptr, [](long double x) { return std::cos(x); }, [](const Tensor& t) { return t.cos(); },
       trig_op_pts, 2.5},
  };
}

template <class T>
void check_all(const char* dtype) {
  for (const Case<T>& c : cases<T>()) {
    if (c.f) {
      T worst = 0;
      const double e = max_ulp<T>(c.f, c.ref, c.xs, &worst);
      EXPECT_LE(e, c.bound) << c.name << " " << dtype << ": worst at x = " << std::setprecision(17) << worst;
      std::printf("%-10s %s max %.2f ulp over %zu points\n", c.name, dtype, e, c.xs.size());
    }
    if (c.op) {
      const double e = max_ulp_op<T>(c.op, c.ref, c.xs);
      EXPECT_LE(e, c.bound) << c.name << " " << dtype << " through the op";
      std::printf("%-10s %s op max %.2f ulp\n", c.name, dtype, e);
    }
  }
}

}  // namespace

TEST(VecMath, F32WithinUlpBounds) { check_all<float>("f32"); }
TEST(VecMath, F64WithinUlpBounds) { check_all<double>("f64"); }

// Special values exactly (what the ULP sweep only bounds).
TEST(VecMath, SpecialValues) {
  const float inf = INFINITY;
  EXPECT_EQ(vm::exp(-inf), 0.f);
  EXPECT_EQ(vm::exp(inf), inf);
  EXPECT_EQ(vm::exp(0.f), 1.f);
  EXPECT_EQ(vm::exp(88.72283935546875f), inf);  // first float whose e^x overflows
  EXPECT_TRUE(std::isfinite(vm::exp(88.72283172607421875f)));
  EXPECT_EQ(vm::exp(-104.f), 0.f);
  EXPECT_GT(vm::exp(-103.f), 0.f);  // subnormal result
  EXPECT_EQ(vm::exp(710.0), static_cast<double>(inf));
  EXPECT_EQ(vm::exp(-746.0), 0.0);
  EXPECT_TRUE(std::isnan(vm::exp(NAN)));
  for (float x : {-86.7f, -100.f, -1e30f, -inf}) {  // where 1 + e^x is 1: some value in (0, 2^-124]
    EXPECT_GE(vm::exp_in_sum(x), 0.f) << x;
    EXPECT_LE(vm::exp_in_sum(x), 0x1p-124f) << x;
  }
  EXPECT_EQ(vm::exp_in_sum(88.72283935546875f), inf);
  EXPECT_EQ(vm::exp_in_sum(inf), inf);
  EXPECT_TRUE(std::isnan(vm::exp_in_sum(NAN)));
  EXPECT_EQ(1.f / (1.f + vm::exp_in_sum(100.f)), 0.f);  // sigmoid(-100) is 0, as torch's
  EXPECT_EQ(vm::expm1(-inf), -1.f);
  EXPECT_TRUE(std::signbit(vm::expm1(-0.f)));
  EXPECT_EQ(vm::log(0.f), -inf);
  EXPECT_EQ(vm::log(-0.f), -inf);
  EXPECT_TRUE(std::isnan(vm::log(-1.f)));
  EXPECT_EQ(vm::log(inf), inf);
  EXPECT_EQ(vm::log(1.f), 0.f);
  EXPECT_EQ(vm::log1p(-1.0), -static_cast<double>(inf));
  EXPECT_EQ(vm::log1p(static_cast<double>(inf)), static_cast<double>(inf));
  EXPECT_TRUE(std::signbit(vm::log1p(-0.f)));
  for (float z : {0.f, -0.f}) {
    EXPECT_EQ(std::signbit(vm::tanh(z)), std::signbit(z));
    EXPECT_EQ(std::signbit(vm::erf(z)), std::signbit(z));
    EXPECT_EQ(std::signbit(vm::sin(z)), std::signbit(z));
    EXPECT_EQ(vm::cos(z), 1.f);
  }
  EXPECT_EQ(vm::tanh(inf), 1.f);
  EXPECT_EQ(vm::tanh(-inf), -1.f);
  EXPECT_EQ(vm::erf(inf), 1.f);
  EXPECT_EQ(vm::erf(-inf), -1.f);
  for (float v : {vm::tanh(NAN), vm::erf(NAN), vm::sin(NAN), vm::cos(NAN), vm::sin(inf), vm::cos(-inf), vm::log(NAN)})
    EXPECT_TRUE(std::isnan(v));
}

// f32 pow (through f64 log and exp) against the long double C library, with C's special cases.
TEST(VecMath, PowF32) {
  std::mt19937_64 rng(17);
  std::uniform_real_distribution<double> da(0, 10), db(-12, 12);
  double worst = 0;
  for (int i = 0; i < 50000; ++i) {
    const float a = static_cast<float>(da(rng)), b = static_cast<float>(db(rng));
    worst = std::max(worst, ulp_error<float>(vm::powf(a, b), std::pow(static_cast<long double>(a), b)));
  }
  for (float a : {-3.f, -2.5f, -1.f, -0.5f})
    for (float b : {-3.f, -2.f, -1.f, 0.f, 1.f, 2.f, 3.f, 7.f})
      worst = std::max(worst, ulp_error<float>(vm::powf(a, b), std::pow(static_cast<long double>(a), b)));
  std::printf("pow f32 max %.2f ulp\n", worst);
  EXPECT_LE(worst, 1.0);
  const float inf = INFINITY;
  const std::vector<std::pair<float, float>> sp = {
      {0.f, 0.f},  {NAN, 0.f},   {1.f, NAN},  {-1.f, inf}, {-1.f, -inf}, {0.f, -1.f},    {-0.f, -1.f}, {-0.f, 3.f},
      {-0.f, 2.f}, {-2.f, 0.5f}, {inf, 2.f},  {inf, -2.f}, {-inf, 3.f},  {-inf, 2.f},    {-inf, 0.5f}, {0.5f, inf},
      {2.f, inf},  {0.5f, -inf}, {2.f, -inf}, {NAN, 1.f},  {2.f, NAN},   {-8.f, 1.f / 3}};
  for (auto [a, b] : sp) {
    const float want = std::pow(a, b), got = vm::powf(a, b);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << a << "^" << b;
    } else {
      EXPECT_EQ(got, want) << a << "^" << b;
      EXPECT_EQ(std::signbit(got), std::signbit(want)) << a << "^" << b;
    }
  }
}
