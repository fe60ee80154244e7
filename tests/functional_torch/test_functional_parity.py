#!/usr/bin/python3
"""autograd::functional and higher-order gradients of oxmera against torch 1.13 (Debian python3-torch), in f64.

Usage: /usr/bin/python3 test_functional_parity.py PATH/TO/functional_torch_parity_driver [-v]

Sends random parameters and data (protocol in functional_driver.cpp) and compares, with a 2-4-4-2 tanh MLP:
torch.autograd.functional.vjp / jvp / jacobian of its logits w.r.t. all six parameters, hvp / vhp / hessian of an
mse loss and of a log_softmax + gather NLL loss, a third derivative (the gradient of <w, H v> through
hvp(create_graph=True)); a WGAN-GP critic loss (gradient penalty with create_graph, backpropagated into the
critic's weights) and the plain penalty ||grad_x D(x)||^2; and a MAML meta-gradient (theta' = theta - 0.1 grad L,
outer loss at theta'). Each tensor must satisfy |got - want| <= 1e-10 * max(1, max|want|).
Prints `functional parity: N passed, M failed`, exits 1 on any failure, 77 when torch or numpy is missing.
PARITY_SEED overrides the random seed.
"""
import os
import subprocess
import sys

try:
    import numpy as np
    import torch
    from torch.autograd import functional as F
except Exception:  # noqa: BLE001 - any import failure means "not available"
    print("functional parity: skipped (python3-torch or numpy not installed)")
    sys.exit(77)

torch.set_num_threads(1)
SEED = int(os.environ.get("PARITY_SEED", "1414"))
rng = np.random.default_rng(SEED)
TOL = 1e-10
PN = ["W1", "b1", "W2", "b2", "W3", "b3"]
SHAPES = {"W1": (2, 4), "b1": (4,), "W2": (4, 4), "b2": (4,), "W3": (4, 2), "b3": (2,)}


def t(a):
    return torch.tensor(np.asarray(a, dtype=np.float64))


def mlp(p, x):
    h = x
    for i in range(0, len(p), 2):
        h = h @ p[i] + p[i + 1]
        if i + 2 < len(p):
            h = torch.tanh(h)
    return h


def main():
    driver = sys.argv[1]
    verbose = "-v" in sys.argv[2:]
    inp = {}
    for n, s in SHAPES.items():
        inp[n] = rng.standard_normal(s) * 0.8
        inp["v." + n] = rng.standard_normal(s)
        inp["w." + n] = rng.standard_normal(s)
    inp["X"] = rng.standard_normal((6, 2))
    inp["Y"] = rng.standard_normal((6, 2))
    inp["labels"] = rng.integers(0, 2, size=(6,)).astype(np.float64)
    inp["vout"] = rng.standard_normal((6, 2))
    for n, s in {"C1": (2, 5), "c1": (5,), "C2": (5, 1), "c2": (1,)}.items():
        inp[n] = rng.standard_normal(s) * 0.8
    inp["real"] = rng.standard_normal((7, 2))
    inp["fake"] = rng.standard_normal((7, 2)) + 1.0
    inp["eps"] = rng.uniform(size=(7, 1))
    for n in ("Xs", "Ys", "Xq", "Yq"):
        inp[n] = rng.standard_normal((5, 2))
    lines = []
    for n, a in inp.items():
        a = np.asarray(a, dtype=np.float64)
        lines.append(" ".join([n, str(a.ndim)] + [str(d) for d in a.shape] + [repr(float(x)) for x in a.ravel()]))
    proc = subprocess.run([driver], input="\n".join(lines) + "\n", capture_output=True, text=True, check=False)
    got = {}
    for line in proc.stdout.splitlines():
        f = line.split()
        if f[0] == "ERROR" or (len(f) > 1 and f[1] == "ERROR"):
            print("FAIL driver:", line)
            sys.exit(1)
        rank = int(f[1])
        shape = tuple(int(d) for d in f[2:2 + rank])
        n = int(f[2 + rank])
        got[f[0]] = np.array([float(x) for x in f[3 + rank:3 + rank + n]]).reshape(shape)
    if proc.returncode != 0:
        print("FAIL driver exit", proc.returncode, proc.stderr[-2000:])
        sys.exit(1)

    T = {n: t(a) for n, a in inp.items()}
    params = tuple(T[n] for n in PN)
    vs = tuple(T["v." + n] for n in PN)
    ws = tuple(T["w." + n] for n in PN)
    X, Y, labels = T["X"], T["Y"], T["labels"].long()

    def logits(*p):
        return mlp(p, X)

    def loss_mse(*p):
        return ((mlp(p, X) - Y) ** 2).mean()

    def loss_nll(*p):
        return -torch.log_softmax(mlp(p, X), 1).gather(1, labels.unsqueeze(1)).mean()

    want = {}

    def put_all(name, ts):
        for i, x in enumerate(ts):
            want[f"{name}.{i}"] = x

    o, vj = F.vjp(logits, params, T["vout"])
    want["vjp.out"] = o
    put_all("vjp", vj)
    o, jv = F.jvp(logits, params, vs)
    want["jvp.out"] = o
    want["jvp"] = jv
    put_all("jac", F.jacobian(logits, params))
    for name, loss in (("mse", loss_mse), ("nll", loss_nll)):
        o, hv = F.hvp(loss, params, vs)
        want[name + ".hvp.out"] = o
        put_all(name + ".hvp", hv)
        put_all(name + ".vhp", F.vhp(loss, params, vs)[1])
        for i, row in enumerate(F.hessian(loss, params)):
            put_all(f"{name}.hess.{i}", row)
    p = tuple(x.clone().requires_grad_(True) for x in params)
    hv = F.hvp(loss_mse, p, vs, create_graph=True)[1]
    s = sum((h * w).sum() for h, w in zip(hv, ws))
    put_all("third", torch.autograd.grad(s, p))

    c = [T[n].clone().requires_grad_(True) for n in ("C1", "c1", "C2", "c2")]
    real, fake, eps = T["real"], T["fake"], T["eps"]
    xhat = (eps * real + (1.0 - eps) * fake).requires_grad_(True)
    gx = torch.autograd.grad(mlp(c, xhat).sum(), xhat, create_graph=True)[0]
    gp = ((gx.norm(2, dim=1) - 1.0) ** 2).mean()
    loss = mlp(c, fake).mean() - mlp(c, real).mean() + 10.0 * gp
    loss.backward()
    want["wgan.loss"] = loss.detach()
    put_all("wgan.grad", [x.grad for x in c])
    for x in c:
        x.grad = None
    x2 = real.clone().requires_grad_(True)
    g2 = torch.autograd.grad(mlp(c, x2).sum(), x2, create_graph=True)[0]
    (g2 ** 2).sum().backward()
    put_all("penalty.grad", [x.grad if x.grad is not None else torch.zeros_like(x) for x in c])

    th = [x.clone().requires_grad_(True) for x in params]

    def mse(p, x, y):
        return ((mlp(p, x) - y) ** 2).mean()

    g = torch.autograd.grad(mse(th, T["Xs"], T["Ys"]), th, create_graph=True)
    th2 = [a - 0.1 * b for a, b in zip(th, g)]
    outer = mse(th2, T["Xq"], T["Yq"])
    want["maml.outer"] = outer.detach()
    put_all("maml.grad", torch.autograd.grad(outer, th))

    passed = failed = 0
    for name, w in want.items():
        w = w.detach().numpy()
        if name not in got:
            print(f"FAIL {name}: missing from the driver's output")
            failed += 1
            continue
        a = got[name]
        if a.shape != w.shape:
            print(f"FAIL {name}: shape {a.shape} vs torch {w.shape}")
            failed += 1
            continue
        err = float(np.max(np.abs(a - w))) if w.size else 0.0
        scale = max(1.0, float(np.max(np.abs(w))) if w.size else 0.0)
        if err <= TOL * scale:
            passed += 1
            if verbose:
                print(f"ok   {name} {w.shape} max err {err:.3g}")
        else:
            failed += 1
            print(f"FAIL {name} {w.shape}: max |oxmera - torch| = {err:.3g} (scale {scale:.3g})")
    extra = sorted(set(got) - set(want))
    if extra:
        print("FAIL results torch does not check:", extra)
        failed += 1
    print(f"functional parity: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
