"""A scenario's "model" and "optim" sections (docs/scenario.md) with parity's defaults.

Only what the one-device reference computes is read: the model, the optimizer, the seeds,
the dtype. The layout is ignored (a dump is always the one-device baseline of the model).
"""
import json
from dataclasses import asdict, dataclass, fields

import torch


@dataclass
class ModelConfig:
    vocab: int = 64
    dim: int = 16
    layers: int = 2
    heads: int = 2
    seq: int = 8
    batch: int = 4
    microbatches: int = 1
    dense_layers: int = 1
    mlp_hidden: int = 32
    experts: int = 4
    top_k: int = 2
    expert_hidden: int = 16
    shared_experts: int = 0
    shared_hidden: int = 16
    score: str = "softmax"
    route_norm: bool = True
    route_scale: float = 1.0
    aux_alpha: float = 0.0
    bias_rate: float = 0.0
    tie_embeddings: bool = False
    norm: str = "layernorm"  # or "rmsnorm" (issue 47)
    qk_norm: str = "off"  # or "rmsnorm"
    position: str = "none"  # or "rope" (issue 47)
    rope_theta: float = 10000.0
    kv_heads: int = 0  # key / value heads (issue 47); 0: heads

    def is_moe(self, layer):
        return layer >= self.dense_layers


@dataclass
class OptimConfig:
    kind: str = "adam"
    lr: float = 1e-3
    momentum: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    clip: float = 0.0


@dataclass
class Scenario:
    model: ModelConfig
    optim: OptimConfig
    steps: int = 10
    seed: int = 1234
    data_seed: int = 5678
    dtype: str = "fp64"
    name: str = ""
    raw: dict = None  # the JSON object it was read from
    precision: str = ""  # fp64, fp32 or bf16 (fp32 compute, bf16 storage: precision.py); "": dtype's

    @property
    def torch_dtype(self):
        return {"fp64": torch.float64, "fp32": torch.float32}[self.dtype]


def _section(cls, obj, where):
    known = {f.name for f in fields(cls)}
    unknown = set(obj) - known
    if unknown:
        raise ValueError(f"{where}: keys parity_torch does not know: {sorted(unknown)}")
    return cls(**obj)


def parse_scenario(obj):
    """A Scenario from a scenario's JSON object (a file's, or a dump manifest's "scenario")."""
    dtype = obj.get("dtype", "fp64")
    precision = obj.get("precision")
    if precision is not None and precision not in ("fp64", "fp32", "bf16"):
        raise ValueError(f"precision {precision!r}: parity_torch computes fp64, fp32 or bf16 (fp32 compute, "
                         "bf16 storage, fp32 reductions; dump the reference with `parity dump --precision bf16`)")
    if precision is not None:
        dtype = "fp32" if precision == "bf16" else precision
    if dtype not in ("fp64", "fp32"):
        raise ValueError(f"dtype {dtype!r}: expected fp64 or fp32")
    return Scenario(model=_section(ModelConfig, obj.get("model", {}), "$.model"),
                    optim=_section(OptimConfig, obj.get("optim", {}), "$.optim"),
                    steps=obj.get("steps", 10), seed=obj.get("seed", 1234), data_seed=obj.get("data_seed", 5678),
                    dtype=dtype, name=obj.get("name", ""), raw=obj, precision=precision or dtype)


def load_scenario(path):
    with open(path) as f:
        return parse_scenario(json.load(f))


def scenario_json(scn):
    """The JSON object of a Scenario: the one it was read from, else its fields (world 1)."""
    if scn.raw is not None:
        return scn.raw
    return {"name": scn.name or "torch", "steps": scn.steps, "seed": scn.seed, "data_seed": scn.data_seed,
            "dtype": scn.dtype, "model": asdict(scn.model), "optim": asdict(scn.optim)}
