"""Forward outputs and gradients (input, parameters) and updated buffers of oxmera's new layers against torch 1.13
with the weights oxmera printed (layers_driver), in f32 (1e-5) and f64 through Module::to(DType::F64) (1e-10).
torch 1.13 has no RMSNorm: it is written out from torch ops as torch 2.4 defines it (eps None: finfo(dtype).eps).
Usage: test_layers_parity.py <layers_driver>"""
import subprocess
import sys

try:
    import torch
    from torch import nn
    import torch.nn.functional as F
except Exception as e:  # noqa: BLE001
    print(f"layers parity: skipped (cannot import torch: {e})")
    sys.exit(77)


class RMSNorm(nn.Module):
    def __init__(self, shape, eps=None, affine=True):
        super().__init__()
        self.shape = tuple(shape)
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(self.shape)) if affine else None

    def forward(self, x):
        eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
        dims = tuple(range(-len(self.shape), 0))
        y = x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps)
        return y * self.weight if self.weight is not None else y


def build(name):
    return {
        "conv1d": lambda: nn.Conv1d(4, 6, 3, stride=2, padding=1, dilation=2, groups=2),
        "conv1d_nobias": lambda: nn.Conv1d(3, 2, 2, bias=False),
        "conv_transpose2d": lambda: nn.ConvTranspose2d(4, 6, (2, 3), stride=(2, 1), padding=(1, 0),
                                                       output_padding=(1, 0), groups=2, dilation=(1, 2)),
        "conv_transpose2d_plain": lambda: nn.ConvTranspose2d(3, 2, 3),
        "batchnorm1d_2d": lambda: nn.BatchNorm1d(3),
        "batchnorm1d_3d": lambda: nn.BatchNorm1d(3, eps=1e-3, momentum=0.2),
        "groupnorm": lambda: nn.GroupNorm(2, 6),
        "groupnorm_noaffine": lambda: nn.GroupNorm(3, 3, eps=1e-3, affine=False),
        "rmsnorm": lambda: RMSNorm([4]),
        "rmsnorm_eps2d": lambda: RMSNorm([5, 4], 1e-3),
        "adaptive_avg_pool2d": lambda: nn.AdaptiveAvgPool2d((3, 4)),
        "embedding_padding": lambda: nn.Embedding(6, 3, padding_idx=2),
        "gelu": lambda: nn.GELU(),
        "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
        "silu": lambda: nn.SiLU(),
        "mish": lambda: nn.Mish(),
        "softplus": lambda: nn.Softplus(beta=2.0, threshold=1.0),
        "elu": lambda: nn.ELU(0.5),
        "leaky_relu": lambda: nn.LeakyReLU(0.2),
        "hardtanh": lambda: nn.Hardtanh(-0.5, 0.5),
        "softmax": lambda: nn.Softmax(dim=1),
        "log_softmax": lambda: nn.LogSoftmax(dim=0),
        "identity": lambda: nn.Identity(),
        "model": lambda: nn.Sequential(nn.Conv1d(2, 4, 3), nn.BatchNorm1d(4), nn.SiLU(), nn.Flatten(),
                                       nn.Linear(12, 2)),
    }[name]()


def parse(out):
    cases = []
    for line in out.splitlines():
        parts = line.split()
        if parts[0] == "CASE":
            cases.append((parts[1], parts[2], {}))
        else:
            tag, dims = parts[1], parts[2]
            shape = [] if dims == "-" else [int(d) for d in dims.split(",")]
            vals = [float(v) for v in parts[3:]]
            cases[-1][2][tag] = torch.tensor(vals, dtype=torch.float64).reshape(shape)
    return cases


def main():
    out = subprocess.run([sys.argv[1]], check=True, capture_output=True, text=True).stdout
    failures = checked = 0
    for name, dt, t in parse(out):
        dtype = torch.float64 if dt == "f64" else torch.float32
        tol = 1e-10 if dt == "f64" else 1e-5
        m = build(name).to(dtype)
        m.train()
        sd = {k[2:]: v.to(m.state_dict()[k[2:]].dtype) for k, v in t.items() if k.startswith("P:")}
        assert set(sd) == set(m.state_dict()), (name, sorted(sd), sorted(m.state_dict()))
        m.load_state_dict(sd)
        if name == "embedding_padding":
            x = t["X"].long()
        else:
            x = t["X"].to(dtype).requires_grad_()
        y = m(x)
        y.backward(t["C"].to(dtype))
        want = {"Y": y}
        if x.requires_grad:
            want["GX"] = x.grad
        for k, p in m.named_parameters():
            want["G:" + k] = p.grad if p.grad is not None else torch.zeros_like(p)
        for k, b in m.named_buffers():
            want["B:" + k] = b
        for k, ref in want.items():
            checked += 1
            if k not in t:
                print(f"FAIL {name} {dt} {k}: not printed by oxmera")
                failures += 1
                continue
            got, ref = t[k], ref.detach().to(torch.float64)
            if got.shape != ref.shape:
                print(f"FAIL {name} {dt} {k}: shape {list(got.shape)} vs torch {list(ref.shape)}")
                failures += 1
                continue
            err = (got - ref).abs().max().item() if ref.numel() else 0.0
            if not err <= tol * max(1.0, ref.abs().max().item() if ref.numel() else 0.0):
                print(f"FAIL {name} {dt} {k}: max abs error {err:.3g} > {tol}")
                failures += 1
    print(f"layers parity: {checked - failures} passed, {failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
