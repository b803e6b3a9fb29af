#!/usr/bin/env python3
"""The PyTorch peer of `parity run`: what a user would write instead of parity.

The DeepSpeed / PyTorch data-parallel parity-test pattern, in plain PyTorch: spawn W rank
processes (torch.multiprocessing.spawn, Gloo on the CPU, a file:// rendezvous), each
trains the same small Mixture-of-Experts transformer on its shard of the batch, averages
the gradients with one all-reduce per step, steps Adam, and compares its loss, gradients
and parameters every step with a one-process run of the same model on the whole batch,
which every rank trains beside it (as PyTorch's own DDP tests do). Rank 0 prints the
verdict and the time to verdict.

It is written here, not taken from PyTorch or DeepSpeed, and is not bit-compatible with
parity's model (docs/design/model.md): same sizes, same work pattern.

  peer_dp.py --world 8 --dim 32 --layers 2 --experts 8 --seq 16 --batch 16 --steps 10
  peer_dp.py --world 1 ...    the one-process run alone (no ranks): the peer's one-device time

Last line: `peer-result {json}` (time_s, import_s, baseline_s, compute_s, comm_s,
compare_s, verdict, worst) for ci/bench/side_by_side. Exit 0 PASS, 1 FAIL, 2 bad input.
"""
import time

T_START = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

os.environ.setdefault("OMP_NUM_THREADS", "1")  # W ranks share the cores: one thread each

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

T_IMPORTED = time.perf_counter()


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world", type=int, default=2, help="ranks (1: the one-process run alone)")
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dense-layers", type=int, default=1, help="the first ones use the dense MLP, the rest MoE")
    p.add_argument("--mlp-hidden", type=int, default=0, help="default 2 * dim")
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--top-k", type=int, default=2)
    p.add_argument("--expert-hidden", type=int, default=0, help="default dim")
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--batch", type=int, default=16, help="global batch, split evenly over the ranks")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--data-seed", type=int, default=5678)
    p.add_argument("--tol", type=float, default=1e-10, help="per-tensor |a - ref| / |ref| (fp64)")
    p.add_argument("--start", choices=["spawn", "fork"], default="spawn",
                   help="how ranks start (spawn: torch.multiprocessing.spawn, the documented way)")
    p.add_argument("--bug", choices=["none", "sum"], default="none",
                   help="sum: sum the gradients instead of averaging them (the verdict must FAIL)")
    a = p.parse_args(argv)
    a.mlp_hidden = a.mlp_hidden or 2 * a.dim
    a.expert_hidden = a.expert_hidden or a.dim
    bad = []
    if a.world < 1:
        bad.append("--world must be >= 1")
    elif a.batch % a.world:
        bad.append(f"--batch ({a.batch}) must divide evenly over --world ({a.world})")
    if a.dim % a.heads:
        bad.append(f"--heads ({a.heads}) must divide --dim ({a.dim})")
    if not 1 <= a.top_k <= a.experts:
        bad.append("--top-k must be in [1, --experts]")
    if not 0 <= a.dense_layers <= a.layers:
        bad.append("--dense-layers must be in [0, --layers]")
    if bad:
        p.error("; ".join(bad))
    return a


# ---- the model: embedding, causal attention, dense SwiGLU or MoE (softmax top-k router,
# experts as SwiGLU MLPs), final LayerNorm, LM head; fp64 ----

class SwiGLU(nn.Module):
    def __init__(self, d, f):
        super().__init__()
        self.w1, self.w3, self.w2 = nn.Linear(d, f, bias=False), nn.Linear(d, f, bias=False), nn.Linear(f, d, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class MoE(nn.Module):
    def __init__(self, d, e, k, f):
        super().__init__()
        self.k = k
        self.gate = nn.Linear(d, e, bias=False)
        self.w1 = nn.Parameter(torch.empty(e, d, f))
        self.w3 = nn.Parameter(torch.empty(e, d, f))
        self.w2 = nn.Parameter(torch.empty(e, f, d))

    def forward(self, x):  # x: (tokens, d); no token dropped
        scores = F.softmax(self.gate(x), dim=-1)
        w, idx = torch.topk(scores, self.k, dim=-1)
        w = w / w.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(x)
        for e in range(self.w1.shape[0]):
            tok, slot = (idx == e).nonzero(as_tuple=True)
            if tok.numel() == 0:
                continue
            xe = x[tok]
            h = F.silu(xe @ self.w1[e]) * (xe @ self.w3[e])
            out.index_add_(0, tok, (h @ self.w2[e]) * w[tok, slot].unsqueeze(-1))
        return out


class Attention(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(d, d, bias=False) for _ in range(4))

    def forward(self, x):  # (B, S, D), causal
        b, s, d = x.shape
        q, k, v = (w(x).view(b, s, self.h, d // self.h).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.h)
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        att = F.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
        return self.wo((att @ v).transpose(1, 2).reshape(b, s, d))


class Block(nn.Module):
    def __init__(self, a, dense):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(a.dim), nn.LayerNorm(a.dim)
        self.attn = Attention(a.dim, a.heads)
        self.mlp = SwiGLU(a.dim, a.mlp_hidden) if dense else MoE(a.dim, a.experts, a.top_k, a.expert_hidden)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        y = self.ln2(x)
        if isinstance(self.mlp, MoE):
            return x + self.mlp(y.reshape(-1, y.shape[-1])).view_as(y)
        return x + self.mlp(y)


class Model(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed = nn.Embedding(a.vocab, a.dim)
        self.layers = nn.ModuleList(Block(a, l < a.dense_layers) for l in range(a.layers))
        self.final_ln = nn.LayerNorm(a.dim)
        self.lm_head = nn.Linear(a.dim, a.vocab, bias=False)

    def forward(self, x):
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h)
        return self.lm_head(self.final_ln(h))


def make_model(a):
    torch.manual_seed(a.seed)  # every rank and the baseline start from the same parameters
    m = Model(a).double()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "ln" not in name:
                p.normal_(0.0, 0.02)
    return m, torch.optim.Adam(m.parameters(), lr=a.lr)


def batch(a, step):
    """The step's global batch: a Markov-like chain over the vocabulary, a pure function of (data_seed, step)."""
    g = torch.Generator().manual_seed(a.data_seed * 1000003 + step)
    t = torch.empty(a.batch, a.seq + 1, dtype=torch.long)
    t[:, 0] = torch.randint(0, a.vocab, (a.batch,), generator=g)
    jump = torch.randint(0, 4, (a.batch, a.seq), generator=g)
    for i in range(a.seq):
        t[:, i + 1] = (5 * t[:, i] + 1 + jump[:, i]) % a.vocab
    return t[:, :-1], t[:, 1:]


def train_step(model, opt, x, y):
    opt.zero_grad(set_to_none=False)
    logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    loss.backward()
    return loss


def rel(a, b):
    n = torch.linalg.vector_norm(b).item()
    d = torch.linalg.vector_norm(a - b).item()
    return d / n if n > 0 else d


def run_one_process(a):
    model, opt = make_model(a)
    t0 = time.perf_counter()
    for step in range(a.steps):
        x, y = batch(a, step)
        loss = train_step(model, opt, x, y)
        opt.step()
    train = time.perf_counter() - t0
    print(f"peer one-process run: {a.steps} steps, last loss {loss.item():.10f}, training {train:.3f} s")
    return {"verdict": "-", "baseline_s": train, "compute_s": 0.0, "comm_s": 0.0, "compare_s": 0.0, "worst": 0.0}


def rank_main(rank, a, init_file, out_file):
    torch.set_num_threads(1)
    t_enter = time.perf_counter()
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=a.world)
    rendezvous = time.perf_counter() - t_enter
    ref, ref_opt = make_model(a)  # the one-process run, trained beside the rank's own
    model, opt = make_model(a)
    params, ref_params = list(model.parameters()), list(ref.parameters())
    names = [n for n, _ in model.named_parameters()]
    lo, hi = rank * a.batch // a.world, (rank + 1) * a.batch // a.world
    t_base = t_comp = t_comm = t_cmp = 0.0
    worst, worst_at = 0.0, ""
    for step in range(a.steps):
        x, y = batch(a, step)
        c0 = time.perf_counter()
        ref_loss = train_step(ref, ref_opt, x, y)
        ref_opt.step()
        c1 = time.perf_counter()
        loss = train_step(model, opt, x[lo:hi], y[lo:hi])
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        c2 = time.perf_counter()
        dist.all_reduce(flat)  # one bucket per step, as DDP would send it
        c3 = time.perf_counter()
        if a.bug != "sum":
            flat /= a.world
        off = 0
        for p in params:
            p.grad.copy_(flat[off:off + p.numel()].view_as(p))
            off += p.numel()
        opt.step()
        c4 = time.perf_counter()
        # Compare with the one-process run: the global loss (one more all-reduce), then every
        # gradient and every parameter after the step, rank-locally.
        lsum = loss.detach().clone()
        dist.all_reduce(lsum)
        c5 = time.perf_counter()
        checks = [("loss", rel(lsum / a.world, ref_loss.detach()))]
        for n, p, r in zip(names, params, ref_params):
            checks.append(("grad " + n, rel(p.grad, r.grad)))
            checks.append(("param " + n, rel(p.detach(), r.detach())))
        for what, err in checks:
            if err / a.tol > worst:
                worst, worst_at = err / a.tol, f"{what} step {step}"
        c6 = time.perf_counter()
        t_base += c1 - c0
        t_comp += (c2 - c1) + (c4 - c3)
        t_comm += (c3 - c2) + (c5 - c4)
        t_cmp += c6 - c5
    verdict = torch.tensor([worst], dtype=torch.float64)
    dist.all_reduce(verdict, op=dist.ReduceOp.MAX)
    if rank == 0:
        res = {"verdict": "PASS" if verdict.item() <= 1.0 else "FAIL", "worst": verdict.item(),
               "worst_at_rank0": worst_at, "rendezvous_s": rendezvous, "baseline_s": t_base,
               "compute_s": t_comp, "comm_s": t_comm, "compare_s": t_cmp, "collectives": 2 * a.steps + 1}
        with open(out_file, "w") as f:
            json.dump(res, f)
    dist.destroy_process_group()


def main(argv):
    a = parse_args(argv)
    if a.world == 1:
        res = run_one_process(a)
    else:
        with tempfile.TemporaryDirectory(prefix="peer-dp-") as tmp:
            init_file, out_file = os.path.join(tmp, "rendezvous"), os.path.join(tmp, "result.json")
            if a.start == "spawn":
                mp.spawn(rank_main, args=(a, init_file, out_file), nprocs=a.world, join=True)
            else:
                ctx = mp.get_context("fork")
                procs = [ctx.Process(target=rank_main, args=(r, a, init_file, out_file)) for r in range(a.world)]
                for p in procs:
                    p.start()
                for p in procs:
                    p.join()
                if any(p.exitcode != 0 for p in procs):
                    print("peer: a rank failed: exit codes " + str([p.exitcode for p in procs]), file=sys.stderr)
                    return 3
            with open(out_file) as f:
                res = json.load(f)
        print(f"peer verdict: {res['verdict']} (worst |err|/tol {res['worst']:.3g}, tol {a.tol:g}, "
              f"{a.world} ranks, rank 0: baseline {res['baseline_s']:.3f} s, compute {res['compute_s']:.3f} s, "
              f"communication {res['comm_s']:.3f} s in {res['collectives']} collectives, compare {res['compare_s']:.3f} s)")
    res["import_s"] = T_IMPORTED - T_START
    res["time_s"] = time.perf_counter() - T_START
    res["world"] = a.world
    res["torch"] = torch.__version__
    print(f"time to verdict: {res['time_s']:.3f} s (peer, {a.world} ranks, import torch {res['import_s']:.3f} s)")
    print("peer-result " + json.dumps(res))
    return 0 if res["verdict"] in ("PASS", "-") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
