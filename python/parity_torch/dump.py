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
from .safetensors import BadFile
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
    "sequences": "(N, 3) int64, a Collector's: (global index, dp rank, micro-batch) of every row a rank computed",
    "rank_losses": "(dp, M) fp64, a Collector's: each dp rank's own part of each micro-batch's loss",
}


def step_file(step):
    return f"step_{step:06d}.safetensors"


MAX_MANIFEST = 64 << 20  # bytes: a dump's manifest is kilobytes


class Dump:
    """A dump directory: dump.manifest, dump.scenario, dump.init(), dump.step(t), dump.families.
    Anything that is not a dump as parity writes it raises safetensors.BadFile naming the file."""

    def __init__(self, path):
        self.path = path
        mpath = os.path.join(path, "manifest.json")
        f, size = safetensors._open_regular(mpath)
        with f:
            if size > MAX_MANIFEST:
                raise BadFile(f"{mpath}: {size} bytes, more than a manifest holds ({MAX_MANIFEST})")
            text = f.read(size)
        try:
            self.manifest = json.loads(text.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise BadFile(f"{mpath}: invalid JSON: {e}") from None
        if not isinstance(self.manifest, dict) or self.manifest.get("format") != FORMAT:
            raise BadFile(f"{path}: format {self.manifest.get('format') if isinstance(self.manifest, dict) else None!r}"
                          f", expected {FORMAT!r}")
        try:
            self.scenario = parse_scenario(self.manifest["scenario"])
            self.parameters = [p["name"] for p in self.manifest["parameters"]]
            self.families = {p["name"]: p["family"] for p in self.manifest["parameters"]}
            files = self.manifest["files"]
            self.steps = [f["step"] for f in files if f["step"] is not None]
            # what each file holds, by the manifest: a header that says otherwise is refused
            self._expect = {f["file"]: f.get("tensors") for f in files}
        except (KeyError, TypeError) as e:
            raise BadFile(f"{mpath}: not a parity dump manifest: missing or malformed {e}") from None

    def _read(self, name, names=None):
        return safetensors.read(os.path.join(self.path, name), names, self._expect.get(name))

    def init(self):
        """{parity name: tensor} before the first step."""
        return self._read("init.safetensors")

    def step(self, t):
        """Every tensor of step t's file."""
        return self._read(step_file(t))

    def tokens(self, t):
        """(inputs, targets) of step t, each (B, S) int64."""
        d = self._read(step_file(t), ["inputs", "targets"])
        return d["inputs"], d["targets"]
