#pragma once
// Entry point of the CUDA backend for the registry (plain C++: no CUDA header reaches the includer).
#include <string>

namespace oxmera::detail {
class Backend;
// Creates the backend for cuda:0, or returns nullptr with `why` set to the driver's reason (no device, no
// driver, driver too old, ...). Never throws.
Backend* create_cuda_backend(std::string& why) noexcept;
}  // namespace oxmera::detail
