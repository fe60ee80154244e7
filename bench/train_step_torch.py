#!/usr/bin/python3
"""PyTorch twin of bench/train_step.cpp: time per training step (forward + loss + zero_grad + backward +
Adam step) of the same two models, with the same batch shapes and step counts.

Usage: /usr/bin/python3 bench/train_step_torch.py [threads] [mlp_steps] [cnn_steps] [mlp|cnn|all]
Run with OPENBLAS_CORETYPE=SkylakeX ATEN_CPU_CAPABILITY=avx512 OMP_NUM_THREADS=N OPENBLAS_NUM_THREADS=N
(see ../shared/spec/measuring.md). zero_grad uses set_to_none=True, which is what oxmera's zero_grad does
(torch 1.13's default is False, i.e. memset the old gradients); Adam uses torch 1.13's defaults
(foreach=None -> single-tensor loop).
"""
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_batches(n_batches, xshape, classes, seed):
    g = torch.Generator().manual_seed(seed)
    out = []
    for b in range(n_batches):
        x = torch.randn(*xshape, generator=g)
        y = (torch.arange(xshape[0]) * 7 + b) % classes
        out.append((x, y))
    return out


def run(name, net, batches, threads, warmup, steps):
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    times = []
    clock = time.perf_counter_ns
    nb = len(batches)
    for s in range(warmup + steps):
        x, y = batches[s % nb]
        t0 = clock()
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        t1 = clock()
        if s >= warmup:
            times.append((t1 - t0) / 1000.0)
    times.sort()
    n = len(times)
    print(f"{name} threads={threads} steps={n} median_us={times[n // 2]:.2f} mean_us={sum(times) / n:.2f} "
          f"p10_us={times[n // 10]:.2f} p90_us={times[n * 9 // 10]:.2f} loss={loss.item():.4f}", flush=True)


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    mlp_steps = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    cnn_steps = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    only = sys.argv[4] if len(sys.argv) > 4 else "all"
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    if only in ("all", "mlp"):
        mlp = nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 2))
        run("mlp", mlp, make_batches(8, (32, 2), 2, 1), threads, 200, mlp_steps)
    if only in ("all", "cnn"):
        cnn = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                            nn.Flatten(), nn.Linear(16 * 7 * 7, 10))
        run("cnn", cnn, make_batches(4, (64, 1, 28, 28), 10, 100), threads, 20, cnn_steps)


if __name__ == "__main__":
    main()
