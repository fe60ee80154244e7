#pragma once
// Defined conversions of a double (a scalar operand, a fill value, an element being cast) to each dtype.
// A float outside an integer type's range is undefined behaviour in C++; oxmera defines it (issue #17):
// float -> integer truncates toward zero, saturates at the target's range and maps NaN to 0 — what a GPU's
// conversion instruction does too. Integer -> integer conversions wrap, as in C++ and torch. The ops layer
// refuses scalars an integer dtype cannot hold before they get here (ops::check_scalar_fits), so saturation
// is reached only by element casts (`to(DType::I64)` of large floats).
#include <cstdint>
#include <limits>
#include <type_traits>

namespace oxmera::detail {

template <class D, class S>
constexpr D convert_value(S v) {
  if constexpr (std::is_floating_point_v<S> && std::is_integral_v<D>) {
    // One past the largest value, in the source type: max + 1 is a power of two, exact in float and double
    // (2^63 - 1 itself is not; it rounds up to 2^63).
    constexpr S hi = static_cast<S>(std::numeric_limits<D>::max()) + S(1);
    if (!(v == v)) return D(0);
    if constexpr (std::is_signed_v<D>) {
      constexpr S lo = static_cast<S>(std::numeric_limits<D>::min());
      if (v < lo) return std::numeric_limits<D>::min();
    } else {
      if (v <= S(-1)) return D(0);
    }
    if (v >= hi) return std::numeric_limits<D>::max();
    return static_cast<D>(v);
  } else {
    return static_cast<D>(v);
  }
}

}  // namespace oxmera::detail
