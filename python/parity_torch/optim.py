"""parity's optimizer step (src/optim/optimizer.cpp, docs/design/model.md "Step") in torch.

sgd (momentum, PyTorch's weight decay), adam (L2 weight decay) and adamw (decoupled), all in
the parameter dtype with parity's order of operations, and global-norm clipping with the
norm accumulated in double. torch.optim's own Adam computes the same function with another
order of rounding: within about 1e-15 relative in fp64, so either may be compared; this one
is there so that a torch run can match parity's fp32 run to the rounding of one update.
"""
import math

import torch


class ParityOptimizer(torch.optim.Optimizer):
    """One optimizer for parity's three kinds; construct with OptimConfig fields."""

    def __init__(self, params, kind="adam", lr=1e-3, momentum=0.0, beta1=0.9, beta2=0.999, eps=1e-8,
                 weight_decay=0.0, **unused):
        if kind not in ("sgd", "adam", "adamw"):
            raise ValueError(f"optimizer kind {kind!r}: expected sgd, adam or adamw")
        super().__init__(params, dict(kind=kind, lr=lr, momentum=momentum, beta1=beta1, beta2=beta2, eps=eps,
                                      weight_decay=weight_decay))
        self.t = 0

    @classmethod
    def from_config(cls, params, optim_cfg):
        return cls(params, **{k: v for k, v in vars(optim_cfg).items() if k != "clip"})

    @torch.no_grad()
    def step(self, closure=None):
        self.t += 1
        for group in self.param_groups:
            for w in group["params"]:
                g = w.grad if w.grad is not None else torch.zeros_like(w)
                st = self.state[w]
                dt = w.dtype
                lr, wd = torch.tensor(group["lr"], dtype=dt), torch.tensor(group["weight_decay"], dtype=dt)
                if group["kind"] == "sgd":
                    d = g + wd * w if group["weight_decay"] != 0 else g.clone()
                    if "buf" not in st:
                        st["buf"] = d  # buf = g on the first step
                    else:
                        st["buf"] = torch.tensor(group["momentum"], dtype=dt) * st["buf"] + d
                    w.copy_(w - lr * st["buf"])
                    continue
                b1, b2 = torch.tensor(group["beta1"], dtype=dt), torch.tensor(group["beta2"], dtype=dt)
                eps = torch.tensor(group["eps"], dtype=dt)
                one = torch.tensor(1.0, dtype=dt)
                bc1 = one - torch.tensor(math.pow(group["beta1"], self.t), dtype=dt)
                bc2 = one - torch.tensor(math.pow(group["beta2"], self.t), dtype=dt)
                if "m" not in st:
                    st["m"], st["v"] = torch.zeros_like(w), torch.zeros_like(w)
                gi = g
                if group["kind"] == "adamw":
                    w.copy_(w - lr * wd * w)
                elif group["weight_decay"] != 0:
                    gi = g + wd * w
                st["m"] = b1 * st["m"] + (one - b1) * gi
                st["v"] = b2 * st["v"] + (one - b2) * gi * gi
                w.copy_(w - lr * (st["m"] / bc1) / (torch.sqrt(st["v"] / bc2) + eps))
        return None


def grad_norm(params):
    """Global L2 norm of the gradients, squares accumulated in double (parity: registry order)."""
    s = 0.0
    for p in params:
        if p.grad is not None:
            s += float((p.grad.detach().to(torch.float64) ** 2).sum())
    return math.sqrt(s)


def clip_coefficient(norm, max_norm):
    """min(1, max_norm / (norm + 1e-6)); 1 when max_norm == 0 (clipping off)."""
    if max_norm <= 0:
        return 1.0
    return min(1.0, max_norm / (norm + 1e-6))


@torch.no_grad()
def clip_grads(params, max_norm):
    """parity's clip: (norm, coef); every gradient times coef in its own dtype (skipped when coef == 1)."""
    params = list(params)
    norm = grad_norm(params)
    coef = clip_coefficient(norm, max_norm)
    if coef != 1.0:
        for p in params:
            if p.grad is not None:
                p.grad.mul_(torch.tensor(coef, dtype=p.grad.dtype))
    return norm, coef
