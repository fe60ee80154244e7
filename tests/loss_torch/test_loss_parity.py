#!/usr/bin/python3
"""Parity of oxmera::nn losses (values and input gradients) against torch.nn.functional.

Usage: /usr/bin/python3 test_loss_parity.py PATH/TO/loss_torch_parity_driver [-v]

Builds a grid of cases with numpy (fixed seed), runs the driver once on all of them (protocol in
loss_driver.cpp), computes the same with torch and compares: |got - want| <= rtol * (|want| + max|want|)
per tensor, rtol 1e-5 for f32 and 1e-10 for f64. Cases where oxmera deliberately differs (a typed error
where torch returns NaN or raises) expect that error. Prints `loss parity: N passed, M failed`, exits 1 on
any failure and 77 (`loss parity: skipped ...`) when torch or numpy cannot be imported.
Debian 12: apt-get install -y python3-torch python3-numpy (use /usr/bin/python3, not a pyenv shim).
"""
import math
import os
import subprocess
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except Exception:  # noqa: BLE001 - any import failure means "not available"
    print("loss parity: skipped (python3-torch or numpy not installed)")
    sys.exit(77)

torch.set_num_threads(1)
rng = np.random.default_rng(int(os.environ.get("PARITY_SEED", "4242")))
TORCH_OF = {"f32": torch.float32, "f64": torch.float64}
RTOL = {"f32": 1e-5, "f64": 1e-10}


class Case:
    def __init__(self, loss, dtype, tensors, reduction="mean", ignore_index=-100, label_smoothing=0.0,
                 error=None, note=""):
        self.loss, self.dtype, self.tensors = loss, dtype, tensors  # tensors: list of (name, ndarray, rg)
        self.reduction, self.ignore_index, self.label_smoothing = reduction, ignore_index, label_smoothing
        self.error, self.note = error, note  # error: expected oxmera ErrorKind name
        self.seed = None

    def describe(self):
        shp = " ".join("%s%s%s" % (n, list(a.shape), "*" if rg else "") for n, a, rg in self.tensors)
        s = "%s[%s] %s red=%s" % (self.loss, self.dtype, shp, self.reduction)
        if self.ignore_index != -100:
            s += " ignore=%d" % self.ignore_index
        if self.label_smoothing:
            s += " ls=%g" % self.label_smoothing
        return s + (" (%s)" % self.note if self.note else "")


def fmt(v):
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return repr(v)


def encode(i, c):
    parts = [str(i), c.loss, c.reduction, str(c.ignore_index), repr(float(c.label_smoothing)), str(len(c.tensors))]
    for name, a, rg in c.tensors:
        dt = "i64" if a.dtype == np.int64 else c.dtype
        parts += [name, dt, "1" if rg else "0", str(a.ndim)] + [str(d) for d in a.shape]
        parts += [fmt(v) for v in a.reshape(-1)]
    seed = c.seed if c.seed is not None else np.zeros(0)
    parts.append(str(seed.size))
    parts += [fmt(v) for v in seed.reshape(-1)]
    return " ".join(parts)


def torch_eval(c):
    """Returns (out ndarray, {name: grad ndarray}) computed by torch in the case's dtype."""
    ts = {}
    for name, a, rg in c.tensors:
        t = torch.tensor(a, dtype=torch.int64 if a.dtype == np.int64 else TORCH_OF[c.dtype])
        if rg:
            t.requires_grad_(True)
        ts[name] = t
    x, t, w, pw = ts["input"], ts["target"], ts.get("weight"), ts.get("pos_weight")
    if c.loss == "mse":
        out = F.mse_loss(x, t, reduction=c.reduction)
    elif c.loss == "nll":
        out = F.nll_loss(x, t, weight=w, reduction=c.reduction, ignore_index=c.ignore_index)
    elif c.loss == "ce":
        out = F.cross_entropy(x, t, weight=w, reduction=c.reduction, ignore_index=c.ignore_index,
                              label_smoothing=c.label_smoothing)
    else:
        out = F.binary_cross_entropy_with_logits(x, t, weight=w, pos_weight=pw, reduction=c.reduction)
    grads = {}
    if c.seed is not None:
        out.backward(torch.tensor(c.seed, dtype=out.dtype).reshape(out.shape))
        for name, a, rg in c.tensors:
            if rg:
                g = ts[name].grad
                grads[name] = np.zeros(a.shape) if g is None else g.detach().double().numpy()
    return out.detach().double().numpy().reshape(-1), grads


def close(got, want, rtol):
    got, want = np.asarray(got, dtype=np.float64).reshape(-1), np.asarray(want, dtype=np.float64).reshape(-1)
    if got.shape != want.shape:
        return False, "size %d vs %d" % (got.size, want.size)
    if want.size == 0:
        return True, ""
    fin = np.isfinite(want)
    if not np.array_equal(np.isnan(got), np.isnan(want)) or not np.array_equal(got[~fin & ~np.isnan(want)],
                                                                               want[~fin & ~np.isnan(want)]):
        return False, "non-finite mismatch"
    scale = np.max(np.abs(want[fin])) if fin.any() else 0.0
    err = np.abs(got[fin] - want[fin])
    tol = rtol * (np.abs(want[fin]) + scale)
    if np.all(err <= tol):
        return True, ""
    k = int(np.argmax(err - tol))
    return False, "worst at %d: got %r want %r (err %.3g, tol %.3g)" % (k, got[fin][k], want[fin][k], err[k], tol[k])


# ------------------------------------------------------------------------------------------------ the grid
def f(shape, scale=1.0):
    return rng.standard_normal(shape) * scale


def classes(shape, C, ignore=None, frac=0.0):
    t = rng.integers(0, C, size=shape).astype(np.int64)
    if ignore is not None and frac > 0:
        t[rng.random(shape) < frac] = ignore
    return t


def probs(shape, axis):
    p = rng.random(shape) + 0.05
    return p / p.sum(axis=axis, keepdims=True)


cases = []
REDS = ["mean", "sum", "none"]
for dt in ["f32", "f64"]:
    # mse
    for shape in [(7,), (3, 4), (2, 3, 5)]:
        for red in REDS:
            cases.append(Case("mse", dt, [("input", f(shape), True), ("target", f(shape), True)], red))
    # nll and ce on class targets
    for shape in [(6, 4), (3, 5, 2, 3), (5,)]:
        C = shape[0] if len(shape) == 1 else shape[1]
        tshape = () if len(shape) == 1 else (shape[0],) + shape[2:]
        for red in REDS:
            for weighted in [False, True]:
                for ign, frac in [(-100, 0.0), (-100, 0.3), (1, 0.0)]:
                    if len(shape) == 1 and frac > 0:
                        continue
                    t = classes(tshape, C, -100, frac)
                    if len(shape) > 1 and frac > 0:
                        t.reshape(-1)[0] = 2  # at least one target counts
                    w = [("weight", rng.random(C) + 0.2, False)] if weighted else []
                    err = "EmptyReduction" if red == "mean" and np.all(t == ign) else None  # torch: NaN
                    lp = torch.log_softmax(torch.tensor(f(shape)), dim=0 if len(shape) == 1 else 1).numpy()
                    cases.append(Case("nll", dt, [("input", lp, True), ("target", t, False)] + w, red, ign, error=err))
                    for ls in [0.0, 0.1, 0.35]:
                        cases.append(Case("ce", dt, [("input", f(shape, 2.0), True), ("target", t, False)] + w,
                                          red, ign, ls, error=err))
    # ce with probability targets
    for shape in [(6, 4), (3, 5, 2, 3), (5,)]:
        ax = 0 if len(shape) == 1 else 1
        C = shape[ax]
        for red in REDS:
            for weighted in [False, True]:
                for ls in [0.0, 0.2]:
                    w = [("weight", rng.random(C) + 0.2, False)] if weighted else []
                    cases.append(Case("ce", dt, [("input", f(shape), True), ("target", probs(shape, ax), True)] + w,
                                      red, -100, ls, note="probability targets"))
    # extreme logits
    for scale in [50.0, 1000.0]:
        x = f((8, 5), scale)
        x[0] = [1000.0, -1000.0, 0.0, 1000.0, -1000.0]
        t = classes((8,), 5)
        for red in REDS:
            for ls in [0.0, 0.2]:
                cases.append(Case("ce", dt, [("input", x, True), ("target", t, False),
                                             ("weight", rng.random(5) + 0.1, False)], red, -100, ls,
                                  note="extreme logits"))
    # bce with logits
    for shape in [(9,), (4, 5), (2, 3, 4)]:
        for red in REDS:
            for wmode in ["none", "full", "last", "col"]:
                for pos in [False, True]:
                    tens = [("input", f(shape, 3.0), True), ("target", rng.random(shape), True)]
                    if wmode == "full":
                        tens.append(("weight", rng.random(shape) + 0.1, False))
                    elif wmode == "last":
                        tens.append(("weight", rng.random(shape[-1:]) + 0.1, False))
                    elif wmode == "col" and len(shape) > 1:
                        tens.append(("weight", rng.random(shape[:-1] + (1,)) + 0.1, False))
                    if pos:
                        tens.append(("pos_weight", rng.random(shape[-1:]) * 3 + 0.1, False))
                    cases.append(Case("bce", dt, tens, red))
    x = np.array([1000.0, -1000.0, 0.0, 30.0, -30.0, 1000.0, -1000.0, 80.0])
    tt = np.array([0.0, 1.0, 0.5, 1.0, 0.0, 1.0, 0.0, 0.3])
    for red in REDS:
        for pos in [False, True]:
            tens = [("input", x, True), ("target", tt, True)]
            if pos:
                tens.append(("pos_weight", np.full(8, 2.5), False))
            cases.append(Case("bce", dt, tens, red, note="|x| up to 1000"))
    # sums over nothing agree with torch (0); mean over nothing is a typed error where torch says NaN
    cases.append(Case("ce", dt, [("input", f((0, 4)), True), ("target", classes((0,), 4), False)], "sum"))
    cases.append(Case("ce", dt, [("input", f((0, 4)), True), ("target", classes((0,), 4), False)], "none"))
    cases.append(Case("ce", dt, [("input", f((0, 4)), True), ("target", classes((0,), 4), False)], "mean",
                      error="EmptyReduction", note="torch: NaN"))
    cases.append(Case("nll", dt, [("input", f((3, 4)), True), ("target", np.full(3, -100, np.int64), False)],
                      "mean", error="EmptyReduction", note="all ignored; torch: NaN"))
    cases.append(Case("nll", dt, [("input", f((3, 4)), True), ("target", np.full(3, -100, np.int64), False)],
                      "sum", note="all ignored"))
    cases.append(Case("mse", dt, [("input", f((0, 3)), True), ("target", f((0, 3)), False)], "mean",
                      error="EmptyReduction", note="torch: NaN"))
    cases.append(Case("bce", dt, [("input", f((0,)), True), ("target", f((0,)), False)], "sum"))
    cases.append(Case("ce", dt, [("input", f((3, 4)), True), ("target", np.array([0, 4, 1]), False)], "mean",
                      error="IndexOutOfBounds", note="torch raises"))
    cases.append(Case("nll", dt, [("input", f((3, 4)), True), ("target", np.array([0, -1, 1]), False)], "sum",
                      error="IndexOutOfBounds", note="torch raises"))


def main():
    if len(sys.argv) < 2:
        print("usage: test_loss_parity.py PATH/TO/loss_torch_parity_driver [-v]")
        return 2
    verbose = "-v" in sys.argv[2:]
    lines = []
    for i, c in enumerate(cases):
        if c.error is None:
            out, _ = torch_eval(Case(c.loss, c.dtype, [(n, a, False) for n, a, _ in c.tensors], c.reduction,
                                     c.ignore_index, c.label_smoothing))
            c.seed = rng.standard_normal(out.size) if any(rg for _, _, rg in c.tensors) and out.size else None
            if c.seed is not None and c.reduction != "none":
                c.seed = c.seed.reshape(())
        lines.append(encode(i, c))
    proc = subprocess.run([sys.argv[1]], input="\n".join(lines) + "\n", capture_output=True, text=True)
    if proc.returncode != 0:
        print("loss parity: driver failed with %d: %s" % (proc.returncode, proc.stderr[-2000:]))
        return 1
    results = {}
    for line in proc.stdout.splitlines():
        tok = line.split()
        results[int(tok[0])] = tok[1:]
    passed = failed = 0
    for i, c in enumerate(cases):
        tok = results.get(i)
        ok, why = True, ""
        if tok is None:
            ok, why = False, "no output"
        elif c.error is not None:
            ok = tok[0] == "ERR" and tok[1] == c.error
            why = "" if ok else "expected %s, got %s" % (c.error, " ".join(tok)[:300])
        elif tok[0] != "OK":
            ok, why = False, " ".join(tok)[:300]
        else:
            want, wgrads = torch_eval(c)
            n = int(tok[1])
            got = [float(v) for v in tok[2:2 + n]]
            rtol = RTOL[c.dtype]
            if c.dtype == "f32" and c.loss == "ce":
                # softmax of f32 logits is conditioned by max|x|: x - max(x) rounds by ulp(max|x|) in any
                # implementation, so allow a few of those on top of 1e-5 (only matters for |x| >> 1).
                rtol += 4 * 2.0 ** -24 * float(np.max(np.abs(c.tensors[0][1]), initial=0.0))
            ok, why = close(got, want, rtol)
            why = "value: " + why
            p = 2 + n
            if ok and c.seed is not None:
                assert tok[p] == "G"
                k = int(tok[p + 1])
                p += 2
                ggot = {}
                for _ in range(k):
                    name, m = tok[p], int(tok[p + 1])
                    ggot[name] = [float(v) for v in tok[p + 2:p + 2 + m]]
                    p += 2 + m
                for name, g in wgrads.items():
                    gok, gwhy = close(ggot.get(name, []), g, rtol)
                    if not gok:
                        ok, why = False, "grad %s: %s" % (name, gwhy)
                        break
        if ok:
            passed += 1
            if verbose:
                print("ok   #%d %s" % (i, c.describe()))
        else:
            failed += 1
            print("FAIL #%d %s: %s" % (i, c.describe(), why))
    print("loss parity: %d passed, %d failed (torch %s)" % (passed, failed, torch.__version__))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
