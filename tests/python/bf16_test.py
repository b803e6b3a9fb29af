"""bf16 in parity_torch (issue 46 item 6): parity's bf16 policy (fp32 compute, masters, optimizer
state and gradient reductions; bf16 storage of the parameters' compute copy and of the
activations at parity's storage points: python/parity_torch/precision.py) held to a reference
dumped with `parity dump --precision bf16`.

The runs (parity_torch.train, which applies the policy for a bf16 scenario):
- one process, and torch DistributedDataParallel over gloo with W = 2 (fp32 gradient
  all-reduce): each must PASS `parity compare`; the worst row's error over its bound is printed;
- the planted bug no_fp32_master (DDP W = 2): the parameters stay rounded to bf16 after the
  step's forwards and backwards, so the update lands on bf16 values (the zoo's no_fp32_master):
  it must FAIL with root "param ... rounded to bf16" at step 0.
PARITY_BF16_TEST_BREAK=storage runs the correct runs without the activation storage points,
=params without the rounded compute copy (the break tests: the PASS assertion must then fail).

Usage: bf16_test.py PARITY_BINARY SCENARIO STEPS
"""
import contextlib
import datetime
import os
import sys

import torch
import torch.distributed as dist

import common
from common import check
from parity_torch import Dump, ReferenceModel, train

WORLD = 2
RANK_TIMEOUT_S = 60
DEADLINE_S = 200


def _broken():
    """PARITY_BF16_TEST_BREAK: take one half of the policy away (the break test)."""
    what = os.environ.get("PARITY_BF16_TEST_BREAK", "")
    mod = sys.modules["parity_torch.train"]
    if what == "storage":
        mod.bf16_storage = lambda m: m
    elif what == "params":
        mod.bf16_params = lambda m, masters=True: contextlib.nullcontext()
    return what


def run_one(ref, out, steps, bug=None, ddp=False):
    d = Dump(ref)
    model = ReferenceModel(d.scenario.model, d.scenario.torch_dtype)
    model.load_parity_state(d.init())
    wrapper = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True) if ddp else None
    train(model, d.scenario, steps, out_dir=out, ddp=wrapper, bug=bug)


def rank_main(rank, port, ref, outs, steps):
    torch.set_num_threads(1)
    _broken()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=RANK_TIMEOUT_S))
    for out, bug in outs:
        run_one(ref, out, steps, bug, ddp=True)
    dist.barrier()
    dist.destroy_process_group()
    open(os.path.join(os.path.dirname(ref), f"done.{rank}"), "w").close()


def body(tmp):
    binary, scen, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    broken = _broken()
    ref = os.path.join(tmp, "ref")
    common.parity_dump(binary, scen, ref, steps, "bf16")
    one, ddp, bad = (os.path.join(tmp, n) for n in ("one", "ddp2", "ddp2_no_fp32_master"))
    run_one(ref, one, steps)
    common.spawn_ranks(rank_main, (common.free_port(), ref, [(ddp, None), (bad, "no_fp32_master")], steps),
                       WORLD, tmp, DEADLINE_S)
    said = []
    for name, out in (("one process", one), (f"DDP W = {WORLD}", ddp)):
        print(f"--- bf16 {name}" + (f" (PARITY_BF16_TEST_BREAK={broken})" if broken else ""))
        code, root, ratio, row = common.worst_over_bound(binary, ref, out, os.path.join(tmp, "report.json"))
        check(code == 0, f"bf16 {name} fails parity compare against the bf16 dump: {root}")
        said.append(f"{name} PASS, worst row {row} = {ratio:.3f} of its bound")
    common.smoke_refuses(ref, one, "a bf16 reference")  # the smoke check cannot judge it: exit 2, not a verdict
    print("--- planted bug: no_fp32_master")
    code, root, _, _ = common.worst_over_bound(binary, ref, bad, os.path.join(tmp, "report.json"))
    want = "rounded to bf16"
    check(code == 1 and root.startswith("root: param ") and " at step 0" in root and want in root,
          f"no_fp32_master: exit {code}, root {root!r}: expected exit 1, a param row at step 0, {want!r}")
    said.append("no_fp32_master: " + root[:120])
    return "; ".join(said)


if __name__ == "__main__":
    common.main("bf16 " + os.path.basename(sys.argv[2]), body)
