"""Records a torch training run in parity's dump format (dump.py), a few lines in the loop:

    col = Collector("out", scenario, model)    # after loading the initial parameters: writes init
    for step in range(steps):
        for x, y in micro_batches:              # this rank's sequences of each micro-batch
            part = model(x, y)                  # its part of the global loss (sum CE / (B*S) + aux)
            col.micro(part, x, y)
            part.backward()
        col.grads()                             # after the gradient reduction, before clipping
        clip; optimizer.step(); expert-bias update
        col.step()                              # parameters after the step, routing, expert bias
    col.close()                                 # manifest.json

What it records and from where:
- names: `name_map` lists (parity name, torch name, transpose, family) in parity's registry
  order (model.name_map for parity_torch's ReferenceModel; pass your own for your model) and
  `buffer_map` (parity name, torch buffer name) for the expert biases. A torch tensor stored
  (out, in) (nn.Linear) is written transposed, as parity stores (in, out).
- routing: every module with an integer `parity_moe_layer` attribute is an MoE layer whose
  forward leaves `module.chosen` (tokens, K); a forward hook takes it.
- tokens_per_expert: the counts the model itself used for its expert-bias update, when the MoE
  module exposes them as `module.tokens_per_expert` (E) at step() (parity_torch's MoE keeps the
  counts update_expert_bias used, after its reduction over the ranks): rank 0's value is the
  framework's, so counts left per rank show. A module without that attribute (or with None)
  gets the fallback: the bincount of the gathered choices of the whole step, which is what the
  routing decided, not what the bias update saw. The manifest's producer says which was used
  ("tokens_per_expert": "model" or "recount").
- placement of a rank's rows: micro-batch mb of a step is the mb-th micro() call; its rows are
  the sequences parity's split gives this data-parallel rank (data.dp_sequences: tensor_split
  into micro-batches, torch.chunk over the ranks), or the global indices given to micro() as
  `sequences=` (any split: strided as DistributedSampler's, shuffled, packed). Each row is
  written at its global index, and the step's `sequences` tensor (N, 3) records every row any
  rank computed as (global index, dp rank, micro-batch): `parity compare` checks that the
  step's sequences are each taken once (a dropped or duplicated one is named by index).
  `rank_losses` (dp, M) holds each dp rank's own loss part of each micro-batch, so a comparer can
  tell a per-rank mean loss (each part divided by its own count) from the global one.
- data parallel (torch.distributed initialised): micro-batch losses are summed over the ranks,
  inputs, targets and routing gathered (all_gather_object); gradients and parameters are taken
  as full tensors: under DDP every rank holds them, and rank 0 writes. Every rank digests its
  own gradients and parameters at step() (a collective over the world) and rank 0 records in
  the manifest's step entry which ranks' copies differ from its own ("replicas"), the replicas
  row of `parity compare`. A sharded parameter that
  is a DTensor (FSDP2, tensor parallel; torch >= 2.1) is gathered with full_tensor(), a
  collective, so every rank must call grads() and step() (tests/python/torch2_test.py: real
  fully_shard and DTensor TP + SP under torch 2.11).
- sharded tensors as they are (shards.py): with mesh= and placements= (DTensor's Shard(d) /
  Replicate / Partial over named mesh dims, Megatron's column / row, FSDP1's flat pieces), each
  rank's shard of those tensors is written as NAME@RANK with its placement in the manifest, and
  `parity compare` assembles and judges them shard by shard (a wrong shard named by rank and
  placement). Their gradient norm is measured from the shards (shards.Sharding.grad_norm_sq: a
  Replicate copy counted once, Partial parts summed first), not taken from the loop.
- other groups: with tensor / sequence parallelism beside data parallelism, pass group= the
  data-parallel group (losses are summed and rows gathered over it), dp=(rank, size) in it and
  tp=(rank, size) in the tensor/sequence-parallel group; every rank of the tp group must hold
  its data-parallel rank's loss part, rows and full gradients. The process with dp rank 0 and
  tp rank 0 writes; the manifest's producer records world, dp and tp, so a comparer can name a
  factor of tp.
- clip_coef: measured, <g after, g before> / |g before|^2 from the gradients still present at
  step() (so a wrong clip shows: call step() before zero_grad), by every rank over the gradients
  it holds (whole, or its shards; not a Partial one, whose part was taken before its reduction):
  rank 0's is recorded as the run's, and with more than one rank all of them as the step's
  "clip_coefs", so `parity compare` names ranks that clipped by different coefficients (each by
  its own shards' norm); when every gradient was cleared first, parity's rule
  min(1, clip / (norm + 1e-6)) from the scenario.
- the hooks take every forward of an MoE module: run evaluation forwards outside a step;
  activation recompute (a second forward inside backward) is not supported: the hook would
  record those tokens twice.
"""
import hashlib
import json
import math
import os

import torch
import torch.distributed as dist

from . import safetensors
from .data import dp_sequences
from .dump import CONVENTIONS, FORMAT, step_file
from .model import buffer_map, name_map as reference_name_map
from .optim import clip_coefficient
from .scenario import scenario_json
from .shards import Sharding, all_ranks as _all, gather_shards, held_placements, local_tensor
from .trace import Tracer


def _full(t):
    if hasattr(t, "full_tensor"):  # DTensor (FSDP2, TP): gather the global tensor
        t = t.full_tensor()
    return t.detach()


def _digest(t):
    """A tensor's bytes, hashed: two ranks' copies are equal bit for bit or not."""
    flat = t.detach().cpu().contiguous().reshape(-1)
    raw = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    return hashlib.blake2b(raw, digest_size=16).hexdigest() + str(t.dtype) + str(tuple(t.shape))


def _indices(sequences):
    """The global sequence indices a micro() call names: a (begin, end) tuple is a range."""
    if isinstance(sequences, tuple) and len(sequences) == 2 and all(isinstance(v, int) for v in sequences):
        return list(range(sequences[0], sequences[1]))
    if isinstance(sequences, torch.Tensor):
        return [int(v) for v in sequences.reshape(-1).tolist()]
    return [int(v) for v in sequences]


def _dist():
    return dist.is_available() and dist.is_initialized()


class Collector:
    def __init__(self, out_dir, scenario, model, name_map=None, buffers=None, group=None, dp=None, tp=None,
                 mesh=None, placements=None, grad_placements=None, local=None, trace=None, cp=None, pp=None):
        """scenario: a parity_torch Scenario (its raw JSON is written to the manifest); model: the
        module or its DistributedDataParallel wrapper; group: the data-parallel process group
        (default: the world); dp: (rank, size) in it (default: the group's rank and size, or
        (0, 1) without torch.distributed); tp: (rank, size) in the tensor/sequence-parallel group,
        (0, 1) by default: recorded in the manifest, and only tp rank 0 writes. mesh, placements,
        grad_placements: the tensors each rank holds a shard of (shards.py); then the world's rank 0
        writes; placements="as_held": every DTensor the module holds sharded, with its own
        placements (FSDP2's fully_shard, DTensor tensor parallelism; one placement per mesh dim, the
        DTensor mesh's dims in `mesh`'s order), and each step the gradients' own, read from the
        DTensors in grads(). local: {torch name: this rank's shard} where the module does not hold it (a flat
        piece kept outside the module); grads() and step() take the same. trace: a trace map (model.trace_map:
        (parity trace name, module name, "out" | "in")): each step's traced tensors too (trace.py). cp: (rank,
        size[, "balanced" | "contiguous"]) in the context-parallel group, pp: (stage, stages) in the pipeline
        group (default (0, 1)): where each rank's traced shards go (trace.py); only cp rank 0 of stage 0 writes,
        and under pp the loss parts come from the last stage and the routing from the stage that ran it."""
        self.out, self.scn, self.cfg = out_dir, scenario, scenario.model
        ddp = torch.nn.parallel.DistributedDataParallel
        self.model = model.module if isinstance(model, ddp) else model
        self.map = name_map if name_map is not None else reference_name_map(self.cfg)
        self.buffers = buffers if buffers is not None else buffer_map(self.cfg)
        self.group = group
        self.rank = dist.get_rank(group) if _dist() else 0
        self.dp = dp if dp is not None else ((self.rank, dist.get_world_size(group)) if _dist() else (0, 1))
        self.tp = tp if tp is not None else (0, 1)
        self.cp, self.pp = tuple(cp) if cp else (0, 1), tuple(pp) if pp else (0, 1)
        self.writer = self.rank == 0 and self.tp[0] == 0 and self.cp[0] == 0 and self.pp[0] == 0
        self.as_held = placements == "as_held"
        if self.as_held:
            if not mesh or grad_placements:
                raise ValueError('placements="as_held" needs a mesh and reads the gradients\' placements itself')
            placements = held_placements(dict(self.model.named_parameters()))
        self.shard = Sharding(mesh, placements, grad_placements) if mesh else None
        if self.shard:
            self.writer = (dist.get_rank() if _dist() else 0) == 0
        self.placements = {}  # the manifest's: "grads.NAME" / "params.NAME" -> placement
        self.counts_from = set()  # "model" or "recount": where tokens_per_expert came from
        self.files, self.steps, self.t = [], [], 0
        self.moe = {m.parity_moe_layer: m for m in self.model.modules() if hasattr(m, "parity_moe_layer")}
        for layer, m in self.moe.items():
            m.register_forward_hook(lambda mod, inp, out, layer=layer: self._pending[layer].append(mod.chosen))
        self._reset()
        self.tracer = Tracer(self.model, self.cfg, trace, self.dp, self.tp, self.cp, self.pp) if trace else None
        if self.writer:
            os.makedirs(out_dir, exist_ok=True)
        tensors = self._params()
        shards = self._shard_file("params", "", *self._local("params", local))  # a collective
        if self.writer:
            init = {n: tensors[n] for n, _, _, _ in self.map if n in tensors}
            init.update(shards)
            self._write("init.safetensors", init, None)

    def _reset(self):
        self._pending = {l: [] for l in self.moe}
        self._micro, self._rows, self._chosen, self._grads = [], [], {l: [] for l in self.moe}, None
        self._grad_local, self._grad_override = ({}, {}), set()

    def _named(self):
        return dict(self.model.named_parameters()), dict(self.model.named_buffers())

    def _params(self):
        params, bufs = self._named()
        out = {}
        for pname, tname, tr, _ in self.map:
            if self.shard and self.shard.sharded("params", tname):
                continue  # its shards: _local
            t = _full(params[tname])
            out[pname] = (t.t() if tr else t).contiguous().clone()
        for pname, tname in self.buffers:
            out[pname] = _full(bufs[tname]).contiguous().clone()
        return out

    def micro(self, loss_part, inputs, targets, sequences=None):
        """Call once per micro-batch after its forward: this rank's part of the global loss, and the
        inputs and targets (b, S) it computed. sequences: the global indices (0 .. B-1) of the b rows
        in the order of inputs' rows, a list, range or 1-D tensor (a DistributedSampler's r, r+W, ...;
        a shuffled or packed split); a tuple (begin, end) is the range begin .. end-1. Default:
        parity's own split (tensor_split into micro-batches, torch.chunk over the ranks)."""
        mb = len(self._micro)
        if sequences is None:
            sequences = dp_sequences(self.cfg.batch, self.cfg.microbatches, mb, self.dp[1], self.dp[0])
        index = _indices(sequences)
        if len(index) != inputs.shape[0]:
            raise ValueError(f"micro-batch {mb}: {inputs.shape[0]} sequences, but sequences= names {len(index)} "
                             "(the global index of each row of inputs, in order)")
        bad = [g for g in index if not 0 <= g < self.cfg.batch]
        if bad:
            raise ValueError(f"micro-batch {mb}: sequence {bad[0]} is not in the batch (0 .. {self.cfg.batch - 1})")
        if self.tracer:
            self.tracer.micro(loss_part, index)
        self._micro.append(0.0 if loss_part is None else float(loss_part.detach()))  # None: a stage before the last
        self._rows.append((index, self.dp[0], mb, inputs.detach().cpu().clone(), targets.detach().cpu().clone()))
        for l, pend in self._pending.items():
            chosen = torch.cat([c.detach().cpu() for c in pend]) if pend else torch.zeros(0, self.cfg.top_k)
            self._chosen[l].append((index, chosen.to(torch.int64)))
            pend.clear()

    def _local(self, what, override=None):
        """This rank's shards of the sharded tensors ("params" or "grads"): {parity name: tensor as
        held}, and {parity name: [offset, numel]} of the flat ones."""
        if not self.shard:
            return {}, {}
        params, _ = self._named()
        out, flat = {}, {}
        for pname, tname, _, _ in self.map:
            if not self.shard.sharded(what, tname):
                continue
            if override and tname in override:
                t = override[tname]
            else:
                p = params[tname]
                t = p if what == "params" else (p.grad if p.grad is not None else torch.zeros_like(p))
            out[pname] = local_tensor(t).cpu().clone()  # a later in-place reduction must not reach it
            if self.shard.flat(what, tname) is not None:
                flat[pname] = self.shard.flat(what, tname)
        return out, flat

    def _shard_file(self, what, prefix, local, flat):
        """Every rank's shards (a collective over the world) as the writer's file tensors
        PREFIX+NAME@RANK; their placements recorded for the manifest."""
        if not self.shard:
            return {}
        every = gather_shards(local, flat)
        if what == "grads":
            self._every_grads = every
        if not self.writer:
            return {}
        params, _ = self._named()
        out = {}
        for pname, tname, tr, _ in self.map:
            if pname not in local:
                continue
            self.placements[f"{what}.{pname}"] = self.shard.record(what, pname, tname, tr, every,
                                                                   list(params[tname].shape))
            for r, (shards, _, _) in enumerate(every):
                out[f"{prefix}{pname}@{r}"] = shards[pname]
        return out

    def grads(self, local=None):
        """Call after backward and the gradient reduction, before clipping. local: {torch name:
        this rank's gradient shard} where the parameter's .grad is not it."""
        params, _ = self._named()
        if self.as_held:
            self.shard.hold_grads(held_placements({n: p.grad for n, p in params.items()}))
        self._grads = {}
        self._grad_local = self._local("grads", local)
        self._grad_override = set(local or {})  # held outside the module: step() cannot see them clipped
        for pname, tname, tr, _ in self.map:
            if self.shard and self.shard.sharded("grads", tname):
                continue
            p = params[tname]
            g = _full(p.grad) if p.grad is not None else torch.zeros(p.shape, dtype=p.dtype)
            self._grads[pname] = (g.t() if tr else g).contiguous().clone()

    def _gather(self, obj):
        if not _dist() or self.dp[1] == 1:
            return [obj]
        out = [None] * dist.get_world_size(self.group)
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def step(self, local=None, clip_coef=None):
        """Call after the optimizer step and the expert-bias update. local: {torch name: this rank's
        parameter shard} where the module does not hold it. clip_coef: the coefficient the loop
        clipped by, where the Collector cannot measure it (default: measured, see the module's doc)."""
        if self._grads is None:
            raise RuntimeError("Collector.step() before Collector.grads()")
        cfg, S, B = self.cfg, self.cfg.seq, self.cfg.batch
        micro = torch.tensor(self._micro, dtype=torch.float64)
        staged = self._stages() if self.pp[1] > 1 else None  # the last stage's loss parts, every stage's routing
        if staged:
            micro = torch.tensor(staged[0], dtype=torch.float64).sum(dim=0)
        elif _dist() and self.dp[1] > 1:
            dist.all_reduce(micro, group=self.group)
        clips = _all(self._rank_clip())  # every rank's measured coefficient (None: nothing to measure)
        shards = self._shard_file("grads", "grads.", *self._grad_local)  # collectives over the world
        norm_sq = sum(float((g.to(torch.float64) ** 2).sum()) for g in self._grads.values())
        if self.shard and self.writer:  # the sharded gradients' part, from every rank's shards
            norm_sq += self.shard.grad_norm_sq(self._every_grads, [(p, t) for p, t, _, _ in self.map])
        norm = math.sqrt(norm_sq)
        if clip_coef is None:
            measured = [c for c in clips if c is not None]
            clip_coef = measured[0] if measured else clip_coefficient(norm, self.scn.optim.clip)
        params = self._params()
        replicas = self._replicas(params)  # a collective: every rank of the world
        rank_losses = staged[0] if staged else self._gather(list(self._micro))  # each dp rank's own loss parts
        rows = self._gather(self._rows)
        chosen = staged[1] if staged else {l: self._gather(c) for l, c in self._chosen.items()}
        shards.update(self._shard_file("params", "params.", *self._local("params", local)))
        traced = self.tracer.gather(self._gather) if self.tracer else None  # a collective over the group
        if self.writer:
            inputs = torch.full((B, S), -1, dtype=torch.int64)
            targets = torch.full((B, S), -1, dtype=torch.int64)
            taken = []  # (global index, dp rank, micro-batch) of every row any rank computed
            for part in rows:
                for index, r, mb, x, y in part:
                    for i, g in enumerate(index):
                        inputs[g], targets[g] = x[i], y[i]
                        taken.append((g, r, mb))
            t = {"inputs": inputs, "targets": targets,
                 "loss": micro.sum().reshape(()), "micro_losses": micro,
                 "grad_norm": torch.tensor(norm, dtype=torch.float64),
                 "clip_coef": torch.tensor(clip_coef, dtype=torch.float64),
                 "sequences": torch.tensor(taken, dtype=torch.int64).reshape(-1, 3),
                 "rank_losses": torch.tensor(rank_losses, dtype=torch.float64).reshape(len(rank_losses), -1)}
            t.update({"grads." + n: g for n, g in self._grads.items()})
            t.update({"params." + n: params[n] for n, _, _, _ in self.map if n in params})
            t.update(shards)
            for l in sorted(self.moe):
                full = torch.full((B * S, cfg.top_k), -1, dtype=torch.int64)
                for part in chosen[l]:
                    for index, c in part:
                        for i, g in enumerate(index):
                            full[g * S:(g + 1) * S] = c[i * S:(i + 1) * S]
                used = getattr(self.moe[l], "tokens_per_expert", None)
                if used is not None:  # the counts the model's bias update used (rank 0's)
                    self.counts_from.add("model")
                    t[f"layers.{l}.moe.tokens_per_expert"] = used.detach().cpu().to(torch.int64).reshape(-1).clone()
                else:  # fallback: recounted from the routing gathered over the ranks
                    self.counts_from.add("recount")
                    t[f"layers.{l}.moe.tokens_per_expert"] = torch.bincount(full[full >= 0], minlength=cfg.experts)
                t[f"layers.{l}.moe.expert_bias"] = params[f"layers.{l}.moe.expert_bias"]
                t[f"layers.{l}.moe.chosen"] = full
            self._write(step_file(self.t), t, self.t)
            if traced is not None:
                self.tracer.write(self.out, self.t, traced)
            self.steps.append({"step": self.t, "loss": float(micro.sum()), "grad_norm": norm,
                               "clip_coef": clip_coef})
            if replicas is not None:
                self.steps[-1]["replicas"] = replicas
            if len(clips) > 1:
                self.steps[-1]["clip_coefs"] = clips
        self.t += 1
        self._reset()

    def _stages(self):
        """Under pipeline parallelism (a collective over the world): each dp rank's loss parts, from its last
        stage (tp and cp rank 0), and each MoE layer's routing per dp rank, from the stage that ran it."""
        last = self.pp[0] == self.pp[1] - 1 and self.tp[0] == 0 and self.cp[0] == 0
        mine = (self.dp[0], last, list(self._micro), self._chosen if self.tp[0] == 0 and self.cp[0] == 0 else None)
        every = _all(mine)
        losses = [m for _, _, m, _ in sorted((e for e in every if e[1]), key=lambda e: e[0])]
        chosen = {}
        for l in self._chosen:
            ran = [e for e in every if e[3] is not None and any(c.numel() for _, c in e[3][l])]
            chosen[l] = [c[l] for _, _, _, c in sorted(ran, key=lambda e: e[0])]
        return losses, chosen

    def _replicas(self, params):
        """Every rank's copies, bit for bit: each rank digests its gradients (after the reduction)
        and its parameters and expert biases (after the step); rank 0 records, per rank whose
        copies differ from its own, what differs: {"ranks": W, "tensors": n, "differ": [{"rank",
        "what": "grads" | "params", "tensors": count, "first": parity name}]}. None without
        torch.distributed or with one rank."""
        if not _dist() or dist.get_world_size() == 1:
            return None
        mine = [("grads", n, _digest(g)) for n, g in self._grads.items()]
        mine += [("params", n, _digest(t)) for n, t in params.items()]
        every = [None] * dist.get_world_size()
        dist.all_gather_object(every, [d for _, _, d in mine])
        differ = []
        for r, theirs in enumerate(every[1:], start=1):
            for what in ("grads", "params"):
                off = [n for (w, n, d), e in zip(mine, theirs) if w == what and d != e]
                if off:
                    differ.append({"rank": r, "what": what, "tensors": len(off), "first": off[0]})
        return {"ranks": len(every), "tensors": len(mine), "differ": differ}

    def _rank_clip(self):
        """This rank's clip coefficient, measured: <g after, g before> / |g before|^2 over the
        gradients it holds whole or as a shard taken from the module (a Partial shard was its part
        before the reduction: left out); None when there is none to measure (every gradient cleared
        before step(), or held outside the module)."""
        params, _ = self._named()
        dot = sq = 0.0
        for pname, tname, tr, _ in self.map:
            p = params[tname]
            if p.grad is None:
                continue
            if pname in self._grads:
                before, after = self._grads[pname], _full(p.grad)
                after = after.t() if tr else after
            elif pname in self._grad_local[0] and tname not in self._grad_override and \
                    not self.shard.partial("grads", tname):
                before, after = self._grad_local[0][pname], local_tensor(p.grad)
            else:
                continue
            b = before.to(torch.float64)
            dot += float((after.to(torch.float64).cpu() * b).sum())
            sq += float((b * b).sum())
        return dot / sq if sq > 0 and dot != 0 else None

    def _write(self, name, tensors, step):
        safetensors.write(os.path.join(self.out, name), tensors)
        types = {torch.float64: "fp64", torch.float32: "fp32", torch.int64: "int64"}
        desc = {n: {"dtype": types[v.dtype], "shape": list(v.shape)} for n, v in tensors.items()}
        self.files.append({"file": name, "step": step, "tensors": desc})

    def close(self):
        """Writes manifest.json (rank 0). The run's "producer" names this collector, the world and
        the layout's data- and tensor-parallel degrees, and where tokens_per_expert came from."""
        if not self.writer:
            return
        shapes = {}
        params, _ = self._named()
        for pname, tname, tr, _ in self.map:
            s = list(self.placements.get("params." + pname, {}).get("stored", params[tname].shape))
            shapes[pname] = s[::-1] if tr else s
        world = dist.get_world_size() if _dist() else 1
        producer = {"name": "parity_torch.Collector", "world": world, "dp": self.dp[1], "tp": self.tp[1],
                    **({"cp": self.cp[1]} if self.cp[1] > 1 else {}), **({"pp": self.pp[1]} if self.pp[1] > 1 else {}),
                    "tokens_per_expert": "+".join(sorted(self.counts_from)) or "none"}
        m = {"format": FORMAT, "scenario": scenario_json(self.scn), "producer": producer,
             "conventions": CONVENTIONS,
             "parameters": [{"name": p, "shape": shapes[p], "family": f} for p, _, _, f in self.map],
             "files": self.files, "steps": self.steps}
        if self.tracer:
            m["trace_files"] = self.tracer.files
            if self.tracer.ranks:
                m["trace_ranks"] = self.tracer.ranks
        if self.shard:
            m["mesh"] = {"dims": self.shard.dims, "shape": self.shard.sizes, "ranks": self.shard.coords}
            m["placements"] = self.placements
        path = os.path.join(self.out, "manifest.json")
        def body(f):
            json.dump(m, f, indent=2, ensure_ascii=False)
            f.write("\n")
        safetensors.write_atomically(path, body, "w")
