#!/usr/bin/env bash
# oxmera vs PyTorch 1.13 (Debian python3-torch) time per higher-order step (bench/higher_order.cpp and its twin
# bench/higher_order_torch.py): hvp (grad of <grad(loss, create_graph), v>) and fxhvp (autograd::functional::hvp
# vs torch.autograd.functional.hvp) of a 2-32-32-2 tanh MLP NLL loss, and one WGAN-GP critic step.
# Alternates oxmera / torch (A B A B ...) ROUNDS times, same thread count on both sides, and prints per workload
# the median oxmera and torch us/step over rounds and the median (min/max) of the per-round ratios oxmera/torch
# (< 1: oxmera faster), plus the median over rounds of each side's 10th-percentile step time and their ratio.
# See ../shared/spec/measuring.md.
# Usage: bench/higher_order_compare.sh [build-dir] [threads...] ; env ROUNDS (5), STEPS (1000)
#   No build dir: configures and builds ./build (Release, Ninja). With one: rebuilds the target there.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -ge 1 ]; then build=$1; shift; ninja -C "$build" oxmera_higher_order_bench >/dev/null
else build=build; cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null && ninja -C build oxmera_higher_order_bench >/dev/null; fi
threads_list=${*:-1}
rounds=${ROUNDS:-5}; steps=${STEPS:-1000}
torch_py=/usr/bin/python3  # the `python3` on PATH may be a pyenv shim without torch
# torch gets OpenBLAS's AVX-512 kernels and ATen's AVX-512 dispatch (what a careful user would do).
torch_env=(env OPENBLAS_CORETYPE=SkylakeX ATEN_CPU_CAPABILITY=avx512)
grep -qw avx512f /proc/cpuinfo || torch_env=(env OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2)
ox_env=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)
echo "# $(date -u '+%F %H:%M UTC')  $(uname -n)  $(nproc) cpus  load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# rounds=$rounds steps=$steps  torch $($torch_py -c 'import torch; print(torch.__version__)')"
for n in $threads_list; do
  export OMP_NUM_THREADS=$n OPENBLAS_NUM_THREADS=$n
  tmp=$(mktemp)
  # warm-up round, not counted
  "${ox_env[@]}" "$build/bench/oxmera_higher_order_bench" "$n" 100 >/dev/null
  "${torch_env[@]}" "$torch_py" bench/higher_order_torch.py "$n" 100 >/dev/null
  for r in $(seq "$rounds"); do
    "${ox_env[@]}" "$build/bench/oxmera_higher_order_bench" "$n" "$steps" | sed "s/^/ox $r /" >> "$tmp"
    "${torch_env[@]}" "$torch_py" bench/higher_order_torch.py "$n" "$steps" | sed "s/^/torch $r /" >> "$tmp"
  done
  [ -n "${VERBOSE:-}" ] && cat "$tmp"
  for w in hvp fxhvp wgan; do
    awk -v w="$w" -v n="$n" '
      function med(a, k,   i, j, t) { for (i = 2; i <= k; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
                                     return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2 }
      $3 == w { for (f = 4; f <= NF; f++) { if ($f ~ /^median_us=/) v = substr($f, 11); if ($f ~ /^p10_us=/) p = substr($f, 8) }
                if ($1 == "ox") { o[$2] = v; op[$2] = p } else { t[$2] = v; tp[$2] = p } }
      END { k = 0; lo = 1e30; hi = 0
            for (r in o) if (r in t) { k++; oa[k] = o[r]; ta[k] = t[r]; q = o[r] / t[r]; ra[k] = q; opa[k] = op[r]; tpa[k] = tp[r]; if (q < lo) lo = q; if (q > hi) hi = q }
            if (k == 0) exit
            mo = med(opa, k); mt = med(tpa, k)
            printf "%-5s threads=%s  oxmera %7.1f us  torch %7.1f us  ratio oxmera/torch %.3f (min %.3f, max %.3f, %d pairs)  [p10: %.1f vs %.1f = %.3f]\n",
                   w, n, med(oa, k), med(ta, k), med(ra, k), lo, hi, k, mo, mt, mo / mt }' "$tmp"
  done
  rm -f "$tmp"
done
echo "# load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
