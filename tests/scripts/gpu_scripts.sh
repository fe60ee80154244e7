#!/usr/bin/env bash
# The GPU scripts' own logic, tested without a GPU: scripts/gpu-check.sh --dry-run (step order, budget,
# skips, missing dependencies, summary), its OpenBLAS check (given the oxmera binary as $1) and
# scripts/gpu-deps.sh's closure check (skipped, exit 77, when
# the .deb files cannot be fetched).
set -uo pipefail
cd "$(dirname "$0")/../.."
fail=0
expect() {  # expect DESCRIPTION COMMAND...: the command must succeed
  local what=$1
  shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fail=1; fi
}
out=$(bash scripts/gpu-check.sh --dry-run 2>&1)
rc=$?
expect "dry run exits 0" test "$rc" = 0
order=$(sed -n '/gpu-check summary/,$p' <<<"$out" | awk 'NR > 2 {print $1}' | tr '\n' ' ')
expect "steps in order: $order" test "$order" = \
  "configure build blas cuda_tests memcheck racecheck bench train_cuda train_graph research_cuda research_graph research_cpu compare_torch "
expect "worst case fits the default budget of 540 s" grep -q "simulated worst case: 540 s of 540" <<<"$out"
expect "no step skipped for budget at 540 s" bash -c '! grep -q "budget of" <<<"$1"' _ "$out"
expect "PyTorch comparison is opt-in" grep -q "compare_torch  SKIP (opt-in" <<<"$out"

out=$(GPU_CHECK_BUDGET=300 bash scripts/gpu-check.sh --dry-run 2>&1)
expect "budget 300: the cuda tests still run, cut to the 60 s left" grep -q "cuda_tests     DRY (limit 60s, at 240s)" <<<"$out"
expect "budget 300: memcheck and later are skipped" grep -q "memcheck       SKIP (budget of 300s spent)" <<<"$out"
expect "budget 300: research_cpu skipped too" grep -q "research_cpu   SKIP (budget of 300s spent)" <<<"$out"

out=$(GPU_CHECK_BUDGET=540 GPU_CHECK_DRY_STEP_S=5 GPU_CHECK_TORCH=1 bash scripts/gpu-check.sh --dry-run 2>&1)
expect "steps that finish early leave room for the opt-in comparison" grep -q "compare_torch  DRY (limit 120s, at 60s)" <<<"$out"

out=$(GPU_CHECK_TOOLS="cmake oxmera-absent-tool" bash scripts/gpu-check.sh --dry-run 2>&1)
rc=$?
expect "dry run reports a missing tool" grep -q -- "- oxmera-absent-tool" <<<"$out"
expect "and goes on to the summary" bash -c 'test "$1" = 0 && grep -q "gpu-check summary" <<<"$2"' _ "$rc" "$out"
out=$(GPU_CHECK_TOOLS="cmake oxmera-absent-tool" bash scripts/gpu-check.sh 2>&1)
rc=$?
expect "a real run with a missing tool exits 2 before any step" bash -c 'test "$1" = 2 && ! grep -q "^--- " <<<"$2"' _ "$rc" "$out"

# the blas step: passes on the OpenBLAS this machine loads, fails on the fallback GEMM (whose name mentions OpenBLAS)
if [ -n "${1:-}" ]; then
  expect "blas check passes with OpenBLAS" bash scripts/gpu-check.sh --check-blas "$1" 2>/dev/null
  expect "blas check fails on the builtin GEMM" bash -c '! OXMERA_NO_BLAS=1 bash scripts/gpu-check.sh --check-blas "$1" 2>/dev/null' _ "$1"
  mkdir -p /tmp/oxmera-noblas.$$
  printf '#!/bin/sh\nprintf "  blas          builtin blocked GEMM (OpenBLAS found but not loaded: x)\\n"\n' > /tmp/oxmera-noblas.$$/ox
  chmod +x /tmp/oxmera-noblas.$$/ox
  expect "blas check fails on an OpenBLAS that did not load" \
    bash -c '! bash scripts/gpu-check.sh --check-blas "$1" 2>/dev/null' _ /tmp/oxmera-noblas.$$/ox
  rm -rf /tmp/oxmera-noblas.$$
fi

if ! bash scripts/gpu-deps.sh >/tmp/gpu-deps.$$ 2>&1; then
  if grep -q "needs" /tmp/gpu-deps.$$; then cat /tmp/gpu-deps.$$; echo "FAIL gpu-deps closure"; fail=1
  else echo "skipped: gpu-deps.sh could not fetch the packages: $(tail -1 /tmp/gpu-deps.$$)"; rm -f /tmp/gpu-deps.$$; exit 77; fi
else
  echo "ok   gpu-deps: $(tail -1 /tmp/gpu-deps.$$)"
  d=$(mktemp -d)
  cp shared/debs/*.deb "$d"
  rm "$d"/libgfortran5_*.deb
  out=$(GPU_DEPS_DIR="$d" bash scripts/gpu-deps.sh --check 2>&1)
  rc=$?
  expect "closure check names the missing Fortran runtime" bash -c 'test "$1" = 1 && grep -q "needs libgfortran.so.5" <<<"$2"' _ "$rc" "$out"
  rm -rf "$d"
fi
rm -f /tmp/gpu-deps.$$
exit $fail
