"""Traces of a sequence-parallel layout, each rank's shard with its placement (issue 45 item 4): the
hand-written sequence-parallel emulation of sp_test.py (its sp_loss, mark_sequence_parallel and
finalize_grads) on dp 1 x tp 2 (W = 2, gloo), fsdp2_tp2_sp_uneven_b3_mb2's model. The LayerNorms,
the residual they read and the router run on this rank's positions: the trace map says so,
{"tp": "Shard(1)"}; the rest is computed whole on both ranks (Replicate, tp rank 0's copy written).
- clean, traced: `parity compare` passes, every traced tensor within its bound (the block outputs,
  h_out, are not traced: sp_loss runs the block's parts, not the block);
- LayerNorm eps 1e-6 in layers.1.ln2 on tp rank 1 alone (a forward-only bug on one lane): fails, the
  root line names "enters at layer 1 ln2, forward, ..., rank 1 (dp 0, tp 1)" at a position of the
  second half of the sequence, the lane's own.

Usage: trace_sp_test.py PARITY_BINARY [STEPS]
"""
import datetime
import os
import re

os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
import sys

import torch
import torch.distributed as dist

import common
from common import check
from parity_torch import Collector, Dump, MarkovData, ParityOptimizer, ReferenceModel, dp_sequences, trace_map
from sp_test import finalize_grads, mark_sequence_parallel, sp_loss

WORLD = TP = 2
SCENARIO = "fsdp2_tp2_sp_uneven_b3_mb2"
LOCAL = ("ln1", "ln2", "h_mid", "router", "final_ln")  # computed on this rank's positions


def sp_trace_map(cfg):
    return [e + ({"tp": "Shard(1)"},) if e[0].split(".")[-1] in LOCAL else e for e in trace_map(cfg)]


def loop(d, out, bug, tp_rank, tp_group, dp_group, steps):
    scn, cfg = d.scenario, d.scenario.model
    model = ReferenceModel(cfg, scn.torch_dtype)
    model.load_parity_state(d.init())
    if bug and tp_rank == 1:  # the planted forward-only bug on one lane
        model.layers[1].ln2.eps = 1e-6
    mark_sequence_parallel(model)
    data = MarkovData(cfg.vocab, scn.data_seed)
    opt = ParityOptimizer.from_config(model.parameters(), scn.optim)
    col = Collector(out, scn, model, group=dp_group, dp=(0, 1), tp=(tp_rank, TP), trace=sp_trace_map(cfg))
    for step in range(steps):
        opt.zero_grad(set_to_none=False)
        for mb in range(cfg.microbatches):
            lo, hi = dp_sequences(cfg.batch, cfg.microbatches, mb, 1, 0)
            x, y = data.batch(step, lo, hi - lo, cfg.seq)
            part = sp_loss(model, x, y, tp_group)
            col.micro(part, x, y)
            part.backward()
        finalize_grads(model, tp_group, dp_group)
        col.grads()
        opt.step()
        model.update_expert_bias(lambda c: dist.all_reduce(c, group=dp_group))
        col.step()
    col.close()


def rank_main(rank, port, ref, tmp, steps):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=60))
    tp_group = dist.new_group([0, 1])
    dp_groups = [dist.new_group([r]) for r in range(WORLD)]  # every rank creates each
    d = Dump(ref)
    for name, bug in (("clean", False), ("ln_eps_lane1", True)):
        loop(d, os.path.join(tmp, name), bug, rank, tp_group, dp_groups[rank], steps)
    dist.barrier()
    dist.destroy_process_group()
    open(os.path.join(tmp, f"done.{rank}"), "w").close()


def body(tmp):
    binary = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    ref = os.path.join(tmp, "ref")
    common.parity_dump(binary, SCENARIO, ref, steps, extra=("--trace",))
    common.spawn_ranks(rank_main, (common.free_port(), ref, tmp, steps), WORLD, tmp, 200)
    code, out, _ = common.parity_compare(binary, ref, os.path.join(tmp, "clean"))
    print(out, end="")
    head = common.line_starting(out, "trace: ")
    check(code == 0 and "  no traced tensor over its bound" in out.splitlines(),
          f"the clean sequence-parallel run: exit {code}, or a traced tensor over its bound: {head!r}")
    n = int(head.split()[1])
    check(n == 48, f"the clean run compared {n} traced tensors, expected 48 (parity's 52 less h_out's 4)")
    code, out, root = common.parity_compare(binary, ref, os.path.join(tmp, "ln_eps_lane1"))
    print(out, end="")
    m = re.search(r"enters at layer 1 ln2, forward, micro-batch \d, rank 1 \(dp 0, tp 1\), element \[sequence \d, "
                  r"position (\d)", root)
    check(code == 1 and m is not None, f"ln_eps_lane1: exit {code}, root {root!r}: expected exit 1 naming layer 1 "
                                       "ln2, forward, on rank 1 (dp 0, tp 1)")
    S = Dump(ref).scenario.model.seq
    check(int(m.group(1)) >= S // 2, f"ln_eps_lane1: position {m.group(1)} is not tp lane 1's (>= {S // 2})")
    return f"clean: PASS, {n} traced | lane 1's eps: " + root[root.index("enters at"):][:150]


if __name__ == "__main__":
    common.main("trace sp dp1 x tp2 " + SCENARIO, body)
