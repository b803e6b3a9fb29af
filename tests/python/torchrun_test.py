"""parity's ranks under a real torchrun (issue 30): each mode of torchrun starts the ranks of a
scenario with `--no_python parity run S --as-rank`; the verdict must pass (every torchrun exits
0), and the same run with a doubled router gradient (PARITY_FAULT=scale_grad:router:2) must fail
with the verdict's exit code 1 on a rank, so that the test can fail.

Usage: torchrun_test.py PARITY SCENARIO.json MODE   (run through run.sh: a python3 with torch)
MODE: default (static rendezvous: the agent serves its store on --master_port and the ranks
must use it, TORCHELASTIC_USE_AGENT_STORE=True), standalone, c10d, nodes_static, nodes_c10d
(two agents on this host, --nnodes 2 --node_rank 0/1, half the ranks each), keys (no torchrun:
this script serves torch's own TCPStore as an agent would, starts the ranks itself with
TORCHELASTIC_USE_AGENT_STORE=True, and reads back what they wrote: their keys under
/parity/RUN/attempt_N/, the agent's own key untouched).
Exit 0 PASS, 1 FAIL. Torch's own launcher output is printed only on failure.
"""
import json
import os
import socket
import subprocess
import sys
import time

RUN_TIMEOUT_S = 50  # per torchrun; the test's ctest TIMEOUT is above two runs of it


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(*args):
    # Python 3.11 needs the output redirected by the agent (torch 1.13, issue 30)
    return [sys.executable, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1", *args]


def commands(mode, world, parity, scenario):
    rank_cmd = ["--no_python", parity, "run", scenario, "--as-rank", "--steps", "3"]
    port = str(free_port())
    if mode == "default":
        return [torchrun("--nproc_per_node", str(world), "--master_port", port, *rank_cmd)]
    if mode == "standalone":
        return [torchrun("--standalone", "--nproc_per_node", str(world), *rank_cmd)]
    if mode == "c10d":
        return [torchrun("--nproc_per_node", str(world), "--rdzv_backend", "c10d", "--rdzv_endpoint",
                         "127.0.0.1:" + port, "--rdzv_id", "parity-c10d", *rank_cmd)]
    half = str(world // 2)
    if mode == "nodes_static":
        return [torchrun("--nnodes", "2", "--node_rank", str(n), "--nproc_per_node", half, "--master_addr",
                         "127.0.0.1", "--master_port", port, *rank_cmd) for n in (0, 1)]
    if mode == "nodes_c10d":
        return [torchrun("--nnodes", "2", "--nproc_per_node", half, "--rdzv_backend", "c10d", "--rdzv_endpoint",
                         "127.0.0.1:" + port, "--rdzv_id", "parity-nodes", *rank_cmd) for _ in (0, 1)]
    raise SystemExit(f"torchrun_test: unknown mode {mode}")


def run(cmds, env):
    procs = [subprocess.Popen(c, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for c in cmds]
    out, codes = [], []
    deadline = time.monotonic() + RUN_TIMEOUT_S
    for p in procs:
        try:
            text, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            text, _ = p.communicate()
            text += "\n[torchrun_test: killed after the time limit]"
        out.append(text)
        codes.append(p.returncode)
    return codes, out


def keys_case(parity, scenario, world, env):
    from datetime import timedelta

    import torch.distributed as dist
    store = dist.TCPStore("127.0.0.1", 0, 1, True, timedelta(seconds=30), wait_for_workers=False)
    store.set("MASTER_ADDR", "agent's own")
    env.update(TORCHELASTIC_USE_AGENT_STORE="True", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store.port),
               WORLD_SIZE=str(world), TORCHELASTIC_RUN_ID="run7", TORCHELASTIC_RESTART_COUNT="2")
    cmds = [[parity, "run", scenario, "--as-rank", "--steps", "2"] for _ in range(world)]
    procs = [subprocess.Popen(c, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r, c in enumerate(cmds)]
    failures = []
    for r, p in enumerate(procs):
        out, _ = p.communicate(timeout=RUN_TIMEOUT_S)
        if p.returncode != 0:
            failures.append(f"rank {r} exited {p.returncode}:\n{out}")
    store.set_timeout(timedelta(seconds=2))
    prefix = "/parity/run7/attempt_2/"  # torch's client adds the leading '/' itself
    checks = {prefix[1:] + "joined": str(world).encode(), "MASTER_ADDR": b"agent's own"}
    for key, want in checks.items():
        try:
            got = store.get(key)
        except RuntimeError as e:
            got = f"missing ({e})"
        if got != want:
            failures.append(f"key {key!r}: {got!r}, expected {want!r}")
    try:
        store.get(prefix[1:] + "hosts.blob.0")
    except RuntimeError as e:
        failures.append(f"rank 0's host blob is not under {prefix}: {e}")
    return failures


def main():
    parity, scenario, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(scenario) as f:
        world = json.load(f)["layout"]["world"]
    env = dict(os.environ)
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PARITY_STORE", "PARITY_STORE_DIR",
                "PARITY_FAULT", "PARITY_TORCH_STORE"):
        env.pop(var, None)
    env["PARITY_COMM_TIMEOUT_MS"] = "30000"
    if mode == "keys":
        failures = keys_case(parity, scenario, world, env)
        print(f"torchrun keys {os.path.basename(scenario)}: " + ("FAIL\n" + "\n".join(failures) if failures else
              "PASS (the ranks met in torch's own TCPStore, under their prefix)"))
        return 1 if failures else 0
    failures = []

    t0 = time.monotonic()
    codes, out = run(commands(mode, world, parity, scenario), env)
    good_s = time.monotonic() - t0
    if codes != [0] * len(codes):
        failures.append(f"the faithful run: torchrun exited {codes}, expected 0 each")
        failures += out

    env["PARITY_FAULT"] = "scale_grad:router:2"
    codes, out = run(commands(mode, world, parity, scenario), env)
    text = "\n".join(out)
    if 0 in codes or "exitcode  : 1" not in text or "exitcode  : 3" in text:
        failures.append(f"the doubled router gradient: torchrun exited {codes}; expected a failure with a rank's "
                        "exit code 1 (the verdict), none with 3 (infrastructure)")
        failures.append(text)

    name = f"torchrun {mode} {os.path.basename(scenario)}"
    if failures:
        print(f"{name}: FAIL")
        print("\n".join(failures))
        return 1
    print(f"{name}: PASS (verdict passed in {good_s:.1f} s; the doubled router gradient failed with exit 1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
