#!/usr/bin/python3
"""Parity of nn::MultiheadAttention (and nn::TransformerEncoderLayer) against torch 1.13's nn.MultiheadAttention with the same weights (torch's
state_dict, loaded by name): output, attention weights and the gradients of query, key, value and every
parameter: MHA in f32 and in f64 (Module::to), the encoder layer in f32.

Usage: /usr/bin/python3 test_mha_parity.py PATH/TO/mha_torch_parity_driver [-v]
Tolerance |got - want| <= 1e-5 (f32) / 1e-10 (f64) * (1 + max|want|). Exits 1 on any failure, 77 without torch.
"""
import os
import subprocess
import sys

try:
    import numpy as np
    import torch
except Exception:  # noqa: BLE001
    print("mha parity: skipped (python3-torch or numpy not installed)")
    sys.exit(77)

torch.set_num_threads(1)
rng = np.random.default_rng(int(os.environ.get("PARITY_SEED", "1516")))
TOL, TOL64 = 1e-5, 1e-10
# (E, H, kdim, vdim, bias, batch_first, need_weights, average, mask, kpm, L, S, N); N = 0: unbatched.
# mask: 0 none, 1 bool attn_mask, 2 is_causal (torch gets the explicit causal mask), 3 float; kpm: 0/1 bool/2 float.
TABLE = [
    (8, 2, 0, 0, 1, 0, 1, 1, 0, 0, 5, 7, 3),
    (8, 2, 0, 0, 1, 0, 0, 1, 0, 0, 5, 7, 3),
    (8, 2, 0, 0, 1, 1, 1, 1, 0, 0, 5, 7, 3),
    (8, 2, 0, 0, 1, 1, 0, 1, 0, 0, 5, 7, 3),
    (12, 3, 0, 0, 1, 0, 1, 0, 0, 0, 4, 6, 2),
    (8, 4, 0, 0, 1, 1, 1, 1, 1, 0, 6, 6, 2),
    (8, 4, 0, 0, 1, 1, 0, 1, 1, 0, 6, 6, 2),
    (8, 4, 0, 0, 1, 0, 1, 1, 2, 0, 6, 6, 2),
    (8, 4, 0, 0, 1, 0, 0, 1, 2, 0, 6, 6, 2),
    (8, 2, 0, 0, 1, 0, 1, 1, 3, 0, 5, 7, 3),
    (8, 2, 0, 0, 1, 0, 0, 1, 3, 0, 5, 7, 3),
    (8, 2, 0, 0, 1, 1, 1, 1, 0, 1, 5, 7, 3),
    (8, 2, 0, 0, 1, 1, 0, 1, 0, 1, 5, 7, 3),
    (8, 2, 0, 0, 1, 0, 1, 0, 0, 2, 5, 7, 3),
    (8, 2, 0, 0, 1, 0, 0, 1, 0, 2, 5, 7, 3),
    (8, 2, 0, 0, 1, 0, 1, 1, 2, 1, 6, 6, 3),
    (8, 2, 0, 0, 1, 1, 0, 1, 2, 1, 6, 6, 3),
    (8, 2, 6, 5, 1, 0, 1, 1, 0, 1, 5, 7, 3),
    (8, 2, 6, 5, 0, 1, 0, 1, 0, 0, 5, 7, 3),
    (8, 2, 0, 0, 0, 0, 1, 1, 0, 0, 5, 7, 3),
    (8, 2, 0, 0, 1, 0, 1, 1, 0, 1, 5, 7, 0),
    (8, 2, 0, 0, 1, 0, 0, 0, 1, 0, 5, 5, 0),
    # key padding mask with a batch of one / unbatched through the fused path
    (8, 2, 0, 0, 1, 0, 0, 1, 0, 1, 5, 7, 1),
    (8, 2, 0, 0, 1, 0, 0, 1, 0, 1, 5, 7, 0),
]


# TransformerEncoderLayer (dropout 0): (d_model, nhead, dim_feedforward, gelu, batch_first, norm_first, mask, kpm,
# L, N)
ENC_TABLE = [(8, 2, 16, 0, 0, 0, 0, 0, 5, 3), (8, 2, 16, 1, 1, 0, 2, 1, 6, 2), (8, 4, 12, 0, 1, 1, 1, 0, 5, 3),
             (8, 2, 16, 1, 0, 1, 0, 2, 5, 3), (8, 2, 16, 0, 0, 0, 3, 1, 5, 2)]


def fmt(name, a):
    a = np.asarray(a, dtype=np.float64)
    return " ".join([name, str(a.ndim)] + [str(d) for d in a.shape] + [repr(float(x)) for x in a.ravel()])


def main():
    driver, verbose = sys.argv[1], "-v" in sys.argv[2:]
    cases, lines = [], []
    for dt, tag in ((torch.float32, "f32"), (torch.float64, "f64")):
        for i, (E, H, kd, vd, bias, bf, nw, avg, mask, kpm, L, S, N) in enumerate(TABLE):
            kdim, vdim = kd or E, vd or E
            m = torch.nn.MultiheadAttention(E, H, bias=bool(bias), batch_first=bool(bf),
                                            kdim=kd or None, vdim=vd or None).to(dt)
            with torch.no_grad():  # torch's init leaves biases zero: random values test their use
                for p in m.parameters():
                    p.copy_(torch.tensor(rng.standard_normal(tuple(p.shape)) * 0.5))
            arrs = {k: v.detach().double().numpy() for k, v in m.state_dict().items()}

            def seq(T, F):
                if N == 0:
                    return rng.standard_normal((T, F))
                return rng.standard_normal((N, T, F) if bf else (T, N, F))
            arrs["query"], arrs["key"], arrs["value"] = seq(L, E), seq(S, kdim), seq(S, vdim)
            if mask == 1:
                am = rng.random((L, S)) < 0.3
                am[:, 0] = False
                arrs["attn_mask"] = am.astype(np.float64)
            if mask == 2:
                am = np.triu(np.ones((L, S), dtype=bool), 1)
            if mask == 3:
                am = rng.standard_normal((N * H, L, S) if N and i % 2 else (L, S))
                arrs["attn_mask"] = am
            if kpm:
                shape = (N, S) if N else (S,)
                kp = rng.random(shape) < 0.3 if kpm == 1 else rng.standard_normal(shape)
                if kpm == 1:
                    kp[..., 0] = False
                arrs["kpm"] = kp.astype(np.float64)
            qt = torch.tensor(arrs["query"], dtype=dt, requires_grad=True)
            kt = torch.tensor(arrs["key"], dtype=dt, requires_grad=True)
            vt = torch.tensor(arrs["value"], dtype=dt, requires_grad=True)
            am_t = None
            if mask in (1, 2):
                am_t = torch.tensor(am)
            if mask == 3:
                am_t = torch.tensor(am, dtype=dt)
            kp_t = None
            if kpm == 1:
                kp_t = torch.tensor(kp)
            if kpm == 2:
                kp_t = torch.tensor(kp, dtype=dt)
            out, w = m(qt, kt, vt, key_padding_mask=kp_t, need_weights=bool(nw), attn_mask=am_t,
                       average_attn_weights=bool(avg))
            arrs["gout"] = rng.standard_normal(tuple(out.shape))
            loss = (out * torch.tensor(arrs["gout"], dtype=dt)).sum()
            if w is not None:
                arrs["gw"] = rng.standard_normal(tuple(w.shape))
                loss = loss + (w * torch.tensor(arrs["gw"], dtype=dt)).sum()
            loss.backward()
            want = {"out": out.detach().double().numpy().ravel()}
            if w is not None:
                want["weights"] = w.detach().double().numpy().ravel()
            for name, t in (("query", qt), ("key", kt), ("value", vt)):
                want["grad." + name] = t.grad.double().numpy().ravel()
            for name, p in m.named_parameters():
                want["grad." + name] = p.grad.double().numpy().ravel()
            cid = f"{tag}.{i}"
            cases.append((cid, want, TOL if tag == "f32" else TOL64))
            lines.append(" ".join([cid] + [str(x) for x in (E, H, kd, vd, bias, bf, nw, avg, mask, kpm, len(arrs))] +
                                  [fmt(k, a) for k, a in arrs.items()]))
    for i, (d, h, ff, gelu, bf, nf, mask, kpm, L, N) in enumerate(ENC_TABLE):
        m = torch.nn.TransformerEncoderLayer(d, h, dim_feedforward=ff, dropout=0.0,
                                             activation="gelu" if gelu else "relu", batch_first=bool(bf),
                                             norm_first=bool(nf))
        with torch.no_grad():
            for p in m.parameters():
                p.copy_(torch.tensor(rng.standard_normal(tuple(p.shape)) * 0.5))
        arrs = {k: v.detach().double().numpy() for k, v in m.state_dict().items()}
        arrs["src"] = rng.standard_normal((N, L, d) if bf else (L, N, d))
        am_t = kp_t = None
        if mask == 1:
            am = rng.random((L, L)) < 0.3
            am[:, 0] = False
            arrs["attn_mask"] = am.astype(np.float64)
            am_t = torch.tensor(am)
        if mask == 2:
            am_t = torch.tensor(np.triu(np.ones((L, L), dtype=bool), 1))
        if mask == 3:
            arrs["attn_mask"] = rng.standard_normal((L, L))
            am_t = torch.tensor(arrs["attn_mask"], dtype=torch.float32)
        if kpm:
            kp = rng.random((N, L)) < 0.3 if kpm == 1 else rng.standard_normal((N, L))
            if kpm == 1:
                kp[:, 0] = False
            arrs["kpm"] = kp.astype(np.float64)
            kp_t = torch.tensor(kp) if kpm == 1 else torch.tensor(kp, dtype=torch.float32)
        st = torch.tensor(arrs["src"], dtype=torch.float32, requires_grad=True)
        out = m(st, src_mask=am_t, src_key_padding_mask=kp_t)
        arrs["gout"] = rng.standard_normal(tuple(out.shape))
        (out * torch.tensor(arrs["gout"], dtype=torch.float32)).sum().backward()
        want = {"out": out.detach().double().numpy().ravel(), "grad.src": st.grad.double().numpy().ravel()}
        for name, p in m.named_parameters():
            want["grad." + name] = p.grad.double().numpy().ravel()
        cid = f"f32.enc{i}"
        cases.append((cid, want, TOL))
        lines.append(" ".join([cid, "ENC"] + [str(x) for x in (d, h, ff, gelu, bf, nf, mask, kpm, len(arrs))] +
                              [fmt(k, a) for k, a in arrs.items()]))
    out = subprocess.run([driver], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True).stdout
    got = {ln.split()[0]: ln.split()[1:] for ln in out.splitlines() if ln.strip()}
    passed = failed = 0
    for cid, want, tol in cases:
        g = got.get(cid)
        ok = g is not None and g[0] == "OK"
        msg = "" if ok else " ".join(g or ["missing"])
        if ok:
            vals, pos = {}, 1
            while pos < len(g):
                n = int(g[pos + 1])
                vals[g[pos]] = np.array(g[pos + 2:pos + 2 + n], dtype=np.float64)
                pos += 2 + n
            if set(vals) != set(want):
                ok, msg = False, f"names {sorted(vals)} != {sorted(want)}"
            else:
                for name, w in want.items():
                    err = np.max(np.abs(vals[name] - w)) if w.size else 0.0
                    if vals[name].shape != w.shape or not err <= tol * (1 + np.max(np.abs(w))):
                        ok, msg = False, f"{name}: max err {err:.3g}"
                        break
        passed += ok
        failed += not ok
        if verbose or not ok:
            print(("ok   " if ok else "FAIL ") + cid + (" " + msg if msg else ""))
    print(f"mha parity: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
