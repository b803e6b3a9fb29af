"""parity's dump directory (src/harness/runner/dump.cpp, `parity dump SCENARIO DIR`): reader.

    init.safetensors        every parameter before the first step, parity's names and layout
    step_NNNNNN.safetensors inputs, targets (B, S); loss; micro_losses (M); grad_norm; clip_coef;
                            grads.NAME (before clipping); params.NAME (after the step); per MoE
                            layer l: layers.l.moe.tokens_per_expert (E), .expert_bias (E, after the
                            step's update), .chosen (B*S, K)
    manifest.json           format "parity-dump/1", scenario, entropy_floor, conventions,
                            parameters [{name, shape, family}], files, steps [{step, loss, ...}]
"""
import json
import os

from . import safetensors
from .scenario import parse_scenario

FORMAT = "parity-dump/1"
CONVENTIONS = {  # the words of dump.cpp's conventions(), written by the collector too
    "matrices": "stored (in, out): y = x · W",
    "inputs, targets": "(B, S) int64: sequence g of the step is row g",
    "loss": "fp64: mean cross-entropy over the step's B*S tokens plus the aux loss",
    "micro_losses": "each micro-batch's part of loss (they sum to loss)",
    "grads.*": "gradient of loss, accumulated over micro-batches, before clipping",
    "params.*": "parameters after the optimizer step",
    "grad_norm, clip_coef": "global L2 norm before clipping; the factor applied to every gradient",
    "layers.{l}.moe.tokens_per_expert": "(token, slot) assignments per expert over the step",
    "layers.{l}.moe.expert_bias": "after this step's bias update",
    "layers.{l}.moe.chosen": "(B*S, K) chosen experts per token, descending score + bias",
}


def step_file(step):
    return f"step_{step:06d}.safetensors"


class Dump:
    """A dump directory: dump.manifest, dump.scenario, dump.init(), dump.step(t), dump.families."""

    def __init__(self, path):
        self.path = path
        with open(os.path.join(path, "manifest.json")) as f:
            self.manifest = json.load(f)
        if self.manifest.get("format") != FORMAT:
            raise ValueError(f"{path}: format {self.manifest.get('format')!r}, expected {FORMAT!r}")
        self.scenario = parse_scenario(self.manifest["scenario"])
        self.parameters = [p["name"] for p in self.manifest["parameters"]]
        self.families = {p["name"]: p["family"] for p in self.manifest["parameters"]}
        self.steps = [f["step"] for f in self.manifest["files"] if f["step"] is not None]

    def init(self):
        """{parity name: tensor} before the first step."""
        return safetensors.read(os.path.join(self.path, "init.safetensors"))

    def step(self, t):
        """Every tensor of step t's file."""
        return safetensors.read(os.path.join(self.path, step_file(t)))

    def tokens(self, t):
        """(inputs, targets) of step t, each (B, S) int64."""
        d = safetensors.read(os.path.join(self.path, step_file(t)), ["inputs", "targets"])
        return d["inputs"], d["targets"]
