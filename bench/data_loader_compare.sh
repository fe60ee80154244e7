#!/usr/bin/env bash
# oxmera's DataLoader against PyTorch 1.13's (Debian python3-torch): bench/data_loader.cpp and its twin
# bench/data_loader_torch.py (the same CNN epoch over the same data, batches by hand or by the loader with 0 / 2
# workers, 2 persistent workers, plain or with a 0.2 ms wait per example) alternate ROUNDS times, each running INNER rounds of every
# mode; prints per mode the median epoch time of each side, the ratio oxmera/torch, and per side what the loader
# costs over hand-built batches (loader/prebuilt: the median over the rounds of each round's ratio, min-max).
# The data: scikit-learn's digits, exported to IDX by tests/digits/export_digits.py, and the digits CNN of
# examples/digits_cnn.cpp (bench/digits_cnn_torch.py on the torch side); DATA=random (or no scikit-learn) runs
# the older random 28x28 images and bench/train_step.cpp's CNN instead.
# Usage: bench/data_loader_compare.sh [build-dir] ; env ROUNDS (3), INNER (3), THREADS (1), DATA (digits|random)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
ninja -C "$build" oxmera_data_loader_bench >/dev/null
rounds=${ROUNDS:-3} inner=${INNER:-3} threads=${THREADS:-1}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
data_args=()
data=${DATA:-digits}
if [ "$data" = digits ]; then
  if /usr/bin/python3 tests/digits/export_digits.py "$work/digits" >/dev/null; then
    data_args=(--data "$work/digits")
  else
    echo "# the digits could not be exported (python3-sklearn missing?): random images instead"
    data=random
  fi
fi
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
echo "# $(date -u '+%F %H:%M UTC')  commit $commit  $(nproc) cpus  load at start: $(cut -d' ' -f1-3 /proc/loadavg)  data=$data rounds=$rounds inner=$inner threads=$threads"
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
for r in $(seq "$rounds"); do
  "$build/bench/oxmera_data_loader_bench" "${data_args[@]}" "$threads" "$inner" > "$work/ox$r"
  /usr/bin/python3 bench/data_loader_torch.py "${data_args[@]}" "$threads" "$inner" > "$work/torch$r"
done
/usr/bin/python3 - "$work" "$rounds" <<'PY'
import statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def read(path):
    return {l.split()[0]: float(dict(kv.split("=") for kv in l.split()[1:])["median_ms"]) for l in open(path)}
ox = [read(f"{work}/ox{r}") for r in range(1, rounds + 1)]
th = [read(f"{work}/torch{r}") for r in range(1, rounds + 1)]
med = lambda runs, m: statistics.median(x[m] for x in runs)
for m in th[0]:
    ratios = [o[m] / t[m] for o, t in zip(ox, th)]
    line = f"{m:9s} oxmera {med(ox, m):7.1f} ms  torch {med(th, m):7.1f} ms  ratio {statistics.median(ratios):.3f} " \
           f"(min {min(ratios):.3f}, max {max(ratios):.3f})"
    if m != "prebuilt":
        # per round (each a median of INNER epochs): this mode over that round's hand-built batches
        lp = lambda runs: [x[m] / x["prebuilt"] for x in runs]
        span = lambda v: f"{statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f})"
        line += f"   loader/prebuilt: oxmera {span(lp(ox))}, torch {span(lp(th))}"
    print(line)
PY
echo "# load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
