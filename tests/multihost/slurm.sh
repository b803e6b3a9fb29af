#!/usr/bin/env bash
# A real one-node Slurm (Debian's slurm-wlm) started for one test and removed after it: its own
# slurmctld and slurmd on free loopback ports, a config, state and logs in a private directory
# (SLURM_CONF), auth/none (no munge). Nothing of the host's own Slurm is read or touched.
# Usage: slurm.sh PARITY SCENARIO CASE
#   recipe  docs/multihost.md's one-launcher-per-node line, on a job of one node
#           (`parity run S --nnodes $SLURM_NNODES --node-rank $SLURM_NODEID --master ...`)
#   srun    srun -n W parity run S --as-rank (each task a rank, the TCP store on the first node)
# Each case runs the verdict (exit 0 expected) and again with a doubled router gradient
# (PARITY_FAULT=scale_grad:router:2: exit 1 expected, so that the test can fail).
# Not root, or no slurmctld / slurmd / srun: SKIPPED (77), never passed.
set -u
parity="$1" scen="$2" case="$3"
say() { echo "slurm $case: $*"; }
if [ "$(id -u)" != 0 ]; then say "SKIPPED: needs root (slurmd runs the tasks as any user)"; exit 77; fi
for b in slurmctld slurmd srun sinfo scontrol; do
  command -v "$b" >/dev/null || { say "SKIPPED: no $b (apt-get install slurm-wlm)"; exit 77; }
done
dir="$(mktemp -d /tmp/parity-slurm-XXXXXX)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null
  done
  rm -rf "$dir"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
host="$(hostname -s)"
world="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["layout"]["world"])' "$scen")"
mkdir -p "$dir/state" "$dir/spool"
cat > "$dir/slurm.conf" <<EOF
ClusterName=parity$$
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=$host NodeAddr=127.0.0.1 CPUs=$((world > 16 ? world : 16)) State=UNKNOWN
PartitionName=parity Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
export SLURM_CONF="$dir/slurm.conf"
unset RANK WORLD_SIZE MASTER_ADDR MASTER_PORT PARITY_STORE PARITY_STORE_DIR PARITY_FAULT
unset $(env | grep -o '^SLURM_[A-Z_]*' | grep -v '^SLURM_CONF$')
slurmctld -D -i >"$dir/slurmctld.out" 2>&1 & pids+=($!)
slurmd -D -N "$host" >"$dir/slurmd.out" 2>&1 & pids+=($!)
for _ in $(seq 150); do
  [ "$(sinfo -h -o %T 2>/dev/null)" = idle ] && break
  sleep 0.2
done
if [ "$(sinfo -h -o %T 2>/dev/null)" != idle ]; then
  say "FAIL: the private Slurm did not come up (node state '$(sinfo -h -o %T 2>&1)')"
  tail -n 20 "$dir"/slurmctld.log "$dir"/slurmd.log "$dir"/*.out 2>/dev/null
  exit 1
fi

run_case() {  # prints srun's output, returns its exit code
  case "$case" in
    recipe)
      srun -N 1 --ntasks-per-node=1 --time=2 sh -c "$parity run $scen --steps 3 --nnodes \$SLURM_NNODES \
        --node-rank \$SLURM_NODEID --master \$(scontrol show hostnames \$SLURM_NODELIST | head -1):29500" ;;
    srun) srun -n "$world" --time=2 "$parity" run "$scen" --as-rank --steps 3 ;;
    *) say "unknown case"; return 2 ;;
  esac
}
t0=$(date +%s.%N)
out="$(run_case 2>&1)"; rc=$?
t1=$(date +%s.%N)
if [ $rc != 0 ]; then say "FAIL: the faithful run exited $rc, expected 0"; echo "$out"; exit 1; fi
out="$(PARITY_FAULT=scale_grad:router:2 run_case 2>&1)"; frc=$?
if [ $frc != 1 ]; then say "FAIL: the doubled router gradient exited $frc, expected 1 (the verdict)"; echo "$out"; exit 1; fi
say "PASS (the verdict passed in $(echo "$t1 - $t0" | bc) s under srun; the doubled router gradient exited 1)"
