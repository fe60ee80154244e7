#!/usr/bin/python3
"""PyTorch twin of `oxmera bench research` (the research workload, ../shared/spec/research-workload.md).

Reads the exchange file written by `oxmera bench research --dump FILE` (data, per-epoch batch orders and
initial parameters), trains the same three fits with R stacked replicas in idiomatic PyTorch (batched
matmul/einsum over R, torch.linalg batched ops, torch.optim), and prints the same summary:

  fit  time  train_loss per replica  held-out metric per replica

Definitions (identical to src/workloads/research.hpp):
  - loss of a step = sum over replicas of each replica's mean loss over the batch;
  - train_loss = unweighted mean over the last epoch's batches of each replica's batch-mean loss;
  - time = optimizer construction .. held-out metric on the host (training + evaluation), per fit;
  - fit 1 in f32, fits 2/3 in --dtype (f64 by default; f32 to mirror `oxmera bench research --dtype f32`,
    which is what a GPU run trains in); held-out k-DPP NLL in f64 (L widened to f64 where it was built) with
    eigvalsh + the e_k recurrence.

Run with /usr/bin/python3 here (the interpreter that has torch 1.13); any newer torch, CPU or CUDA, works.
Usage:
  research_torch.py --data FILE [--threads N] [--fit all|mlp-h16|linear-lag5|deepsets-H30] [--out JSON]
                    [--device cpu|cuda] [--dtype f64|f32] [--verify-order]
"""
import argparse
import json
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

K = 4  # set size
M = 16  # items (series)
BATCH = 64

_DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "U8": np.uint8}


def load_safetensors(path):
    """Minimal numpy safetensors reader: returns ({name: ndarray}, metadata)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    base = 8 + n
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        arr = np.frombuffer(blob, dtype=_DTYPES[info["dtype"]], count=(end - begin) // np.dtype(_DTYPES[info["dtype"]]).itemsize,
                            offset=base + begin)
        out[name] = arr.reshape(info["shape"]).copy()
    return out, meta


def epoch_order(n, seed):
    """SplitMix64 + Fisher-Yates, as in src/workloads/batch_order.cpp (used only to verify the dumped orders)."""
    mask = (1 << 64) - 1
    s = seed & mask
    p = list(range(n))
    for i in range(n - 1, 0, -1):
        s = (s + 0x9E3779B97F4A7C15) & mask
        z = s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        z ^= z >> 31
        j = z % (i + 1)
        p[i], p[j] = p[j], p[i]
    return p


DEV = torch.device("cpu")  # set by --device
DPP_DTYPE = torch.float64  # set by --dtype


def tensor(a, dtype=None):
    x = torch.from_numpy(a)
    return x.to(device=DEV, dtype=dtype or x.dtype)


def leaves(t, prefix, names, dtype=None):
    return [tensor(t[prefix + "." + n], dtype).clone().requires_grad_(True) for n in names]


class LossLog:
    def __init__(self):
        self.first, self.last = [], []

    def add(self, first, last, per):
        if first:
            self.first.append(per.detach())
        if last:
            self.last.append(per.detach())

    def result(self):
        f = torch.stack(self.first).double().mean(0).tolist()
        l = torch.stack(self.last).double().mean(0).tolist()
        return f, l


def fit_mlp(t, meta, epochs, R):
    ntr = int(meta["mlp.n_train"])
    x, y = tensor(t["mlp.x"]), tensor(t["mlp.y"])
    xtr, ytr, xte, yte = x[:ntr], y[:ntr], x[ntr:], y[ntr:]
    orders = tensor(t["mlp.order"])
    W1, b1, W2, b2 = params = leaves(t, "mlp-h16", ["W1", "b1", "W2", "b2"])

    t0 = time.perf_counter()
    opt = torch.optim.Adam(params, lr=1e-2)
    log = LossLog()
    for e in range(epochs):
        order = orders[e]
        for s in range(0, ntr, BATCH):
            bi = order[s:s + BATCH]
            xb, yb = xtr.index_select(0, bi), ytr.index_select(0, bi)
            h = torch.tanh(xb @ W1 + b1)  # [R, B, 16]
            logits = h @ W2 + b2  # [R, B, 1]
            per = F.binary_cross_entropy_with_logits(logits, yb.expand(R, -1, -1), reduction="none").mean((1, 2))
            loss = per.sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            log.add(e == 0, e == epochs - 1, per)
    first, last = log.result()
    with torch.no_grad():
        logits = torch.tanh(xte @ W1 + b1) @ W2 + b2  # [R, nte, 1]
        acc = ((logits[..., 0] > 0) == (yte[:, 0] > 0.5)).double().mean(1).tolist()
    return {"name": "mlp-h16", "seconds": time.perf_counter() - t0, "first_epoch_loss": first,
            "train_loss": last, "metric_name": "accuracy", "metric": acc}


def logdet_chol(a):
    return torch.linalg.cholesky(a).diagonal(dim1=-2, dim2=-1).log().sum(-1) * 2.0


class Dpp:
    def __init__(self, t, meta, R):
        self.R = R
        self.ntr = int(meta["dpp.n_train"])
        Fx, Y = tensor(t["dpp.F"], DPP_DTYPE), tensor(t["dpp.Y"])
        self.Ftr, self.Ytr, self.Fte, self.Yte = Fx[:self.ntr], Y[:self.ntr], Fx[self.ntr:], Y[self.ntr:]
        self.orders = tensor(t["dpp.order"])
        self.eye = torch.eye(M, dtype=DPP_DTYPE, device=DEV)

    def kernel(self, q, V):
        S = V @ V.transpose(-1, -2) + self.eye * 1e-3  # [R, 16, 16]
        return q * S.unsqueeze(1) * q.transpose(-1, -2)  # [R, B, 16, 16]

    @staticmethod
    def principal(L, Yb):
        ar = torch.arange(Yb.shape[0], device=Yb.device)
        return L[:, ar[:, None, None], Yb[:, :, None], Yb[:, None, :]]  # [R, B, 4, 4]

    def nll(self, Fb, Yb, V, quality):
        L = self.kernel(quality(Fb), V)
        logZ = logdet_chol(L + self.eye)  # [R, B]
        return (logZ - logdet_chol(self.principal(L, Yb))).mean(1)

    def train(self, opt, V, quality, epochs):
        log = LossLog()
        for e in range(epochs):
            order = self.orders[e]
            for s in range(0, self.ntr, BATCH):
                bi = order[s:s + BATCH]
                per = self.nll(self.Ftr.index_select(0, bi), self.Ytr.index_select(0, bi), V, quality)
                loss = per.sum()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                log.add(e == 0, e == epochs - 1, per)
        return log.result()

    def metric(self, V, quality):
        with torch.no_grad():
            L = self.kernel(quality(self.Fte), V).double()
            ldY = logdet_chol(self.principal(L, self.Yte))  # [R, B]
            lam = torch.linalg.eigvalsh(L)  # [R, B, 16]
            E = [torch.ones_like(lam[..., 0])] + [torch.zeros_like(lam[..., 0]) for _ in range(K)]
            for n in range(M):
                ln = lam[..., n]
                for j in range(K, 0, -1):
                    E[j] = E[j] + ln * E[j - 1]
            return (-ldY + torch.log(E[K])).mean(1).tolist()


def fit_lag(t, meta, epochs, R):
    d = Dpp(t, meta, R)
    w, b, V = params = leaves(t, "linear-lag5", ["w", "b", "V"], DPP_DTYPE)

    def quality(Fb):
        B = Fb.shape[0]
        z = (Fb.reshape(B * M, -1) @ w).view(R, B, M, 1) + b  # [R, B, 16, 1]
        return torch.exp(z * 0.5)

    t0 = time.perf_counter()
    opt = torch.optim.Adam(params, lr=1e-2)
    first, last = d.train(opt, V, quality, epochs)
    metric = d.metric(V, quality)
    return {"name": "linear-lag5", "seconds": time.perf_counter() - t0, "first_epoch_loss": first,
            "train_loss": last, "metric_name": "kdpp_nll", "metric": metric}


def fit_ds(t, meta, epochs, R):
    d = Dpp(t, meta, R)
    A, a, C, dd, V = leaves(t, "deepsets-H30", ["A", "a", "C", "d", "V"], DPP_DTYPE)

    def quality(Fb):
        phi = torch.relu(torch.einsum("bid,rdh->rbih", Fb, A) + a)  # [R, B, 16, 30]
        ctx = phi.mean(2, keepdim=True).expand(-1, -1, M, -1)
        z = torch.einsum("rbih,rho->rbio", torch.cat([phi, ctx], -1), C) + dd  # [R, B, 16, 1]
        return torch.exp(z * 0.5)

    t0 = time.perf_counter()
    opt = torch.optim.AdamW([{"params": [A, C, V], "weight_decay": 1e-4},
                             {"params": [a, dd], "weight_decay": 0.0}], lr=1e-2)
    first, last = d.train(opt, V, quality, epochs)
    metric = d.metric(V, quality)
    return {"name": "deepsets-H30", "seconds": time.perf_counter() - t0, "first_epoch_loss": first,
            "train_loss": last, "metric_name": "kdpp_nll", "metric": metric}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="exchange file from `oxmera bench research --dump`")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "1")))
    ap.add_argument("--fit", default="all", choices=["all", "mlp-h16", "linear-lag5", "deepsets-H30"])
    ap.add_argument("--out", default="")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--dtype", default="f64", choices=["f64", "f32"], help="training dtype of fits 2/3")
    ap.add_argument("--verify-order", action="store_true", help="recompute the dumped batch orders (slow)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    global DEV, DPP_DTYPE
    DEV = torch.device(args.device)
    DPP_DTYPE = torch.float64 if args.dtype == "f64" else torch.float32

    t, meta = load_safetensors(args.data)
    epochs, R, seed = int(meta["epochs"]), int(meta["replicas"]), int(meta["seed"])
    if args.verify_order:
        for key, n in (("mlp.order", int(meta["mlp.n_train"])), ("dpp.order", int(meta["dpp.n_train"]))):
            for e in range(epochs):
                if list(t[key][e]) != epoch_order(n, seed + e):
                    sys.exit(f"research_torch: {key} epoch {e} differs from SplitMix64 + Fisher-Yates")
        print("batch orders verified", file=sys.stderr)

    fits = []
    for name, fn in (("mlp-h16", fit_mlp), ("linear-lag5", fit_lag), ("deepsets-H30", fit_ds)):
        if args.fit in ("all", name):
            fits.append(fn(t, meta, epochs, R))

    fmt = lambda v: "[" + ", ".join(f"{x:.9g}" for x in v) + "]"
    print(f"pytorch research: torch {torch.__version__}, device {args.device}, dtype {args.dtype}, epochs {epochs}, replicas {R}, seed {seed}, "
          f"threads {torch.get_num_threads()}")
    total = 0.0
    for f in fits:
        total += f["seconds"]
        print(f"{f['name']:<13} time {f['seconds']:.3f} s  train_loss {fmt(f['train_loss'])}  "
              f"{f['metric_name']} {fmt(f['metric'])}")
    print(f"{'total':<13} time {total:.3f} s")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"implementation": "pytorch", "torch": torch.__version__, "device": args.device,
                       "dtype": args.dtype, "epochs": epochs, "replicas": R,
                       "seed": seed, "threads": torch.get_num_threads(), "total_seconds": total, "fits": fits},
                      fh, indent=2)


if __name__ == "__main__":
    main()
