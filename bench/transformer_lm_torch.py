#!/usr/bin/python3
"""PyTorch twin of examples/transformer_lm.cpp: the same character-level GPT-style model (token and learned
position embeddings, pre-norm nn.TransformerEncoderLayer blocks with GELU and a causal mask, final LayerNorm,
Linear head tied to the token embedding or not), from the same initial parameters, on the same windows, all read
from the exchange file `transformer_lm --dump-init FILE` writes (the parameters under torch's names, "data.ids":
the text's token ids, "data.offsets": [steps, batch] window starts, and lr, weight_decay, clip, seq, d_model,
heads, layers, ff, tie, vocab as metadata). Trains with cross entropy, AdamW (weight decay on the parameters with
two or more dimensions only) and clip_grad_norm_, printing "step K loss L" for every step, in the parameters'
dtype, then "time T ms/step over steps 2-N" as the example does.

Usage: transformer_lm_torch.py --init FILE [--steps N] [--threads 1] [--save-init OUT [--seed S]]
  --save-init OUT  starts from torch's own initialisation instead of the file's parameters (torch.manual_seed(S),
                   the layers' default init, then N(0, 0.02) embeddings as the example), writes those parameters
                   to OUT (safetensors, the tied weight once) for `transformer_lm --init OUT`, and trains from
                   them on the file's windows.
Needs numpy and torch (1.13's layers take the causal mask as a float mask, not is_causal); the file is read by
digits_cnn_torch.read_safetensors and OUT written by its write_safetensors (the twins share them).
"""
import argparse
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from digits_cnn_torch import read_safetensors, write_safetensors  # noqa: E402  (the twins' one reader/writer)


class GPT(nn.Module):
    def __init__(self, vocab, seq, d_model, heads, layers, ff, tie):
        super().__init__()
        self.tok_embed = nn.Embedding(vocab, d_model)
        self.pos_embed = nn.Embedding(seq, d_model)
        self.blocks = nn.ModuleList([
            nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=ff, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True) for _ in range(layers)])
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)
        if tie:
            self.head.weight = self.tok_embed.weight

    def forward(self, x):  # [B, T] -> [B, T, V]
        t = x.shape[1]
        h = self.tok_embed(x) + self.pos_embed(torch.arange(t))
        dtype = self.head.weight.dtype
        causal = torch.triu(torch.full((t, t), float("-inf"), dtype=dtype), diagonal=1)
        for block in self.blocks:
            h = block(h, src_mask=causal)
        return self.head(self.norm(h))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--init", required=True)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--save-init", default="")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    tensors, meta = read_safetensors(args.init)
    ids, offsets = tensors.pop("data.ids"), tensors.pop("data.offsets")
    seq, lr, clip, wd = int(meta["seq"]), float(meta["lr"]), float(meta["clip"]), float(meta["weight_decay"])
    tie = meta["tie"] == "1"
    dtype = tensors["tok_embed.weight"].dtype
    torch.manual_seed(args.seed)
    model = GPT(int(meta["vocab"]), seq, int(meta["d_model"]), int(meta["heads"]), int(meta["layers"]),
                int(meta["ff"]), tie)
    model.to(dtype)
    if args.save_init:
        with torch.no_grad():
            model.tok_embed.weight.normal_(0.0, 0.02)
            model.pos_embed.weight.normal_(0.0, 0.02)
        state = {k: v for k, v in model.state_dict().items() if not (tie and k == "head.weight")}
        write_safetensors(args.save_init, state, {"source": "transformer_lm_torch.py --save-init"})
    else:
        if tie:  # the dump holds the tied tensor once, under its first name
            assert "head.weight" not in tensors, "a tied model's dump lists head.weight"
            tensors["head.weight"] = tensors["tok_embed.weight"]
        model.load_state_dict(tensors, strict=True)
    params = list(model.parameters())
    opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": wd},
                             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}], lr=lr)
    steps = args.steps or offsets.shape[0]
    assert steps <= offsets.shape[0], (steps, offsets.shape)
    t = torch.arange(seq).unsqueeze(0)
    for step in range(steps):
        at = offsets[step].unsqueeze(1) + t  # [batch, seq]
        x, y = ids[at], ids[at + 1]
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[2]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()
        print(f"step {step + 1} loss {loss.item():.17g}", flush=True)
        if step == 0:
            after_first = time.perf_counter()
    if steps >= 2:  # the example's timing line: wall time of steps 2..N
        ms = (time.perf_counter() - after_first) * 1e3 / (steps - 1)
        print(f"time {ms:.3f} ms/step over steps 2-{steps}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
