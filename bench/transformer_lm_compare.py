#!/usr/bin/python3
"""oxmera vs PyTorch 1.13 (Debian python3-torch): time per training step of the transformer_lm example
(examples/transformer_lm.cpp) and its twin (bench/transformer_lm_torch.py) at the example's default size (or
EXTRA's), from the same initial parameters on the same windows, 1 thread each (OMP_NUM_THREADS=1 and --threads 1
on both sides). Alternates example / twin ROUNDS times; each side prints its own "time T ms/step over steps 2-N"
(wall time of the training loop without step 1). Prints every round, the median (min/max) of the per-round ratios
oxmera/torch (< 1: oxmera faster), and the two sides' last losses (they train the same model, so they agree to
rounding).

Usage: bench/transformer_lm_compare.py [build-dir] ; env ROUNDS (5), STEPS (300), EXTRA (more example options,
       e.g. "--d-model 128 --ff 512")
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    example = os.path.join(build, "examples", "transformer_lm")
    twin = os.path.join(HERE, "transformer_lm_torch.py")
    rounds, steps = int(os.environ.get("ROUNDS", "5")), os.environ.get("STEPS", "300")
    extra = os.environ.get("EXTRA", "").split()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as work:
        init, model = os.path.join(work, "init.safetensors"), os.path.join(work, "model.safetensors")
        cmd = [example, "--steps", steps, *extra, "--threads", "1", "--sample", "0", "--print", "1000000", "--model",
               model]
        subprocess.run([*cmd, "--dump-init", init], check=True, env=env, stdout=subprocess.DEVNULL)

        def run(argv):
            out = subprocess.run(argv, check=True, env=env, stdout=subprocess.PIPE, text=True).stdout
            ms = float(re.search(r"^time (\S+) ms/step", out, re.M)[1])
            return ms, re.findall(r"^step \d+ loss (\S+)$", out, re.M)[-1]

        ratios = []
        for r in range(rounds):
            load = os.getloadavg()[0]
            ox_ms, ox_loss = run(cmd)
            pt_ms, pt_loss = run([sys.executable, twin, "--init", init, "--threads", "1"])
            ratios.append(ox_ms / pt_ms)
            print(f"round {r + 1} (load {load:.2f}): oxmera {ox_ms:.2f} ms/step, torch {pt_ms:.2f} ms/step, "
                  f"ratio {ratios[-1]:.3f}; last loss {ox_loss} vs {pt_loss}", flush=True)
    print(f"ratio oxmera/torch: median {statistics.median(ratios):.3f} (min {min(ratios):.3f}, "
          f"max {max(ratios):.3f}) over {rounds} rounds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
