// Process-global backend registry: the CPU registers on first use, GPU backends through oxmera::init().
#include <array>
#include <atomic>
#include <mutex>

#include "backend/backend.hpp"
#include "oxmera/version.hpp"

namespace oxmera::detail {
namespace {
std::array<std::atomic<Backend*>, kNumDeviceKinds> g_backends{};
std::mutex g_register_mu;
}  // namespace

void Backend::optimizer_step(const OptimizerStep&, TensorImpl&, const TensorImpl&, TensorImpl*, TensorImpl*,
                             TensorImpl*) {
  OXM_FAIL(NotImplemented, "optimizer step: the ", name(), " backend has no fused optimizer kernel yet");
}

void register_backend(Backend* backend) {
  std::lock_guard<std::mutex> lock(g_register_mu);
  auto& slot = g_backends[static_cast<int>(backend->kind())];
  if (slot.load()) {
    delete backend;  // a device that has a backend keeps it
    return;
  }
  slot.store(backend);
}

Backend& backend_for(Device device, const char* op) {
  if (device.kind() == DeviceKind::CPU) [[likely]] {
    OXM_CHECK(device.index() == 0, BackendUnavailable, op, ": device ", device,
              " does not exist; the CPU is cpu:0");
    return cpu_backend();
  }
  Backend* be = g_backends[static_cast<int>(device.kind())].load(std::memory_order_acquire);
  OXM_CHECK(device.index() == 0, BackendUnavailable, op, ": device ", device,
            " is not supported; only index 0 of a GPU kind is (no multi-GPU yet)");
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
  return d.index() == 0 && detail::g_backends[static_cast<int>(d.kind())].load() != nullptr;
}

MemoryStats memory_stats(Device device) { return detail::backend_for(device, "memory_stats").memory_stats(); }
void empty_cache(Device device) { detail::backend_for(device, "empty_cache").empty_cache(); }

void init() {
  // GPU backends register here once they exist in the build (see docs/ARCHITECTURE.md).
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
