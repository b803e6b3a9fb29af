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

Context parallel and pipeline stages (the Collector's cp=(rank, size[, order]) and pp=(stage, stages)): an
entry's placement may name "cp" too, {"cp": "Shard(1)"}: this rank's positions in the cp order (cp_positions:
Megatron's load-balanced "balanced", 2 x size chunks, rank r holding r and 2 size - 1 - r, by default, or
"contiguous"), written at their places in the sequence; Replicate: cp rank 0's. Under pp every stage hooks the
modules it holds (the others are skipped) and records what it runs; each tensor is written from the first stage
that recorded it, its gradients divided by the seed of a rank of its micro-batch that holds the loss part (the
last stage's). Under tp, cp or pp every rank's records are gathered over the world and trace_owner written.
A map entry's where may end in "/fwd" or "/bwd": that entry records only the forward value or only the
gradient (q and k: the forward as attention reads them, the gradient at wq's / wk's outputs, model.trace_map).

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


def cp_positions(seq, rank, size, order="balanced"):
    """The sequence positions context-parallel rank `rank` of `size` holds, in the order it holds them:
    "balanced" (Megatron's load-balanced order: 2 x size chunks, chunks rank and 2 size - 1 - rank) or
    "contiguous" (chunk rank of size)."""
    if order == "contiguous":
        n = seq // size
        return list(range(rank * n, (rank + 1) * n))
    if order != "balanced":
        raise ValueError(f"cp order {order!r}: expected \"balanced\" or \"contiguous\"")
    n = seq // (2 * size)
    return list(range(rank * n, (rank + 1) * n)) + list(range((2 * size - 1 - rank) * n, (2 * size - rank) * n))


class Tracer:
    def __init__(self, model, cfg, trace_map, dp=(0, 1), tp=(0, 1), cp=(0, 1), pp=(0, 1)):
        self.cfg, self.map, self.dp, self.tp, self.pp = cfg, [tuple(e) for e in trace_map], dp, tp, pp
        self.cp, self.cp_order = tuple(cp[:2]), (cp[2] if len(cp) > 2 else "balanced")
        if self.cp[1] > 1:
            if cfg.seq % (2 * self.cp[1] if self.cp_order == "balanced" else self.cp[1]):
                raise ValueError(f"cp {self.cp[1]} ({self.cp_order}): seq {cfg.seq} is not split evenly")
        modules = dict(model.named_modules())
        missing = [e[1] for e in self.map if e[1] not in modules]
        if missing and pp[1] == 1:
            raise ValueError(f"trace map: no module {missing[0]!r} in the model (named_modules())")
        self.map = [e for e in self.map if e[1] in modules]  # a pipeline stage holds its own modules
        self.place = {}
        for e in self.map:
            spec = e[3] if len(e) > 3 else {}
            self.place[e[0]] = {d: _word(spec.get(d, "Replicate")) for d in ("tp", "cp")}
        self.handles, self.files = [], []
        self.ranks = None  # every world rank's coordinates in words, under tp, cp or pp
        for name, module, where, *_ in self.map:
            at, _, only = where.partition("/")  # "out/fwd": this entry's forward value only, "out/bwd" its gradient
            if at not in ("out", "in") or only not in ("", "fwd", "bwd"):
                raise ValueError(f"trace map: {name}: where must be \"out\" or \"in\" (with /fwd or /bwd), "
                                 f"got {where!r}")
            if at == "out":
                self.handles.append(modules[module].register_forward_hook(
                    lambda mod, inp, out, name=name, only=only: self._record(name, out, only)))
            else:
                self.handles.append(modules[module].register_forward_pre_hook(
                    lambda mod, inp, name=name, only=only: self._record(name, inp[0], only)))
        self._pending, self._micro = self._slot(), []

    @staticmethod
    def _slot():
        return {"fwd": {}, "bwd": {}, "seed": None, "index": None}

    def _record(self, name, t, only=""):
        if not isinstance(t, torch.Tensor) or not torch.is_grad_enabled():
            return  # an evaluation forward: not a training micro-batch
        slot = self._pending
        if only != "bwd":
            slot["fwd"][name] = t.detach().cpu().clone()
        if t.requires_grad and only != "fwd":
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
        under tp, cp or pp, every rank of the world): [(world rank, dp rank, (tp, cp, pp), records)]."""
        mine = [(s["index"], s["fwd"], s["bwd"], s["seed"]) for s in self._micro]
        self._micro, self._pending = [], self._slot()
        if self.tp[1] == self.cp[1] == self.pp[1] == 1:
            return [(r, r, (0, 0, 0), part) for r, part in enumerate(gather(mine))]
        every = [None] * dist.get_world_size()
        lane = (self.tp[0], self.cp[0], self.pp[0])
        dist.all_gather_object(every, (dist.get_rank(), self.dp[0], lane, mine))
        words = []
        for _, d, (t, c, p), _ in sorted(every, key=lambda e: e[0]):
            words.append(f"dp {d}" + "".join(f", {w} {v}" for w, v, n in (("tp", t, self.tp[1]), ("cp", c, self.cp[1]),
                                                                           ("pp", p, self.pp[1])) if n > 1))
        self.ranks = words
        return every

    def _join_tp(self, name, parts):
        """One cp lane's tensor from its tp ranks' records {tp rank: (world rank, tensor)}, and the world rank
        of each of its positions (a list) or of all of them (an int)."""
        p, order = self.place[name]["tp"], sorted(parts)
        if p.startswith("Shard("):
            d = int(p[6:-1])
            t = torch.cat([parts[r][1] for r in order], dim=d)
            if d == 1:  # the sequence's positions: each rank its own
                return t, [parts[r][0] for r in order for _ in range(parts[r][1].shape[1])]
            return t, parts[order[0]][0]
        if p == "Partial":
            return sum(parts[r][1] for r in order), parts[order[0]][0]
        return parts[order[0]][1], parts[order[0]][0]

    def _join(self, name, parts, b):
        """One micro-batch's tensor (b sequences) from its records {(tp, cp, pp): (world rank, tensor)}: the
        first pipeline stage that recorded it, its tp lanes joined, then its cp lanes (Shard(1): each cp
        rank's positions placed where cp_positions says), and the world rank of each of its S positions."""
        S = self.cfg.seq
        stage = min(lane[2] for lane in parts)
        by_cp = {}
        for (tp, cp, pp), v in parts.items():
            if pp == stage:
                by_cp.setdefault(cp, {})[tp] = v
        joined = {c: self._join_tp(name, p) for c, p in by_cp.items()}
        pc, order = self.place[name]["cp"], sorted(joined)
        if pc == "Shard(1)":
            first = joined[order[0]][0]
            full = torch.full((b, S) + tuple(first.shape[2:]), float("nan"), dtype=first.dtype)
            owners = [-1] * S
            for c in order:
                t, own = joined[c]
                pos = cp_positions(S, c, self.cp[1], self.cp_order)
                if t.dim() < 2 or t.shape[1] != len(pos):
                    raise ValueError(f"trace {name}: cp rank {c} recorded shape {tuple(t.shape)}, expected its "
                                     f"{len(pos)} positions along dim 1 ({self.cp_order} order)")
                full[:, pos] = t
                for i, q in enumerate(pos):
                    owners[q] = own[i] if isinstance(own, list) else own
            return full, owners
        if pc == "Partial":
            t, own = sum(joined[c][0] for c in order), joined[order[0]][1]
        else:
            t, own = joined[order[0]]
        return t, own if isinstance(own, list) else [own] * S

    def write(self, out_dir, step, every):
        """The writer's trace file of `step` from gather()'s result; returns its manifest entry. A backward
        record is divided by the gradient that arrived at its micro-batch's loss part on its rank, or, on a
        rank that holds no loss part (a pipeline stage before the last), on another rank of its micro-batch."""
        B, S = self.cfg.batch, self.cfg.seq
        owned = self.tp[1] > 1 or self.cp[1] > 1 or self.pp[1] > 1
        micro, seeds = {}, {}  # (dp rank, micro-batch) -> sequences, {(dir, name): {lane: (world rank, tensor)}}
        for rank, dp, lane, part in every:
            for mb, (index, fwd, bwd, seed) in enumerate(part):
                if seed not in (None, 0.0):
                    seeds.setdefault((dp, mb), seed)
        for rank, dp, lane, part in every:
            for mb, (index, fwd, bwd, seed) in enumerate(part):
                seed = seed if seed not in (None, 0.0) else seeds.get((dp, mb), 1.0)
                slot = micro.setdefault((dp, mb), (index, {}))
                for name, t in fwd.items():
                    slot[1].setdefault(("fwd", name), {})[lane] = (rank, t)
                for name, g in bwd.items():
                    slot[1].setdefault(("bwd", name), {})[lane] = (rank, g / seed)
        full = {}
        for index, keys in micro.values():
            for (d, name), parts in keys.items():
                t, owners = self._join(name, parts, len(index))
                t = t.reshape(len(index), S, -1)
                key = f"trace.{d}.{name}"
                if key not in full:
                    full[key] = torch.full((B, S, t.shape[-1]), float("nan"), dtype=t.dtype)
                    if owned:
                        full["trace_owner" + key[5:]] = torch.full((B, S), -1, dtype=torch.int64)
                for i, g in enumerate(index):
                    full[key][g] = t[i]
                    if owned:
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
