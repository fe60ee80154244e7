#!/usr/bin/python3
"""Parity of oxmera::linalg (values and input gradients) against torch.linalg (Debian python3-torch 1.13).

Usage: /usr/bin/python3 test_linalg_parity.py PATH/TO/linalg_torch_parity_driver [-v]

Runs cholesky, logdet (vs torch.logdet and vs 2*log(diag(cholesky)).sum), det, solve (matrix, vector and
broadcast-batch b), cholesky_solve, inverse, solve_triangular (lower/upper), eigh (eigenvalues; |V| and the
sign-invariant V*V for the eigenvectors), diag, diag_embed and trace, in f64 and f32, on shapes including 1x1,
[3,64,4,4], [3,64,16,16] and empty batches, through the driver (protocol in linalg_driver.cpp) with a random
seed for the backward pass, computes the same with torch in the same dtype and requires
|got - want| <= tol * max|want| per tensor: tol 1e-9 for f64, 1e-4 for f32.

Gradient conventions (oxmera treats an SPD / symmetric input as symmetric and reads one triangle):
- solve and inverse: torch's gradient w.r.t. a (LU-based, -A^-T g x^T) is not symmetric; oxmera's goes
  through cholesky, whose gradient is symmetrised as torch's cholesky's, so it is compared with
  (G + G^T) / 2 of torch's. The symmetric part is the one that matters for a symmetric input.
- cholesky_solve: torch differentiates L as a full matrix; oxmera reads only its lower triangle, so it is
  compared with tril(torch's) (and its upper triangle must be 0).
Error parity: a non-positive-definite input is NotPositiveDefinite naming the batch index (torch.linalg.cholesky
raises too; torch.logdet/det/solve/inv do not, there it is oxmera's contract only); an asymmetric input to
eigh is NotSymmetric (torch does not check); f32 X X^T/n, symmetric up to the last bits, passes eigh.

Prints `linalg parity: N passed, M failed`, exits 1 on any failure and 77 (`linalg parity: skipped ...`) when
torch or numpy cannot be imported. Debian 12: apt-get install -y python3-torch python3-numpy (use
/usr/bin/python3, not a pyenv shim). PARITY_SEED overrides the random seed.
"""
import math
import os
import subprocess
import sys

try:
    import numpy as np
    import torch
except Exception:  # noqa: BLE001 - any import failure means "not available"
    print("linalg parity: skipped (python3-torch or numpy not installed)")
    sys.exit(77)

torch.set_num_threads(1)
SEED = int(os.environ.get("PARITY_SEED", "4343"))
rng = np.random.default_rng(SEED)
TORCH_OF = {"f32": torch.float32, "f64": torch.float64}
TOL = {"f64": 1e-9, "f32": 1e-4}

SQ = [(1, 1), (5, 5), (3, 64, 4, 4), (3, 64, 16, 16), (0, 4, 4), (3, 0, 0)]


def spd(shape):
    """Random SPD X X^T / n + 0.5 I (exactly symmetric)."""
    n = shape[-1]
    x = rng.standard_normal(shape)
    a = x @ np.swapaxes(x, -1, -2) / max(n, 1) + 0.5 * np.eye(n)
    return 0.5 * (a + np.swapaxes(a, -1, -2))


def sym(shape):
    x = rng.standard_normal(shape)
    return 0.5 * (x + np.swapaxes(x, -1, -2))


def lower_factor(shape):
    return np.linalg.cholesky(spd(shape)) if np.prod(shape) > 0 else np.zeros(shape)


def tri(shape):
    """A full random matrix with a dominant diagonal: only one triangle of it is read."""
    n = shape[-1]
    return rng.standard_normal(shape) + 2.0 * np.sqrt(max(n, 1)) * np.eye(n)


def diagonal(t):
    return torch.diagonal(t, dim1=-2, dim2=-1)


def symm(g):
    return 0.5 * (g + np.swapaxes(g, -1, -2))


# op -> (torch reference, per-operand gradient post-processing of torch's gradient or None)
REF = {
    "cholesky": (lambda a: torch.linalg.cholesky(a), None),
    "logdet": (lambda a: torch.logdet(a), None),
    "logdet_chol": (lambda a: 2.0 * torch.log(diagonal(torch.linalg.cholesky(a))).sum(-1), None),
    "det": (lambda a: torch.det(a), None),
    "solve": (lambda a, b: torch.linalg.solve(a, b), [symm, None]),
    "cholesky_solve": (lambda b, L: torch.cholesky_solve(b, L), [None, np.tril]),
    "inverse": (lambda a: torch.linalg.inv(a), [symm]),
    "solve_triangular_lower": (lambda t, b: torch.linalg.solve_triangular(t, b, upper=False), None),
    "solve_triangular_upper": (lambda t, b: torch.linalg.solve_triangular(t, b, upper=True), None),
    "eigh_w": (lambda a: torch.linalg.eigh(a)[0], None),
    "eigh_vabs": (lambda a: torch.linalg.eigh(a)[1].abs(), None),
    "eigh_vsq": (lambda a: torch.linalg.eigh(a)[1] ** 2, None),
    "diag": (lambda a: diagonal(a) if a.dim() >= 2 else torch.diag(a), None),
    "diag_embed": (lambda v: torch.diag_embed(v), None),
    "trace": (lambda a: diagonal(a).sum(-1), None),
}
DRIVER_OP = {"logdet_chol": "logdet"}


def table():
    """(op, [operand arrays]) for one dtype."""
    t = []
    for s in SQ:
        for op in ("cholesky", "logdet", "logdet_chol", "det", "inverse"):
            t.append((op, [spd(s)]))
        for op in ("eigh_w", "eigh_vabs", "eigh_vsq"):
            t.append((op, [sym(s)]))
        t.append(("eigh_w", [spd(s)]))
        t.append(("eigh_vsq", [spd(s)]))
        t.append(("diag", [rng.standard_normal(s)]))
        t.append(("trace", [rng.standard_normal(s)]))
        t.append(("diag_embed", [rng.standard_normal(s[:-1])]))
        n, batch = s[-1], s[:-2]
        t.append(("solve", [spd(s), rng.standard_normal(batch + (n, 3))]))        # matrix b
        t.append(("solve", [spd(s), rng.standard_normal(batch + (n,))]))          # batch of vectors
        t.append(("solve", [spd(s), rng.standard_normal((n,))]))                  # 1-d b, broadcast
        t.append(("solve", [spd(s), rng.standard_normal((n, 2))]))                # unbatched matrix b
        t.append(("cholesky_solve", [rng.standard_normal(batch + (n, 2)), lower_factor(s)]))
        t.append(("cholesky_solve", [rng.standard_normal((n, 3)), lower_factor(s)]))
        for op in ("solve_triangular_lower", "solve_triangular_upper"):
            t.append((op, [tri(s), rng.standard_normal(batch + (n, 2))]))
            t.append((op, [tri(s), rng.standard_normal((n, 3))]))
    # Broadcast-batch b and a (solve's batch dims broadcast both ways).
    t.append(("solve", [spd((3, 64, 4, 4)), rng.standard_normal((64, 4, 3))]))
    t.append(("solve", [spd((64, 16, 16)), rng.standard_normal((3, 64, 16, 2))]))
    t.append(("solve", [spd((3, 1, 4, 4)), rng.standard_normal((1, 5, 4, 2))]))
    t.append(("cholesky_solve", [rng.standard_normal((3, 64, 4, 2)), lower_factor((64, 4, 4))]))
    t.append(("solve_triangular_lower", [tri((64, 16, 16)), rng.standard_normal((3, 64, 16, 2))]))
    t.append(("solve_triangular_upper", [tri((3, 1, 4, 4)), rng.standard_normal((1, 5, 4, 2))]))
    t.append(("diag", [rng.standard_normal((7,))]))  # 1-d input: the diagonal matrix
    t.append(("diag", [rng.standard_normal((3, 4, 5))]))  # non-square: the diagonal of the last two dims
    # Degenerate hand cases.
    t.append(("eigh_w", [np.zeros((2, 4, 4))]))
    t.append(("eigh_w", [np.broadcast_to(np.eye(5), (3, 5, 5)).copy()]))
    t.append(("cholesky", [np.broadcast_to(np.eye(6), (2, 6, 6)).copy()]))
    t.append(("logdet", [np.broadcast_to(2.0 * np.eye(6), (2, 6, 6)).copy()]))
    return t


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parity_common"))
from protocol import encode, parse  # noqa: E402  (shared with the other parity scripts)


def close(got, want, tol):
    """|got - want| <= tol * max|want| elementwise; returns (ok, message, worst error / scale)."""
    want = np.asarray(want, dtype=np.float64).reshape(-1)
    got = np.asarray(got, dtype=np.float64).reshape(-1)
    if got.shape != want.shape:
        return False, "size %s vs %s" % (got.shape, want.shape), math.inf
    if want.size == 0:
        return True, "", 0.0
    scale = max(np.abs(want).max(), 1e-300)
    err = np.abs(got - want)
    if not np.isfinite(got).all() or not np.isfinite(want).all():
        return False, "non-finite (got %d, want %d)" % ((~np.isfinite(got)).sum(), (~np.isfinite(want)).sum()), math.inf
    rel = err.max() / scale
    if rel > tol:
        j = int(np.argmax(err))
        return False, "worst at %d: got %r want %r (|d|/max %.2e)" % (j, got[j], want[j], rel), rel
    return True, "", rel


def shapes_str(arrays):
    return ",".join("x".join(str(d) for d in a.shape) or "scalar" for a in arrays)


def error_cases(dtype):
    """(label, op, arrays, torch_raises or None when torch is not expected to check, kind, message part)."""
    cases = []
    bad = spd((3, 64, 4, 4))
    bad[1, 5] = -np.eye(4)  # flat batch index 69
    for op in ("cholesky", "logdet", "det", "inverse"):
        cases.append((op + " non-PD batch", op, [bad.copy()], "NotPositiveDefinite", "batch index 69"))
    cases.append(("solve non-PD batch", "solve", [bad.copy(), rng.standard_normal((3, 64, 4, 2))],
                  "NotPositiveDefinite", "batch index 69"))
    indef = spd((16, 16))
    indef[7, 7] = -3.0  # indefinite, det may be of either sign
    cases.append(("cholesky indefinite", "cholesky", [indef], "NotPositiveDefinite", "pivot"))
    cases.append(("cholesky zero", "cholesky", [np.zeros((3, 3))], "NotPositiveDefinite", "pivot 0"))
    psd = np.ones((4, 4))  # rank 1: semi-definite
    cases.append(("cholesky rank-1", "cholesky", [psd], "NotPositiveDefinite", "pivot 1"))
    cases.append(("logdet rank-1", "logdet", [psd], "NotPositiveDefinite", "pivot 1"))
    asym = sym((2, 4, 4))
    asym[1, 0, 3] += 0.5
    cases.append(("eigh asymmetric", "eigh_w", [asym], "NotSymmetric", "batch index 1"))
    asym2 = sym((3, 64, 16, 16))
    asym2[2, 10, 3, 9] += 1e-3
    cases.append(("eigh asymmetric 1e-3", "eigh_vsq", [asym2], "NotSymmetric", "a[3][9]"))
    return cases


def main():
    if len(sys.argv) < 2:
        print("usage: test_linalg_parity.py DRIVER [-v]")
        return 2
    driver, verbose = sys.argv[1], "-v" in sys.argv[2:]
    cases, lines = [], []
    for dtype in ("f64", "f32"):
        tdt = TORCH_OF[dtype]
        for op, arrays in table():
            if dtype == "f32":
                arrays = [a.astype(np.float32).astype(np.float64) for a in arrays]
            fn, post = REF[op]
            # oxmera computes eigh in f64 even for f32 inputs; torch's f32 LAPACK eigenvectors are less
            # accurate than that on near-degenerate 16x16 spectra, so the f32 reference for eigh is torch in f64
            # on the same f32-rounded input.
            ref_dt = torch.float64 if (dtype == "f32" and op.startswith("eigh")) else tdt
            ts = [torch.tensor(a, dtype=ref_dt, requires_grad=True) for a in arrays]
            what = "%s %s [%s]" % (op, shapes_str(arrays), dtype)
            try:
                out = fn(*ts)
                seed = rng.standard_normal(tuple(out.shape))
                if out.numel() > 0:
                    out.backward(torch.tensor(seed, dtype=ref_dt))
            except Exception as e:  # noqa: BLE001 - e.g. torch 1.13's solve backward with a 1x1 a and 1-d b
                cases.append(("torch_error", what, dtype, str(e).splitlines()[0], None))
                lines.append(encode(len(lines), DRIVER_OP.get(op, op), dtype, arrays, np.zeros(0)))
                continue
            grads = None
            if out.numel() > 0:
                grads = []
                for j, t in enumerate(ts):
                    g = t.grad.double().numpy() if t.grad is not None else np.zeros(t.shape)
                    if post and post[j] is not None:
                        g = post[j](g)
                    grads.append(g)
            cases.append(("ok", what, dtype, out.detach().double().numpy(), grads))
            lines.append(encode(len(lines), DRIVER_OP.get(op, op), dtype, arrays,
                                seed if out.numel() > 0 else np.zeros(0)))
        # f32 X X^T / n is symmetric only up to the last bits: eigh must accept it.
        x = torch.randn(3, 64, 16, 16, generator=torch.Generator().manual_seed(SEED))
        if dtype == "f32":
            xx = (x.transpose(-2, -1) @ x / 16.0).double().numpy()
            cases.append(("accept", "eigh f32 X^T X/n (asymmetric in the last bits, max |a-a^T| %.1e)"
                          % np.abs(xx - np.swapaxes(xx, -1, -2)).max(), dtype, None, None))
            lines.append(encode(len(lines), "eigh_w", dtype, [xx], np.zeros(0)))
        for label, op, arrays, kind, part in error_cases(dtype):
            if dtype == "f32":
                arrays = [a.astype(np.float32).astype(np.float64) for a in arrays]
            fn, _ = REF[op]
            try:
                fn(*[torch.tensor(a, dtype=tdt) for a in arrays])
                torch_raises = False
            except Exception:  # noqa: BLE001
                torch_raises = True
            cases.append(("bad", "%s [%s]" % (label, dtype), dtype, (torch_raises, kind, part, op), None))
            lines.append(encode(len(lines), op, dtype, arrays, np.zeros(0)))
    res = subprocess.run([driver], input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=280)
    if res.returncode != 0:
        print(res.stderr)
        print("linalg parity: driver failed with exit code %d" % res.returncode)
        return 1
    got = {}
    for line in res.stdout.splitlines():
        cid, status, payload = parse(line)
        got[int(cid)] = (status, payload)
    passed = failed = 0
    worst = {}
    torch_only_checks = []
    for i, (kind, what, dtype, want, grads) in enumerate(cases):
        status, payload = got.get(i, ("MISSING", ""))
        msgs = []
        if kind == "torch_error":
            # torch rejects the input; oxmera may accept it (e.g. an empty case torch does not support).
            if verbose:
                print("info %s: torch raises (%s); oxmera %s" % (what, want, status))
            continue
        if kind == "accept":
            if status != "OK":
                msgs.append("%s %s" % (status, payload))
        elif kind == "bad":
            torch_raises, ekind, part, op = want
            if op == "cholesky" and not torch_raises:
                msgs.append("torch accepts this non-PD input")
            if op != "cholesky" and not torch_raises:
                torch_only_checks.append(what)
            if status != "ERR" or not payload.startswith(ekind) or part not in payload:
                msgs.append("expected %s naming '%s', got %s %s" % (ekind, part, status, payload[:200]))
        elif status != "OK":
            msgs.append("%s %s" % (status, payload[:300]))
        else:
            out, g = payload
            tol = TOL[dtype]
            if tuple(out.shape) != tuple(want.shape):
                msgs.append("shape %s vs torch %s" % (out.shape, want.shape))
            ok, m, r = close(out, want, tol)
            op = what.split()[0]
            worst[(op, dtype, "value")] = max(worst.get((op, dtype, "value"), 0.0), r)
            if not ok:
                msgs.append("value " + m)
            if grads is not None:
                if len(g) != len(grads):
                    msgs.append("no gradients returned")
                for j, (gg, gw) in enumerate(zip(g, grads)):
                    ok, m, r = close(gg, gw, tol)
                    worst[(op, dtype, "grad")] = max(worst.get((op, dtype, "grad"), 0.0), r)
                    if not ok:
                        msgs.append("grad %d %s" % (j, m))
        if msgs:
            failed += 1
            print("FAIL %s: %s" % (what, "; ".join(msgs)))
        else:
            passed += 1
            if verbose:
                print("ok   %s" % what)
    if verbose:
        print("worst |got - want| / max|want| per op:")
        for (op, dtype, part), r in sorted(worst.items()):
            print("  %-24s %s %-5s %.2e" % (op, dtype, part, r))
        for w in torch_only_checks:
            print("note %s: torch does not raise (oxmera's contract only)" % w)
    print("linalg parity: %d passed, %d failed (torch %s, seed %d)" % (passed, failed, torch.__version__, SEED))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
