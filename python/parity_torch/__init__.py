"""parity_torch: parity's reference Mixture-of-Experts model in PyTorch, its data, its dumps.

Check a torch training setup against parity (docs/framework.md): `parity dump` writes the
one-device reference; ReferenceModel loads its init.safetensors through `name_map`; the
Collector records your run in the same format; `compare` (python3 -m parity_torch.compare)
reports per family. Needs torch (tested with 1.13); no other package.
"""
from .collector import Collector
from .compare import compare, report
from .data import MarkovData, dp_sequences, micro_batch_sequences
from .dump import Dump
from .model import ReferenceModel, buffer_map, name_map, trace_map
from .optim import ParityOptimizer, clip_grads
from .scenario import load_scenario, parse_scenario
from .train import train

__all__ = ["Collector", "Dump", "MarkovData", "ParityOptimizer", "ReferenceModel", "buffer_map", "clip_grads",
           "compare", "dp_sequences", "load_scenario", "micro_batch_sequences", "name_map", "parse_scenario",
           "report", "trace_map", "train"]
__version__ = "0.1.0"
