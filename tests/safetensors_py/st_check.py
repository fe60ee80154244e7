#!/usr/bin/env python3
"""Independent safetensors writer/reader (json, struct, numpy only) cross-checking oxmera.

usage: st_check.py ST_DRIVER WORKDIR
Exit 0 on success, 1 on a mismatch, 77 when numpy is missing (reported as skipped by ctest).
"""
import json
import os
import struct
import subprocess
import sys

try:
    import numpy as np
except ImportError:
    print("safetensors_python: skipped (numpy cannot be imported)")
    sys.exit(77)

NP = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16, "I64": np.int64,
      "I32": np.int32, "I16": np.int16, "I8": np.int8, "U32": np.uint32, "U16": np.uint16, "U8": np.uint8,
      "BOOL": np.uint8}
# The reference implementation's dtype order (it sorts by it, descending, then by name).
REF_ORDER = ["BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "F64",
             "I64", "U64"]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def read(path):
    """Returns (header dict in file order, metadata, {name: (dtype, ndarray)}) checking the layout rules."""
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    text = raw[8:8 + n].decode("utf-8")
    header = json.loads(text, object_pairs_hook=lambda kv: kv)  # keep the order and any duplicates
    names = [k for k, _ in header]
    check(len(names) == len(set(names)), f"{path}: duplicate keys")
    meta = {}
    tensors = {}
    covered = 0
    data = raw[8 + n:]
    for name, info in header:
        if name == "__metadata__":
            meta = dict(info)
            continue
        info = dict(info)
        check(sorted(info) == ["data_offsets", "dtype", "shape"], f"{path}: {name}: fields {sorted(info)}")
        b, e = info["data_offsets"]
        check(b == covered, f"{path}: {name}: begins at {b}, expected {covered}")
        covered = e
        arr = np.frombuffer(data[b:e], dtype=np.dtype(NP[info["dtype"]]).newbyteorder("<"))
        tensors[name] = (info["dtype"], arr.reshape(info["shape"]))
    check(covered == len(data), f"{path}: data section {len(data)} bytes, tensors cover {covered}")
    return text, header, meta, tensors


def write(path, items, metadata=None, pad=True):
    """items: list of (name, dtype string, ndarray of the file's storage type)."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    blobs = []
    off = 0
    for name, dt, arr in items:
        b = np.ascontiguousarray(arr).astype(np.dtype(NP[dt]).newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def same_bits(a, b):
    a = np.asarray(a)
    b = np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def run(driver, *args):
    return subprocess.run([driver, *args], capture_output=True, text=True)


def check_oxmera_files(driver, work):
    r = run(driver, "write", work)
    check(r.returncode == 0, f"st_driver write failed: {r.stdout}{r.stderr}")
    if r.returncode != 0:
        return
    path = os.path.join(work, "ox_all.safetensors")
    text, header, meta, t = read(path)
    n = len(text.encode("utf-8"))
    check(n % 8 == 0, f"header length {n} bytes is not a multiple of 8")
    check(text.rstrip(" ") == json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False),
          "header is not compact JSON padded with spaces")
    check(header[0][0] == "__metadata__", "__metadata__ is not first")
    order = [(k, dict(v)["dtype"]) for k, v in header if k != "__metadata__"]
    want_order = sorted(order, key=lambda kv: (-REF_ORDER.index(kv[1]), kv[0].encode()))
    check(order == want_order, f"tensor order {order}, reference order {want_order}")
    check(meta == {"format": "pt", "note": "h\u00e9llo \"quoted\"\n\ttab"}, f"metadata {meta}")
    inf = np.inf
    expect = {
        "f32": ("F32", np.array([[1.5, -0.0, 1e-40], [inf, -inf, np.nan]], dtype=np.float32)),
        "f64": ("F64", np.array([0.1, -2.5, 1e300, 5e-324])),
        "i64": ("I64", np.array([-2**63, -1, 0, 1, 2**63 - 1], dtype=np.int64)),
        "u8": ("U8", np.arange(256, dtype=np.uint8).reshape(16, 16)),
        "transposed": ("F32", np.array([[0, 3], [1, 4], [2, 5]], dtype=np.float32)),
        "scalar": ("F64", np.array(7.25)),
        "empty": ("I64", np.zeros((0, 3), dtype=np.int64)),
        "a.weight": ("F32", np.arange(12, dtype=np.float32).reshape(3, 4)),
    }
    check(sorted(t) == sorted(expect), f"tensor names {sorted(t)}")
    for name, (dt, arr) in expect.items():
        if name not in t:
            continue
        check(t[name][0] == dt, f"{name}: dtype {t[name][0]}, want {dt}")
        got = t[name][1]
        check(got.shape == arr.shape and got.tobytes() == arr.tobytes(),
              f"{name}: values {got!r}, want {arr!r}")

    _, header, meta, t = read(os.path.join(work, "ox_ordered.safetensors"))
    check([k for k, _ in header] == ["z", "a", "m"], f"vector overload order {[k for k, _ in header]}")
    check("__metadata__" not in dict(header), "empty metadata was written")
    check(same_bits(t["m"][1], np.array([[42]], dtype=np.int64)), "m value")


def f32_from_bf16(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def check_python_files(driver, work):
    rng = np.random.default_rng(7)
    all_f16 = np.arange(65536, dtype=np.uint32).astype(np.uint16)  # every half bit pattern
    bf16 = np.array([0x0000, 0x8000, 0x3f80, 0xc2f7, 0x0001, 0x807f, 0x7f80, 0xff80, 0x7fc1, 0x7f7f],
                    dtype=np.uint16)
    items = [
        ("w.f64", "F64", rng.standard_normal((3, 5))),
        ("w.f32", "F32", rng.standard_normal((2, 3, 4)).astype(np.float32)),
        ("half", "F16", all_f16.view(np.float16).reshape(256, 256)),
        ("brain", "BF16", bf16.reshape(2, 5)),
        ("i64", "I64", np.array([-2**63, 2**63 - 1, 0], dtype=np.int64)),
        ("i32", "I32", np.array([-2**31, 2**31 - 1, -1], dtype=np.int32)),
        ("i16", "I16", np.array([-32768, 32767], dtype=np.int16)),
        ("i8", "I8", np.array([-128, 127, -3], dtype=np.int8)),
        ("u32", "U32", np.array([0, 2**32 - 1], dtype=np.uint32)),
        ("u16", "U16", np.array([65535, 1], dtype=np.uint16)),
        ("u8", "U8", np.array([[255, 0], [7, 8]], dtype=np.uint8)),
        ("flag", "BOOL", np.array([1, 0, 1], dtype=np.uint8)),
        ("zero_d", "F32", np.array(3.5, dtype=np.float32)),
        ("nothing", "F64", np.zeros((2, 0))),
    ]
    conv = {"F16": lambda a: a.astype(np.float32), "BF16": f32_from_bf16,
            "I32": lambda a: a.astype(np.int64), "I16": lambda a: a.astype(np.int64),
            "I8": lambda a: a.astype(np.int64), "U32": lambda a: a.astype(np.int64),
            "U16": lambda a: a.astype(np.int64)}
    for pad in (True, False):  # the old reference wrote unpadded headers and unaligned offsets
        src = os.path.join(work, f"py_{'padded' if pad else 'unpadded'}.safetensors")
        out = os.path.join(work, f"py_{'padded' if pad else 'unpadded'}_roundtrip.safetensors")
        write(src, items, metadata={"who": "python", "empty": ""}, pad=pad)
        r = run(driver, "roundtrip", src, out)
        check(r.returncode == 0, f"roundtrip of {src} failed: {r.stdout}{r.stderr}")
        if r.returncode != 0:
            continue
        _, _, meta, t = read(out)
        check(meta == {"who": "python", "empty": ""}, f"roundtrip metadata {meta}")
        for name, dt, arr in items:
            want = conv.get(dt, lambda a: a)(np.asarray(arr))
            want_dt = {"F16": "F32", "BF16": "F32", "I32": "I64", "I16": "I64", "I8": "I64", "U32": "I64",
                       "U16": "I64", "BOOL": "U8"}.get(dt, dt)
            check(t[name][0] == want_dt, f"{name}: dtype {t[name][0]}, want {want_dt}")
            check(same_bits(t[name][1], want.astype(t[name][1].dtype)) and t[name][1].shape == want.shape,
                  f"{name}: {dt} loaded as {t[name][1]!r}, want {want!r}")


def check_bad_files(driver, work):
    good = [("x", "F32", np.arange(4, dtype=np.float32))]
    cases = {}
    path = os.path.join(work, "bad_base.safetensors")
    write(path, good)
    base = open(path, "rb").read()
    cases["truncated"] = base[:-1]
    cases["trailing"] = base + b"\0" * 4
    cases["huge_len"] = struct.pack("<Q", 2**63) + base[8:]

    def hdr(h):
        t = json.dumps(h).encode()
        return struct.pack("<Q", len(t)) + t + b"\0" * 16

    cases["u64"] = hdr({"x": {"dtype": "U64", "shape": [2], "data_offsets": [0, 16]}})
    cases["f8"] = hdr({"x": {"dtype": "F8_E4M3", "shape": [16], "data_offsets": [0, 16]}})
    cases["overflow"] = hdr({"x": {"dtype": "F32", "shape": [2**40, 2**40], "data_offsets": [0, 16]}})
    cases["overlap"] = hdr({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                            "y": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})
    for name, blob in cases.items():
        p = os.path.join(work, f"bad_{name}.safetensors")
        open(p, "wb").write(blob)
        r = run(driver, "load", p)
        check(r.returncode == 2 and "[Io]" in r.stdout, f"bad file {name}: rc {r.returncode}: {r.stdout}{r.stderr}")


def main():
    driver, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    check_oxmera_files(driver, work)
    check_python_files(driver, work)
    check_bad_files(driver, work)
    if failures:
        print(f"safetensors_python: {len(failures)} failure(s)")
        return 1
    print("safetensors_python: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
