#pragma once
#include <cstddef>
#include <cstdint>
#include <ostream>

namespace oxmera {

// F32 is the compute dtype everywhere; F64 is CPU-only; I64 holds indices; U8 is storage only.
enum class DType : uint8_t { F32 = 0, F64 = 1, I64 = 2, U8 = 3 };
inline constexpr int kNumDTypes = 4;

constexpr size_t itemsize(DType d) noexcept {
  switch (d) {
    case DType::F32:
      return 4;
    case DType::F64:
      return 8;
    case DType::I64:
      return 8;
    case DType::U8:
      return 1;
  }
  return 1;
}
constexpr bool is_floating(DType d) noexcept { return d == DType::F32 || d == DType::F64; }
const char* dtype_name(DType d) noexcept;  // "f32", "f64", "i64", "u8"
std::ostream& operator<<(std::ostream& os, DType d);

template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::F32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::F64;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::I64;
};
template <>
struct dtype_of<uint8_t> {
  static constexpr DType value = DType::U8;
};
template <class T>
inline constexpr DType dtype_of_v = dtype_of<T>::value;

}  // namespace oxmera
