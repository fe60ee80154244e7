#!/usr/bin/env bash
# The shared driver of the per-step comparisons with PyTorch 1.13 (Debian python3-torch): a C++ step program and its
# torch twin start from the same initial weights (written by the twin's `init`), alternate ROUNDS times at THREADS
# threads, and this prints the median us/step of each, the median (min/max) of the per-round ratios oxmera/torch
# (< 1: oxmera faster) and the largest relative difference between the two sides' losses.
# Usage: bench/step_compare.sh <label> <cmake target in bench/> <torch twin .py> [build-dir] ;
#        env ROUNDS (5), STEPS (60), THREADS (1). Called by lstm_compare.sh, char_transformer_compare.sh and
#        ddp_compare.sh, which also sets STEP_ARGS (words appended to both sides' init and run arguments) and
#        OX_LAUNCH (a launcher prefixed to the oxmera command, e.g. mpirun). Output lines after the first two of the
#        form `<name> key=value ...` are reported too, as the median over rounds of each value per side.
set -euo pipefail
cd "$(dirname "$0")/.."
label=$1 target=$2 twin=$3
shift 3
if [ $# -ge 1 ]; then build=$1; ninja -C "$build" "$target" >/dev/null
else build=build; cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null && ninja -C build "$target" >/dev/null; fi
rounds=${ROUNDS:-5}; steps=${STEPS:-60}; threads=${THREADS:-1}
torch_py=/usr/bin/python3
torch_env=(env OPENBLAS_CORETYPE=SkylakeX ATEN_CPU_CAPABILITY=avx512)
grep -qw avx512f /proc/cpuinfo || torch_env=(env OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2)
ox_env=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
read -r -a step_args <<< "${STEP_ARGS:-}"
read -r -a ox_launch <<< "${OX_LAUNCH:-}"
"$torch_py" "$twin" init "$work/init.safetensors" "${step_args[@]}"
echo "# $(date -u '+%F %H:%M UTC')  $(uname -n)  $(nproc) cpus  load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
echo "# rounds=$rounds steps=$steps threads=$threads  torch $($torch_py -c 'import torch; print(torch.__version__)')"
for r in $(seq "$rounds"); do
  "${ox_env[@]}" "${ox_launch[@]}" "$build/bench/$target" "$work/init.safetensors" "$steps" "$threads" \
    "${step_args[@]}" > "$work/ox$r"
  "${torch_env[@]}" "$torch_py" "$twin" run "$work/init.safetensors" "$steps" "$threads" "${step_args[@]}" \
    > "$work/torch$r"
done
"$torch_py" - "$work" "$rounds" "$label" <<'PY'
import statistics, sys
work, rounds, label = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def read(path):
    line, losses = open(path).read().splitlines()[:2]
    f = dict(kv.split("=") for kv in line.split()[1:])
    return float(f["median_us"]), float(f["p10_us"]), [float(v) for v in losses.split()[1:]]
ox = [read(f"{work}/ox{r}") for r in range(1, rounds + 1)]
th = [read(f"{work}/torch{r}") for r in range(1, rounds + 1)]
ratios = [o[0] / t[0] for o, t in zip(ox, th)]
lo, lt = ox[0][2], th[0][2]
rel = max(abs(a - b) / abs(b) for a, b in zip(lo, lt))
print(f"{label} oxmera {statistics.median(o[0] for o in ox):.1f} us  torch {statistics.median(t[0] for t in th):.1f} us  "
      f"ratio oxmera/torch {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}, {rounds} pairs)  "
      f"[p10: {statistics.median(o[1] for o in ox):.1f} vs {statistics.median(t[1] for t in th):.1f}]")
print(f"losses: first {lo[0]:.6f} vs {lt[0]:.6f}, last {lo[-1]:.6f} vs {lt[-1]:.6f}, "
      f"max relative difference over {len(lo)} steps {rel:.2e}")
def extra(path):
    out = {}
    for line in open(path).read().splitlines()[2:]:
        words = line.split()
        if len(words) > 1 and all("=" in w for w in words[1:]):
            out[words[0]] = {k: float(v) for k, v in (w.split("=") for w in words[1:])}
    return out
ex_o = [extra(f"{work}/ox{r}") for r in range(1, rounds + 1)]
ex_t = [extra(f"{work}/torch{r}") for r in range(1, rounds + 1)]
for name in ex_o[0]:
    for side, ex in (("oxmera", ex_o), ("torch", ex_t)):
        if all(name in e for e in ex):
            keys = ex[0][name].keys()
            print(f"{name} {side}: " + "  ".join(f"{k} {statistics.median(e[name][k] for e in ex):g}" for k in keys))
PY
echo "# load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
