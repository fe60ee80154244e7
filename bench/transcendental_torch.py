"""PyTorch twin of oxmera_bench's BM_Tx cases: each op forward (no grad) and forward + backward with a given output
gradient on [1024, 4096] f32, inputs uniform in the same ranges. Prints `<op>/<fwd|fwdbwd> <min ms over reps>` per
line (each rep: the mean of a timed loop of at least MIN_TIME seconds).
Usage: transcendental_torch.py [threads] [reps] [min_time_s] [filter]"""
import sys
import time

import torch
import torch.nn.functional as F

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
min_time = float(sys.argv[3]) if len(sys.argv) > 3 else 0.3
only = sys.argv[4] if len(sys.argv) > 4 else ""
torch.set_num_threads(threads)
torch.manual_seed(0)

OPS = [  # name, inputs, lo, hi, f  (the table of bench/bench_ops.cpp's tx::kOps)
    ("exp", 1, -4, 4, lambda x, b: torch.exp(x)),
    ("log", 1, 0.01, 10, lambda x, b: torch.log(x)),
    ("tanh", 1, -4, 4, lambda x, b: torch.tanh(x)),
    ("erf", 1, -4, 4, lambda x, b: torch.erf(x)),
    ("sigmoid", 1, -8, 8, lambda x, b: torch.sigmoid(x)),
    ("gelu", 1, -4, 4, lambda x, b: F.gelu(x)),
    ("gelu_tanh", 1, -4, 4, lambda x, b: F.gelu(x, approximate="tanh")),
    ("silu", 1, -8, 8, lambda x, b: F.silu(x)),
    ("softplus", 1, -8, 8, lambda x, b: F.softplus(x)),
    ("sin", 1, -10, 10, lambda x, b: torch.sin(x)),
    ("cos", 1, -10, 10, lambda x, b: torch.cos(x)),
    ("pow", 2, 0.1, 4, lambda x, b: torch.pow(x, b)),
]


def timed(fn):
    fn()
    best = float("inf")
    for _ in range(reps):
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            el = time.perf_counter() - t0
            if el >= min_time:
                break
        best = min(best, el / n)
    return best * 1e3


shape = (1024, 4096)
for name, inputs, lo, hi, f in OPS:
    if only and only not in name:
        continue
    x0 = torch.rand(shape) * (hi - lo) + lo
    b0 = torch.rand(shape) * 4 - 2
    g = torch.randn(shape)

    def fwd():
        with torch.no_grad():
            f(x0, b0)

    x = x0.clone().requires_grad_()
    b = b0.clone().requires_grad_(inputs == 2)

    def fwdbwd():
        x.grad = None
        b.grad = None
        f(x, b).backward(g)

    print("%s/fwd %.4f" % (name, timed(fwd)), flush=True)
    print("%s/fwdbwd %.4f" % (name, timed(fwdbwd)), flush=True)
