"""Compares what torch users observe of modules (repr, state_dict names/order/shapes, named_parameters with a
tied weight, parameter counts) between oxmera (nn_driver) and torch 1.13, for the same two models.

Differences accepted on purpose (docs/LIMITATIONS.md): booleans print as C++'s true/false.
Usage: test_nn_parity.py <nn_driver>"""
import subprocess
import sys

try:
    import torch
    from torch import nn
except Exception as e:  # noqa: BLE001
    print(f"nn parity: skipped (cannot import torch: {e})")
    sys.exit(77)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 4)) for _ in range(2)])
        self.heads = nn.ModuleDict({"a": nn.Linear(4, 2), "b": nn.Sigmoid()})
        self.norm = nn.LayerNorm(4)
        self.conv = nn.Conv2d(2, 4, (3, 1), stride=2, dilation=(1, 2), groups=2, bias=False)
        self.pool = nn.AvgPool2d((2, 3))
        self.bn = nn.BatchNorm2d(3, eps=1e-3, momentum=0.05, affine=False)
        self.embed = nn.Embedding(10, 4)
        self.decoder = nn.Linear(4, 10)
        self.decoder.weight = self.embed.weight


def models():
    cnn = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                        nn.Linear(64, 10, bias=False), nn.Dropout(0.25), nn.LayerNorm(10))
    return {"cnn": cnn, "net": Net()}


def torch_view(m):
    r = repr(m).replace("True", "true").replace("False", "false")
    state = [(k, ",".join(str(d) for d in v.shape) or "-") for k, v in m.state_dict().items()]
    params = [k for k, _ in m.named_parameters()]
    numel = sum(p.numel() for p in m.parameters())
    return r, state, params, numel


def parse(out):
    lines = out.splitlines()
    i = 0
    res = {}
    while i < len(lines):
        name = lines[i].split()[1]
        n = int(lines[i + 1].split()[1])
        r = "\n".join(lines[i + 2:i + 2 + n])
        i += 2 + n
        n = int(lines[i].split()[1])
        state = [tuple(l.split()) for l in lines[i + 1:i + 1 + n]]
        i += 1 + n
        n = int(lines[i].split()[1])
        params = lines[i + 1:i + 1 + n]
        i += 1 + n
        numel = int(lines[i].split()[1])
        i += 1
        res[name] = (r, state, params, numel)
    return res


def main():
    out = subprocess.run([sys.argv[1]], check=True, capture_output=True, text=True).stdout
    ours = parse(out)
    failures = 0
    for name, m in models().items():
        want = torch_view(m)
        got = ours[name]
        for what, w, g in zip(("repr", "state_dict", "named_parameters", "parameter count"), want, got):
            if w != g:
                failures += 1
                print(f"nn parity: {name}: {what} differs\n  torch:  {w!r}\n  oxmera: {g!r}")
    if failures:
        sys.exit(1)
    print(f"nn parity: {len(ours)} models, repr / state_dict / named_parameters / counts match torch {torch.__version__}")


main()
