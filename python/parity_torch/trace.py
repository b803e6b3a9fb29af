"""Activation traces for `parity compare` (issue 45 item 4, docs/framework.md "Traces"): forward and
backward hooks by module name, from a trace name map beside the parameter name map.

    col = Collector(out, scn, model, trace=trace_map(cfg))   # the only change to the collector lines

A trace map lists (parity trace name, torch module name, "out" | "in"): the tensor parity traces as
`name` (model/trace.h's list: "embed", "layers.{l}.ln1", ".q", ".k", ".v", ".attn" (attention's output
before wo), ".attn_out", ".h_mid" (the residual after attention), ".ln2", ".router", ".shared",
".ffn_out", ".h_out" (the block's output), "final_ln", "logits") is that module's output ("out") or
its first input ("in"). A forward hook records the tensor (detached, on the CPU), and a hook on the
tensor itself records the gradient arriving at it in the backward (all of it: a residual's gradient
is the sum over its uses, as parity's). The gradients are divided by the gradient that arrived at
the micro-batch's loss part (what micro() was given): a loop that back-propagates W x its part under
DDP records parity's gradients of the global loss all the same.

Tensor / sequence parallel (the Collector's tp=(rank, size)): an entry may carry a fourth element, its
placement over the tp ranks as shards.py spells it, {"tp": "Shard(d)" | "Replicate" | "Partial"}
(default Replicate): a sequence-parallel LayerNorm's output is {"tp": "Shard(1)"} (this rank's
positions), a column-parallel projection's {"tp": "Shard(2)"}. Every rank's records are gathered over
the world; the writer joins a micro-batch's tp shards as torch.cat (in tp order) along d, sums Partial
ones, takes tp rank 0's copy of a Replicate one, and writes beside each tensor "trace_owner.fwd.NAME"
(B, S) int64: the world rank that computed each (sequence, position) row (by sequence and, under
Shard(1), by position), with the manifest's "trace_ranks" naming each rank's coordinates: `parity
compare` names the rank and lane where a tensor differs most.

Per step, each rank's micro-batches (the sequences micro() places) are gathered over the
data-parallel group and the writer writes trace_NNNNNN.safetensors: "trace.fwd.NAME" and
"trace.bwd.NAME", (B, S, columns) with sequence g at row g (NaN where no rank computed it); the
manifest lists them as "trace_files". The rank that computed each sequence is the step's
`sequences` tensor: `parity compare` names the data-parallel rank where the first diverging tensor
differs most. A map of your own model names the modules that compute the same tensors; a site your
model has no module for is left out (compare lists it as not traced, never passed). Off (no trace=):
no hook is registered and nothing is written.
"""
import os

import torch
import torch.distributed as dist

from . import safetensors
from .shards import _word


def trace_file(step):
    return f"trace_{step:06d}.safetensors"


class Tracer:
    def __init__(self, model, cfg, trace_map, dp=(0, 1), tp=(0, 1)):
        self.cfg, self.map, self.dp, self.tp = cfg, [tuple(e) for e in trace_map], dp, tp
        modules = dict(model.named_modules())
        missing = [e[1] for e in self.map if e[1] not in modules]
        if missing:
            raise ValueError(f"trace map: no module {missing[0]!r} in the model (named_modules())")
        self.place = {e[0]: _word((e[3] if len(e) > 3 else {}).get("tp", "Replicate")) for e in self.map}
        self.handles, self.files = [], []
        self.ranks = None  # every world rank's coordinates in words, under tp
        for name, module, where, *_ in self.map:
            if where == "out":
                self.handles.append(modules[module].register_forward_hook(
                    lambda mod, inp, out, name=name: self._record(name, out)))
            elif where == "in":
                self.handles.append(modules[module].register_forward_pre_hook(
                    lambda mod, inp, name=name: self._record(name, inp[0])))
            else:
                raise ValueError(f"trace map: {name}: where must be \"out\" or \"in\", got {where!r}")
        self._pending, self._micro = self._slot(), []

    @staticmethod
    def _slot():
        return {"fwd": {}, "bwd": {}, "seed": None, "index": None}

    def _record(self, name, t):
        if not isinstance(t, torch.Tensor) or not torch.is_grad_enabled():
            return  # an evaluation forward: not a training micro-batch
        slot = self._pending
        slot["fwd"][name] = t.detach().cpu().clone()
        if t.requires_grad:
            t.register_hook(lambda g, slot=slot, name=name: slot["bwd"].__setitem__(name, g.detach().cpu().clone()))

    def micro(self, loss_part, index):
        """The forwards since the last call were micro-batch `index` (its global sequences)."""
        slot, self._pending = self._pending, self._slot()
        slot["index"] = list(index)
        if isinstance(loss_part, torch.Tensor) and loss_part.requires_grad:  # the seed the loop back-propagates
            loss_part.register_hook(lambda g, slot=slot: slot.__setitem__("seed", float(g.detach().reshape(-1)[0])))
        self._micro.append(slot)

    def gather(self, gather):
        """This step's micro-batches of every rank (gather: the Collector's, over the data-parallel group;
        under tp, every rank of the world)."""
        mine = []
        for s in self._micro:
            seed = s["seed"] if s["seed"] not in (None, 0.0) else 1.0
            mine.append((s["index"], s["fwd"], {n: g / seed for n, g in s["bwd"].items()}))
        self._micro, self._pending = [], self._slot()
        if self.tp[1] == 1:
            return [(r, r, 0, part) for r, part in enumerate(gather(mine))]  # (rank, dp rank, tp rank, records)
        every = [None] * dist.get_world_size()
        dist.all_gather_object(every, (dist.get_rank(), self.dp[0], self.tp[0], mine))
        self.ranks = [f"dp {d}, tp {t}" for _, d, t, _ in sorted(every, key=lambda e: e[0])]
        return every

    def _join(self, name, parts):
        """One micro-batch's tensor from its tp ranks' records {tp rank: (world rank, tensor)}, and the
        world rank of each of its positions."""
        p, order = self.place[name], sorted(parts)
        if p.startswith("Shard("):
            d = int(p[6:-1])
            t = torch.cat([parts[r][1] for r in order], dim=d)
            if d == 1:  # the sequence's positions: each rank its own
                return t, [parts[r][0] for r in order for _ in range(parts[r][1].shape[1])]
        elif p == "Partial":
            t = sum(parts[r][1] for r in order)
        else:
            t = parts[order[0]][1]
        return t, [parts[order[0]][0]] * self.cfg.seq

    def write(self, out_dir, step, every):
        """The writer's trace file of `step` from gather()'s result; returns its manifest entry."""
        B, S = self.cfg.batch, self.cfg.seq
        micro = {}  # (dp rank, micro-batch) -> sequences, {tensor name: {tp rank: (world rank, tensor)}}
        for rank, dp, tp, part in every:
            for mb, (index, fwd, bwd) in enumerate(part):
                slot = micro.setdefault((dp, mb), (index, {}))
                for d, tensors in (("fwd", fwd), ("bwd", bwd)):
                    for name, t in tensors.items():
                        slot[1].setdefault((d, name), {})[tp] = (rank, t)
        full = {}
        for index, keys in micro.values():
            for (d, name), parts in keys.items():
                t, owners = self._join(name, parts)
                t = t.reshape(len(index), S, -1)
                key = f"trace.{d}.{name}"
                if key not in full:
                    full[key] = torch.full((B, S, t.shape[-1]), float("nan"), dtype=t.dtype)
                    if self.tp[1] > 1:
                        full["trace_owner" + key[5:]] = torch.full((B, S), -1, dtype=torch.int64)
                for i, g in enumerate(index):
                    full[key][g] = t[i]
                    if self.tp[1] > 1:
                        full["trace_owner" + key[5:]][g] = torch.tensor(owners, dtype=torch.int64)
        name = trace_file(step)
        safetensors.write(os.path.join(out_dir, name), full)
        types = {torch.float64: "fp64", torch.float32: "fp32", torch.int64: "int64"}
        entry = {"file": name, "step": step,
                 "tensors": {n: {"dtype": types[v.dtype], "shape": list(v.shape)} for n, v in full.items()}}
        self.files.append(entry)
        return entry

    def remove(self):
        for h in self.handles:
            h.remove()
