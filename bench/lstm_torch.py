"""Twin of bench/lstm_step.cpp: torch.nn.LSTM(64, 64), sequence 32, batch 16, mse loss, SGD(lr 0.1).
  lstm_torch.py init FILE         writes the initial state dict and data (safetensors)
  lstm_torch.py run FILE STEPS T  times STEPS training steps at T threads (after 5 warm-up steps)"""
import json
import struct
import sys
import time

import numpy as np
import torch


def write(path, items):
    header, blobs, off = {}, [], 0
    for name, arr in items.items():
        b = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
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
    return {k: torch.from_numpy(np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]], dtype="<f4")
                                .reshape(v["shape"]).copy()) for k, v in header.items() if k != "__metadata__"}


def main():
    if sys.argv[1] == "init":
        torch.manual_seed(0)
        m = torch.nn.LSTM(64, 64)
        items = {k: v.detach().numpy() for k, v in m.state_dict().items()}
        items["data.x"] = torch.randn(32, 16, 64).numpy()
        items["data.y"] = torch.randn(32, 16, 64).numpy()
        write(sys.argv[2], items)
        return
    steps, threads = int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(threads)
    f = read(sys.argv[2])
    x, y = f.pop("data.x"), f.pop("data.y")
    m = torch.nn.LSTM(64, 64)
    m.load_state_dict(f)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    times, losses = [], []
    for s in range(5 + steps):
        t0 = time.perf_counter()
        out, _ = m(x)
        loss = torch.nn.functional.mse_loss(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        t1 = time.perf_counter()
        losses.append(loss.item())
        if s >= 5:
            times.append((t1 - t0) * 1e6)
    t = sorted(times)
    n = len(t)
    print(f"lstm threads={threads} steps={n} median_us={t[n // 2]:.2f} p10_us={t[n // 10]:.2f} "
          f"p90_us={t[n * 9 // 10]:.2f} loss={losses[-1]:.6f}")
    print("losses " + " ".join(f"{v:.7f}" for v in losses))


if __name__ == "__main__":
    main()
