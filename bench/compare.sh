#!/usr/bin/env bash
# The research workload, oxmera vs its PyTorch twin, timed side by side (see ../shared/spec/measuring.md).
#
#   bench/compare.sh [--epochs N] [--rounds N] [--threads N] [--replicas R] [--seed S] [--build-dir DIR]
#                    [--device cpu|cuda] [--dtype auto|f32|f64] [--oxmera BIN] [--python PY]
#
# --device/--dtype go to both sides (dtype auto = f64 on cpu, f32 on cuda: the DPP fits' training dtype).
# --oxmera BIN uses an already built `oxmera` instead of building one; --python PY picks the interpreter
# with torch (default /usr/bin/python3, Debian's torch 1.13 here; plain python3 on the GPU machine).
# Builds Release, writes the exchange file (`oxmera bench research --dump`, also the warm-up run), runs
# PyTorch once as its warm-up (verifying the dumped batch orders), then alternates oxmera / PyTorch for
# --rounds rounds (default 3). Both get the same thread count N (default 1): OMP_NUM_THREADS=N,
# OPENBLAS_NUM_THREADS=N, torch.set_num_threads(N) (oxmera's OpenMP pool and its OpenBLAS follow the env).
# PyTorch runs with OPENBLAS_CORETYPE=SkylakeX ATEN_CPU_CAPABILITY=avx512 (its fast paths; Haswell/avx2 on a CPU
# without AVX-512);
# oxmera runs with those OpenBLAS variables unset (it selects its kernels itself).
# Checks that every round's first-epoch losses agree within 1e-3 relative and its final training losses and
# held-out metrics within 1e-3 (f64) or 1e-2 (f32: after 100 epochs an f32 trajectory is itself that far
# from the f64 one, e.g. PyTorch f32 vs PyTorch f64 differ by 2.3e-3 in a deepsets metric), then
# prints per fit and in total: median oxmera time, median PyTorch time, and the median (min, max) of the
# per-round ratios oxmera/PyTorch. Exit status 1 when the results disagree.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
EPOCHS=100 ROUNDS=3 THREADS=1 REPLICAS=3 SEED=0 BUILD=$ROOT/build-research DEVICE=cpu DTYPE=auto OX="" PY=/usr/bin/python3
while [[ $# -gt 0 ]]; do
  case $1 in
    --epochs) EPOCHS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --replicas) REPLICAS=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --build-dir) BUILD=$2; shift 2 ;;
    --device) DEVICE=$2; shift 2 ;;
    --dtype) DTYPE=$2; shift 2 ;;
    --oxmera) OX=$2; shift 2 ;;
    --python) PY=$2; shift 2 ;;
    -h|--help) sed -n 2,20p "$0"; exit 0 ;;
    *) echo "compare.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
# PY: /usr/bin/python3 is the interpreter with torch 1.13 here (the pyenv python3 on PATH has none).
if [ "$DTYPE" = auto ]; then [ "$DEVICE" = cpu ] && DTYPE=f64 || DTYPE=f32; fi

if [ -z "$OX" ]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DOXMERA_BUILD_BENCHMARKS=OFF >/dev/null
  ninja -C "$BUILD" oxmera_cli >/dev/null
  OX=$BUILD/tools/oxmera/oxmera
fi
WORK=$(mktemp -d /tmp/oxmera-research.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS
COMMON=(--epochs "$EPOCHS" --replicas "$REPLICAS" --seed "$SEED")
run_ox() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$OX" bench research "${COMMON[@]}" --device "$DEVICE" \
             --dtype "$DTYPE" "$@"; }
# torch's fastest paths this CPU can run: AVX-512 where it exists, else AVX2 (forcing AVX-512 kills it).
if grep -qw avx512f /proc/cpuinfo; then PT_CORE=SkylakeX PT_CAP=avx512; else PT_CORE=Haswell PT_CAP=avx2; fi
run_pt() { OPENBLAS_CORETYPE=$PT_CORE ATEN_CPU_CAPABILITY=$PT_CAP "$PY" "$ROOT/bench/research_torch.py" \
             --data "$WORK/data.safetensors" --threads "$THREADS" --device "$DEVICE" --dtype "$DTYPE" "$@"; }

echo "# $(date -u +%FT%TZ) $(hostname) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc --all) cpus"
echo "# device $DEVICE, dtype $DTYPE, epochs $EPOCHS, replicas $REPLICAS, seed $SEED, threads $THREADS, rounds $ROUNDS; load$(uptime | sed "s/.*load average//")"
echo "# warm-up (oxmera writes the exchange file; PyTorch verifies the batch orders)"
run_ox --dump "$WORK/data.safetensors" --out "$WORK/warm_ox.json" >/dev/null
run_pt --verify-order --out "$WORK/warm_pt.json" >/dev/null
for ((r = 1; r <= ROUNDS; r++)); do
  run_ox --out "$WORK/ox_$r.json" | sed "s/^/[oxmera  $r] /"
  run_pt --out "$WORK/pt_$r.json" | sed "s/^/[pytorch $r] /"
done
echo "# load after$(uptime | sed 's/.*load average//')"

"$PY" - "$WORK" "$ROUNDS" "$DTYPE" <<'PYEOF'
import json, statistics, sys
work, rounds, dtype = sys.argv[1], int(sys.argv[2]), sys.argv[3]
final_tol = 1e-3 if dtype == "f64" else 1e-2
ox = [json.load(open(f"{work}/ox_{r}.json")) for r in range(1, rounds + 1)]
pt = [json.load(open(f"{work}/pt_{r}.json")) for r in range(1, rounds + 1)]
ok, worst = True, 0.0
for r in range(rounds):
    for fo, fp in zip(ox[r]["fits"], pt[r]["fits"]):
        assert fo["name"] == fp["name"]
        for key, tol in (("first_epoch_loss", 1e-3), ("train_loss", final_tol), ("metric", final_tol)):
            for i, (a, b) in enumerate(zip(fo[key], fp[key])):
                rel = abs(a - b) / max(abs(b), 1e-12)
                worst = max(worst, rel)
                if rel > tol:
                    ok = False
                    print(f"MISMATCH round {r+1} {fo['name']} {key}[{i}]: oxmera {a:.9g} pytorch {b:.9g} (rel {rel:.2e})")
print(f"agreement: {'OK' if ok else 'FAILED'} (largest relative difference {worst:.2e}; tolerance 1e-3 on the "
      f"first epoch, {final_tol:g} on the final loss and metric, dtype {dtype})")
names = [f["name"] for f in ox[0]["fits"]]
print(f"{'fit':<13} {'oxmera s':>9} {'pytorch s':>9}  ratio ox/pt median (min..max)")
def row(name, to, tp):
    ratios = [a / b for a, b in zip(to, tp)]
    print(f"{name:<13} {statistics.median(to):9.3f} {statistics.median(tp):9.3f}  "
          f"{statistics.median(ratios):.3f} ({min(ratios):.3f}..{max(ratios):.3f})")
for k, name in enumerate(names):
    row(name, [o["fits"][k]["seconds"] for o in ox], [p["fits"][k]["seconds"] for p in pt])
row("total", [o["total_seconds"] for o in ox], [p["total_seconds"] for p in pt])
sys.exit(0 if ok else 1)
PYEOF
