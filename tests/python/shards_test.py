"""Sharded tensors as they are (issue 46 item 5): a hand-sharded tensor-parallel run and an
FSDP-style flat-shard run over gloo, W = 4, each rank's shards collected with their placements
(no gather in the loop), judged by `parity compare` against `parity dump`'s one-device reference.

Tensor parallel, dp 2 x tp 2 (rank = dp * 2 + tp), Megatron-LM style with sequence parallelism:
- attention wq, wk, wv are ColumnParallelLinear (each tp rank holds half the heads: rows of the
  (out, in) weight), wo RowParallelLinear (columns); the dense MLP's w1, w3 column, w2 row. The
  model's nn.Linear weights are replaced by those slices: what a rank holds IS its shard.
- the residual stream is split along the sequence; before a sharded block the activations are
  all-gathered (backward: reduce-scatter), after it the partial outputs reduce-scattered
  (backward: all-gather). LayerNorms and the router score local positions only, so their
  gradients are Partial over tp until finalize reduces them; the MoE layer runs whole on every
  tp rank (gathered tokens), its weights replicated.
- finalize: every gradient all-reduced over dp; the Collector takes the gradients then (the
  LayerNorm and router ones recorded "Partial" over tp); then those are all-reduced over tp.
Placements: {"tp": "column"} / {"tp": "row"} (Replicate over dp); grads of the sequence-parallel
weights {"tp": "Partial"}. The Collector's lines: 5 as before, plus the mesh and placement
arguments (the gradient norm is measured from the shards, the clip coefficient by each rank).

FSDP-style flat shard, dp 4: every parameter (torch's layout) flattened and concatenated, padded
to 4 equal pieces; rank r holds piece r (its Adam state too), all-gathers the pieces before the
forward, reduce-scatters (all-reduce + its slice) the gradients, steps its piece. Placements
{"flat": (offset, numel)} per parameter (a rank may hold none of one).

The correct runs must PASS `parity compare`. Each planted bug must FAIL with the right root:
- tp_grad_not_summed: tp rank 1's shard of layers.0.mlp.w2 is left out of the dp all-reduce:
  root "shards at step 0", naming grads.layers.0.mlp.w2, rank 3 (dp 1, tp 1) against rank 1, the
  copies "summed over dp" the reference's and "the step took it unsummed";
- wrong_offset: tp rank 1 takes its rows of layers.0.attn.wq one row early (7..14, not 8..15):
  root "shards at step 0", naming params.layers.0.attn.wq, rank 1, "a wrong shard offset";
- partial_not_summed_dp (issue 46e item 3): tp rank 1's part of final_ln.bias (Partial over tp)
  is left out of the dp all-reduce: root "shards at step 0", naming grads.final_ln.bias, rank 3
  against rank 1, its sum over tp (ranks 2, 3) not the reference's, nor ranks 0, 1's, the copies
  summed over dp and tp the reference's: "the step took it unsummed";
- clip_local_norm (issue 46e item 2, against a reference with clip 0.5): every rank clips by the
  norm of the gradients it holds (its own shards and the replicated tensors, no sum over tp),
  and tells the Collector nothing of it: the Collector measures the norm from the shards and
  each rank's coefficient, so root "clip_coef at step 0" names the ranks' coefficients, and the
  same loop clipping by the global norm (tp_clip) must PASS;
- partial_as_reduced: the sequence-parallel gradients recorded {"tp": "Replicate"} (as if reduced)
  while still Partial: root "shards at step 0", naming grads.final_ln.bias, rank 1 against rank 0,
  "summed over tp" and "a Partial tensor recorded as Replicate";
- flat_wrong_offset (the flat run): rank 1 records the offset of its piece that starts inside a
  tensor one element early (its data right): root "shards at step 0", the overlap and the gap it
  leaves and "a wrong shard offset" named (rank 1's piece of layers.0.mlp.w1 holds elements 312..511).
PARITY_SHARDS_TEST_BREAK=1 runs the correct TP layout with the shard of bug 1 (the break test:
the PASS assertion must then fail).

HSDP by hand (issue 46e item 4), rep 2 x shard 2: the flat pieces over the 2 ranks of a shard
group, replicated over "rep" ({"flat": (offset, numel), "replicate": ["rep"]}); the data over all 4
ranks; gradients all-reduced over the world (reduce-scatter over the shard group and all-reduce over
the replicas in one), each rank keeps its piece. It must PASS; hsdp_not_synced (the gradients
reduced within the shard group only) must fail with root "shards at step 0": rank 2 (rep 1, shard 0)
differs from rank 0 though Replicate over rep, summed over rep the reference's, "the step took it
unsummed".

PRECISION bf16 (issue 46e): the TP layout alone under parity's bf16 policy (parity_torch.precision: the
storage points as hooks, which round element by element and so act on a shard as on the full tensor; the
sharded weights' compute copy rounded; fp32 masters, gradients and reductions, the partial outputs of wo
and w2 summed in fp32) against `parity dump --precision bf16`: it must PASS (the worst row over its bound
is printed); tp_grad_not_summed must fail as above, and no_fp32_master (the sharded parameters left
rounded to bf16 after the step's forwards and backwards) with root "param ... at step 0 ... rounded to
bf16".

Usage: shards_test.py PARITY_BINARY SCENARIO STEPS [PRECISION]   (heads, mlp_hidden and seq even; clip 0;
PRECISION fp64, the default, or bf16)
"""
import contextlib
import datetime
import json
import math
import os
import sys

import torch
import torch.distributed as dist

import common
from common import check
from parity_torch import Collector, Dump, MarkovData, ParityOptimizer, ReferenceModel, dp_sequences, name_map
from parity_torch.optim import clip_coefficient
from parity_torch.precision import bf16_params, bf16_storage

WORLD, TP = 4, 2
DP = WORLD // TP
RANK_TIMEOUT_S = 60
DEADLINE_S = 200
CLIP = 0.5  # the clip of the clip runs: under the global norm of every step of the reference
BUGS = ("tp_grad_not_summed", "wrong_offset", "partial_as_reduced", "partial_not_summed_dp")
UNSUMMED = {"tp_grad_not_summed": "layers.0.mlp.w2.weight", "partial_not_summed_dp": "final_ln.bias"}  # tp rank 1  # and flat_wrong_offset, on the flat run


def _gather_cat(x, group, dim=1):
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, x.contiguous(), group=group)
    return torch.cat(parts, dim=dim)


def _mine(x, group, dim=1):
    return x.chunk(dist.get_world_size(group), dim=dim)[dist.get_rank(group)].contiguous()


class AllGatherSeq(torch.autograd.Function):
    """Before a sharded block: gather the positions; backward: sum the partial gradients, keep mine."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _gather_cat(x, group)

    @staticmethod
    def backward(ctx, g):
        g = g.contiguous().clone()
        dist.all_reduce(g, group=ctx.group)
        return _mine(g, ctx.group), None


class ReduceScatterSeq(torch.autograd.Function):
    """After a sharded block: sum the partial outputs, keep my positions; backward: gather."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        x = x.contiguous().clone()
        dist.all_reduce(x, group=group)
        return _mine(x, group)

    @staticmethod
    def backward(ctx, g):
        return _gather_cat(g, ctx.group), None


class GatherSeq(torch.autograd.Function):
    """Before a replicated block (the MoE, the head): gather; backward: my positions' gradient."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _gather_cat(x, group)

    @staticmethod
    def backward(ctx, g):
        return _mine(g, ctx.group), None


class ScatterSeq(torch.autograd.Function):
    """After a replicated block: my positions; backward: gather the gradient."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _mine(x, group)

    @staticmethod
    def backward(ctx, g):
        return _gather_cat(g, ctx.group), None


def tp_loss(model, x, y, g):
    ag, rs = (lambda t: AllGatherSeq.apply(t, g)), (lambda t: ReduceScatterSeq.apply(t, g))  # noqa: E731
    gather, scatter = (lambda t: GatherSeq.apply(t, g)), (lambda t: ScatterSeq.apply(t, g))  # noqa: E731
    h = scatter(model.embed(x))
    for block in model.layers:
        h = h + rs(block.attn(ag(block.ln1(h))))
        z = block.ln2(h)
        if hasattr(block, "moe"):
            out = scatter(block.moe(gather(z), scores=gather(block.moe.scores(z))))
        else:
            out = rs(block.mlp(ag(z)))
        h = h + out
    h = gather(model.final_ln(h))
    logits = h @ model.embed.weight.t() if model.lm_head is None else model.lm_head(h)
    return model.loss_of(logits, y)


def tp_plan(cfg):
    """{torch name: placement}: Megatron's column / row splits of attention and the dense MLP."""
    plan = {}
    for l in range(cfg.layers):
        for w in ("wq", "wk", "wv"):
            plan[f"layers.{l}.attn.{w}.weight"] = {"tp": "column"}
        plan[f"layers.{l}.attn.wo.weight"] = {"tp": "row"}
        if not cfg.is_moe(l):
            for w in ("w1", "w3"):
                plan[f"layers.{l}.mlp.{w}.weight"] = {"tp": "column"}
            plan[f"layers.{l}.mlp.w2.weight"] = {"tp": "row"}
    return plan


def sequence_parallel(model):
    """The weights that see local positions only: LayerNorms, the router gate (Partial grads)."""
    out = [p for m in model.modules() if isinstance(m, torch.nn.LayerNorm) for p in (m.weight, m.bias)]
    return out + [m.router.gate.weight for m in model.moe_layers()]


@torch.no_grad()
def shard_model(model, plan, tp_rank, bug):
    named = dict(model.named_parameters())
    for tname, spec in plan.items():
        lin = model.get_submodule(tname[:-len(".weight")])
        w = named[tname]
        dim = 0 if spec["tp"] == "column" else 1
        n = w.shape[dim] // TP
        lo = tp_rank * n - (1 if bug == "wrong_offset" and tp_rank == 1 and tname == "layers.0.attn.wq.weight" else 0)
        lin.weight = torch.nn.Parameter(w.narrow(dim, lo, n).clone())


def train_tp(model, scn, steps, out, groups, dp, tp, bug):
    cfg = scn.model
    tp_group, dp_group = groups
    plan = tp_plan(cfg)
    shard_model(model, plan, tp[0], bug)
    sp = sequence_parallel(model)
    bf16 = scn.precision == "bf16"  # parity's bf16 policy: storage points, a rounded compute copy, fp32 masters
    if bf16:
        bf16_storage(model)
    names = {id(p): n for n, p in model.named_parameters()}
    held = "Replicate" if bug == "partial_as_reduced" else "Partial"  # the bug: called reduced while it is not
    partial = {names[id(p)]: {"tp": held} for p in sp}
    data = MarkovData(cfg.vocab, scn.data_seed)
    opt = ParityOptimizer.from_config(model.parameters(), scn.optim)
    col = Collector(out, scn, model, group=dp_group, dp=dp, tp=tp, mesh={"dp": dp, "tp": tp}, placements=plan,
                    grad_placements=partial)
    for step in range(steps):
        opt.zero_grad(set_to_none=False)
        copy = bf16_params(model, masters=bug != "no_fp32_master") if bf16 else contextlib.nullcontext()
        with copy:
            for mb in range(cfg.microbatches):
                lo, hi = dp_sequences(cfg.batch, cfg.microbatches, mb, dp[1], dp[0])
                x, y = data.batch(step, lo, hi - lo, cfg.seq)
                if hi > lo:
                    part = tp_loss(model, x, y, tp_group)
                    col.micro(part, x, y)
                    part.backward()
                else:
                    col.micro(torch.zeros((), dtype=scn.torch_dtype), x, y)
        for n, p in model.named_parameters():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            if not (tp[0] == 1 and n == UNSUMMED.get(bug)):
                dist.all_reduce(p.grad, group=dp_group)
        col.grads()  # the sequence-parallel gradients still Partial over tp
        for p in sp:
            dist.all_reduce(p.grad, group=tp_group)
        sharded = torch.zeros((), dtype=torch.float64)
        whole = 0.0
        for n, p in model.named_parameters():
            sq = (p.grad.to(torch.float64) ** 2).sum()
            if n in plan:
                sharded += sq
            else:
                whole += float(sq)
        if bug != "clip_local_norm":  # the bug: each rank's norm of its own shards (no sum over tp)
            dist.all_reduce(sharded, group=tp_group)
        coef = clip_coefficient(math.sqrt(whole + float(sharded)), scn.optim.clip)
        if coef != 1.0:  # parity's clip by the global norm
            for p in model.parameters():
                p.grad.mul_(torch.tensor(coef, dtype=p.grad.dtype))
        opt.step()
        model.update_expert_bias(lambda c: dist.all_reduce(c, group=dp_group))
        col.step()  # the norm measured from the shards, the clip coefficient by each rank
    col.close()


def train_flat(model, scn, steps, out, bug=None, hsdp=None):
    """ZeRO-3 / FSDP1 by hand: rank r holds piece r of the flat parameter. hsdp: (shard group,
    replica coordinate, coordinate in the shard group): HSDP, the pieces over the shard group (2
    ranks), replicated over the other mesh dim "rep"; the data over all 4 ranks."""
    cfg, rank = scn.model, dist.get_rank()
    group, (r, w) = (hsdp[0], (hsdp[2], TP)) if hsdp else (None, (rank, WORLD))
    named = dict(model.named_parameters())
    tnames = [t for _, t, _, _ in name_map(cfg)]
    sizes = [named[t].numel() for t in tnames]
    total = sum(sizes)
    piece = (total + w - 1) // w
    with torch.no_grad():
        pad = [torch.zeros(piece * w - total, dtype=scn.torch_dtype)]
        flat = torch.cat([named[t].reshape(-1) for t in tnames] + pad)
    shard = torch.nn.Parameter(flat[r * piece:(r + 1) * piece].clone())
    spans, start = {}, 0
    for t, n in zip(tnames, sizes):
        a, b = max(start, r * piece), min(start + n, (r + 1) * piece)
        spans[t] = (a - start, b - a, a - r * piece) if b > a else (0, 0, 0)  # in the tensor, numel, in the piece
        start += n
    lie = -1 if bug == "flat_wrong_offset" and r == 1 else 0  # the bug: rank 1 records an offset one too early
    placements = {t: {"flat": (off + lie if off > 0 else off, n)} for t, (off, n, _) in spans.items()}
    if hsdp:
        for spec in placements.values():
            spec["replicate"] = ["rep"]
    local = lambda v: {t: v[at:at + n] for t, (_, n, at) in spans.items()}  # noqa: E731
    data = MarkovData(cfg.vocab, scn.data_seed)
    opt = ParityOptimizer.from_config([shard], scn.optim)
    mesh = {"rep": (hsdp[1], WORLD // TP), "shard": (r, w)} if hsdp else {"dp": (r, w)}
    col = Collector(out, scn, model, mesh=mesh, placements=placements, local=local(shard.detach()))
    for step in range(steps):
        with torch.no_grad():  # all-gather the pieces into the module's parameters
            full = _gather_cat(shard.detach(), group, dim=0)
            at = 0
            for t, n in zip(tnames, sizes):
                named[t].copy_(full[at:at + n].view_as(named[t]))
                named[t].grad = None
                at += n
        for mb in range(cfg.microbatches):
            lo, hi = dp_sequences(cfg.batch, cfg.microbatches, mb, WORLD, rank)
            x, y = data.batch(step, lo, hi - lo, cfg.seq)
            part = model.loss(x, y) if hi > lo else torch.zeros((), dtype=scn.torch_dtype)
            col.micro(part, x, y)
            if hi > lo:
                part.backward()
        grads = [named[t].grad if named[t].grad is not None else torch.zeros_like(named[t]) for t in tnames]
        g = torch.cat([x.reshape(-1) for x in grads] + [torch.zeros(piece * w - total, dtype=scn.torch_dtype)])
        # reduce-scatter: the sum, my piece (HSDP: and the all-reduce over the replicas; the bug leaves it out)
        dist.all_reduce(g, group=group if bug == "hsdp_not_synced" else None)
        shard.grad = g[r * piece:(r + 1) * piece].clone()
        col.grads(local=local(shard.grad))
        opt.step()  # clip 0
        model.update_expert_bias(dist.all_reduce)
        col.step(local=local(shard.detach()))
    col.close()


def rank_main(rank, port, outs, steps):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=RANK_TIMEOUT_S))
    dp_rank, tp_rank = divmod(rank, TP)
    tp_groups = [dist.new_group([d * TP + t for t in range(TP)]) for d in range(DP)]
    dp_groups = [dist.new_group([d * TP + t for d in range(DP)]) for t in range(TP)]
    for out, mode, bug, ref in outs:
        d = Dump(ref)
        model = ReferenceModel(d.scenario.model, d.scenario.torch_dtype)
        model.load_parity_state(d.init())
        if mode == "flat":
            train_flat(model, d.scenario, steps, out, bug)
        elif mode == "hsdp":  # rep 2 x shard 2: the shard groups are the tp groups' ranks
            train_flat(model, d.scenario, steps, out, bug, (tp_groups[dp_rank], dp_rank, tp_rank))
        else:
            train_tp(model, d.scenario, steps, out, (tp_groups[dp_rank], dp_groups[tp_rank]), (dp_rank, DP),
                     (tp_rank, TP), bug)
    dist.barrier()
    dist.destroy_process_group()
    open(os.path.join(os.path.dirname(outs[0][3]), f"done.{rank}"), "w").close()


ROOTS = {
    "tp_grad_not_summed": ("root: shards at step 0", "grads.layers.0.mlp.w2: rank 3 (dp 1, tp 1; dp Replicate, tp row",
                           "differs from rank 1 (dp 0, tp 1", "summed over dp", "the step took it unsummed"),
    "wrong_offset": ("root: shards at step 0", "params.layers.0.attn.wq: rank 1 (dp 0, tp 1; dp Replicate, tp column: "
                     "dim 0 8..15) holds the reference's dim 0 7..14: a wrong shard offset"),
    "flat_wrong_offset": ("root: shards at step 0", ": rank 1 (dp 1; flat ", "a wrong shard offset"),
    "partial_not_summed_dp": ("root: shards at step 0", "grads.final_ln.bias: rank 3 (dp 1, tp 1; dp Replicate, tp "
                              "Partial: whole) differs from rank 1 (dp 0, tp 1",
                              "its sum over tp (ranks 2, 3) is not the reference's (normwise ", "nor ranks 0, 1's",
                              "summed over dp, the copies are the reference's gradient", "the step took it unsummed"),
    "hsdp_not_synced": ("root: shards at step 0", ": rank 2 (rep 1, shard 0; flat ", "differs from rank 0 (rep 0, "
                        "shard 0; flat ", "though Replicate over rep; summed over rep, the copies are the reference's "
                        "gradient", "the step took it unsummed"),
    "clip_local_norm": ("root: clip_coef at step 0", "rank 0 clipped by ", "rank 1 by ",
                        "the ranks clipped by different coefficients"),
    "no_fp32_master": ("root: param ", " at step 0", "rounded to bf16"),
    "partial_as_reduced": ("root: shards at step 0",
                           "grads.final_ln.bias: rank 1 (dp 0, tp 1; dp Replicate, tp Replicate",
                           "summed over tp", "a Partial tensor recorded as Replicate"),
}


def clip_scenario(tmp, scen, clip):
    """SCENARIO with optim.clip set (issue 46e item 2: a clip the step's norm crosses), as a file."""
    with open(common.scenario_path(scen)) as f:
        j = json.load(f)
    j["optim"]["clip"], j["name"] = clip, j["name"] + "_clip"
    path = os.path.join(tmp, "clip_scenario.json")
    with open(path, "w") as f:
        json.dump(j, f)
    return path


def body(tmp):
    binary, scen, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    precision = sys.argv[4] if len(sys.argv) > 4 else "fp64"
    ref, ref_clip = os.path.join(tmp, "ref"), os.path.join(tmp, "ref_clip")
    common.parity_dump(binary, scen, ref, steps, precision)
    broken = os.environ.get("PARITY_SHARDS_TEST_BREAK") == "1"
    outs = [(os.path.join(tmp, "tp"), "tp", "tp_grad_not_summed" if broken else None, ref)]
    if precision == "bf16":  # the TP layout under parity's bf16 policy: its planted bugs
        bugs = [(os.path.join(tmp, b), "tp", b, ref) for b in ("tp_grad_not_summed", "no_fp32_master")]
    else:
        common.parity_dump(binary, clip_scenario(tmp, scen, CLIP), ref_clip, steps, precision)
        outs.append((os.path.join(tmp, "flat"), "flat", None, ref))
        outs.append((os.path.join(tmp, "tp_clip"), "tp", None, ref_clip))
        outs.append((os.path.join(tmp, "hsdp"), "hsdp", None, ref))
        bugs = [(os.path.join(tmp, b), "tp", b, ref) for b in BUGS]
        bugs.append((os.path.join(tmp, "flat_bug"), "flat", "flat_wrong_offset", ref))
        bugs.append((os.path.join(tmp, "clip_local_norm"), "tp", "clip_local_norm", ref_clip))
        bugs.append((os.path.join(tmp, "hsdp_not_synced"), "hsdp", "hsdp_not_synced", ref))
    common.spawn_ranks(rank_main, (common.free_port(), outs + bugs, steps), WORLD, tmp, DEADLINE_S)
    said = []
    for out, mode, bug, r in outs:
        print(f"--- {os.path.basename(out)} {precision}: the correct layout" +
              (" (PARITY_SHARDS_TEST_BREAK: the bug planted)" if broken else ""))
        code, root, ratio, row = common.worst_over_bound(binary, r, out, os.path.join(tmp, "report.json"))
        check(code == 0, f"{mode} {precision}: parity compare fails the correct layout: {root}")
        said.append(f"{os.path.basename(out)} {precision} PASS, worst row {row} = {ratio:.3f} of its bound")
    why = "a bf16 reference" if precision == "bf16" else "a sharded candidate"
    common.smoke_refuses(ref, outs[0][0], why)  # the smoke check cannot judge it: exit 2
    for out, mode, bug, r in bugs:
        print(f"--- planted bug: {bug} ({precision})")
        code, text, root = common.parity_compare(binary, r, out)
        print(text, end="")
        check(code == 1, f"{bug}: parity compare exit {code}, expected 1 (FAIL)")
        for part in ROOTS[bug]:
            check(part in root, f"{bug}: the root line lacks {part!r}: {root!r}")
        said.append(f"{bug}: {root[:200]}")
    return "; ".join(said)


if __name__ == "__main__":
    common.main("shards " + os.path.basename(sys.argv[2]), body)
