"""One-device agreement (issue 29): parity_torch's ReferenceModel, loaded from `parity dump`'s
init.safetensors and trained with the Collector's lines (parity_torch.train), gives the dump's
loss, micro-batch losses, every gradient before clipping, the parameters after every step,
tokens per expert, expert bias and routing: every row within TOL (fp64: 1e-12 relative), the
integer rows exact. Then each planted mutant of the model must FAIL the same comparison, so the
check can fail. Prints the table (per family the largest error over the steps).

Usage: one_device_test.py PARITY_BINARY SCENARIO STEPS PRECISION TOL [MUTANT...]
  MUTANT: ln_eps (LayerNorm's or RMSNorm's eps 1e-6), bias_in_weights (route weights from s + expert_bias),
          aux_local_batch (aux loss over the micro-batch's sequences, not the global B),
          rope_theta (the rotary base doubled), rope_before_qk_norm (q, k rotated, then normalised),
          kv_tile (grouped-query attention's K, V heads tiled, repeat, instead of repeated in place,
          repeat_interleave: query head h reads KV head h % kv_heads)
"""
import io
import os
import sys

import torch

import common
from common import check
from parity_torch import Dump, ReferenceModel, compare, report, train
from parity_torch.model import MoE, RMSNorm, rope


def plant(model, mutant):
    if mutant == "ln_eps":
        for m in model.modules():
            if isinstance(m, (torch.nn.LayerNorm, RMSNorm)):
                m.eps = 1e-6
    elif mutant == "rope_theta":
        for m in model.modules():
            if getattr(m, "rope_theta", None) is not None:
                m.rope_theta = 2 * m.rope_theta
    elif mutant == "rope_before_qk_norm":
        for m in model.modules():
            if getattr(m, "rope_theta", None) is not None and hasattr(m, "q_norm"):
                theta, m.rope_theta = m.rope_theta, None
                for norm in (m.q_norm, m.k_norm):
                    norm.forward = lambda x, n=norm, t=theta: RMSNorm.forward(n, rope(x, t))
    elif mutant == "kv_tile":
        for m in model.modules():
            if hasattr(m, "kv_repeat"):
                m.kv_repeat = "tile"
    elif mutant == "bias_in_weights":
        for m in model.moe_layers():
            m.route_weights = lambda s, ch, m=m: MoE.route_weights(m, s + m.expert_bias, ch)
    elif mutant == "aux_local_batch":
        for m in model.moe_layers():
            forward = m.forward

            def local(x, m=m, forward=forward):
                out = forward(x)
                m.aux = m.aux * (m.cfg.batch / max(1, x.shape[0]))
                return out
            m.forward = local
    else:
        raise SystemExit(f"unknown mutant {mutant}")


def run(ref, out, steps, tol, mutant=None):
    d = Dump(ref)
    model = ReferenceModel(d.scenario.model, d.scenario.torch_dtype)
    model.load_parity_state(d.init())
    if mutant:
        plant(model, mutant)
    train(model, d.scenario, steps, out_dir=out)
    rows, info = compare(ref, out, tol, steps)  # a mutant runs fewer steps than the reference holds
    text = io.StringIO()
    ok = report(rows, info, text)
    return ok, rows, text.getvalue()


def body(tmp):
    binary, scen, steps, precision, tol = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], float(sys.argv[5])
    mutants = sys.argv[6:]
    ref = os.path.join(tmp, "ref")
    common.parity_dump(binary, scen, ref, steps, precision)
    ok, rows, text = run(ref, os.path.join(tmp, "torch"), steps, tol)
    print(f"{scen} ({precision}, {steps} steps): torch against parity dump")
    print(text, end="")
    check(ok, f"{scen} {precision}: the torch run differs from parity's dump (table above)")
    code, out, _ = common.parity_compare(binary, ref, os.path.join(tmp, "torch"))  # parity's own verdict
    print(out, end="")
    check(code == 0, f"{scen} {precision}: parity compare fails the torch run (table above)")
    fams = {n: r.max for n, r in rows.items() if n.startswith(("grad ", "param "))}
    worst = max(fams, key=fams.get)
    caught = []
    for mutant in mutants:
        mok, mrows, mtext = run(ref, os.path.join(tmp, "mutant_" + mutant), min(steps, 3), tol, mutant)
        failing = [n for n, r in mrows.items() if not r.ok]
        print(f"planted mutant {mutant}: {'not caught' if mok else 'caught'}: failing rows {failing}")
        check(not mok, f"mutant {mutant} passed the comparison: the check cannot see it\n{mtext}")
        code, out, root = common.parity_compare(binary, ref, os.path.join(tmp, "mutant_" + mutant), min(steps, 3))
        print(f"  parity compare: exit {code}, {root}")
        check(code == 1 and root, f"mutant {mutant} passed parity compare (exit {code})\n{out}")
        caught.append(mutant)
    return (f"{scen} {precision}: worst family {worst} {fams[worst]:.2e} <= {tol:g}"
            + (f"; mutants caught: {', '.join(caught)}" if caught else ""))


if __name__ == "__main__":
    common.main("one_device " + os.path.basename(sys.argv[2]) + " " + sys.argv[4], body)
