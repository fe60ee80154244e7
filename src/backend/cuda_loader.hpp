#pragma once
// Finds and loads the CUDA backend module (liboxmera_cuda.so; src/backend/cuda/cuda_module.hpp) for
// oxmera::init(). A CUDA-enabled oxmera links no CUDA library: the module and, through it, the CUDA runtime and
// cuBLAS are loaded only where an NVIDIA driver is present, so on a machine without one the program starts and
// runs CPU work as a CPU-only build does, and one without the CUDA libraries at all still runs.
#include <string>
#include <vector>

namespace oxmera::detail {
class Backend;
struct CudaModuleHost;

// The table of host functions handed to the module (cuda_module.hpp).
const CudaModuleHost& cuda_module_host();
// True when the NVIDIA driver library (libcuda.so.1) loads; otherwise false with `why` naming what failed.
bool nvidia_driver_present(std::string& why);
// Where the module is looked for, in order: $OXMERA_CUDA_MODULE alone when set; next to the program or shared
// library holding oxmera (and in its ../<libdir>/oxmera and oxmera/ folders); the build tree's module; the
// configured installation's <libdir>/oxmera.
std::vector<std::string> cuda_module_candidates();
// Loads the module at `path` and asks it for the backend of cuda:0: nullptr with `why` set when the file does not
// load (a missing CUDA library is named), has no entry point, was built against other headers, or the driver
// reports no usable device. Never throws.
Backend* load_cuda_module(const std::string& path, const CudaModuleHost& host, std::string& why) noexcept;
// What init() does: the driver probe, then the first candidate that exists.
Backend* create_cuda_backend_from_module(std::string& why) noexcept;

}  // namespace oxmera::detail
