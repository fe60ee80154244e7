#!/usr/bin/python3
"""ctest `transformer_lm_torch_parity`: the transformer_lm example and its PyTorch twin
(bench/transformer_lm_torch.py) train STEPS steps from the same initial parameters on the same windows (the
example's --dump-init file): f32 and f64 with the head tied to the token embedding, and f32 untied. Then the other
way: the twin initialises in torch (--save-init), the example loads that file (--init), f32 tied and f64 untied.
Every step's loss must agree within 1e-5 (f32) / 1e-10 (f64) relative, and the loss must fall. The example itself
checks its save/load round trip (exit 1 otherwise). Exits 77 (skipped, with the reason) without numpy or torch.

Usage: check_transformer_lm_torch.py PATH/TO/transformer_lm WORKDIR
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TWIN = os.path.join(HERE, "..", "..", "bench", "transformer_lm_torch.py")
TEXT = "/usr/share/common-licenses/GPL-3"
try:
    import numpy  # noqa: F401
    import torch  # noqa: F401
except ImportError as e:
    print(f"transformer_lm_torch_parity: skipped ({e})")
    sys.exit(77)
if not os.path.exists(TEXT):
    print(f"transformer_lm_torch_parity: skipped ({TEXT} not found)")
    sys.exit(77)

STEPS = 8
SIZES = ["--batch", "8", "--seq", "32", "--d-model", "32", "--heads", "2", "--layers", "2", "--ff", "64"]


def losses(text):
    return [float(v) for v in re.findall(r"^step \d+ loss (\S+)$", text, re.M)]


def run(example, work, dtype, tie, tol, torch_init=False):
    tag = f"{dtype} {'tied' if tie else 'untied'}{' torch-init' if torch_init else ''}"
    os.makedirs(work, exist_ok=True)
    name = f"{dtype}-{tie}{'-torch' if torch_init else ''}"
    init = os.path.join(work, f"init-{name}.safetensors")
    model = os.path.join(work, f"model-{name}.safetensors")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [example, "--steps", str(STEPS), *SIZES, "--tie", str(tie), "--print", "1", "--dtype", dtype, "--model", model,
           "--sample", "40"]
    ox = subprocess.run([*cmd, "--dump-init", init], check=True, stdout=subprocess.PIPE, text=True, env=env).stdout
    twin = [sys.executable, TWIN, "--init", init, "--steps", str(STEPS)]
    if torch_init:
        torch_file = os.path.join(work, f"torch-{name}.safetensors")
        twin += ["--save-init", torch_file, "--seed", "5"]
    pt = subprocess.run(twin, check=True, stdout=subprocess.PIPE, text=True, env=env).stdout
    if torch_init:  # the same windows (same seed and sizes), from the parameters torch drew
        ox = subprocess.run([*cmd, "--init", torch_file], check=True, stdout=subprocess.PIPE, text=True,
                            env=env).stdout
    a, b = losses(ox), losses(pt)
    if len(a) != STEPS or len(b) != STEPS:
        print(f"FAIL {tag}: expected {STEPS} step losses, got {len(a)} from oxmera and {len(b)} from torch")
        print(ox)
        return False
    ok = True
    for k, (lo, lp) in enumerate(zip(a, b), 1):
        rel = abs(lo - lp) / max(abs(lp), 1e-12)
        print(f"{tag} step {k}: oxmera {lo:.12g} torch {lp:.12g} (rel {rel:.2e})")
        ok = ok and rel <= tol
    if not a[-1] < a[0]:
        print(f"FAIL {tag}: the loss did not fall ({a[0]} -> {a[-1]})")
        ok = False
    if not ok:
        print(f"FAIL {tag}: a step's loss differs by more than {tol:g} relative")
    return ok


def main():
    example, work = sys.argv[1], sys.argv[2]
    ok = run(example, work, "f32", 1, 1e-5)
    ok = run(example, work, "f64", 1, 1e-10) and ok
    ok = run(example, work, "f32", 0, 1e-5) and ok
    ok = run(example, work, "f32", 1, 1e-5, torch_init=True) and ok
    ok = run(example, work, "f64", 0, 1e-10, torch_init=True) and ok
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
