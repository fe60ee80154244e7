#!/usr/bin/env bash
# Builds and runs every test twice: a Release build, then a Debug build under AddressSanitizer + UBSan.
# Extra arguments go to ctest (e.g. -R Gradcheck). OXMERA_WITH_TORCH=1 adds the torch parity suite's deps.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
werror=OFF
[ "${CI:-}" = "true" ] && werror=ON
jobs=$(nproc)

# Both CUDA configurations are built: the Release suite with OXMERA_CUDA=AUTO (the CUDA backend is compiled
# wherever nvcc is found; its `cuda` tests report themselves skipped without a GPU), the sanitizer suite
# with -DOXMERA_CUDA=OFF (the CPU-only build; nvcc objects are not instrumented anyway).
echo "=== Release build (OXMERA_CUDA=AUTO)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DOXMERA_WERROR=$werror "${launcher[@]}" >/dev/null
cmake --build build -j "$jobs"
echo "=== Release tests"
ctest --test-dir build --output-on-failure -j "$jobs" "$@"

echo "=== Debug build with AddressSanitizer + UndefinedBehaviorSanitizer (OXMERA_CUDA=OFF)"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DOXMERA_SANITIZE=address,undefined -DOXMERA_CUDA=OFF \
  -DOXMERA_WERROR=$werror -DOXMERA_BUILD_BENCHMARKS=OFF "${launcher[@]}" >/dev/null
cmake --build build-asan -j "$jobs"
echo "=== Sanitizer tests"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" "$@"
