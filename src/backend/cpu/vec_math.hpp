#pragma once
// Vectorisable elementary functions for hot CPU loops (the compiler turns loops over these into SIMD code;
// std::exp is an opaque libm call that blocks vectorisation without -ffast-math).
#include <cmath>
#include <cstdint>
#include <cstring>

namespace oxmera::detail {

// exp for f32 within ~2 ulp: Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, degree-6 Taylor
// polynomial, scaling by 2^n through the exponent bits (in two steps below 2^-126, so subnormal results are
// right too). Overflow gives +inf, results below the smallest subnormal 0, NaN propagates.
inline float exp_f32(float x) {
  const float clamped = x < -104.0f ? -104.0f : (x > 88.7f ? 88.7f : x);
  const float n = std::nearbyint(clamped * 1.44269504088896341f);
  float r = clamped - n * 0.693145751953125f;  // ln2 high part
  r = r - n * 1.428606765330187045e-06f;       // ln2 low part
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const bool tiny = n < -125.0f;  // 2^n is not a normal float: scale by 2^(n+64), then by 2^-64
  int32_t bits = (static_cast<int32_t>(n) + (tiny ? 64 : 0) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  float y = p * scale * (tiny ? 5.42101086242752217e-20f : 1.0f);
  y = x < -104.0f ? 0.0f : y;
  y = x > 88.7f ? INFINITY : y;
  return x != x ? x : y;
}

// tanh for f32: an odd Taylor polynomial below |x| = 0.4 (no cancellation), 1 - 2 / (exp(2|x|) + 1) above,
// with the sign restored. Relative error ~3e-7; NaN propagates; saturates to +-1.
inline float tanh_f32(float x) {
  const float a = x < 0 ? -x : x;
  const float a2 = a * a;
  float p = 21844.0f / 6081075.0f;
  p = p * a2 - 1382.0f / 155925.0f;
  p = p * a2 + 62.0f / 2835.0f;
  p = p * a2 - 17.0f / 315.0f;
  p = p * a2 + 2.0f / 15.0f;
  p = p * a2 - 1.0f / 3.0f;
  const float small = a + a * a2 * p;
  const float large = 1.0f - 2.0f / (exp_f32(2.0f * a) + 1.0f);
  float y = a < 0.4f ? small : large;
  y = x < 0 ? -y : y;
  return x != x ? x : y;
}

// Logistic sigmoid for f32 via exp_f32 of -|x| (no overflow), mirrored for negative x.
inline float sigmoid_f32(float x) {
  const float e = exp_f32(x < 0 ? x : -x);  // in (0, 1]
  const float pos = 1.0f / (1.0f + e), neg = e / (1.0f + e);
  const float y = x >= 0 ? pos : neg;
  return x != x ? x : y;
}

}  // namespace oxmera::detail
