#!/usr/bin/env bash
# oxmera vs torch 1.13 on forward+backward of Cholesky-based logdet, [3, 64, n, n] f32, n = 4 and 16.
# Alternates the two (A B A B ...) ROUNDS times with the same thread count and prints, per size, the median
# over rounds of each side and the median (min, max) of the per-round ratios oxmera/torch, as
# ../shared/spec/measuring.md asks, with the load average before and after.
# Usage: bench/linalg_compare.sh [build-dir] [threads] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
threads=${2:-2}
rounds=${3:-3}
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
# torch gets OpenBLAS's AVX-512 kernels (what a careful user would do; measuring.md); oxmera chooses its own.
torch_env=(env OPENBLAS_CORETYPE=Cooperlake ATEN_CPU_CAPABILITY=avx512)
ox_env=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A ox torch ratio
for r in $(seq "$rounds"); do
  declare -A o_r=() t_r=()
  while read -r name time; do o_r[$name]=$time; ox[$name]+="$time "; done < <("${ox_env[@]}" "$build/bench/oxmera_bench" \
      --benchmark_filter='BM_CholeskyLogdet' --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
      2>/dev/null | awk '/_median/ {split($1, p, "/"); print "n=" p[2], $2}')
  while read -r _ n t; do t_r[$n]=${t#median_us=}; torch[$n]+="${t#median_us=} "; done \
      < <("${torch_env[@]}" /usr/bin/python3 bench/linalg_torch.py "$threads")
  for n in n=4 n=16; do
    [[ -n "${o_r[$n]:-}" && -n "${t_r[$n]:-}" ]] || { echo "round $r: missing result for $n" >&2; exit 1; }
    ratio[$n]+="$(echo "${o_r[$n]} / ${t_r[$n]}" | bc -l) "
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
minv() { tr ' ' '\n' | grep -v '^$' | sort -g | head -1; }
maxv() { tr ' ' '\n' | grep -v '^$' | sort -g | tail -1; }
echo "threads=$threads rounds=$rounds  (microseconds, median over rounds; ratio = oxmera/torch per round)"
for n in n=4 n=16; do
  o=$(echo "${ox[$n]}" | median); t=$(echo "${torch[$n]}" | median)
  printf "%-5s oxmera %8.1f us  torch %8.1f us  ratio median %.3f (min %.3f, max %.3f)\n" "$n" "$o" "$t" \
    "$(echo "${ratio[$n]}" | median)" "$(echo "${ratio[$n]}" | minv)" "$(echo "${ratio[$n]}" | maxv)"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
