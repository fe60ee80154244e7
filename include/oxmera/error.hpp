#pragma once
// Typed errors: every failure in oxmera throws oxmera::Error with an ErrorKind.
#include <exception>
#include <sstream>
#include <string>
#include <utility>

namespace oxmera {

enum class ErrorKind {
  ShapeMismatch,
  BroadcastIncompatible,
  DTypeMismatch,
  UnsupportedDType,
  DeviceMismatch,
  IndexOutOfBounds,
  InvalidArgument,
  EmptyReduction,
  NotPositiveDefinite,
  NotSymmetric,
  BackendUnavailable,
  NotImplemented,
  OutOfMemory,
  Io,
  Backend,
  // An operation that waits on other processes gave up after its time limit (a distributed collective whose
  // peers stopped calling it). Appended last: the values above keep their numbers.
  Timeout,
};

const char* error_kind_name(ErrorKind kind) noexcept;

class Error : public std::exception {
 public:
  Error(ErrorKind kind, std::string message);
  ErrorKind kind() const noexcept { return kind_; }
  // The message without the "[Kind] " prefix.
  const std::string& message() const noexcept { return message_; }
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  ErrorKind kind_;
  std::string message_;
  std::string what_;
};

namespace detail {
template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
[[noreturn]] void throw_error(ErrorKind kind, std::string message);
}  // namespace detail

}  // namespace oxmera

// Throws oxmera::Error(kind, concat(args...)) when cond is false. The message is built only on failure.
#define OXM_CHECK(cond, kind, ...)                                                                     \
  do {                                                                                                 \
    if (!(cond)) [[unlikely]]                                                                          \
      ::oxmera::detail::throw_error(::oxmera::ErrorKind::kind, ::oxmera::detail::concat(__VA_ARGS__)); \
  } while (0)
#define OXM_FAIL(kind, ...) \
  ::oxmera::detail::throw_error(::oxmera::ErrorKind::kind, ::oxmera::detail::concat(__VA_ARGS__))
