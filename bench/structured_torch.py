"""torch twin of bench_ops.cpp's structured-op benchmarks (BM_CausalMaskedFill ... BM_Repeat2x2): the same
shapes and calls, forward only, f32, best of --repeats timings of --iters calls, in microseconds per call.
Run by bench/structured_compare.sh (1 thread, alternating with oxmera)."""
import sys
import time

import torch


def best_us(f, iters, repeats):
    f()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            f()
        best = min(best, (time.perf_counter() - t0) / iters)
    return best * 1e6


def main():
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    torch.set_num_threads(1)
    torch.manual_seed(0)
    x = torch.randn(1024, 1024)
    s = torch.randn(16, 4, 64, 64)
    mask = torch.ones(64, 64).triu(1).bool()
    cases = {
        "BM_CausalMaskedFill": lambda: s.masked_fill(mask, float("-inf")),
        "BM_Tril": lambda: x.tril(),
        "BM_CumsumRows": lambda: x.cumsum(1),
        "BM_SortRows": lambda: x.sort(dim=1, stable=True)[0],
        "BM_Topk5Rows": lambda: x.topk(5, 1)[0],
        "BM_VarRows": lambda: x.var(1),
        "BM_NormRows": lambda: torch.linalg.vector_norm(x, 2, dim=1),
        "BM_FlipCols": lambda: x.flip(1),
        "BM_Repeat2x2": lambda: x.repeat(2, 2),
    }
    with torch.no_grad():
        for name, f in cases.items():
            print("%s %.1f" % (name, best_us(f, iters, repeats)))


if __name__ == "__main__":
    main()
