// The host side of the CUDA module (cuda_loader.hpp): compiled only into CUDA-enabled builds.
#include "backend/cuda_loader.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <ostream>
#include <utility>

#include "backend/backend.hpp"
#include "backend/cuda/cuda_module.hpp"
#include "ops/fused.hpp"
#include "oxmera/device.hpp"
#include "oxmera/version.hpp"

#ifndef OXMERA_CUDA_MODULE_BUILD_PATH
#error "OXMERA_CUDA_MODULE_BUILD_PATH must be defined by the build (CMakeLists.txt)"
#endif

namespace oxmera::detail {
namespace {
constexpr const char* kModuleFile = "liboxmera_cuda.so";

void host_throw_error(ErrorKind kind, std::string message) { throw_error(kind, std::move(message)); }
void host_write_dtype(std::ostream& os, DType d) { os << d; }
void host_write_dims(std::ostream& os, const SmallDims& dims) { os << dims; }

std::string dl_error() {
  const char* e = dlerror();
  return e ? e : "unknown dynamic loader error";
}

// The folder of the file (program or shared library) this code was linked into.
std::string home_folder() {
  namespace fs = std::filesystem;
  Dl_info info{};
  std::error_code ec;
  if (dladdr(reinterpret_cast<void*>(&cuda_module_candidates), &info) != 0 && info.dli_fname != nullptr &&
      std::string_view(info.dli_fname).find('/') != std::string_view::npos) {
    fs::path p = fs::canonical(info.dli_fname, ec);
    if (!ec) return p.parent_path().string();
  }
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);  // the main program, when oxmera is linked statically
  return ec ? std::string() : exe.parent_path().string();
}
}  // namespace

const CudaModuleHost& cuda_module_host() {
  static const CudaModuleHost host{
      kCudaModuleAbi,    kVersion,         &host_throw_error,  [] { return float32_matmul_precision(); },
      &host_write_dtype, &host_write_dims, &ops::fused_op_name};
  return host;
}

bool nvidia_driver_present(std::string& why) {
  // Kept loaded: the CUDA runtime opens the same library once the module is in.
  if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL) != nullptr) return true;
  why = "no NVIDIA driver on this machine (" + dl_error() +
        "); the CUDA module was not loaded (install the NVIDIA driver for a GPU)";
  return false;
}

std::vector<std::string> cuda_module_candidates() {
  if (const char* env = std::getenv("OXMERA_CUDA_MODULE"); env != nullptr && *env != '\0') return {env};
  std::vector<std::string> out;
  auto add = [&out](std::string p) {
    for (const auto& q : out)
      if (q == p) return;
    out.push_back(std::move(p));
  };
  if (std::string home = home_folder(); !home.empty()) {
    add(home + "/" + kModuleFile);
    add(home + "/oxmera/" + kModuleFile);
    add(home + "/../" OXMERA_CUDA_MODULE_LIBDIR "/oxmera/" + kModuleFile);
  }
  add(OXMERA_CUDA_MODULE_BUILD_PATH);
  add(OXMERA_CUDA_MODULE_INSTALL_PATH);
  return out;
}

Backend* load_cuda_module(const std::string& path, const CudaModuleHost& host, std::string& why) noexcept {
  try {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);  // never closed: its backend lives to the end
    if (handle == nullptr) {
      why = "the CUDA module " + path + " did not load (" + dl_error() +
            "); it needs the CUDA runtime and cuBLAS shared libraries of the toolkit oxmera was built with";
      return nullptr;
    }
    auto create = reinterpret_cast<CudaModuleCreateFn>(dlsym(handle, kCudaModuleEntry));
    if (create == nullptr) {
      why = "the file " + path + " is not an oxmera CUDA module (no " + kCudaModuleEntry + ": " + dl_error() + ")";
      return nullptr;
    }
    std::string reason;
    Backend* be = create(&host, &reason);
    if (be == nullptr) why = reason.empty() ? std::string("the CUDA module gave no reason") : reason;
    return be;
  } catch (const std::exception& e) {
    why = e.what();
    return nullptr;
  }
}

Backend* create_cuda_backend_from_module(std::string& why) noexcept {
  try {
    if (!nvidia_driver_present(why)) return nullptr;
    const std::vector<std::string> candidates = cuda_module_candidates();
    for (const auto& path : candidates) {
      if (access(path.c_str(), R_OK) != 0) continue;
      return load_cuda_module(path, cuda_module_host(), why);
    }
    why = "the CUDA module " + std::string(kModuleFile) + " was not found (looked for";
    for (size_t i = 0; i < candidates.size(); ++i) why += (i ? ", " : " ") + candidates[i];
    why += "); set OXMERA_CUDA_MODULE to its path";
    return nullptr;
  } catch (const std::exception& e) {
    why = e.what();
    return nullptr;
  }
}

}  // namespace oxmera::detail
