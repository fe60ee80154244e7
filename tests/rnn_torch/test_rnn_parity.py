"""RNN / LSTM / GRU of oxmera (rnn_driver) against torch 1.13 with torch's weights loaded by name from a
safetensors state dict: outputs, final states and gradients (input, initial states, every parameter) within
1e-5 (f32) / 1e-10 (f64), for num_layers 2, bidirectional, batch_first, no bias, initial states given and absent.
Usage: test_rnn_parity.py <rnn_driver>"""
import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib

try:
    import numpy as np
    import torch
except Exception as e:  # noqa: BLE001
    print(f"rnn parity: skipped (cannot import torch: {e})")
    sys.exit(77)

NP = {"F64": np.float64, "F32": np.float32}


def write(path, items):
    header, blobs, off = {}, [], 0
    for name, arr in items.items():
        dt = "F64" if arr.dtype == np.float64 else "F32"
        b = np.ascontiguousarray(arr).astype(np.dtype(NP[dt]).newbyteorder("<")).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(data[b:e], dtype=np.dtype(NP[info["dtype"]]).newbyteorder("<")).reshape(
            info["shape"])
    return out


def case(driver, work, kind, dtype, I, H, L, bidir, bf, bias, state, T=5, B=3, unbatched=False):
    torch.manual_seed(zlib.crc32(repr((kind, dtype, L, bidir, bf, bias, state, unbatched)).encode()))
    tdt = torch.float64 if dtype == "f64" else torch.float32
    if kind == "lstm":
        m = torch.nn.LSTM(I, H, L, bias=bias, batch_first=bf, bidirectional=bidir)
    elif kind == "gru":
        m = torch.nn.GRU(I, H, L, bias=bias, batch_first=bf, bidirectional=bidir)
    else:
        m = torch.nn.RNN(I, H, L, nonlinearity=kind[4:], bias=bias, batch_first=bf, bidirectional=bidir)
    m = m.to(tdt)
    D = 2 if bidir else 1
    xs = (T, I) if unbatched else ((B, T, I) if bf else (T, B, I))
    ss = (L * D, H) if unbatched else (L * D, B, H)
    x = torch.randn(xs, dtype=tdt, requires_grad=True)
    items = {k: v.detach().numpy() for k, v in m.state_dict().items()}
    items["x"] = x.detach().numpy()
    h0 = c0 = None
    if state:
        h0 = torch.randn(ss, dtype=tdt, requires_grad=True)
        items["h0"] = h0.detach().numpy()
        if kind == "lstm":
            c0 = torch.randn(ss, dtype=tdt, requires_grad=True)
            items["c0"] = c0.detach().numpy()
    if kind == "lstm":
        out, (h, c) = m(x, (h0, c0)) if state else m(x)
    else:
        out, h = m(x, h0) if state else m(x)
        c = None
    gout, gh = torch.randn_like(out), torch.randn_like(h)
    items["gout"], items["gh"] = gout.numpy(), gh.numpy()
    loss = (out * gout).sum() + (h * gh).sum()
    if c is not None:
        gc = torch.randn_like(c)
        items["gc"] = gc.numpy()
        loss = loss + (c * gc).sum()
    loss.backward()
    want = {"out": out, "h_n": h, "grad.x": x.grad}
    if c is not None:
        want["c_n"] = c
    if state:
        want["grad.h0"] = h0.grad
        if c0 is not None:
            want["grad.c0"] = c0.grad
    for k, p in m.named_parameters():
        want["grad." + k] = p.grad
    fin, fout = os.path.join(work, "in.safetensors"), os.path.join(work, "out.safetensors")
    write(fin, items)
    args = [driver, kind, dtype, str(I), str(H), str(L), str(int(bidir)), str(int(bf)), str(int(bias)), fin, fout]
    r = subprocess.run(args, capture_output=True, text=True)
    name = f"{kind} {dtype} L={L} bidir={bidir} batch_first={bf} bias={bias} state={state} unbatched={unbatched}"
    if r.returncode != 0:
        return [f"{name}: driver failed: {r.stderr.strip()}"]
    got = read(fout)
    tol = 1e-10 if dtype == "f64" else 1e-5
    errs = []
    if set(got) != set(want):
        errs.append(f"{name}: keys differ: oxmera {sorted(got)} torch {sorted(want)}")
    for k, w in want.items():
        if k not in got:
            continue
        w = w.detach().numpy()
        g = got[k]
        if g.shape != w.shape:
            errs.append(f"{name}: {k}: shape {g.shape} vs torch {w.shape}")
            continue
        err = np.max(np.abs(g.astype(np.float64) - w) / (1 + np.abs(w))) if w.size else 0
        if not err <= tol:
            errs.append(f"{name}: {k}: max rel error {err:.3g} > {tol}")
    return errs


def main():
    driver = sys.argv[1]
    failures, n = [], 0
    with tempfile.TemporaryDirectory() as work:
        for kind in ("lstm", "gru", "rnn_tanh", "rnn_relu"):
            for dtype in ("f32", "f64"):
                for L, bidir, bf, bias, state in ((1, False, False, True, False), (2, True, False, True, True),
                                                  (2, False, True, True, True), (1, True, True, False, False),
                                                  (2, True, True, True, False)):
                    failures += case(driver, work, kind, dtype, 4, 6, L, bidir, bf, bias, state)
                    n += 1
                failures += case(driver, work, kind, dtype, 4, 6, 2, True, False, True, True, unbatched=True)
                n += 1
    for f in failures:
        print("rnn parity:", f)
    if failures:
        sys.exit(1)
    print(f"rnn parity: {n} cases (outputs, final states, input/state/parameter gradients, state dict by name) "
          f"match torch {torch.__version__}")


if __name__ == "__main__":
    main()
