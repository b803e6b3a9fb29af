"""Any batch split (issue 46 item 1): torch DDP over gloo, W = 2, trains each step's B sequences
split otherwise than parity splits them, hands each micro-batch's global indices to
Collector.micro(sequences=...), and `parity compare` must PASS every legitimate split and FAIL a
split that drops or duplicates a sequence, naming it by index on the inputs row (the root).

Splits (B = 9, 2 micro-batches, W = 2; parity's own: micro-batches 0..4 and 5..8, each chunked
over the ranks):
- strided: DistributedSampler's, rank r takes r, r + W, ...; its micro-batch m every
  micro-batches-th of those (0, 4, 8 | 2, 6 on rank 0): the micro-batches hold other sequences
  than parity's, so their losses are other parts (not compared; the step's loss is);
- shuffled: a permutation of the batch per step (the same on every rank), rank r takes every
  W-th, in contiguous micro-batches;
- packed: micro-batches of 7 and 2 sequences (rank 0: 0..3 then 7; rank 1: 4..6 then 8);
- drop (a bug): strided, rank 1 drops its last sequence (7);
- duplicate (a bug): strided, rank 1 also trains sequence 0 in its last micro-batch.

Usage: splits_test.py PARITY_BINARY [SCENARIO STEPS]
"""
import datetime
import os

os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
import sys

import torch
import torch.distributed as dist

import common
from common import check
from parity_torch import Dump, ReferenceModel, train

WORLD = 2
DEADLINE_S = 150


def strided(step, mb, rank, world, batch, micro):
    return list(range(rank, batch, world))[mb::micro]


def shuffled(step, mb, rank, world, batch, micro):
    perm = torch.randperm(batch, generator=torch.Generator().manual_seed(1000 + step)).tolist()
    mine = perm[rank::world]
    return [list(c) for c in torch.tensor(mine).tensor_split(micro)][mb] if mine else []


def packed(step, mb, rank, world, batch, micro):
    parts = {(0, 0): [0, 1, 2, 3], (0, 1): [4, 5, 6], (1, 0): [7], (1, 1): [8]}
    return parts.get((mb, rank), [])


def drop(step, mb, rank, world, batch, micro):
    s = strided(step, mb, rank, world, batch, micro)
    return [g for g in s if g != 7]


def duplicate(step, mb, rank, world, batch, micro):
    s = strided(step, mb, rank, world, batch, micro)
    return s + [0] if rank == 1 and mb == micro - 1 else s


SPLITS = {"strided": strided, "shuffled": shuffled, "packed": packed, "drop": drop, "duplicate": duplicate}
# What parity compare's root line must say for each bug
EXPECT = {"drop": ("root: inputs inputs, targets at step 0", "sequence missing (no rank took it): 7"),
          "duplicate": ("root: inputs inputs, targets at step 0", "sequence taken more than once: 0 (2 times: dp rank 0 micro-batch 0, "
                                                  "dp rank 1 micro-batch 1)")}


def rank_main(rank, port, ref, tmp, steps):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=60))
    d = Dump(ref)
    cfg = d.scenario.model
    for name, fn in SPLITS.items():
        model = ReferenceModel(cfg, d.scenario.torch_dtype)
        model.load_parity_state(d.init())
        ddp = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
        split = lambda step, mb, r, w, fn=fn: fn(step, mb, r, w, cfg.batch, cfg.microbatches)
        train(model, d.scenario, steps, out_dir=os.path.join(tmp, name), ddp=ddp, split=split)
    dist.barrier()
    dist.destroy_process_group()
    open(os.path.join(tmp, f"done.{rank}"), "w").close()


def body(tmp):
    binary = sys.argv[1]
    scen = sys.argv[2] if len(sys.argv) > 2 else "fsdp4_uneven_b9_mb2"
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    ref = os.path.join(tmp, "ref")
    common.parity_dump(binary, scen, ref, steps, "fp64")
    b = Dump(ref).scenario.model
    check((b.batch, b.microbatches) == (9, 2), f"{scen}: the splits are written for batch 9 in 2 micro-batches")
    common.spawn_ranks(rank_main, (common.free_port(), ref, tmp, steps), WORLD, tmp, DEADLINE_S)
    said = []
    for name in SPLITS:
        got = os.path.join(tmp, name)
        code, out, root = common.parity_compare(binary, ref, got)
        if name not in EXPECT:
            print(out, end="")
            check(code == 0, f"the {name} split fails parity compare (table above)")
            said.append(f"{name}: PASS")
            continue
        want_root, want_detail = EXPECT[name]
        print(out, end="")
        check(code == 1, f"the {name} split passed parity compare")
        check(root.startswith(want_root), f"{name}: root {root!r}, expected {want_root!r}")
        check(want_detail in out, f"{name}: the sequence is not named ({want_detail!r} not in the output)")
        said.append(f"{name}: FAIL, {want_detail}")
    return "; ".join(said)


if __name__ == "__main__":
    common.main("splits " + (sys.argv[2] if len(sys.argv) > 2 else "fsdp4_uneven_b9_mb2"), body)
