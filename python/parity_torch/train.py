"""A training loop that does what parity's one-device baseline does (harness/runner/baseline.cpp),
on one process or on the data-parallel ranks of torch DistributedDataParallel, with the
collector's lines marked. tests/python uses it; docs/framework.md shows the same lines in a
loop of your own.

Per step: micro-batches as torch.tensor_split of the B sequences, each over the ranks as
torch.chunk (data.dp_sequences); each part of the loss is normalised by the global B*S, so
gradients accumulate as a plain sum; DDP averages over W ranks, so each rank back-propagates
W times its part. Then clip (parity's global norm), the optimizer step, the expert-bias update
from the counts summed over the ranks.
"""
import contextlib

import torch
import torch.distributed as dist

from .collector import Collector
from .data import MarkovData, dp_sequences
from .optim import ParityOptimizer, clip_grads
from .precision import bf16_params, bf16_storage


def train(model, scenario, steps, out_dir=None, ddp=None, data=None, tokens=None, bug=None, split=None, trace=None):
    """Trains `steps` steps; records them into out_dir when given. ddp: the model's
    DistributedDataParallel wrapper. data: a MarkovData (default: from the scenario's data_seed);
    tokens(step) -> (inputs, targets) (B, S) reads them instead (e.g. Dump.tokens).
    Planted bugs (tests/python/ddp_test.py): bug="average_twice" divides the reduced gradients
    by W once more; bug="counts_per_rank" updates the expert bias from each rank's own tokens per
    expert (no all_reduce of the counts); bug="replica_diverges": rank 1's first parameter moves
    by 1e-6 after step 1's update, a replica updated apart from the others; bug="per_rank_mean":
    each rank's loss part is the mean over its own sequences (DDP's average then right only for
    equal ranks); bug="clip_before_sync": each rank clips its own gradients before they are
    averaged. split(step, mb, rank, world) -> the global sequence
    indices this rank trains in micro-batch mb (any split, tests/python/splits_test.py; default:
    parity's, data.dp_sequences), handed to the Collector as sequences=. A bf16 scenario
    (precision "bf16") trains with parity's bf16 policy (precision.py): storage points on the
    model, the parameters' compute copy rounded for the step's forwards and backwards, fp32
    masters, gradients and DDP reductions; bug="no_fp32_master" leaves the parameters rounded,
    so the update lands on bf16 values. trace: a trace map for the Collector (trace.py)."""
    cfg = scenario.model
    net = ddp if ddp is not None else model
    rank, world = (dist.get_rank(), dist.get_world_size()) if ddp is not None else (0, 1)
    if tokens is None:
        data = data or MarkovData(cfg.vocab, scenario.data_seed)
    opt = ParityOptimizer.from_config(model.parameters(), scenario.optim)
    col = Collector(out_dir, scenario, net, trace=trace) if out_dir else None  # collector line 1
    losses = []
    for step in range(steps):
        opt.zero_grad(set_to_none=False)
        full = tokens(step) if tokens is not None else None
        bf16 = scenario.precision == "bf16"
        if bf16:
            bf16_storage(model)
        compute_copy = bf16_params(model, masters=bug != "no_fp32_master") if bf16 else contextlib.nullcontext()
        with compute_copy:
            total = _micro_batches(net, model, scenario, step, full, data, col, split, bug, rank, world, ddp)
        if bug == "clip_before_sync":  # each rank clips its own gradients, then they are averaged
            clip_grads(model.parameters(), scenario.optim.clip)
            for p in model.parameters():
                if p.grad is not None:
                    dist.all_reduce(p.grad)
                    p.grad.div_(world)
        if bug == "average_twice":
            for p in model.parameters():
                if p.grad is not None:
                    p.grad.div_(world)
        if col:
            col.grads()  # collector line 3
        clip_grads(model.parameters(), scenario.optim.clip)
        opt.step()
        if bug == "replica_diverges" and rank == 1 and step == 1:  # one rank's copy drifts apart
            with torch.no_grad():
                next(iter(model.parameters())).mul_(1 + 1e-6)
        model.update_expert_bias(dist.all_reduce if ddp is not None and bug != "counts_per_rank" else None)
        if col:
            col.step()  # collector line 4
        losses.append(total)
    if col:
        col.close()  # collector line 5
    return losses


def _micro_batches(net, model, scenario, step, full, data, col, split, bug, rank, world, ddp):
    """One step's forwards and backwards; returns the sum of this rank's loss parts."""
    cfg, total = scenario.model, 0.0
    for mb in range(cfg.microbatches):
        lo, hi = dp_sequences(cfg.batch, cfg.microbatches, mb, world, rank)
        index = list(split(step, mb, rank, world)) if split else list(range(lo, hi))
        x, y = (full[0][index], full[1][index]) if full else data.sequences(step, index, cfg.seq)
        last = mb == cfg.microbatches - 1 and bug != "clip_before_sync"
        with net.no_sync() if ddp is not None and not last else contextlib.nullcontext():
            part = net(x, y)
            if bug == "per_rank_mean" and index:  # this rank's own mean, then DDP's average
                part = part * cfg.batch / (len(index) * world * cfg.microbatches)
            if col:
                col.micro(part, x, y, sequences=index)  # collector line 2
            (part * world).backward() if world > 1 else part.backward()
        total += float(part.detach())
    return total
