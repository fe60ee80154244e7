#!/usr/bin/python3
"""PyTorch twin of examples/lstm_lm.cpp: the same character-level Embedding-LSTM-Linear model, from the same
initial parameters, on the same windows, all read from the exchange file `lstm_lm --dump-init FILE` writes (the
parameters under torch's names, "data.ids": the text's token ids, "data.offsets": [steps, batch] window starts,
and lr, clip, seq, embed, hidden, vocab as metadata). Trains with cross entropy, Adam and clip_grad_norm_,
printing "step K loss L" for every step, in the parameters' dtype.

Usage: lstm_lm_torch.py --init FILE [--steps N] [--threads 1]
Needs numpy and torch; the file is read by digits_cnn_torch.read_safetensors (the twins share it).
"""
import argparse
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from digits_cnn_torch import read_safetensors  # noqa: E402  (the twins' one safetensors reader)


class CharLM(nn.Module):
    def __init__(self, vocab, embed, hidden):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, x):
        out, _ = self.lstm(self.embed(x))
        return self.head(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--init", required=True)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    tensors, meta = read_safetensors(args.init)
    ids, offsets = tensors.pop("data.ids"), tensors.pop("data.offsets")
    seq, lr, clip = int(meta["seq"]), float(meta["lr"]), float(meta["clip"])
    model = CharLM(int(meta["vocab"]), int(meta["embed"]), int(meta["hidden"]))
    model.to(tensors["head.weight"].dtype)
    model.load_state_dict(tensors, strict=True)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    steps = args.steps or offsets.shape[0]
    assert steps <= offsets.shape[0], (steps, offsets.shape)
    t = torch.arange(seq).unsqueeze(1)
    for step in range(steps):
        at = offsets[step].unsqueeze(0) + t  # [seq, batch]
        x, y = ids[at], ids[at + 1]
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[2]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        print(f"step {step + 1} loss {loss.item():.17g}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
