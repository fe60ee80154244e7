#!/usr/bin/env bash
# Issue #13's structured ops, oxmera vs torch 1.13, side by side at 1 thread, alternating A B A B.
#   bench/structured_compare.sh [BUILD_DIR] [ROUNDS]
# Prints per benchmark the best oxmera and torch time (us per call) over the rounds and their ratio.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$ROOT/build}
ROUNDS=${2:-2}
FILTER='BM_(CausalMaskedFill|Tril|CumsumRows|SortRows|Topk5Rows|VarRows|NormRows|FlipCols|Repeat2x2)/real_time'
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
OUT=$(mktemp -d)
for r in $(seq "$ROUNDS"); do
  "$BUILD/bench/oxmera_bench" --benchmark_filter="$FILTER" --benchmark_repetitions=5 \
    --benchmark_report_aggregates_only=true --benchmark_format=csv 2>/dev/null |
    awk -F, '$1 ~ /_min"?$/ {gsub(/"/, "", $1); sub(/_min$/, "", $1); sub(/\/real_time$/, "", $1); print $1, $3}' >>"$OUT/ox"
  /usr/bin/python3 "$ROOT/bench/structured_torch.py" 50 5 >>"$OUT/torch"
done
awk 'NR == FNR { if (!($1 in ox) || $2 < ox[$1]) ox[$1] = $2; next }
     { if (!($1 in t) || $2 < t[$1]) t[$1] = $2 }
     END { printf "%-22s %12s %12s %8s\n", "benchmark", "oxmera_us", "torch_us", "ratio";
           for (k in ox) printf "%-22s %12.1f %12.1f %8.2f\n", k, ox[k], t[k], ox[k] / t[k] }' "$OUT/ox" "$OUT/torch" | sort
[ -n "${KEEP:-}" ] && echo "raw timings in $OUT" || rm -rf "$OUT"

