#include "ops/device_stream.hpp"

#include "backend/backend.hpp"

namespace oxmera::detail {

bool device_memory_is_cuda(Device device) {
  return !device.is_cpu() && backend_for(device, "memory_is_cuda").memory_is_cuda();
}
std::string device_identity(Device device) { return backend_for(device, "device_identity").device_identity(); }
void* device_native_stream(Device device) { return backend_for(device, "native_stream").native_stream(); }
void* device_record_marker(Device device) { return backend_for(device, "record_marker").record_marker(); }
bool device_marker_reached(Device device, void* marker) {
  return marker == nullptr || backend_for(device, "marker_reached").marker_reached(marker);
}
void device_release_marker(Device device, void* marker) noexcept {
  if (marker == nullptr) return;
  try {
    backend_for(device, "release_marker").release_marker(marker);
  } catch (...) {  // the device is gone: nothing left to free
  }
}

}  // namespace oxmera::detail
