"""`python3 -m parity_torch.compare` has one diagnosis engine (issue 46, item 3): where the
parity binary is found (--parity, $PARITY_BINARY, PATH) it runs `parity compare` and returns its
exit code; elsewhere, or with --smoke, it runs its own check with fixed tolerances and says so,
and its FAIL says that it reads no signature (only `parity compare` does); a named binary that
cannot run is bad input (2).

Usage: one_engine_test.py PARITY_BINARY
"""
import os
import shutil
import subprocess
import sys

import common
from common import check
from parity_torch import Dump, ReferenceModel, safetensors, train


def run(args, env_extra=None, path=None):
    env = dict(os.environ, PYTHONPATH=os.path.join(common.ROOT, "python"))
    env.pop("PARITY_BINARY", None)
    env.update(env_extra or {})
    if path is not None:
        env["PATH"] = path
    r = subprocess.run([sys.executable, "-m", "parity_torch.compare"] + args, env=env, text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    return r.returncode, r.stdout


def body(tmp):
    binary = os.path.abspath(sys.argv[1])
    ref = os.path.join(tmp, "ref")
    common.parity_dump(binary, "tiny", ref, 2, "fp64")
    d = Dump(ref)
    got, bad = os.path.join(tmp, "torch"), os.path.join(tmp, "torch_doubled")
    model = ReferenceModel(d.scenario.model, d.scenario.torch_dtype)
    model.load_parity_state(d.init())
    train(model, d.scenario, 2, out_dir=got)
    shutil.copytree(got, bad)  # the same run with its head gradient doubled at step 0
    step0 = os.path.join(bad, "step_000000.safetensors")
    t = safetensors.read(step0)
    t["grads.lm_head.weight"] = t["grads.lm_head.weight"] * 2
    safetensors.write(step0, t)
    engine = "parity compare tiny: fp64, dumps"  # the first line only parity's verdict prints
    smoke = "parity_torch.compare: a smoke check with fixed tolerances"
    bare = "/usr/bin:/bin"  # a PATH without parity
    code, out = run([ref, got, "--parity", binary], path=bare)
    check(code == 0 and engine in out and smoke not in out, f"--parity: exit {code}\n{out[-2000:]}")
    code, out = run([ref, got], {"PARITY_BINARY": binary}, path=bare)
    check(code == 0 and engine in out, f"$PARITY_BINARY: exit {code}\n{out[-2000:]}")
    code, out = run([ref, got], path=os.path.dirname(binary) + ":" + bare)
    check(code == 0 and engine in out, f"parity on PATH: exit {code}\n{out[-2000:]}")
    # the bug fails in parity's verdict with its exit code (1), not the smoke check's
    code, out = run([ref, bad, "--parity", binary], path=bare)
    check(code == 1 and engine in out and "root: grad head at step 0" in out, f"a planted bug: exit {code}\n{out[-2000:]}")
    # no binary anywhere: the smoke check, said so; --smoke forces it where the binary is
    code, out = run([ref, got], path=bare)
    check(code == 0 and smoke in out and engine not in out, f"no binary: exit {code}\n{out[-2000:]}")
    code, out = run([ref, got, "--smoke", "--parity", binary], path=bare)
    check(code == 0 and smoke in out and engine not in out, f"--smoke: exit {code}\n{out[-2000:]}")
    # the smoke check's FAIL says plainly that it reads no signature (issue 46e item 6)
    code, out = run([ref, bad], path=bare)
    check(code == 1 and smoke in out and "root: grad head at step 0" in out and
          "no signature read" in out and "run `parity compare` for the diagnosis" in out,
          f"the smoke check on a planted bug: exit {code}\n{out[-2000:]}")
    code, out = run([ref, got, "--parity", os.path.join(tmp, "no_such_parity")], path=bare)
    check(code == 2 and "not an executable file" in out, f"a missing binary: exit {code}\n{out[-2000:]}")
    return "parity compare through --parity, $PARITY_BINARY and PATH; the smoke check said so without one"


if __name__ == "__main__":
    common.main("one engine", body)
