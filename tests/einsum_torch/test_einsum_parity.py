#!/usr/bin/python3
"""Parity of oxmera::einsum (values and the gradients of every operand) against torch.einsum.

Usage: /usr/bin/python3 test_einsum_parity.py PATH/TO/einsum_torch_parity_driver [-v]

Runs the spec table (the one of tests/test_einsum.cpp plus a few larger shapes) in f64 and f32 through the driver
(protocol in einsum_driver.cpp) with a random seed for the backward pass, computes the same with torch and
compares |got - want| <= rtol * (|want| + max|want|) per tensor, rtol 1e-10 for f64 and 1e-5 * sqrt(k) for f32.
Malformed specs must be an oxmera InvalidArgument wherever torch raises. Prints `einsum parity: N passed,
M failed`, exits 1 on any failure and 77 (`einsum parity: skipped ...`) when torch or numpy cannot be imported.
Debian 12: apt-get install -y python3-torch python3-numpy (use /usr/bin/python3, not a pyenv shim).
"""
import math
import os
import subprocess
import sys

try:
    import numpy as np
    import torch
except Exception:  # noqa: BLE001 - any import failure means "not available"
    print("einsum parity: skipped (python3-torch or numpy not installed)")
    sys.exit(77)

torch.set_num_threads(1)
rng = np.random.default_rng(int(os.environ.get("PARITY_SEED", "4242")))
TORCH_OF = {"f32": torch.float32, "f64": torch.float64}

TABLE = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("rbhd,rdo->rbho", [(3, 4, 2, 5), (3, 5, 6)]),
    ("rbhd,rdo->rbho", [(3, 64, 16, 16), (3, 16, 16)]),
    ("ij->ji", [(3, 4)]),
    ("i,i->", [(5,), (5,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ii->i", [(4, 4)]),
    ("ii->", [(4, 4)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]),
    ("ij,j->i", [(3, 4), (4,)]),
    ("bi,bi->b", [(3, 5), (3, 5)]),
    ("ijk->kji", [(2, 3, 4)]),
    ("ij,kl->ijkl", [(2, 3), (4, 2)]),
    ("ij->", [(3, 4)]),
    ("ij->i", [(3, 4)]),
    ("iij->ij", [(3, 3, 4)]),
    ("iii->i", [(3, 3, 3)]),
    ("ijj,jk->ik", [(2, 3, 3), (3, 4)]),
    ("ij,kj->ik", [(3, 4), (5, 4)]),
    ("ji,jk->ik", [(4, 3), (4, 5)]),
    ("ij,jk->ki", [(3, 4), (4, 5)]),
    ("abcd,cbe->ade", [(2, 3, 4, 5), (4, 3, 6)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("ij,jk->ik", [(3, 1), (4, 5)]),
    ("bij,bjk->bik", [(1, 3, 4), (2, 4, 5)]),
    ("ij,ij->ij", [(3, 1), (1, 4)]),
    ("i,i->i", [(1,), (4,)]),
    ("bi,bi->b", [(1, 5), (3, 1)]),
    ("ij,jk", [(3, 4), (4, 5)]),
    ("ii", [(3, 3)]),
    ("ji", [(3, 4)]),
    ("ba,ac", [(2, 3), (3, 4)]),
    ("i,i", [(4,), (4,)]),
    ("Ab,bC", [(2, 3), (3, 4)]),
    ("bA,Ac", [(2, 3), (3, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("ij,jk,kl", [(2, 3), (3, 4), (4, 2)]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
    ("i,i,i->i", [(4,), (4,), (4,)]),
    ("ij,jk,kl,lm->im", [(2, 3), (3, 2), (2, 4), (4, 3)]),
    ("i,j,k->ijk", [(2,), (3,), (2,)]),
    ("_i_j_,_j_k_->_i_k_", [(3, 4), (4, 5)]),
    (",i->i", [(), (3,)]),
    ("->", [()]),
    ("ij,jk->ik", [(2, 0), (0, 3)]),
    ("ij,jk->ik", [(0, 2), (2, 3)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]),
    ("i...->i", [(3, 2, 4)]),
    ("...ii->...i", [(2, 3, 3)]),
    ("b...,b...->...", [(2, 3), (2, 1)]),
    ("...ij,...jk", [(2, 1, 3, 4), (3, 4, 5)]),
    ("...ij,...jk->ik", [(2, 3, 4), (2, 4, 5)]),
    ("bij,bkj->bik", [(8, 32, 16), (8, 24, 16)]),
    ("abc,cd,de->abe", [(4, 5, 6), (6, 7), (7, 3)]),
    ("ij->...ji", [(3, 4)]),
]

# Malformed specs: torch raises, oxmera must raise InvalidArgument.
BAD = [
    ("ij,jk->ik", [(3, 4)]),
    ("ijk,jk->i", [(3, 4), (4, 5)]),
    ("i1,jk->ik", [(3, 4), (4, 5)]),
    ("ij,jk->iz", [(3, 4), (4, 5)]),
    ("ij,jk->ii", [(3, 4), (4, 5)]),
    ("ij,jk->ik", [(3, 4), (5, 2)]),
    ("ij->ji->ij", [(3, 4)]),
    ("ii->i", [(3, 4)]),
    ("i.j->i", [(3, 4)]),
]


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parity_common"))
from protocol import encode, parse  # noqa: E402  (shared with the other parity scripts)


def close(got, want, rtol):
    want = np.asarray(want, dtype=np.float64).reshape(-1)
    got = np.asarray(got, dtype=np.float64).reshape(-1)
    if got.shape != want.shape:
        return False, "size %s vs %s" % (got.shape, want.shape)
    if want.size == 0:
        return True, ""
    scale = np.abs(want).max()
    err = np.abs(got - want)
    bad = err > rtol * (np.abs(want) + scale) + 1e-300
    if bad.any():
        j = int(np.argmax(err))
        return False, "worst at %d: got %r want %r" % (j, got[j], want[j])
    return True, ""


def main():
    if len(sys.argv) < 2:
        print("usage: test_einsum_parity.py DRIVER [-v]")
        return 2
    driver, verbose = sys.argv[1], "-v" in sys.argv[2:]
    cases, lines = [], []
    for dtype in ("f64", "f32"):
        for spec, shapes in TABLE:
            arrays = [rng.standard_normal(s) for s in shapes]
            if dtype == "f32":
                arrays = [a.astype(np.float32).astype(np.float64) for a in arrays]
            tspec = spec.replace("_", " ")
            ts = [torch.tensor(a, dtype=TORCH_OF[dtype], requires_grad=True) for a in arrays]
            out = torch.einsum(tspec, *ts)
            seed = rng.standard_normal(tuple(out.shape))
            if out.numel() > 0:
                out.backward(torch.tensor(seed, dtype=TORCH_OF[dtype]))
            grads = [t.grad.double().numpy() if t.grad is not None else np.zeros(t.shape) for t in ts]
            # k: terms summed per output element (for the f32 tolerance)
            k = max(1, int(np.prod([max(s) for s in shapes if s] or [1])))
            cases.append(("ok", spec, dtype, out.detach().double().numpy(), grads, k))
            lines.append(encode(len(lines), spec, dtype, arrays, seed if out.numel() > 0 else np.zeros(0)))
        for spec, shapes in BAD:
            arrays = [rng.standard_normal(s) for s in shapes]
            try:
                torch.einsum(spec, *[torch.tensor(a, dtype=TORCH_OF[dtype]) for a in arrays])
                torch_raises = False
            except Exception:  # noqa: BLE001
                torch_raises = True
            cases.append(("bad", spec, dtype, torch_raises, None, 1))
            lines.append(encode(len(lines), spec, dtype, arrays, np.zeros(0)))
    res = subprocess.run([driver], input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=240)
    if res.returncode != 0:
        print(res.stderr)
        print("einsum parity: driver failed with exit code %d" % res.returncode)
        return 1
    got = {}
    for line in res.stdout.splitlines():
        cid, status, payload = parse(line)
        got[int(cid)] = (status, payload)
    passed = failed = 0
    for i, (kind, spec, dtype, want, grads, k) in enumerate(cases):
        status, payload = got.get(i, ("MISSING", ""))
        what = "%s [%s]" % (spec.replace("_", " "), dtype)
        msgs = []
        if kind == "bad":
            if not want:
                msgs.append("torch accepts this malformed spec")
            if status != "ERR" or not payload.startswith("InvalidArgument"):
                msgs.append("expected InvalidArgument, got %s %s" % (status, payload))
        elif status != "OK":
            msgs.append("%s %s" % (status, payload))
        else:
            out, g = payload
            rtol = 1e-10 if dtype == "f64" else 1e-5 * math.sqrt(k)
            if tuple(out.shape) != tuple(want.shape):
                msgs.append("shape %s vs torch %s" % (out.shape, want.shape))
            ok, m = close(out, want, rtol)
            if not ok:
                msgs.append("value " + m)
            if want.size > 0:
                for j, (gg, gw) in enumerate(zip(g, grads)):
                    ok, m = close(gg, gw, rtol)
                    if not ok:
                        msgs.append("grad %d %s" % (j, m))
        if msgs:
            failed += 1
            print("FAIL %s: %s" % (what, "; ".join(msgs)))
        else:
            passed += 1
            if verbose:
                print("ok   %s" % what)
    print("einsum parity: %d passed, %d failed (torch %s)" % (passed, failed, torch.__version__))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
