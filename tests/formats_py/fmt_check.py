#!/usr/bin/env python3
"""oxmera's file formats against numpy and Python's gzip, csv, zipfile and struct modules.

usage: fmt_check.py FMT_DRIVER WORKDIR
Files written by numpy / gzip / csv must load with the right values; files oxmera writes must load in numpy;
truncated, lying and corrupted files must be typed oxmera errors (exit 2, "E Io ..."), never a crash or a huge
allocation (the driver runs with a 4 GiB address-space limit when the build allows it).
Exit 0 on success, 1 on a mismatch, 77 when numpy is missing (reported as skipped by ctest).
"""
import csv
import gzip
import json
import math
import os
import resource
import shutil
import struct
import subprocess
import sys
import zipfile

try:
    import numpy as np
except ImportError:
    print("formats_python: skipped (numpy cannot be imported)")
    sys.exit(77)

DRIVER, WORK = sys.argv[1], sys.argv[2]
failures = []
LIMIT_AS = 4 << 30
use_limit = True


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def limit():
    if use_limit:
        resource.setrlimit(resource.RLIMIT_AS, (LIMIT_AS, LIMIT_AS))


def run(*args):
    p = subprocess.run([DRIVER, *args], capture_output=True, text=True, preexec_fn=limit, timeout=60)
    # a sanitizer build reports and may carry on: a report is a failure whatever the exit status
    check("runtime error:" not in p.stderr and "Sanitizer" not in p.stderr,
          f"{' '.join(args)}: sanitizer report: {p.stderr[-1500:]}")
    return p.returncode, p.stdout, p.stderr


def parse(out):
    """{name: (dtype, shape, [values as str])} and the CSV columns."""
    tensors, columns = {}, None
    for line in out.splitlines():
        if line.startswith("C"):
            columns = line[2:].split("\t") if len(line) > 2 else []
        elif line.startswith("T "):
            head, _, vals = line.partition(" :")
            parts = head.split()
            name, dtype, rank = parts[1], parts[2], int(parts[3])
            shape = tuple(int(x) for x in parts[4:4 + rank])
            tensors[name] = (dtype, shape, vals.split())
    return tensors, columns


OX_DTYPE = {"f": {4: "f32", 8: "f64"}, "u": {1: "u8", 2: "i64", 4: "i64"}, "i": {1: "i64", 2: "i64", 4: "i64", 8: "i64"},
            "b": {1: "u8"}}


def same_values(got, arr, what):
    flat = np.ascontiguousarray(arr).reshape(-1)
    if len(got) != flat.size:
        check(False, f"{what}: {len(got)} values, want {flat.size}")
        return
    for i, (g, w) in enumerate(zip(got, flat.tolist())):
        if isinstance(w, float):
            gv = float(g)
            if arr.dtype == np.float32:
                gv = float(np.float32(gv))
            ok = (math.isnan(gv) and math.isnan(w)) or (gv == w and math.copysign(1, gv) == math.copysign(1, w))
        else:
            ok = int(g) == int(w)
        if not ok:
            check(False, f"{what}: element {i} is {g}, want {w!r}")
            return


def expect_tensor(tensors, name, arr, what):
    if name not in tensors:
        check(False, f"{what}: no tensor '{name}' (got {sorted(tensors)})")
        return
    dtype, shape, vals = tensors[name]
    want = OX_DTYPE[arr.dtype.kind][arr.dtype.itemsize]
    check(dtype == want, f"{what}: dtype {dtype}, want {want}")
    check(shape == arr.shape, f"{what}: shape {shape}, want {arr.shape}")
    same_values(vals, arr, what)


def expect_load(fmt, path, arrays, what):
    rc, out, err = run("load", fmt, path)
    check(rc == 0, f"{what}: load failed rc={rc}: {out.strip()} {err.strip()}")
    tensors, columns = parse(out)
    for name, arr in arrays.items():
        expect_tensor(tensors, name, arr, f"{what} [{name}]")
    check(len(tensors) == len(arrays), f"{what}: {len(tensors)} tensors, want {len(arrays)}")
    return columns


def expect_error(fmt, path, what, kind="Io", needle=None):
    rc, out, err = run("load", fmt, path)
    check(rc == 2, f"{what}: rc={rc} (want 2, a typed error): {out.strip()[:300]} {err.strip()[:300]}")
    line = next((ln for ln in out.splitlines() if ln.startswith("E ")), "")
    check(line.startswith(f"E {kind} "), f"{what}: want a {kind} error, got '{line[:300]}'")
    check(path in line, f"{what}: the message does not name the file: '{line[:300]}'")
    if needle:
        check(needle in line, f"{what}: the message lacks '{needle}': '{line[:300]}'")


def p(name):
    return os.path.join(WORK, name)


shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)

# Some sanitizer builds cannot run under an address-space limit: then run without it.
np.save(p("probe.npy"), np.arange(3, dtype=np.float32))
if subprocess.run([DRIVER, "load", "npy", p("probe.npy")], capture_output=True, preexec_fn=limit).returncode != 0:
    use_limit = False
    print("note: the driver does not run under RLIMIT_AS (sanitizer build?); running without the limit")

rng = np.random.default_rng(7)
# ----------------------------------------------------------------------------------------------- .npy by numpy
samples = {
    "f4": np.array([[1.5, -0.0, 1e-40], [np.inf, -np.inf, np.nan]], dtype=np.float32),
    "f8": rng.standard_normal((3, 4)),
    "i8": np.array([np.iinfo(np.int64).min, -1, 0, np.iinfo(np.int64).max], dtype=np.int64),
    "u1": np.arange(256, dtype=np.uint8).reshape(16, 16),
    "b1": np.array([[True, False, True], [False, False, True]]),
    "i4": np.array([np.iinfo(np.int32).min, -5, np.iinfo(np.int32).max], dtype=np.int32),
    "i2": np.array([-32768, 7, 32767], dtype=np.int16),
    "i1": np.array([-128, 0, 127], dtype=np.int8),
    "u4": np.array([0, 4294967295], dtype=np.uint32),
    "u2": np.array([0, 65535], dtype=np.uint16),
    "fortran2": np.asfortranarray(rng.standard_normal((3, 5)).astype(np.float32)),
    "fortran3": np.asfortranarray(np.arange(24, dtype=np.int64).reshape(2, 3, 4)),
    "fortran_bool": np.asfortranarray(rng.standard_normal((4, 3)) > 0),
    "scalar": np.array(3.75),
    "scalar_i": np.array(-9, dtype=np.int64),
    "empty": np.zeros((0, 3), dtype=np.float32),
    "empty_fortran": np.asfortranarray(np.zeros((2, 0), dtype=np.float64)),
    "vector": np.linspace(-1, 1, 7),
    "big": rng.standard_normal(70000).astype(np.float32),  # several read chunks
}
for name, arr in samples.items():
    np.save(p(f"np_{name}.npy"), arr)
    if name.startswith("fortran"):
        check(np.load(p(f"np_{name}.npy")).flags.f_contiguous, f"{name}: numpy wrote it in C order")
    expect_load("npy", p(f"np_{name}.npy"), {"npy": arr}, f"np.save {name}")
# format version 2.0 (a header over 64 KiB: numpy writes it for a huge structured dtype only, so write it ourselves)
with open(p("np_f4.npy"), "rb") as fh:
    raw = fh.read()
hlen = struct.unpack("<H", raw[8:10])[0]
header = raw[10:10 + hlen]
v2 = b"\x93NUMPY\x02\x00" + struct.pack("<I", hlen) + header + raw[10 + hlen:]
open(p("np_v2.npy"), "wb").write(v2)
expect_load("npy", p("np_v2.npy"), {"npy": samples["f4"]}, "npy format 2.0")

# ------------------------------------------------------------------------------------- .npz by numpy (both kinds)
npz_arrays = {"weights": samples["f8"], "mask": samples["b1"], "labels": samples["u1"], "idx": samples["i8"],
              "ft": samples["fortran2"], "s": samples["scalar"], "none": samples["empty"], "big": samples["big"]}
np.savez(p("np_stored.npz"), **npz_arrays)
np.savez_compressed(p("np_deflated.npz"), **npz_arrays)
np.savez(p("np_positional.npz"), samples["f4"], samples["i2"])
with zipfile.ZipFile(p("np_deflated.npz")) as z:
    check(all(i.compress_type == zipfile.ZIP_DEFLATED for i in z.infolist()), "savez_compressed: deflated members")
expect_load("npz", p("np_stored.npz"), npz_arrays, "np.savez")
expect_load("npz", p("np_deflated.npz"), npz_arrays, "np.savez_compressed")
expect_load("npz", p("np_positional.npz"), {"arr_0": samples["f4"], "arr_1": samples["i2"]}, "np.savez positional")
np.savez(p("np_empty_archive.npz"))
expect_load("npz", p("np_empty_archive.npz"), {}, "np.savez of nothing")

# ---------------------------------------------------------------------------------- IDX by struct (+ gzip module)
IDX_CODES = {np.uint8: (0x08, ">u1"), np.int8: (0x09, ">i1"), np.int16: (0x0B, ">i2"), np.int32: (0x0C, ">i4"),
             np.float32: (0x0D, ">f4"), np.float64: (0x0E, ">f8")}


def idx_bytes(arr):
    code, be = IDX_CODES[arr.dtype.type]
    return struct.pack(">BBBB", 0, 0, code, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape) + \
        arr.astype(be).tobytes()


idx_samples = {
    "u8": rng.integers(0, 256, size=(5, 4, 4)).astype(np.uint8),  # like MNIST images
    "i8": np.array([-128, -1, 0, 127], dtype=np.int8),
    "i16": np.array([[-32768, 1], [2, 32767]], dtype=np.int16),
    "i32": np.array([np.iinfo(np.int32).min, 0, np.iinfo(np.int32).max], dtype=np.int32),
    "f32": rng.standard_normal((3, 7)).astype(np.float32),
    "f64": rng.standard_normal((2, 2, 2)),
    "labels": rng.integers(0, 10, size=100000).astype(np.uint8),  # several chunks
    "scalar": np.array(3.5),
    "empty": np.zeros((0, 28, 28), dtype=np.uint8),
}
for name, arr in idx_samples.items():
    data = idx_bytes(arr)
    open(p(f"py_{name}.idx"), "wb").write(data)
    with gzip.open(p(f"py_{name}.idx.gz"), "wb") as gz:
        gz.write(data)
    expect_load("idx", p(f"py_{name}.idx"), {"idx": arr}, f"IDX {name}")
    expect_load("idx", p(f"py_{name}.idx.gz"), {"idx": arr}, f"gzip'd IDX {name}")

# ------------------------------------------------------------------------------------------ CSV by the csv module
cols = ["x", "y, with comma", 'q"uote']
rows = [[1.5, -2.0, 3e-5], [4.0, float("inf"), -0.0], [1e10, 7.25, 123456.789]]
with open(p("py.csv"), "w", newline="") as fh:  # csv's default line terminator is \r\n
    w = csv.writer(fh)
    w.writerow(cols)
    w.writerows(rows)
arr = np.array(rows)
got_cols = expect_load("csv64", p("py.csv"), {"csv": arr}, "csv module, f64")
check(got_cols == cols, f"csv header: {got_cols}, want {cols}")
expect_load("csv", p("py.csv"), {"csv": arr.astype(np.float32)}, "csv module, f32")
with open(p("py_nohdr.csv"), "w", newline="") as fh:
    csv.writer(fh, lineterminator="\n").writerows(rows)
expect_load("csvnohdr", p("py_nohdr.csv"), {"csv": arr.astype(np.float32)}, "csv without header")
with open(p("py_semi.csv"), "w", newline="") as fh:
    w = csv.writer(fh, delimiter=";")
    w.writerow(["a", "b"])
    w.writerows([[1, 2], [3, 4]])
expect_load("csvsemi", p("py_semi.csv"), {"csv": np.array([[1, 2], [3, 4]], dtype=np.float32)}, "csv ; delimiter")
with open(p("py_missing.csv"), "w", newline="") as fh:
    w = csv.writer(fh)
    w.writerow(["a", "b", "c"])
    w.writerow([1, "", 3])
    w.writerow([4, 5, ""])
expect_load("csvnan", p("py_missing.csv"), {"csv": np.array([[1, np.nan, 3], [4, 5, np.nan]], dtype=np.float32)},
            "csv missing as NaN")
expect_error("csv", p("py_missing.csv"), "csv missing value", needle="line 2, column 3")
open(p("bad_number.csv"), "w").write("a,b\n1,2\n3,x7\n")
expect_error("csv", p("bad_number.csv"), "csv non-number", needle="line 3, column 3")
open(p("ragged.csv"), "w").write("a,b\n1,2\n3\n")
expect_error("csv", p("ragged.csv"), "csv ragged row", needle="line 3")

# ------------------------------------------------------------------------------ files oxmera writes, read by numpy
rc, out, err = run("write", WORK)
check(rc == 0, f"driver write: rc={rc} {out} {err}")
inf = float("inf")
ox = {
    "f32": np.array([[1.5, -0.0, 1e-40], [3.25, -7.0, 1e30]], dtype=np.float32),
    "f64": np.array([[0.1, -2.5], [1e300, 5e-324], [inf, -inf]]),
    "i64": np.array([np.iinfo(np.int64).min, -1, 0, 1, 9], dtype=np.int64),
    "u8": (np.arange(24, dtype=np.int64) * 11).astype(np.uint8).reshape(2, 3, 4),
    "t": np.array([[0, 3], [1, 4], [2, 5]], dtype=np.float32),
    "scalar": np.array(2.5),
    "empty": np.zeros((0, 3), dtype=np.float32),
}


def same_array(got, want, what):
    check(got.dtype == want.dtype, f"{what}: dtype {got.dtype}, want {want.dtype}")
    check(got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}")
    if got.shape == want.shape and got.dtype == want.dtype:
        check(np.array_equal(got, want, equal_nan=True) and
              np.array_equal(np.signbit(got), np.signbit(want)) if got.dtype.kind == "f" else
              np.array_equal(got, want), f"{what}: values differ:\n{got}\n{want}")


for name, want in ox.items():
    path = p(f"ox_{name}.npy")
    got = np.load(path)
    same_array(got, want, f"oxmera save_npy {name}")
    with open(path, "rb") as fh:
        raw = fh.read()
    check(raw[6:8] == b"\x01\x00" and (10 + struct.unpack("<H", raw[8:10])[0]) % 64 == 0,
          f"{name}: version 1.0 header padded to 64 bytes")
for kind in ("stored", "deflated"):
    path = p(f"ox_{kind}.npz")
    with zipfile.ZipFile(path) as z:
        check(z.testzip() is None, f"oxmera {kind} npz: zipfile's CRC check")
        want_type = zipfile.ZIP_DEFLATED if kind == "deflated" else zipfile.ZIP_STORED
        check(all(i.compress_type == want_type for i in z.infolist()), f"oxmera {kind} npz: member compression")
    with np.load(path) as z:
        check(sorted(z.files) == sorted(ox), f"oxmera {kind} npz names {sorted(z.files)}")
        for name, want in ox.items():
            same_array(z[name], want, f"oxmera {kind} npz [{name}]")


def read_idx(path):
    raw = open(path, "rb").read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    code, rank = raw[2], raw[3]
    dims = struct.unpack(f">{rank}I", raw[4:4 + 4 * rank])
    be = {v[0]: v[1] for v in IDX_CODES.values()}[code]
    return np.frombuffer(raw[4 + 4 * rank:], dtype=be).reshape(dims).astype(be[1:].replace("u1", "u1"))


same_array(read_idx(p("ox_u8.idx")), ox["u8"], "oxmera IDX u8")
same_array(read_idx(p("ox_f32.idx.gz")), ox["f32"], "oxmera gzip IDX f32")
same_array(read_idx(p("ox_f64.idx")), ox["f64"], "oxmera IDX f64")
same_array(read_idx(p("ox_i32.idx.gz")), np.array([[-2147483648, -1], [0, 2147483647]], dtype=np.int32),
           "oxmera gzip IDX i64 as i32")
check(open(p("ox_f32.idx.gz"), "rb").read()[:2] == b"\x1f\x8b", "save_idx gzip=true writes gzip")

# ---------------------------------------------------------------------------- safetensors folders (json + struct)
ST = {np.float32: "F32", np.float64: "F64", np.int64: "I64", np.uint8: "U8"}


def write_st(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, a in tensors.items():
        b = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": ST[a.dtype.type], "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


shards = {"model-00001-of-00002.safetensors": {"embed.weight": samples["f8"], "layer.0.bias": samples["i8"]},
          "model-00002-of-00002.safetensors": {"head.weight": samples["u1"], "layer.1.w": samples["big"]}}
for d in ("stdir", "stindex", "stdup", "stbadindex"):
    os.makedirs(p(d))
merged = {}
for fname, ts in shards.items():
    write_st(os.path.join(p("stdir"), fname), ts)
    write_st(os.path.join(p("stindex"), fname), ts)
    merged.update(ts)
open(os.path.join(p("stdir"), "README.md"), "w").write("not a shard\n")
expect_load("stdir", p("stdir"), merged, "safetensors folder")
weight_map = {n: f for f, ts in shards.items() for n in ts}
json.dump({"metadata": {"total_size": 1}, "weight_map": weight_map},
          open(os.path.join(p("stindex"), "model.safetensors.index.json"), "w"))
write_st(os.path.join(p("stindex"), "stray.safetensors"), {"ignored": samples["f8"]})  # not in the index
expect_load("stdir", p("stindex"), merged, "safetensors index")
write_st(os.path.join(p("stdup"), "a.safetensors"), {"w": samples["f8"]})
write_st(os.path.join(p("stdup"), "b.safetensors"), {"w": samples["f8"]})
expect_error("stdir", p("stdup"), "safetensors folder with a duplicate name", needle="duplicate")
for fname, ts in shards.items():
    write_st(os.path.join(p("stbadindex"), fname), ts)
bad_map = dict(weight_map)
bad_map["head.weight"] = "model-00001-of-00002.safetensors"
json.dump({"weight_map": bad_map}, open(os.path.join(p("stbadindex"), "model.safetensors.index.json"), "w"))
expect_error("stdir", p("stbadindex"), "index naming the wrong shard", needle="head.weight")

# --------------------------------------------------------------------------- truncated, lying, corrupted files
def variant(name, data):
    path = p("bad_" + name)
    open(path, "wb").write(data)
    return path


npy = open(p("np_f8.npy"), "rb").read()
hl = 10 + struct.unpack("<H", npy[8:10])[0]
head_dict = npy[10:hl].decode("latin1")


def npy_with(header_text, payload=b""):
    text = header_text.encode("latin1")
    text += b" " * ((64 - (10 + len(text) + 1) % 64) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + payload


for name, data, kind, needle in [
    ("npy_truncated", npy[:-5], "Io", "truncated"),
    ("npy_header_cut", npy[:hl - 20], "Io", None),
    ("npy_magic_only", npy[:7], "Io", None),
    ("npy_trailing", npy + b"\0" * 8, "Io", "trailing"),
    ("npy_1tib", npy_with("{'descr': '<f8', 'fortran_order': False, 'shape': (137438953472,), }", b"\0" * 64),
     "Io", "137438953472"),
    ("npy_overflow", npy_with("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296, 16), }"),
     "Io", "int64"),
    ("npy_bad_dict", npy_with("{'descr': '<f8', 'fortran_order': Maybe, 'shape': (2,), }", b"\0" * 16), "Io",
     "fortran_order"),
    ("npy_missing_shape", npy_with("{'descr': '<f8', 'fortran_order': False, }"), "Io", "shape"),
    ("npy_bigendian", npy_with("{'descr': '>f8', 'fortran_order': False, 'shape': (2,), }", b"\0" * 16),
     "UnsupportedDType", "big-endian"),
    ("npy_object", npy_with("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", b"\0" * 16),
     "UnsupportedDType", None),
    ("npy_bool_byte", npy_with("{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }", b"\x01\x07"), "Io",
     "bool element 1"),
    ("npy_header_len", b"\x93NUMPY\x01\x00\xff\xff" + b"{" * 100, "Io", "header length"),
    ("npy_garbage", bytes(rng.integers(0, 256, 4000, dtype=np.uint8)), "Io", None),
    ("npy_empty", b"", "Io", None),
]:
    expect_error("npy", variant(name + ".npy", data), name, kind, needle)
# numpy's own big-endian file
np.save(p("np_be.npy"), np.arange(4, dtype=">f4"))
expect_error("npy", p("np_be.npy"), "np.save big-endian", "UnsupportedDType", "big-endian")

idx = idx_bytes(idx_samples["f32"])
gz_idx = gzip.compress(idx)
lie = struct.pack(">BBBB", 0, 0, 0x0E, 2) + struct.pack(">II", 1 << 20, 1 << 17) + b"\0" * 64  # 1 TiB of f64
for name, data, needle in [
    ("idx_truncated", idx[:-3], "truncated"),
    ("idx_trailing", idx + b"\0", "trailing"),
    ("idx_dims_cut", idx[:7], None),
    ("idx_1tib", lie, "1048576"),
    ("idx_1tib.gz", gzip.compress(lie), None),
    ("idx_overflow", struct.pack(">BBBB", 0, 0, 0x0E, 4) + struct.pack(">IIII", *[0xffffffff] * 4), "int64"),
    ("idx_bad_code", b"\0\0\x07\x01" + struct.pack(">I", 1) + b"\0", "type code"),
    ("idx_bad_magic", b"\x01\0\x08\x01" + struct.pack(">I", 1) + b"\0", "magic"),
    ("idx_gz_truncated", gz_idx[:len(gz_idx) // 2], "truncated"),
    ("idx_gz_short_data", gzip.compress(idx[:-8]), None),
    ("idx_gz_long_data", gzip.compress(idx + b"\0" * 100000), "longer"),
    ("idx_gz_crc", gz_idx[:-8] + bytes([gz_idx[-8] ^ 0xff]) + gz_idx[-7:], None),
    ("idx_gz_garbage", b"\x1f\x8b" + bytes(rng.integers(0, 256, 3000, dtype=np.uint8)), None),
    ("idx_gz_two_members", gz_idx + gz_idx, "member"),
]:
    expect_error("idx", variant(name, data), name, "Io", needle)

stored = open(p("np_stored.npz"), "rb").read()
deflated = open(p("np_deflated.npz"), "rb").read()


def flip(data, at):
    return data[:at] + bytes([data[at] ^ 0x55]) + data[at + 1:]


with zipfile.ZipFile(p("np_deflated.npz")) as z:
    big = z.getinfo("big.npy")
    big_data_at = big.header_offset + 30 + len(big.filename) + len(big.extra) + 2000
with zipfile.ZipFile(p("np_stored.npz")) as z:
    st_big = z.getinfo("big.npy")
    st_data_at = st_big.header_offset + 30 + len(st_big.filename) + len(st_big.extra) + 5000
eocd = stored.rfind(b"PK\x05\x06")
cd_at = struct.unpack("<I", stored[eocd + 16:eocd + 20])[0]
for name, data, needle in [
    ("npz_truncated", stored[:len(stored) // 2], None),
    ("npz_tail_cut", stored[:-10], None),
    ("npz_stored_bitflip", flip(stored, st_data_at), "CRC"),
    ("npz_deflated_bitflip", flip(deflated, big_data_at), None),
    ("npz_cd_count_lie", stored[:eocd + 8] + struct.pack("<HH", 60000, 60000) + stored[eocd + 12:], "entry count"),
    ("npz_cd_offset_lie", stored[:eocd + 16] + struct.pack("<I", len(stored) + 100) + stored[eocd + 20:], None),
    ("npz_local_sig", flip(stored, struct.unpack("<I", stored[cd_at + 42:cd_at + 46])[0]), "local header"),
    ("npz_not_zip", b"hello, this is not an archive" * 10, "end-of-central-directory"),
]:
    expect_error("npz", variant(name + ".npz", data), name, "Io", needle)

# a deflated member whose central directory claims 1 TiB uncompressed / a stored member claiming more than is there
def patch_cd(data, field_at, value, fmt="<I"):
    e = data.rfind(b"PK\x05\x06")
    cd = struct.unpack("<I", data[e + 16:e + 20])[0]
    at = cd + field_at
    return data[:at] + struct.pack(fmt, value) + data[at + struct.calcsize(fmt):]


expect_error("npz", variant("npz_usize_lie.npz", patch_cd(deflated, 24, 0xfffffff0)), "npz usize lie", "Io")
expect_error("npz", variant("npz_csize_lie.npz", patch_cd(stored, 20, 0x7ffffff0)), "npz csize lie", "Io")
# a member whose .npy header claims 1 TiB, inside a valid archive (stored and deflated)
for comp, tag in ((zipfile.ZIP_STORED, "stored"), (zipfile.ZIP_DEFLATED, "deflated")):
    with zipfile.ZipFile(p(f"bad_npz_1tib_{tag}.npz"), "w", compression=comp) as z:
        z.writestr("x.npy", npy_with("{'descr': '<f8', 'fortran_order': False, 'shape': (137438953472,), }",
                                     b"\0" * 4096))
    expect_error("npz", p(f"bad_npz_1tib_{tag}.npz"), f"npz 1 TiB member ({tag})", "Io", "137438953472")
with zipfile.ZipFile(p("bad_npz_text.npz"), "w") as z:
    z.writestr("notes.txt", "hello")
expect_error("npz", p("bad_npz_text.npz"), "npz with a non-.npy member", "Io", "notes.txt")

# Random truncations and byte flips of every kind of file: typed errors or (rarely, for a flip inside float data
# of a stored member... which the CRC catches) correct loads; never a crash.
for src_path, fmt in ((p("np_f8.npy"), "npy"), (p("np_deflated.npz"), "npz"), (p("np_stored.npz"), "npz"),
                      (p("py_f32.idx.gz"), "idx"), (p("py_u8.idx"), "idx")):
    data = open(src_path, "rb").read()
    for trial in range(12):
        cut = int(rng.integers(0, len(data)))
        rc, out, err = run("load", fmt, variant(f"cut{trial}.{fmt}", data[:cut]))
        check(rc == 2 and out.splitlines()[-1].startswith("E Io "),
              f"{src_path} cut at {cut}: rc={rc} {out[-200:]} {err[-300:]}")
        at = int(rng.integers(0, len(data)))
        rc, out, err = run("load", fmt, variant(f"flip{trial}.{fmt}", flip(data, at)))
        check(rc in (0, 2), f"{src_path} flipped at {at}: rc={rc} (a crash?) {err[-300:]}")
        if rc == 2:
            check(out.splitlines()[-1].split()[1] in ("Io", "UnsupportedDType"),
                  f"{src_path} flipped at {at}: {out[-200:]}")

if failures:
    print(f"formats_python: {len(failures)} failure(s)")
    sys.exit(1)
print("formats_python: all checks passed")
