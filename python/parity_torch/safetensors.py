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
EXPECT_NAMES = {"F64": "fp64", "F32": "fp32", "I64": "int64"}  # a manifest's words for them

if sys.byteorder != "little":  # the format is little-endian; torch.frombuffer reads native order
    raise ImportError("parity_torch.safetensors needs a little-endian host")


class BadFile(ValueError):
    """A file this reader refuses, as parity's own reader (src/core/safetensors.cpp) does: the
    message names the file and what is wrong; nothing of it is returned."""


MAX_HEADER = 100 << 20  # bytes of JSON header: far above any dump's, far below a hostile length


def _unique_keys(pairs):
    seen = {}
    for k, v in pairs:
        if k in seen:
            raise BadFile(f"duplicated name {k!r} in the header")
        seen[k] = v
    return seen


def _open_regular(path):
    """The file opened for reading, refused unless it is a regular file (a FIFO or a device would
    block or never end); returns (file, its size)."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise BadFile(f"{path}: cannot read: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise BadFile(f"{path}: not a regular file")
    return open(path, "rb"), st.st_size


def read_header(path):
    """(header dict without __metadata__, metadata dict, offset of the data section); BadFile
    when the header is not what parity writes and reads."""
    f, size = _open_regular(path)
    with f:
        raw = f.read(8)
        if len(raw) != 8:
            raise BadFile(f"{path}: truncated: too short for the 8-byte header length")
        n = int.from_bytes(raw, "little")
        if n > size - 8 or n > MAX_HEADER:
            raise BadFile(f"{path}: truncated or bad header: header length {n} exceeds the {size - 8} bytes after it")
        text = f.read(n)
    if len(text) != n:
        raise BadFile(f"{path}: truncated header ({len(text)} of {n} bytes)")
    try:
        header = json.loads(text.decode("utf-8"), object_pairs_hook=_unique_keys)
    except BadFile as e:
        raise BadFile(f"{path}: bad header: {e}") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise BadFile(f"{path}: bad header: invalid JSON: {e}") from None
    if not isinstance(header, dict):
        raise BadFile(f"{path}: bad header: expected a JSON object")
    meta = header.pop("__metadata__", {})
    for name, info in header.items():
        _check_entry(path, name, info)
    return header, meta, 8 + n


def _check_entry(path, name, info):
    def bad(what):
        raise BadFile(f"{path}: tensor {name!r}: {what}")

    if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
        bad("a header entry has exactly dtype, shape and data_offsets")
    if info["dtype"] not in DTYPES:
        bad(f"unsupported dtype {info['dtype']!r} (expected F32, F64 or I64)")
    shape, off = info["shape"], info["data_offsets"]
    if not isinstance(shape, list) or any(type(d) is not int or d < 0 for d in shape):
        bad(f"shape {shape!r} is not a list of non-negative integers")
    if not isinstance(off, list) or len(off) != 2 or any(type(o) is not int or o < 0 for o in off) or off[0] > off[1]:
        bad(f"data_offsets {off!r} are not two ascending non-negative integers")
    count = 1
    for d in shape:
        count *= d
    need = count * torch.tensor([], dtype=DTYPES[info["dtype"]]).element_size()
    if off[1] - off[0] != need:
        bad(f"data_offsets cover {off[1] - off[0]} bytes but {info['dtype']} {shape} needs {need}")


def read(path, names=None, expect=None):
    """{name: tensor} (every tensor, or only `names`), with the file's dtypes and shapes.
    expect: {name: {"dtype": "fp64"|"fp32"|"int64", "shape": [...]}} (a manifest's record of the
    file): a tensor whose header says otherwise is refused, so a same-size dtype swap cannot be
    read as the other type. BadFile for anything parity's reader refuses: offsets that do not tile
    the data section exactly (overlaps, gaps, bytes left over: a header one byte short shows so),
    a duplicated name, a file that is not regular."""
    header, _, start = read_header(path)
    f, size = _open_regular(path)
    with f:
        f.seek(start)
        data = bytearray(f.read(size - start))
    at = 0
    for name, info in sorted(header.items(), key=lambda e: tuple(e[1]["data_offsets"])):
        b, e = info["data_offsets"]
        if b != at:
            raise BadFile(f"{path}: tensor {name!r}: data starts at {b}, expected {at}"
                          + (" (overlaps the previous tensor)" if b < at else " (gap)"))
        at = e
    if at != len(data):
        raise BadFile(f"{path}: bad layout: the tensors' data ends at {at} but the data section has {len(data)} bytes")
    out = {}
    for name, info in header.items():
        if names is not None and name not in names:
            continue
        if expect is not None and name in expect:
            want = expect[name]
            got = {"dtype": EXPECT_NAMES[info["dtype"]], "shape": info["shape"]}
            if want.get("dtype") != got["dtype"] or list(want.get("shape", [])) != got["shape"]:
                raise BadFile(f"{path}: tensor {name!r}: the header says {got['dtype']} {got['shape']}, the manifest "
                              f"{want.get('dtype')} {want.get('shape')}")
        dtype = DTYPES[info["dtype"]]
        begin, _ = info["data_offsets"]
        shape = list(info["shape"])
        count = 1
        for d in shape:
            count *= d
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
