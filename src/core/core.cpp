// Errors, dtypes, devices and shapes.
#include <atomic>
#include <charconv>
#include <ostream>
#include <string>
#include <utility>

#include "oxmera/device.hpp"
#include "oxmera/dtype.hpp"
#include "oxmera/error.hpp"
#include "oxmera/shape.hpp"

namespace oxmera {

const char* error_kind_name(ErrorKind kind) noexcept {
  switch (kind) {
    case ErrorKind::ShapeMismatch:
      return "ShapeMismatch";
    case ErrorKind::BroadcastIncompatible:
      return "BroadcastIncompatible";
    case ErrorKind::DTypeMismatch:
      return "DTypeMismatch";
    case ErrorKind::UnsupportedDType:
      return "UnsupportedDType";
    case ErrorKind::DeviceMismatch:
      return "DeviceMismatch";
    case ErrorKind::IndexOutOfBounds:
      return "IndexOutOfBounds";
    case ErrorKind::InvalidArgument:
      return "InvalidArgument";
    case ErrorKind::EmptyReduction:
      return "EmptyReduction";
    case ErrorKind::NotPositiveDefinite:
      return "NotPositiveDefinite";
    case ErrorKind::NotSymmetric:
      return "NotSymmetric";
    case ErrorKind::BackendUnavailable:
      return "BackendUnavailable";
    case ErrorKind::NotImplemented:
      return "NotImplemented";
    case ErrorKind::OutOfMemory:
      return "OutOfMemory";
    case ErrorKind::Io:
      return "Io";
    case ErrorKind::Backend:
      return "Backend";
    case ErrorKind::Timeout:
      return "Timeout";
  }
  return "Unknown";
}

Error::Error(ErrorKind kind, std::string message)
    : kind_(kind), message_(std::move(message)), what_(std::string("[") + error_kind_name(kind) + "] " + message_) {}

namespace detail {
void throw_error(ErrorKind kind, std::string message) { throw Error(kind, std::move(message)); }
}  // namespace detail

const char* dtype_name(DType d) noexcept {
  switch (d) {
    case DType::F32:
      return "f32";
    case DType::F64:
      return "f64";
    case DType::I64:
      return "i64";
    case DType::U8:
      return "u8";
  }
  return "?";
}
std::ostream& operator<<(std::ostream& os, DType d) { return os << dtype_name(d); }

std::string Device::str() const {
  switch (kind_) {
    case DeviceKind::CPU:
      return index_ == 0 ? "cpu" : "cpu:" + std::to_string(index_);
    case DeviceKind::CUDA:
      return "cuda:" + std::to_string(index_);
    case DeviceKind::Metal:
      return "metal:" + std::to_string(index_);
  }
  return "?";
}
std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

namespace {
std::atomic<int> g_f32_matmul_precision{0};  // 0 highest, 1 high, 2 medium
constexpr std::string_view kPrecisions[] = {"highest", "high", "medium"};
}  // namespace
void set_float32_matmul_precision(std::string_view precision) {
  for (int i = 0; i < 3; ++i) {
    if (precision == kPrecisions[i]) {
      g_f32_matmul_precision.store(i, std::memory_order_relaxed);
      return;
    }
  }
  OXM_FAIL(InvalidArgument, "set_float32_matmul_precision: '", precision,
           "' is not a precision; use \"highest\", \"high\" or \"medium\"");
}
std::string float32_matmul_precision() {
  return std::string(kPrecisions[g_f32_matmul_precision.load(std::memory_order_relaxed)]);
}

Device Device::parse(std::string_view name) {
  static constexpr std::pair<std::string_view, DeviceKind> kinds[] = {
      {"cpu", DeviceKind::CPU}, {"cuda", DeviceKind::CUDA}, {"metal", DeviceKind::Metal}};
  for (const auto& [prefix, kind] : kinds) {
    if (name.substr(0, prefix.size()) != prefix) continue;
    const std::string_view rest = name.substr(prefix.size());
    if (rest.empty()) return Device(kind, 0);
    if (rest.size() < 2 || rest[0] != ':') break;
    // Digits only (from_chars alone would take a leading '-'), the whole rest consumed, within int.
    const std::string_view digits = rest.substr(1);
    if (digits.find_first_not_of("0123456789") != std::string_view::npos) break;
    int index = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec != std::errc() || end != digits.data() + digits.size()) break;
    return Device(kind, index);
  }
  throw Error(ErrorKind::InvalidArgument, "Device::parse: '" + std::string(name) +
                                              "' is not a device name; expected cpu, cuda, cuda:N, metal or metal:N "
                                              "(N a non-negative decimal index, e.g. cuda:0)");
}

std::string SmallDims::str() const {
  std::string s = "[";
  for (size_t i = 0; i < size_; ++i) {
    if (i) s += ", ";
    s += std::to_string((*this)[i]);
  }
  return s + "]";
}
std::ostream& operator<<(std::ostream& os, const SmallDims& s) { return os << s.str(); }

int64_t checked_numel(const Shape& shape, const char* op, size_t itemsize) {
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    OXM_CHECK(shape[i] >= 0, InvalidArgument, op, ": negative size ", shape[i], " at dim ", i, " in shape ", shape);
  }
  // The strides of a contiguous layout are products of the sizes with zeros read as ones, so a zero-size shape
  // such as [0, 2^62, 2^62] must fit too, or computing its strides overflows.
  bool overflow = false;
  int64_t span = 1;
  for (int64_t v : shape) {
    overflow |= __builtin_mul_overflow(n, v, &n);
    overflow |= __builtin_mul_overflow(span, v > 0 ? v : 1, &span);
  }
  int64_t bytes = 0;
  overflow |= __builtin_mul_overflow(span, static_cast<int64_t>(itemsize), &bytes);
  OXM_CHECK(!overflow, InvalidArgument, op, ": shape ", shape,
            " is too large: its elements (or its layout, zero-size dims counted as 1) exceed a 64-bit byte count; "
            "use smaller dimensions");
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides st(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    st[i] = s;
    if (i > 0) s *= shape[i] > 0 ? shape[i] : 1;  // not past dim 0: that product is no stride
  }
  return st;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  if (a == b) return a;
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    OXM_CHECK(da == db || da == 1 || db == 1, BroadcastIncompatible, op, ": shapes ", a, " and ", b,
              " cannot be broadcast (dim ", i, " of the result: ", da, " vs ", db,
              "); each aligned trailing dim must be equal or 1");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int64_t normalize_dim(int64_t dim, int64_t rank, const char* op) {
  int64_t r = rank == 0 ? 1 : rank;  // a 0-d tensor accepts dim 0 / -1, like torch
  OXM_CHECK(dim >= -r && dim < r, IndexOutOfBounds, op, ": dim ", dim, " is out of range for a tensor of rank ", rank,
            " (valid: ", -r, "..", r - 1, ")");
  return dim < 0 ? dim + r : dim;
}

}  // namespace oxmera
