#!/bin/sh
# expect_deterministic.sh MPIEXEC NP PROGRAM WORKDIR: runs PROGRAM --determinism=PREFIX (an f64 DDP training job,
# tests/test_distributed.cpp) twice on NP ranks (run_mpi.sh) and passes when every rank's saved parameters are
# the same bytes in both runs and on every rank: the result depends neither on timing nor on the rank.
# Exit 77 (skipped) passes through.
here=$(dirname "$0")
np=$2
work=$4
rm -rf "$work"
mkdir -p "$work" || exit 1
for run in 1 2; do
  sh "$here/run_mpi.sh" "$1" "$np" "$3" "--determinism=$work/run$run" || {
    rc=$?
    [ "$rc" = 77 ] && exit 77
    echo "FAIL: run $run exited with status $rc"
    exit 1
  }
done
fail=0
r=0
while [ "$r" -lt "$np" ]; do
  for run in 1 2; do
    f="$work/run$run.rank$r.safetensors"
    if [ ! -s "$f" ]; then echo "FAIL: $f is missing or empty"; exit 1; fi
  done
  if ! cmp "$work/run1.rank$r.safetensors" "$work/run2.rank$r.safetensors"; then
    echo "FAIL: rank $r's parameters differ between the two runs"
    fail=1
  fi
  if ! cmp "$work/run1.rank0.safetensors" "$work/run1.rank$r.safetensors"; then
    echo "FAIL: rank $r's parameters differ from rank 0's in run 1"
    fail=1
  fi
  r=$((r + 1))
done
[ "$fail" = 0 ] || exit 1
echo "ok: $np ranks x 2 runs, $(wc -c <"$work/run1.rank0.safetensors") bytes each, bit-identical"
