#!/usr/bin/env bash
# Builds and runs every test twice: a Release build, then a Debug build under AddressSanitizer + UBSan; between
# them, the threaded tests under ThreadSanitizer (clang's, in build-tsan: the unit, data, fake-device and 2-rank
# distributed tests with two OpenMP threads, LLVM's OpenMP made visible to TSan by its Archer tool).
# The sanitizer build is clang's (clang++-14, in build-asan-clang) with libFuzzer coverage (-DOXMERA_FUZZ=ON), so
# its suite also fuzzes each tests/fuzz harness for OXMERA_FUZZ_SECONDS (default 60; the ctests labelled
# "fuzz"); without clang (or with OXMERA_SANITIZER_CC=gcc) it is GCC's, in build-asan, without the fuzz ctests.
# Extra arguments go to ctest (e.g. -R Gradcheck, or -LE fuzz to leave the fuzzing out).
# OXMERA_WITH_TORCH=1 adds the torch parity suite's deps.
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

# ThreadSanitizer: clang's (its OpenMP runtime has the Archer tool), RelWithDebInfo (TSan is 5-15x slower).
# Extra arguments go to the other two suites only (they name tests of those suites).
tsan_cxx=$(command -v clang++-14 || command -v clang++ || true)
if [ -n "$tsan_cxx" ]; then
  echo "=== ThreadSanitizer build ($tsan_cxx, OXMERA_CUDA=OFF; the threaded tests)"
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$tsan_cxx" \
    -DOXMERA_SANITIZE=thread -DOXMERA_CUDA=OFF -DOXMERA_WERROR=$werror -DOXMERA_BUILD_BENCHMARKS=OFF \
    "${launcher[@]}" >/dev/null
  cmake --build build-tsan -j "$jobs" --target oxmera_tsan_tests
  echo "=== ThreadSanitizer tests (build-tsan)"
  ctest --test-dir build-tsan --output-on-failure -j "$jobs" -L tsan
else
  echo "=== ThreadSanitizer suite skipped: no clang++ (Debian: apt-get install clang-14 libomp-14-dev)"
fi

# The sanitizer build: clang's when there is one (clang's UBSan also checks float-to-integer conversions, and the
# same build gives the libFuzzer harnesses), in its own folder (a compiler change needs a fresh cache).
cxx=""
if [ "${OXMERA_SANITIZER_CC:-clang}" = "clang" ]; then
  cxx=$(command -v clang++-14 || command -v clang++ || true)
fi
if [ -n "$cxx" ]; then
  asan_build=build-asan-clang
  asan_flags=(-DCMAKE_CXX_COMPILER="$cxx" -DOXMERA_FUZZ=ON -DOXMERA_FUZZ_SECONDS="${OXMERA_FUZZ_SECONDS:-60}")
  echo "=== Debug build with AddressSanitizer + UndefinedBehaviorSanitizer + libFuzzer ($cxx, OXMERA_CUDA=OFF)"
else
  asan_build=build-asan
  asan_flags=()
  echo "=== Debug build with AddressSanitizer + UndefinedBehaviorSanitizer (GCC, no clang found; OXMERA_CUDA=OFF)"
fi
cmake -S . -B "$asan_build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DOXMERA_SANITIZE=address,undefined -DOXMERA_CUDA=OFF \
  -DOXMERA_WERROR=$werror -DOXMERA_BUILD_BENCHMARKS=OFF "${asan_flags[@]}" "${launcher[@]}" >/dev/null
cmake --build "$asan_build" -j "$jobs"
echo "=== Sanitizer tests ($asan_build)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir "$asan_build" --output-on-failure -j "$jobs" "$@"
