#pragma once
// The CUDA backend is a module, liboxmera_cuda.so, that oxmera::init() loads with dlopen only where an NVIDIA
// driver is present (src/backend/cuda_loader.cpp). This header is the contract between the two sides: plain C++,
// no CUDA header, included by the loader and by the module's entry point (cuda_module.cpp).
//
// The module reaches no symbol of the library that loads it: the few host functions its code calls (errors,
// printing a dtype or a shape, the matmul precision setting) arrive as this table of function pointers, and the
// module defines those functions itself as forwards to the table (hidden: nothing is exported but the entry). So
// it loads into a program linked with the static liboxmera.a as into one linked with a shared oxmera, with no
// link flags asked of the program (ctest cuda_module_symbols checks that the module leaves no oxmera symbol
// undefined).
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>

#include "oxmera/dtype.hpp"
#include "oxmera/error.hpp"
#include "oxmera/shape.hpp"

namespace oxmera::ops {
enum class FusedOp : uint8_t;
}

namespace oxmera::detail {
class Backend;

// What the host hands the module. `abi` is the host's kCudaModuleAbi: the module refuses a host built from other
// interface headers (a module left over from another oxmera build), naming both versions.
struct CudaModuleHost {
  uint64_t abi;
  const char* version;
  void (*throw_error)(ErrorKind kind, std::string message);  // does not return
  std::string (*float32_matmul_precision)();
  void (*write_dtype)(std::ostream& os, DType d);
  void (*write_dims)(std::ostream& os, const SmallDims& dims);
  const char* (*fused_op_name)(ops::FusedOp op);
};

// The module's one exported symbol: creates the backend for cuda:0 or returns nullptr with `why` set (the
// driver's reason, or the ABI mismatch). Never throws.
inline constexpr const char* kCudaModuleEntry = "oxmera_cuda_module_create";
using CudaModuleCreateFn = Backend* (*)(const CudaModuleHost* host, std::string* why);

// A hash of the headers both sides are compiled against (CMakeLists.txt computes it at configure time).
#ifndef OXMERA_CUDA_MODULE_ABI
#error "OXMERA_CUDA_MODULE_ABI must be defined by the build (CMakeLists.txt)"
#endif
inline constexpr uint64_t kCudaModuleAbi = OXMERA_CUDA_MODULE_ABI;

}  // namespace oxmera::detail
