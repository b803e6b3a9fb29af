"""Helpers of the parity_torch tests (tests/python/*_test.py): dumps from the parity binary,
temporary directories, a verdict line that ctest matches, rank processes (spawn_ranks)."""
import io
import json
import os
import shutil
import socket
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


def parity_dump(binary, scenario, out_dir, steps, precision=None, extra=()):
    """`parity dump SCENARIO DIR --steps N [--precision P] [EXTRA...]`: the one-device reference
    (precision None: the scenario's own)."""
    cmd = [binary, "dump", scenario_path(scenario), out_dir, "--steps", str(steps)]
    cmd += (["--precision", precision] if precision else []) + list(extra)
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


def parity_verdict(binary, ref, got, root_prefix=None):
    """parity compare must PASS `got` (root_prefix None) or FAIL it with a root line starting
    with root_prefix; prints its table and returns the root line."""
    code, out, root = parity_compare(binary, ref, got)
    print(out, end="")
    if root_prefix is None:
        check(code == 0, f"parity compare fails {got} (table above)")
    else:
        check(code == 1 and root.startswith(root_prefix), f"parity compare: exit {code}, {root!r}, expected exit 1 "
                                                          f"and a root line starting {root_prefix!r}")
    return root


def worst_over_bound(binary, ref, got, report):
    """parity compare's verdict (exit, root) and its worst row: (error / bound, row name)."""
    r = subprocess.run([binary, "compare", ref, got, "--report", report], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    print(r.stdout, end="")
    root = next((line for line in r.stdout.splitlines() if line.startswith("root: ")), "")
    if r.returncode not in (0, 1):
        raise Failed(f"parity compare {got}: exit {r.returncode}")
    rows = json.load(open(report))["rows"]
    ratio = lambda row: row["norm_rel"] / row["tol"] if row["tol"] > 0 else 0.0  # noqa: E731
    w = max(rows, key=ratio)
    return r.returncode, root, ratio(w), f"{w['quantity']} {w['subject']} {w['norm_rel']:.3g} / {w['tol']:.3g}"


def smoke_refuses(ref, got, why):
    """`python3 -m parity_torch.compare --smoke REF GOT` must refuse (exit 2, saying `why`): what the
    smoke check cannot judge it must not pass or fail."""
    r = subprocess.run([sys.executable, "-m", "parity_torch.compare", "--smoke", ref, got], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    check(r.returncode == 2 and why in r.stdout, f"the smoke check on {got}: exit {r.returncode}, expected 2 "
                                                 f"saying {why!r}: {r.stdout[-300:]!r}")


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_ranks(rank_main, args, world, tmp, deadline_s):
    """Runs rank_main(rank, *args) in `world` processes (torch.multiprocessing, start method
    spawn); each must write tmp/done.RANK when its work is done. A rank that fails or a run past
    deadline_s ends them all and fails. A rank that finished its work but has not exited 10 s
    after the last one finished is ended and named: the numbers are complete, the hang is
    torch's exit."""
    import torch.multiprocessing as mp
    ctx = mp.start_processes(rank_main, args=args, nprocs=world, join=False, start_method="spawn")
    deadline, all_done = time.monotonic() + deadline_s, None
    try:
        while not ctx.join(timeout=1):
            if all(os.path.exists(os.path.join(tmp, f"done.{r}")) for r in range(world)):
                all_done = all_done or time.monotonic()
                if time.monotonic() > all_done + 10:
                    late = [r for r, p in enumerate(ctx.processes) if p.is_alive()]
                    print(f"note: ranks {late} finished their work but did not exit within 10 s; ended")
                    break
            if time.monotonic() > deadline:
                raise Failed(f"the {world} ranks did not finish in {deadline_s} s (exit codes so far: "
                             f"{[p.exitcode for p in ctx.processes]})")
    except (mp.ProcessRaisedException, mp.ProcessExitedException) as e:
        raise Failed(f"a rank failed: {e}")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()


def compared(ref, got, tol, title):
    """Compares dump `got` with `ref` (parity_torch.compare), prints the title and the table;
    returns (passed, rows, the printed text)."""
    from parity_torch import compare, report
    rows, info = compare(ref, got, tol)
    text = io.StringIO()
    ok = report(rows, info, text)
    print(title)
    print(text.getvalue(), end="")
    return ok, rows, info, text.getvalue()


def line_starting(text, prefix):
    """The first line of text that starts with prefix, or ''."""
    return next((l for l in text.splitlines() if l.startswith(prefix)), "")


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
