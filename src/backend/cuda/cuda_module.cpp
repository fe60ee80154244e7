// The entry point of liboxmera_cuda.so, and the host functions the module's code calls, as forwards to the table
// the loader hands over (cuda_module.hpp says why). Compiled into the module only, with hidden visibility: these
// definitions share their names with the library's, but each shared object binds to its own.
#include "backend/cuda/cuda_module.hpp"

#include <ostream>
#include <utility>

#include "backend/backend.hpp"
#include "backend/cuda/cuda_backend.hpp"
#include "ops/fused.hpp"
#include "oxmera/device.hpp"
#include "oxmera/version.hpp"

namespace {
const oxmera::detail::CudaModuleHost* g_host = nullptr;
}

namespace oxmera {
namespace detail {
void throw_error(ErrorKind kind, std::string message) {
  g_host->throw_error(kind, std::move(message));
  __builtin_unreachable();  // the host's throw_error throws
}
}  // namespace detail
std::string float32_matmul_precision() { return g_host->float32_matmul_precision(); }
std::ostream& operator<<(std::ostream& os, DType d) {
  g_host->write_dtype(os, d);
  return os;
}
std::ostream& operator<<(std::ostream& os, const SmallDims& s) {
  g_host->write_dims(os, s);
  return os;
}
namespace ops {
const char* fused_op_name(FusedOp op) { return g_host->fused_op_name(op); }
}  // namespace ops
}  // namespace oxmera

extern "C" __attribute__((visibility("default"))) oxmera::detail::Backend* oxmera_cuda_module_create(
    const oxmera::detail::CudaModuleHost* host, std::string* why) {
  using oxmera::detail::kCudaModuleAbi;
  if (host == nullptr || why == nullptr) return nullptr;
  if (host->abi != kCudaModuleAbi) {
    *why = std::string("the CUDA module was built for oxmera ") + oxmera::kVersion +
           " with other interface headers than this program's oxmera " + (host->version ? host->version : "?") +
           " (a module left from another build: reinstall oxmera, or point OXMERA_CUDA_MODULE at this build's "
           "liboxmera_cuda.so)";
    return nullptr;
  }
  g_host = host;
  return oxmera::detail::create_cuda_backend(*why);
}
