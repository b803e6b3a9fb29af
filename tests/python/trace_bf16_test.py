"""Traces under parity's bf16 policy (issue 45 item 4 with issue 46 item 6): a traced torch run with
parity_torch's bf16 storage points (precision.py) against `parity dump --precision bf16 --trace`, one process
and DDP W = 2 (gloo), through parity_torch.train (which creates the Collector, trace= included, before it puts
the storage points on the model: the order a loop of one's own may well have).
- a traced tensor at a storage point (a LayerNorm's output, v, the attention output wo reads, the router's
  logits, the final LayerNorm's) is the stored bf16 value: every element of the candidate's trace is a bf16
  number (the trace's hook runs after the storage point's, whichever was registered first);
- each run passes `parity compare`, every traced tensor within its bound, none left out.

Usage: trace_bf16_test.py PARITY_BINARY SCENARIO STEPS
"""
import datetime
import os

os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
import sys

import torch
import torch.distributed as dist

import common
from common import check
from parity_torch import Dump, ReferenceModel, safetensors, trace_map, train

WORLD = 2
STORED = ("layers.0.ln1", "layers.0.v", "layers.0.attn", "layers.1.ln2", "layers.1.router", "final_ln")


def run_one(ref, out, steps, ddp=False):
    d = Dump(ref)
    model = ReferenceModel(d.scenario.model, d.scenario.torch_dtype)
    model.load_parity_state(d.init())
    wrapper = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True) if ddp else None
    train(model, d.scenario, steps, out_dir=out, ddp=wrapper, trace=trace_map(d.scenario.model))


def rank_main(rank, port, ref, out, steps):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=60))
    run_one(ref, out, steps, ddp=True)
    dist.barrier()
    dist.destroy_process_group()
    open(os.path.join(os.path.dirname(ref), f"done.{rank}"), "w").close()


def body(tmp):
    binary, scen, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ref = os.path.join(tmp, "ref")
    common.parity_dump(binary, scen, ref, steps, "bf16", extra=("--trace",))
    one, ddp = os.path.join(tmp, "one"), os.path.join(tmp, "ddp2")
    run_one(ref, one, steps)
    common.spawn_ranks(rank_main, (common.free_port(), ref, ddp, steps), WORLD, tmp, 200)
    said = []
    for name, out in (("one process", one), (f"DDP W = {WORLD}", ddp)):
        code, out_text, root = common.parity_compare(binary, ref, out)
        print(out_text, end="")
        head = common.line_starting(out_text, "trace: ")
        first = common.line_starting(out_text.replace("\n  first diverging", "\nfirst diverging"), "first diverging")
        t = safetensors.read(os.path.join(out, "trace_000000.safetensors"))
        for key in STORED:
            x = t[f"trace.fwd.{key}"]
            x = x[~torch.isnan(x)]
            off = int((x != x.to(torch.bfloat16).to(x.dtype)).sum())
            check(off == 0, f"{name}: trace.fwd.{key}: {off} of {x.numel()} elements are not bf16 numbers (the "
                            f"trace read the output before its storage point rounded it); compare: exit {code}, "
                            f"{first or head!r}")
        check(code == 0 and "  no traced tensor over its bound" in out_text.splitlines()
              and "not traced by the candidate" not in out_text,
              f"bf16 {name}: exit {code}, root {root!r}, {first or head!r}: expected a pass, every tensor traced")
        said.append(f"{name}: PASS, {head.split(' (')[0]}")
    return "; ".join(said)


if __name__ == "__main__":
    common.main("trace bf16 " + os.path.basename(sys.argv[2]), body)
