"""Helpers of the parity_torch tests (tests/python/*_test.py): dumps from the parity binary,
temporary directories, a verdict line that ctest matches."""
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
T0 = time.perf_counter()


def scenario_path(name):
    return name if os.path.sep in name else os.path.join(ROOT, "scenarios", name + ".json")


class Failed(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failed(what)


def parity_dump(binary, scenario, out_dir, steps, precision):
    """`parity dump SCENARIO DIR --steps N --precision P`: the one-device reference."""
    cmd = [binary, "dump", scenario_path(scenario), out_dir, "--steps", str(steps), "--precision", precision]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise Failed(f"{' '.join(cmd)}: exit {r.returncode}\n{r.stdout}")


def parity_compare(binary, ref, got, steps=None):
    """`parity compare REF GOT [--steps N]`: (exit code, its output, its root line or "")."""
    cmd = [binary, "compare", ref, got] + ([] if steps is None else ["--steps", str(steps)])
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    root = next((line for line in r.stdout.splitlines() if line.startswith("root: ")), "")
    if r.returncode not in (0, 1):
        raise Failed(f"parity compare {ref} {got}: exit {r.returncode}\n{r.stdout}")
    return r.returncode, r.stdout, root


def main(name, body):
    """Runs body(tmp_dir); prints `python NAME: PASS|FAIL (...)` and exits 0 or 1."""
    tmp = tempfile.mkdtemp(prefix="parity-torch-")
    try:
        detail = body(tmp) or ""
        print(f"python {name}: PASS ({time.perf_counter() - T0:.1f} s{'; ' + detail if detail else ''})")
        code = 0
    except Failed as e:
        print(f"python {name}: FAIL: {e}")
        code = 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    sys.stdout.flush()
    sys.exit(code)
