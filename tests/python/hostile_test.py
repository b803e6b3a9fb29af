"""parity_torch's reader and comparer refuse what parity's own reader refuses (issue 46, item 4):
each damaged copy of a `parity dump` must give `python3 -m parity_torch.compare` the exit-code
table's code (2 bad input, with the file named and no traceback; 1 FAIL; 4 a reference that
itself diverged), never a PASS, a traceback or a hang. The undamaged copy must PASS (the control).

Usage: hostile_test.py PARITY_BINARY
"""
import json
import math
import os
import shutil
import subprocess
import sys

import common
from common import check

TIMEOUT_S = 60  # a case that blocks (a FIFO) fails here instead of hanging ctest


def header_of(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    return json.loads(raw[8:8 + n]), raw[8 + n:], n


def write_with(path, header_text, data, n=None):
    """A safetensors file with this header text (padded to 8 as parity pads) and data; n: the
    header length to claim (default: the true one)."""
    text = header_text.encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write((len(text) if n is None else n).to_bytes(8, "little") + text + data)


def rewrite(path, mutate):
    h, data, _ = header_of(path)
    mutate(h)
    write_with(path, json.dumps(h, separators=(",", ":"), sort_keys=True), data)


def set_value(path, name, value):
    """Overwrites the first element of float tensor `name` in place."""
    import struct
    h, data, n = header_of(path)
    info = h[name]
    fmt = "<d" if info["dtype"] == "F64" else "<f"
    begin = info["data_offsets"][0]
    data = bytearray(data)
    data[begin:begin + struct.calcsize(fmt)] = struct.pack(fmt, value)
    with open(path, "r+b") as f:
        f.seek(8 + n)
        f.write(data)


def compare(ref, got, subprocess_only=False):
    """(exit code, stdout, stderr) of `python3 -m parity_torch.compare REF GOT`: in this process
    (torch imported once), or as a process of its own with a time limit where a read could
    block (subprocess_only)."""
    if not subprocess_only:
        import contextlib
        import io
        import traceback
        import importlib
        cmp = importlib.import_module("parity_torch.compare")
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cmp.main([ref, got, "--smoke"])  # the Python reader itself
            except BaseException:  # what escapes main() would be a traceback for its user
                traceback.print_exc()
                code = None
        return code, out.getvalue(), err.getvalue()
    env = dict(os.environ, PYTHONPATH=os.path.join(common.ROOT, "python"))
    try:
        r = subprocess.run([sys.executable, "-m", "parity_torch.compare", ref, got, "--smoke"], env=env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, "", f"blocked for {TIMEOUT_S} s"
    return r.returncode, r.stdout, r.stderr


def body(tmp):
    binary = sys.argv[1]
    ref = os.path.join(tmp, "ref")
    common.parity_dump(binary, "tiny", ref, 2, "fp64")
    step1 = "step_000001.safetensors"

    def case(name, damage, want, words, blocking=False):
        got = os.path.join(tmp, name)
        shutil.copytree(ref, got)
        damage(got)
        code, out, err = compare(ref, got, blocking)
        text = out + err
        check(code == want, f"{name}: exit {code}, expected {want}\n{text[-1500:]}")
        check("Traceback" not in text, f"{name}: a traceback\n{text[-1500:]}")
        for w in words:
            check(w in text, f"{name}: the output does not say {w!r}\n{text[-1500:]}")
        return f"{name} -> {code}"

    def one_byte_short(d):
        p = os.path.join(d, step1)
        h, data, n = header_of(p)
        with open(p, "r+b") as f:
            f.write((n - 1).to_bytes(8, "little"))

    def dtype_swap(d):  # F64 -> I64 keeps every size: only the manifest can tell
        rewrite(os.path.join(d, step1), lambda h: h["loss"].update(dtype="I64"))

    def shape_swap(d):
        def m(h):
            name = next(n for n, i in h.items() if n.startswith("grads.") and len(i["shape"]) == 2
                        and i["shape"][0] != i["shape"][1])
            h[name]["shape"] = h[name]["shape"][::-1]
        rewrite(os.path.join(d, step1), m)

    def overlap(d):  # targets read from the inputs' bytes (same size): the layout no longer tiles
        rewrite(os.path.join(d, step1), lambda h: h["targets"].update(data_offsets=h["inputs"]["data_offsets"]))

    def duplicate(d):
        p = os.path.join(d, step1)
        h, data, _ = header_of(p)
        text = json.dumps(h, separators=(",", ":"), sort_keys=True)
        entry = json.dumps({"loss": h["loss"]}, separators=(",", ":"))[1:-1]
        write_with(p, text[:-1] + "," + entry + "}", data)  # "loss" twice, the same entry

    def fifo(d):
        p = os.path.join(d, step1)
        os.remove(p)
        os.mkfifo(p)

    def nan_grad(d):
        p = os.path.join(d, step1)
        h, _, _ = header_of(p)
        set_value(p, next(n for n in sorted(h) if n.startswith("grads.")), math.nan)

    def last_step_missing(d):
        m = os.path.join(d, "manifest.json")
        man = json.load(open(m))
        man["files"] = [f for f in man["files"] if f["file"] != step1]
        man["steps"] = [s for s in man["steps"] if s["step"] != 1]
        json.dump(man, open(m, "w"))
        os.remove(os.path.join(d, step1))

    named = [case("control", lambda d: None, 0, ["verdict: PASS"])]
    bad = "bad input"
    named += [case("header_one_byte_short", one_byte_short, 2, [bad, step1]),
              case("dtype_swap", dtype_swap, 2, [bad, "'loss'", "manifest"]),
              case("shape_swap", shape_swap, 2, [bad, "manifest"]),
              case("overlapping_offsets", overlap, 2, [bad, "overlaps"]),
              case("duplicated_name", duplicate, 2, [bad, "duplicated name 'loss'"]),
              case("fifo", fifo, 2, [bad, "not a regular file"], blocking=True),
              case("nan_in_candidate", nan_grad, 1, ["verdict: FAIL", "nan"]),
              case("last_step_missing", last_step_missing, 2, [bad, "has no step 1"])]
    # a reference that is not finite: the candidate is the untouched dump, the reference damaged
    nref = os.path.join(tmp, "nan_ref")
    shutil.copytree(ref, nref)
    set_value(os.path.join(nref, step1), "loss", math.nan)
    code, out, err = compare(nref, ref)
    check(code == 4 and "diverged" in err and "Traceback" not in out + err,
          f"non-finite reference: exit {code}, expected 4\n{(out + err)[-1500:]}")
    named.append(f"nan_reference -> {code}")
    return "; ".join(named)


if __name__ == "__main__":
    common.main("hostile dumps", body)
