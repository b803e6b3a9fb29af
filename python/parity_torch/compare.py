"""Compares two dumps (parity's `parity dump` and a Collector's, or any two) row by row, as
parity's verdict does (docs/verdict.md): per family the normwise relative error
|x - ref| / |ref| over the family's tensors and the scale ratio <x, ref> / |ref|^2, which
names a factor (x0.25 is a gradient divided by W = 4 once too often, x2 a doubled reduction).
A `root:` line names where a failure first shows, as parity's verdict does (docs/verdict.md
"The root of a failure"): the earliest failing step and, at that step, the first failing row in
the order data flows (inputs, loss, gradients in backward order, grad norm, clipping, routing,
tokens per expert, expert bias, parameters), its scale read against the degrees the got dump's
producer records (world, dp, tp) and the micro-batches.

    python3 -m parity_torch.compare REF_DIR GOT_DIR [--steps N] [--parity BIN | --smoke | --tol 1e-10]
    exit 0 PASS, 1 FAIL, 2 bad input (named, no traceback), 4 the reference itself diverged

One diagnosis engine: where the parity binary is found (--parity, $PARITY_BINARY, or PATH) the
command runs `parity compare REF GOT`, parity run's verdict with measured bounds and its root,
and returns its exit code. Elsewhere (or with --smoke / --tol) it runs this module's lighter check
with fixed tolerances, and says so. The smoke check reads a root's scale against the degrees only:
it does not read the signatures `parity compare` names (harness/verdict/verdict_signature.h: a
rank's own share of an uneven batch, a per-rank mean loss, clipping before the sync, gradients
averaged twice; dump_split.h: ranks that clipped by different coefficients), and its root line
says so (NO_SIGNATURES): one diagnosis engine, not two.
"""
import argparse
import math
import os
import shutil
import subprocess
import sys

import torch

from .data import micro_batch_sequences
from .dump import Dump
from .safetensors import BadFile

FAMILY_ORDER = ["embedding", "attention", "layernorm", "dense_mlp", "router", "routed_experts", "shared_experts",
                "head"]
DEFAULT_TOL = {"fp64": 1e-10, "fp32": 1e-4}


class Row:
    def __init__(self, name, exact=False):
        self.name, self.exact = name, exact
        self.max, self.at, self.first_bad, self.scale, self.bad, self.steps = 0.0, None, None, None, 0, 0
        self.worst = None  # (tensor, error) the worst tensor of the first failing step, for tensor rows

    def add(self, step, err, tol, scale=None, worst=None):
        self.steps += 1
        nan = isinstance(err, float) and math.isnan(err)
        if self.at is None or nan or err > self.max:
            if not (isinstance(self.max, float) and math.isnan(self.max)):  # the first NaN stays the worst
                self.max, self.at = err, step
        if not err <= (0 if self.exact else tol):  # NaN is never within a tolerance
            self.bad += 1
            if self.first_bad is None:
                self.first_bad, self.scale, self.worst = step, scale, worst

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


def _worst_tensor(pairs):
    """(name, normwise error) of the tensor with the largest error of (name, x, ref) triples."""
    best = None
    for name, x, ref in pairs:
        x, ref = x.to(torch.float64), ref.to(torch.float64)
        r = float((ref ** 2).sum())
        e = math.sqrt(float(((x - ref) ** 2).sum())) / (math.sqrt(r) if r > 0 else 1.0)
        if best is None or e > best[1]:
            best = (name, e)
    return best


def _rel(x, ref):
    x, ref = float(x), float(ref)
    return abs(x - ref) / abs(ref) if ref != 0 else abs(x - ref)


def _split_check(sequences, cfg):
    """A Collector's `sequences` (N, 3): (global index, dp rank, micro-batch) per row. Returns (per
    micro-batch: it holds parity's split's sequences, so its loss part is comparable; the count of
    sequences missing, duplicated or outside the batch). parity compare names them by index."""
    M, B = cfg.microbatches, cfg.batch
    if sequences is None:
        return [True] * M, 0
    taken = [0] * B
    sets = [set() for _ in range(M)]
    off = 0
    for g, _, mb in sequences.reshape(-1, 3).tolist():
        if not 0 <= g < B:
            off += 1
            continue
        taken[g] += 1
        if 0 <= mb < M:
            sets[mb].add(g)
    off += sum(1 for c in taken if c != 1)
    same = [sets[m] == set(range(*micro_batch_sequences(B, M, m))) for m in range(M)]
    return same, off


def compare(ref_dir, got_dir, tol=None, steps=None):
    """Returns (rows {name: Row}, info dict). tol: relative tolerance of every real-valued row
    (default 1e-10 in fp64, 1e-4 in fp32); tokens, tokens_per_expert and routing are exact."""
    ref, got = Dump(ref_dir), Dump(got_dir)
    if ref.scenario.precision == "bf16":  # bf16 rounding needs the bounds the reference's twin measured
        raise BadFile(f"{ref_dir}: a bf16 reference: this smoke check has fixed tolerances; bf16 is judged by "
                      "`parity compare` (the bounds its rounding twin measured)")
    if "placements" in got.manifest:  # shards are assembled and judged by parity compare (dump_shards.h)
        raise BadFile(f"{got_dir}: a sharded candidate (its manifest has placements): `parity compare` assembles "
                      "and judges shards; this smoke check reads full tensors only")
    if ref.scenario.dtype not in DEFAULT_TOL and tol is None:
        raise BadFile(f"{ref_dir}: a {ref.scenario.dtype} reference: this smoke check knows fp64 and fp32 (give --tol, "
                      "or use `parity compare`)")
    tol = tol if tol is not None else DEFAULT_TOL[ref.scenario.dtype]
    want = [t for t in ref.steps if steps is None or t < steps]
    lacking = [t for t in want if t not in got.steps]
    if lacking:  # a candidate that stopped early must not pass on the steps it has
        raise BadFile(f"candidate: {got_dir} has no step {lacking[0]} (its manifest lists steps "
                      f"{', '.join(map(str, got.steps)) or 'none'}); compare fewer with --steps N")
    common = want
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
    replicas = {s.get("step"): s["replicas"] for s in got.manifest.get("steps") or []
                if isinstance(s, dict) and isinstance(s.get("replicas"), dict)}
    for t in common:
        a, b = ref.step(t), got.step(t)
        for n in ("loss", "grad_norm"):  # a reference that is not finite is no reference
            if n in a and not math.isfinite(float(a[n])):
                raise ReferenceDiverged(f"reference: {ref_dir} step {t}: {n} is {float(a[n])}: the one-device run "
                                        "itself diverged; nothing can be held to it")
        # a tensor the other dump lacks compares as inf (or -1): it fails. The selection scores
        # are the reference's alone (parity compare's near-tie arbitration reads them)
        for n in {n for n in set(a) - set(b) if not n.endswith(".select_scores")}:
            absent.add(n)
            b[n] = torch.full_like(a[n], -1 if a[n].dtype == torch.int64 else math.inf)
        same_micro, split_off = _split_check(b.get("sequences"), ref.scenario.model)
        for n in ("inputs", "targets"):
            row(n).add(t, int((a[n] != b[n]).sum()) + split_off, tol)
        for n in ("loss", "grad_norm", "clip_coef"):
            row(n).add(t, _rel(b[n], a[n]), tol)
        row("micro_losses").add(t, max([_rel(x, r) for m, (x, r) in enumerate(zip(b["micro_losses"], a["micro_losses"]))
                                        if same_micro[m]] or [0.0]), tol)
        for kind, prefix in (("grad", "grads."), ("param", "params.")):
            for f in fams:
                names = [n for n in ref.parameters if ref.families[n] == f and n not in missing]
                rel, scale = _norm_sums((b[prefix + n], a[prefix + n]) for n in names)
                worst = _worst_tensor((n, b[prefix + n], a[prefix + n]) for n in names) if rel > tol else None
                row(f"{kind} {f}").add(t, rel, tol, scale, worst)
        moe = sorted({k.split(".moe.")[0] for k in a if k.endswith(".moe.chosen")}, key=lambda s: int(s.split(".")[1]))
        if moe:  # scale: the got counts' total over the reference's (< 1: part of the tokens counted)
            tpe = [(a[l + ".moe.tokens_per_expert"], b[l + ".moe.tokens_per_expert"]) for l in moe]
            total = sum(int(r.sum()) for r, _ in tpe)
            differ = [(l, int((r != x).sum())) for l, (r, x) in zip(moe, tpe)]
            row("tokens_per_expert", exact=True).add(
                t, sum(d for _, d in differ), tol, sum(int(x.sum()) for _, x in tpe) / total if total else None,
                next(((l + ".moe.tokens_per_expert", d) for l, d in differ if d), None))
        for layer in moe:
            p = layer + ".moe."
            row(f"routing {layer}", exact=True).add(t, int((a[p + "chosen"] != b[p + "chosen"]).any(1).sum()), tol)
        if moe:
            rel, scale = _norm_sums((b[l + ".moe.expert_bias"], a[l + ".moe.expert_bias"]) for l in moe)
            row("expert_bias").add(t, rel, tol, scale)
        rec = replicas.get(t)
        if rec is not None:  # every rank's copies against rank 0's, bit for bit (the Collector's digests)
            differ = rec.get("differ") or []
            row("replicas", exact=True).add(t, len(differ), tol, None,
                                            (f"rank {differ[0]['rank']}'s {differ[0]['what']}: {differ[0]['first']}",
                                             differ[0]["tensors"]) if differ else None)
    prod = got.manifest.get("producer") or {}
    degrees = {k: int(prod.get(k) or 1) for k in ("tp", "dp", "world")}
    degrees["microbatches"] = ref.scenario.model.microbatches
    info = {"ref": ref, "got": got, "tol": tol, "steps": common, "missing": missing, "absent": sorted(absent),
            "world": prod.get("world"), "degrees": degrees}
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


BACKWARD_ORDER = ["head", "layernorm", "shared_experts", "routed_experts", "router", "dense_mlp", "attention",
                  "embedding"]  # the families in the order the backward pass produces their gradients


def flow_rank(name):
    """A row's place in the data flow (lower: earlier), as parity's verdict orders rows
    (harness/verdict/verdict_root.cpp data_flow_rank); the inputs come first."""
    kind, _, fam = name.partition(" ")
    fam_rank = BACKWARD_ORDER.index(fam) if fam in BACKWARD_ORDER else len(BACKWARD_ORDER)
    fixed = {"inputs": -2, "targets": -1, "loss": 0, "micro_losses": 1, "grad_norm": 30, "clip_coef": 31,
             "routing": 40, "tokens_per_expert": 41, "expert_bias": 42, "replicas": 60}
    if kind == "grad":
        return 10 + fam_rank
    if kind == "param":
        return 50 + fam_rank
    return fixed.get(kind, 70)


def _near(x, c):
    return abs(x - c) <= 2e-3 * abs(c)


def factor_meaning(s, degrees):
    """What a scale ratio suggests given the layout's degrees (verdict_root.cpp factor_meaning)."""
    if s is None or math.isnan(s):
        return "no scale ratio"
    if abs(s) < 1e-3:
        return "0: missing (a term or a reduction dropped)"
    if _near(s, 1.0):
        return "1: not a scaling (wrong elements, a permutation, or a different computation)"
    if _near(s, -1.0):
        return "-1: sign flipped"
    named = []
    for k in ("tp", "dp", "world", "microbatches"):
        v = degrees.get(k, 1)
        if v > 1:
            for c, text in ((v, f"{v} (= {k})"), (1.0 / v, f"1/{v} (= 1/{k})")):
                if _near(s, c) and text not in named:
                    named.append(text)
    if named:
        return " or ".join(named) + (": summed where it should be averaged, or counted that many times" if s > 1
                                     else ": averaged where it should be summed, or a group missing")
    if _near(s, 2.0):
        return "2: doubled (summed twice, or counted twice)"
    if _near(s, 0.5):
        return "1/2: halved (averaged twice, or half the terms)"
    return "not a clean factor"


def find_root(rows):
    """(root row, rows failing first at its step, rows failing only later) or None."""
    bad = [r for r in rows.values() if not r.ok and r.first_bad is not None]
    if not bad:
        return None
    root = min(bad, key=lambda r: (r.first_bad, flow_rank(r.name)))
    same = [r for r in bad if r is not root and r.first_bad == root.first_bad]
    later = [r for r in bad if r.first_bad > root.first_bad]
    return root, same, later


def root_line(rows, info):
    """'root: grad router at step 0, scale 0.507088 -> not a clean factor, near 1/2 (= 1/tp) ...
    (worst tensor layers.1.moe.router.gate, error 0.74); also first failing at step 0: grad_norm,
    param router; 19 rows fail only from later steps (consequences)', or '' when nothing failed.
    The scale of tokens_per_expert is the got counts' total over the reference's."""
    found = find_root(rows)
    if found is None:
        return ""
    root, same, later = found
    degrees = info.get("degrees") or {}
    scale = "-" if root.scale is None else f"{root.scale:.6f}"
    if root.name == "tokens_per_expert" and root.scale is not None and not _near(root.scale, 1.0):
        ranks = {k: v for k, v in degrees.items() if k in ("dp", "world")}  # a count over part of the ranks
        named = factor_meaning(root.scale, ranks).split(":")[0]
        named = f"{named}: " if "(= " in named else ""
        meaning = (f"{named}the counts sum to {root.scale:.4g} of the step's (token, slot) assignments: counted "
                   + ("over part of the tokens (a rank's own, not summed over the ranks?)" if root.scale < 1
                      else "some tokens more than once"))
    elif root.exact and root.scale is None:
        meaning = f"{root.max} differ (exact row)"
    else:
        meaning = factor_meaning(root.scale, degrees)
        if meaning == "not a clean factor" and root.scale > 0:  # a partial sum: near 1/d, not on it
            near = [f"1/{degrees[k]} (= 1/{k})" for k in ("tp", "dp", "world")
                    if degrees.get(k, 1) > 1 and abs(root.scale * degrees[k] - 1) < 0.15]
            if near:
                meaning += (f", near {' or '.join(near)}: a partial sum (each rank's own tokens?), a reduction "
                            "over that group missing")
    out = f"root: {root.name} at step {root.first_bad}, scale {scale} -> {meaning}"
    if root.worst:
        n, e = root.worst
        out += f" (worst tensor {n}, error {e:.3g})" if isinstance(e, float) else f" (first differing: {n}, {e} entries)"
    if same:
        out += f"; also first failing at step {root.first_bad}: " + ", ".join(r.name for r in same)
    if later:
        out += f"; {len(later)} row{'s' if len(later) > 1 else ''} fail only from later steps (consequences)"
    return out


NO_SIGNATURES = ("smoke check: the scale against the degrees only, no signature read (a rank's own share, a "
                 "per-rank mean loss, clipping before the sync, averaged twice, ranks clipping apart): run `parity "
                 "compare` for the diagnosis")


def report(rows, info, out=None):
    out = out if out is not None else sys.stdout  # the stream of the call, not of the import
    ref, got = info["ref"], info["got"]
    prod = (got.manifest.get("producer") or {}).get("name", "parity")
    deg = info.get("degrees") or {}
    layout = f"world {info['world'] or 1}" + "".join(f", {k} {deg[k]}" for k in ("dp", "tp") if deg.get(k, 1) > 1)
    print(f"compare: {got.path} ({prod}, {layout}) against {ref.path}: "
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
    root = root_line(rows, info)
    if root:
        print(root, file=out)
        print(NO_SIGNATURES, file=out)
    bad = sum(not r.ok for r in rows.values()) + bool(info["missing"]) + bool(info["absent"])
    print(f"verdict: {'PASS' if bad == 0 else 'FAIL'}: {len(rows) - bad} of {len(rows)} rows within tolerance",
          file=out)
    return bad == 0


class ReferenceDiverged(Exception):
    """The reference itself is not finite: exit 4, the exit-code table's "the one-device run diverged"."""


# parity's exit-code table (src/core/exit_codes.h): 0 PASS, 1 FAIL (parity broken), 2 bad input,
# 4 the one-device baseline diverged.
EXIT_PASS, EXIT_FAIL, EXIT_BAD_INPUT, EXIT_DIVERGED = 0, 1, 2, 4


def find_parity(given=None):
    """The parity binary that holds the verdict: --parity, else $PARITY_BINARY, else `parity` on
    PATH; None when there is none (or the one named cannot run)."""
    for cand in (given, os.environ.get("PARITY_BINARY"), shutil.which("parity")):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    if given or os.environ.get("PARITY_BINARY"):
        raise BadFile(f"parity binary {given or os.environ.get('PARITY_BINARY')!r} is not an executable file")
    return None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ref")
    p.add_argument("got")
    p.add_argument("--tol", type=float, default=None,
                   help="the smoke check's fixed relative tolerance (implies --smoke)")
    p.add_argument("--steps", type=int, default=None, help="compare only the first N steps")
    p.add_argument("--parity", default=None, help="the parity binary (default: $PARITY_BINARY, else parity on PATH)")
    p.add_argument("--smoke", action="store_true",
                   help="this module's own check with fixed tolerances, even where the parity binary is found")
    a = p.parse_args(argv)
    try:
        binary = None if a.smoke or a.tol is not None else find_parity(a.parity)
    except BadFile as e:
        print(f"parity_torch.compare: bad input: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if binary:  # one diagnosis engine: parity's own verdict, its bounds and its root
        sys.stdout.flush()
        cmd = [binary, "compare", a.ref, a.got] + ([] if a.steps is None else ["--steps", str(a.steps)])
        return subprocess.run(cmd).returncode
    print("parity_torch.compare: a smoke check with fixed tolerances (no parity binary found: --parity, "
          "$PARITY_BINARY or PATH give parity compare's verdict, with measured bounds)")
    try:
        rows, info = compare(a.ref, a.got, a.tol, a.steps)
    except ReferenceDiverged as e:
        print(f"parity_torch.compare: {e}", file=sys.stderr)
        return EXIT_DIVERGED
    except (BadFile, OSError, KeyError) as e:
        print(f"parity_torch.compare: bad input: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return EXIT_PASS if report(rows, info) else EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
