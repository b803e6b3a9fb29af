"""The classic signatures on an uneven batch (issue 46 item 3): torch DDP over gloo, W = 2, on
fsdp4_ep4_uneven_b3_clip's model (batch 3: dp rank 0 holds 2 sequences, rank 1 one; clip 0.5,
which the reference applies). The correct run must PASS `parity compare`; each planted bug must
FAIL with its root naming the pattern, not only a number:
- counts_per_rank: the expert-bias update from each rank's own counts; rank 0's counts are
  x0.667 of the step's: "0.6667 = dp rank 0's share of the batch (2 of 3 sequences)";
- per_rank_mean: each rank's loss part is the mean over its own sequences (the per-rank mean
  that DDP's average makes right only for equal ranks): the root is the loss, named as such;
- clip_before_sync: each rank clips its own gradients before they are averaged: every family
  shrunk, the candidate's clip_coef 1 against the reference's;
- average_twice: every gradient family x1/2 (= 1/dp): averaged twice.
Before the signatures (main's binary) the roots said "not a clean factor" or "1: not a scaling".

Usage: signatures_test.py PARITY_BINARY [STEPS]
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
SCENARIO = "fsdp4_ep4_uneven_b3_clip"
BUGS = {
    "counts_per_rank": ("root: tokens_per_expert all MoE layers at step 0, scale 0.666667 -> 0.6667 = dp rank 0's "
                        "share of the batch (2 of 3 sequences): that rank's own counts"),
    "per_rank_mean": ("root: loss all micro-batches at step 0, scale", "each rank's loss part is the mean over its "
                      "own sequences"),
    "clip_before_sync": ("root: grad ", "while the candidate's clip_coef is 1 and the reference clips by"),
    "average_twice": ("root: grad ", "scale 0.500000 -> 1/2 (= 1/dp) or 1/2 (= 1/world): every gradient family at "
                      "this scale: the gradients averaged over the dp ranks twice"),
}


def rank_main(rank, port, ref, tmp, steps):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=60))
    d = Dump(ref)
    for bug in [None] + list(BUGS):
        model = ReferenceModel(d.scenario.model, d.scenario.torch_dtype)
        model.load_parity_state(d.init())
        ddp = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
        train(model, d.scenario, steps, out_dir=os.path.join(tmp, bug or "correct"), ddp=ddp, bug=bug)
    dist.barrier()
    dist.destroy_process_group()
    open(os.path.join(tmp, f"done.{rank}"), "w").close()


def body(tmp):
    binary = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    ref = os.path.join(tmp, "ref")
    common.parity_dump(binary, SCENARIO, ref, steps, "fp64")
    common.spawn_ranks(rank_main, (common.free_port(), ref, tmp, steps), WORLD, tmp, 150)
    common.parity_verdict(binary, ref, os.path.join(tmp, "correct"))
    said = ["correct: PASS"]
    for bug, wants in BUGS.items():
        code, out, root = common.parity_compare(binary, ref, os.path.join(tmp, bug))
        print(out, end="")
        check(code == 1, f"the planted bug {bug} passed parity compare")
        check(root.startswith(wants[0]), f"{bug}: root {root!r} does not start {wants[0]!r}")
        check(all(w in root for w in wants[1:]), f"{bug}: root {root!r} does not name {wants[1:]!r}")
        said.append(f"{bug}: {root[:200]}")
    return " | ".join(said)


if __name__ == "__main__":
    common.main("signatures " + SCENARIO, body)
