#!/usr/bin/env python3
"""Black-box tests of the `oxmera` command: exit codes, streams, the 80-column rule, doctor fixtures
against golden files, malformed fixtures, and the plain training mode.

Usage: test_cli.py PATH/TO/oxmera [--bless]   (--bless rewrites the golden files)
"""
import json
import os
import subprocess
import sys
import tempfile

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
    r = run(["train", "--epochs", "1", "--device", "cuda"])
    check("cuda unavailable is a clear error", r.returncode in (0, 1) and ("BackendUnavailable" in r.stderr or r.returncode == 0), r)

    print(f"cli: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
