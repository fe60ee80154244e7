#!/usr/bin/python3
"""PyTorch twin of examples/digits_cnn.cpp: the same CNN on the same digits, from the same initial parameters and
in the same batch order, both read from the exchange file that `digits_cnn --dump-init FILE` writes (the
parameters under torch's nn.Sequential names, "data.order": every epoch's training indices into the IDX files in
visit order, and the batch size, learning rate, epoch count and training-set size as metadata).

Usage: digits_cnn_torch.py --data DIR --init FILE [--steps N] [--threads 1]
  --steps N  trains N steps, printing "step K loss L" as digits_cnn --steps does; without it trains every epoch
             of the order and prints each epoch's mean loss and the test accuracy (test: the examples that are not
             in the first epoch's order).
Needs numpy and torch (Debian's python3-numpy, python3-torch); the files are read with struct/json/numpy here.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    raw = open(path, "rb").read()
    zero, type_code, rank = struct.unpack(">HBB", raw[:4])
    assert zero == 0, path
    dims = struct.unpack(">" + "I" * rank, raw[4:4 + 4 * rank])
    dtype = {0x08: ">u1", 0x0D: ">f4"}[type_code]
    return np.frombuffer(raw, dtype=dtype, offset=4 + 4 * rank).reshape(dims)


def read_safetensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    dtypes = {"F32": "<f4", "F64": "<f8", "I64": "<i8", "U8": "u1"}
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        data = np.frombuffer(raw[8 + n + begin:8 + n + end], dtype=dtypes[info["dtype"]])
        tensors[name] = torch.from_numpy(data.reshape(info["shape"]).copy())
    return tensors, meta


def write_safetensors(path, tensors, meta=None):
    """Writes {name: tensor} (F32, F64, I64, U8; little-endian, C order) and string metadata as a safetensors
    file that oxmera::load_safetensors reads: 8-byte header length, JSON header, then the data in order."""
    names = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64", torch.uint8: "U8"}
    header, blobs, at = {}, [], 0
    for name, t in tensors.items():
        raw = t.detach().contiguous().cpu().numpy().tobytes()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    if meta:
        header["__metadata__"] = {k: str(v) for k, v in meta.items()}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as the format recommends
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def make_model():
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(32 * 2 * 2, 10))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--init", required=True)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    images = read_idx(os.path.join(args.data, "digits-images-idx3-ubyte"))
    labels = read_idx(os.path.join(args.data, "digits-labels-idx1-ubyte"))
    x = torch.from_numpy(images.astype(np.float32)).reshape(-1, 1, 8, 8) / 16.0
    y = torch.from_numpy(labels.astype(np.int64))
    tensors, meta = read_safetensors(args.init)
    order = tensors.pop("data.order")
    batch, lr, epochs, n_train = int(meta["batch"]), float(meta["lr"]), int(meta["epochs"]), int(meta["n_train"])
    assert order.numel() == epochs * n_train, (order.numel(), epochs, n_train)

    model = make_model()
    model.load_state_dict(tensors, strict=True)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    step = 0
    for epoch in range(epochs):
        visit = order[epoch * n_train:(epoch + 1) * n_train]
        losses = []
        for b in range(0, n_train, batch):
            idx = visit[b:b + batch]
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            losses.append(loss.item())
            if args.steps:
                print(f"step {step} loss {loss.item():.9g}")
                if step == args.steps:
                    return 0
        test = torch.ones(len(y), dtype=torch.bool)
        test[order[:n_train]] = False
        with torch.no_grad():
            acc = (model(x[test]).argmax(1) == y[test]).double().mean().item()
        print(f"epoch {epoch + 1} loss {sum(losses) / len(losses):.4f} test accuracy {acc:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
