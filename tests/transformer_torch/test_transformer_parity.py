#!/usr/bin/python3
"""Parity of nn::TransformerDecoderLayer, TransformerEncoder, TransformerDecoder and Transformer against torch 1.13's
modules of the same names, f32 and f64 (Module::to).

Per case this script builds the torch module, replaces every parameter with random values, and writes one
safetensors file (its own json/struct/numpy writer): torch's state_dict under "sd.<name>" (the C++ side loads it
by name with nn::load(prefix "sd.", strict)), the inputs, the masks (BOOL for bool masks) and the backward seed
"gout". The driver writes the output and the gradients of the inputs and of every parameter to another file.
Dropout is 0 (or the modules are in eval mode) so the results are deterministic.

Usage: /usr/bin/python3 test_transformer_parity.py PATH/TO/transformer_torch_parity_driver [-v]
Tolerance |got - want| <= 1e-5 (f32) / 1e-10 (f64) * (1 + max|want|). Exits 1 on any failure, 77 without torch.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except Exception:  # noqa: BLE001
    print("transformer parity: skipped (python3-torch or numpy not installed)")
    sys.exit(77)

torch.set_num_threads(1)
rng = np.random.default_rng(int(os.environ.get("PARITY_SEED", "1517")))
TOL = {"f32": 1e-5, "f64": 1e-10}
ST = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64", np.dtype(np.bool_): "BOOL", np.dtype(np.uint8): "U8"}
NP = {"F32": np.float32, "F64": np.float64, "U8": np.uint8, "BOOL": np.uint8, "I64": np.int64}


def write_st(path, tensors):
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr)
        b = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": ST[arr.dtype], "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_st(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        arr = np.frombuffer(raw[8 + n + b:8 + n + e], dtype=np.dtype(NP[info["dtype"]]).newbyteorder("<"))
        out[name] = arr.reshape(info["shape"]).astype(np.float64)
    return out


# Mask kinds: 0 none; 1 bool (True = not allowed); 2 the causal flag (torch 1.13 has none: it gets the causal bool
# mask); 3 float, added; 4 Transformer.generate_square_subsequent_mask (the driver builds its own). Key padding
# masks: 0 none, 1 bool, 2 float.
def attn_mask(kind, L, S, name, arrs, dt):
    if kind == 0:
        return None
    if kind == 1:
        m = rng.random((L, S)) < 0.3
        m[:, 0] = False  # no row fully masked (softmax of all -inf is NaN in both)
        arrs[name] = m
        return torch.tensor(m)
    if kind == 2:
        return torch.tensor(np.triu(np.ones((L, S), dtype=bool), 1))
    if kind == 3:
        arrs[name] = rng.standard_normal((L, S)).astype(dt)
        return torch.tensor(arrs[name])
    return torch.nn.Transformer.generate_square_subsequent_mask(L).to(torch.float64 if dt == np.float64 else
                                                                      torch.float32)


def kp_mask(kind, N, S, name, arrs, dt):
    if kind == 0:
        return None
    shape = (N, S) if N else (S,)
    if kind == 1:
        m = rng.random(shape) < 0.3
        m[..., 0] = False
        arrs[name] = m
        return torch.tensor(m)
    arrs[name] = rng.standard_normal(shape).astype(dt)
    return torch.tensor(arrs[name])


def seq(T, N, d, bf, dt):
    if N == 0:
        return rng.standard_normal((T, d)).astype(dt)
    return rng.standard_normal((N, T, d) if bf else (T, N, d)).astype(dt)


def layer_kwargs(c):
    return dict(dim_feedforward=c["ff"], dropout=0.1 if c.get("eval") else 0.0,
                activation="gelu" if c["gelu"] else "relu", batch_first=bool(c["bf"]), norm_first=bool(c["nf"]))


def build(kind, c):
    d, h = c["d"], c["h"]
    if kind == "declayer":
        return torch.nn.TransformerDecoderLayer(d, h, **layer_kwargs(c))
    if kind == "encoder":
        norm = torch.nn.LayerNorm(d) if c["norm"] else None
        return torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(d, h, **layer_kwargs(c)), c["n"], norm)
    if kind == "decoder":
        norm = torch.nn.LayerNorm(d) if c["norm"] else None
        return torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(d, h, **layer_kwargs(c)), c["n"], norm)
    return torch.nn.Transformer(d, h, num_encoder_layers=c["ne"], num_decoder_layers=c["nd"], **layer_kwargs(c))


def base(**kw):
    c = dict(d=8, h=2, ff=16, gelu=0, bf=0, nf=0, T=5, S=6, N=3, eval=0)
    c.update(kw)
    return c


# (kind, config); mask keys: tm tgt_mask, mm memory_mask, sm src_mask (kinds above), tk / mk / sk key padding masks.
# torch 1.13 cannot combine a float key padding mask with an attention mask in one attention (masked_fill wants a
# bool mask), so the float key padding masks appear only where that attention has no other mask.
CASES = [
    ("declayer", base()),
    ("declayer", base(nf=1, gelu=1)),
    ("declayer", base(bf=1, tm=2, tk=1)),
    ("declayer", base(bf=1, nf=1, tm=4, mk=1)),
    ("declayer", base(tm=1, mm=1, tk=1, mk=1)),
    ("declayer", base(mm=1, tk=2, mk=1)),
    ("declayer", base(mm=2, tk=1)),
    ("declayer", base(gelu=1, tm=3, mm=3, mk=1, h=4)),
    ("declayer", base(N=0, tm=2, mk=1)),
    ("declayer", base(eval=1, tm=4, tk=1, mk=1)),
    ("encoder", base(n=2, norm=1)),
    ("encoder", base(n=3, norm=0, nf=1, gelu=1, bf=1, sm=2, sk=1)),
    ("encoder", base(n=2, norm=1, bf=1, sk=2, eval=1)),
    ("encoder", base(n=2, norm=1, sm=3, sk=1)),
    ("decoder", base(n=2, norm=1, tm=4, mk=1)),
    ("decoder", base(n=2, norm=0, nf=1, bf=1, tm=2, tk=1, mm=1)),
    ("decoder", base(n=3, norm=1, gelu=1, tm=3, tk=1, mk=2, eval=1)),
    ("transformer", base(ne=2, nd=2, tm=4)),
    ("transformer", base(ne=1, nd=2, nf=1, gelu=1, bf=1, tm=2, sk=1, tk=1, mk=1)),
    ("transformer", base(ne=2, nd=1, sm=1, sk=1, tm=3, mm=3, mk=1, eval=1)),
    ("transformer", base(ne=1, nd=1, sk=2, tk=2, mk=2)),
    ("transformer", base(ne=1, nd=1, N=0, tm=4, mk=1)),
    ("transformer", base(ne=1, nd=1, N=1, bf=1, tm=4, sk=1, mk=1)),
]


def run_case(kind, c, tag, dt, path):
    torch_dt = torch.float64 if dt == np.float64 else torch.float32
    m = build(kind, c).to(torch_dt)
    if c.get("eval"):
        m.eval()
    with torch.no_grad():  # torch's init leaves biases zero and the copies equal: random values test their use
        for p in m.parameters():
            p.copy_(torch.tensor(rng.standard_normal(tuple(p.shape)) * 0.5))
    arrs = {"sd." + k: v.detach().numpy().astype(dt) for k, v in m.state_dict().items()}
    T, S, N, d, bf = c["T"], c["S"], c["N"], c["d"], c["bf"]
    ins = {}
    if kind == "encoder":
        arrs["src"] = seq(S, N, d, bf, dt)
        ins["src"] = torch.tensor(arrs["src"], requires_grad=True)
        sm = attn_mask(c.get("sm", 0), S, S, "src_mask", arrs, dt)
        sk = kp_mask(c.get("sk", 0), N, S, "src_kpm", arrs, dt)
        out = m(ins["src"], mask=sm, src_key_padding_mask=sk)
    else:
        if kind == "transformer":
            arrs["src"] = seq(S, N, d, bf, dt)
            ins["src"] = torch.tensor(arrs["src"], requires_grad=True)
        else:
            arrs["memory"] = seq(S, N, d, bf, dt)
            ins["memory"] = torch.tensor(arrs["memory"], requires_grad=True)
        arrs["tgt"] = seq(T, N, d, bf, dt)
        ins["tgt"] = torch.tensor(arrs["tgt"], requires_grad=True)
        tm = attn_mask(c.get("tm", 0), T, T, "tgt_mask", arrs, dt)
        mm = attn_mask(c.get("mm", 0), T, S, "memory_mask", arrs, dt)
        tk = kp_mask(c.get("tk", 0), N, T, "tgt_kpm", arrs, dt)
        mk = kp_mask(c.get("mk", 0), N, S, "memory_kpm", arrs, dt)
        masks = dict(tgt_mask=tm, memory_mask=mm, tgt_key_padding_mask=tk, memory_key_padding_mask=mk)
        if kind == "transformer":
            sm = attn_mask(c.get("sm", 0), S, S, "src_mask", arrs, dt)
            sk = kp_mask(c.get("sk", 0), N, S, "src_kpm", arrs, dt)
            out = m(ins["src"], ins["tgt"], src_mask=sm, src_key_padding_mask=sk, **masks)
        else:
            out = m(ins["tgt"], ins["memory"], **masks)
    arrs["gout"] = rng.standard_normal(tuple(out.shape)).astype(dt)
    (out * torch.tensor(arrs["gout"])).sum().backward()
    want = {"out": out.detach().double().numpy()}
    for name, t in ins.items():
        want["grad." + name] = t.grad.double().numpy()
    for name, p in m.named_parameters():
        want["grad." + name] = p.grad.double().numpy()
    write_st(path, arrs)
    cfg = " ".join(f"{k}={int(v)}" for k, v in c.items())
    return want, cfg


def main():
    driver, verbose = sys.argv[1], "-v" in sys.argv[2:]
    work = tempfile.mkdtemp(prefix="oxm_transformer_parity_")
    try:
        cases, lines = [], []
        for tag, dt in (("f32", np.float32), ("f64", np.float64)):
            for i, (kind, c) in enumerate(CASES):
                cid = f"{tag}.{kind}{i}"
                inp, outp = os.path.join(work, cid + ".in.safetensors"), os.path.join(work, cid + ".out.safetensors")
                want, cfg = run_case(kind, c, tag, dt, inp)
                cases.append((cid, want, TOL[tag], outp))
                lines.append(f"{cid} {kind} {tag} {inp} {outp} {cfg}")
        res = subprocess.run([driver], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True)
        status = {ln.split()[0]: ln.split(None, 1)[1] for ln in res.stdout.splitlines() if ln.strip()}
        passed = failed = 0
        for cid, want, tol, outp in cases:
            st = status.get(cid, "missing")
            ok, msg = st == "OK", ("" if st == "OK" else st)
            if ok:
                got = read_st(outp)
                if set(got) != set(want):
                    ok, msg = False, f"names {sorted(got)} != {sorted(want)}"
                else:
                    for name, w in want.items():
                        g = got[name]
                        err = float(np.max(np.abs(g - w))) if w.size and g.shape == w.shape else 0.0
                        if g.shape != w.shape or not err <= tol * (1 + np.max(np.abs(w))):
                            ok, msg = False, f"{name}: shape {g.shape} vs {w.shape}, max err {err:.3g}"
                            break
            passed += ok
            failed += not ok
            if verbose or not ok:
                print(("ok   " if ok else "FAIL ") + cid + (" " + msg if msg else ""))
        print(f"transformer parity: {passed} passed, {failed} failed")
        return 1 if failed or passed == 0 else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
