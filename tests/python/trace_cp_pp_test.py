"""Traces of a context-parallel and of a pipeline-parallel torch run through `parity compare` (issue 45 item
4): each rank's traced shard placed by the Collector's cp= / pp= (trace.py), W = 2, gloo, hand-written as
the other tests' layouts (torch 1.13: no context_parallel, no pipelining API).

cp (cp2_balanced_rope's model, QK-norm + rope, cp 2 in Megatron's load-balanced order: rank r holds chunks r
and 3 - r of 4): the residual stream, the LayerNorms, the blocks' and the FFN's outputs run on this rank's
positions (the trace map says {"cp": "Shard(1)"}); attention and the MoE block gather the sequence, compute it
whole (natural order, so rope and the causal mask see the true positions) and hand back this rank's positions.
- clean: passes, every traced tensor of the reference within its bound, none left out;
- the same run's shards declared in the contiguous order: fails (the mapping is what places them);
- one element of layer 1 ln2's output planted on cp rank 1 (its local position 2, global position 4):
  "enters at layer 1 ln2, forward, micro-batch 0, rank 1 (dp 0, cp 1), element [sequence 1, position 4,".
pp (pp2_1f1b's model, 4 layers, 4 micro-batches): stage 0 holds embed and layers 0, 1, stage 1 layers 2, 3,
the final LayerNorm, the head and the loss; the activation and its gradient go by send / recv; both ranks
trace with the same map (a module a stage does not run records nothing).
- clean: passes, every traced tensor within its bound, none left out;
- one element of layer 2 ln1's output planted on stage 1 in micro-batch 2: "enters at layer 2 ln1, forward,
  micro-batch 2, rank 1 (dp 0, pp 1), element [sequence 5, position 3, column 2]".

Usage: trace_cp_pp_test.py PARITY_BINARY cp|pp [STEPS]
"""
import datetime
import os
import re

os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

import common
from common import check
from parity_torch import Collector, Dump, MarkovData, ParityOptimizer, ReferenceModel, micro_batch_sequences
from parity_torch import trace_map
from parity_torch.trace import cp_positions

WORLD = 2
SCENARIOS = {"cp": "cp2_balanced_rope", "pp": "pp2_1f1b"}
CP_LOCAL = ("embed", "ln1", "h_mid", "ln2", "ffn_out", "h_out", "final_ln")  # on this rank's positions


def gather_positions(x, group):
    """Every cp rank's positions (b, S/cp, ...) into the whole sequence (b, S, ...) in natural order."""
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, x.contiguous(), group=group)
    full = x.new_empty((x.shape[0], x.shape[1] * len(parts)) + tuple(x.shape[2:]))
    for r, p in enumerate(parts):
        full[:, cp_positions(full.shape[1], r, len(parts))] = p
    return full


class GatherCp(torch.autograd.Function):
    """Forward: gather_positions. Backward: this rank's positions of the gradient (what follows is computed
    whole on every cp rank alike)."""

    @staticmethod
    def forward(ctx, x, group, pos):
        ctx.pos = pos
        return gather_positions(x, group)

    @staticmethod
    def backward(ctx, g):
        return g[:, ctx.pos].clone(), None, None


class ScatterCp(torch.autograd.Function):
    """Forward: this rank's positions of a whole (replicated) activation. Backward: every rank's
    gradients gathered into the whole sequence."""

    @staticmethod
    def forward(ctx, x, group, pos):
        ctx.group, ctx.pos = group, pos
        return x[:, pos].clone()

    @staticmethod
    def backward(ctx, g):
        return gather_positions(g, ctx.group), None, None


def cp_model(model, group, rank):
    """Attention and the FFN (dense or MoE) of every block gather this rank's positions and scatter the result
    back: the module's own forward, wrapped, so its hooks (the Collector's, the trace's) see what it hands on."""
    pos = cp_positions(model.cfg.seq, rank, WORLD)
    for block in model.layers:
        for m in (block.attn, block.moe if hasattr(block, "moe") else block.mlp):
            m.forward = lambda x, f=m.forward: ScatterCp.apply(f(GatherCp.apply(x, group, pos)), group, pos)
    return pos


def cp_loss(model, x, y, group, pos):
    h = model.embed(x[:, pos])
    for block in model.layers:
        h = block(h)
    h = GatherCp.apply(model.final_ln(h), group, pos)
    logits = model.logits_tap(h @ model.embed.weight.t() if model.lm_head is None else model.lm_head(h))
    return model.loss_of(logits, y)


def cp_trace_map(cfg):
    return [e + ({"cp": "Shard(1)"},) if e[0].split(".")[-1] in CP_LOCAL else e for e in trace_map(cfg)]


def plant(module, rank_seq, pos, col, call=0):
    """A one-element change in a module's output at its call-th forward (a forward hook registered before the
    trace's)."""
    calls = [0]

    def hook(mod, inp, out):
        calls[0] += 1
        if calls[0] - 1 != call:
            return out
        out = out.clone()
        out[rank_seq, pos, col] += 1e-3
        return out
    module.register_forward_hook(hook)


def cp_run(d, out, rank, group, dp_group, steps, order="balanced", planted=False):
    scn, cfg = d.scenario, d.scenario.model
    model = ReferenceModel(cfg, scn.torch_dtype)
    model.load_parity_state(d.init())
    pos = cp_model(model, group, rank)
    if planted and rank == 1:
        plant(model.layers[1].ln2, 1, 2, 3)
    partial = [p for n, p in model.named_parameters()
               if n == "embed.weight" or n.split(".")[-2] in ("ln1", "ln2", "final_ln")]
    data = MarkovData(cfg.vocab, scn.data_seed)
    opt = ParityOptimizer.from_config(model.parameters(), scn.optim)
    col = Collector(out, scn, model, group=dp_group, dp=(0, 1), cp=(rank, WORLD, order), trace=cp_trace_map(cfg))
    for step in range(steps):
        opt.zero_grad(set_to_none=False)
        for mb in range(cfg.microbatches):
            lo, hi = micro_batch_sequences(cfg.batch, cfg.microbatches, mb)
            x, y = data.batch(step, lo, hi - lo, cfg.seq)
            part = cp_loss(model, x, y, group, pos)
            col.micro(part, x, y)
            part.backward()
        for p in partial:  # computed on this rank's positions: summed over the cp group
            dist.all_reduce(p.grad, group=group)
        col.grads()
        opt.step()
        model.update_expert_bias(None)  # every cp rank routed the whole micro-batch
        col.step()
    col.close()


def pp_run(d, out, stage, dp_group, steps, planted=False):
    scn, cfg = d.scenario, d.scenario.model
    model = ReferenceModel(cfg, scn.torch_dtype)
    model.load_parity_state(d.init())
    half = cfg.layers // 2
    mine = model.layers[:half] if stage == 0 else model.layers[half:]
    if planted and stage == 1:
        plant(model.layers[half].ln1, 1, 3, 2, call=2)  # micro-batch 2 of step 0
    data = MarkovData(cfg.vocab, scn.data_seed)
    opt = ParityOptimizer.from_config(model.parameters(), scn.optim)
    col = Collector(out, scn, model, group=dp_group, dp=(0, 1), pp=(stage, WORLD), trace=trace_map(cfg))
    for step in range(steps):
        opt.zero_grad(set_to_none=False)
        for mb in range(cfg.microbatches):
            lo, hi = micro_batch_sequences(cfg.batch, cfg.microbatches, mb)
            x, y = data.batch(step, lo, hi - lo, cfg.seq)
            if stage == 0:
                h = model.embed(x)
                for block in mine:
                    h = block(h)
                col.micro(None, x, y)  # no loss part on this stage
                dist.send(h.detach().contiguous(), 1)
                g = torch.empty_like(h)
                dist.recv(g, 1)
                aux = [b.moe.aux for b in mine if hasattr(b, "moe") and b.moe.aux.requires_grad]
                torch.autograd.backward([h] + aux, [g] + [torch.ones_like(a) for a in aux])
            else:
                h0 = torch.empty(x.shape + (cfg.dim,), dtype=scn.torch_dtype)
                dist.recv(h0, 0)
                h0.requires_grad_(True)
                h = h0
                for block in mine:
                    h = block(h)
                logits = model.logits_tap(model.lm_head(model.final_ln(h)))
                part = F.cross_entropy(logits.reshape(-1, cfg.vocab), y.reshape(-1), reduction="sum") / (
                    cfg.batch * cfg.seq) + sum(b.moe.aux for b in mine if hasattr(b, "moe"))
                col.micro(part, x, y)
                part.backward()
                dist.send(h0.grad.contiguous(), 0)
        for p in model.parameters():  # each stage's gradients to every rank (each rank steps every parameter)
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad)
        col.grads()
        opt.step()
        model.update_expert_bias(dist.all_reduce)  # each stage counted its own layers' routing
        col.step()
    col.close()


def rank_main(rank, port, mode, ref, tmp, steps):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=60))
    group = dist.new_group([0, 1])
    dp_groups = [dist.new_group([r]) for r in range(WORLD)]  # every rank creates each
    d = Dump(ref)
    if mode == "cp":
        cp_run(d, os.path.join(tmp, "clean"), rank, group, dp_groups[rank], steps)
        cp_run(d, os.path.join(tmp, "contiguous"), rank, group, dp_groups[rank], 1, order="contiguous")
        cp_run(d, os.path.join(tmp, "planted"), rank, group, dp_groups[rank], steps, planted=True)
    else:
        pp_run(d, os.path.join(tmp, "clean"), rank, dp_groups[rank], steps)
        pp_run(d, os.path.join(tmp, "planted"), rank, dp_groups[rank], steps, planted=True)
    dist.barrier()
    dist.destroy_process_group()
    open(os.path.join(tmp, f"done.{rank}"), "w").close()


def body(tmp):
    binary, mode = sys.argv[1], sys.argv[2]
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    ref = os.path.join(tmp, "ref")
    common.parity_dump(binary, SCENARIOS[mode], ref, steps, extra=("--trace",))
    from parity_torch import safetensors
    keys = [k for k in safetensors.read(os.path.join(ref, "trace_000000.safetensors")) if k.startswith("trace.")]
    common.spawn_ranks(rank_main, (common.free_port(), mode, ref, tmp, steps), WORLD, tmp, 200)
    said = []
    code, out, root = common.parity_compare(binary, ref, os.path.join(tmp, "clean"))
    print(out, end="")
    head = common.line_starting(out, "trace: ")
    check(code == 0 and "  no traced tensor over its bound" in out.splitlines(),
          f"{mode} clean: exit {code}, root {root!r}, or a traced tensor over its bound: {head!r}")
    n = int(head.split()[1])
    check(n == len(keys) and "not traced by the candidate" not in out,
          f"{mode} clean: {n} traced tensors compared, the reference holds {len(keys)}")
    said.append(f"clean: PASS, {n} of {len(keys)} traced")
    if mode == "cp":
        code, out, root = common.parity_compare(binary, ref, os.path.join(tmp, "contiguous"), steps=1)
        first = common.line_starting(out.replace("\n  first diverging", "\nfirst diverging"), "first diverging: ")
        check("not a clean factor" in first or "over its bound" in first,
              f"cp shards declared contiguous: {first!r}: expected a traced tensor over its bound (the positions "
              "misplaced; the rows pass: the run itself is right)")
        said.append("declared contiguous: " + first[:60])
        want = (r"enters at layer 1 ln2, forward, micro-batch 0, rank 1 \(dp 0, cp 1\), "
                r"element \[sequence 1, position 4, column 3\]")
    else:
        want = (r"enters at layer 2 ln1, forward, micro-batch 2, rank 1 \(dp 0, pp 1\), "
                r"element \[sequence 5, position 3, column 2\]")
    code, out, root = common.parity_compare(binary, ref, os.path.join(tmp, "planted"))
    print(out, end="")
    check(code == 1 and re.search(want, root), f"{mode} planted: exit {code}, root {root!r}: expected {want!r}")
    said.append("planted: " + root[root.index("enters at"):][:150])
    return " | ".join(said)


if __name__ == "__main__":
    common.main(f"trace {sys.argv[2] if len(sys.argv) > 2 else '?'} W2", body)
