#pragma once
// Vectorisable elementary functions for the CPU kernels. std::exp and friends are opaque libm calls that block
// vectorisation (without -ffast-math); these are branch-free inline code — range reduction, a polynomial, selects
// for the special values — templated on float / double, so a loop over any op's math (ops::defs with
// M = VecMath) compiles to SIMD code at each ISA level the kernels are built for (baseline, AVX2, AVX-512: one
// source, the compiler picks the vector width; the kernels are compiled with -fno-trapping-math, without which
// GCC 12 does not if-convert the selects, and which changes no value). Accuracy is tested against the f64 C library in
// tests/test_vec_math.cpp (max-ULP bounds, special values); docs/ARCHITECTURE.md says why these and not SLEEF.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

// Every function here is forced inline: a call left in a loop stops its vectorisation.
#define OXM_VM_INLINE [[gnu::always_inline]] inline

namespace oxmera::detail {

namespace vm {

template <class T>
struct Fp;
template <>
struct Fp<float> {
  using I = int32_t;
  static constexpr int mant = 23, bias = 127;
  static constexpr float magic = 12582912.0f;  // 1.5 * 2^23: x + magic - magic rounds x to an integer (|x| < 2^22)
};
template <>
struct Fp<double> {
  using I = int64_t;
  static constexpr int mant = 52, bias = 1023;
  static constexpr double magic = 6755399441055744.0;  // 1.5 * 2^52
};

// 2^n for integral n in the normal exponent range, built from the bits.
template <class T>
OXM_VM_INLINE T pow2i(typename Fp<T>::I n) {
  using I = typename Fp<T>::I;
  using U = std::make_unsigned_t<I>;  // unsigned: a NaN lane's garbage n must not overflow (its result is NaN anyway)
  return std::bit_cast<T>(static_cast<I>((static_cast<U>(n) + static_cast<U>(Fp<T>::bias)) << Fp<T>::mant));
}

// Horner over coefficients given highest degree first, as straight-line code (a loop here would be an inner loop
// the vectoriser refuses).
template <class T, size_t N, size_t... I>
OXM_VM_INLINE T horner_unrolled(T x, const T (&c)[N], std::index_sequence<I...>) {
  T p = c[0];
  ((p = p * x + c[I + 1]), ...);
  return p;
}
template <class T, size_t N>
OXM_VM_INLINE T horner(T x, const T (&c)[N]) {
  return horner_unrolled(x, c, std::make_index_sequence<N - 1>{});
}

// x = n ln2 + r with |r| <= ln2/2 (Cody-Waite, ln2 in two parts so n * hi is exact); returns r and n (as an
// integer through the magic-number rounding, which needs no float-to-int conversion instruction).
template <class T>
OXM_VM_INLINE T reduce_ln2(T x, typename Fp<T>::I& n) {
  using I = typename Fp<T>::I;
  constexpr T log2e = T(1.44269504088896340736);
  constexpr T ln2_hi = std::is_same_v<T, float> ? T(0.693145751953125) : T(6.93147180369123816490e-01);
  constexpr T ln2_lo = std::is_same_v<T, float> ? T(1.428606765330187045e-06) : T(1.90821492927058770002e-10);
  const T shifted = x * log2e + Fp<T>::magic;
  const T nf = shifted - Fp<T>::magic;
  using U = std::make_unsigned_t<I>;  // unsigned: no overflow UB for lanes whose result is replaced anyway
  n = static_cast<I>(static_cast<U>(std::bit_cast<I>(shifted)) - static_cast<U>(std::bit_cast<I>(Fp<T>::magic)));
  return (x - nf * ln2_hi) - nf * ln2_lo;
}

// e^r - 1 on |r| <= ln2/2: Taylor to degree 7 (f32) / 13 (f64), truncation below 1e-8 / 5e-18 relative.
template <class T>
OXM_VM_INLINE T expm1_poly(T r) {
  if constexpr (std::is_same_v<T, float>) {
    constexpr float c[] = {1.f / 5040, 1.f / 720, 1.f / 120, 1.f / 24, 1.f / 6, 0.5f};
    return r + r * r * horner(r, c);
  } else {
    constexpr double c[] = {1.0 / 6227020800, 1.0 / 479001600, 1.0 / 39916800, 1.0 / 3628800, 1.0 / 362880, 1.0 / 40320,
                            1.0 / 5040,       1.0 / 720,       1.0 / 120,      1.0 / 24,      1.0 / 6,      0.5};
    return r + r * r * horner(r, c);
  }
}

// e^r on |r| <= ln2/2 in f32 as one degree-6 polynomial (our own fit: 3.9e-9 relative with these coefficients), for
// the functions below that inline their own exponential.
namespace exp_coef {
inline constexpr float kDeg6F[] = {0.00138141715f, 0.0083689196f, 0.0416684076f, 0.166665196f, 0.49999994f, 1.f, 1.f};
inline constexpr float kDeg6TwiceF[] = {2 * kDeg6F[0], 2 * kDeg6F[1], 2 * kDeg6F[2], 2 * kDeg6F[3],
                                        2 * kDeg6F[4], 2 * kDeg6F[5], 2 * kDeg6F[6]};  // 2 e^r
}  // namespace exp_coef

template <class T>
struct ExpLimits;
template <>
struct ExpLimits<float> {
  static constexpr float hi = 88.72283172607421875f;  // the largest float whose e^x is finite
  static constexpr float lo = -104.0f;                // e^x rounds to 0 below
  // exp clamps to [lo, over]: e^lo rounds to 0 and 2^128 (two factors) overflows to inf by itself, so no select on
  // the result is needed; NaN passes the clamp and propagates through the arithmetic.
  static constexpr float over = 89.0f;
};
template <>
struct ExpLimits<double> {
  static constexpr double hi = 709.782712893383973096;  // log(DBL_MAX)
  static constexpr double lo = -746.0;
  static constexpr double over = 710.0;
};

template <class T>
OXM_VM_INLINE T exp(T x) {
  using I = typename Fp<T>::I;
  constexpr T lo = ExpLimits<T>::lo, over = ExpLimits<T>::over;
  const T xc = x < lo ? lo : (x > over ? over : x);  // NaN: both false, stays NaN
  I n;
  const T r = reduce_ln2(xc, n);
  if constexpr (std::is_same_v<T, float>) {
    // 2 e^r by the doubled degree-6 fit (no 1 + p), times 2^(n - 1) in two factors, so that n = 128 overflows and
    // subnormal results are right (one rounding): the clamp's ends give 0 and inf through the arithmetic.
    const I k = n - 1;
    const I k1 = k >> 1;
    return horner(r, exp_coef::kDeg6TwiceF) * pow2i<T>(k1) * pow2i<T>(k - k1);
  } else {
    const T p = expm1_poly(r);
    // 2^n in two factors, so that n = 1024 overflows and subnormal results are right (one rounding).
    const I n1 = n >> 1;
    return (T(1) + p) * pow2i<T>(n1) * pow2i<T>(n - n1);
  }
}

// e^x for a sum 1 + e^x (sigmoid, silu). f32: below -86.6 the result is some value in (0, 2^-124] instead of e^x
// (1 + it is 1 either way), which saves exp's second 2^n factor: 2 e^r (the doubled coefficients, exactly) times
// 2^(n - 1), normal for n in [-125, 128]; above, as exp (overflow gives inf). f64: exp.
template <class T>
OXM_VM_INLINE T exp_in_sum(T x) {
  if constexpr (std::is_same_v<T, float>) {
    const float xc = x < -86.6f ? -86.6f : (x > 89.f ? 89.f : x);  // NaN stays NaN
    int32_t n;
    const float r = reduce_ln2(xc, n);
    return horner(r, exp_coef::kDeg6TwiceF) * pow2i<float>(n - 1);
  } else {
    return exp(x);
  }
}

template <class T>
OXM_VM_INLINE T expm1(T x) {
  using I = typename Fp<T>::I;
  constexpr T hi = ExpLimits<T>::hi;
  constexpr T lo = std::is_same_v<T, float> ? T(-30) : T(-60);  // e^x - 1 rounds to -1 below
  const T xc = x < lo ? lo : (x > hi ? hi : x);
  I n;
  const T r = reduce_ln2(xc, n);
  const T p = expm1_poly(r);
  // 2^n (p + 1) - 1 = 2^n p + (2^n - 1), exact-ish for small n; for large n the -1 does not matter.
  const I nsmall = n > 60 ? I(60) : n;
  const T s = pow2i<T>(nsmall);
  const T small = s * p + (s - T(1));
  const I n1 = n >> 1;
  const T big = (T(1) + p) * pow2i<T>(n1) * pow2i<T>(n - n1) - T(1);
  T y = n > 60 ? big : small;
  y = x < lo ? T(-1) : y;
  y = x > hi ? std::numeric_limits<T>::infinity() : y;
  y = x == T(0) ? x : y;  // keeps -0
  return x != x ? x : y;
}

// x = 2^e m with m in [sqrt(1/2), sqrt(2)) for a positive normal x (the split every log below starts from).
template <class T>
OXM_VM_INLINE T split_mantissa(T x, typename Fp<T>::I& e) {
  using I = typename Fp<T>::I;
  const I bits = std::bit_cast<I>(x);
  constexpr I mant_mask = (I(1) << Fp<T>::mant) - 1;
  e = ((bits >> Fp<T>::mant) & I(2 * Fp<T>::bias + 1)) - I(Fp<T>::bias);
  T m = std::bit_cast<T>((bits & mant_mask) | (I(Fp<T>::bias) << Fp<T>::mant));  // [1, 2)
  const bool above = m > T(1.41421356237309504880);
  e = above ? e + 1 : e;
  return above ? m * T(0.5) : m;
}
// log(1 + f) for f = m - 1 with m from split_mantissa, |f| <= 0.4143. f64: 2 atanh(s), s = f / (2 + f),
// |s| <= 0.1716: 2 s (1 + s^2/3 + s^4/5 + ...) to f64 precision.
template <class T>
OXM_VM_INLINE T log1p_reduced(T f) {
  if constexpr (std::is_same_v<T, float>) {
    // f32: f - f^2/2 + f^3 P(f), a degree-8 minimax P on this range (the classic Cephes logf fit): no division,
    // which is the slowest instruction of the atanh form and bounds a log-heavy kernel's throughput.
    constexpr float c[] = {7.0376836292e-2f,  -1.1514610310e-1f, 1.1676998740e-1f,  -1.2420140846e-1f, 1.4249322787e-1f,
                           -1.6668057665e-1f, 2.0000714765e-1f,  -2.4999993993e-1f, 3.3333331174e-1f};
    const T f2 = f * f;
    return f + (f * f2 * horner(f, c) - T(0.5) * f2);
  } else {
    const T s = f / (T(2) + f);
    const T s2 = s * s;
    constexpr double c[] = {2.0 / 21, 2.0 / 19, 2.0 / 17, 2.0 / 15, 2.0 / 13,
                            2.0 / 11, 2.0 / 9,  2.0 / 7,  2.0 / 5,  2.0 / 3};
    return T(2) * s + s * s2 * horner(s2, c);
  }
}

template <class T>
OXM_VM_INLINE T log(T x) {
  using I = typename Fp<T>::I;
  constexpr T min_normal = std::numeric_limits<T>::min();
  constexpr T sub_scale = std::is_same_v<T, float> ? T(33554432.0) : T(18014398509481984.0);  // 2^25, 2^54
  constexpr int sub_exp = std::is_same_v<T, float> ? 25 : 54;
  const bool sub = x < min_normal;
  I e;
  const T m = split_mantissa(sub ? x * sub_scale : x, e);
  e = sub ? e - I(sub_exp) : e;
  const T logm = log1p_reduced(m - T(1));
  constexpr T ln2_hi = std::is_same_v<T, float> ? T(0.693145751953125) : T(6.93147180369123816490e-01);
  constexpr T ln2_lo = std::is_same_v<T, float> ? T(1.428606765330187045e-06) : T(1.90821492927058770002e-10);
  // e as T without an int64 -> double conversion (AVX2 has none): through the magic number's bits
  const T ef = std::bit_cast<T>(e + std::bit_cast<I>(Fp<T>::magic)) - Fp<T>::magic;
  T y = ef * ln2_hi + (logm + ef * ln2_lo);
  y = x == T(0) ? -std::numeric_limits<T>::infinity() : y;
  y = x < T(0) ? std::numeric_limits<T>::quiet_NaN() : y;
  y = x == std::numeric_limits<T>::infinity() ? x : y;
  return x != x ? x : y;
}

// log(1 + x) = log(u) - ((u - 1) - x) / u with u = 1 + x rounded (the classic correction of u's rounding).
template <class T>
OXM_VM_INLINE T log1p(T x) {
  const T u = T(1) + x;
  const T y = vm::log(u) - ((u - T(1)) - x) / u;
  T r = u == T(1) ? x : y;
  r = u == T(0) ? -std::numeric_limits<T>::infinity() : r;
  r = x == std::numeric_limits<T>::infinity() ? x : r;
  return x != x ? x : r;
}

// log(1 + e^-a) for a >= 0 (softplus, mish): t = e^-a is in [0, 1], so log1p needs none of its special cases, and
// u = 1 + t's rounding error c is folded into the mantissa (fdlibm's way) instead of a second division. NaN propagates
// through c.
template <class T>
OXM_VM_INLINE T log1p_exp_neg(T a) {
  using I = typename Fp<T>::I;
  const T t = vm::exp(-a);
  const T u = T(1) + t;
  const T c = t - (u - T(1));
  I e;  // 0, or 1 when the mantissa was halved or u == 2
  const T m = split_mantissa(u, e);
  const T logm = log1p_reduced((m - T(1)) + c * (e == 0 ? T(1) : T(0.5)));
  constexpr T ln2 = std::is_same_v<T, float> ? T(0.693147180559945309) : T(0.693147180559945309417);
  return e == 0 ? logm : logm + ln2;
}

// tanh |x| = -expm1(-2|x|) / (2 + expm1(-2|x|)): no overflow, no cancellation near 0; the sign of x restored.
template <class T>
OXM_VM_INLINE T tanh(T x) {
  const T a = std::fabs(x);
  const T ac = a > T(20) ? T(20) : a;
  const T em = vm::expm1(T(-2) * ac);
  const T t = -em / (T(2) + em);
  return x != x ? x : std::copysign(std::fabs(t), x);
}

// erf: |x| < 1: x P(x^2); 1 <= |x| < cut: 1 - e^(-x^2) Q(|x|) with Q a Chebyshev fit of erfcx (mpmath, in
// u = the interval mapped to [-1, 1]; f64 in two pieces); beyond: +-1.
namespace erf_coef {
inline constexpr float kSmallF[] = {7.875875062685488e-05f, -0.000801686428716587f, 0.005189087423433974f,
                                    -0.026854212010626412f, 0.11283594715160218f,   -0.37612626666720334f,
                                    1.1283791658483509f};
inline constexpr float kLargeF[] = {-3.566417876899525e-05f, 9.629120195463984e-05f,  -0.00014741614293549128f,
                                    0.000368151097857375f,   -0.0010136625981274393f, 0.0024256389379578133f,
                                    -0.005568837645570178f,  0.012484123148533609f,   -0.027005458212834586f,
                                    0.05611094755697202f,    -0.11152101793723113f,   0.21080635774313639f};
inline constexpr double kSmallD[] = {-7.795898827002142e-10, 1.3720064546777686e-08, -1.6208483801871705e-07,
                                     1.6447424703317362e-06, -1.492473690741966e-05, 0.00012055294904839707,
                                     -0.0008548325975389692, 0.0052239776071164225,  -0.02686617064323777,
                                     0.11283791670945006,    -0.37612638903183543,   1.1283791670955126};
inline constexpr double kLarge1D[] = {
    -2.5142267291939364e-11, 1.0885208435466582e-10, -3.3746485737542734e-10, 1.3914126752786892e-09,
    -5.890296320663701e-09,  2.3408246602459806e-08, -9.072901538050072e-08,  3.4480570326644777e-07,
    -1.2795264857047954e-06, 4.628197386307233e-06,  -1.6293717931091297e-05, 5.572830931415907e-05,
    -0.00018477836736927953, 0.0005924699962484308,  -0.0018316642757225372,  0.005440738537400482,
    -0.01546063776429149,    0.041802752603528726,   -0.1067964618534896,     0.25539567631050575};
inline constexpr double kLarge3D[] = {3.6620914354354556e-09,  -1.4200194989314377e-08, 4.0672025486539483e-08,
                                      -1.5261960871427327e-07, 5.856851194088754e-07,   -2.1433115664945932e-06,
                                      7.717130773722622e-06,   -2.742980243322736e-05,  9.601442097892721e-05,
                                      -0.0003307144469834922,  0.0011201614180255182,   -0.0037279443623137623,
                                      0.012179532228092938,    -0.039023892947264334,   0.12248480427384142};
}  // namespace erf_coef

// erf(x) with gauss = e^(-x^2) given.
template <class T>
OXM_VM_INLINE T erf_with_gauss(T x, T gauss) {
  const T a = std::fabs(x);
  const T a2 = a * a;
  T y;
  if constexpr (std::is_same_v<T, float>) {
    const float small = a * horner(a2, erf_coef::kSmallF);
    const float q = horner((a - 2.5f) * (2.f / 3.f), erf_coef::kLargeF);  // [1, 4] -> [-1, 1]
    const float large = 1.f - gauss * q;
    y = a < 1.f ? small : (a < 4.f ? large : 1.f);
  } else {
    const double small = a * horner(a2, erf_coef::kSmallD);
    const double q1 = horner(a - 2.0, erf_coef::kLarge1D);                  // [1, 3] -> [-1, 1]
    const double q3 = horner((a - 4.5) * (2.0 / 3.0), erf_coef::kLarge3D);  // [3, 6] -> [-1, 1]
    const double large = 1.0 - gauss * (a < 3.0 ? q1 : q3);
    y = a < 1.0 ? small : (a < 6.0 ? large : 1.0);
  }
  return x != x ? x : std::copysign(y, x);
}
template <class T>
OXM_VM_INLINE T erf(T x) {
  const T a = std::fabs(x);
  return erf_with_gauss(x, vm::exp(-(a * a)));
}

// e^(-x^2/2) for gelu, for 0 <= x <= 13.2 (f32: the result stays normal, so one 2^n factor and exp's degree-6 fit)
// / 40 (f64: e^-800 is 0, and the two-factor 2^n stays exact down there); the caller clamps. x^2 = h + l exactly — by
// an FMA where the ISA level has one, else from x = xh + xl with xh the top 12 (f32) / 26 (f64) significand bits, so
// that xh^2 is exact — and both parts enter the ln2 reduction. A plain e^(-x * x / 2) is off by about x^2/2 ulp
// (x^2's rounding scaled by the exponent), i.e. tens of ulp in the lower tail that gelu keeps.
template <class T>
OXM_VM_INLINE T gauss_half_sq(T a) {
  using I = typename Fp<T>::I;
  constexpr T log2e = T(1.44269504088896340736);
  constexpr T ln2_hi = std::is_same_v<T, float> ? T(0.693145751953125) : T(6.93147180369123816490e-01);
  constexpr T ln2_lo = std::is_same_v<T, float> ? T(1.428606765330187045e-06) : T(1.90821492927058770002e-10);
#if defined(__FMA__)
  const T h = a * a;
  const T th = T(-0.5) * h;
  const T tl = T(-0.5) * std::fma(a, a, -h);
#else
  constexpr I low_bits = std::is_same_v<T, float> ? I(0xfff) : I((I(1) << 27) - 1);
  const T xh = std::bit_cast<T>(static_cast<I>(std::bit_cast<I>(a) & ~low_bits));
  const T xl = a - xh;
  const T th = T(-0.5) * (xh * xh);
  const T tl = T(-0.5) * (xl * (xh + a));
#endif
  const T shifted = (th + tl) * log2e + Fp<T>::magic;
  const T nf = shifted - Fp<T>::magic;
  using U = std::make_unsigned_t<I>;
  const I n =
      static_cast<I>(static_cast<U>(std::bit_cast<I>(shifted)) - static_cast<U>(std::bit_cast<I>(Fp<T>::magic)));
  const T r = ((th - nf * ln2_hi) - nf * ln2_lo) + tl;
  if constexpr (std::is_same_v<T, float>) {
    return horner(r, exp_coef::kDeg6F) * pow2i<float>(n);
  } else {
    const T p = expm1_poly(r);
    const I n1 = n >> 1;
    return (T(1) + p) * pow2i<T>(n1) * pow2i<T>(n - n1);
  }
}

// Phi(x), the standard normal CDF (gelu's x Phi(x)), with gauss = e^(-x^2/2) returned for the gradient's density.
// The lower tail t = Phi(-|x|) = erfc(|x| / sqrt 2) / 2 is computed directly (never 1 - something), so it keeps its
// relative accuracy far into the tail; Phi = t for x < 0, 1 - t otherwise.
// f32: t = e^(-x^2/2) R(|x|) with R a rational fit of erfcx(|x| / sqrt 2) / 2 of degree 4/5 on [0, 13.25] (our own
// fit: 2.1e-8 relative with these f32 coefficients; it tends to c / |x| like erfcx); one division, no select between
// ranges. |x| is capped at 13.2 so that e^(-x^2/2) needs one 2^n factor, and t is 0 beyond (|gelu| < 1e-38 there,
// subnormal). f64: erf's pieces above (the power series below 1, e^(-a^2) times the erfcx fits up to 6, then 0).
namespace ncdf_coef {
inline constexpr float kNumF[] = {0.00401607621f, 0.0399562158f, 0.181223437f, 0.435572982f, 0.5f};
inline constexpr float kDenF[] = {0.0100666657f, 0.100162812f, 0.464160383f, 1.19413674f, 1.6690309f, 1.f};
}  // namespace ncdf_coef
template <class T>
OXM_VM_INLINE T normal_cdf(T x, T& gauss) {
  const T ax = std::fabs(x);
  T t;
  if constexpr (std::is_same_v<T, float>) {
    constexpr float cap = 13.2f;            // e^(-cap^2/2) is still a normal float (gauss_half_sq's one 2^n factor)
    const float axc = ax > cap ? cap : ax;  // NaN stays NaN
    const float g = gauss_half_sq(axc);
    const bool beyond = ax > cap;
    gauss = beyond ? 0.f : g;
    t = beyond ? 0.f : g * (horner(axc, ncdf_coef::kNumF) / horner(axc, ncdf_coef::kDenF));  // NaN: g is NaN
  } else {
    const double axc = ax > 40.0 ? 40.0 : ax;  // e^-800 is 0; NaN stays NaN
    const double g = gauss_half_sq(axc);
    gauss = g;
    const double a = axc * 0.70710678118654752440;
    const double small = a * horner(a * a, erf_coef::kSmallD);
    const double q1 = horner(a - 2.0, erf_coef::kLarge1D);                  // [1, 3] -> [-1, 1]
    const double q3 = horner((a - 4.5) * (2.0 / 3.0), erf_coef::kLarge3D);  // [3, 6] -> [-1, 1]
    const double large = 0.5 * g * (a < 3.0 ? q1 : q3);
    t = a < 1.0 ? 0.5 * (1.0 - small) : (a < 6.0 ? large : 0.0);
    t = x != x ? x : t;
  }
  return x < T(0) ? t : T(1) - t;
}

// sin / cos: x = n pi/2 + r (Cody-Waite, pi/2 in three parts), |r| <= pi/4, Taylor polynomials for sin r and
// cos r, the quadrant n mod 4 picks and signs them. Valid for |x| <= trig_limit<T>; the kernels recompute larger
// arguments with the C library (trig_needs_libm).
template <class T>
inline constexpr T trig_limit = std::is_same_v<T, float> ? T(6000) : T(1e6);
template <class T>
OXM_VM_INLINE bool trig_needs_libm(T x) {
  return std::fabs(x) > trig_limit<T>;
}

template <class T>
OXM_VM_INLINE void sincos_reduced(T x, T& s, T& c, typename Fp<T>::I& q) {
  using I = typename Fp<T>::I;
  constexpr T two_over_pi = T(0.636619772367581343076);
  // pi/2 split so that n * p1 and n * p2 are exact for |n| < 2^12 (f32: 12-bit parts) / 2^20 (f64: fdlibm's
  // 33-bit parts).
  constexpr T p1 = std::is_same_v<T, float> ? T(1.57080078125) : T(1.57079632673412561417e+00);
  constexpr T p2 = std::is_same_v<T, float> ? T(-4.453584551811218e-06) : T(6.07710050630396597660e-11);
  constexpr T p3 = std::is_same_v<T, float> ? T(-8.705515752716053e-10) : T(2.02226624879595063154e-21);
  const T shifted = x * two_over_pi + Fp<T>::magic;
  const T nf = shifted - Fp<T>::magic;
  // In unsigned arithmetic: beyond trig_limit the difference overflows (those lanes are recomputed with libm).
  using U = std::make_unsigned_t<I>;
  q = static_cast<I>(static_cast<U>(std::bit_cast<I>(shifted)) - static_cast<U>(std::bit_cast<I>(Fp<T>::magic)));
  const T r = ((x - nf * p1) - nf * p2) - nf * p3;
  const T r2 = r * r;
  if constexpr (std::is_same_v<T, float>) {
    constexpr float cs[] = {2.7557319223985893e-06f, -1.984126984126984e-04f, 8.333333333333333e-03f,
                            -0.16666666666666666f};
    constexpr float cc[] = {-2.755731922398589e-07f, 2.48015873015873e-05f, -1.388888888888889e-03f,
                            4.1666666666666664e-02f, -0.5f};
    s = r + r * r2 * horner(r2, cs);
    c = 1.f + r2 * horner(r2, cc);
  } else {
    constexpr double cs[] = {7.647163731819816e-13,   -1.6059043836821613e-10, 2.505210838544172e-08,
                             -2.7557319223985893e-06, 1.984126984126984e-04,   -8.333333333333333e-03,
                             0.16666666666666666};
    constexpr double cc[] = {
        4.779477332387385e-14, -1.1470745597729725e-11, 2.08767569878681e-09,   -2.755731922398589e-07,
        2.48015873015873e-05,  -1.388888888888889e-03,  4.1666666666666664e-02, -0.5};
    s = r - r * r2 * horner(r2, cs);
    c = 1.0 + r2 * horner(r2, cc);
  }
}

template <class T>
OXM_VM_INLINE T sin(T x) {
  typename Fp<T>::I q;
  T s, c;
  sincos_reduced(x, s, c, q);
  const T v = (q & 1) ? c : s;
  const T y = (q & 2) ? -v : v;
  return x == T(0) ? x : y;  // keeps -0
}
template <class T>
OXM_VM_INLINE T cos(T x) {
  typename Fp<T>::I q;
  T s, c;
  sincos_reduced(x, s, c, q);
  const T v = (q & 1) ? s : c;
  return ((q + 1) & 2) ? -v : v;
}

// ln(x) in f64 for a float's magnitude x (never subnormal as a double), to the ~1e-12 relative accuracy an f32
// power needs, rather than full f64: the atanh series stops at s^13. 0 -> -inf, inf -> inf, NaN -> NaN.
OXM_VM_INLINE double log_for_powf(double x) {
  using I = int64_t;
  I e;
  const double m = split_mantissa(x, e);
  const double f = m - 1.0, s = f / (2.0 + f), s2 = s * s;
  constexpr double c[] = {2.0 / 13, 2.0 / 11, 2.0 / 9, 2.0 / 7, 2.0 / 5, 2.0 / 3};
  const double logm = 2.0 * s + s * s2 * horner(s2, c);
  const double ef = std::bit_cast<double>(e + std::bit_cast<I>(Fp<double>::magic)) - Fp<double>::magic;
  double y = ef * 0.693147180559945309417 + logm;
  y = x == 0.0 ? -std::numeric_limits<double>::infinity() : y;
  y = x == std::numeric_limits<double>::infinity() ? x : y;
  return x != x ? x : y;
}
// e^t in f64 for an f32 result: t clamped to [-110, 90] (beyond, the float conversion gives 0 or inf anyway), so
// 2^n is one factor; Taylor to degree 10 on |r| <= ln2/2 (1e-12 relative). NaN propagates.
OXM_VM_INLINE double exp_for_powf(double t) {
  const double tc = t < -110.0 ? -110.0 : (t > 90.0 ? 90.0 : t);
  int64_t n;
  const double r = reduce_ln2(tc, n);
  constexpr double c[] = {1.0 / 3628800, 1.0 / 362880, 1.0 / 40320, 1.0 / 5040, 1.0 / 720,
                          1.0 / 120,     1.0 / 24,     1.0 / 6,     0.5,        1.0};
  return (1.0 + r * horner(r, c)) * pow2i<double>(n);
}

// a^b for f32 through f64 log and exp (|b log a| stays exact enough in f64), with C's special cases: b == 0 or
// a == 1 give 1; a negative base needs an integral b (odd: negative result), else NaN; |a| == 1 with b = +-inf is 1.
OXM_VM_INLINE float powf(float a, float b) {
  const double ad = std::fabs(static_cast<double>(a)), bd = b;
  const double mag = exp_for_powf(bd * log_for_powf(ad));
  const bool integral = std::floor(b) == b;
  const float half = b * 0.5f;
  const bool odd = integral && std::fabs(b) < 16777216.f && std::floor(half) != half;
  float y = static_cast<float>(mag);
  y = (std::signbit(a) && odd) ? -y : y;
  y = (a < 0.f && !integral && std::fabs(a) != INFINITY) ? NAN : y;
  y = (std::fabs(a) == 1.f && std::fabs(b) == INFINITY) ? 1.f : y;
  y = (b == 0.f || a == 1.f) ? 1.f : y;
  return y;
}

}  // namespace vm

// The elementary functions of the op registry's math (ops::Math's interface) as the CPU kernels run them: the
// vectorisable ones above for f32 and f64; the C library for erfc and f64 pow (not vectorised: see
// docs/LIMITATIONS.md) and for other types.
struct VecMath {
#define OXM_VM_FN(fn)                                                                      \
  template <class T>                                                                       \
  [[gnu::always_inline]] static T fn(T x) {                                                \
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) return vm::fn(x); \
    return std::fn(x);                                                                     \
  }
  OXM_VM_FN(exp)
  OXM_VM_FN(expm1)
  OXM_VM_FN(log)
  OXM_VM_FN(log1p)
  OXM_VM_FN(tanh)
  OXM_VM_FN(erf)
  OXM_VM_FN(sin)
  OXM_VM_FN(cos)
#undef OXM_VM_FN
  template <class T>
  [[gnu::always_inline]] static T erfc(T x) {
    return std::erfc(x);
  }
  template <class T>
  [[gnu::always_inline]] static T pow(T a, T b) {
    if constexpr (std::is_same_v<T, float>) return vm::powf(a, b);
    return std::pow(a, b);
  }
  template <class T>
  [[gnu::always_inline]] static T log1p_exp_neg(T a) {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) return vm::log1p_exp_neg(a);
    return std::log1p(std::exp(-a));
  }
  template <class T>
  [[gnu::always_inline]] static T exp_in_sum(T x) {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) return vm::exp_in_sum(x);
    return std::exp(x);
  }
  template <class T>
  [[gnu::always_inline]] static T normal_cdf(T x, T& gauss) {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) return vm::normal_cdf(x, gauss);
    gauss = std::exp(T(-0.5) * x * x);
    return T(0.5) * std::erfc(x * T(-0.70710678118654752440));
  }
};

// The f32 names the softmax and other kernels use.
OXM_VM_INLINE float exp_f32(float x) { return vm::exp(x); }
OXM_VM_INLINE float tanh_f32(float x) { return vm::tanh(x); }

}  // namespace oxmera::detail
