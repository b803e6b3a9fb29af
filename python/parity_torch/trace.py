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

from . import safetensors


def trace_file(step):
    return f"trace_{step:06d}.safetensors"


class Tracer:
    def __init__(self, model, cfg, trace_map):
        self.cfg, self.map = cfg, list(trace_map)
        modules = dict(model.named_modules())
        missing = [m for _, m, _ in self.map if m not in modules]
        if missing:
            raise ValueError(f"trace map: no module {missing[0]!r} in the model (named_modules())")
        self.handles, self.files = [], []
        for name, module, where in self.map:
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
        """This step's micro-batches of every rank (gather: the Collector's, over the data-parallel group)."""
        mine = []
        for s in self._micro:
            seed = s["seed"] if s["seed"] not in (None, 0.0) else 1.0
            mine.append((s["index"], s["fwd"], {n: g / seed for n, g in s["bwd"].items()}))
        self._micro, self._pending = [], self._slot()
        return gather(mine)

    def write(self, out_dir, step, every):
        """The writer's trace file of `step` from gather()'s result; returns its manifest entry."""
        B, S = self.cfg.batch, self.cfg.seq
        full = {}
        for part in every:
            for index, fwd, bwd in part:
                for d, tensors in (("fwd", fwd), ("bwd", bwd)):
                    for name, t in tensors.items():
                        t = t.reshape(len(index), S, -1)
                        key = f"trace.{d}.{name}"
                        if key not in full:
                            full[key] = torch.full((B, S, t.shape[-1]), float("nan"), dtype=t.dtype)
                        for i, g in enumerate(index):
                            full[key][g] = t[i]
        name = trace_file(step)
        safetensors.write(os.path.join(out_dir, name), full)
        types = {torch.float64: "fp64", torch.float32: "fp32"}
        entry = {"file": name, "step": step,
                 "tensors": {n: {"dtype": types[v.dtype], "shape": list(v.shape)} for n, v in full.items()}}
        self.files.append(entry)
        return entry

    def remove(self):
        for h in self.handles:
            h.remove()
