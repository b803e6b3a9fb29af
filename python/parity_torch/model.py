"""parity's reference model (docs/design/model.md, docs/model.md) as a torch.nn.Module.

Modules follow torch's conventions, so the model reads like any PyTorch transformer:
attention projections, dense MLPs, shared experts, the router gate and the LM head are
nn.Linear (weight stored (out, in), y = x @ W.T); embeddings and LayerNorms are
nn.Embedding and nn.LayerNorm. parity stores every matrix (in, out), y = x @ W. The routed
experts are one grouped tensor per projection, kept in parity's layout (E, D, F) / (E, F, D)
as grouped-GEMM MoE code keeps them. `name_map(cfg)` lists, in parity's registry order,

    parity name                    torch name                         transpose
    embed.weight                   embed.weight                       no   (V, D) both
    layers.{l}.ln1.weight / .bias  layers.{l}.ln1.weight / .bias      no   (also ln2, final_ln; no .bias
                                                                           under model.norm rmsnorm)
    layers.{l}.attn.wq|wk|wv|wo    layers.{l}.attn.wq|wk|wv|wo.weight yes  (D, D); wk, wv (D, kv_heads*Dh)
    layers.{l}.mlp.w1|w3|w2        layers.{l}.mlp.w1|w3|w2.weight     yes  (D, F) <-> (F, D)
    layers.{l}.moe.router.gate     layers.{l}.moe.router.gate.weight  yes  (D, E) <-> (E, D)
    layers.{l}.moe.experts.w1|w3|w2 layers.{l}.moe.experts.w1|w3|w2   no   (E, D, F), (E, F, D)
    layers.{l}.moe.shared.w1|w3|w2 layers.{l}.moe.shared.w1|w3|w2.weight yes
    lm_head.weight (untied only)   lm_head.weight                     yes  (D, V) <-> (V, D)
    buffer layers.{l}.moe.expert_bias  the same buffer                no   (E)

With tie_embeddings the head is embed.weight itself (logits = h @ embed.weight.T, parity's
"transposed embedding"), so there is no lm_head entry. tests/python/units_test.py checks the
map and the transposes against a dump's init.safetensors.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def name_map(cfg):
    """[(parity name, torch name, transpose, family)] in parity's registry order (model/params.cpp)."""
    out = [("embed.weight", "embed.weight", False, "embedding")]
    norm_parts = ("weight",) if cfg.norm == "rmsnorm" else ("weight", "bias")  # RMSNorm has no bias

    def ffn(prefix, fam, grouped):
        for w in ("w1", "w3", "w2"):
            out.append((f"{prefix}.{w}", f"{prefix}.{w}" if grouped else f"{prefix}.{w}.weight", not grouped, fam))

    for l in range(cfg.layers):
        p = f"layers.{l}"
        out += [(f"{p}.ln1.{x}", f"{p}.ln1.{x}", False, "layernorm") for x in norm_parts]
        out += [(f"{p}.attn.{w}", f"{p}.attn.{w}.weight", True, "attention") for w in ("wq", "wk", "wv", "wo")]
        if cfg.qk_norm == "rmsnorm":
            out += [(f"{p}.attn.{w}.weight",) * 2 + (False, "layernorm") for w in ("q_norm", "k_norm")]
        out += [(f"{p}.ln2.{x}", f"{p}.ln2.{x}", False, "layernorm") for x in norm_parts]
        if not cfg.is_moe(l):
            ffn(f"{p}.mlp", "dense_mlp", False)
            continue
        out.append((f"{p}.moe.router.gate", f"{p}.moe.router.gate.weight", True, "router"))
        ffn(f"{p}.moe.experts", "routed_experts", True)
        if cfg.shared_experts > 0:
            ffn(f"{p}.moe.shared", "shared_experts", False)
    out += [(f"final_ln.{x}", f"final_ln.{x}", False, "layernorm") for x in norm_parts]
    if not cfg.tie_embeddings:
        out.append(("lm_head.weight", "lm_head.weight", True, "head"))
    return out


def trace_map(cfg):
    """[(parity trace name, torch module name, "out" | "in")]: where this model computes the tensors parity
    traces (model/trace.h; trace.py hooks them): each module's output, or its first input. The
    MoE block's scores, routing weights, experts' outputs ((token, slot) rows, unweighted) and routed
    combine, q and k as attention reads them (after QK-norm and rope) and the logits (tied head or
    not) are taps (nn.Identity): every tensor of parity's flow."""
    out = [("embed", "embed", "out")]
    for l in range(cfg.layers):
        p = f"layers.{l}"
        out.append((f"{p}.ln1", f"{p}.ln1", "out"))
        # q and k as attention reads them (after QK-norm and rope), forward and gradient: one tensor per
        # name, as parity traces them
        out += [(f"{p}.q", f"{p}.attn.q_tap", "out"), (f"{p}.k", f"{p}.attn.k_tap", "out"),
                (f"{p}.v", f"{p}.attn.wv", "out")]
        out += [(f"{p}.attn", f"{p}.attn.wo", "in"), (f"{p}.attn_out", f"{p}.attn.wo", "out"),
                (f"{p}.h_mid", f"{p}.ln2", "in"), (f"{p}.ln2", f"{p}.ln2", "out")]
        if cfg.is_moe(l):
            out.append((f"{p}.router", f"{p}.moe.router.gate", "out"))
            out += [(f"{p}.{x}", f"{p}.moe.{x}_tap", "out") for x in ("scores", "route_w", "experts", "combine")]
            if cfg.shared_experts > 0:
                out.append((f"{p}.shared", f"{p}.moe.shared", "out"))
        out += [(f"{p}.ffn_out", f"{p}.moe" if cfg.is_moe(l) else f"{p}.mlp", "out"), (f"{p}.h_out", p, "out")]
    out += [("final_ln", "final_ln", "out"), ("logits", "logits_tap", "out")]
    return out


def buffer_map(cfg):
    """[(parity name, torch buffer name)]: the expert bias of each MoE layer."""
    return [(f"layers.{l}.moe.expert_bias",) * 2 for l in range(cfg.dense_layers, cfg.layers)]


def _keep(t):
    return t


def to_parity(t, transpose):
    """A torch tensor in parity's layout (contiguous, detached)."""
    t = t.detach()
    return (t.t() if transpose else t).contiguous()


def from_parity(t, transpose):
    return (t.t() if transpose else t).contiguous()


class SwiGLU(nn.Module):
    """(silu(x W1) * (x W3)) W2 with nn.Linear weights: the dense MLP and the shared expert."""

    def __init__(self, d, f, dtype):
        super().__init__()
        self.w1 = nn.Linear(d, f, bias=False, dtype=dtype)
        self.w3 = nn.Linear(d, f, bias=False, dtype=dtype)
        self.w2 = nn.Linear(f, d, bias=False, dtype=dtype)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def rope(x, theta):
    """Rotary positions (model.position rope, parity's ops/rope.h), written here from the
    formula: x (b, h, S, Dh) at positions 0 .. S-1; column f of a head pairs with f + Dh/2
    (rotate_half) and turns by pos / theta^(2f/Dh), the angles in fp64, cos / sin rounded to
    x's dtype once."""
    s, dh = x.shape[-2], x.shape[-1]
    half = dh // 2
    inv_freq = 1.0 / theta ** (torch.arange(0, dh, 2, dtype=torch.float64, device=x.device) / dh)
    angle = torch.arange(s, dtype=torch.float64, device=x.device)[:, None] * inv_freq[None, :]  # (S, Dh/2)
    c, sn = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * c - x2 * sn, x2 * c + x1 * sn), dim=-1)


class Attention(nn.Module):
    def __init__(self, d, heads, dtype, qk_norm=False, rope_theta=None, kv_heads=0):
        super().__init__()
        self.heads = heads
        self.rope_theta = rope_theta  # None: no position but the causal mask
        # model.kv_heads (issue 47): wk, wv project to kv_heads heads of Dh; query head h reads key /
        # value head h // (heads // kv_heads) (0: heads, multi-head attention)
        kv = (kv_heads or heads) * (d // heads)
        self.wq, self.wo = (nn.Linear(d, d, bias=False, dtype=dtype) for _ in range(2))
        self.wk, self.wv = (nn.Linear(d, kv, bias=False, dtype=dtype) for _ in range(2))
        self.kv_repeat = "interleave"  # each KV head repeated for its group of query heads, in place
        self.q_tap, self.k_tap = nn.Identity(), nn.Identity()  # q, k as attention reads them (trace_map)
        if qk_norm:  # model.qk_norm: each head of q and k RMS-normalised over Dh (Qwen3 / OLMo 2)
            self.q_norm, self.k_norm = RMSNorm(d // heads, 1e-5, dtype), RMSNorm(d // heads, 1e-5, dtype)

    def forward(self, x):  # (b, S, D), causal
        b, s, d = x.shape
        dh = d // self.heads
        # the heads this process holds: all of them, or its share when wq, wk, wv are column
        # parallel (DTensor's ColwiseParallel hands back the local columns)
        q, k, v = (w(x) for w in (self.wq, self.wk, self.wv))
        local, local_kv = q.shape[-1] // dh, k.shape[-1] // dh
        q = q.view(b, s, local, dh).transpose(1, 2)
        k, v = (t.view(b, s, local_kv, dh).transpose(1, 2) for t in (k, v))
        if hasattr(self, "q_norm"):
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rope_theta is not None:  # after the QK-norm (Qwen3's order)
            q, k = rope(q, self.rope_theta), rope(k, self.rope_theta)
        q = self.q_tap(q.transpose(1, 2).reshape(b, s, local * dh)).view(b, s, local, dh).transpose(1, 2)
        k = self.k_tap(k.transpose(1, 2).reshape(b, s, local_kv * dh)).view(b, s, local_kv, dh).transpose(1, 2)
        if local_kv != local:  # grouped-query: key / value head g serves query heads g*group .. (g+1)*group-1
            group = local // local_kv
            if self.kv_repeat == "interleave":
                k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            else:  # "tile": query head h reads h % kv_heads (a planted mutant, tests/python/one_device_test.py)
                k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(dh)
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        att = torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
        return self.wo((att @ v).transpose(1, 2).reshape(b, s, local * dh))


class Router(nn.Module):
    def __init__(self, d, e, dtype):
        super().__init__()
        self.gate = nn.Linear(d, e, bias=False, dtype=dtype)


class GroupedExperts(nn.Module):
    """E SwiGLU experts stored grouped, in parity's layout: w1, w3 (E, D, F), w2 (E, F, D)."""

    def __init__(self, e, d, f, dtype):
        super().__init__()
        self.w1 = nn.Parameter(torch.zeros(e, d, f, dtype=dtype))
        self.w3 = nn.Parameter(torch.zeros(e, d, f, dtype=dtype))
        self.w2 = nn.Parameter(torch.zeros(e, f, d, dtype=dtype))

    def forward(self, x, e):
        s = getattr(self, "store", _keep)  # bf16 storage points (precision.py), or none
        a, b = s(x @ self.w1[e]), s(x @ self.w3[e])
        return s(F.silu(a) * b) @ self.w2[e]


def topk_select(value, k):
    """(n, K) experts by descending value, ties to the lower index (argmax returns the first)."""
    value = value.clone()
    chosen = []
    for _ in range(k):
        best = torch.argmax(value, dim=-1)
        chosen.append(best)
        value.scatter_(1, best.unsqueeze(1), float("-inf"))
    if not chosen:
        return torch.zeros(value.shape[0], 0, dtype=torch.int64, device=value.device)
    return torch.stack(chosen, dim=1)


class MoE(nn.Module):
    """Router, top-K routed experts (no token dropped), optional shared expert, aux loss.

    After each forward: `chosen` (tokens, K) and `aux` (this micro-batch's part of the loss);
    `counts` (E) accumulates (token, slot) assignments until update_expert_bias() uses them;
    `tokens_per_expert` (E) is then the counts that update used (after its reduction over the
    ranks), kept until the next update. The collector reads `chosen` from every module with a
    `parity_moe_layer` attribute, and `tokens_per_expert` when the module has one."""

    def __init__(self, cfg, layer, dtype):
        super().__init__()
        self.cfg, self.parity_moe_layer = cfg, layer
        self.router = Router(cfg.dim, cfg.experts, dtype)
        self.experts = GroupedExperts(cfg.experts, cfg.dim, cfg.expert_hidden, dtype)
        self.shared = SwiGLU(cfg.dim, cfg.shared_hidden, dtype) if cfg.shared_experts > 0 else None
        # Taps (nn.Identity) where parity traces tensors no module outputs (trace_map): the scores, the
        # routing weights, the experts' outputs in (token, slot) order and the routed combine.
        self.scores_tap, self.route_w_tap = nn.Identity(), nn.Identity()
        self.experts_tap, self.combine_tap = nn.Identity(), nn.Identity()
        self.register_buffer("expert_bias", torch.zeros(cfg.experts, dtype=dtype))
        self.counts = torch.zeros(cfg.experts, dtype=torch.int64)
        self.chosen, self.aux, self.tokens_per_expert = None, None, None

    def scores(self, x):
        """(..., E) router scores (softmax or sigmoid of x @ gate) of tokens x (..., D)."""
        logits = self.router.gate(x)
        return torch.softmax(logits, dim=-1) if self.cfg.score == "softmax" else torch.sigmoid(logits)

    def route_weights(self, scores, chosen):
        """(tokens, K): the unbiased scores of the chosen experts, renormalised, scaled."""
        w = scores.gather(1, chosen)
        if self.cfg.route_norm:
            w = w / w.sum(dim=-1, keepdim=True)
        return w * self.cfg.route_scale

    def forward(self, x, scores=None):
        """x (b, S, D); scores: the router's scores of these tokens (b, S, E) when computed
        elsewhere (a sequence-parallel layout scores its own tokens, then gathers), else
        self.scores(x)."""
        c = self.cfg
        b, s, d = x.shape
        xf = x.reshape(b * s, d)
        scores = self.scores_tap(self.scores(xf) if scores is None else scores.reshape(b * s, c.experts))
        chosen = topk_select(scores.detach() + self.expert_bias, c.top_k)  # the bias only selects
        w = self.route_w_tap(self.route_weights(scores, chosen))
        y = xf.new_zeros(b * s, c.top_k, d)  # each (token, slot)'s expert output, unweighted
        # Every expert runs, on its tokens or on none, as a grouped GEMM does: an expert without
        # tokens still gets its (zero) gradient, so every rank reduces the same parameters
        # (FSDP2 reduce-scatters only the gradients that exist: a rank whose experts got no
        # token sent a shorter buffer, and gloo aborted on the size mismatch).
        for e in range(c.experts):
            tok, slot = (chosen == e).nonzero(as_tuple=True)
            y = y.index_put((tok, slot), self.experts(xf[tok], e))
        y = self.experts_tap(y.reshape(b * s, c.top_k * d)).reshape(b * s, c.top_k, d)
        out = self.combine_tap((y * w.unsqueeze(-1)).sum(dim=1))  # the routed combine, slots in order
        if self.shared is not None:
            out = out + self.shared(xf)
        self.chosen = chosen
        self.counts = self.counts.to(chosen.device) + torch.bincount(chosen.reshape(-1), minlength=c.experts)
        self.aux = torch.zeros((), dtype=x.dtype, device=x.device)
        if c.aux_alpha > 0 and b > 0:
            shat = scores / scores.sum(dim=-1, keepdim=True)
            p = shat.view(b, s, -1).sum(dim=1) / s  # (b, E)
            onehot = torch.zeros(b * s, c.experts, dtype=x.dtype, device=x.device).scatter_add_(
                1, chosen, torch.ones_like(chosen, dtype=x.dtype))
            f = onehot.view(b, s, -1).sum(dim=1) * (c.experts / (c.top_k * s))  # a count: no gradient
            self.aux = (f * p).sum() * (c.aux_alpha / c.batch)
        return out.view(b, s, d)


class RMSNorm(nn.Module):
    """y = (x * rstd) * weight, rstd = 1 / sqrt(mean(x^2) + eps) over the last dimension: parity's
    ops/rmsnorm.cpp (torch 1.13 has no nn.RMSNorm). No centring, no bias."""

    def __init__(self, d, eps, dtype):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d, dtype=dtype))

    def forward(self, x):
        rstd = 1.0 / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + self.eps)
        return (x * rstd) * self.weight


def make_norm(cfg, dtype):
    """The scenario's model.norm: nn.LayerNorm or RMSNorm, eps 1e-5 both (docs/model.md)."""
    if cfg.norm == "rmsnorm":
        return RMSNorm(cfg.dim, 1e-5, dtype)
    return nn.LayerNorm(cfg.dim, eps=1e-5, dtype=dtype)


class Block(nn.Module):
    def __init__(self, cfg, layer, dtype):
        super().__init__()
        self.ln1 = make_norm(cfg, dtype)
        self.attn = Attention(cfg.dim, cfg.heads, dtype, cfg.qk_norm == "rmsnorm",
                              cfg.rope_theta if cfg.position == "rope" else None, cfg.kv_heads)
        self.ln2 = make_norm(cfg, dtype)
        if cfg.is_moe(layer):
            self.moe = MoE(cfg, layer, dtype)
        else:
            self.mlp = SwiGLU(cfg.dim, cfg.mlp_hidden, dtype)

    def forward(self, h):
        h = h + self.attn(self.ln1(h))
        return h + (self.moe(self.ln2(h)) if hasattr(self, "moe") else self.mlp(self.ln2(h)))


class ReferenceModel(nn.Module):
    """The whole model; `loss(inputs, targets)` is a micro-batch's part of parity's step loss."""

    def __init__(self, cfg, dtype=torch.float64):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.dim, dtype=dtype)
        self.layers = nn.ModuleList(Block(cfg, l, dtype) for l in range(cfg.layers))
        self.final_ln = make_norm(cfg, dtype)
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(cfg.dim, cfg.vocab, bias=False, dtype=dtype)
        self.logits_tap = nn.Identity()  # the logits, tied head or not (trace_map)

    def moe_layers(self):
        return [b.moe for b in self.layers if hasattr(b, "moe")]

    def forward(self, inputs, targets=None):
        """logits (b, S, V) of inputs (b, S); with targets, this micro-batch's part of the loss
        (self.loss), so that a DistributedDataParallel wrapper sees the whole graph."""
        h = self.embed(inputs)
        for block in self.layers:
            h = block(h)
        h = self.final_ln(h)
        logits = getattr(self, "store", _keep)(h @ self.embed.weight.t()) if self.lm_head is None else self.lm_head(h)
        logits = self.logits_tap(logits)
        return logits if targets is None else self.loss_of(logits, targets)

    def loss(self, inputs, targets):
        """sum of cross-entropy / (B * S), B the scenario's global batch, plus the aux loss of these
        sequences: parts of micro-batches and data-parallel ranks add up to the step's loss."""
        return self.forward(inputs, targets)

    def loss_of(self, logits, targets):
        ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="sum")
        loss = ce * (1.0 / (self.cfg.batch * self.cfg.seq))
        for m in self.moe_layers():
            loss = loss + m.aux
        return loss

    @torch.no_grad()
    def update_expert_bias(self, reduce_counts=None):
        """docs/model.md step 4 from the counts of this step's forwards: d_e = u sign(mean(c) - c_e),
        d -= mean(d), in double, added once in the parameter dtype. reduce_counts(t) sums a counts
        tensor over data-parallel ranks in place (e.g. torch.distributed.all_reduce); each MoE
        module keeps the counts it used as `tokens_per_expert` (what the Collector records)."""
        for m in self.moe_layers():
            c = m.counts
            if reduce_counts is not None:
                reduce_counts(c)
            m.tokens_per_expert = c.clone()
            if self.cfg.bias_rate > 0:
                cd = c.to(torch.float64)
                d = self.cfg.bias_rate * torch.sign(cd.mean() - cd)
                m.expert_bias += (d - d.mean()).to(m.expert_bias.dtype)
            m.counts = torch.zeros_like(c)

    def parity_tensors(self, what="params"):
        """{parity name: tensor in parity's layout}: "params" (with the expert-bias buffers) or "grads"."""
        named = dict(self.named_parameters())
        out = {}
        for pname, tname, tr, _ in name_map(self.cfg):
            t = named[tname] if what == "params" else named[tname].grad
            out[pname] = to_parity(t if t is not None else torch.zeros_like(named[tname]), tr)
        if what == "params":
            bufs = dict(self.named_buffers())
            out.update({p: bufs[t].detach().clone() for p, t in buffer_map(self.cfg)})
        return out

    @torch.no_grad()
    def load_parity_state(self, tensors):
        """Copies parity-named tensors (a dump's init.safetensors or a step's params.*) into the model."""
        named = dict(self.named_parameters())
        for pname, tname, tr, _ in name_map(self.cfg):
            p = named[tname]
            src = from_parity(tensors[pname], tr)
            if tuple(src.shape) != tuple(p.shape):
                raise ValueError(f"{pname}: shape {tuple(tensors[pname].shape)} does not fit {tname} {tuple(p.shape)}")
            p.copy_(src)
        bufs = dict(self.named_buffers())
        for pname, tname in buffer_map(self.cfg):
            if pname in tensors:
                bufs[tname].copy_(tensors[pname])
