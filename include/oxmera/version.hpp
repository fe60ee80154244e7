#pragma once
namespace oxmera {
inline constexpr const char* kVersion = "0.1.0";
// What this build contains: compiler, BLAS, CUDA on/off.
struct BuildInfo {
  const char* version;
  const char* compiler;
  bool cuda_compiled;
};
BuildInfo build_info() noexcept;
// Name of the GEMM implementation in use (loads it on first call), e.g. "OpenBLAS 0.3.21 (SkylakeX)".
const char* blas_name();
// The CPU kernel set chosen for this machine at start-up: "isa_avx512", "isa_avx2" or "isa_base".
const char* cpu_kernel_isa();
}  // namespace oxmera
