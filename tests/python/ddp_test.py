"""torch DistributedDataParallel over gloo, W = 4 ranks (issue 29): each rank trains its
sequences of every micro-batch (parity's split: tensor_split, then torch.chunk over the ranks,
so an uneven batch leaves a rank with fewer or none), DDP averages the gradients, the Collector
records the run (rank 0 writes), and the comparison with `parity dump`'s one-device reference
must pass within TOL (1e-10 relative in fp64). Then the planted bug: the gradients averaged
twice (divided by W once more after DDP's average) must FAIL, and the comparison must name the
factor, "grad x0.25 at step 0 ... 1/W for W = 4".

Usage: ddp_test.py PARITY_BINARY SCENARIO STEPS [TOL]
Ranks are 4 processes (torch.multiprocessing, start method spawn) meeting at
tcp://127.0.0.1:<a free port>; each runs the correct training, then the planted one.
"""
import datetime
import io
import os

os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # not the find_unused_parameters note of each rank
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import common
from common import check
from parity_torch import Dump, ReferenceModel, compare, report, train
from parity_torch.compare import factor_note

WORLD = 4
RANK_TIMEOUT_S = 60  # a collective that waits longer raises
DEADLINE_S = 100  # all ranks, both runs (ctest's TIMEOUT is 120)


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


def spawn_ranks(args, tmp):
    """The W rank processes; a rank that fails or a run past DEADLINE_S ends them all and fails.
    A rank that finished its work (done.RANK written) but has not exited 10 s after the last
    one finished is ended and named: the numbers are complete, the hang is torch's exit."""
    ctx = mp.start_processes(rank_main, args=args, nprocs=WORLD, join=False, start_method="spawn")
    deadline, all_done = time.monotonic() + DEADLINE_S, None
    try:
        while not ctx.join(timeout=1):
            if all(os.path.exists(os.path.join(tmp, f"done.{r}")) for r in range(WORLD)):
                all_done = all_done or time.monotonic()
                if time.monotonic() > all_done + 10:
                    late = [r for r, p in enumerate(ctx.processes) if p.is_alive()]
                    print(f"note: ranks {late} finished their work but did not exit within 10 s; ended")
                    break
            if time.monotonic() > deadline:
                raise common.Failed(f"the {WORLD} ranks did not finish in {DEADLINE_S} s (exit codes so far: "
                                    f"{[p.exitcode for p in ctx.processes]})")
    except (mp.ProcessRaisedException, mp.ProcessExitedException) as e:
        raise common.Failed(f"a rank failed: {e}")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def body(tmp):
    binary, scen, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    tol = float(sys.argv[4]) if len(sys.argv) > 4 else 1e-10
    ref = os.path.join(tmp, "ref")
    common.parity_dump(binary, scen, ref, steps, "fp64")
    good, bad = os.path.join(tmp, "ddp4"), os.path.join(tmp, "ddp4_average_twice")
    spawn_ranks((free_port(), ref, [(good, None), (bad, "average_twice")], steps), tmp)

    rows, info = compare(ref, good, tol)
    text = io.StringIO()
    ok = report(rows, info, text)
    print(f"{scen}: DDP over gloo, W = {WORLD}, fp64, {steps} steps, against the one-device dump")
    print(text.getvalue(), end="")
    check(ok, "DDP W=4 differs from parity's one-device dump (table above)")
    worst = max((r for n, r in rows.items() if n.startswith("grad ")), key=lambda r: r.max)

    brows, binfo = compare(ref, bad, tol)
    text = io.StringIO()
    bok = report(brows, binfo, text)
    print("planted bug: gradients averaged twice (divided by W again after DDP's average)")
    print(text.getvalue(), end="")
    check(not bok, "the planted bug passed the comparison")
    note = factor_note(brows, binfo["world"])
    check("grad x0.25 at step 0" in note and "W = 4" in note, f"the factor is not named: {note!r}")
    return f"DDP W=4 worst {worst.name} {worst.max:.2e} <= {tol:g}; planted bug caught: {note}"


if __name__ == "__main__":
    common.main("ddp4 " + os.path.basename(sys.argv[2]), body)
