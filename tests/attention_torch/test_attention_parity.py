#!/usr/bin/python3
"""Parity of nn::functional::scaled_dot_product_attention against torch 1.13 (which has no
F.scaled_dot_product_attention: the explicit softmax(q k^T / sqrt(E) + mask) v), values and gradients.

Usage: /usr/bin/python3 test_attention_parity.py PATH/TO/attention_torch_parity_driver [-v]
Tolerance |got - want| <= tol * (1 + max|want|), tol 1e-10 (f64) / 1e-5 (f32). Exits 1 on any failure, 77 without torch.
"""
import os
import subprocess
import sys

try:
    import numpy as np
    import torch
except Exception:  # noqa: BLE001
    print("attention parity: skipped (python3-torch or numpy not installed)")
    sys.exit(77)

torch.set_num_threads(1)
rng = np.random.default_rng(int(os.environ.get("PARITY_SEED", "1515")))
TORCH_OF = {"f32": torch.float32, "f64": torch.float64}
# (op, batch dims, L, S, E, Ev)
TABLE = [("sdpa", (2, 3), 5, 7, 4, 6), ("sdpa", (2,), 70, 150, 8, 5), ("causal", (2, 2), 70, 70, 8, 8),
         ("causal", (3,), 9, 20, 4, 3), ("fmask", (2, 2), 33, 65, 4, 3), ("bmask", (2, 2), 9, 70, 4, 4)]


def ref(op, ts):
    q, k, v = ts[:3]
    s = q @ k.transpose(-2, -1) / (q.shape[-1] ** 0.5)
    L, S = s.shape[-2], s.shape[-1]
    if op == "causal":
        s = s.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), float("-inf"))
    if op == "fmask":
        s = s + ts[3]
    if op == "bmask":
        s = s.masked_fill(ts[3].detach() < 0.5, float("-inf"))
    return torch.softmax(s, -1) @ v


def fmt(a):
    a = np.asarray(a, dtype=np.float64)
    return " ".join([str(a.ndim)] + [str(d) for d in a.shape] + [repr(float(x)) for x in a.ravel()])


def main():
    driver, verbose = sys.argv[1], "-v" in sys.argv[2:]
    cases, lines = [], []
    for dt in ("f32", "f64"):
        for i, (op, bd, L, S, E, Ev) in enumerate(TABLE):
            arrs = [rng.standard_normal(bd + (L, E)), rng.standard_normal(bd + (S, E)), rng.standard_normal(bd + (S, Ev))]
            if op == "fmask":
                arrs.append(rng.standard_normal((L, S)))
            if op == "bmask":
                m = (rng.random(bd[:1] + (1,) * (len(bd) - 1) + (1, S)) > 0.3).astype(np.float64)
                m[..., 0] = 1.0
                arrs.append(m)
            seed = rng.standard_normal(bd + (L, Ev))
            cid = f"{dt}.{i}.{op}"
            cases.append((cid, dt, op, arrs, seed))
            lines.append(" ".join([cid, op, dt, str(len(arrs))] + [fmt(a) for a in arrs] +
                                  [str(seed.size)] + [repr(float(x)) for x in seed.ravel()]))
    out = subprocess.run([driver], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True).stdout
    got = {ln.split()[0]: ln.split()[1:] for ln in out.splitlines() if ln.strip()}
    passed = failed = 0
    for cid, dt, op, arrs, seed in cases:
        tol = 1e-10 if dt == "f64" else 1e-5
        ts = [torch.tensor(a, dtype=TORCH_OF[dt], requires_grad=True) for a in arrs]
        y = ref(op, ts)
        grads = torch.autograd.grad(y, ts, torch.tensor(seed, dtype=TORCH_OF[dt]), allow_unused=True)
        want = [y.detach().double().numpy().ravel()]
        nin = 3 if op == "bmask" else len(ts)
        want += [g.double().numpy().ravel() for g in grads[:nin]]
        g = got.get(cid)
        ok = g is not None and g[0] == "OK"
        msg = "" if ok else " ".join(g or ["missing"])
        if ok:
            r = int(g[1])
            pos = 2 + r
            vals = []
            n = int(g[pos]); vals.append(np.array(g[pos + 1:pos + 1 + n], dtype=np.float64)); pos += 1 + n
            assert g[pos] == "G"
            k = int(g[pos + 1]); pos += 2
            for _ in range(k):
                n = int(g[pos]); vals.append(np.array(g[pos + 1:pos + 1 + n], dtype=np.float64)); pos += 1 + n
            for j, w in enumerate(want):
                err = np.max(np.abs(vals[j] - w)) if w.size else 0.0
                if not err <= tol * (1 + np.max(np.abs(w))):
                    ok, msg = False, f"tensor {j}: max err {err:.3g}"
        passed += ok
        failed += not ok
        if verbose or not ok:
            print(("ok   " if ok else "FAIL ") + cid + (" " + msg if msg else ""))
    print(f"attention parity: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
