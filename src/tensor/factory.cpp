// Tensor constructors and the random number generator. The constructors that fill through a backend (full,
// zeros_like, ones_like) are defined in the ops layer (src/ops/storage.cpp).
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "oxmera/random.hpp"
#include "tensor/tensor_impl.hpp"

namespace oxmera {

// ---------------------------------------------------------------- Generator
namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

void Generator::seed_(uint64_t seed) noexcept {
  uint64_t x = seed;
  for (auto& s : s_) s = splitmix64(x);
  has_cached_ = false;
}
uint64_t Generator::next_u64() noexcept {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}
double Generator::next_double() noexcept { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
double Generator::next_normal() noexcept {
  if (has_cached_) {
    has_cached_ = false;
    return cached_;
  }
  double u1 = 0.0;
  while (u1 <= 0.0) u1 = next_double();
  double u2 = next_double();
  double r = std::sqrt(-2.0 * std::log(u1)), th = 6.283185307179586 * u2;
  cached_ = r * std::sin(th);
  has_cached_ = true;
  return r * std::cos(th);
}
void Generator::set_state(const State& st) noexcept {
  for (int i = 0; i < 4; ++i) s_[i] = st.s[i];
  cached_ = st.cached_normal;
  has_cached_ = st.has_cached;
}

Generator& default_generator() {
  static Generator* g = new Generator(0);
  return *g;
}
void manual_seed(uint64_t seed) { default_generator() = Generator(seed); }

// ---------------------------------------------------------------- constructors
namespace {
Tensor host_empty(const Shape& shape, DType dtype, const char* op) {
  return detail::make_empty(shape, dtype, Device::cpu(), op);
}
template <class T, class F>
Tensor generate(const Shape& shape, DType dtype, const char* op, F&& f) {
  Tensor out = host_empty(shape, dtype, op);
  T* p = out.impl()->ptr<T>();
  for (int64_t i = 0; i < out.numel(); ++i) p[i] = f(i);
  return out;
}
template <class F>
Tensor generate_any(const Shape& shape, DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::F32:
      return generate<float>(shape, dtype, op, [&](int64_t i) { return static_cast<float>(f(i)); });
    case DType::F64:
      return generate<double>(shape, dtype, op, f);
    case DType::I64:
      return generate<int64_t>(shape, dtype, op, [&](int64_t i) { return static_cast<int64_t>(f(i)); });
    case DType::U8:
      return generate<uint8_t>(shape, dtype, op, [&](int64_t i) { return static_cast<uint8_t>(f(i)); });
  }
  return {};
}
}  // namespace

template <class T>
requires(detail::is_native_element_v<T>) Tensor from_vector(const std::vector<T>& values, const Shape& shape) {
  int64_t n = checked_numel(shape, "from_vector", sizeof(T));
  OXM_CHECK(n == static_cast<int64_t>(values.size()), ShapeMismatch, "from_vector: shape ", shape, " holds ", n,
            " elements but ", values.size(), " values were given");
  Tensor out = host_empty(shape, dtype_of_v<T>, "from_vector");
  if (n) std::memcpy(out.impl()->ptr<T>(), values.data(), static_cast<size_t>(n) * sizeof(T));
  return out;
}
template Tensor from_vector<float>(const std::vector<float>&, const Shape&);
template Tensor from_vector<double>(const std::vector<double>&, const Shape&);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, const Shape&);
template Tensor from_vector<uint8_t>(const std::vector<uint8_t>&, const Shape&);
Tensor detail::from_int64_values(std::vector<int64_t> values, const Shape& shape) { return from_vector(values, shape); }

Tensor empty(const Shape& shape, DType dtype, Device device) {
  return detail::make_empty(shape, dtype, device, "empty");
}
Tensor zeros(const Shape& shape, DType dtype) { return full(shape, 0.0, dtype); }
Tensor ones(const Shape& shape, DType dtype) { return full(shape, 1.0, dtype); }
Tensor scalar(double value, DType dtype) { return full(Shape{}, value, dtype); }
Tensor arange(int64_t n, DType dtype) {
  OXM_CHECK(n >= 0, InvalidArgument, "arange: n must be >= 0, got ", n);
  return generate_any({n}, dtype, "arange", [](int64_t i) { return static_cast<double>(i); });
}
Tensor arange(double start, double end, double step, DType dtype) {
  OXM_CHECK(step != 0 && std::isfinite(step) && std::isfinite(start) && std::isfinite(end), InvalidArgument,
            "arange: need finite start/end and a non-zero step, got (", start, ", ", end, ", ", step, ")");
  double count = std::ceil((end - start) / step);
  OXM_CHECK(count < 9.0e15, InvalidArgument, "arange: (", start, ", ", end, ", ", step, ") has too many elements");
  int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  return generate_any({n}, dtype, "arange", [&](int64_t i) { return start + static_cast<double>(i) * step; });
}
Tensor eye(int64_t n, DType dtype) {
  OXM_CHECK(n >= 0, InvalidArgument, "eye: n must be >= 0, got ", n);
  checked_numel({n, n}, "eye", itemsize(dtype));
  return generate_any({n, n}, dtype, "eye", [n](int64_t i) { return i / n == i % n ? 1.0 : 0.0; });
}

Tensor randn(const Shape& shape, Generator& gen, DType dtype) {
  OXM_CHECK(is_floating(dtype), UnsupportedDType, "randn: dtype ", dtype, " is not supported (f32, f64)");
  return generate_any(shape, dtype, "randn", [&](int64_t) { return gen.next_normal(); });
}
Tensor rand(const Shape& shape, Generator& gen, DType dtype) {
  OXM_CHECK(is_floating(dtype), UnsupportedDType, "rand: dtype ", dtype, " is not supported (f32, f64)");
  return generate_any(shape, dtype, "rand", [&](int64_t) { return gen.next_double(); });
}
namespace {
// Uniform in [0, n) without modulo bias: reject the lowest 2^64 mod n draws, then reduce.
uint64_t uniform_below(Generator& gen, uint64_t n) {
  const uint64_t threshold = (0 - n) % n;
  uint64_t r = gen.next_u64();
  while (r < threshold) r = gen.next_u64();
  return r % n;
}
}  // namespace

Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator& gen, DType dtype) {
  OXM_CHECK(low < high, InvalidArgument, "randint: need low < high, got [", low, ", ", high, ")");
  OXM_CHECK(dtype != DType::U8 || (low >= 0 && high <= 256), InvalidArgument, "randint: [", low, ", ", high,
            ") does not fit dtype u8");
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  checked_numel(shape, "randint", itemsize(dtype));
  return generate_any(shape, dtype, "randint", [&](int64_t) {
    return static_cast<double>(static_cast<int64_t>(static_cast<uint64_t>(low) + uniform_below(gen, range)));
  });
}
Tensor randint(int64_t low, int64_t high, const Shape& shape, uint64_t seed, DType dtype) {
  Generator g(seed);
  return randint(low, high, shape, g, dtype);
}
Tensor randperm(int64_t n, Generator& gen, DType dtype) {
  OXM_CHECK(n >= 0, InvalidArgument, "randperm: n must be >= 0, got ", n);
  OXM_CHECK(dtype != DType::U8 || n <= 256, InvalidArgument, "randperm: ", n, " values do not fit dtype u8");
  checked_numel({n}, "randperm", itemsize(dtype));
  std::vector<int64_t> perm(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) perm[i] = i;
  for (int64_t i = n - 1; i > 0; --i)  // Fisher-Yates
    std::swap(perm[i], perm[static_cast<int64_t>(uniform_below(gen, static_cast<uint64_t>(i) + 1))]);
  return generate_any({n}, dtype, "randperm", [&](int64_t i) { return static_cast<double>(perm[i]); });
}
Tensor randperm(int64_t n, uint64_t seed, DType dtype) {
  Generator g(seed);
  return randperm(n, g, dtype);
}

Tensor randn(const Shape& shape, uint64_t seed, DType dtype) {
  Generator g(seed);
  return randn(shape, g, dtype);
}
Tensor rand(const Shape& shape, uint64_t seed, DType dtype) {
  Generator g(seed);
  return rand(shape, g, dtype);
}

}  // namespace oxmera
