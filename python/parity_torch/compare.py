"""Compares two dumps (parity's `parity dump` and a Collector's, or any two) row by row, as
parity's verdict does (docs/verdict.md): per family the normwise relative error
|x - ref| / |ref| over the family's tensors and the scale ratio <x, ref> / |ref|^2, which
names a factor (x0.25 is a gradient divided by W = 4 once too often, x2 a doubled reduction).

    python3 -m parity_torch.compare REF_DIR GOT_DIR [--tol 1e-10]     exit 0 PASS, 1 FAIL

`parity compare REF GOT` (C++) holds the same dumps to parity run's verdict with measured bounds
and names the root; this module is the lighter check with fixed tolerances.
"""
import argparse
import math
import sys

import torch

from .dump import Dump

FAMILY_ORDER = ["embedding", "attention", "layernorm", "dense_mlp", "router", "routed_experts", "shared_experts",
                "head"]
DEFAULT_TOL = {"fp64": 1e-10, "fp32": 1e-4}


class Row:
    def __init__(self, name, exact=False):
        self.name, self.exact = name, exact
        self.max, self.at, self.first_bad, self.scale, self.bad, self.steps = 0.0, None, None, None, 0, 0

    def add(self, step, err, tol, scale=None):
        self.steps += 1
        if self.at is None or err > self.max:
            self.max, self.at = err, step
        if err > (0 if self.exact else tol):
            self.bad += 1
            if self.first_bad is None:
                self.first_bad, self.scale = step, scale

    @property
    def ok(self):
        return self.bad == 0 and self.steps > 0


def _norm_sums(pairs):
    d = r = xr = 0.0
    for x, ref in pairs:
        x, ref = x.to(torch.float64), ref.to(torch.float64)
        d += float(((x - ref) ** 2).sum())
        r += float((ref ** 2).sum())
        xr += float((x * ref).sum())
    rel = math.sqrt(d) / math.sqrt(r) if r > 0 else math.sqrt(d)
    return rel, (xr / r if r > 0 else None)


def _rel(x, ref):
    x, ref = float(x), float(ref)
    return abs(x - ref) / abs(ref) if ref != 0 else abs(x - ref)


def compare(ref_dir, got_dir, tol=None, steps=None):
    """Returns (rows {name: Row}, info dict). tol: relative tolerance of every real-valued row
    (default 1e-10 in fp64, 1e-4 in fp32); tokens, tokens_per_expert and routing are exact."""
    ref, got = Dump(ref_dir), Dump(got_dir)
    tol = tol if tol is not None else DEFAULT_TOL[ref.scenario.dtype]
    common = [t for t in ref.steps if t in got.steps and (steps is None or t < steps)]
    fams = [f for f in FAMILY_ORDER if f in ref.families.values()]
    rows = {}

    def row(name, exact=False):
        return rows.setdefault(name, Row(name, exact))

    for n in ("inputs", "targets"):
        row(n, exact=True)
    for n in ("loss", "micro_losses", "grad_norm", "clip_coef"):
        row(n)
    for kind in ("grad", "param"):
        for f in fams:
            row(f"{kind} {f}")
    missing = [n for n in ref.parameters if n not in got.families]
    absent = set()
    for t in common:
        a, b = ref.step(t), got.step(t)
        # a tensor the other dump lacks compares as inf (or -1): it fails. The selection scores
        # are the reference's alone (parity compare's near-tie arbitration reads them)
        for n in {n for n in set(a) - set(b) if not n.endswith(".select_scores")}:
            absent.add(n)
            b[n] = torch.full_like(a[n], -1 if a[n].dtype == torch.int64 else math.inf)
        for n in ("inputs", "targets"):
            row(n).add(t, int((a[n] != b[n]).sum()), tol)
        for n in ("loss", "grad_norm", "clip_coef"):
            row(n).add(t, _rel(b[n], a[n]), tol)
        row("micro_losses").add(t, max(_rel(x, r) for x, r in zip(b["micro_losses"], a["micro_losses"])), tol)
        for kind, prefix in (("grad", "grads."), ("param", "params.")):
            for f in fams:
                names = [n for n in ref.parameters if ref.families[n] == f and n not in missing]
                rel, scale = _norm_sums((b[prefix + n], a[prefix + n]) for n in names)
                row(f"{kind} {f}").add(t, rel, tol, scale)
        moe = sorted({k.split(".moe.")[0] for k in a if k.endswith(".moe.chosen")}, key=lambda s: int(s.split(".")[1]))
        for layer in moe:
            p = layer + ".moe."
            row("tokens_per_expert", exact=True).add(t, int((a[p + "tokens_per_expert"] !=
                                                             b[p + "tokens_per_expert"]).sum()), tol)
            row(f"routing {layer}", exact=True).add(t, int((a[p + "chosen"] != b[p + "chosen"]).any(1).sum()), tol)
        if moe:
            rel, scale = _norm_sums((b[l + ".moe.expert_bias"], a[l + ".moe.expert_bias"]) for l in moe)
            row("expert_bias").add(t, rel, tol, scale)
    info = {"ref": ref, "got": got, "tol": tol, "steps": common, "missing": missing, "absent": sorted(absent),
            "world": (got.manifest.get("producer") or {}).get("world")}
    return rows, info


def factor_note(rows, world):
    """A sentence naming a common factor of the failing gradient families, or ''."""
    bad = [r for n, r in rows.items() if n.startswith("grad ") and not r.ok and r.scale is not None]
    if not bad:
        return ""
    s = bad[0].scale
    if any(abs(r.scale - s) > 1e-6 * abs(s) for r in bad) or abs(s - 1) < 1e-6:
        return ""
    step = min(r.first_bad for r in bad)
    fams = ", ".join(r.name[5:] for r in bad)
    note = f"grad x{s:.4g} at step {step} ({fams})"
    if world and world > 1 and abs(s * world - 1) < 1e-6:
        note += f": 1/W for W = {world}, the gradients were divided by the world size once too often"
    elif world and world > 1 and abs(s - world) < 1e-6 * world:
        note += f": W = {world}, the gradients were summed over the ranks and not averaged"
    return note


def report(rows, info, out=sys.stdout):
    ref, got = info["ref"], info["got"]
    prod = (got.manifest.get("producer") or {}).get("name", "parity")
    print(f"compare: {got.path} ({prod}, world {info['world'] or 1}) against {ref.path}: "
          f"{len(info['steps'])} steps, {ref.scenario.dtype}, tol {info['tol']:g}", file=out)
    print(f"{'row':<28} {'max error':>10} {'step':>5} {'scale':>9}  verdict", file=out)
    for r in rows.values():
        scale = "" if r.scale is None else f"x{r.scale:.4g}"
        err = f"{r.max:d}" if r.exact else f"{r.max:.3e}"
        verdict = "ok" if r.ok else ("FAIL (no step compared)" if r.steps == 0
                                     else f"FAIL from step {r.first_bad} ({r.bad} steps)")
        print(f"{r.name:<28} {err:>10} {r.at if r.at is not None else '-':>5} {scale:>9}  {verdict}", file=out)
    if info["missing"]:
        print(f"FAIL: {len(info['missing'])} parameters missing from {got.path}: {info['missing'][:4]}", file=out)
    if info["absent"]:
        print(f"FAIL: {len(info['absent'])} tensors of the step files missing from {got.path}: "
              f"{info['absent'][:4]}", file=out)
    note = factor_note(rows, info["world"])
    if note:
        print("FAIL: " + note, file=out)
    bad = sum(not r.ok for r in rows.values()) + bool(info["missing"]) + bool(info["absent"])
    print(f"verdict: {'PASS' if bad == 0 else 'FAIL'}: {len(rows) - bad} of {len(rows)} rows within tolerance",
          file=out)
    return bad == 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ref")
    p.add_argument("got")
    p.add_argument("--tol", type=float, default=None)
    a = p.parse_args(argv)
    rows, info = compare(a.ref, a.got, a.tol)
    return 0 if report(rows, info) else 1


if __name__ == "__main__":
    sys.exit(main())
