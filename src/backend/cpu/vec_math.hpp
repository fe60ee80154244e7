#pragma once
// Vectorisable elementary functions for hot CPU loops (the compiler turns loops over these into SIMD code;
// std::exp is an opaque libm call that blocks vectorisation without -ffast-math).
#include <cmath>
#include <cstdint>
#include <cstring>

namespace oxmera::detail {

// exp for f32 within ~2 ulp: Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, degree-6 Taylor
// polynomial, scaling by 2^n through the exponent bits. Overflow gives +inf, underflow 0, NaN propagates.
inline float exp_f32(float x) {
  const float clamped = x < -87.33654f ? -87.33654f : (x > 88.7f ? 88.7f : x);
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
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  float y = p * scale;
  y = x < -87.33654f ? 0.0f : y;  // below ln(FLT_MIN): flushed to 0 (no denormals)
  y = x > 88.7f ? INFINITY : y;
  return x != x ? x : y;
}

}  // namespace oxmera::detail
