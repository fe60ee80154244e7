#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace oxmera {

enum class DeviceKind : uint8_t { CPU = 0, CUDA = 1, Metal = 2 };
inline constexpr int kNumDeviceKinds = 3;

// A device names where storage lives. Naming a device always compiles; using one whose backend is not
// built or not present is a BackendUnavailable error at run time.
class Device {
 public:
  constexpr Device() = default;
  constexpr Device(DeviceKind kind, int index) : kind_(kind), index_(index) {}
  static constexpr Device cpu() { return Device(DeviceKind::CPU, 0); }
  static constexpr Device cuda(int index = 0) { return Device(DeviceKind::CUDA, index); }
  // Parses a device name: "cpu", "cuda", "metal" (index 0) or "<kind>:N" with N a decimal index
  // ("cuda:0", "metal:1"; "cpu:N" too, so parse(d.str()) == d for every device). Anything else, such as
  // "cuda:", "cuda:-1", "cuda:1x", "CUDA" or an index beyond int, is InvalidArgument naming the string and the
  // accepted forms. Parsing does not check that the device exists: using it does (BackendUnavailable).
  static Device parse(std::string_view name);
  constexpr DeviceKind kind() const { return kind_; }
  constexpr int index() const { return index_; }
  constexpr bool is_cpu() const { return kind_ == DeviceKind::CPU; }
  constexpr bool is_cuda() const { return kind_ == DeviceKind::CUDA; }
  constexpr bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu", "cuda:0"

 private:
  DeviceKind kind_ = DeviceKind::CPU;
  int index_ = 0;
};
std::ostream& operator<<(std::ostream& os, const Device& d);

// Whether a backend for this device is built and usable in this process (never throws).
bool device_available(Device d) noexcept;
// Whether Tensor::pin_memory can allocate page-locked host memory: a registered GPU backend can pin (after
// init(); false in a build or on a machine without a GPU).
bool pinned_memory_available() noexcept;
// Registers optional (GPU) backends. Idempotent; the CPU backend needs no call.
void init();
// What the device is ("NVIDIA H200, 139.8 GiB, compute capability 9.0, driver 13.0"), or, when it is
// unavailable, exactly why (not compiled in, the driver's error, no device). Never throws.
std::string device_description(Device d);

// torch.set_float32_matmul_precision: "highest" (the default: f32 matmul in full f32 everywhere) or "high" /
// "medium" (a GPU may use TF32 tensor cores for f32 matmul: 10-bit mantissa inputs, f32 accumulation, several
// times the throughput). CPU matmul is unaffected. Anything else is InvalidArgument. Process-wide.
void set_float32_matmul_precision(std::string_view precision);
std::string float32_matmul_precision();

}  // namespace oxmera
