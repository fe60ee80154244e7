#!/usr/bin/python3
"""ctest `digits_cli_train`: `oxmera train --model cnn --data DIR` on scikit-learn's digits (export_digits.py):
the held-out accuracy of the last epoch must be >= 95 %; a run stopped after 2 epochs with --checkpoint and
resumed to 4 must log the same epochs 3 and 4 as the uninterrupted run; --model cnn without --data, and resuming
an mlp checkpoint as cnn, must fail (exit 1) with a message. Exits 77 (skipped) without numpy or sklearn.

Usage: check_digits_cli.py PATH/TO/oxmera WORKDIR
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, HERE)
import export_digits  # noqa: E402  (exits 77 itself when numpy or sklearn is missing)

# One intra-op thread: on a loaded 2-core machine OpenMP's waiting threads make two far slower than one.
ENV = dict(os.environ, OMP_NUM_THREADS="1")
failed = 0


def check(name, ok, detail=""):
    global failed
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else f": {detail}"))
    failed += 0 if ok else 1


def train(oxmera, *args):
    return subprocess.run([oxmera, "train", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=ENV)


def metrics(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def main():
    oxmera, work = sys.argv[1], sys.argv[2]
    export_digits.export(work)
    p = lambda name: os.path.join(work, name)  # noqa: E731

    r = train(oxmera, "--model", "cnn", "--data", work, "--metrics", p("full.jsonl"))
    full = metrics(p("full.jsonl")) if r.returncode == 0 else []
    check("cnn trains 15 epochs", r.returncode == 0 and len(full) == 15, r.stderr)
    if full:
        print(r.stdout.splitlines()[0])
        print(r.stdout.splitlines()[-1])
        check("held-out accuracy >= 95 %", full[-1]["accuracy"] >= 0.95, full[-1])
        check("loss decreases", full[-1]["loss"] < full[0]["loss"] / 5, (full[0], full[-1]))

    r1 = train(oxmera, "--model", "cnn", "--data", work, "--epochs", "2", "--checkpoint", p("ck.safetensors"))
    r2 = train(oxmera, "--model", "cnn", "--data", work, "--epochs", "4", "--resume", p("ck.safetensors"),
               "--metrics", p("resumed.jsonl"))
    ok = r1.returncode == 0 and r2.returncode == 0
    resumed = metrics(p("resumed.jsonl")) if ok else []
    check("resume from epoch 2", ok and [m["epoch"] for m in resumed] == [3, 4], r1.stderr + r2.stderr)
    if resumed and len(full) >= 4:
        for a, b in zip(resumed, full[2:4]):
            check(f"resumed epoch {a['epoch']} matches", (a["loss"], a["accuracy"]) == (b["loss"], b["accuracy"]),
                  (a, b))

    r = train(oxmera, "--model", "cnn")
    check("--model cnn without --data fails", r.returncode == 1 and "--data" in r.stderr, r.stderr)
    r1 = train(oxmera, "--epochs", "1", "--checkpoint", p("mlp.safetensors"))
    r2 = train(oxmera, "--model", "cnn", "--data", work, "--resume", p("mlp.safetensors"))
    check("an mlp checkpoint does not resume as cnn", r1.returncode == 0 and r2.returncode == 1 and
          "model" in r2.stderr, r2.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
