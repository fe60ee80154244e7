#!/usr/bin/env python3
"""torch 1.13 twin of BM_CholeskyLogdet: forward + backward of logdet via Cholesky on [3, 64, n, n] f32.

Prints one line per size: `torch_cholesky_logdet n=<n> median_us=<t>`. Run with the same thread count as
oxmera (torch.set_num_threads(N) and OMP_NUM_THREADS / OPENBLAS_NUM_THREADS = N).
"""
import sys
import time

import torch


def bench(n, reps=200):
    torch.manual_seed(7)
    x = torch.randn(3, 64, n, n)
    a = (x @ x.transpose(-2, -1) / n + 0.5 * torch.eye(n)).detach().requires_grad_()
    times = []
    for i in range(reps + 20):
        t0 = time.perf_counter()
        y = (2.0 * torch.linalg.cholesky(a).diagonal(dim1=-2, dim2=-1).log().sum(-1)).sum()
        y.backward()
        a.grad = None
        t1 = time.perf_counter()
        if i >= 20:
            times.append(t1 - t0)
    times.sort()
    return times[len(times) // 2] * 1e6


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    torch.set_num_threads(threads)
    for n in (4, 16):
        print(f"torch_cholesky_logdet n={n} median_us={bench(n):.1f}", flush=True)


if __name__ == "__main__":
    main()
