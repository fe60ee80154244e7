#pragma once
// Stream order for code above the ops layer that hands device memory to a library enqueuing work itself (NCCL's
// collectives in src/distributed): the device's stream handle and markers behind the work issued so far. The ops
// layer stays the one caller of the backend interface (cmake/oxmera_layers.cmake); these forward to it
// (src/backend/backend.hpp documents each call).
#include <string>

#include "oxmera/device.hpp"

namespace oxmera::detail {

// Whether `device`'s memory is CUDA memory a CUDA library may use (false for a CPU device, or a test device).
bool device_memory_is_cuda(Device device);
// The physical device behind `device`, equal in two processes exactly when they share it (empty: unknown).
std::string device_identity(Device device);
// The stream `device`'s kernels run on, as the library's handle (a cudaStream_t for CUDA; nullptr: the default
// stream, or a synchronous device).
void* device_native_stream(Device device);
// A marker behind everything issued to `device` so far (nullptr when the device is synchronous).
void* device_record_marker(Device device);
// Whether the device has passed the marker (true for nullptr); does not block. Backend error when the device
// reports an earlier asynchronous failure.
bool device_marker_reached(Device device, void* marker);
void device_release_marker(Device device, void* marker) noexcept;

}  // namespace oxmera::detail
