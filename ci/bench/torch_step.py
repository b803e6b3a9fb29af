#!/usr/bin/env python3
"""PyTorch's step time on the GPU for the model of scenarios/gpu/large_moe_*.json, beside
`parity bench model` (docs/gpu.md).

The model is ci/bench/peer_dp.py's (embedding, causal attention, dense SwiGLU or MoE with a
softmax top-k router, final LayerNorm, LM head) at the large scenario's sizes, built on one
CUDA device, with Adam; it has no shared expert (parity's large model has one of hidden 256,
under 1% of the work). Precisions: fp64 and fp32 (TF32 off, as parity's pedantic cuBLAS),
and bf16 as mixed precision (fp32 master weights, autocast to bf16), parity's bf16 policy.

  torch_step.py [--steps 5] [--precisions fp32,bf16,fp64] [--scenario FILE]

Prints one line per precision: median step seconds (forward, backward, Adam) over the timed
steps after one warm-up, and the torch version. Exit 77 without a CUDA device.
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    p.add_argument("--scenario", default=os.path.join(here, "..", "..", "scenarios", "gpu", "large_moe_fp32.json"))
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--precisions", default="fp32,bf16,fp64")
    a = p.parse_args()
    import torch
    import torch.nn.functional as F
    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 77
    import peer_dp
    m = json.load(open(a.scenario))["model"]
    args = peer_dp.parse_args([
        "--world", "1", "--vocab", str(m["vocab"]), "--dim", str(m["dim"]), "--heads", str(m["heads"]),
        "--layers", str(m["layers"]), "--dense-layers", str(m["dense_layers"]), "--mlp-hidden",
        str(m["mlp_hidden"]), "--experts", str(m["experts"]), "--top-k", str(m["top_k"]), "--expert-hidden",
        str(m["expert_hidden"]), "--seq", str(m["seq"]), "--batch", str(m["batch"])])
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    x, y = peer_dp.batch(args, 0)
    x, y = x.to(dev), y.to(dev)
    for prec in a.precisions.split(","):
        model, _ = peer_dp.make_model(args)
        model = model.to(dev, dtype=torch.float64 if prec == "fp64" else torch.float32)
        opt = torch.optim.Adam(model.parameters(), lr=args.lr)
        times = []
        for step in range(a.steps + 1):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=False)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=prec == "bf16"):
                logits = model(x)
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))
            loss.backward()
            opt.step()
            torch.cuda.synchronize()
            if step > 0:
                times.append(time.perf_counter() - t0)
        print(f"torch {torch.__version__} {prec}: median step {statistics.median(times):.4f} s over {len(times)} "
              f"steps (min {min(times):.4f}), loss {loss.item():.6f}", flush=True)
        del model, opt
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
