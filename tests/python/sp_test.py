"""A hand-written tensor/sequence-parallel layout over gloo, W = 4 = dp 2 x tp 2 (issue 29), and
the planted bug "the router's gradient not reduced over the tensor/sequence-parallel group".

This is an EMULATION, not torch tensor parallelism: torch 1.13 has no DTensor, and parity_torch
keeps every weight whole. What it reproduces is sequence parallelism's gradient structure, the
part this bug is about, Megatron-LM style, in plain torch.distributed (no DDP wrapper):
- rank = dp_rank * 2 + tp_rank; the tp group {0, 1}, {2, 3}; the dp group {0, 2}, {1, 3}.
  Every rank of a tp group reads its data-parallel rank's sequences of each micro-batch.
- The residual stream is split along the sequence: each tp rank holds S/2 of the positions of
  every sequence. LayerNorms and the MoE router (gate, scores) run on those local tokens only,
  as under Megatron's sequence parallelism, so their gradients are partial sums.
- Before attention, the dense MLP and the MoE's experts the activations (and the router's
  scores) are all-gathered over the tp group (Megatron's gather_from_sequence_parallel_region),
  after them scattered back to the local positions; the final LayerNorm's output is gathered
  for the head. Megatron shards those weights across the tp ranks and reduce-scatters in the
  backward; here every tp rank holds the whole weight and computes the whole (replicated)
  result, so the gather's backward takes this rank's slice of the (identical) gradient instead
  of reduce-scattering partial ones. Either way those weights' gradients come out complete on
  every tp rank, and the LayerNorm and router gradients do not.
- The gradient reduction is Megatron's finalize_model_grads by explicit lists: the parameters
  marked `sequence_parallel` (the LayerNorm weights and biases and the MoE router gate, as
  Megatron-LM marks them) are all-reduced over the tp group, then every gradient over the dp
  group (summed: each rank's loss part is already normalised by the global B*S).
- The expert bias is updated from the tokens per expert summed over the dp group.
- The Collector records it: group = the dp group, dp and tp given, so its manifest's producer
  reads world 4, dp 2, tp 2; rank 0 (dp 0, tp 0) writes.

The correct layout must pass against `parity dump`'s one-device reference within TOL (1e-10 in
fp64). The planted bug leaves the router gate out of the sequence-parallel list (the gate's
weight not marked sequence_parallel): each tp rank steps with the router gradient of its own
positions only. It must FAIL with the root named "root: grad router at step 0".

Usage: sp_test.py PARITY_BINARY SCENARIO STEPS [TOL]   (seq must be even)
PARITY_SP_TEST_BREAK=1 plants the bug in the "correct" run too (a break-test: the PASS
assertion must then fail).
"""
import datetime
import os
import sys

import torch
import torch.distributed as dist

import common
from common import check, compared, line_starting
from parity_torch import Collector, Dump, MarkovData, ParityOptimizer, ReferenceModel, clip_grads, dp_sequences

WORLD, TP = 4, 2
DP = WORLD // TP
RANK_TIMEOUT_S = 60
DEADLINE_S = 100  # all ranks, both runs (ctest's TIMEOUT is 120)


class GatherSeq(torch.autograd.Function):
    """Forward: all-gather the local positions (dim 1) over the tp group. Backward: this rank's
    slice of the gradient (what follows is computed whole on every tp rank, so every rank holds
    the same full gradient; Megatron, with sharded weights, reduce-scatters partial ones)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=1)

    @staticmethod
    def backward(ctx, g):
        n, r = dist.get_world_size(ctx.group), dist.get_rank(ctx.group)
        return g.chunk(n, dim=1)[r].clone(), None


class ScatterSeq(torch.autograd.Function):
    """Forward: this rank's positions of a whole (replicated) activation. Backward: all-gather
    the local gradients, so the replicated computation before it sees the whole gradient."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        n, r = dist.get_world_size(group), dist.get_rank(group)
        return x.chunk(n, dim=1)[r].clone()

    @staticmethod
    def backward(ctx, g):
        parts = [torch.empty_like(g) for _ in range(dist.get_world_size(ctx.group))]
        dist.all_gather(parts, g.contiguous(), group=ctx.group)
        return torch.cat(parts, dim=1), None


def sp_loss(model, x, y, tp_group):
    """This data-parallel rank's part of the loss (the same on every rank of its tp group), with
    the residual stream split over the tp group's ranks along the sequence."""
    gather = lambda t: GatherSeq.apply(t, tp_group)  # noqa: E731
    scatter = lambda t: ScatterSeq.apply(t, tp_group)  # noqa: E731
    h = scatter(model.embed(x))  # (b, S / tp, D)
    for block in model.layers:
        h = h + scatter(block.attn(gather(block.ln1(h))))
        z = block.ln2(h)  # local positions
        if hasattr(block, "moe"):
            m = block.moe
            out = m(gather(z), scores=gather(m.scores(z)))  # the router scores local tokens only
        else:
            out = block.mlp(gather(z))
        h = h + scatter(out)
    h = gather(model.final_ln(h))
    logits = model.logits_tap(h @ model.embed.weight.t() if model.lm_head is None else model.lm_head(h))
    return model.loss_of(logits, y)


def mark_sequence_parallel(model, router=True):
    """Megatron-LM's `sequence_parallel` attribute: parameters replicated over the tp group that
    see only local tokens. router=False is the planted bug."""
    for m in model.modules():
        if isinstance(m, torch.nn.LayerNorm):
            m.weight.sequence_parallel = m.bias.sequence_parallel = True
    if router:
        for m in model.moe_layers():
            m.router.gate.weight.sequence_parallel = True


def finalize_grads(model, tp_group, dp_group):
    """Megatron's finalize_model_grads, by explicit lists: the sequence-parallel gradients over the
    tp group, then every gradient over the dp group."""
    params = list(model.parameters())
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    for p in params:
        if getattr(p, "sequence_parallel", False):
            dist.all_reduce(p.grad, group=tp_group)
    for p in params:
        dist.all_reduce(p.grad, group=dp_group)


def train_sp(model, scn, steps, out, tp_group, dp_group, dp, tp, bug):
    cfg = scn.model
    mark_sequence_parallel(model, router=bug != "router_not_reduced")
    data = MarkovData(cfg.vocab, scn.data_seed)
    opt = ParityOptimizer.from_config(model.parameters(), scn.optim)
    col = Collector(out, scn, model, group=dp_group, dp=dp, tp=tp)  # collector line 1
    for step in range(steps):
        opt.zero_grad(set_to_none=False)
        for mb in range(cfg.microbatches):
            lo, hi = dp_sequences(cfg.batch, cfg.microbatches, mb, dp[1], dp[0])
            x, y = data.batch(step, lo, hi - lo, cfg.seq)
            if hi > lo:
                part = sp_loss(model, x, y, tp_group)
                col.micro(part, x, y)  # collector line 2
                part.backward()
            else:  # no sequence for this dp rank (both ranks of its tp group skip alike)
                col.micro(torch.zeros((), dtype=scn.torch_dtype), x, y)
        finalize_grads(model, tp_group, dp_group)
        col.grads()  # collector line 3
        clip_grads(model.parameters(), scn.optim.clip)
        opt.step()
        model.update_expert_bias(lambda c: dist.all_reduce(c, group=dp_group))
        col.step()  # collector line 4
    col.close()  # collector line 5


def rank_main(rank, port, ref, outs, steps):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=RANK_TIMEOUT_S))
    dp_rank, tp_rank = divmod(rank, TP)
    tp_groups = [dist.new_group([d * TP + t for t in range(TP)]) for d in range(DP)]  # every rank creates all
    dp_groups = [dist.new_group([d * TP + t for d in range(DP)]) for t in range(TP)]
    d = Dump(ref)
    for out, bug in outs:
        model = ReferenceModel(d.scenario.model, d.scenario.torch_dtype)
        model.load_parity_state(d.init())
        train_sp(model, d.scenario, steps, out, tp_groups[dp_rank], dp_groups[tp_rank], (dp_rank, DP),
                 (tp_rank, TP), bug)
    dist.barrier()
    dist.destroy_process_group()
    open(os.path.join(os.path.dirname(ref), f"done.{rank}"), "w").close()


def body(tmp):
    binary, scen, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    tol = float(sys.argv[4]) if len(sys.argv) > 4 else 1e-10
    ref = os.path.join(tmp, "ref")
    common.parity_dump(binary, scen, ref, steps, "fp64")
    check(Dump(ref).scenario.model.seq % TP == 0, f"{scen}: seq must be a multiple of tp = {TP}")
    good, bad = os.path.join(tmp, "sp"), os.path.join(tmp, "sp_router_not_reduced")
    broken = os.environ.get("PARITY_SP_TEST_BREAK") == "1"
    outs = [(good, "router_not_reduced" if broken else None), (bad, "router_not_reduced")]
    common.spawn_ranks(rank_main, (common.free_port(), ref, outs, steps), WORLD, tmp, DEADLINE_S)

    ok, rows, _, _ = compared(ref, good, tol, f"{scen}: emulated sequence parallel, dp {DP} x tp {TP} over gloo, "
                                              f"fp64, {steps} steps, against the one-device dump"
                                              + (" (PARITY_SP_TEST_BREAK: the bug planted)" if broken else ""))
    check(ok, "the sequence-parallel layout differs from parity's one-device dump (table above)")
    common.parity_verdict(binary, ref, good)
    worst = max((r for n, r in rows.items() if n.startswith("grad ")), key=lambda r: r.max)
    bok, _, _, text = compared(ref, bad, tol, "planted bug: the router gate left out of the sequence-parallel "
                                              "gradient all-reduce over the tp group")
    check(not bok, "the planted bug passed the comparison")
    root = line_starting(text, "root: ")
    check(root.startswith("root: grad router at step 0"), f"the root is not the router at step 0: {root!r}")
    check("FAIL from step 0" in line_starting(text, "grad router "), "the grad router row does not fail from step 0")
    proot = common.parity_verdict(binary, ref, bad, "root: grad router at step 0")
    root += " | parity compare " + proot
    return f"dp {DP} x tp {TP} worst {worst.name} {worst.max:.2e} <= {tol:g}; planted bug caught: {root}"


if __name__ == "__main__":
    common.main("sp emulated dp2 x tp2 " + os.path.basename(sys.argv[2]), body)
