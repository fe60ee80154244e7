"""The text protocol of tests/parity_common/driver.hpp, for the parity scripts (einsum, linalg)."""
import math


def fmt(v):
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return repr(v)


def encode(i, op, dtype, arrays, seed):
    """One input line: case id, op, dtype, operands (rank, dims, values), then the backward seed."""
    parts = [str(i), op, dtype, str(len(arrays))]
    for a in arrays:
        parts += [str(a.ndim)] + [str(d) for d in a.shape] + [fmt(v) for v in a.reshape(-1)]
    parts.append(str(seed.size))
    parts += [fmt(v) for v in seed.reshape(-1)]
    return " ".join(parts)


def parse(line):
    """One output line -> (id, "OK", (out, grads)) or (id, "ERR"/"EXC", message)."""
    import numpy as np  # imported here so a script can still report "skipped" when numpy is missing

    tok = line.split()
    cid, status = tok[0], tok[1]
    if status != "OK":
        return cid, status, " ".join(tok[2:])
    p = 2
    rank = int(tok[p]); p += 1
    shape = tuple(int(x) for x in tok[p:p + rank]); p += rank
    n = int(tok[p]); p += 1
    out = np.array([float(x) for x in tok[p:p + n]]).reshape(shape); p += n
    assert tok[p] == "G"; p += 1
    k = int(tok[p]); p += 1
    grads = []
    for _ in range(k):
        n = int(tok[p]); p += 1
        grads.append(np.array([float(x) for x in tok[p:p + n]])); p += n
    return cid, "OK", (out, grads)
