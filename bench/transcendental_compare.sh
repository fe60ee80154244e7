#!/usr/bin/env bash
# oxmera vs PyTorch 1.13 on the vectorised transcendental ops: each op's forward and forward + backward on a
# [1024, 4096] f32 tensor at 1 thread (bench/bench_ops.cpp BM_Tx/*, bench/transcendental_torch.py). Alternates
# oxmera / torch ROUNDS times (A B A B ...); per op prints the median over rounds of each side's min-of-reps ms and
# the median (min/max) of the per-round ratios oxmera/torch (< 1: oxmera faster).
# Usage: bench/transcendental_compare.sh [build-dir] [op] ; env ROUNDS (3), REPS (5), MIN_TIME (0.3 s)
#   op: one word, a substring of the op names (gelu, sin, ...), for both sides
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
filter=${2:-}
ninja -C "$build" oxmera_bench >/dev/null
rounds=${ROUNDS:-3}; reps=${REPS:-5}; min_time=${MIN_TIME:-0.3}
torch_py=/usr/bin/python3  # the `python3` on PATH may be a pyenv shim without torch
# torch gets ATen's AVX-512 dispatch where the CPU has it, else AVX2 (what a careful user would do).
torch_env=(env ATEN_CPU_CAPABILITY=avx512)
grep -qw avx512f /proc/cpuinfo || torch_env=(env ATEN_CPU_CAPABILITY=avx2)
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
echo "# $(date -u '+%F %H:%M UTC')  $(uname -n)  $(nproc) cpus  load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# 1 thread, [1024, 4096] f32, rounds=$rounds reps=$reps  torch $($torch_py -c 'import torch; print(torch.__version__)') ${torch_env[*]:1}"
tmp=$(mktemp)
for r in $(seq "$rounds"); do
  "$build/bench/oxmera_bench" --benchmark_filter="BM_Tx/.*${filter}" --benchmark_repetitions="$reps" \
    --benchmark_min_time="$min_time" --benchmark_report_aggregates_only=true --benchmark_format=csv 2>/dev/null |
    awk -F, -v r="$r" '$1 ~ /^"BM_Tx\/.*_min"$/ { n = $1; gsub(/"|BM_Tx\/|\/real_time|_min/, "", n); print "ox", r, n, $3 }' >> "$tmp"
  "${torch_env[@]}" "$torch_py" bench/transcendental_torch.py 1 "$reps" "$min_time" "$filter" | sed "s/^/torch $r /" >> "$tmp"
done
[ -n "${VERBOSE:-}" ] && cat "$tmp"
awk '
  function med(a, k,   i, j, t) { for (i = 2; i <= k; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
                                 return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2 }
  { v[$1, $2, $3] = $4; if (!($3 in seen)) { seen[$3] = 1; order[++nops] = $3 }; if ($2 > R) R = $2 }
  END { printf "%-18s %10s %10s %8s %16s\n", "op", "oxmera ms", "torch ms", "ratio", "(min, max)"
        for (i = 1; i <= nops; i++) { op = order[i]; k = 0; lo = 1e30; hi = 0
          for (r = 1; r <= R; r++) if ((("ox", r, op) in v) && (("torch", r, op) in v)) {
            k++; oa[k] = v["ox", r, op]; ta[k] = v["torch", r, op]; q = oa[k] / ta[k]; ra[k] = q
            if (q < lo) lo = q; if (q > hi) hi = q }
          if (k) printf "%-18s %10.3f %10.3f %8.3f   (%.3f, %.3f)\n", op, med(oa, k), med(ta, k), med(ra, k), lo, hi } }' "$tmp"
rm -f "$tmp"
echo "# load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
