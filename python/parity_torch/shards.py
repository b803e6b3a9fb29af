"""Sharded tensors as the ranks hold them (issue 46 item 5), for the Collector: no gather in the
training loop, each rank's shard written with its placement, assembled and judged shard by shard
by `parity compare` (src/harness/verdict/dump_shards.h, which holds the format).

    col = Collector(out, scenario, model, mesh={"dp": (dp_rank, 2), "tp": (tp_rank, 2)},
                    placements={"layers.0.attn.wq.weight": {"tp": "column"},       # Megatron's split
                                "layers.0.attn.wo.weight": {"tp": "row"},
                                "layers.1.moe.experts.w1": {"tp": "Shard(0)"}},    # DTensor's
                    grad_placements={"layers.0.ln1.weight": {"tp": "Partial"}})     # not yet reduced

mesh: {dim name: (this rank's coordinate, size)}, the same dims in the same order on every rank
(the product of the sizes is the world). placements: {torch name: spec} for the tensors a rank
holds a shard of; spec: {mesh dim: placement} (dims not named: Replicate), or a list with one
placement per mesh dim, or {"flat": (offset, numel)} (FSDP1's flat parameter: this rank's piece
of the tensor flattened in torch's layout; "shape": the full shape when the module's parameter
is not the full tensor; "replicate": [mesh dims] when the pieces are copies over those dims, HSDP's
replica groups: a rank at coordinate c there holds the piece of the rank at coordinate 0). A placement: "Shard(d)" (d in torch's layout, as the rank holds it),
"Replicate", "Partial" (the tensor is the sum over that dim), "column" / "row" (Megatron's
ColumnParallelLinear / RowParallelLinear weight), or a DTensor placement object (Shard(0),
Replicate(), Partial()). grad_placements: the gradients' where they differ from the parameters'
(a replicated weight's gradient is Partial until it is reduced).

Every rank's shard is sent to rank 0 (all_gather_object over the world, inside the Collector's
grads() and step(), which every rank calls) and written as NAME@RANK; the manifest's "mesh" and
"placements" say where each lies. The full shapes come from the shards themselves (a Shard dim:
the sizes along it summed), and so does the gradient norm (grad_norm_sq), so nothing in the loop
gathers or reports a norm.
"""
import torch
import torch.distributed as dist

WORDS = ("Replicate", "Partial", "column", "row")


def _word(p):
    """A placement as parity's manifest spells it."""
    if isinstance(p, str):
        if p in WORDS or (p.startswith("Shard(") and p.endswith(")")):
            return p
        raise ValueError(f"placement {p!r}: expected Shard(d), Replicate, Partial, column or row")
    kind = type(p).__name__  # DTensor's placement objects (torch >= 2.1)
    if kind == "Shard":
        return f"Shard({p.dim})"
    if kind in ("Replicate", "Partial", "_Partial"):
        return kind.strip("_")
    raise ValueError(f"placement {p!r}: not a DTensor placement")


class Sharding:
    def __init__(self, mesh, placements, grad_placements=None):
        self.dims = list(mesh)
        self.coord = [int(mesh[d][0]) for d in self.dims]
        self.sizes = [int(mesh[d][1]) for d in self.dims]
        self.params = {n: self._spec(s) for n, s in (placements or {}).items()}
        self.grads = dict(self.params)
        self.grads.update({n: self._spec(s) for n, s in (grad_placements or {}).items()})
        world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        size = 1
        for s in self.sizes:
            size *= s
        if size != world:
            raise ValueError(f"mesh {mesh}: {size} ranks, the world has {world}")
        self.coords = all_ranks(self.coord)  # every rank's coordinates, in rank order

    def _spec(self, s):
        if isinstance(s, dict) and "flat" in s:
            off, n = s["flat"]
            rep = list(s.get("replicate", []))
            unknown = set(rep) - set(self.dims)
            if unknown:
                raise ValueError(f"flat piece replicated over {sorted(unknown)}: not a mesh dim ({self.dims})")
            return {"flat": [int(off), int(n)], "shape": list(s["shape"]) if "shape" in s else None,
                    "replicate": rep}
        if isinstance(s, dict):
            unknown = set(s) - set(self.dims)
            if unknown:
                raise ValueError(f"placement over {sorted(unknown)}: not a mesh dim ({self.dims})")
            return {"placements": [_word(s.get(d, "Replicate")) for d in self.dims]}
        words = [_word(p) for p in s]
        if len(words) != len(self.dims):
            raise ValueError(f"placements {s}: one per mesh dim ({self.dims})")
        return {"placements": words}

    def hold_grads(self, placements):
        """The gradients' placements as torch holds them this step ({torch name: placements}):
        a gradient's DTensor may be placed otherwise than its parameter (an embedding's Shard(0)
        weight under a rowwise plan), or be whole."""
        self.grads = {n: self._spec(p) for n, p in placements.items()}

    def sharded(self, what, tname):
        return tname in (self.grads if what == "grads" else self.params)

    def flat(self, what, tname):
        """This rank's [offset, numel] of a flat-sharded tensor, None otherwise."""
        spec = (self.grads if what == "grads" else self.params)[tname]
        return spec.get("flat")

    def partial(self, what, tname):
        """Whether the tensor's placement is Partial over some mesh dim (a part, not the tensor)."""
        spec = (self.grads if what == "grads" else self.params)[tname]
        return "Partial" in spec.get("placements", [])

    def grad_norm_sq(self, every, names):
        """The sum of squares of the sharded gradients' full tensors, from every rank's shards (rank
        order, gather_shards): a Replicate copy counted once (its coordinate 0), the Partial parts
        summed before squaring, each flat piece once. names: (parity name, torch name) pairs."""
        total = 0.0
        for pname, tname in names:
            if not self.sharded("grads", tname):
                continue
            words = self.grads[tname].get("placements")
            parts = {}
            for r, (shards, _, _) in enumerate(every):
                c = self.coords[r]
                if words is None:  # a flat piece, counted once over the dims it is replicated on (HSDP)
                    if any(c[self.dims.index(d)] != 0 for d in self.grads[tname]["replicate"]):
                        continue
                    key = (r,)
                elif any(w == "Replicate" and c[k] != 0 for k, w in enumerate(words)):
                    continue
                else:
                    key = tuple(c[k] for k, w in enumerate(words) if w != "Partial")
                t = shards[pname].to(torch.float64)
                parts[key] = t if key not in parts else parts[key] + t
            total += sum(float((t * t).sum()) for t in parts.values())
        return total

    def record(self, what, pname, tname, transpose, every, full_shape):
        """The manifest's placement of `what`.PNAME ("grads" or "params"), from every rank's shard
        (in rank order): full shape as stored, whether parity's layout is its transpose.
        full_shape: the module parameter's shape (a flat piece's full tensor, without "shape")."""
        spec = (self.grads if what == "grads" else self.params)[tname]
        if "flat" in spec:
            out = {"stored": list(spec["shape"] or full_shape), "transposed": bool(transpose),
                   "flat": [list(t[2][pname]) for t in every]}
            if spec["replicate"]:  # HSDP: the pieces are copies over these dims
                out["replicate"] = spec["replicate"]
            return out
        shapes = [list(t[0][pname].shape) for t in every]
        full = list(shapes[0])
        for d in range(len(full)):
            split = {k for k, w in enumerate(spec["placements"]) if w == f"Shard({d})" or
                     (w in ("column", "row") and d == _linear_dim(w, transpose))}
            if split:  # the sizes along d of the ranks at coordinate 0 on every other mesh dim
                full[d] = sum(s[d] for s, c in zip(shapes, self.coords)
                              if all(c[k] == 0 for k in range(len(c)) if k not in split))
        return {"stored": full, "transposed": bool(transpose), "placements": spec["placements"]}


def _linear_dim(word, transpose):
    """The stored dim Megatron's column (output features) or row (input features) splits: an
    nn.Linear weight is (out, in) in torch (transposed to parity's (in, out))."""
    return 0 if (word == "column") == bool(transpose) else 1


def held_placements(tensors):
    """{name: its placements} of the DTensors among `tensors` ({name: tensor or None}) that torch
    holds sharded or as a partial sum on their mesh ("as_held": FSDP2's Shard(0) pieces, a
    tensor-parallel plan's Shard(0) / Shard(1), an unreduced Partial gradient); a plain tensor or
    a Replicate DTensor is whole on every rank and left out."""
    out = {}
    for name, t in tensors.items():
        placements = getattr(t, "placements", None)
        if placements and any(type(p).__name__ in ("Shard", "Partial", "_Partial") for p in placements):
            out[name] = list(placements)
    return out


def all_ranks(obj):
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [obj]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def gather_shards(local, flat):
    """[(shards, full shapes, flat pieces)] of every rank, in rank order, on every rank (a
    collective over the world): local {parity name: tensor}, flat {parity name: [offset, numel]}."""
    mine = {n: t.detach().cpu().contiguous().clone() for n, t in local.items()}
    return all_ranks((mine, {n: list(t.shape) for n, t in mine.items()}, flat))


def local_tensor(t):
    """A parameter or gradient as this rank holds it (a DTensor's local shard)."""
    if hasattr(t, "to_local"):
        t = t.to_local()
    return t.detach()


__all__ = ["Sharding", "all_ranks", "gather_shards", "held_placements", "local_tensor"]
