#!/usr/bin/python3
"""Parity of oxmera's higher-order gradients against torch.autograd.grad(..., create_graph=True) (Debian
python3-torch 1.13).

Usage: /usr/bin/python3 test_higher_order_parity.py PATH/TO/higher_order_torch_parity_driver [-v]

For each case the driver (protocol in higher_order_driver.cpp) computes out = f(x), the first derivative
g = grad(out, x, u, create_graph=True) and the Hessian-vector product hv = grad(sum_i <g_i, v_i>, x) for a random
output seed u and random directions v; this script computes the same with torch in the same dtype and requires
|got - want| <= tol * max(max|want|, 1e-3) per tensor: tol 1e-9 for f64, 2e-4 for f32. Cases:
- logdet of SPD matrices (single and batched) and cholesky, eigh's eigenvalues;
- softmax and log_softmax along each dim;
- cross_entropy w.r.t. the logits, with label_smoothing and ignore_index, reductions mean / sum / none, [N, C]
  logits (oxmera's fused kernel) and [C]; with a class weight (oxmera's composite path; torch does not
  differentiate the weight, so neither side does here).

Gradient conventions for matrices read as symmetric (oxmera reads one triangle of an SPD / symmetric input and
symmetrises its gradient, as torch's cholesky does): logdet, cholesky and eigh are compared on the symmetric
part (G + G^T) / 2 of both sides, which is what a symmetric input's perturbations see.

Prints `higher-order parity: N passed, M failed`, exits 1 on any failure and 77 (`higher-order parity: skipped
...`) when torch or numpy cannot be imported. PARITY_SEED overrides the random seed.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parity_common"))

try:
    import numpy as np
    import torch
except Exception:  # noqa: BLE001 - any import failure means "not available"
    print("higher-order parity: skipped (python3-torch or numpy not installed)")
    sys.exit(77)

from protocol import fmt  # noqa: E402

torch.set_num_threads(1)
SEED = int(os.environ.get("PARITY_SEED", "1414"))
rng = np.random.default_rng(SEED)
TORCH_OF = {"f32": torch.float32, "f64": torch.float64}
TOL = {"f64": 1e-9, "f32": 2e-4}


def spd(shape):
    n = shape[-1]
    x = rng.standard_normal(shape)
    a = x @ np.swapaxes(x, -1, -2) / n + 0.5 * np.eye(n)
    return 0.5 * (a + np.swapaxes(a, -1, -2))


def sym(shape):
    x = rng.standard_normal(shape)
    return 0.5 * (x + np.swapaxes(x, -1, -2))


def symm(g):
    return 0.5 * (g + np.swapaxes(g, -1, -2))


def ce_ref(op):
    _, red, ls, ig, weighted = op.split("_")

    def f(x, extra):
        weight = extra[1] if weighted == "1" else None
        target = extra[0].long()
        return torch.nn.functional.cross_entropy(x, target, weight=weight, reduction=red, label_smoothing=float(ls),
                                                 ignore_index=int(ig))
    return f


def ref(op):
    """op -> (torch function of (diff..., extra=[...]), whether matrices are compared on their symmetric part)"""
    if op == "logdet":
        return (lambda a, extra: torch.logdet(a)), True
    if op == "cholesky":
        return (lambda a, extra: torch.linalg.cholesky(a)), True
    if op == "eigh_w":
        return (lambda a, extra: torch.linalg.eigvalsh(a)), True
    if op.startswith("softmax_"):
        d = int(op.split("_")[1])
        return (lambda x, extra: torch.softmax(x, d)), False
    if op.startswith("log_softmax_"):
        d = int(op.split("_")[2])
        return (lambda x, extra: torch.log_softmax(x, d)), False
    if op.startswith("ce_"):
        return ce_ref(op), False
    raise ValueError(op)


def table():
    """(op, diff arrays, extra arrays) for one dtype."""
    t = []
    for s in [(3, 3), (2, 4, 4), (5, 5)]:
        t.append(("logdet", [spd(s)], []))
        t.append(("cholesky", [spd(s)], []))
        t.append(("eigh_w", [sym(s)], []))
    for s in [(4, 5), (2, 3, 4)]:
        for d in range(len(s)):
            t.append((f"softmax_{d}", [rng.standard_normal(s) * 2], []))
            t.append((f"log_softmax_{d}", [rng.standard_normal(s) * 2], []))
    target = np.array([2.0, 0.0, 4.0, 2.0, 1.0, 3.0])
    for red in ("mean", "sum", "none"):
        for ls in ("0", "0.1", "0.3"):
            for ig in ("-100", "2"):
                for weighted in ("0", "1"):
                    extra = [target] + ([rng.uniform(0.5, 1.5, 5)] if weighted == "1" else [])
                    t.append((f"ce_{red}_{ls}_{ig}_{weighted}", [rng.standard_normal((6, 5)) * 2], extra))
    t.append(("ce_mean_0.2_-100_0", [rng.standard_normal(5)], [np.array(3.0)]))  # [C] logits
    t.append(("ce_sum_0.2_1_0", [rng.standard_normal((6, 5))], [np.array([1.0, 1.0, 0.0, 4.0, 1.0, 2.0])]))
    return t


def encode_tensor(a):
    a = np.asarray(a, dtype=np.float64)
    return [str(a.ndim)] + [str(d) for d in a.shape] + [fmt(v) for v in a.reshape(-1)]


def torch_side(op, dtype, diff, extra, u, vs):
    f, _ = ref(op)
    xs = [torch.tensor(a, dtype=TORCH_OF[dtype], requires_grad=True) for a in diff]
    ex = [torch.tensor(a, dtype=TORCH_OF[dtype]) for a in extra]
    out = f(*xs, extra=ex)
    ut = torch.tensor(u, dtype=TORCH_OF[dtype]).reshape(out.shape)
    g = torch.autograd.grad(out, xs, ut, create_graph=True)
    gv = sum((gi * torch.tensor(v, dtype=TORCH_OF[dtype])).sum() for gi, v in zip(g, vs))
    hv = torch.autograd.grad(gv, xs, allow_unused=True)
    hv = [h if h is not None else torch.zeros_like(x) for h, x in zip(hv, xs)]
    return (out.detach().double().numpy(), [t.detach().double().numpy() for t in g],
            [t.detach().double().numpy() for t in hv])


def parse(tok):
    p = 0

    def vals():
        nonlocal p
        n = int(tok[p]); p += 1
        v = np.array([float(x) for x in tok[p:p + n]]); p += n
        return v

    out = vals()
    lists = []
    for tag in ("G", "H"):
        assert tok[p] == tag, tok[p]
        p += 1
        k = int(tok[p]); p += 1
        lists.append([vals() for _ in range(k)])
    return out, lists[0], lists[1]


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    driver = sys.argv[1]
    verbose = "-v" in sys.argv[2:]
    cases = []
    lines = []
    for dtype in ("f64", "f32"):
        for op, diff, extra in table():
            with torch.no_grad():
                f, _ = ref(op)
                out_shape = f(*[torch.tensor(a) for a in diff], extra=[torch.tensor(a) for a in extra]).shape
            u = rng.standard_normal(tuple(out_shape))
            vs = [rng.standard_normal(a.shape) for a in diff]
            i = len(cases)
            cases.append((op, dtype, diff, extra, u, vs))
            parts = [str(i), op, dtype, str(len(diff))]
            for a in diff:
                parts += encode_tensor(a)
            parts.append(str(len(extra)))
            for a in extra:
                parts += encode_tensor(a)
            parts += encode_tensor(u)
            for v in vs:
                parts += encode_tensor(v)
            lines.append(" ".join(parts))
    res = subprocess.run([driver], input="\n".join(lines) + "\n", capture_output=True, text=True, check=False)
    if res.returncode != 0:
        print(f"driver failed (exit {res.returncode}): {res.stderr[-2000:]}")
        return 1
    got = {}
    for line in res.stdout.splitlines():
        tok = line.split()
        got[int(tok[0])] = tok[1:]
    passed = failed = 0
    for i, (op, dtype, diff, extra, u, vs) in enumerate(cases):
        tag = f"case {i} {op} {dtype} {[a.shape for a in diff]}"
        tok = got.get(i)
        if tok is None or tok[0] != "OK":
            print(f"FAIL {tag}: driver said {' '.join(tok) if tok else 'nothing'}")
            failed += 1
            continue
        out, g, hv = parse(tok[1:])
        wout, wg, whv = torch_side(op, dtype, diff, extra, u, vs)
        _, symmetric = ref(op)
        tol = TOL[dtype]
        ok = True
        pairs = [("out", out, wout)]
        for k in range(len(diff)):
            shape = diff[k].shape
            gk, hk, wgk, whk = g[k].reshape(shape), hv[k].reshape(shape), wg[k], whv[k]
            if symmetric:
                gk, hk, wgk, whk = symm(gk), symm(hk), symm(wgk), symm(whk)
            pairs += [(f"grad {k}", gk, wgk), (f"hvp {k}", hk, whk)]
        for what, a, b in pairs:
            a = np.asarray(a).reshape(-1)
            b = np.asarray(b).reshape(-1)
            scale = max(float(np.max(np.abs(b))) if b.size else 0.0, 1e-3)
            err = float(np.max(np.abs(a - b))) if b.size else 0.0
            if a.shape != b.shape or not err <= tol * scale:
                print(f"FAIL {tag} {what}: max err {err:.3e} (scale {scale:.3e}, tol {tol})")
                ok = False
            elif verbose:
                print(f"ok   {tag} {what}: max err {err:.3e}")
        passed += ok
        failed += not ok
    print(f"higher-order parity: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
