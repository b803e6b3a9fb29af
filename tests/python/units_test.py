"""parity_torch's pieces against parity's own files (issue 29): the safetensors reader and writer
(byte for byte), the name map and transposes, the data generator, the initialisation, the batch
split. Usage: units_test.py PARITY_BINARY"""
import io
import math
import os
import subprocess
import sys

import torch

import common
from common import check
from parity_torch import Dump, MarkovData, ReferenceModel, compare, dp_sequences, micro_batch_sequences, name_map
from parity_torch import report, train
from parity_torch import safetensors
from parity_torch.data import init_elements
from parity_torch.shards import Sharding, held_placements


def safetensors_bytes(d):
    for f in ("init.safetensors", "step_000000.safetensors"):
        path = os.path.join(d.path, f)
        again = path + ".again"
        safetensors.write(again, safetensors.read(path))
        with open(path, "rb") as a, open(again, "rb") as b:
            check(a.read() == b.read(), f"{f}: read then written again is not byte-identical to parity's file")
    t = {"a": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.tensor(3.5, dtype=torch.float64),
         "c": torch.zeros(0, 2, dtype=torch.int64)}
    path = os.path.join(d.path, "mixed.safetensors")
    safetensors.write(path, t)
    back = safetensors.read(path)
    check(all(torch.equal(t[k], back[k]) and t[k].dtype == back[k].dtype for k in t), "mixed dtypes round trip")
    header, _, start = safetensors.read_header(path)
    check(start % 8 == 0 and header["b"]["data_offsets"] == [0, 8], "8-byte types first, header padded to 8")
    # issue 42: a link planted at the old fixed NAME.tmp is never followed, a user's NAME.tmp kept
    victim, planted = os.path.join(d.path, "victim"), os.path.join(d.path, "linked.safetensors.tmp")
    with open(victim, "w") as f:
        f.write("precious")
    os.symlink(victim, planted)
    safetensors.write(os.path.join(d.path, "linked.safetensors"), t)
    with open(victim) as f:
        check(f.read() == "precious" and os.path.islink(planted), "a link at NAME.tmp was followed or consumed")
    fifo = os.path.join(d.path, "fifo.safetensors")
    os.mkfifo(fifo)
    try:
        safetensors.write(fifo, t)
        check(False, "a FIFO at the target was replaced")
    except OSError:
        check(os.path.exists(fifo) and not os.path.isfile(fifo), "the FIFO at the target is gone")
    check(not [n for n in os.listdir(d.path) if ".parity-tmp-" in n], "a temporary file was left")


def names_and_transposes(d):
    cfg = d.scenario.model
    m = ReferenceModel(cfg, torch.float64)
    init = d.init()
    m.load_parity_state(init)
    entries = name_map(cfg)
    check([e[0] for e in entries] == d.parameters, "name_map's order is not parity's registry order")
    check(all(d.families[p] == f for p, _, _, f in entries), "name_map's families differ from the manifest's")
    named = dict(m.named_parameters())
    check(sorted(named) == sorted(t for _, t, _, _ in entries), "name_map does not cover the module's parameters")
    for pname, tname, tr, _ in entries:
        w, p = named[tname], init[pname]
        check(torch.equal(w, p.t() if tr else p), f"{tname} != {'transposed ' if tr else ''}{pname}")
        if tr:  # an nn.Linear: weight (out, in) and y = x @ W_parity
            x = torch.randn(3, p.shape[0], dtype=torch.float64)
            mod = dict(m.named_modules())[tname.rsplit(".", 1)[0]]
            check(isinstance(mod, torch.nn.Linear) and torch.allclose(mod(x), x @ p, rtol=1e-14, atol=0),
                  f"{tname}: not an nn.Linear computing x @ {pname}")
    back = m.parity_tensors("params")
    check(all(torch.equal(back[p], init[p]) for p in d.parameters), "parity_tensors() does not give init back")
    return len(entries)


def data_and_init(d, steps):
    s = d.scenario
    data = MarkovData(s.model.vocab, s.data_seed)
    check(abs(data.entropy_floor() - d.manifest["entropy_floor"]) == 0, "entropy floor differs")
    for t in range(steps):
        x, y = data.batch(t, 0, s.model.batch, s.model.seq)
        rx, ry = d.tokens(t)
        check(torch.equal(x, rx) and torch.equal(y, ry), f"step {t}: generated tokens differ from the dump's")
    init = d.init()
    layers = s.model.layers
    for pname, t in init.items():
        if d.families[pname] == "layernorm":  # 1 and 0
            continue
        std = 0.02 / math.sqrt(2 * layers) if pname.endswith(("wo", "w2")) else 0.02
        flat = t.reshape(-1)
        idx = [0, flat.numel() // 2, flat.numel() - 1]
        got = torch.tensor(init_elements(s.seed, pname, std, idx), dtype=t.dtype)
        check(torch.equal(got, flat[idx]), f"{pname}: Philox init differs from init.safetensors at {idx}")


def batch_split():
    check([micro_batch_sequences(7, 3, m) for m in range(3)] == [(0, 3), (3, 5), (5, 7)], "7 in 3: 3, 2, 2")
    got = [[dp_sequences(9, 2, mb, 4, r) for r in range(4)] for mb in range(2)]
    check(got == [[(0, 2), (2, 4), (4, 5), (5, 5)], [(5, 6), (6, 7), (7, 8), (8, 9)]],
          f"batch 9, 2 micro-batches over 4 ranks (docs/scenario.md): {got}")


class Shard:  # DTensor's placement classes as held_placements sees them: by their names
    def __init__(self, dim):
        self.dim = dim


class Replicate:
    pass


class Partial:
    pass


class Held:
    def __init__(self, *placements):
        self.placements = placements


def as_held():
    """Collector placements="as_held" (issue 49 item 3): which tensors count as held sharded, and a
    gradient placed otherwise than its parameter taking the gradient's placement."""
    got = held_placements({"a": Held(Shard(0)), "b": Held(Replicate()), "c": torch.zeros(2), "d": None,
                           "e": Held(Partial()), "f": Held(Replicate(), Shard(1))})
    check(sorted(got) == ["a", "e", "f"], f"sharded or partial DTensors only: {sorted(got)}")
    s = Sharding.__new__(Sharding)
    s.dims, s.params, s.grads = ["tp"], {"w": {"placements": ["Shard(0)"]}}, {"w": {"placements": ["Shard(0)"]}}
    s.hold_grads({"v": [Partial()]})
    check(not s.sharded("grads", "w") and s.partial("grads", "v") and s.sharded("params", "w"),
          f"the gradients' own placements replace the parameters': {s.grads}")


def framework_doc_loop(d, tmp):
    """docs/framework.md's loop (torch's Adam, the Collector's lines) run as written, and
    parity_torch.train reading the dump's tokens: both equal the dump within 1e-12."""
    with open(os.path.join(common.ROOT, "docs", "framework.md")) as f:
        doc = f.read()
    marker = doc.index("<!-- tests/python/units_test.py runs the next block")
    code = doc[doc.index("```python", marker) + len("```python"):]
    code = code[:code.index("```")]
    script = os.path.join(tmp, "mine.py")
    with open(script, "w") as f:
        f.write(code)
    for out, run in (("doc_loop", lambda o: subprocess.run([sys.executable, script, d.path, o], check=False)),
                     ("dump_tokens", lambda o: train(model_of(d), d.scenario, len(d.steps), o, tokens=d.tokens))):
        path = os.path.join(tmp, out)
        r = run(path)
        check(getattr(r, "returncode", 0) == 0, f"docs/framework.md's loop failed: exit {getattr(r, 'returncode', 0)}")
        rows, info = compare(d.path, path, 1e-12)
        text = io.StringIO()
        check(report(rows, info, text), f"{out}: differs from the dump at 1e-12\n{text.getvalue()}")


def model_of(d):
    m = ReferenceModel(d.scenario.model, d.scenario.torch_dtype)
    m.load_parity_state(d.init())
    return m


def body(tmp):
    binary = sys.argv[1]
    n = 0
    for scen, steps in (("tiny", 3), ("pw_ds_pp2_1f1b_zero2_dp2_tp2_sp_ep2_etp2_mixed", 2)):
        out = os.path.join(tmp, scen)
        common.parity_dump(binary, scen, out, steps, "fp64")
        d = Dump(out)
        safetensors_bytes(d)
        n += names_and_transposes(d)
        data_and_init(d, steps)
        if scen == "tiny":
            framework_doc_loop(d, tmp)
    batch_split()
    as_held()
    return (f"safetensors byte-identical, {n} names mapped, tokens and init reproduced, "
            "docs/framework.md's loop and the dump's tokens within 1e-12")


if __name__ == "__main__":
    common.main("units", body)
