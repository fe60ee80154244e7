#!/usr/bin/env bash
# GPU check for a fresh machine with an NVIDIA GPU (16 cores), in one call of the device tool
# (`run` with timeout_s 580): scripts/gpu-check.sh [--dry-run]
#
# Steps, most important first, so that a run cut short by its budget loses the least: configure (Release,
# -DCMAKE_CUDA_ARCHITECTURES=90) and build, `blas` (oxmera doctor: the CPU side must use OpenBLAS, or
# every CPU-vs-GPU figure is wrong), the `cuda` test label, compute-sanitizer memcheck and racecheck over
# the cuda suite, the GPU benchmarks, the demo training on the GPU (eagerly and as a replayed CUDA graph), the research workload on the GPU (f32, eagerly and with CUDA graphs)
# and on the CPU at the same dtype, and — opt-in, GPU_CHECK_TORCH=1 — the research workload side by side
# with the machine's PyTorch (bench/compare.sh). One summary table at the end.
#
# Budget: GPU_CHECK_BUDGET seconds (default 540, inside the tool's 580 s timeout with room for the
# summary and the copy to $OUT); the steps' limits add up to 540 without the opt-in comparison. Every step has its own limit, cut to what is left of the budget; a step
# that would start with under 20 s left is skipped and says so. The machine does not stay up between
# calls, so there is no "second call for the rest": a later call starts bare and rebuilds.
# GPU_CHECK_STEPS="cuda_tests memcheck" runs only the named steps (configure and build always run).
# GPU_CHECK_TOOLS overrides the list of commands checked for (tests/scripts/gpu_scripts.sh uses it).
#
# --dry-run (what CI runs here, without a GPU): checks the dependencies and reports what is missing
# without stopping, then walks the steps in order on a simulated clock — each step "takes" its full limit
# (or GPU_CHECK_DRY_STEP_S seconds) — printing the command it would run, and prints the summary, so the
# order, the budget and the skips are the ones a real run would get in its worst case. Exit status 0.
#
# Logs go to build-gpu/logs; with $OUT set (the device tool), the summary and one .tar.gz of the logs are
# copied there.
#
# Build dependencies that a bare GPU image may lack (Debian 12 packages): GoogleTest, Google Benchmark,
# CLI11, nlohmann-json, ncurses (wide), OpenBLAS and its Fortran runtime, zlib. The GPU machine has no network,
# so fetch them here first with scripts/gpu-deps.sh (it checks that every shared library they need
# resolves): it puts the .deb files in shared/debs/, which travels with the working tree. This script
# extracts them under /tmp (never into /) and points CMake, the linker and the loader there; what the
# image already has is used as it is. It fetches nothing: it fails early, listing what is missing.
set -uo pipefail
cd "$(dirname "$0")/.."
# --check-blas OXMERA: exit 0 only when that oxmera's doctor reports OpenBLAS as its GEMM (the `blas` step; the
# fallback's name can mention OpenBLAS too, "builtin blocked GEMM (OpenBLAS not found)", so the row must start with it).
if [ "${1:-}" = "--check-blas" ]; then
  "$2" doctor | tee /dev/stderr | grep -qE '^ *blas +OpenBLAS'
  exit
fi
dry=0
for a in "$@"; do
  case "$a" in
    --dry-run) dry=1 ;;
    *) echo "usage: scripts/gpu-check.sh [--dry-run | --check-blas OXMERA]" >&2; exit 2 ;;
  esac
done
budget=${GPU_CHECK_BUDGET:-540}
only=" ${GPU_CHECK_STEPS:-} "
start=$(date +%s)
elapsed=0  # seconds of the budget spent: the real clock, or the simulated one of a dry run
now() { if [ "$dry" = 1 ]; then echo "$elapsed"; else echo $(($(date +%s) - start)); fi; }
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
[ "$dry" = 1 ] || export PATH="/usr/local/cuda/bin:$PATH"

missing=()
for tool in ${GPU_CHECK_TOOLS:-cmake ninja g++ nvcc}; do command -v "$tool" >/dev/null || missing+=("$tool"); done
have_hdr() { local d p=${CMAKE_PREFIX_PATH:-}; for d in /usr/include ${p//:/\/include }${p:+/include}; do [ -e "$d/$1" ] && return 0; done; return 1; }
have_hdr gtest/gtest.h || missing+=("libgtest-dev (GoogleTest)")
have_hdr benchmark/benchmark.h || missing+=("libbenchmark-dev (Google Benchmark)")
have_hdr CLI/CLI.hpp || missing+=("libcli11-dev (CLI11)")
have_hdr nlohmann/json.hpp || missing+=("nlohmann-json3-dev")
have_hdr ncurses.h || have_hdr ncursesw/ncurses.h || missing+=("libncurses-dev")
have_hdr zlib.h || missing+=("zlib1g-dev (zlib)")
if [ ${#missing[@]} -gt 0 ]; then
  echo "gpu-check: missing build dependencies:" >&2
  printf '  - %s\n' "${missing[@]}" >&2
  echo "fetch them on a networked Debian 12 machine with scripts/gpu-deps.sh (see the header of this script)" >&2
  if [ "$dry" = 0 ]; then exit 2; fi
  echo "gpu-check: dry run: going on as if they were there" >&2
fi
[ "$dry" = 0 ] && command -v nvidia-smi >/dev/null && nvidia-smi -L | tee "$logs/nvidia-smi.txt"

declare -A result
steps=()
step() {  # step NAME LIMIT CMD...: runs CMD with a time limit, logs to $logs/NAME.log, records PASS/FAIL
  local name=$1 limit=$2
  shift 2
  steps+=("$name")
  if [ "$only" != "  " ] && [ "$name" != configure ] && [ "$name" != build ] && [[ "$only" != *" $name "* ]]; then
    result[$name]="SKIP (not in GPU_CHECK_STEPS)"
    return
  fi
  local t0 left
  t0=$(now)
  left=$((budget - t0))
  if [ "$left" -lt 20 ]; then result[$name]="SKIP (budget of ${budget}s spent)"; echo "--- $name: ${result[$name]}"; return; fi
  [ "$limit" -gt "$left" ] && limit=$left
  if [ "$dry" = 1 ]; then
    local took=${GPU_CHECK_DRY_STEP_S:-$limit}
    [ "$took" -gt "$limit" ] && took=$limit
    elapsed=$((elapsed + took))
    result[$name]="DRY (limit ${limit}s, at ${t0}s): $*"
  else
    if timeout "$limit" "$@" >"$logs/$name.log" 2>&1; then result[$name]="PASS"; else result[$name]="FAIL(rc=$?)"; fi
    result[$name]+=" $(($(now) - t0))s"
  fi
  echo "--- $name: ${result[$name]}"
}
skip() { steps+=("$1"); result[$1]="SKIP ($2)"; echo "--- $1: ${result[$1]}"; }

ox=build-gpu/tools/oxmera/oxmera
tests=build-gpu/tests/oxmera_cuda_tests
# the OOM test asks the driver for 1 PiB on purpose: excluded under memcheck (it reports the failed cudaMalloc);
# the two training runs launch thousands of kernels that the other tests already cover one by one
memcheck_filter=-Cuda.AllocatorReusesBlocksAndReportsOutOfMemory:Cuda.EightThreadsIssuingOps:Cuda.ResearchShortRunMatchesCpuF32:Cuda.DemoTrainingReachesTheCpuLoss
racecheck_filter=Cuda.ReductionsOverDimSets:Cuda.SoftmaxAndArgReductions:Cuda.IndexOpsAreDeterministicAndMatchCpu
have_sanitizer=0
command -v compute-sanitizer >/dev/null && have_sanitizer=1
[ "$dry" = 1 ] && have_sanitizer=1  # a dry run walks every step

step configure 30 cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DOXMERA_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DOXMERA_BUILD_EXAMPLES=ON -DOXMERA_MPI=OFF
step build 200 cmake --build build-gpu -j "$jobs" --target oxmera_cuda_tests oxmera_cuda_module_tests oxmera_cuda_bench \
  oxmera_cli
# OpenBLAS must be the CPU GEMM: without its runtime (libgfortran5, libquadmath0) the dlopen fails and the
# portable GEMM runs, which makes every CPU-vs-GPU figure wrong
step blas 10 bash scripts/gpu-check.sh --check-blas "$ox"
# the binary itself, not ctest: one process loads cuBLAS (about 0.5 GB) once, not once per test case; it includes
# Cuda.PinnedMemoryAndNonBlockingCopies (the cudaHostAlloc pool, non_blocking copies, the loader's pin_memory),
# which memcheck below also runs; then the backend module's own tests (liboxmera_cuda.so loaded with a driver present)
step cuda_tests 60 bash -c "$tests && build-gpu/tests/oxmera_cuda_module_tests"
if [ "$have_sanitizer" = 1 ]; then
  step memcheck 80 compute-sanitizer --tool memcheck --error-exitcode 1 "$tests" --gtest_filter="$memcheck_filter"
  step racecheck 40 compute-sanitizer --tool racecheck --error-exitcode 1 "$tests" --gtest_filter="$racecheck_filter"
else
  skip memcheck "no compute-sanitizer"
  skip racecheck "no compute-sanitizer"
fi
step bench 30 build-gpu/bench/oxmera_cuda_bench
step train_cuda 15 "$ox" train --device cuda --epochs 5
# the same run with its step captured once as a CUDA graph and replayed (issue #18: where a small model's GPU step
# should beat the CPU's); its epoch times against train_cuda's are the graph's figure
step train_graph 15 "$ox" train --device cuda --graph --epochs 5
step research_cuda 20 "$ox" bench research --device cuda --out "$logs/research_cuda.json"
# each fit's step captured as a CUDA graph and replayed (the DPP fits' logdet checks stay on the device)
step research_graph 20 "$ox" bench research --device cuda --graph --out "$logs/research_graph.json"
step research_cpu 20 env OMP_NUM_THREADS=1 "$ox" bench research --device cpu --dtype f32 --out "$logs/research_cpu.json"
if [ "${GPU_CHECK_TORCH:-0}" != 1 ]; then
  skip compare_torch "opt-in: GPU_CHECK_TORCH=1"
elif [ "$dry" = 1 ] || python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  step compare_torch 120 bench/compare.sh --device cuda --rounds 2 --oxmera "$ox" --python python3
else
  skip compare_torch "python3 has no torch with CUDA"
fi

summary() {
  local mode=""
  [ "$dry" = 1 ] && mode="dry run, simulated worst case: "
  echo "================ gpu-check summary (${mode}$(now) s of ${budget}, $(date -u +%FT%TZ)) ================"
  printf '%-14s %s\n' step result
  for s in "${steps[@]}"; do printf '%-14s %s\n' "$s" "${result[$s]:-not run}"; done
  [ "$dry" = 1 ] && return
  if [ -f "$logs/cuda_tests.log" ]; then grep -E "^\[  (PASSED|FAILED|SKIPPED) +\]|tests? ran" "$logs/cuda_tests.log" | tail -12; fi
  for s in memcheck racecheck; do
    [ -f "$logs/$s.log" ] && grep -E "ERROR SUMMARY|RACECHECK SUMMARY|FAILED|PASSED" "$logs/$s.log" | sed "s/^/$s: /" | tail -4
  done
  [ -f "$logs/blas.log" ] && { echo "---- blas (oxmera doctor)"; cat "$logs/blas.log"; }
  if [ -f "$logs/bench.log" ]; then echo "---- benchmarks"; cat "$logs/bench.log"; fi
  for s in train_cuda train_graph research_cuda research_graph research_cpu; do
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
[ "$dry" = 1 ] && exit 0
for s in configure build blas cuda_tests memcheck racecheck; do [[ "${result[$s]:-}" == FAIL* ]] && exit 1; done
exit 0
