"""Safetensors files, read and written by this package's own code (no third-party package).

The format: an 8-byte little-endian header length N, N bytes of JSON
``{name: {"dtype": "F64"|"F32"|"I64", "shape": [...], "data_offsets": [begin, end]}}``
(plus an optional ``"__metadata__"`` object of strings), then the raw little-endian bytes,
offsets relative to the end of the header. parity's writer (src/core/safetensors.cpp)
orders the data by element size descending, then name, pads the header with spaces to a
multiple of 8 bytes, and its reader requires the offsets to tile the data exactly; this
writer does the same, so either side reads the other's files.
"""
import ctypes
import json
import os
import stat
import sys
import tempfile

import torch

DTYPES = {"F64": torch.float64, "F32": torch.float32, "I64": torch.int64}
NAMES = {v: k for k, v in DTYPES.items()}

if sys.byteorder != "little":  # the format is little-endian; torch.frombuffer reads native order
    raise ImportError("parity_torch.safetensors needs a little-endian host")


def read_header(path):
    """(header dict without __metadata__, metadata dict, offset of the data section)."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path}: truncated: too short for the 8-byte header length")
        n = int.from_bytes(raw, "little")
        text = f.read(n)
    if len(text) != n:
        raise ValueError(f"{path}: truncated header ({len(text)} of {n} bytes)")
    header = json.loads(text.decode("utf-8"))
    meta = header.pop("__metadata__", {})
    return header, meta, 8 + n


def read(path, names=None):
    """{name: tensor} (every tensor, or only `names`), with the file's dtypes and shapes."""
    header, _, start = read_header(path)
    with open(path, "rb") as f:
        f.seek(start)
        data = bytearray(f.read())
    out = {}
    for name, info in header.items():
        if names is not None and name not in names:
            continue
        if info["dtype"] not in DTYPES:
            raise ValueError(f"{path}: {name}: unsupported dtype {info['dtype']} (expected F32, F64 or I64)")
        dtype = DTYPES[info["dtype"]]
        begin, end = info["data_offsets"]
        shape = list(info["shape"])
        count = 1
        for d in shape:
            count *= d
        size = torch.tensor([], dtype=dtype).element_size()
        if end - begin != count * size or end > len(data):
            raise ValueError(f"{path}: {name}: data_offsets [{begin}, {end}] do not hold {info['dtype']} {shape}")
        if count == 0:
            t = torch.zeros(shape, dtype=dtype)
        else:
            t = torch.frombuffer(data, dtype=dtype, count=count, offset=begin).clone().reshape(shape)
        out[name] = t
    if names is not None and set(names) - set(out):
        raise KeyError(f"{path}: no tensor {sorted(set(names) - set(out))}")
    return out


def _bytes(t):
    t = t.detach().to("cpu").contiguous()
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size()) if t.numel() else b""


def write_atomically(path, body, mode):
    """Calls body(f) on a temporary file of a unique name beside `path` (created O_EXCL, never
    through a link: tempfile.mkstemp), fsyncs it and renames it over `path`, as parity's
    core/output.h does: a link planted at PATH.tmp is never followed, a user's PATH.tmp never
    consumed. A symbolic link, FIFO or device at `path` itself is refused (OSError)."""
    if os.path.lexists(path) and not stat.S_ISREG(os.lstat(path).st_mode):
        raise OSError(f"{path}: exists and is not a regular file; parity_torch never replaces it")
    directory, name = os.path.split(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + name[:100] + ".parity-tmp-", dir=directory)
    try:
        with os.fdopen(fd, mode) as f:
            body(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise


def write(path, tensors, metadata=None):
    """Writes {name: tensor} (float64, float32 or int64) atomically (a temporary file, then rename)."""
    entries = []
    for name, t in tensors.items():
        if t.dtype not in NAMES:
            raise TypeError(f"{name}: dtype {t.dtype} is not one of float64, float32, int64")
        entries.append((name, t))
    entries.sort(key=lambda e: (-e[1].element_size(), e[0]))  # element size descending, then name
    header, blobs, offset = {}, [], 0
    for name, t in entries:
        b = _bytes(t)
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode("utf-8")  # as nlohmann::json
    text += b" " * ((8 - len(text) % 8) % 8)
    def body(f):
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for b in blobs:
            f.write(b)
    write_atomically(path, body, "wb")
