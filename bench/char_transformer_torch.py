#!/usr/bin/python3
"""The character-level transformer LM step of issue #13, in PyTorch, and the data/initial weights both sides use.

  char_transformer_torch.py init FILE          writes FILE (safetensors): initial parameters, the token stream and
                                               the batch offsets, from a fixed seed
  char_transformer_torch.py run FILE STEPS [THREADS [layers]]
                                               trains STEPS steps from FILE and prints the timing line
                                               and the losses (the same format as bench/char_transformer.cpp);
                                               with `layers` the blocks are nn.TransformerEncoderLayer
                                               (norm_first, GELU, batch_first, a float causal mask), same weights

Model: 2 pre-LayerNorm blocks, d_model 64, 4 heads, causal self-attention written by hand (as a user of today's
oxmera primitives must), GELU MLP (4x, exact GELU as nn.GELU()), final LayerNorm, linear head; cross entropy,
AdamW (lr 3e-3, weight_decay 0.01), gradient clipping at 1.0; batch 16, context 64, vocabulary 65.
One timed step = forward + loss + zero_grad + backward + clip + optimizer step. See ../shared/spec/measuring.md.
"""
import json
import math
import struct
import sys
import time

import torch
import torch.nn.functional as F

V, D, H, L, T, B = 65, 64, 4, 2, 64, 16
MAX_STEPS = 400


def param_shapes():
    s = {"tok_emb": (V, D), "pos_emb": (T, D)}
    for i in range(L):
        p = f"h{i}."
        s.update({p + "ln1.weight": (D,), p + "ln1.bias": (D,), p + "qkv.weight": (3 * D, D), p + "qkv.bias": (3 * D,),
                  p + "proj.weight": (D, D), p + "proj.bias": (D,), p + "ln2.weight": (D,), p + "ln2.bias": (D,),
                  p + "fc1.weight": (4 * D, D), p + "fc1.bias": (4 * D,), p + "fc2.weight": (D, 4 * D),
                  p + "fc2.bias": (D,)})
    s.update({"ln_f.weight": (D,), "ln_f.bias": (D,), "head.weight": (V, D), "head.bias": (V,)})
    return s


def init(path):
    g = torch.Generator().manual_seed(1234)
    tensors = {}
    for name, shape in param_shapes().items():
        if name.endswith("ln1.weight") or name.endswith("ln2.weight") or name == "ln_f.weight":
            t = torch.ones(shape)
        elif name.endswith(".bias"):
            t = torch.zeros(shape)
        else:
            t = torch.randn(*shape, generator=g) * 0.02
        tensors[name] = t.float()
    # A token stream from a sparse random Markov chain (learnable structure), and the batch start offsets.
    n_tokens = 20000
    nxt = torch.randint(0, V, (V, 4), generator=g)
    choice = torch.randint(0, 4, (n_tokens,), generator=g)
    toks = [0]
    for i in range(1, n_tokens):
        toks.append(int(nxt[toks[-1], choice[i]]))
    tensors["data.tokens"] = torch.tensor(toks, dtype=torch.int64)
    tensors["data.offsets"] = torch.randint(0, n_tokens - T - 1, (MAX_STEPS, B), generator=g)
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        raw = t.contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32" if t.dtype == torch.float32 else "I64", "shape": list(t.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        a, b = e["data_offsets"]
        dt = torch.float32 if e["dtype"] == "F32" else torch.int64
        out[name] = torch.frombuffer(bytearray(data[a:b]), dtype=dt).reshape(e["shape"]).clone()
    return out


def forward(P, idx):
    b, t = idx.shape
    x = F.embedding(idx, P["tok_emb"]) + P["pos_emb"][:t]
    causal = torch.arange(t).unsqueeze(1) >= torch.arange(t).unsqueeze(0)
    for i in range(L):
        p = f"h{i}."
        h = F.layer_norm(x, (D,), P[p + "ln1.weight"], P[p + "ln1.bias"])
        qkv = F.linear(h, P[p + "qkv.weight"], P[p + "qkv.bias"]).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(D // H)
        att = torch.where(causal, att, torch.tensor(float("-inf"))).softmax(-1)
        y = torch.matmul(att, v).permute(0, 2, 1, 3).reshape(b, t, D)
        x = x + F.linear(y, P[p + "proj.weight"], P[p + "proj.bias"])
        h = F.layer_norm(x, (D,), P[p + "ln2.weight"], P[p + "ln2.bias"])
        h = F.gelu(F.linear(h, P[p + "fc1.weight"], P[p + "fc1.bias"]))
        x = x + F.linear(h, P[p + "fc2.weight"], P[p + "fc2.bias"])
    x = F.layer_norm(x, (D,), P["ln_f.weight"], P["ln_f.bias"])
    return F.linear(x, P["head.weight"], P["head.bias"])


TORCH_NAMES = {"ln1.weight": "norm1.weight", "ln1.bias": "norm1.bias", "qkv.weight": "self_attn.in_proj_weight",
               "qkv.bias": "self_attn.in_proj_bias", "proj.weight": "self_attn.out_proj.weight",
               "proj.bias": "self_attn.out_proj.bias", "ln2.weight": "norm2.weight", "ln2.bias": "norm2.bias",
               "fc1.weight": "linear1.weight", "fc1.bias": "linear1.bias", "fc2.weight": "linear2.weight",
               "fc2.bias": "linear2.bias"}


def layer_model(f):
    # The same blocks as torch layers (q, k, v stacked in in_proj_weight as the hand-written view reads them).
    P = {n: f[n].clone().requires_grad_() for n in ("tok_emb", "pos_emb", "ln_f.weight", "ln_f.bias", "head.weight",
                                                    "head.bias")}
    blocks = []
    for i in range(L):
        blk = torch.nn.TransformerEncoderLayer(D, H, 4 * D, dropout=0.0, activation="gelu", batch_first=True,
                                               norm_first=True)
        sd = {theirs: f[f"h{i}." + ours] for ours, theirs in TORCH_NAMES.items()}
        blk.load_state_dict(sd)
        blocks.append(blk)
    mask = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)

    def fwd(idx):
        t = idx.shape[1]
        x = F.embedding(idx, P["tok_emb"]) + P["pos_emb"][:t]
        for blk in blocks:
            x = blk(x, src_mask=mask[:t, :t])
        x = F.layer_norm(x, (D,), P["ln_f.weight"], P["ln_f.bias"])
        return F.linear(x, P["head.weight"], P["head.bias"])
    return fwd, list(P.values()) + [p for blk in blocks for p in blk.parameters()]


def run(path, steps, threads, layers=False):
    torch.set_num_threads(threads)
    f = load(path)
    names = list(param_shapes())
    if layers:
        model, params = layer_model(f)
    else:
        P = {n: f[n].clone().requires_grad_() for n in names}
        params = [P[n] for n in names]

        def model(idx):
            return forward(P, idx)
    toks, offsets = f["data.tokens"], f["data.offsets"]
    opt = torch.optim.AdamW(params, lr=3e-3, weight_decay=0.01)
    arange_t = torch.arange(T + 1)
    warmup, times, losses = 5, [], []
    clock = time.perf_counter_ns
    for s in range(warmup + steps):
        rows = toks[offsets[s % MAX_STEPS].unsqueeze(1) + arange_t]
        x, y = rows[:, :T], rows[:, 1:]
        t0 = clock()
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(B * T, V), y.reshape(B * T))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        t1 = clock()
        losses.append(loss.item())
        if s >= warmup:
            times.append((t1 - t0) / 1000.0)
    times.sort()
    n = len(times)
    print(f"chartf threads={threads} steps={n} median_us={times[n // 2]:.2f} mean_us={sum(times) / n:.2f} "
          f"p10_us={times[n // 10]:.2f} p90_us={times[n * 9 // 10]:.2f} loss={losses[-1]:.6f}", flush=True)
    print("losses " + " ".join(f"{v:.7f}" for v in losses), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "init":
        init(sys.argv[2])
    else:
        run(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 1,
            len(sys.argv) > 5 and sys.argv[5] == "layers")
