#!/usr/bin/python3
"""Parity of oxmera ops (forward and backward) against PyTorch.

Usage: /usr/bin/python3 test_torch_parity.py PATH/TO/torch_parity_driver [-v]

Generates cases with numpy (fixed seed), runs torch_parity_driver once with all of them (see parity_driver.cpp
for the line protocol), computes the same with torch and compares. Prints `parity: N passed, M failed`
and exits 1 on any failure; exits 77 (`parity: skipped ...`) when torch or numpy cannot be imported.
Debian 12: apt-get install -y python3-torch python3-numpy (use /usr/bin/python3, not a pyenv shim).
"""
import math
import os
import subprocess
import sys
import time

try:
    import numpy as np
    import torch
except Exception:  # noqa: BLE001 - any import failure means "not available"
    print("parity: skipped (python3-torch not installed)")
    sys.exit(77)

torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)

SEED = int(os.environ.get("PARITY_SEED", "20240607"))  # override to explore other inputs
rng = np.random.default_rng(SEED)

NP_NAME = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64", np.dtype(np.int64): "i64",
           np.dtype(np.uint8): "u8"}
TORCH_NAME = {torch.float32: "f32", torch.float64: "f64", torch.int64: "i64", torch.uint8: "u8",
              torch.bool: "bool"}
NP_OF = {"f32": np.float32, "f64": np.float64}
TORCH_OF = {"f32": torch.float32, "f64": torch.float64}


LAYOUT_TAG = {0: "", 1: "T", 2: "s2"}  # contiguous, last two dims transposed, every other element of the last dim


def stored_form(a, layout):
    """The array the driver builds before applying the layout's view (see parity_driver.cpp)."""
    if layout == 1:
        return np.swapaxes(a, -1, -2)
    if layout == 2:
        st = np.full(a.shape[:-1] + (2 * a.shape[-1],), np.nan if a.dtype.kind == "f" else 0, dtype=a.dtype)
        st[..., 0::2] = a  # the odd slots hold nan: reading them by mistake shows
        return st
    return a


class Case:
    def __init__(self, op, dtype, inputs, params=None, grad=True, ref=None, kfwd=1, error=None, exact=False,
                 note="", override=None):
        self.override = override  # callable(torch output ndarray) -> expected ndarray: documented divergences
        self.op = op
        self.dtype = dtype
        self.inputs = inputs  # list of (np.ndarray logical, layout 0/1/2, requires-grad flag)
        self.params = params or {}
        self.grad = grad
        self.ref = ref  # callable(torch tensors) -> torch tensor
        self.kfwd = kfwd  # length of the longest accumulation in the forward op (tolerance scaling)
        self.error = error  # expected oxmera ErrorKind name
        self.exact = exact
        self.note = note
        self.id = None
        self.seed = None
        self.expected = None  # (out ndarray, [grad ndarray | None])
        self.kmm = 1

    def describe(self):
        shp = " ".join(("%s%s" % (list(a.shape), LAYOUT_TAG[nc])) for a, nc, _ in self.inputs)
        prm = " ".join("%s=%s" % kv for kv in self.params.items())
        s = "#%d %s[%s] %s" % (self.id, self.op, self.dtype, shp)
        if prm:
            s += " {" + prm + "}"
        if self.note:
            s += " (" + self.note + ")"
        return s


def fmt_val(v):
    return repr(float(v)) if not isinstance(v, (int, np.integer)) else str(int(v))


def fmt_param(v):
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, (list, tuple)):
        return ",".join(str(int(x)) for x in v)
    return str(v)


def encode(case):
    toks = [str(case.id), case.op, "1" if case.grad else "0", str(len(case.params))]
    toks += ["%s=%s" % (k, fmt_param(v)) for k, v in case.params.items()]
    toks.append(str(len(case.inputs)))
    for a, nc, rg in case.inputs:
        stored = stored_form(a, nc)
        toks += [NP_NAME[a.dtype], str(nc), "1" if rg else "0", str(a.ndim)]
        toks += [str(d) for d in a.shape]
        flat = np.ascontiguousarray(stored).reshape(-1)
        if a.dtype.kind == "f":
            toks += [repr(float(x)) for x in flat.tolist()]
        else:
            toks += [str(int(x)) for x in flat.tolist()]
    if case.grad:
        toks.append(str(case.seed.size))
        toks += [repr(float(x)) for x in case.seed.reshape(-1).tolist()]
    return " ".join(toks)


# ------------------------------------------------------------------------------------------------ torch side
def to_torch(a, rg):
    t = torch.from_numpy(np.array(a, copy=True))
    if rg:
        t.requires_grad_(True)
    return t


def all_dims(x, dims):
    return tuple(dims) if len(dims) else tuple(range(x.dim()))


def red(fn):
    def f(p, x):
        dims = all_dims(x, p["dims"])
        if x.dim() == 0:
            return fn(x, dim=None, keepdim=None)
        return fn(x, dim=dims, keepdim=p["keepdim"])
    return f


def t_sum(x, dim, keepdim):
    return x.sum() if dim is None else x.sum(dim=dim, keepdim=keepdim)


def t_mean(x, dim, keepdim):
    return x.mean() if dim is None else x.mean(dim=dim, keepdim=keepdim)


def t_amax(x, dim, keepdim):
    return x.amax() if dim is None else torch.amax(x, dim=dim, keepdim=keepdim)


def t_amin(x, dim, keepdim):
    return x.amin() if dim is None else torch.amin(x, dim=dim, keepdim=keepdim)


def t_slice(p, x):
    idx = [slice(None)] * x.dim()
    idx[p["dim"]] = slice(p["start"], p["end"], p.get("step", 1))
    return x[tuple(idx)]


def t_reassemble(pieces, dim, stacked):
    scaled = [t * float(i + 1) for i, t in enumerate(pieces)]
    return torch.stack(scaled, dim) if stacked else torch.cat(scaled, dim)


def t_any_all(fn):
    def f(p, x):
        if x.dim() == 0:
            return fn(x)
        out = x
        dims = sorted(d % x.dim() for d in p["dims"]) if p["dims"] else list(range(x.dim()))
        for d in reversed(dims):  # torch 1.13's any/all take one dim
            out = fn(out, d, keepdim=True)
        return out if p["keepdim"] else out.reshape([s for i, s in enumerate(out.shape) if i not in dims])
    return f


def t_var(fn):
    def f(p, x):
        dims = tuple(p["dims"]) if p["dims"] else None
        return fn(x, dim=dims, correction=int(p["correction"]), keepdim=bool(p["keepdim"]))
    return f


STRUCTURED_C_OPS = {
    "tril": lambda p, x: torch.tril(x, p["diagonal"]), "triu": lambda p, x: torch.triu(x, p["diagonal"]),
    "masked_fill": lambda p, x, m, *v: x.masked_fill(m != 0, v[0] if v else p["value"]),
    "cumsum": lambda p, x: torch.cumsum(x, p["dim"]), "cumprod": lambda p, x: torch.cumprod(x, p["dim"]),
    "sort": lambda p, x: torch.sort(x, dim=p["dim"], descending=bool(p["descending"]), stable=True)[p["out"]],
    "argsort": lambda p, x: torch.sort(x, dim=p["dim"], descending=bool(p["descending"]), stable=True)[1],
    "topk": lambda p, x: torch.topk(x, p["k"], dim=p["dim"], largest=bool(p["largest"]))[p["out"]],
    "max_dim": lambda p, x: torch.max(x, p["dim"], keepdim=bool(p["keepdim"]))[p["out"]],
    "min_dim": lambda p, x: torch.min(x, p["dim"], keepdim=bool(p["keepdim"]))[p["out"]],
    "chunk": lambda p, x: t_reassemble(torch.chunk(x, p["chunks"], p["dim"]), p["dim"], False),
    "split": lambda p, x: t_reassemble(torch.split(x, p["sizes"] if "sizes" in p else p["size"], p["dim"]),
                                       p["dim"], False),
    "unbind": lambda p, x: t_reassemble(torch.unbind(x, p["dim"]), p["dim"], True),
    "var": t_var(torch.var), "std": t_var(torch.std),
    "norm": lambda p, x: torch.linalg.vector_norm(x, ord=p["p"], dim=tuple(p["dims"]) if p["dims"] else None,
                                                  keepdim=bool(p["keepdim"])),
    "repeat": lambda p, x: x.repeat(p["reps"]), "tile": lambda p, x: torch.tile(x, tuple(p["reps"])),
    "flip": lambda p, x: torch.flip(x, p["dims"]),
    "roll": lambda p, x: torch.roll(x, p["shifts"], p["dims"]) if p["dims"] else torch.roll(x, p["shifts"]),
    "any": t_any_all(torch.any), "all": t_any_all(torch.all),
    "max_pool2d": lambda p, x: torch.nn.functional.max_pool2d(x, p["kernel"], p["stride"], p["padding"],
                                                              p["dilation"], return_indices=True)[p["out"]],
}


def structured_c_cases(add, dt):
    """tril/triu, masked_fill, scans, sorting, splitting, statistics, repeat/flip/roll, any/all (issue #13)."""
    layouts = (([3, 4, 5], 0), ([3, 4, 5], 1), ([3, 4, 5], 2))
    for op in ("tril", "triu"):
        for shape, nc in layouts + (([2, 0, 3], 0), ([6, 4], 1)):
            for k in (0, 1, -2):
                add(Case(op, dt, [(rnd(shape, dt), nc, 1)], params={"diagonal": k}, exact=True))
        add(Case(op, "i64", [(rng.integers(-9, 9, size=[4, 5]), 0, 0)], params={"diagonal": 1}, grad=False,
                 exact=True))
    for shape, nc in layouts:
        m = rng.integers(0, 2, size=[4, 1]).astype(np.uint8)
        add(Case("masked_fill", dt, [(rnd(shape, dt), nc, 1), (m, 0, 0)], params={"value": -1.5}, exact=True))
        add(Case("masked_fill", dt, [(rnd(shape, dt), nc, 1), (rnd_int([5], dt, 0, 1), 0, 0), (rnd([], dt), 0, 1)],
                 note="0-d tensor value"))
    add(Case("masked_fill", dt, [(rnd([4, 4], dt), 0, 1), (np.triu(np.ones([4, 4]), 1).astype(np.uint8), 0, 0)],
             params={"value": -math.inf}, exact=True, note="causal mask, -inf"))
    for op in ("cumsum", "cumprod"):
        for shape, nc in layouts + (([0, 3], 0), ([], 0)):
            for dim in (0, 1, -1):
                if dim >= max(1, len(shape)) or (shape == [] and dim != 0):
                    continue
                x = rnd(shape, dt, 0.5, 1.5) if op == "cumprod" else rnd(shape, dt)
                add(Case(op, dt, [(x, nc, 1)], params={"dim": dim}, kfwd=4))
        add(Case(op, "i64", [(rng.integers(-3, 4, size=[3, 4]), 0, 0)], params={"dim": 1}, grad=False, exact=True))
    z = np.array([[0.5, 0, 1.5, -2], [0.7, 0, 0, 1.2], [0, 1.1, -0.9, 1.3], [0.8, 1.4, -1.1, 0]], dtype=NP_OF[dt])
    for dim in (0, 1):
        add(Case("cumprod", dt, [(z, 0, 1)], params={"dim": dim}, note="zeros in the input"))
    for shape, nc in layouts:
        for dim in (0, 1, -1):
            for desc in (0, 1):
                x = rnd(shape, dt)
                add(Case("sort", dt, [(x, nc, 1)], params={"dim": dim, "descending": desc, "out": 0}, exact=True))
                add(Case("sort", dt, [(x, nc, 0)], params={"dim": dim, "descending": desc, "out": 1}, grad=False,
                         exact=True))
                add(Case("argsort", dt, [(x, nc, 0)], params={"dim": dim, "descending": desc}, grad=False, exact=True))
                for out in (0, 1):
                    add(Case("topk", dt, [(x, nc, out == 0)], params={"k": 2, "dim": dim, "largest": 1 - desc,
                                                                       "out": out}, grad=out == 0, exact=True))
                    add(Case("max_dim" if desc else "min_dim", dt, [(x, nc, out == 0)],
                             params={"dim": dim, "keepdim": desc, "out": out}, grad=out == 0, exact=True))
    ties = np.array([1, math.nan, 0, 1, 2, 0, math.nan, 1], dtype=NP_OF[dt])
    for desc in (0, 1):
        add(Case("argsort", dt, [(ties, 0, 0)], params={"dim": 0, "descending": desc}, grad=False, exact=True,
                 note="ties (stable) and NaN (largest)"))
        add(Case("sort", dt, [(ties, 0, 0)], params={"dim": 0, "descending": desc, "out": 0}, grad=False,
                 exact=True, note="NaN sorts as the largest"))
    add(Case("sort", "i64", [(rng.integers(-3, 4, size=[4, 6]), 0, 0)], params={"dim": 1, "descending": 0,
                                                                               "out": 1}, grad=False, exact=True))
    add(Case("sort", dt, [(rnd([0, 3], dt), 0, 1)], params={"dim": 1, "descending": 0, "out": 0}, note="empty"))
    for shape, nc in layouts + (([3, 0, 5], 0),):
        for dim in (0, 1, -1):
            for n in (1, 2, 3, 7):
                add(Case("chunk", dt, [(rnd(shape, dt), nc, 1)], params={"chunks": n, "dim": dim}, exact=True))
            for size in (1, 2, 3):
                add(Case("split", dt, [(rnd(shape, dt), nc, 1)], params={"size": size, "dim": dim}, exact=True))
            if shape[dim] > 0:
                add(Case("split", dt, [(rnd(shape, dt), nc, 1)], params={"sizes": [1, 0, shape[dim] - 1],
                                                                          "dim": dim}, exact=True))
            if shape[dim] > 0:
                add(Case("unbind", dt, [(rnd(shape, dt), nc, 1)], params={"dim": dim}, exact=True))
    for op in ("var", "std"):
        for shape, nc in layouts + (([1000], 0), ([7, 300], 2)):
            for dims in ([], [0], [-1], [0, 2]):
                if any(d >= len(shape) for d in dims):
                    continue
                for corr in (1, 0, 2):
                    for keep in (0, 1):
                        k = int(np.prod([shape[d] for d in dims])) if dims else int(np.prod(shape))
                        add(Case(op, dt, [(rnd(shape, dt), nc, 1)], params={"dims": dims, "correction": corr,
                                                                           "keepdim": keep}, kfwd=k))
        add(Case(op, dt, [(rnd([1, 3], dt), 0, 0)], params={"dims": [0], "correction": 1, "keepdim": 0},
                 grad=False, note="one element: NaN"))
    for shape, nc in layouts + (([0, 5], 0),):
        for p in (2.0, 1.0, math.inf, -math.inf, 3.0, 0.0):
            for dims in ([], [1], [0, 2]):
                if any(d >= len(shape) for d in dims) or (shape[0] == 0 and math.isinf(p) and dims != [1]):
                    continue
                k = int(np.prod([shape[d] for d in dims])) if dims else int(np.prod(shape))
                add(Case("norm", dt, [(rnd_away(shape, dt), nc, 1)], params={"p": p, "dims": dims, "keepdim": 0},
                         kfwd=k, grad=p != 0))  # p = 0: a count, no gradient (torch: zeros)
    add(Case("norm", dt, [(np.array([[0, 0, 0], [1, -2, 2]], dtype=NP_OF[dt]), 0, 1)],
             params={"p": 2.0, "dims": [1], "keepdim": 1}, note="gradient 0 at 0"))
    for op, reps in (("repeat", [2, 1, 3]), ("repeat", [2, 1, 1, 2]), ("repeat", [1, 0, 2]), ("tile", [2]),
                     ("tile", [2, 1, 1, 3]), ("tile", [])):
        for shape, nc in layouts + (([0, 2], 0),):
            add(Case(op, dt, [(rnd(shape, dt), nc, 1)], params={"reps": reps}, exact=True, kfwd=4))
    for shape, nc in layouts + (([0, 2, 3], 0),):
        for dims in ([0], [-1], [0, 2]):
            add(Case("flip", dt, [(rnd(shape, dt), nc, 1)], params={"dims": dims}, exact=True))
        for shifts, dims in (([1], [0]), ([-2], [-1]), ([7], [1]), ([1, -3], [0, 2]), ([3], []), ([-25], [])):
            add(Case("roll", dt, [(rnd(shape, dt), nc, 1)], params={"shifts": shifts, "dims": dims}, exact=True))
    for op in ("any", "all"):
        for shape, nc in layouts + (([0, 3], 0),):
            x = rnd_int(shape, dt, 0, 1) if op == "any" else rnd_int(shape, dt, 0, 3)
            if x.size:
                x.reshape(-1)[::7] = math.nan
            for dims in ([], [1], [0, 2], [-1]):
                if any(d >= len(shape) for d in dims):
                    continue
                for keep in (0, 1):
                    add(Case(op, dt, [(x, nc, 0)], params={"dims": dims, "keepdim": keep}, grad=False, exact=True))
        add(Case(op, "i64", [(rng.integers(0, 2, size=[3, 4]), 0, 0)], params={"dims": [1], "keepdim": 0},
                 grad=False, exact=True))


def max_pool_cases(add, dt):
    """max_pool2d (the fused kernel, issue #15): values and gradients (out=0), indices (out=1); ties, NaN, -inf."""
    geoms = (([2, 3, 6, 6], [2, 2], [2, 2], [0, 0], [1, 1]), ([2, 2, 7, 5], [3, 2], [2, 1], [1, 1], [1, 1]),
             ([1, 2, 9, 8], [3, 3], [1, 2], [1, 1], [2, 2]), ([2, 2, 5, 7], [2, 4], [3, 1], [1, 2], [1, 1]),
             ([2, 1, 4, 4], [1, 1], [1, 1], [0, 0], [1, 1]), ([0, 2, 6, 6], [2, 2], [2, 2], [0, 0], [1, 1]))
    for shape, k, s, pd, dl in geoms:
        for nc in (0, 1, 2):
            for x, note in ((rnd(shape, dt), ""), (rnd_int(shape, dt), "ties")):
                prm = {"kernel": k, "stride": s, "padding": pd, "dilation": dl}
                add(Case("max_pool2d", dt, [(x, nc, 1)], params={**prm, "out": 0}, exact=True, note=note))
                add(Case("max_pool2d", dt, [(x, nc, 0)], params={**prm, "out": 1}, grad=False, exact=True,
                         note=note))
    x = rnd_int([1, 2, 6, 6], dt)
    x.reshape(-1)[::5] = math.nan
    x.reshape(-1)[2::7] = -math.inf
    for out in (0, 1):
        add(Case("max_pool2d", dt, [(x, 0, 0)], params={"kernel": [3, 3], "stride": [1, 2], "padding": [1, 1],
                                                         "dilation": [1, 1], "out": out}, grad=False, exact=True,
                 note="NaN (the last one's index) and -inf"))
    add(Case("max_pool2d", dt, [(rnd([1, 1, 4, 4], dt), 0, 0)], params={"kernel": [2, 2], "stride": [2, 2],
                                                                         "padding": [2, 0], "dilation": [1, 1],
                                                                         "out": 0}, grad=False,
             error="InvalidArgument", note="padding above half the kernel"))


TORCH_OPS = {
    # the elementwise ops come from the op registry (load_registry)
    "where": lambda p, m, a, b: torch.where(m != 0, a, b),
    "add_s": lambda p, x: x + p["s"], "sub_s": lambda p, x: x - p["s"], "mul_s": lambda p, x: x * p["s"],
    "div_s": lambda p, x: x / p["s"], "rsub_s": lambda p, x: p["s"] - x, "rdiv_s": lambda p, x: p["s"] / x,
    "pow_s": lambda p, x: torch.pow(x, p["s"]), "clamp": lambda p, x: torch.clamp(x, p["lo"], p["hi"]),
    "clamp_t": lambda p, x, lo, hi: torch.clamp(x, None if p.get("omit") == "lo" else lo,
                                                None if p.get("omit") == "hi" else hi),
    "clamp_min_t": lambda p, x, lo: torch.clamp_min(x, lo), "clamp_max_t": lambda p, x, hi: torch.clamp_max(x, hi),
    "clamp_min_s": lambda p, x: torch.clamp_min(x, p["s"]), "clamp_max_s": lambda p, x: torch.clamp_max(x, p["s"]),
    "gelu_approx": lambda p, x: torch.nn.functional.gelu(x, approximate=p["approximate"]),
    "sum": red(t_sum), "mean": red(t_mean), "max": red(t_amax), "min": red(t_amin),
    "argmax": lambda p, x: torch.argmax(x, dim=p["dim"], keepdim=p["keepdim"]),
    "argmin": lambda p, x: torch.argmin(x, dim=p["dim"], keepdim=p["keepdim"]),
    "softmax": lambda p, x: torch.softmax(x, dim=p["dim"]),
    "log_softmax": lambda p, x: torch.log_softmax(x, dim=p["dim"]),
    "logsumexp": lambda p, x: torch.logsumexp(x, dim=p["dim"], keepdim=p["keepdim"]),
    "matmul": lambda p, a, b: torch.matmul(a, b),
    "reshape": lambda p, x: x.reshape(p["shape"]), "permute": lambda p, x: x.permute(p["order"]),
    "transpose": lambda p, x: x.transpose(p["d0"], p["d1"]),
    "t": lambda p, x: x.transpose(-2, -1) if x.dim() >= 2 else x,
    "narrow": lambda p, x: x.narrow(p["dim"], p["start"], p["length"]), "slice": t_slice,
    "select": lambda p, x: x.select(p["dim"], p["index"]), "unsqueeze": lambda p, x: x.unsqueeze(p["dim"]),
    "squeeze": lambda p, x: x.squeeze(p["dim"]) if "dim" in p else x.squeeze(),
    "flatten": lambda p, x: x.flatten(p.get("start", 0), p.get("end", -1)),
    "broadcast_to": lambda p, x: x.broadcast_to(p["shape"]),
    "to": lambda p, x: x.to(TORCH_OF[p["dtype"]]),
    "contiguous": lambda p, x: x.contiguous(), "clone": lambda p, x: x.clone(),
    "x_mul_x": lambda p, x: x * x, "x_plus_xt": lambda p, x: x + x.transpose(-2, -1),
    "softmax_x_matmul_xt": lambda p, x: torch.softmax(x, -1).matmul(x.transpose(-2, -1)),
    "rows_sum": lambda p, x: x.select(0, 0) * x.select(0, 1) + x.narrow(0, 1, 1).squeeze(0),
    **STRUCTURED_C_OPS,
}


def compute_expected(case):
    ts = [to_torch(a, rg and case.grad) for a, _, rg in case.inputs]
    try:
        out = TORCH_OPS[case.op](case.params, *ts)
    except Exception:  # noqa: BLE001
        if case.override is None or case.grad:
            raise
        case.expected = (case.override(None), case.dtype, None)  # torch raises; oxmera's answer by design
        return
    if out.dtype == torch.bool:
        out = out.to(ts[0].dtype)
    grads = None
    if case.grad:
        seed = rng.standard_normal(tuple(out.shape)).astype(out.detach().numpy().dtype)
        case.seed = seed
        if out.requires_grad:
            out.backward(torch.from_numpy(seed))
        grads = []
        for t, (_, _, rg) in zip(ts, case.inputs):
            grads.append(None if not (rg and t.grad is not None) else t.grad.detach().numpy().copy())
    o = out.detach().numpy().copy()
    if case.override is not None:
        o = case.override(o)
    case.expected = (o, TORCH_NAME[out.dtype], grads)


# ---------------------------------------------------------------------------------------------- generators
def rnd(shape, dtype, lo=-3.0, hi=3.0):
    return rng.uniform(lo, hi, size=shape).astype(NP_OF[dtype])


def rnd_away(shape, dtype, lo=0.2, hi=3.0):  # |x| in [lo, hi], random sign
    return (rng.uniform(lo, hi, size=shape) * rng.choice([-1.0, 1.0], size=shape)).astype(NP_OF[dtype])


def rnd_int(shape, dtype, lo=-1, hi=1):  # small integers as floats: lots of ties
    return rng.integers(lo, hi + 1, size=shape).astype(NP_OF[dtype])


UNARY_DOMAIN = {
    "log": lambda s, d: rnd(s, d, 0.1, 4.0), "sqrt": lambda s, d: rnd(s, d, 0.1, 4.0),
    "rsqrt": lambda s, d: rnd(s, d, 0.1, 4.0), "log1p": lambda s, d: rnd(s, d, -0.9, 3.0),
    "reciprocal": rnd_away, "abs": rnd_away, "sign": rnd_away, "relu": rnd_away,
}
UNARY = []  # the registry's unary ops (load_registry)
SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1e-30, -1e-30, 1e-5, -1e-5, 20.0, -20.0, 50.0, -50.0, 100.0,
           -100.0, 1e30, -1e30, math.inf, -math.inf, math.nan]
BINARY = []  # the registry's differentiable public binary ops
COMPARE = []  # its non-differentiable ones (comparisons)
INTERNAL = []  # binary entries without a public method (random inputs only)
DOMAIN = {}  # name -> ((lo_a, hi_a), (lo_b, hi_b)), the registry's test domains
NOGRAD_UNARY = set()  # the registry's non-differentiable unary ops (isnan, ...)
PARAMS = {}  # name -> {param: default}, the registry's parameterised unary ops
# Non-default parameters each parameterised unary op is also run with (beyond its defaults).
PARAM_CASES = {"softplus": [{"beta": 2.0, "threshold": 1.0}, {"beta": 0.5, "threshold": 20.0}],
               "elu": [{"alpha": 0.5}, {"alpha": 2.0}], "leaky_relu": [{"negative_slope": 0.2}],
               "hardtanh": [{"min_val": -0.5, "max_val": 2.0}]}


def load_registry(driver):
    """Reads the op registry from the driver (--registry) and builds the torch calls from its expressions."""
    out = subprocess.run([driver, "--registry"], capture_output=True, text=True, timeout=60, check=True).stdout
    names = []
    for line in out.splitlines():
        name, arity, diff, public, la, ha, lb, hb, params, expr = line.split(" ", 9)
        if not expr.strip():
            raise RuntimeError("registry entry %s has no torch expression" % name)
        args = "x" if arity == "1" else "a, b"
        dflt = {} if params == "-" else {k: float(v) for k, v in (kv.split("=") for kv in params.split(","))}
        # the expression names the parameters: bound from the case's params, else the registry's defaults
        body = eval("lambda %s: %s" % (", ".join([args] + list(dflt)), expr), {"torch": torch})  # noqa: S307
        TORCH_OPS[name] = (lambda body, dflt: lambda p, *t: body(*t, *[p.get(k, v) for k, v in dflt.items()]))(
            body, dflt)
        if dflt:
            PARAMS[name] = dflt
        if arity == "1" and diff == "0":
            NOGRAD_UNARY.add(name)
        DOMAIN[name] = ((float(la), float(ha)), (float(lb), float(hb)))
        if arity == "1":
            UNARY.append(name)
        elif public == "0":
            INTERNAL.append(name)
        elif diff == "1":
            BINARY.append(name)
        else:
            COMPARE.append(name)
        names.append(name)
    if not UNARY or not BINARY or not COMPARE:
        raise RuntimeError("the driver's registry listing is incomplete: " + out)
    return names
BIN_SHAPES = [([3, 4], 0, [3, 4], 0), ([3, 1, 4], 0, [2, 4], 0), ([2, 4], 0, [3, 1, 4], 0), ([], 0, [2, 3], 0),
              ([2, 1], 0, [1, 3], 0), ([3, 4], 1, [3, 4], 1), ([2, 3, 4], 1, [4], 0), ([4, 3], 0, [4, 3], 1),
              ([2, 5, 3], 1, [2, 1, 3], 1), ([0, 3], 0, [3], 0), ([3, 4], 2, [3, 4], 1), ([2, 3, 4], 2, [4], 2),
              ([160, 257], 1, [257], 0), ([5, 1, 130], 2, [70, 1], 0)]
# Big operands (above the CPU backend's parallel grain) are run for a few ops only, to keep the suite fast.
BIG_OPS = {"exp", "log", "sqrt", "tanh", "relu", "gelu", "sigmoid", "add", "mul", "div", "maximum", "pow", "lt",
           "sum", "max", "mean", "softmax", "log_softmax", "logsumexp", "argmax", "argmin", "min"}


def is_big(*shapes):
    return max(int(np.prod(s)) for s in shapes) >= 16384


def binary_inputs(op, sa, sb, dt):
    if op == "div":
        return rnd(sa, dt), rnd_away(sb, dt, 0.5, 2.0)
    if op == "pow":
        return rnd(sa, dt, 0.5, 2.0), rnd(sb, dt, -2.0, 2.0)
    if op in INTERNAL:
        (la, ha), (lb, hb) = DOMAIN[op]
        return rnd(sa, dt, la, ha), rnd(sb, dt, lb, hb)
    return rnd(sa, dt), rnd(sb, dt)


def gen_cases():
    cases = []
    add = cases.append
    for dt in ("f32", "f64"):
        # ---- unary
        for op in UNARY:
            gen = UNARY_DOMAIN.get(op, rnd)
            for shape, nc in (([2, 3, 4], 0), ([3, 5], 1), ([3, 5], 2), ([], 0), ([0, 2], 0), ([37], 0),
                              ([160, 257], 1)):
                if is_big(shape) and op not in BIG_OPS:
                    continue
                # sign: oxmera records no autograd history (by design; torch gives a zero gradient)
                add(Case(op, dt, [(gen(shape, dt), nc, 1)], grad=op != "sign" and op not in NOGRAD_UNARY))
            for prm in PARAM_CASES.get(op, []):
                for shape, nc in (([3, 5], 1), ([2, 3, 4], 0)):
                    add(Case(op, dt, [(gen(shape, dt), nc, 1)], params=prm))
            sp = np.array(SPECIAL, dtype=NP_OF[dt])
            # sign(nan) is nan in oxmera by design (torch: 0)
            ovr = (lambda o, sp=sp: np.where(np.isnan(sp), np.nan, o).astype(o.dtype)) if op == "sign" else None
            add(Case(op, dt, [(sp, 0, 0)], grad=False, note="special values", override=ovr))
        # ---- binary, with broadcasting and non-contiguous operands
        for op in BINARY + INTERNAL:
            for sa, nca, sb, ncb in BIN_SHAPES:
                if is_big(sa, sb) and op not in BIG_OPS:
                    continue
                a, b = binary_inputs(op, sa, sb, dt)
                add(Case(op, dt, [(a, nca, 1), (b, ncb, 1)]))
        for op in COMPARE:
            for sa, nca, sb, ncb in BIN_SHAPES:
                if is_big(sa, sb) and op not in BIG_OPS:
                    continue
                add(Case(op, dt, [(rnd_int(sa, dt), nca, 0), (rnd_int(sb, dt), ncb, 0)], grad=False, exact=True))
        sv = np.array(SPECIAL, dtype=NP_OF[dt])
        sv2 = np.roll(sv, 3)
        for op in BINARY + COMPARE:
            add(Case(op, dt, [(sv, 0, 0), (sv2, 0, 0)], grad=False, note="special values"))
        # pow with a negative base and integral exponents (torch: defined)
        add(Case("pow", dt, [(rnd_away([3, 4], dt, 0.5, 2.0), 0, 1),
                             (rnd_int([4], dt, -2, 3), 0, 0)], note="negative base, integral exponent"))
        # ---- tensor-scalar ops
        for op, s in (("add_s", 1.5), ("sub_s", -0.25), ("mul_s", 3.0), ("div_s", -4.0), ("rsub_s", 2.0),
                      ("rdiv_s", 1.5), ("pow_s", 2.0), ("pow_s", 3.0), ("pow_s", 0.5), ("pow_s", -1.5)):
            x = rnd_away([3, 4], dt, 0.2, 3.0) if op == "rdiv_s" else rnd([3, 4], dt)
            if op == "pow_s" and s != int(s):
                x = rnd([3, 4], dt, 0.2, 3.0)
            add(Case(op, dt, [(x, 1, 1)], params={"s": s}))
        add(Case("clamp", dt, [(rnd([4, 5], dt), 1, 1)], params={"lo": -0.5, "hi": 0.7}))
        # tensor bounds, broadcast and non-contiguous, each bound differentiable; one omitted; lo > hi somewhere
        for omit in ("", "lo", "hi"):
            add(Case("clamp_t", dt, [(rnd([4, 5], dt), 1, 1), (rnd([5], dt, -1.0, 0.0), 0, 1),
                                     (rnd([4, 1], dt, 0.0, 1.0), 0, 1)], params={"omit": omit} if omit else {}))
        add(Case("clamp_t", dt, [(rnd([3, 4], dt), 0, 1), (rnd([3, 4], dt), 2, 1), (rnd([3, 4], dt), 1, 1)],
                 note="random bounds, lo > hi in places"))
        for op in ("clamp_min_t", "clamp_max_t"):
            add(Case(op, dt, [(rnd([4, 5], dt), 1, 1), (rnd([5], dt), 0, 1)]))
        for op in ("clamp_min_s", "clamp_max_s"):
            add(Case(op, dt, [(rnd([4, 5], dt), 1, 1)], params={"s": 0.25}))
        for approx in ("none", "tanh"):
            add(Case("gelu_approx", dt, [(rnd([3, 5], dt), 1, 1)], params={"approximate": approx}))
        # ---- where
        m = rnd_int([3, 1], dt, 0, 1)
        add(Case("where", dt, [(m, 0, 0), (rnd([3, 4], dt), 0, 1), (rnd([4], dt), 0, 1)]))
        add(Case("where", dt, [(rnd_int([3, 4], dt, 0, 1), 1, 0), (rnd([3, 4], dt), 1, 1), (rnd([], dt), 0, 1)]))
        add(Case("where", dt, [(rng.integers(0, 2, size=[2, 3, 4]).astype(np.uint8), 0, 0),
                               (rnd([3, 4], dt), 0, 1), (rnd([2, 1, 4], dt), 0, 1)], note="u8 mask"))
        # ---- reductions
        for op in ("sum", "mean", "max", "min"):
            for shape, nc in (([2, 3, 4], 0), ([3, 4, 5], 1), ([3, 4, 5], 2)):
                for dims in ([], [0], [1], [2], [-1], [0, 2], [1, 2], [-3, -2], [0, 1, 2]):
                    for keepdim in (False, True):
                        x = rnd(shape, dt)
                        k = int(np.prod([shape[d] for d in all_dims(torch.empty(shape), dims)]))
                        add(Case(op, dt, [(x, nc, 1)], params={"dims": dims, "keepdim": keepdim}, kfwd=k))
            for shape, dims, nc in (([1000], [], 0), ([7, 300], [1], 0), ([300, 7], [0], 0), ([], [], 0),
                                    ([257, 160], [0], 1), ([257, 160], [1], 1), ([20, 40, 60], [0, 2], 2),
                                    ([20, 40, 60], [], 0), ([160, 257], [1], 2)):
                if shape[:1] == [20] and op != "sum":
                    continue
                k = int(np.prod([shape[d] for d in dims])) if dims else int(np.prod(shape))
                add(Case(op, dt, [(rnd(shape, dt), nc, 1)], params={"dims": dims, "keepdim": False}, kfwd=k))
        for op in ("sum", "max", "min", "mean"):
            # reducing a non-empty extent of an empty tensor: an empty result, no error
            add(Case(op, dt, [(rnd([0, 3], dt), 0, 1)], params={"dims": [1], "keepdim": False}, note="empty"))
        add(Case("sum", dt, [(rnd([0, 3], dt), 0, 1)], params={"dims": [0], "keepdim": True}, note="empty"))
        add(Case("sum", dt, [(rnd([0, 3], dt), 0, 1)], params={"dims": [], "keepdim": False}, note="empty"))
        for op in ("sum", "mean", "max", "min"):
            add(Case(op, dt, [(sv.reshape(3, 7), 0, 0)], params={"dims": [1], "keepdim": False}, grad=False,
                     note="special values"))
        for op in ("argmax", "argmin"):
            for shape, nc in (([2, 3, 4], 0), ([3, 4, 5], 1), ([3, 4, 5], 2), ([160, 257], 1)):
                for dim in (0, 1, 2, -1):
                    if dim >= len(shape) or (is_big(shape) and dim == 1):
                        continue
                    for keepdim in (False, True):
                        if is_big(shape) and keepdim:
                            continue
                        add(Case(op, dt, [(rnd(shape, dt), nc, 0)], params={"dim": dim, "keepdim": keepdim},
                                 grad=False, exact=True))
            add(Case(op, dt, [(rnd_int([4, 6], dt, 0, 2), 0, 0)], params={"dim": 1, "keepdim": False}, grad=False,
                     exact=True, note="ties: first index"))
            add(Case(op, dt, [(rnd_int([6, 4], dt, 0, 2), 1, 0)], params={"dim": 0, "keepdim": True}, grad=False,
                     exact=True, note="ties: first index"))
        # ---- softmax family
        for op in ("softmax", "log_softmax", "logsumexp"):
            for shape, nc, scale in (([2, 3, 4], 0, 1.0), ([3, 5], 1, 1.0), ([3, 5], 2, 1.0), ([4, 6], 0, 400.0),
                                     ([4, 6], 1, 400.0), ([160, 257], 1, 3.0), ([64, 513], 2, 3.0)):
                for dim in (0, 1, -1):
                    if dim >= len(shape) or (is_big(shape) and dim == 1) or (shape == [64, 513] and dim != -1):
                        continue
                    p = {"dim": dim}
                    if op == "logsumexp":
                        p["keepdim"] = dim == 1
                    x = (rnd(shape, dt) * scale).astype(NP_OF[dt])
                    add(Case(op, dt, [(x, nc, 1)], params=p, kfwd=shape[dim],
                             note="large logits" if scale > 1 else ""))
            x = np.array([[0.0, -math.inf, 1.0], [-math.inf, -math.inf, -math.inf], [2.0, 1e30, -1e30]],
                         dtype=NP_OF[dt])
            p = {"dim": 1, "keepdim": False} if op == "logsumexp" else {"dim": 1}
            add(Case(op, dt, [(x, 0, 0)], params=p, grad=False, kfwd=3, note="-inf entries"))
        # ---- matmul
        for sa, nca, sb, ncb in (([3, 4], 0, [4, 5], 0), ([2, 3, 4], 0, [4, 5], 0), ([2, 1, 3, 4], 0, [5, 4, 6], 0),
                                 ([3, 4], 0, [2, 4, 5], 0), ([2, 3, 4], 0, [2, 4, 5], 0),
                                 ([1, 3, 4], 0, [2, 4, 5], 0), ([3, 4], 1, [4, 5], 1), ([2, 3, 4], 1, [2, 4, 5], 1),
                                 ([2, 1, 3, 4], 1, [5, 4, 6], 0), ([33, 70], 0, [70, 17], 1),
                                 ([64, 128], 0, [128, 32], 0), ([0, 4], 0, [4, 3], 0), ([3, 0], 0, [0, 4], 0),
                                 ([3, 4], 2, [4, 5], 2), ([2, 5, 4], 2, [4, 3], 1),
                                 ([2, 1, 65, 130], 0, [3, 130, 70], 1), ([200, 300], 1, [300, 150], 0)):
            c = Case("matmul", dt, [(rnd(sa, dt, -1, 1), nca, 1), (rnd(sb, dt, -1, 1), ncb, 1)], kfwd=sa[-1])
            c.kmm = max(1, sa[-1])
            add(c)
        # ---- views (backward through view ops), on contiguous and non-contiguous inputs
        for nc in (0, 1, 2):
            for op, p, shape in (("reshape", {"shape": [6, 4]}, [2, 3, 4]), ("reshape", {"shape": [4, -1]}, [2, 3, 4]),
                                 ("permute", {"order": [2, 0, 1]}, [2, 3, 4]),
                                 ("transpose", {"d0": 0, "d1": 2}, [2, 3, 4]), ("t", {}, [3, 4]),
                                 ("narrow", {"dim": 1, "start": 1, "length": 2}, [2, 3, 4]),
                                 ("slice", {"dim": 2, "start": 0, "end": 4, "step": 2}, [2, 3, 4]),
                                 ("slice", {"dim": 1, "start": 1, "end": 3}, [2, 3, 4]),
                                 ("select", {"dim": 1, "index": 2}, [2, 3, 4]),
                                 ("select", {"dim": 0, "index": -1}, [2, 3, 4]),
                                 ("unsqueeze", {"dim": 0}, [3, 4]), ("unsqueeze", {"dim": -1}, [3, 4]),
                                 ("squeeze", {}, [2, 1, 3, 1]), ("squeeze", {"dim": 1}, [2, 1, 3, 1]),
                                 ("flatten", {}, [2, 3, 4]), ("flatten", {"start": 1, "end": 2}, [2, 3, 4]),
                                 ("broadcast_to", {"shape": [2, 3, 5, 4]}, [3, 1, 4]),
                                 ("to", {"dtype": "f64" if dt == "f32" else "f32"}, [3, 4]),
                                 ("contiguous", {}, [3, 4]), ("clone", {}, [3, 4])):
                add(Case(op, dt, [(rnd(shape, dt), nc, 1)], params=p, kfwd=4 if op == "broadcast_to" else 1))
        # ---- one input used several times: gradients accumulate
        for nc in (0, 1, 2):
            add(Case("x_mul_x", dt, [(rnd([3, 4], dt), nc, 1)]))
            add(Case("x_plus_xt", dt, [(rnd([2, 4, 4], dt), nc, 1)]))
            add(Case("softmax_x_matmul_xt", dt, [(rnd([3, 5], dt), nc, 1)], kfwd=5))
            add(Case("rows_sum", dt, [(rnd([2, 5], dt), nc, 1)]))
        # ---- gradients at kinks and ties (torch's conventions)
        kink = np.array([-1.0, 0.0, 0.5, 1.0, 2.0], dtype=NP_OF[dt])
        add(Case("relu", dt, [(kink, 0, 1)], note="kink at 0"))
        add(Case("abs", dt, [(kink, 0, 1)], note="kink at 0"))
        add(Case("clamp", dt, [(kink, 0, 1)], params={"lo": 0.0, "hi": 1.0}, note="x at the bounds"))
        add(Case("pow_s", dt, [(kink, 0, 1)], params={"s": 0.0}, note="x**0 at x=0"))
        add(Case("pow_s", dt, [(kink, 0, 1)], params={"s": 2.0}, note="x**2 at x=0"))
        add(Case("pow", dt, [(kink, 0, 1), (np.array([2.0, 2.0, 0.0, 3.0, 0.5], dtype=NP_OF[dt]), 0, 1)],
                 note="base 0"))
        tie = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]], dtype=NP_OF[dt])
        add(Case("maximum", dt, [(tie, 0, 1), (tie[::-1].copy(), 0, 1)], note="ties"))
        add(Case("minimum", dt, [(tie, 0, 1), (tie[::-1].copy(), 0, 1)], note="ties"))
        for op in ("max", "min"):
            add(Case(op, dt, [(tie, 0, 1)], params={"dims": [1], "keepdim": False}, note="ties"))
            add(Case(op, dt, [(tie, 0, 1)], params={"dims": [], "keepdim": False}, note="ties"))
    for dt in ("f32", "f64"):
        structured_c_cases(add, dt)
        max_pool_cases(add, dt)
    # ---- error cases: the oxmera ErrorKind must match
    f32, f64 = "f32", "f64"
    add(Case("add", f32, [(rnd([2], f32), 0, 0), (rnd([2], f64), 0, 0)], grad=False, error="DTypeMismatch"))
    add(Case("matmul", f32, [(rnd([2, 3], f32), 0, 0), (rnd([3, 2], f64), 0, 0)], grad=False,
             error="DTypeMismatch"))
    add(Case("add", f32, [(rnd([3], f32), 0, 0), (rnd([4], f32), 0, 0)], grad=False,
             error="BroadcastIncompatible"))
    add(Case("mul", f64, [(rnd([2, 3], f64), 0, 0), (rnd([3, 2], f64), 0, 0)], grad=False,
             error="BroadcastIncompatible"))
    add(Case("matmul", f32, [(rnd([2, 3], f32), 0, 0), (rnd([4, 5], f32), 0, 0)], grad=False,
             error="ShapeMismatch"))
    add(Case("matmul", f64, [(rnd([2, 2, 3], f64), 0, 0), (rnd([2, 4, 5], f64), 0, 0)], grad=False,
             error="ShapeMismatch"))
    add(Case("mean", f32, [(rnd([0, 3], f32), 0, 0)], params={"dims": [0], "keepdim": False}, grad=False,
             error="EmptyReduction"))
    add(Case("mean", f64, [(rnd([0], f64), 0, 0)], params={"dims": [], "keepdim": False}, grad=False,
             error="EmptyReduction"))
    # rank-1 operands: torch's vector forms (row / column vector, dot product), values and gradients
    for dt in (f32, f64):
        for sa, sb in (([4], [4, 5]), ([3, 4], [4]), ([4], [4]), ([4], [2, 4, 3]), ([2, 3, 4], [4])):
            add(Case("matmul", dt, [(rnd(sa, dt, -1, 1), 0, 1), (rnd(sb, dt, -1, 1), 0, 1)], kfwd=4))
    # by design: max/min over an empty floating extent give -inf/+inf (torch raises)
    for op, v in (("max", -math.inf), ("min", math.inf)):
        add(Case(op, f32, [(rnd([3, 0], f32), 0, 0)], params={"dims": [1], "keepdim": False}, grad=False,
                 note="empty extent: identity", override=lambda o, v=v: np.full(3, v, dtype=np.float32)))
    add(Case("sum", f32, [(rnd([2, 3], f32), 0, 0)], params={"dims": [2], "keepdim": False}, grad=False,
             error="IndexOutOfBounds"))
    add(Case("softmax", f64, [(rnd([2, 3], f64), 0, 0)], params={"dim": -3}, grad=False, error="IndexOutOfBounds"))
    # issue #13's structured ops: typed errors (torch raises too, with its own exception types)
    for op, ins, p, err in (
            ("tril", [(rnd([4], f32), 0, 0)], {"diagonal": 0}, "InvalidArgument"),
            ("masked_fill", [(rnd([1, 3], f32), 0, 0), (np.ones([2, 3], dtype=np.uint8), 0, 0)], {"value": 1.0},
             "ShapeMismatch"),
            ("masked_fill", [(rnd([2, 3], f32), 0, 0), (rnd([2, 3], f64), 0, 0)], {"value": 1.0}, "DTypeMismatch"),
            ("var", [(rng.integers(0, 3, size=[3]), 0, 0)], {"dims": [], "correction": 1, "keepdim": 0},
             "UnsupportedDType"),
            ("topk", [(rnd([2, 3], f32), 0, 0)], {"k": 4, "dim": 1, "largest": 1, "out": 0}, "InvalidArgument"),
            ("split", [(rnd([2, 3], f32), 0, 0)], {"sizes": [1, 1], "dim": 1}, "ShapeMismatch"),
            ("cumsum", [(rnd([2, 3], f32), 0, 0)], {"dim": 2}, "IndexOutOfBounds"),
            ("repeat", [(rnd([2, 3], f32), 0, 0)], {"reps": [2]}, "InvalidArgument"),
            ("roll", [(rnd([2, 3], f32), 0, 0)], {"shifts": [1, 2], "dims": [0]}, "InvalidArgument"),
            ("norm", [(rnd([0], f32), 0, 0)], {"p": math.inf, "dims": [], "keepdim": 0}, "EmptyReduction")):
        add(Case(op, f32, ins, params=p, grad=False, error=err))
    for i, c in enumerate(cases):
        c.id = i
    return cases


# ------------------------------------------------------------------------------------------------ driver
def run_driver(driver, cases):
    """Runs the driver over all cases; a crash fails the case it died on and the rest run in a new process."""
    results = {}
    pending = list(cases)
    while pending:
        payload = "\n".join(encode(c) for c in pending) + "\n"
        proc = subprocess.run([driver], input=payload, capture_output=True, text=True, timeout=240)
        lines = [l for l in proc.stdout.split("\n") if l.strip()]
        for line in lines:
            cid, rest = line.split(" ", 1)
            results[int(cid)] = rest
        if len(lines) >= len(pending):
            break
        dead = pending[len(lines)]
        results[dead.id] = "CRASH rc=%d %s" % (proc.returncode, proc.stderr.strip()[-300:])
        pending = pending[len(lines) + 1:]
    return results


def parse_ok(rest):
    toks = rest.split()
    assert toks[0] == "OK"
    pos = 1
    dtype = toks[pos]; pos += 1
    rank = int(toks[pos]); pos += 1
    shape = tuple(int(t) for t in toks[pos:pos + rank]); pos += rank

    def values():
        nonlocal pos
        n = int(toks[pos]); pos += 1
        v = np.array(toks[pos:pos + n], dtype=np.float64) if n else np.zeros(0); pos += n
        return v

    out = values()
    if dtype == "f32":
        out = out.astype(np.float32).astype(np.float64)
    grads = None
    if pos < len(toks) and toks[pos] == "G":
        pos += 1
        ng = int(toks[pos]); pos += 1
        grads = []
        for _ in range(ng):
            has = toks[pos] == "1"; pos += 1
            g = values() if has else None
            if g is not None and dtype == "f32":
                g = g.astype(np.float32).astype(np.float64)
            grads.append(g)
    return dtype, shape, out, grads


def compare(got, exp, rtol, atol, exact):
    """Returns (ok, max_abs_err, max_rel_err, worst index)."""
    exp = np.asarray(exp, dtype=np.float64).reshape(-1)
    got = np.asarray(got, dtype=np.float64).reshape(-1)
    if got.size != exp.size:
        return False, math.inf, math.inf, -1
    if got.size == 0:
        return True, 0.0, 0.0, -1
    nan_g, nan_e = np.isnan(got), np.isnan(exp)
    bad = nan_g != nan_e
    both = ~(nan_g | nan_e)
    inf_mismatch = both & (np.isinf(got) | np.isinf(exp)) & (got != exp)
    bad |= inf_mismatch
    fin = both & np.isfinite(got) & np.isfinite(exp)
    err = np.zeros_like(exp)
    with np.errstate(invalid="ignore"):
        err[fin] = np.abs(got[fin] - exp[fin])
    err[bad] = math.inf
    rel = np.zeros_like(exp)
    rel[fin] = err[fin] / np.maximum(np.abs(exp[fin]), 1e-300)
    rel[bad] = math.inf
    if exact:
        bad |= fin & (err > 0)
    else:
        bad |= fin & (err > atol + rtol * np.abs(exp))
    worst = int(np.argmax(np.where(bad, math.inf, err))) if bad.any() else int(np.argmax(err))
    return (not bad.any()), float(err.max()), float(rel[fin].max()) if fin.any() else 0.0, worst


def tolerances(case, exp_out):
    if case.dtype == "f64" and all(a.dtype != np.float32 for a, _, _ in case.inputs):
        return 1e-10, 1e-10
    k = max(1, case.kfwd)
    on = max(1, exp_out.size)
    for a, _, _ in case.inputs:
        k = max(k, on * case.kmm // max(1, a.size))
    rtol, atol = (1e-5 * math.sqrt(k), 1e-5 * math.sqrt(k)) if k > 1 else (1e-5, 1e-6)
    if case.op in ("softmax", "log_softmax", "logsumexp"):
        # x - logsumexp(x) cancels: an absolute error of a few ulp(max|x|) is inherent in f32 (large logits)
        finite = [np.abs(a[np.isfinite(a)]).max() for a, _, _ in case.inputs if np.isfinite(a).any()]
        cond = 4 * float(np.finfo(np.float32).eps) * max(finite + [0.0])
        rtol, atol = max(rtol, cond), max(atol, cond)
    return rtol, atol


def check(case, rest):
    """Returns None when the case passes, else a message."""
    if rest.startswith("CRASH"):
        return "driver crashed: " + rest
    if case.error:
        if not rest.startswith("ERR "):
            return "expected error %s, got %s" % (case.error, rest[:120])
        kind = rest.split()[1]
        return None if kind == case.error else "expected error %s, got %s" % (case.error, rest[:200])
    if isinstance(case.expected, Exception):
        return "torch raised %s: %s (oxmera: %s)" % (type(case.expected).__name__, case.expected, rest[:120])
    if not rest.startswith("OK "):
        return "torch succeeds, oxmera: " + rest[:300]
    dtype, shape, out, grads = parse_ok(rest)
    exp_out, exp_dtype, exp_grads = case.expected
    if dtype != exp_dtype:
        return "dtype %s, torch %s" % (dtype, exp_dtype)
    if shape != tuple(exp_out.shape):
        return "shape %s, torch %s" % (list(shape), list(exp_out.shape))
    rtol, atol = tolerances(case, exp_out)
    msgs = []
    ok, mabs, mrel, w = compare(out, exp_out, rtol, atol, case.exact)
    if not ok:
        flat = exp_out.reshape(-1)
        msgs.append("output: max abs err %.3g rel %.3g; e.g. [%d] got %r, torch %r%s" % (
            mabs, mrel, w, out[w], float(flat[w]),
            (" (input %r)" % float(case.inputs[0][0].reshape(-1)[w])
             if len(case.inputs) == 1 and case.inputs[0][0].size == flat.size else "")))
    if case.grad:
        if grads is None:
            msgs.append("no gradients printed")
        else:
            for i, (g, eg) in enumerate(zip(grads, exp_grads)):
                if eg is None:
                    if g is not None and np.any(g != 0):
                        msgs.append("grad[%d]: oxmera has a nonzero gradient, torch none" % i)
                    continue
                if g is None:
                    if np.any(eg != 0):
                        msgs.append("grad[%d]: missing, torch has one" % i)
                    continue
                ok, mabs, mrel, w = compare(g, eg, rtol, atol, False)
                if not ok:
                    msgs.append("grad[%d]: max abs err %.3g rel %.3g; e.g. [%d] got %r, torch %r" % (
                        i, mabs, mrel, w, g[w] if g.size > w >= 0 else math.nan,
                        float(eg.reshape(-1)[w]) if eg.size > w >= 0 else math.nan))
    return "; ".join(msgs) or None


def main():
    if len(sys.argv) < 2:
        print("usage: test_torch_parity.py PATH/TO/torch_parity_driver [-v]")
        return 2
    driver = sys.argv[1]
    verbose = "-v" in sys.argv[2:]
    t0 = time.time()
    registry = load_registry(driver)
    if set(PARAMS) != set(PARAM_CASES):
        print("FAIL parameterised registry entries and PARAM_CASES differ: %s vs %s" % (sorted(PARAMS), sorted(PARAM_CASES)))
        return 1
    cases = gen_cases()
    covered = {c.op for c in cases}
    missing = [n for n in registry if n not in covered]
    if missing:
        print("FAIL registry entries without parity cases: " + ", ".join(missing))
        return 1
    for c in cases:
        if c.error is None:
            try:
                compute_expected(c)
            except Exception as e:  # noqa: BLE001 - a broken case fails, the rest still run
                c.expected = e
    t1 = time.time()
    results = run_driver(driver, cases)
    t2 = time.time()
    passed = failed = 0
    for c in cases:
        rest = results.get(c.id)
        msg = "no output from the driver" if rest is None else check(c, rest)
        if msg is None:
            passed += 1
            if verbose:
                print("ok   " + c.describe())
        else:
            failed += 1
            print("FAIL " + c.describe() + ": " + msg)
    print("(torch %s, numpy %s; cases+torch %.2fs, driver %.2fs, total %.2fs)" % (
        torch.__version__, np.__version__, t1 - t0, t2 - t1, time.time() - t0))
    print("parity: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
