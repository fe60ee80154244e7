#!/usr/bin/python3
"""The research workload against its PyTorch twin, short: `oxmera bench research --epochs 3` writes the
exchange file, bench/research_torch.py trains the same fits from it, and every replica's first-epoch loss,
final loss and held-out metric must agree, in f64 (1e-8 relative: three epochs leave only rounding
differences, which Adam amplifies where a gradient is rounding noise around zero: its step divides by
sqrt(v) + 1e-8, so a 1e-17 difference in such a gradient moves a parameter by about 1e-11) and in f32 (1e-4);
the mlp fit trains in f32 in both runs. (The fits on stacked nn::Linear layers sum their weight gradients as
g^T x where the twin's hand-stacked [in, out] weights sum x^T g: the same products in another order, 1e-9 apart
after the first epoch of the deepsets fit; the hand-stacked oxmera fits agreed to 1e-15.) Exits 77 (skipped) when torch or numpy cannot be imported.

Usage: check_research_torch.py PATH/TO/oxmera WORKDIR
"""
import json
import os
import subprocess
import sys

try:
    import numpy  # noqa: F401  (the twin's safetensors reader)
    import torch  # noqa: F401
except ImportError as e:
    print(f"research_torch: skipped ({e})")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
TWIN = os.path.join(HERE, "..", "..", "bench", "research_torch.py")


def main():
    oxmera, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    data = os.path.join(work, "data.safetensors")
    failed = 0
    for dtype in ("f64", "f32"):
        ox_out, pt_out = os.path.join(work, f"ox_{dtype}.json"), os.path.join(work, f"pt_{dtype}.json")
        subprocess.run([oxmera, "bench", "research", "--epochs", "3", "--replicas", "2", "--seed", "5",
                        "--dtype", dtype, "--dump", data, "--out", ox_out], check=True, env=env,
                       stdout=subprocess.DEVNULL)
        subprocess.run([sys.executable, TWIN, "--data", data, "--threads", "1", "--dtype", dtype, "--out", pt_out,
                        "--verify-order"], check=True, env=env, stdout=subprocess.DEVNULL)
        ox, pt = json.load(open(ox_out)), json.load(open(pt_out))
        if ox["dtype"] != dtype or pt["dtype"] != dtype:
            print(f"FAIL {dtype}: reported dtypes {ox['dtype']} / {pt['dtype']}")
            failed += 1
        worst = 0.0
        for fo, fp in zip(ox["fits"], pt["fits"]):
            assert fo["name"] == fp["name"], (fo["name"], fp["name"])
            tol = 1e-4 if fo["name"] == "mlp-h16" or dtype == "f32" else 1e-8
            for key in ("first_epoch_loss", "train_loss", "metric"):
                for i, (a, b) in enumerate(zip(fo[key], fp[key])):
                    rel = abs(a - b) / max(abs(b), 1e-12)
                    worst = max(worst, rel)
                    if rel > tol:
                        print(f"FAIL {dtype} {fo['name']} {key}[{i}]: oxmera {a!r} pytorch {b!r} (rel {rel:.2e})")
                        failed += 1
        print(f"research_torch {dtype}: {len(ox['fits'])} fits, largest relative difference {worst:.2e} "
              f"(tolerance 1e-8 for f64 DPP fits, else 1e-4)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
