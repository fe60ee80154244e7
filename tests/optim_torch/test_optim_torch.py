#!/usr/bin/python3
"""Parity of oxmera.optim (optimizers, schedulers, clip_grad_norm_) against torch.optim (1.13).

Usage: /usr/bin/python3 test_optim_torch.py PATH/TO/optim_torch_parity_driver [-v]

Each configuration runs 20 steps in the driver and in torch on the same initial parameters and the same
gradients (closed-form formulas, repeated from optim_torch_driver.cpp), and compares the parameters after
every step: |ours - torch| <= rtol * max(|torch|, 0.1 * max|torch over the step|) with rtol 1e-6 in f32 and
1e-12 in f64. The floor matters only for elements that cancelled to a small value: torch's CPU kernels
contract `a + alpha * b` into FMAs, ours round the product (a few ulps of the O(1) values per step). Prints `optim parity: N passed, M failed`, exits 1 on
any failure and 77 (`optim parity: skipped ...`) when torch cannot be imported.
"""
import math
import subprocess
import sys

try:
    import torch
except Exception:  # noqa: BLE001 - any import failure means "not available"
    print("optim parity: skipped (python3-torch not installed)")
    sys.exit(77)

torch.set_num_threads(1)
STEPS = 20
SHAPES = [(7,), (3, 4)]
TOL = {"f32": 1e-6, "f64": 1e-12}
DT = {"f32": torch.float32, "f64": torch.float64}


def init_value(k, i):
    return 2.0 * math.cos(0.3 * i + k)


def grad_value(k, i, t):
    return math.sin(0.37 * i + 1.1 * t + 0.5 * k) * (0.5 + 0.1 * i)


def has_grad(k, t):
    return not (k == 1 and t % 7 == 3)


def numel(shape):
    return math.prod(shape)


def torch_run(dtype, kind, kv):
    dt = DT[dtype]
    ps = []
    for k, shape in enumerate(SHAPES):
        v = torch.tensor([init_value(k, i) for i in range(numel(shape))], dtype=torch.float64)
        ps.append(v.reshape(shape).to(dt).requires_grad_())
    f = lambda key, d: float(kv.get(key, d))  # noqa: E731
    b = lambda key: kv.get(key) == "1"  # noqa: E731
    if kind == "SGD":
        cls, opts = torch.optim.SGD, dict(lr=f("lr", 0.1), momentum=f("momentum", 0), dampening=f("dampening", 0),
                                          weight_decay=f("weight_decay", 0), nesterov=b("nesterov"),
                                          maximize=b("maximize"))
    elif kind in ("Adam", "AdamW"):
        cls = torch.optim.Adam if kind == "Adam" else torch.optim.AdamW
        opts = dict(lr=f("lr", 1e-3), betas=(f("beta1", 0.9), f("beta2", 0.999)), eps=f("eps", 1e-8),
                    weight_decay=f("weight_decay", 0 if kind == "Adam" else 1e-2), amsgrad=b("amsgrad"),
                    maximize=b("maximize"))
    else:
        cls, opts = torch.optim.RMSprop, dict(lr=f("lr", 1e-2), alpha=f("alpha", 0.99), eps=f("eps", 1e-8),
                                              weight_decay=f("weight_decay", 0), momentum=f("momentum", 0),
                                              centered=b("centered"), maximize=b("maximize"))
    opts["foreach"] = False  # the single-tensor formulas
    if "group2_lr" in kv:
        opt = cls([{"params": [ps[0]]}, {"params": [ps[1]], "lr": float(kv["group2_lr"])}], **opts)
    else:
        opt = cls(ps, **opts)
    sched = None
    if kv.get("sched") == "step":
        sched = torch.optim.lr_scheduler.StepLR(opt, 5, 0.5)
    elif kv.get("sched") == "cos":
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 20, 1e-4)
    elif kv.get("sched") == "warmup":
        sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.2, end_factor=1.0, total_iters=6)
    out = []
    for t in range(1, STEPS + 1):
        opt.zero_grad(set_to_none=True)
        for k, p in enumerate(ps):
            if has_grad(k, t):
                g = torch.tensor([grad_value(k, i, t) for i in range(p.numel())], dtype=torch.float64)
                p.grad = g.reshape(p.shape).to(dt)
        if "clip" in kv:
            norm = kv.get("clip_norm", "2")
            torch.nn.utils.clip_grad_norm_(ps, float(kv["clip"]), float("inf") if norm == "inf" else float(norm))
        opt.step()
        if sched is not None:
            sched.step()
        out.append([v for p in ps for v in p.detach().to(torch.float64).flatten().tolist()])
    return out


def ours(driver, dtype, kind, kv):
    args = [driver, dtype, kind] + [f"{k}={v}" for k, v in kv.items()] + [f"steps={STEPS}"]
    res = subprocess.run(args, capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        raise RuntimeError(f"driver failed ({res.returncode}): {res.stderr.strip()}")
    rows = [line.split() for line in res.stdout.splitlines() if line.startswith("step ")]
    return [[float(x) for x in r[2:]] for r in rows]


CONFIGS = [
    ("SGD", {}),
    ("SGD", {"momentum": "0.9"}),
    ("SGD", {"momentum": "0.9", "dampening": "0.3"}),
    ("SGD", {"momentum": "0.9", "nesterov": "1", "weight_decay": "0.01"}),
    ("SGD", {"weight_decay": "0.1", "maximize": "1"}),
    ("SGD", {"lr": "0.05", "momentum": "0.5", "group2_lr": "0.2", "sched": "step"}),
    ("Adam", {}),
    ("Adam", {"lr": "0.01", "beta1": "0.8", "beta2": "0.99", "eps": "1e-6"}),
    ("Adam", {"lr": "0.01", "weight_decay": "0.1"}),
    ("Adam", {"lr": "0.01", "amsgrad": "1"}),
    ("Adam", {"lr": "0.01", "maximize": "1", "amsgrad": "1", "weight_decay": "0.05"}),
    ("Adam", {"lr": "0.02", "sched": "cos", "clip": "0.5"}),
    ("AdamW", {}),
    ("AdamW", {"lr": "0.01", "weight_decay": "0.1"}),
    ("AdamW", {"lr": "0.01", "amsgrad": "1", "maximize": "1"}),
    ("AdamW", {"lr": "0.01", "group2_lr": "0.001", "sched": "warmup", "clip": "1.0", "clip_norm": "inf"}),
    ("RMSprop", {}),
    ("RMSprop", {"alpha": "0.9", "eps": "1e-6"}),
    ("RMSprop", {"weight_decay": "0.1"}),
    ("RMSprop", {"momentum": "0.9"}),
    ("RMSprop", {"centered": "1"}),
    ("RMSprop", {"lr": "0.005", "momentum": "0.5", "centered": "1", "weight_decay": "0.05", "maximize": "1"}),
    ("SGD", {"momentum": "0.9", "clip": "0.3", "clip_norm": "1"}),
]


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    driver, verbose = sys.argv[1], "-v" in sys.argv[2:]
    passed = failed = 0
    for dtype in ("f32", "f64"):
        rtol = TOL[dtype]
        for kind, kv in CONFIGS:
            name = f"{dtype} {kind} {' '.join(f'{k}={v}' for k, v in kv.items())}".strip()
            try:
                got, want = ours(driver, dtype, kind, kv), torch_run(dtype, kind, kv)
            except Exception as e:  # noqa: BLE001
                print(f"FAIL {name}: {e}")
                failed += 1
                continue
            worst, where = 0.0, None
            ok = len(got) == len(want) == STEPS
            for t, (g, w) in enumerate(zip(got, want), 1):
                ok = ok and len(g) == len(w)
                floor = 0.1 * max(abs(b) for b in w)
                for i, (a, b) in enumerate(zip(g, w)):
                    excess = abs(a - b) / (rtol * max(abs(b), floor))
                    if not excess <= worst:  # also catches NaN
                        worst, where = excess, (t, i, a, b)
            if ok and worst <= 1.0:
                passed += 1
                if verbose:
                    print(f"ok   {name} (worst {worst:.3f} of tolerance)")
            else:
                failed += 1
                print(f"FAIL {name}: worst {worst:.3g}x tolerance at step/index/ours/torch {where}")
    print(f"optim parity: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
