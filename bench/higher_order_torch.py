#!/usr/bin/python3
"""PyTorch twin of bench/higher_order.cpp (same workloads, same output format); see that file.

Usage: higher_order_torch.py [threads] [steps] [only: hvp|fxhvp|wgan|all]
"""
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn


def report(name, threads, us, check):
    us = sorted(us)
    n = len(us)
    print(f"{name} threads={threads} steps={n} median_us={us[n // 2]:.2f} mean_us={sum(us) / n:.2f} "
          f"p10_us={us[n // 10]:.2f} p90_us={us[n * 9 // 10]:.2f} check={check:.6g}", flush=True)


def time_steps(name, threads, warmup, steps, body):
    us = []
    check = 0.0
    for s in range(warmup + steps):
        t0 = time.perf_counter()
        c = body(s)
        t1 = time.perf_counter()
        if s >= warmup:
            us.append((t1 - t0) * 1e6)
        if s + 1 == warmup + steps:
            check = c
    report(name, threads, us, check)


def make_mlp(out):
    return nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, out))


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    only = sys.argv[3] if len(sys.argv) > 3 else "all"
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    warmup = max(20, steps // 10)
    if only in ("all", "hvp", "fxhvp"):
        net = make_mlp(2)
        params = list(net.parameters())
        xs = [torch.randn(32, 2) for _ in range(8)]
        ys = [torch.tensor([(i * 7 + b) % 2 for i in range(32)]).view(32, 1) for b in range(8)]
        vs = [torch.randn(p.shape) for p in params]

        def nll(x, y):
            return -torch.log_softmax(net(x), 1).gather(1, y).mean()

        def hvp(s):
            b = s % len(xs)
            g = torch.autograd.grad(nll(xs[b], ys[b]), params, create_graph=True)
            dot = (g[0] * vs[0]).sum()
            for gi, vi in zip(g[1:], vs[1:]):
                dot = dot + (gi * vi).sum()
            hv = torch.autograd.grad(dot, params)
            return hv[0].sum().item()

        def fxhvp(s):
            b = s % len(xs)

            def f(*p):
                h = torch.tanh(F.linear(xs[b], p[0], p[1]))
                h = torch.tanh(F.linear(h, p[2], p[3]))
                return -torch.log_softmax(F.linear(h, p[4], p[5]), 1).gather(1, ys[b]).mean()

            return torch.autograd.functional.hvp(f, tuple(params), tuple(vs))[1][0].sum().item()

        if only != "fxhvp":
            time_steps("hvp", threads, warmup, steps, hvp)
        if only != "hvp":
            time_steps("fxhvp", threads, warmup, steps, fxhvp)
    if only in ("all", "wgan"):
        critic = make_mlp(1)
        opt = torch.optim.Adam(critic.parameters(), lr=1e-4, betas=(0.5, 0.9))
        real = [torch.randn(64, 2) for _ in range(8)]
        fake = [torch.randn(64, 2) + 1.0 for _ in range(8)]
        eps = [torch.rand(64, 1) for _ in range(8)]

        def wgan(s):
            b = s % len(real)
            xhat = (eps[b] * real[b] + (1.0 - eps[b]) * fake[b]).requires_grad_(True)
            gx = torch.autograd.grad(critic(xhat).sum(), xhat, create_graph=True)[0]
            gp = ((gx.norm(2, dim=1) - 1.0) ** 2).mean()
            loss = critic(fake[b]).mean() - critic(real[b]).mean() + 10.0 * gp
            opt.zero_grad(set_to_none=True)  # what oxmera's zero_grad does
            loss.backward()
            opt.step()
            return loss.item()

        time_steps("wgan", threads, warmup, steps, wgan)


if __name__ == "__main__":
    main()
