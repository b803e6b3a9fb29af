"""Traces through `parity dump --trace`, parity_torch's trace map and `parity compare` (issue 45 item 4):
a torch DDP loop of this test's own (W = 2, gloo) on fsdp4_uneven_b9_mb2's model (batch 9: dp rank 0
holds 5 sequences, rank 1 four; 2 micro-batches), the collector's lines and the trace's marked:
- clean, traced: `parity compare` passes, every traced tensor within its bound (the backward's
  gradients divided by the W the loop back-propagates, trace.py);
- a forward-only bug, LayerNorm eps 1e-6 instead of 1e-5 in layers.1.ln2 on rank 1 alone: fails, and
  the root line names where it enters: "enters at layer 1 ln2, forward, micro-batch ..., rank 1 (dp 1)";
  the same bug untraced is named only by a family (printed: the root before);
- a bug inside the MoE block, the routing weights doubled on rank 1: named at "layer 1 route_w, forward"
  through the model's taps (trace_map);
- every tensor of parity's flow through the model's taps: q and k after QK-norm and rope, the tied
  head's logits (one device, traced, 52 of 52);
- off (no trace=): no hook on a traced module, no trace file, no trace line in the verdict, and every
  step file byte for byte the traced run's.

Usage: trace_test.py PARITY_BINARY [STEPS]
"""
import datetime
import filecmp
import json
import os
import shutil

os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
import sys

import torch
import torch.distributed as dist

import common
from common import check
from parity_torch import Collector, Dump, MarkovData, ParityOptimizer, ReferenceModel, dp_sequences
from parity_torch import trace_map                                              # trace line 1

WORLD = 2
SCENARIO = "fsdp4_uneven_b9_mb2"
RUNS = {"clean": (True, None), "ln_eps": (True, "ln_eps"), "off": (False, None), "ln_eps_off": (False, "ln_eps"),
        "route_w": (True, "route_w")}


def loop(d, out, traced, bug, rank, steps):
    scn, cfg = d.scenario, d.scenario.model
    model = ReferenceModel(cfg, scn.torch_dtype)
    model.load_parity_state(d.init())
    if bug == "ln_eps" and rank == 1:  # the planted forward-only bug: one LayerNorm's eps on one rank
        model.layers[1].ln2.eps = 1e-6
    if bug == "route_w" and rank == 1:  # inside the MoE block: the routing weights scaled twice on one rank
        moe = model.layers[1].moe
        moe.route_weights = lambda scores, chosen, once=moe.route_weights: once(scores, chosen) * 2
    ddp = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
    opt = ParityOptimizer.from_config(model.parameters(), scn.optim)
    data = MarkovData(cfg.vocab, scn.data_seed)
    col = Collector(out, scn, ddp, trace=trace_map(cfg) if traced else None)   # trace line 2 (trace=)
    for step in range(steps):
        opt.zero_grad(set_to_none=False)
        for mb in range(cfg.microbatches):
            lo, hi = dp_sequences(cfg.batch, cfg.microbatches, mb, WORLD, rank)
            x, y = data.sequences(step, list(range(lo, hi)), cfg.seq)
            with ddp.no_sync() if mb < cfg.microbatches - 1 else torch.enable_grad():
                part = ddp(x, y)
                col.micro(part, x, y)
                (part * WORLD).backward()  # DDP averages: W x this rank's part of the global loss
        col.grads()
        opt.step()
        model.update_expert_bias(dist.all_reduce)
        col.step()
    col.close()
    return model


def every_site(binary, tmp):
    """The taps cover parity's whole flow: q and k after QK-norm and rope, forward and gradient at the same
    tensor as parity traces them (tp2_qknorm_rope), the tied head's logits (fsdp2_tp2_tied), one device,
    2 steps: every key traced, within its bound."""
    from parity_torch import micro_batch_sequences
    for scen in ("tp2_qknorm_rope", "fsdp2_tp2_tied"):
        ref, out = os.path.join(tmp, f"{scen}_ref"), os.path.join(tmp, f"{scen}_traced")
        common.parity_dump(binary, scen, ref, 2, extra=("--trace",))
        d = Dump(ref)
        scn, cfg = d.scenario, d.scenario.model
        model = ReferenceModel(cfg, scn.torch_dtype)
        model.load_parity_state(d.init())
        opt, data = ParityOptimizer.from_config(model.parameters(), scn.optim), MarkovData(cfg.vocab, scn.data_seed)
        col = Collector(out, scn, model, trace=trace_map(cfg))
        for step in range(2):
            opt.zero_grad(set_to_none=False)
            for mb in range(cfg.microbatches):
                lo, hi = micro_batch_sequences(cfg.batch, cfg.microbatches, mb)
                x, y = data.sequences(step, list(range(lo, hi)), cfg.seq)
                part = model(x, y)
                col.micro(part, x, y)
                part.backward()
            col.grads()
            opt.step()
            model.update_expert_bias(None)
            col.step()
        col.close()
        code, text, _ = common.parity_compare(binary, ref, out)
        head = common.line_starting(text, "trace: ")
        check(code == 0 and head.startswith("trace: 52 ") and "not traced" not in text and
              "  no traced tensor over its bound" in text.splitlines(),
              f"{scen}: exit {code}, {head!r}: expected all 52 traced within their bounds, none left out\n{text}")
    return "q, k under QK-norm + rope and the tied logits traced (52 of 52)"


def rank_main(rank, port, ref, tmp, steps):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=60))
    d = Dump(ref)
    for name, (traced, bug) in RUNS.items():
        model = loop(d, os.path.join(tmp, name), traced, bug, rank, steps)
        if not traced:  # off: no hook on any module the trace map names (but the collector's routing hook)
            mods = dict(model.named_modules())
            hooked = [m for _, m, _ in trace_map(d.scenario.model) if len(mods[m]._forward_pre_hooks) +
                      len(mods[m]._forward_hooks) > (1 if hasattr(mods[m], "parity_moe_layer") else 0)]
            with open(os.path.join(tmp, f"hooks.{name}.{rank}"), "w") as f:
                json.dump(hooked, f)
    dist.barrier()
    dist.destroy_process_group()
    open(os.path.join(tmp, f"done.{rank}"), "w").close()


def body(tmp):
    binary = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    ref = os.path.join(tmp, "ref")
    common.parity_dump(binary, SCENARIO, ref, steps, extra=("--trace",))
    common.spawn_ranks(rank_main, (common.free_port(), ref, tmp, steps), WORLD, tmp, 200)
    said = []
    # clean, traced: passes, every traced tensor compared within its bound
    code, out, _ = common.parity_compare(binary, ref, os.path.join(tmp, "clean"))
    print(out, end="")
    head = common.line_starting(out, "trace: ")
    check(code == 0, "the clean traced run fails parity compare (table above)")
    check(head.startswith("trace: ") and "  no traced tensor over its bound" in out.splitlines(),
          f"the clean traced run: no trace compared, or a traced tensor over its bound: {head!r}")
    n = int(head.split()[1])
    check(n == 52, f"the clean traced run compared {n} traced tensors, expected the 52 of parity's flow (the MoE "
                   "block's scores, routing weights, experts and combine through the model's taps)")
    check("not traced by the candidate" not in out, "parity's flow has a tensor the trace map does not name")
    said.append(f"clean: PASS, {n} traced tensors within their bounds")
    # the forward-only bug on rank 1, traced: named at its module, on its rank
    code, out, root = common.parity_compare(binary, ref, os.path.join(tmp, "ln_eps"))
    print(out, end="")
    want = "enters at layer 1 ln2, forward, micro-batch "
    check(code == 1 and want in root and ", rank 1 (dp 1), element [sequence " in root,
          f"ln_eps: exit {code}, root {root!r}: expected exit 1 naming {want!r} on rank 1 (dp 1)")
    said.append("ln_eps: " + root[root.index("enters at"):][:120])
    # inside the MoE block (the model's taps): named at the routing weights, on its rank
    code, out, root = common.parity_compare(binary, ref, os.path.join(tmp, "route_w"))
    want = "enters at layer 1 route_w, forward, micro-batch "
    check(code == 1 and want in root and ", rank 1 (dp 1), element [sequence " in root,
          f"route_w: exit {code}, root {root!r}: expected exit 1 naming {want!r} on rank 1 (dp 1)")
    said.append("route_w: " + root[root.index("enters at"):][:100])
    # the same bug untraced: the root before the trace (a family), for the record
    code, out, before = common.parity_compare(binary, ref, os.path.join(tmp, "ln_eps_off"))
    check(code == 1 and "enters at" not in before, f"ln_eps untraced: exit {code}, root {before!r}")
    said.append("untraced: " + before[:100])
    # off: nothing added
    off, clean = os.path.join(tmp, "off"), os.path.join(tmp, "clean")
    code, out, _ = common.parity_compare(binary, ref, off)
    check(code == 0 and not common.line_starting(out, "trace"), f"the untraced run: exit {code} or a trace line")
    check(not [f for f in os.listdir(off) if f.startswith("trace_")], "the untraced run wrote a trace file")
    check("trace_files" not in json.load(open(os.path.join(off, "manifest.json"))), "the untraced manifest lists "
                                                                                   "trace files")
    for r in range(WORLD):
        hooked = json.load(open(os.path.join(tmp, f"hooks.off.{r}")))
        check(not hooked, f"rank {r}: the untraced run left hooks on {hooked[:3]}")
    for t in range(steps):
        f = f"step_{t:06d}.safetensors"
        check(filecmp.cmp(os.path.join(off, f), os.path.join(clean, f), shallow=False),
              f"{f}: the traced run's step differs from the untraced one's (the trace moved a number)")
    said.append("off: no hook, no file, step files identical")
    # --trace-steps 1: step 0's traces only, still compared (the step compare traces)
    ref1 = os.path.join(tmp, "ref1")
    common.parity_dump(binary, SCENARIO, ref1, steps, extra=("--trace", "--trace-steps", "1"))  # raises on a failure
    listed = [f["step"] for f in json.load(open(os.path.join(ref1, "manifest.json"))).get("trace_files", [])]
    check(listed == [0] and not os.path.exists(os.path.join(ref1, "trace_000001.safetensors")),
          f"--trace-steps 1: traced steps {listed}, expected [0] alone")
    code, out, _ = common.parity_compare(binary, ref1, clean)
    check(code == 0 and "  no traced tensor over its bound" in out.splitlines(), "--trace-steps 1: step 0 not compared")
    # a traced tensor of another shape is bad input (exit 2, named), never read past its end
    from parity_torch import safetensors
    bad = os.path.join(tmp, "bad_shape")
    shutil.copytree(clean, bad)
    f = os.path.join(bad, "trace_000000.safetensors")
    tensors = safetensors.read(f)
    tensors["trace.fwd.layers.1.ln2"] = tensors["trace.fwd.layers.1.ln2"][:, :4].contiguous()
    safetensors.write(f, tensors)
    r = common.subprocess.run([binary, "compare", ref, bad], stdout=common.subprocess.PIPE,
                              stderr=common.subprocess.STDOUT, text=True)
    check(r.returncode == 2 and "\"trace.fwd.layers.1.ln2\" has shape (9, 4, 16)" in r.stdout,
          f"a traced tensor of another shape: exit {r.returncode}, {r.stdout[-300:]!r}: expected exit 2 naming it")
    said.append("--trace-steps 1: step 0 alone; a wrong shape: exit 2")
    said.append(every_site(binary, tmp))
    return " | ".join(said)


if __name__ == "__main__":
    common.main("trace " + SCENARIO, body)
