"""parity's bf16 policy in torch (docs/precision.md, src/core/precision.h): fp32 compute, master
weights, optimizer state and gradient reductions; bf16 storage of the parameters' compute copy and
of the activations parity stores, each rounded to the nearest bf16 (ties to even) and held in
fp32, so the values are those of 16-bit storage with fp32 arithmetic, at the same points:
- the parameters' compute copy: `bf16_params(model)` rounds every parameter in place for the
  forwards and backwards of a step and puts the fp32 masters back after (the gradients, taken
  against the rounded copy, stay fp32 and go to the masters, as parity's baseline does);
- LayerNorm / RMSNorm outputs (q_norm, k_norm included), q, k, v (wq, wk, wv outputs; q and k again as
  attention reads them, after QK-norm and rope: the q_tap / k_tap outputs, a no-op without either), the
  attention output (wo's input), the SwiGLU's x·w1, x·w3 and its output (w2's input), the
  router's logits, the head's logits: `bf16_storage(model)` puts forward hooks on those modules,
  and the grouped experts and a tied head round through the module's `store` (model.py);
- left fp32 as in parity: the residual stream, the outputs of wo and w2, the MoE combine, the
  softmax probabilities, the router's scores, cross-entropy, every gradient.
Each rounding is a straight-through function: the backward passes the gradient unchanged, as
parity's backward uses the stored (rounded) values and keeps gradients in fp32.
"""
import contextlib

import torch
import torch.nn as nn


class _RoundBf16(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.to(torch.bfloat16).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        return g


def round_bf16(x):
    """A storage point: x rounded to the nearest bf16 (ties to even), kept in x's dtype."""
    return _RoundBf16.apply(x)


def _out(module, inputs, output):
    return round_bf16(output)


def _in(module, inputs):
    return (round_bf16(inputs[0]),) + tuple(inputs[1:])


def _first(hooks, handle):
    """The hook just registered runs before those registered earlier (torch >= 2.0's prepend=True; torch 1.13
    keeps a module's hooks in an OrderedDict by handle id): a storage point is part of the module's output,
    so a hook registered before it (a Collector's trace, trace.py) still sees the stored value."""
    hooks.move_to_end(handle.id, last=False)


def _round_out(m):
    _first(m._forward_hooks, m.register_forward_hook(_out))


def _round_in(m):
    _first(m._forward_pre_hooks, m.register_forward_pre_hook(_in))


def bf16_storage(model):
    """Puts parity's bf16 storage points on a parity_torch ReferenceModel (idempotent), each before any hook
    already on its module."""
    from .model import Attention, GroupedExperts, ReferenceModel, Router, SwiGLU
    if getattr(model, "parity_bf16", False):
        return model
    model.parity_bf16 = True
    for m in model.modules():
        if isinstance(m, (nn.LayerNorm,)) or type(m).__name__ == "RMSNorm":
            _round_out(m)
        elif isinstance(m, Attention):
            for w in (m.wq, m.wk, m.wv, m.q_tap, m.k_tap):  # q, k stored again after QK-norm and rope
                _round_out(w)
            _round_in(m.wo)
        elif isinstance(m, SwiGLU):
            _round_out(m.w1)
            _round_out(m.w3)
            _round_in(m.w2)
        elif isinstance(m, Router):
            _round_out(m.gate)
        elif isinstance(m, (GroupedExperts, ReferenceModel)):
            m.store = round_bf16  # the experts' x·w1, x·w3, h; a tied head's logits
    if model.lm_head is not None:
        _round_out(model.lm_head)
    return model


@contextlib.contextmanager
def bf16_params(model, masters=True):
    """The parameters' compute copy for a step's forwards and backwards: each parameter rounded to
    bf16 in place, the fp32 masters put back on exit (the gradients stay). masters=False keeps the
    rounded values (the planted bug "no fp32 master": the update lands on bf16 parameters)."""
    params = list(model.parameters())
    with torch.no_grad():
        saved = [p.detach().clone() for p in params]
        for p in params:
            p.copy_(p.to(torch.bfloat16).to(p.dtype))
    try:
        yield
    finally:
        if masters:
            with torch.no_grad():
                for p, s in zip(params, saved):
                    p.copy_(s)
