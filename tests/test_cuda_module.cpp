// The CUDA backend as a run-time module (src/backend/cuda_loader.hpp, src/backend/cuda/cuda_module.hpp), on any
// machine: without a GPU the module still loads (the test points the loader at the build's liboxmera_cuda.so) and
// must hand back the driver's reason; without a driver, init() must not load the module or any CUDA library.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "backend/backend.hpp"
#include "backend/cuda/cuda_module.hpp"
#include "backend/cuda_loader.hpp"
#include "oxmera/oxmera.hpp"

using namespace oxmera;
using namespace oxmera::detail;

namespace {
const std::string kModule = OXMERA_TEST_CUDA_MODULE;

std::string mapped_files() {
  std::ifstream in("/proc/self/maps");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

// First in the file: the other tests load the module into this process (ctest runs each test alone anyway).
TEST(CudaModule, WithoutADriverInitLoadsNoCudaLibrary) {
  std::string why;
  if (nvidia_driver_present(why)) GTEST_SKIP() << "an NVIDIA driver is installed here: init() loads the module";
  if (contains(mapped_files(), "liboxmera_cuda")) GTEST_SKIP() << "another test in this process loaded the module";
  EXPECT_TRUE(contains(why, "libcuda.so.1")) << why;
  init();
  const std::string maps = mapped_files();
  for (const char* lib : {"liboxmera_cuda", "libcudart", "libcublas", "libcublasLt"})
    EXPECT_FALSE(contains(maps, lib)) << lib << " was loaded without a driver";
  EXPECT_FALSE(device_available(Device::cuda()));
  const std::string desc = device_description(Device::cuda());
  EXPECT_TRUE(contains(desc, "no NVIDIA driver")) << desc;
  try {
    (void)ones({2}).to(Device::cuda());
    ADD_FAILURE() << "a tensor went to cuda:0 without a driver";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BackendUnavailable);
    EXPECT_TRUE(contains(e.what(), "no NVIDIA driver")) << e.what();
  }
  EXPECT_TRUE(build_info().cuda_compiled);
}

TEST(CudaModule, LoadsAndGivesABackendOrTheDriversReason) {
  std::string why;
  Backend* be = load_cuda_module(kModule, cuda_module_host(), why);
  if (be != nullptr) {  // a GPU machine
    EXPECT_EQ(be->kind(), DeviceKind::CUDA);
    EXPECT_FALSE(be->describe().empty());
    return;  // not deleted: a backend lives to the end of the process, as init()'s does
  }
  // No GPU: the module loaded, accepted the host and ran create, so the reason is the CUDA runtime's.
  EXPECT_TRUE(contains(why, "cudaError") || contains(why, "no CUDA device")) << why;
  EXPECT_TRUE(contains(mapped_files(), "liboxmera_cuda"));
}

TEST(CudaModule, RefusesAProgramBuiltFromOtherHeaders) {
  CudaModuleHost other = cuda_module_host();
  other.abi ^= 1;
  std::string why;
  EXPECT_EQ(load_cuda_module(kModule, other, why), nullptr);
  EXPECT_TRUE(contains(why, "other interface headers")) << why;
  EXPECT_TRUE(contains(why, "OXMERA_CUDA_MODULE")) << why;
}

TEST(CudaModule, AFileThatDoesNotLoadIsNamed) {
  std::string why;
  EXPECT_EQ(load_cuda_module("/nonexistent/liboxmera_cuda.so", cuda_module_host(), why), nullptr);
  EXPECT_TRUE(contains(why, "/nonexistent/liboxmera_cuda.so")) << why;
  EXPECT_TRUE(contains(why, "did not load")) << why;
}

TEST(CudaModule, ALibraryWithoutTheEntryPointIsRefused) {
  std::string why;
  EXPECT_EQ(load_cuda_module("libz.so.1", cuda_module_host(), why), nullptr);
  EXPECT_TRUE(contains(why, "not an oxmera CUDA module")) << why;
  EXPECT_TRUE(contains(why, kCudaModuleEntry)) << why;
}

TEST(CudaModule, SearchOrder) {
  unsetenv("OXMERA_CUDA_MODULE");
  const auto found = cuda_module_candidates();
  ASSERT_GE(found.size(), 2u);
  bool has_build = false;
  for (const auto& p : found) has_build = has_build || p == kModule;
  EXPECT_TRUE(has_build) << "the build tree's module is not among the candidates";
  EXPECT_TRUE(contains(found.back(), "/oxmera/liboxmera_cuda.so")) << found.back();

  setenv("OXMERA_CUDA_MODULE", "/elsewhere/liboxmera_cuda.so", 1);
  const auto only = cuda_module_candidates();
  ASSERT_EQ(only.size(), 1u);
  EXPECT_EQ(only[0], "/elsewhere/liboxmera_cuda.so");
  // With the driver present the named file is looked for (and reported missing); without, the probe says so first.
  std::string why;
  EXPECT_EQ(create_cuda_backend_from_module(why), nullptr);
  std::string driver_why;
  if (nvidia_driver_present(driver_why))
    EXPECT_TRUE(contains(why, "was not found (looked for /elsewhere/liboxmera_cuda.so)")) << why;
  else
    EXPECT_TRUE(contains(why, "no NVIDIA driver")) << why;
  unsetenv("OXMERA_CUDA_MODULE");
}
