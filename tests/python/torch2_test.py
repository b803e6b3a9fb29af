"""Real FSDP2 (`fully_shard`) and real DTensor tensor / sequence parallelism of torch >= 2.4,
held to parity's one-device reference through the bridge (issue 49): parity_torch's
ReferenceModel is trained by torch's own parallel code over gloo on the CPU, the Collector
records it (sharded parameters and gradients gathered with full_tensor()), and
`parity compare` against `parity dump` must PASS. Then a planted bug must FAIL with its root:

  fsdp2  fully_shard on every block and on the root, W data-parallel ranks (parity's batch
         split); FSDP2 averages gradients over the ranks, so each rank back-propagates W times
         its part of the global loss. Bug "loss_not_scaled": the part is back-propagated as it
         is (a loss averaged twice): every gradient x 1/W, root "grad ... 1/W".
  tp     W tensor-parallel ranks with sequence parallelism, as torchtitan's plan for a
         transformer: the embedding RowwiseParallel into sequence shards, LayerNorms
         SequenceParallel, attention and the dense MLP column / row parallel around gathered
         inputs, the MoE (router, grouped experts, shared expert) replicated on gathered tokens,
         the head ColwiseParallel gathered. Bug "norm_not_sequence_parallel": the LayerNorms left
         out of the plan, so each rank's norm weights see only its own positions and their
         gradients are never summed over the ranks (pytorch#190626's class): root "grad layernorm".

With COLLECT "shards" the Collector takes each sharded parameter and gradient as torch holds
it (FSDP2's Shard(0) pieces, DTensor's Shard(0) / Shard(1) columns and rows: the DTensors'
own placements, the gradients' read each step, nothing gathered in the loop: Collector
placements="as_held"; issue 46 item 5) and `parity compare` assembles
them; by default ("full") it gathers them with full_tensor().

Usage: torch2_test.py PARITY_BINARY MODE SCENARIO STEPS WORLD [COLLECT]
Exit 0 PASS, 1 FAIL, 77 skipped (torch < 2.4, or without fully_shard / DTensor: Debian's torch
1.13 here; the GPU machine's torch 2.11 runs it, docs/gpu.md).
"""
import datetime
import importlib
import json
import os

os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
import sys

import torch
import torch.distributed as dist

import common
from common import check
from parity_torch import Collector, Dump, MarkovData, ParityOptimizer, ReferenceModel, dp_sequences

RANK_TIMEOUT_S = 60
DEADLINE_S = 240
BUGS = {"fsdp2": "loss_not_scaled", "tp": "norm_not_sequence_parallel"}
ROOTS = {"loss_not_scaled": "root: grad ", "norm_not_sequence_parallel": "root: grad layernorm"}


def missing():
    """Why this torch cannot run the test, or ''."""
    major_minor = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    if major_minor < (2, 4):
        return f"torch {torch.__version__} is older than 2.4 (no FSDP2 / public DTensor)"
    try:
        fully_shard()
        importlib.import_module("torch.distributed.tensor.parallel")
    except ImportError as e:
        return f"torch {torch.__version__}: {e}"
    return ""


def fully_shard():
    try:
        from torch.distributed.fsdp import fully_shard as fs  # torch >= 2.6
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard as fs  # 2.4, 2.5
    return fs


def shard_fsdp2(model, mesh):
    fs = fully_shard()
    for block in model.layers:
        fs(block, mesh=mesh)
    fs(model, mesh=mesh)


def tensor_parallel(model, mesh, bug):
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, PrepareModuleOutput,
                                                   RowwiseParallel, SequenceParallel, parallelize_module)
    norms = bug != "norm_not_sequence_parallel"
    gathered = lambda: PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    top = {"embed": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
           "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())}
    if norms:
        top["final_ln"] = SequenceParallel()
    parallelize_module(model, mesh, top)
    for block in model.layers:
        plan = {"attn": gathered(), "attn.wq": ColwiseParallel(), "attn.wk": ColwiseParallel(),
                "attn.wv": ColwiseParallel(), "attn.wo": RowwiseParallel(output_layouts=Shard(1))}
        if norms:
            plan.update({"ln1": SequenceParallel(), "ln2": SequenceParallel()})
        if hasattr(block, "mlp"):
            plan.update({"mlp": gathered(), "mlp.w1": ColwiseParallel(), "mlp.w3": ColwiseParallel(),
                         "mlp.w2": RowwiseParallel(output_layouts=Shard(1))})
        parallelize_module(block, mesh, plan)
        if hasattr(block, "moe"):  # replicated on the gathered tokens, its output back to sequence shards
            parallelize_module(block.moe, mesh, PrepareModuleInput(
                input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_output=True))
            parallelize_module(block.moe, mesh, PrepareModuleOutput(
                output_layouts=(Replicate(),), desired_output_layouts=(Shard(1),), use_local_output=True))


def full(t):
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def clip(model, max_norm):
    """parity's global-norm clipping over the full gradients: coef = min(1, max / (norm + 1e-6))."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = sum(float((full(g).to(torch.float64) ** 2).sum()) for g in grads) ** 0.5
    coef = min(1.0, max_norm / (norm + 1e-6))
    if coef < 1.0:
        for g in grads:
            g.mul_(coef)


def train(model, scn, steps, out, mode, rank, world, bug, collect):
    cfg, o = scn.model, scn.optim
    dp_rank, dp = (rank, world) if mode == "fsdp2" else (0, 1)
    data = MarkovData(cfg.vocab, scn.data_seed)
    if o.kind == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps,
                               weight_decay=o.weight_decay, foreach=False)
    else:
        opt = ParityOptimizer.from_config(model.parameters(), o)
    held = {}
    if collect == "shards":
        held = {"mesh": {"dp" if mode == "fsdp2" else "tp": (rank, world)}, "placements": "as_held"}
    col = Collector(out, scn, model, dp=(dp_rank, dp), tp=(rank, world) if mode == "tp" else None, **held)
    for step in range(steps):
        opt.zero_grad()
        for mb in range(cfg.microbatches):
            lo, hi = dp_sequences(cfg.batch, cfg.microbatches, mb, dp, dp_rank)
            x, y = data.batch(step, lo, hi - lo, cfg.seq)
            part = model(x, y)
            col.micro(part, x, y)
            scale = world if mode == "fsdp2" and bug != "loss_not_scaled" else 1
            (part * scale).backward()
        col.grads()
        if o.clip > 0:
            clip(model, o.clip)
        opt.step()
        model.update_expert_bias(dist.all_reduce if dp > 1 else None)
        col.step()
    col.close()


def rank_main(rank, port, ref, mode, world, runs, steps, tmp, collect):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=RANK_TIMEOUT_S))
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cpu", (world,))
    d = Dump(ref)
    for out, bug in runs:
        model = ReferenceModel(d.scenario.model, d.scenario.torch_dtype)
        model.load_parity_state(d.init())
        if mode == "fsdp2":
            shard_fsdp2(model, mesh)
        else:
            tensor_parallel(model, mesh, bug)
        train(model, d.scenario, steps, out, mode, rank, world, bug, collect)
    dist.barrier()
    dist.destroy_process_group()
    open(os.path.join(tmp, f"done.{rank}"), "w").close()


def body(tmp):
    binary, mode, scen, steps, world = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    collect = sys.argv[6] if len(sys.argv) > 6 else "full"
    check(mode in BUGS, f"mode must be one of {', '.join(BUGS)}, got {mode!r}")
    check(collect in ("full", "shards"), f"COLLECT must be full or shards, got {collect!r}")
    ref = os.path.join(tmp, "ref")
    common.parity_dump(binary, scen, ref, steps, "fp64")
    bug = BUGS[mode]
    good, bad = os.path.join(tmp, mode), os.path.join(tmp, f"{mode}_{bug}")
    common.spawn_ranks(rank_main, (common.free_port(), ref, mode, world, [(good, None), (bad, bug)], steps, tmp,
                                   collect), world, tmp, DEADLINE_S)
    if collect == "shards":
        with open(os.path.join(good, "manifest.json")) as f:
            placed = json.load(f).get("placements", {})
        check(placed, "the manifest records no sharded tensor: the shards were not collected as held")
        print(f"== {mode}: {len(placed)} tensors collected as torch holds them, e.g. "
              f"{next(iter(placed))}: {placed[next(iter(placed))]['placements']}")
    print(f"== {mode} W = {world}, torch {torch.__version__}, {collect}: the correct run")
    common.parity_verdict(binary, ref, good)
    print(f"== {mode} W = {world}: planted bug {bug}")
    root = common.parity_verdict(binary, ref, bad, ROOTS[bug])
    if bug == "loss_not_scaled":
        check(f"1/{world}" in root, f"the root does not name 1/{world}: {root!r}")
    return f"{mode} W={world} ({collect}) torch {torch.__version__} passes parity compare; {bug}: {root}"


if __name__ == "__main__":
    why = missing()
    if why:
        print(f"python torch2 {' '.join(sys.argv[2:3])}: SKIPPED: {why}")
        sys.exit(77)
    common.main(f"torch2 {sys.argv[2]} W={sys.argv[5]} {os.path.basename(sys.argv[3])} {' '.join(sys.argv[6:])}",
                body)
