#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz (clang, ASan+UBSan, -DOXMERA_FUZZ=ON, RelWithDebInfo: faster per
# input than the Debug sanitizer suite's fuzz ctests, so this is the script for long runs, in build-fuzz) and runs
# each for SECONDS (default 60) through tests/fuzz/run_fuzz.sh, as the fuzz_<harness> ctests do: a fresh copy of
# its seed corpus, allocations capped (-malloc_limit_mb=1024: a file that makes oxmera allocate what it merely
# claims is a finding; -rss_limit_mb=2048), a 10 s per-input hang limit. Prints the executions per harness;
# exits 1 on any finding (crash, sanitizer report, non-oxmera exception, leak, out-of-memory, hang). A finding's
# input is kept under build-fuzz/fuzz-artifacts/: fix the defect and add the input to tests/fuzz/corpus/<harness>/
# as a regression input (the fuzz_replay_<harness> ctest then runs it in every build).
#   scripts/fuzz.sh [SECONDS]        environment: OXMERA_FUZZ_BUILD (build dir), OXMERA_FUZZ_JOBS (build jobs),
#     OXMERA_FUZZ_ONLY="npy csv" (these harnesses only), OXMERA_FUZZ_RUNS=N (stop each after N inputs, SECONDS still
#     caps it: `OXMERA_FUZZ_RUNS=10000000 scripts/fuzz.sh 86400` is the long run), OXMERA_FUZZ_WORK (work folder,
#     so that two runs with different OXMERA_FUZZ_ONLY can share one build)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
build=${OXMERA_FUZZ_BUILD:-build-fuzz}
jobs=${OXMERA_FUZZ_JOBS:-$(nproc)}
cxx=$(command -v clang++ || command -v clang++-14 || true)
if [ -z "$cxx" ]; then
  echo "fuzz.sh: clang++ not found (apt-get install -y clang); libFuzzer needs clang" >&2
  exit 2
fi
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
harnesses=$(sed -n 's/^set(OXMERA_FUZZ_HARNESSES \(.*\))$/\1/p' tests/fuzz/CMakeLists.txt)
[ -n "$harnesses" ] || { echo "fuzz.sh: no OXMERA_FUZZ_HARNESSES in tests/fuzz/CMakeLists.txt" >&2; exit 2; }
if [ -n "${OXMERA_FUZZ_ONLY:-}" ]; then
  for h in $OXMERA_FUZZ_ONLY; do
    echo " $harnesses " | grep -q " $h " || { echo "fuzz.sh: no harness '$h' (harnesses: $harnesses)" >&2; exit 2; }
  done
  harnesses=$OXMERA_FUZZ_ONLY
fi

echo "=== fuzz build ($build: clang, RelWithDebInfo, ASan+UBSan, libFuzzer)"
start=$(date +%s)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$cxx" -DOXMERA_FUZZ=ON \
  -DOXMERA_WERROR=ON \
  -DOXMERA_SANITIZE=address,undefined -DOXMERA_CUDA=OFF -DOXMERA_MPI=OFF -DOXMERA_BUILD_TESTS=OFF \
  -DOXMERA_BUILD_BENCHMARKS=OFF -DOXMERA_BUILD_EXAMPLES=OFF -DOXMERA_BUILD_TOOLS=OFF "${launcher[@]}" >/dev/null
targets=()
for h in $harnesses; do targets+=("fuzz_$h"); done
cmake --build "$build" -j "$jobs" --target "${targets[@]}"
echo "=== fuzz build took $(($(date +%s) - start)) s"

artifacts="$build/fuzz-artifacts"
work=${OXMERA_FUZZ_WORK:-$build/fuzz-work}
rm -rf "$work"
mkdir -p "$artifacts" "$work"
failed=()
summary=()
for h in $harnesses; do
  echo "=== fuzz_$h for ${seconds} s${OXMERA_FUZZ_RUNS:+ or $OXMERA_FUZZ_RUNS inputs}"
  t0=$(date +%s)
  rc=0
  out=$(sh tests/fuzz/run_fuzz.sh "$build/tests/fuzz/fuzz_$h" "tests/fuzz/corpus/$h" "$work/$h" "$artifacts" \
    "$seconds") || rc=$?
  echo "$out"
  [ "$rc" -ne 0 ] && failed+=("$h")
  summary+=("$(echo "$out" | head -1) in $(($(date +%s) - t0)) s: $([ "$rc" -eq 0 ] && echo "0 findings" || echo FINDING)")
done
echo "=== fuzz summary (${seconds} s per harness${OXMERA_FUZZ_RUNS:+, at most $OXMERA_FUZZ_RUNS inputs}; logs in $work)"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: findings in: ${failed[*]} (inputs under $artifacts)" >&2
  exit 1
fi
