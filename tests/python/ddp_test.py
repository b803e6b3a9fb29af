"""torch DistributedDataParallel over gloo, W = 4 ranks (issue 29): each rank trains its
sequences of every micro-batch (parity's split: tensor_split, then torch.chunk over the ranks,
so an uneven batch leaves a rank with fewer or none), DDP averages the gradients, the Collector
records the run (rank 0 writes), and the comparison with `parity dump`'s one-device reference
must pass within TOL (1e-10 relative in fp64). Then each planted bug must FAIL, named:
- average_twice (the default): the gradients divided by W once more after DDP's average; the
  comparison must name the factor, "grad x0.25 at step 0 ... 1/W for W = 4";
- counts_per_rank: the expert-bias update takes each rank's own tokens per expert (no
  all_reduce of the counts, parity_torch.train's bug="counts_per_rank"); the Collector records
  the counts the model used (rank 0's), and the root must be "root: tokens_per_expert at step 0";
- replica_diverges: rank 1's copy of the first parameter moves by 1e-6 after step 1's update;
  every rank collects its copies' digests, and the root must be the replicas row at step 1,
  naming rank 1 and the tensor (before every rank collected: the loss at step 2, a step late).

Usage: ddp_test.py PARITY_BINARY SCENARIO STEPS [TOL [BUG...]]
Ranks are 4 processes (torch.multiprocessing, start method spawn) meeting at
tcp://127.0.0.1:<a free port>; each runs the correct training, then each planted one.
"""
import datetime
import os

os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # not the find_unused_parameters note of each rank
import sys

import torch
import torch.distributed as dist

import common
from common import check, compared, line_starting
from parity_torch import Dump, ReferenceModel, train
from parity_torch.compare import factor_note

WORLD = 4
RANK_TIMEOUT_S = 60  # a collective that waits longer raises
DEADLINE_S = 100  # all ranks, all runs (ctest's TIMEOUT is 120)
BUGS = {
    "average_twice": "gradients averaged twice (divided by W again after DDP's average)",
    "counts_per_rank": "tokens_per_expert not all-reduced (each rank updates its expert bias from its own counts)",
    "replica_diverges": "rank 1's copy of a parameter updated apart from the others after step 1",
}


def rank_main(rank, port, ref, outs, steps):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=RANK_TIMEOUT_S))
    d = Dump(ref)
    for out, bug in outs:
        model = ReferenceModel(d.scenario.model, d.scenario.torch_dtype)
        model.load_parity_state(d.init())
        ddp = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
        train(model, d.scenario, steps, out_dir=out, ddp=ddp, bug=bug)
    dist.barrier()  # rank 0 holds the TCP store: nobody leaves while another still talks to it
    dist.destroy_process_group()
    open(os.path.join(os.path.dirname(ref), f"done.{rank}"), "w").close()


# What parity compare names as each bug's root (the factor follows it on the line)
PARITY_ROOT = {"average_twice": "root: grad ", "counts_per_rank": "root: tokens_per_expert all MoE layers at step 0",
               "replica_diverges": "root: replicas every rank's copies at step 1, scale - -> copies of the same "
                                   "elements differ in their bits: rank 1's params (1 tensor, first embed.weight)"}


def caught(bug, rows, info, text):
    """The planted bug's name as the comparison printed it, or raises Failed."""
    if bug == "average_twice":
        note = factor_note(rows, info["world"])
        check("grad x0.25 at step 0" in note and "W = 4" in note, f"the factor is not named: {note!r}")
        return note
    root = line_starting(text, "root: ")
    want = "root: replicas at step 1" if bug == "replica_diverges" else "root: tokens_per_expert at step 0"
    check(root.startswith(want), f"the root is not {want!r}: {root!r}")
    return root


def body(tmp):
    binary, scen, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    tol = float(sys.argv[4]) if len(sys.argv) > 4 else 1e-10
    bugs = sys.argv[5:] or ["average_twice"]
    for b in bugs:
        check(b in BUGS, f"unknown planted bug {b!r} (known: {', '.join(BUGS)})")
    ref = os.path.join(tmp, "ref")
    common.parity_dump(binary, scen, ref, steps, "fp64")
    good = os.path.join(tmp, "ddp4")
    outs = [(good, None)] + [(os.path.join(tmp, "ddp4_" + b), b) for b in bugs]
    common.spawn_ranks(rank_main, (common.free_port(), ref, outs, steps), WORLD, tmp, DEADLINE_S)

    ok, rows, _, _ = compared(ref, good, tol, f"{scen}: DDP over gloo, W = {WORLD}, fp64, {steps} steps, "
                                              "against the one-device dump")
    check(ok, "DDP W=4 differs from parity's one-device dump (table above)")
    common.parity_verdict(binary, ref, good)
    worst = max((r for n, r in rows.items() if n.startswith("grad ")), key=lambda r: r.max)
    named = []
    for out, bug in outs[1:]:
        bok, brows, binfo, text = compared(ref, out, tol, f"planted bug: {BUGS[bug]}")
        check(not bok, f"the planted bug {bug} passed the comparison")
        named.append(caught(bug, brows, binfo, text))
        proot = common.parity_verdict(binary, ref, out, PARITY_ROOT[bug])
        if bug != "replica_diverges":
            check("scale 0.250000 -> 1/4 (= 1/dp)" in proot, f"parity compare does not name 1/dp: {proot!r}")
        named.append("parity compare " + proot)
    return f"DDP W=4 worst {worst.name} {worst.max:.2e} <= {tol:g}; planted bugs caught: " + " | ".join(named)


if __name__ == "__main__":
    common.main("ddp4 " + os.path.basename(sys.argv[2]), body)
