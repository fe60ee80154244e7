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


def run(args, timeout=120):
    return subprocess.run([OXMERA] + args, capture_output=True, text=True, timeout=timeout)


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
