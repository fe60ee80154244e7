#!/usr/bin/python3
"""ctest `digits_cnn_torch_parity`: the digits_cnn example and its PyTorch twin (bench/digits_cnn_torch.py) train
5 steps from the same initial parameters in the same batch order (the example's --dump-init file); every step's
f32 loss must agree within 1e-5 relative. Exits 77 (skipped, with the reason) without numpy, sklearn or torch.

Usage: check_digits_torch.py PATH/TO/digits_cnn WORKDIR
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TWIN = os.path.join(HERE, "..", "..", "bench", "digits_cnn_torch.py")
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, HERE)
import export_digits  # noqa: E402  (exits 77 itself when numpy or sklearn is missing)

try:
    import torch  # noqa: F401
except ImportError as e:
    print(f"digits_cnn_torch_parity: skipped ({e})")
    sys.exit(77)

STEPS, TOL = 5, 1e-5


def losses(text):
    return [float(v) for v in re.findall(r"^step \d+ loss (\S+)$", text, re.M)]


def main():
    example, work = sys.argv[1], sys.argv[2]
    export_digits.export(work)
    init = os.path.join(work, "init.safetensors")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    ox = subprocess.run([example, "--data", work, "--dump-init", init, "--steps", str(STEPS), "--epochs", "1"],
                        check=True, stdout=subprocess.PIPE, text=True, env=env).stdout
    pt = subprocess.run([sys.executable, TWIN, "--data", work, "--init", init, "--steps", str(STEPS)],
                        check=True, stdout=subprocess.PIPE, text=True, env=env).stdout
    a, b = losses(ox), losses(pt)
    if len(a) != STEPS or len(b) != STEPS:
        print(f"FAIL expected {STEPS} step losses, got {len(a)} from oxmera and {len(b)} from torch")
        return 1
    worst, failed = 0.0, 0
    for k, (lo, lp) in enumerate(zip(a, b), 1):
        rel = abs(lo - lp) / max(abs(lp), 1e-12)
        worst = max(worst, rel)
        print(f"step {k}: oxmera {lo:.9g} torch {lp:.9g} (rel {rel:.2e})")
        if rel > TOL:
            failed += 1
    # The losses must move: equal constant losses would hide a twin that does not train.
    if not a[-1] < a[0]:
        print(f"FAIL the loss did not decrease over {STEPS} steps ({a[0]} -> {a[-1]})")
        failed += 1
    print(f"digits_cnn_torch_parity: {STEPS} steps, largest relative difference {worst:.2e} (tolerance {TOL:g})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
