#!/usr/bin/env python3
"""Black-box tests of the `oxmera` command: exit codes, streams, the 80-column rule, doctor fixtures
against golden files, malformed fixtures, and the plain training mode.

Usage: test_cli.py PATH/TO/oxmera [--bless]   (--bless rewrites the golden files)
"""
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
passed = failed = 0


def run(args, timeout=120, env=None):
    return subprocess.run([OXMERA] + args, capture_output=True, text=True, timeout=timeout, env=env)


def check(name, cond, detail=""):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {name}: {detail}")


def main():
    global OXMERA
    OXMERA = sys.argv[1]
    bless = "--bless" in sys.argv

    r = run(["--version"])
    check("--version", r.returncode == 0 and r.stdout.startswith("oxmera "), r)
    r = run(["--help"])
    check("--help", r.returncode == 0 and "doctor" in r.stdout and "train" in r.stdout, r)
    r = run(["train", "--help"])
    check("train --help", r.returncode == 0 and "--epochs" in r.stdout, r)
    for bad in ([], ["frobnicate"], ["train", "--epochs"], ["train", "--epochs", "zero"], ["train", "--epochs", "0"],
                ["train", "--bogus"], ["train", "--device", "tpu"], ["doctor", "--fixture"], ["bench"]):
        r = run(bad)
        check(f"usage error {bad}", r.returncode == 1 and r.stderr.strip() != "" and r.stdout == "", r)

    r = run(["doctor"])
    check("doctor runs", r.returncode == 0 and "Capabilities" in r.stdout, r)
    wide = [l for l in r.stdout.splitlines() if len(l) > 80]
    check("doctor <= 80 columns", not wide, wide)
    r = run(["doctor", "--json"])
    try:
        rep = json.loads(r.stdout)
        check("doctor --json", r.returncode == 0 and {"host", "build", "devices", "capabilities"} <= set(rep), rep)
    except json.JSONDecodeError as e:
        check("doctor --json parses", False, e)

    for fx in ("doctor-nogpu", "doctor-cuda"):
        r = run(["doctor", "--fixture", os.path.join(HERE, "fixtures", fx + ".json")])
        golden = os.path.join(HERE, "golden", fx + ".txt")
        if bless:
            with open(golden, "w") as f:
                f.write(r.stdout)
        with open(golden) as f:
            want = f.read()
        check(f"golden {fx}", r.returncode == 0 and r.stdout == want, f"\n--- got\n{r.stdout}--- want\n{want}")
        check(f"golden {fx} width", all(len(l) <= 80 for l in r.stdout.splitlines()), "")

    good = json.load(open(os.path.join(HERE, "fixtures", "doctor-nogpu.json")))
    with tempfile.TemporaryDirectory() as tmp:
        def fixture_case(name, text, needle):
            p = os.path.join(tmp, name + ".json")
            with open(p, "w") as f:
                f.write(text)
            r = run(["doctor", "--fixture", p])
            check(f"bad fixture {name}", r.returncode == 1 and needle in r.stderr and "Traceback" not in r.stderr,
                  r)
        fixture_case("truncated", json.dumps(good)[:57], "not valid JSON")
        fixture_case("array", "[1, 2]", "must be a JSON object")
        for section in ("host", "build", "devices", "capabilities"):
            d = dict(good)
            del d[section]
            fixture_case("missing-" + section, json.dumps(d), f"'report.{section}'")
        d = json.loads(json.dumps(good))
        del d["host"]["cpu"]
        fixture_case("missing-cpu", json.dumps(d), "'host.cpu'")
        d = json.loads(json.dumps(good))
        d["host"]["cores"] = "two"
        fixture_case("wrong-type-cores", json.dumps(d), "'host.cores' must be a number")
        d = json.loads(json.dumps(good))
        d["build"]["cuda"] = "yes"
        fixture_case("wrong-type-cuda", json.dumps(d), "'build.cuda' must be true or false")
        d = json.loads(json.dumps(good))
        d["devices"] = {"cpu": 1}
        fixture_case("devices-not-array", json.dumps(d), "must be an array")
        r = run(["doctor", "--fixture", os.path.join(tmp, "missing.json")])
        check("missing fixture file", r.returncode == 1 and "cannot open" in r.stderr, r)

        metrics = os.path.join(tmp, "m.jsonl")
        r = run(["train", "--epochs", "2", "--metrics", metrics])
        check("train plain", r.returncode == 0 and r.stdout.count("\nepoch ") == 2, r)
        lines = open(metrics).read().splitlines()
        check("metrics lines", len(lines) == 2 and all({"epoch", "loss", "accuracy", "samples_per_s"} <= set(json.loads(l)) for l in lines), lines)
        r2 = run(["train", "--epochs", "2"])
        strip = lambda out: [l.split("  ")[:3] for l in out.splitlines() if l.startswith("epoch")]
        check("train deterministic", strip(r.stdout) == strip(r2.stdout), (r.stdout, r2.stdout))
        r = run(["train", "--metrics", os.path.join(tmp, "no", "such", "dir", "m.jsonl"), "--epochs", "1"])
        check("metrics unwritable", r.returncode == 1 and "cannot open" in r.stderr, r)
    with tempfile.TemporaryDirectory() as tmp:
        a, b, c = (os.path.join(tmp, n + ".safetensors") for n in "abc")
        r = run(["train", "--epochs", "4", "--checkpoint", a])
        check("checkpointed run", r.returncode == 0 and os.path.exists(a), r)
        r1 = run(["train", "--epochs", "2", "--checkpoint", b])
        r2 = run(["train", "--epochs", "4", "--resume", b, "--checkpoint", b])
        check("resume runs", r1.returncode == 0 and r2.returncode == 0, (r1, r2))
        check("resume is bit-identical (checkpoint bytes)", open(a, "rb").read() == open(b, "rb").read(), "")
        ep = lambda out: [l.split("  ")[:3] for l in out.splitlines() if l.startswith("epoch")]
        check("resumed epochs print the same losses", ep(r.stdout)[2:] == ep(r2.stdout), (r.stdout, r2.stdout))
        r = run(["train", "--epochs", "4", "--seed", "8", "--resume", b])
        check("resume with another seed is refused", r.returncode == 1 and "different seed" in r.stderr, r)
        r = run(["train", "--resume", os.path.join(tmp, "missing.safetensors")])
        check("resume from a missing file", r.returncode == 1 and "error" in r.stderr, r)
        # Signals: the run finishes its step, saves, and dies by the signal; the checkpoint resumes.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            if os.path.exists(c):
                os.remove(c)
            p = subprocess.Popen([OXMERA, "train", "--epochs", "100000", "--checkpoint", c],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            deadline = time.time() + 60
            while not os.path.exists(c) and time.time() < deadline:
                time.sleep(0.05)
            time.sleep(0.2)
            p.send_signal(sig)
            out, err = p.communicate(timeout=60)
            check(f"dies by {sig.name}", p.returncode == -sig, (p.returncode, err))
            check(f"{sig.name} saved a checkpoint", "checkpoint saved" in out, out[-300:])
            stopped = [l for l in out.splitlines() if l.startswith("epoch")]
            last_epoch = int(stopped[-1].split()[1].split("/")[0]) if stopped else 0
            r = run(["train", "--epochs", str(last_epoch + 1), "--resume", c])
            check(f"{sig.name} checkpoint resumes", r.returncode == 0, r)
        # kill -9 at random moments (often mid-save: a save happens every epoch) leaves a loadable file.
        rng = random.Random(5)
        for i in range(4):
            p = subprocess.Popen([OXMERA, "train", "--epochs", "100000", "--checkpoint", c],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.3 + rng.random() * 0.7)
            p.kill()
            p.wait()
            r = run(["train", "--epochs", "1", "--resume", c])
            check(f"kill -9 round {i}: previous checkpoint loads", r.returncode == 0 and "error" not in r.stderr, r)

    # The character language models (transformer, lstm) on the default text, at a few small epochs.
    # One thread: on a loaded 2-core machine two threads per run make these runs >10x slower.
    LM_ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    lm = ["--steps-per-epoch", "6", "--batch", "8"]
    lm_losses = lambda out: [float(l.split()[3]) for l in out.splitlines() if l.startswith("epoch")]
    with tempfile.TemporaryDirectory() as tmp:
        for model in ("transformer", "lstm"):
            metrics = os.path.join(tmp, model + ".jsonl")
            r = run(["train", "--model", model, "--epochs", "3", "--metrics", metrics] + lm, env=LM_ENV)
            losses = lm_losses(r.stdout)
            check(f"{model} trains", r.returncode == 0 and "nats/char" in r.stdout and "tokens/s" in r.stdout
                  and len(losses) == 3, r)
            check(f"{model} loss falls", len(losses) == 3 and losses[2] < losses[0] - 0.3, losses)
            rows = [json.loads(l) for l in open(metrics)] if os.path.exists(metrics) else []
            check(f"{model} metrics", len(rows) == 3 and all(x["tokens_per_s"] > 0 and 0 <= x["accuracy"] <= 1
                                                             for x in rows), rows)
            a, b = os.path.join(tmp, model + "-a.st"), os.path.join(tmp, model + "-b.st")
            r1 = run(["train", "--model", model, "--epochs", "3", "--checkpoint", a] + lm, env=LM_ENV)
            r2 = run(["train", "--model", model, "--epochs", "1", "--checkpoint", b] + lm, env=LM_ENV)
            r3 = run(["train", "--model", model, "--epochs", "3", "--resume", b, "--checkpoint", b] + lm, env=LM_ENV)
            check(f"{model} resume runs", r1.returncode == r2.returncode == r3.returncode == 0, (r1, r2, r3))
            check(f"{model} resume is bit-identical (checkpoint bytes)",
                  os.path.exists(b) and open(a, "rb").read() == open(b, "rb").read(), "")
            check(f"{model} resumed epochs print the same losses", lm_losses(r1.stdout)[1:] == lm_losses(r3.stdout),
                  (r1.stdout, r3.stdout))
        other = os.path.join(tmp, "other.txt")
        with open(other, "w") as f:
            f.write("the quick brown fox jumps over the lazy dog. " * 40)
        r = run(["train", "--model", "transformer", "--epochs", "3", "--data", other, "--resume",
                 os.path.join(tmp, "transformer-b.st")] + lm, env=LM_ENV)
        check("LM resume on other data is refused", r.returncode == 1 and "different data" in r.stderr, r)
        r = run(["train", "--model", "lstm", "--epochs", "3", "--steps-per-epoch", "7", "--batch", "8", "--resume",
                 os.path.join(tmp, "lstm-b.st")], env=LM_ENV)
        check("LM resume with other --steps-per-epoch is refused",
              r.returncode == 1 and "different steps_per_epoch" in r.stderr, r)
        r = run(["train", "--model", "lstm", "--epochs", "2", "--data", other] + lm, env=LM_ENV)
        check("LM trains on a given --data file", r.returncode == 0 and other in r.stdout, r)
        # A bad --data: a clear typed error, no crash.
        tiny = os.path.join(tmp, "tiny.txt")
        with open(tiny, "w") as f:
            f.write("too short")
        for model in ("transformer", "lstm"):
            for data, needle in ((os.path.join(tmp, "missing.txt"), "cannot read the text file"),
                                 (tmp, "is a folder"), (tiny, "need at least")):
                r = run(["train", "--model", model, "--data", data] + lm, env=LM_ENV)
                check(f"{model} bad --data {os.path.basename(data)}",
                      r.returncode == 1 and needle in r.stderr and "oxmera: error" in r.stderr
                      and "\nepoch" not in r.stdout, r)
        # Ctrl-C mid-run: the step finishes, the checkpoint is saved, the process dies by SIGINT, and it resumes.
        c = os.path.join(tmp, "stop.st")
        p = subprocess.Popen([OXMERA, "train", "--model", "lstm", "--epochs", "100000", "--checkpoint", c] + lm,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=LM_ENV)
        deadline = time.time() + 60
        while not os.path.exists(c) and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.1)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        check("LM dies by SIGINT with a checkpoint", p.returncode == -signal.SIGINT and "checkpoint saved" in out,
              (p.returncode, out[-300:], err))
        done = len(lm_losses(out))
        r = run(["train", "--model", "lstm", "--epochs", str(done + 1), "--resume", c] + lm, env=LM_ENV)
        check("LM SIGINT checkpoint resumes", r.returncode == 0 and len(lm_losses(r.stdout)) >= 1, r)

    r = run(["train", "--epochs", "1", "--device", "cuda"])
    check("cuda unavailable is a clear error", r.returncode in (0, 1) and ("BackendUnavailable" in r.stderr or r.returncode == 0), r)

    # bench research: dtype rules (checked before any device work) and the JSON summary
    r = run(["bench", "research", "--dtype", "f16"])
    check("research --dtype f16 is a usage error", r.returncode == 1 and r.stdout == "" and "dtype" in r.stderr, r)
    r = run(["bench", "research", "--device", "cuda", "--dtype", "f64"])
    check("research f64 on cuda is refused with the reason",
          r.returncode == 1 and "f64" in r.stderr and "CPU only" in r.stderr and "--dtype f32" in r.stderr, r)
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.json")
        r = run(["bench", "research", "--epochs", "1", "--replicas", "2", "--fit", "linear-lag5", "--dtype", "f32",
                 "--out", out])
        ok = r.returncode == 0 and "dtype f32" in r.stdout
        if ok:
            rep = json.load(open(out))
            fit = rep["fits"][0]
            ok = (rep["dtype"] == "f32" and fit["name"] == "linear-lag5" and len(fit["train_loss"]) == 2
                  and all(x == x and abs(x) < 1e6 for x in fit["train_loss"] + fit["metric"]))
        check("research --dtype f32 runs and reports its dtype", ok, r)
        r = run(["bench", "research", "--epochs", "1", "--replicas", "1", "--fit", "mlp-h16", "--out", out])
        check("research default dtype on cpu is f64", r.returncode == 0 and json.load(open(out))["dtype"] == "f64", r)

    print(f"cli: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
