// Process-global backend registry: the CPU registers on first use, GPU backends through oxmera::init().
#include <array>
#include <atomic>
#include <mutex>

#include "backend/backend.hpp"
#include "oxmera/tensor.hpp"
#include "oxmera/version.hpp"
#ifdef OXMERA_WITH_CUDA
#include <string>

#include "backend/cuda_loader.hpp"
#endif

namespace oxmera::detail {
namespace {
std::array<std::atomic<Backend*>, kNumDeviceKinds> g_backends{};
std::mutex g_register_mu;
// The registered backend of a kind, or null: a kind past the table (DeviceKind(3), cast from an integer) has none.
Backend* registered(DeviceKind kind) {
  const auto k = static_cast<size_t>(kind);
  return k < g_backends.size() ? g_backends[k].load(std::memory_order_acquire) : nullptr;
}
// Why init() registered no CUDA backend (the driver's error); published once through g_cuda_probed.
std::string g_cuda_why;
std::atomic<bool> g_cuda_probed{false};
}  // namespace

void register_backend(Backend* backend) {
  std::lock_guard<std::mutex> lock(g_register_mu);
  auto& slot = g_backends[static_cast<int>(backend->kind())];
  if (slot.load()) {
    delete backend;  // a device that has a backend keeps it
    return;
  }
  slot.store(backend);
}

Backend* pinning_backend() noexcept {
  for (DeviceKind kind : {DeviceKind::CUDA, DeviceKind::Metal}) {
    Backend* be = registered(kind);
    if (be != nullptr && be->can_pin_host()) return be;
  }
  return nullptr;
}

Backend& backend_for(Device device, const char* op) {
  if (device.kind() == DeviceKind::CPU) [[likely]] {
    OXM_CHECK(device.index() == 0, BackendUnavailable, op, ": device ", device, " does not exist; the CPU is cpu:0");
    return cpu_backend();
  }
  Backend* be = registered(device.kind());
  OXM_CHECK(device.index() == 0, BackendUnavailable, op, ": device ", device,
            " is not supported; only index 0 of a GPU kind is (no multi-GPU yet)");
  if (be == nullptr && device.is_cuda() && build_info().cuda_compiled && g_cuda_probed.load(std::memory_order_acquire))
    OXM_FAIL(BackendUnavailable, op, ": no backend for ", device,
             ": this build has CUDA support but no usable device was found (", g_cuda_why,
             "); check the driver and `oxmera doctor`");
  OXM_CHECK(be != nullptr, BackendUnavailable, op, ": no backend for ", device,
            build_info().cuda_compiled
                ? " is registered: call oxmera::init() first, and check `oxmera doctor` for the GPU status"
                : " in this build: oxmera was built without CUDA support (configure with -DOXMERA_CUDA=ON on a "
                  "machine with the CUDA toolkit)");
  return *be;
}

}  // namespace oxmera::detail

namespace oxmera {

bool device_available(Device d) noexcept {
  if (d.kind() == DeviceKind::CPU) return d.index() == 0;
  return d.index() == 0 && detail::registered(d.kind()) != nullptr;
}

bool pinned_memory_available() noexcept { return detail::pinning_backend() != nullptr; }

MemoryStats memory_stats(Device device) { return detail::backend_for(device, "memory_stats").memory_stats(); }
void empty_cache(Device device) { detail::backend_for(device, "empty_cache").empty_cache(); }

std::string device_description(Device d) {
  if (d.is_cpu()) {
    if (d.index() != 0) return "no such device (the CPU is cpu:0)";
    return std::to_string(get_num_threads()) + " threads, kernels " + cpu_kernel_isa();
  }
  if (d.index() != 0) return "only index 0 of a GPU kind is supported";
  if (detail::Backend* be = detail::registered(d.kind())) return be->describe();
  if (d.is_cuda() && !build_info().cuda_compiled) return "not compiled into this build (-DOXMERA_CUDA=ON)";
#ifdef OXMERA_WITH_CUDA
  if (d.is_cuda() && detail::g_cuda_probed.load(std::memory_order_acquire)) return detail::g_cuda_why;
#endif
  return "no backend registered (call oxmera::init())";
}

void init() {
#ifdef OXMERA_WITH_CUDA
  static std::once_flag once;
  std::call_once(once, [] {
    // The CUDA backend is a module loaded only where a driver is present (backend/cuda_loader.hpp).
    std::string why;
    if (detail::Backend* be = detail::create_cuda_backend_from_module(why)) {
      detail::register_backend(be);
    } else {
      detail::g_cuda_why = why.empty() ? std::string("unknown reason") : why;
      detail::g_cuda_probed.store(true, std::memory_order_release);
    }
  });
#endif
}

BuildInfo build_info() noexcept {
#if defined(__clang__)
  static const char* compiler = "clang " __clang_version__;
#elif defined(__GNUC__)
  static const char* compiler = "gcc " __VERSION__;
#else
  static const char* compiler = "unknown";
#endif
#ifdef OXMERA_WITH_CUDA
  return {kVersion, compiler, true};
#else
  return {kVersion, compiler, false};
#endif
}

}  // namespace oxmera
