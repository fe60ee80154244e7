#!/bin/sh
# Fuzzes one libFuzzer harness for SECONDS on a fresh copy of its seed corpus: the fuzz_<harness> ctests
# (OXMERA_FUZZ=ON builds; SECONDS is the cache variable OXMERA_FUZZ_SECONDS) and scripts/fuzz.sh.
#   run_fuzz.sh BINARY SEED_CORPUS WORK_DIR ARTIFACT_DIR SECONDS
# Allocations are capped (-malloc_limit_mb=1024: a file that makes oxmera allocate what it merely claims is a
# finding; -rss_limit_mb=2048), an input running over 10 s is a hang. Any finding (crash, sanitizer report,
# non-oxmera exception, leak, out-of-memory, hang) fails the run; its input is kept under ARTIFACT_DIR (fix the
# defect, then add the input to tests/fuzz/corpus/<harness>/ so fuzz_replay_<harness> runs it in every build).
# Prints the executions, the rate and, on a finding, the end of libFuzzer's log (WORK_DIR.log).
# OXMERA_FUZZ_RUNS=N stops after N inputs (libFuzzer's -runs; SECONDS still caps the run): the long runs of
# scripts/fuzz.sh.
set -u
if [ $# -ne 5 ]; then
  echo "usage: run_fuzz.sh BINARY SEED_CORPUS WORK_DIR ARTIFACT_DIR SECONDS" >&2
  exit 2
fi
bin=$1
seeds=$2
work=$3
artifacts=$4
seconds=$5
name=$(basename "$seeds")
rm -rf "$work"
mkdir -p "$work" "$artifacts" || exit 2
cp -R "$seeds/." "$work/" || exit 2
log="$work.log"
runs=""
[ -n "${OXMERA_FUZZ_RUNS:-}" ] && runs="-runs=$OXMERA_FUZZ_RUNS"
# The fuzzing settings, whatever the caller's (the sanitizer ctests let allocations fail with null instead).
ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  "$bin" "$work" -max_total_time="$seconds" $runs -rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=10 \
  -print_final_stats=1 -artifact_prefix="$artifacts/$name-" >"$log" 2>&1
rc=$?
execs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\)/\1/p' "$log" | tail -1)
rate=$(sed -n 's/^stat::average_exec_per_sec: *\([0-9]*\)/\1/p' "$log" | tail -1)
echo "fuzz_$name: ${execs:-?} executions, ${rate:-?} exec/s (a run of up to ${seconds} s), corpus $(ls "$work" | wc -l) inputs"
if [ "$rc" -ne 0 ]; then
  echo "fuzz_$name: FINDING (libFuzzer exit $rc); input: $(ls -t "$artifacts" | grep "^$name-" | head -1)"
  grep -m1 -E "ERROR: |runtime error|FINDING" "$log"
  tail -60 "$log"
  exit 1
fi
if [ -z "$execs" ] || [ "$execs" -eq 0 ]; then
  echo "fuzz_$name: no executions (log: $log)"
  tail -20 "$log"
  exit 1
fi
exit 0
