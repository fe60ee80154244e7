#!/usr/bin/env bash
# GPU check for a fresh machine with an NVIDIA GPU (sized for 16 cores, under 8 minutes):
#   configure Release with -DCMAKE_CUDA_ARCHITECTURES=90, build, run the `cuda` test label, the GPU
#   benchmarks, the demo training (`oxmera train --device cuda`), the research workload on the GPU (f32)
#   and on the CPU at the same dtype, the research workload side by side with its PyTorch twin on the GPU
#   (bench/compare.sh, when python3 has torch with CUDA), then compute-sanitizer memcheck and racecheck over
#   the cuda suite; print one summary table.
#   Logs go to build-gpu/logs; with $OUT set (the device tool), the summary and one .tar.gz of the logs are
#   copied there (the tool brings back at most 8 files). Every step has a time limit and the whole run a
#   budget (GPU_CHECK_BUDGET seconds, default 450): a step that would start past it is skipped and says so.
#   GPU_CHECK_STEPS="memcheck racecheck" runs only the named steps (configure and build always run, and are
#   no-ops on a warm machine whose build-gpu/ is still there): a second call for what the first one skipped.
#
# Build dependencies that a bare GPU image may lack (Debian 12 packages): GoogleTest, Google Benchmark,
# CLI11, nlohmann-json, ncurses (wide), OpenBLAS. The GPU machine has no network, so fetch them here first
# with scripts/gpu-deps.sh: it puts the .deb files in shared/debs/, which travels with the working tree.
# This script extracts them under /tmp (never into /) and points CMake, the linker and the loader there;
# what the image already has is used as it is. It fetches nothing: it fails early, listing what is missing.
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
budget=${GPU_CHECK_BUDGET:-450}
only=" ${GPU_CHECK_STEPS:-} "
logs=build-gpu/logs
rm -rf "$logs"  # this run's logs only (an earlier run's came back through $OUT already)
mkdir -p "$logs"
jobs=$(nproc)
if compgen -G "shared/debs/*.deb" >/dev/null; then
  root=/tmp/oxmera-debroot
  mkdir -p "$root"
  for f in shared/debs/*.deb; do dpkg-deb -x "$f" "$root" || echo "gpu-check: could not extract $f" >&2; done
  libdirs="$root/usr/lib/x86_64-linux-gnu:$root/lib/x86_64-linux-gnu"
  # the image's own packages first; the carried ones fill the gaps
  export CMAKE_PREFIX_PATH="${CMAKE_PREFIX_PATH:+$CMAKE_PREFIX_PATH:}/usr:$root/usr:$root"
  export LIBRARY_PATH="${LIBRARY_PATH:+$LIBRARY_PATH:}$libdirs"
  export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$libdirs:$root/usr/lib/x86_64-linux-gnu/openblas-openmp"
fi
export PATH="/usr/local/cuda/bin:$PATH"

missing=()
for tool in cmake ninja g++ nvcc; do command -v "$tool" >/dev/null || missing+=("$tool"); done
have_hdr() { local d p=${CMAKE_PREFIX_PATH:-}; for d in /usr/include ${p//:/\/include }${p:+/include}; do [ -e "$d/$1" ] && return 0; done; return 1; }
have_hdr gtest/gtest.h || missing+=("libgtest-dev (GoogleTest)")
have_hdr benchmark/benchmark.h || missing+=("libbenchmark-dev (Google Benchmark)")
have_hdr CLI/CLI.hpp || missing+=("libcli11-dev (CLI11)")
have_hdr nlohmann/json.hpp || missing+=("nlohmann-json3-dev")
have_hdr ncurses.h || have_hdr ncursesw/ncurses.h || missing+=("libncurses-dev")
if [ ${#missing[@]} -gt 0 ]; then
  echo "gpu-check: missing build dependencies:" >&2
  printf '  - %s\n' "${missing[@]}" >&2
  echo "fetch them on a networked Debian 12 machine with scripts/gpu-deps.sh (see the header of this script)" >&2
  exit 2
fi
command -v nvidia-smi >/dev/null && nvidia-smi -L | tee "$logs/nvidia-smi.txt"

declare -A result
steps=()
step() {  # step NAME TIMEOUT CMD...: runs with a time limit, logs to $logs/NAME.log, records PASS/FAIL
  local name=$1 limit=$2
  shift 2
  steps+=("$name")
  if [ "$only" != "  " ] && [ "$name" != configure ] && [ "$name" != build ] && [[ "$only" != *" $name "* ]]; then
    result[$name]="SKIP (not in GPU_CHECK_STEPS)"
    return
  fi
  local t0=$(date +%s) left=$((budget - ($(date +%s) - start)))
  if [ "$left" -lt 20 ]; then result[$name]="SKIP (budget of ${budget}s spent)"; echo "--- $name: ${result[$name]}"; return; fi
  [ "$limit" -gt "$left" ] && limit=$left
  if timeout "$limit" "$@" >"$logs/$name.log" 2>&1; then result[$name]="PASS"; else result[$name]="FAIL(rc=$?)"; fi
  result[$name]+=" $(($(date +%s) - t0))s"
  echo "--- $name: ${result[$name]}"
}

ox=build-gpu/tools/oxmera/oxmera
step configure 120 cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DOXMERA_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DOXMERA_BUILD_EXAMPLES=ON
step build 300 cmake --build build-gpu -j "$jobs" --target oxmera_cuda_tests oxmera_cuda_bench oxmera_cli
step cuda_tests 120 ctest --test-dir build-gpu -L cuda --no-tests=error --output-on-failure -j 1
tests=build-gpu/tests/oxmera_cuda_tests
step bench 120 build-gpu/bench/oxmera_cuda_bench
step train_cuda 60 "$ox" train --device cuda --epochs 5
step research_cuda 150 "$ox" bench research --device cuda --out "$logs/research_cuda.json"
step research_cpu 150 env OMP_NUM_THREADS=1 "$ox" bench research --device cpu --dtype f32 --out "$logs/research_cpu.json"
if python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  step compare_torch 240 bench/compare.sh --device cuda --rounds 2 --oxmera "$ox" --python python3
else
  result[compare_torch]="SKIP (python3 has no torch with CUDA)"
  steps+=(compare_torch)
fi
if command -v compute-sanitizer >/dev/null; then
  # the OOM test asks the driver for 1 PiB on purpose: excluded under memcheck (it reports the failed cudaMalloc);
  # the two training runs launch thousands of kernels that the other tests already cover one by one
  step memcheck 180 compute-sanitizer --tool memcheck --error-exitcode 1 "$tests" \
    --gtest_filter=-Cuda.AllocatorReusesBlocksAndReportsOutOfMemory:Cuda.EightThreadsIssuingOps:Cuda.ResearchShortRunMatchesCpuF32:Cuda.DemoTrainingReachesTheCpuLoss
  step racecheck 180 compute-sanitizer --tool racecheck --error-exitcode 1 "$tests" \
    --gtest_filter=Cuda.ReductionsOverDimSets:Cuda.SoftmaxAndArgReductions:Cuda.IndexOpsAreDeterministicAndMatchCpu
else
  result[memcheck]="SKIP (no compute-sanitizer)"
  result[racecheck]="SKIP (no compute-sanitizer)"
  steps+=(memcheck racecheck)
fi

summary() {
  echo "================ gpu-check summary ($(($(date +%s) - start)) s, $(date -u +%FT%TZ)) ================"
  printf '%-14s %s\n' step result
  for s in "${steps[@]}"; do printf '%-14s %s\n' "$s" "${result[$s]:-not run}"; done
  if [ -f "$logs/cuda_tests.log" ]; then grep -E "tests passed|Skipped|Failed|\*\*\*" "$logs/cuda_tests.log" | tail -12; fi
  for s in memcheck racecheck; do
    [ -f "$logs/$s.log" ] && grep -E "ERROR SUMMARY|RACECHECK SUMMARY|FAILED|PASSED" "$logs/$s.log" | sed "s/^/$s: /" | tail -4
  done
  if [ -f "$logs/bench.log" ]; then echo "---- benchmarks"; cat "$logs/bench.log"; fi
  for s in train_cuda research_cuda research_cpu; do
    [ -f "$logs/$s.log" ] && { echo "---- $s"; cat "$logs/$s.log"; }
  done
  if [ -f "$logs/compare_torch.log" ]; then echo "---- compare_torch (oxmera vs PyTorch, both on the GPU)"; grep -v "^\[" "$logs/compare_torch.log"; fi
  echo "logs: $logs"
}
echo
summary | tee "$logs/summary.txt"
if [ -n "${OUT:-}" ]; then
  cp "$logs/summary.txt" "$OUT/summary.txt"
  tar -czf "$OUT/gpu-check-logs.tar.gz" -C build-gpu logs
fi
for s in configure build cuda_tests memcheck racecheck; do [[ "${result[$s]:-}" == FAIL* ]] && exit 1; done
exit 0
