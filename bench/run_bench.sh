#!/usr/bin/env bash
# Runs oxmera_bench the way an out-of-the-box user would (no OPENBLAS_* overrides), one benchmark family at a
# time. The 2-core dev VM is shared: a competing process stalls OpenMP barriers by a whole scheduler slice and
# ruins multithreaded numbers, so each family waits for an idle machine and is rerun (up to 4 tries) when
# other processes used more than 3% of the CPU while it ran.
#   bench/run_bench.sh [build-dir] [threads] [extra benchmark args...]
set -uo pipefail
BUILD=${1:-build-bench}; THREADS=${2:-2}; shift $(( $# > 2 ? 2 : $# )) || true
BIN=$BUILD/bench/oxmera_bench
NCPU=$(nproc)
jiffies() { awk '/^cpu /{print $2+$3+$4+$5+$6+$7+$8+$9, $5+$6}' /proc/stat; }  # total, idle
busy_pct() { local t1 i1 t2 i2; read -r t1 i1 < <(jiffies); sleep 1; read -r t2 i2 < <(jiffies)
  echo $(( 100 * ((t2 - t1) - (i2 - i1)) / ((t2 - t1) > 0 ? (t2 - t1) : 1) )); }
wait_idle() { for _ in $(seq 1 120); do [ "$(busy_pct)" -lt 5 ] && return 0; done; }
FAMILIES=${FAMILIES:-"AddTiny AddSmall TinyGraph AddLarge AddLargeInplace Sum SumRows SumCols Softmax Sgemm Dgemm BatchedMatmulSmall BatchedMatmulBcast"}
HZ=$(getconf CLK_TCK)
first=1
for f in $FAMILIES; do
  for try in 1 2 3 4; do
    wait_idle
    read -r t1 i1 < <(jiffies)
    tmp=$(mktemp)
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=$THREADS /usr/bin/time -f "%U %S" -o "$tmp.t" \
      "$BIN" --benchmark_filter="^BM_$f(/|\$)" --benchmark_repetitions=5 \
      --benchmark_report_aggregates_only=true "$@" > "$tmp" 2>&1
    read -r t2 i2 < <(jiffies)
    read -r u s < "$tmp.t"
    ours=$(awk -v u="$u" -v s="$s" -v hz="$HZ" 'BEGIN{printf "%d", (u+s)*hz}')
    others=$(( (t2 - t1) - (i2 - i1) - ours ))
    pct=$(( 100 * others / ((t2 - t1) > 0 ? (t2 - t1) : 1) ))
    [ "$pct" -le 3 ] && break
    echo "# $f: other processes used ${pct}% of the CPU during try $try; rerunning" >&2
  done
  if [ $first = 1 ]; then sed -n '1,/^Benchmark/p' "$tmp" | grep -v -E '^-+$'; first=0; fi
  grep -E '^BM_.*_(median|min|cv) ' "$tmp" | sed "s/\$/  [others ${pct}%]/"
  rm -f "$tmp" "$tmp.t"
done
