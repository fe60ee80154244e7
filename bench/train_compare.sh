#!/usr/bin/env bash
# oxmera vs PyTorch 1.13 (Debian python3-torch) time per training step: 2-32-32-2 tanh MLP (batch 32) and a
# small CNN on 28x28x1 (batch 64), cross entropy + Adam; one step = forward + loss + zero_grad + backward + step.
# Alternates oxmera / torch (A B A B ...) ROUNDS times per thread count, same thread count on both sides,
# and prints per workload the median oxmera and torch us/step over rounds and the median (min/max) of the
# per-round ratios oxmera/torch (< 1: oxmera faster), plus the median over rounds of each side's 10th-percentile
# step time (a steadier figure when other processes steal a core). See ../shared/spec/measuring.md.
# Usage: bench/train_compare.sh [build-dir] [threads...] ; env ROUNDS (3), MLP_STEPS (2000), CNN_STEPS (200)
#   No build dir: configures and builds ./build (Release, Ninja). With one: rebuilds the target there.
#   Optional: LIBTORCH_BIN=path to a libtorch build of the same benchmark (same arguments and output format)
#   adds a third leg (A B C A B C ...) and an oxmera/libtorch ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -ge 1 ]; then build=$1; shift; ninja -C "$build" oxmera_train_bench >/dev/null
else build=build; cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null && ninja -C build oxmera_train_bench >/dev/null; fi
threads_list=${*:-2 1}
rounds=${ROUNDS:-3}; mlp_steps=${MLP_STEPS:-2000}; cnn_steps=${CNN_STEPS:-200}
torch_py=/usr/bin/python3  # the `python3` on PATH may be a pyenv shim without torch
# torch gets OpenBLAS's AVX-512 kernels and ATen's AVX-512 dispatch (what a careful user would do);
# oxmera chooses its own kernels without any variable.
torch_env=(env OPENBLAS_CORETYPE=SkylakeX ATEN_CPU_CAPABILITY=avx512)
grep -qw avx512f /proc/cpuinfo || torch_env=(env OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2)  # no AVX-512 here
ox_env=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)
echo "# $(date -u '+%F %H:%M UTC')  $(uname -n)  $(nproc) cpus  load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# rounds=$rounds mlp_steps=$mlp_steps cnn_steps=$cnn_steps  torch $($torch_py -c 'import torch; print(torch.__version__)')"
for n in $threads_list; do
  export OMP_NUM_THREADS=$n OPENBLAS_NUM_THREADS=$n
  tmp=$(mktemp)
  for r in $(seq "$rounds"); do
    "${ox_env[@]}" "$build/bench/oxmera_train_bench" "$n" "$mlp_steps" "$cnn_steps" | sed "s/^/ox $r /" >> "$tmp"
    "${torch_env[@]}" "$torch_py" bench/train_step_torch.py "$n" "$mlp_steps" "$cnn_steps" | sed "s/^/torch $r /" >> "$tmp"
    if [ -n "${LIBTORCH_BIN:-}" ]; then
      "${torch_env[@]}" "$LIBTORCH_BIN" "$n" "$mlp_steps" "$cnn_steps" | sed "s/^/libtorch $r /" >> "$tmp"
    fi
  done
  [ -n "${VERBOSE:-}" ] && cat "$tmp"
  for ref in torch libtorch; do
    grep -q "^$ref " "$tmp" || continue
    for w in mlp cnn; do
      awk -v w="$w" -v n="$n" -v ref="$ref" '
        function med(a, k,   i, j, t) { for (i = 2; i <= k; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
                                       return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2 }
        $3 == w && ($1 == "ox" || $1 == ref) { for (f = 4; f <= NF; f++) { if ($f ~ /^median_us=/) v = substr($f, 11); if ($f ~ /^p10_us=/) p = substr($f, 8) }
                  if ($1 == "ox") { o[$2] = v; op[$2] = p } else { t[$2] = v; tp[$2] = p } }
        END { k = 0; lo = 1e30; hi = 0
              for (r in o) if (r in t) { k++; oa[k] = o[r]; ta[k] = t[r]; q = o[r] / t[r]; ra[k] = q; opa[k] = op[r]; tpa[k] = tp[r]; if (q < lo) lo = q; if (q > hi) hi = q }
              printf "%-4s threads=%s  oxmera %7.1f us  %-8s %7.1f us  ratio oxmera/%s %.3f (min %.3f, max %.3f, %d pairs)  [p10: %.1f vs %.1f]\n",
                     w, n, med(oa, k), ref, med(ta, k), ref, med(ra, k), lo, hi, k, med(opa, k), med(tpa, k) }' "$tmp"
    done
  done
  rm -f "$tmp"
done
echo "# load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
