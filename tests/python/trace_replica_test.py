"""A diverging replica named at the step and the rank where it diverges (issue 45 item 4, issue 46 item 2): a
torch DDP loop of this test's own (W = 2, gloo, fsdp4_uneven_b9_mb2's model, 3 steps, every step traced, every
rank's trace and copies collected). One rank's copy of embed.weight moves by a factor 1 + 1e-6 after step 1's
update (after the forward: step 1's trace is clean). The replicas row fails at step 1 but names only the ranks
whose copies differ from rank 0's ("rank 1's params", whichever rank drifted); step 2's forward is the first to
read the copies, and every rank's trace of it names the rank whose copy is off the reference:
- rank 1 drifts: root "replicas ... at step 1 ...; enters at step 2, the first forward to read the copies: embed,
  forward, ..., rank 1 (dp 1)";
- rank 0 drifts: its params (the copy written) fail at step 1 beside the replicas row (which would say "rank
  1's params": rank 1 differs from rank 0), and the trace names "rank 0 (dp 0)": the copy that drifted.
Before: "no traced tensor diverges (it enters after the backward ...)", the rank left to the replicas row.

Usage: trace_replica_test.py PARITY_BINARY
"""
import datetime
import os

os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
import sys

import torch
import torch.distributed as dist

import common
from common import check
from parity_torch import Collector, Dump, MarkovData, ParityOptimizer, ReferenceModel, dp_sequences, trace_map

WORLD, STEPS = 2, 3
SCENARIO = "fsdp4_uneven_b9_mb2"


def loop(d, out, drifts, rank):
    scn, cfg = d.scenario, d.scenario.model
    model = ReferenceModel(cfg, scn.torch_dtype)
    model.load_parity_state(d.init())
    ddp = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
    opt = ParityOptimizer.from_config(model.parameters(), scn.optim)
    data = MarkovData(cfg.vocab, scn.data_seed)
    col = Collector(out, scn, ddp, trace=trace_map(cfg))
    for step in range(STEPS):
        opt.zero_grad(set_to_none=False)
        for mb in range(cfg.microbatches):
            lo, hi = dp_sequences(cfg.batch, cfg.microbatches, mb, WORLD, rank)
            x, y = data.sequences(step, list(range(lo, hi)), cfg.seq)
            with ddp.no_sync() if mb < cfg.microbatches - 1 else torch.enable_grad():
                part = ddp(x, y)
                col.micro(part, x, y)
                (part * WORLD).backward()
        col.grads()
        opt.step()
        if rank == drifts and step == 1:  # the planted drift: one rank's copy updated apart, after the forward
            with torch.no_grad():
                model.embed.weight.mul_(1 + 1e-6)
        model.update_expert_bias(dist.all_reduce)
        col.step()
    col.close()


def rank_main(rank, port, ref, tmp):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=60))
    d = Dump(ref)
    for drifts in range(WORLD):
        loop(d, os.path.join(tmp, f"drift{drifts}"), drifts, rank)
    dist.barrier()
    dist.destroy_process_group()
    open(os.path.join(tmp, f"done.{rank}"), "w").close()


def body(tmp):
    binary = sys.argv[1]
    ref = os.path.join(tmp, "ref")
    common.parity_dump(binary, SCENARIO, ref, STEPS, extra=("--trace",))
    common.spawn_ranks(rank_main, (common.free_port(), ref, tmp), WORLD, tmp, 200)
    said = []
    for drifts in range(WORLD):
        code, out, root = common.parity_compare(binary, ref, os.path.join(tmp, f"drift{drifts}"))
        print(out, end="")
        # rank 1: the replicas row is the root; rank 0 (the copy written): its params row at step 1 too
        first = "replicas every rank's copies at step 1" if drifts else "param embedding at step 1"
        check(code == 1 and root.startswith("root: " + first) and "replicas every rank's copies" in root,
              f"rank {drifts} drifts: exit {code}, root {root!r}: expected {first!r}, the replicas row at step 1")
        want = f"enters at step 2, the first forward to read the copies: embed, forward, micro-batch "
        check(want in root and f", rank {drifts} (dp {drifts}), element " in root,
              f"rank {drifts} drifts: root {root!r}: expected {want!r} ... rank {drifts} (dp {drifts})")
        said.append(f"rank {drifts}: " + root[root.index("enters at"):][:110])
    return " | ".join(said)


if __name__ == "__main__":
    common.main("trace replica " + SCENARIO, body)
