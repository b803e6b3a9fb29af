#!/usr/bin/env bash
# Layouts on the nccl backend with W ranks sharing the visible GPUs. NCCL before 2.30
# refuses two ranks on one GPU ("Duplicate GPU detected"); 2.30 adds the experimental
# NCCL_MULTI_RANK_GPU_ENABLE. So: with enough GPUs for W ranks, or NCCL >= 2.30 (the switch
# set), every layout below must PASS; otherwise the test is skipped (77), naming why, and
# the same layouts run on the GPU through host-staged gloo in gpu.matrix.
# Usage: nccl_layouts.sh PARITY SCENARIO_DIR.
set -uo pipefail
parity=$1 scn=$2
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "${gpus:-0}" -ge 1 ] || { echo "skipped: no CUDA device"; exit 77; }
lib=$(ldd "$parity" | awk '/libnccl/ {print $3}')
ver=$(readlink -f "$lib" | sed -E 's/.*libnccl\.so\.([0-9.]+)$/\1/')
echo "nccl library: $lib (version $ver), GPUs: $gpus"
major=${ver%%.*} rest=${ver#*.} minor=${rest%%.*}
layouts=(tp2 fsdp2_tp2_ep2 fsdp4_tp2_ep2_etp2 w8_tp4_ep4)
multi=0
if [ "${major:-0}" -gt 2 ] || { [ "${major:-0}" -eq 2 ] && [ "${minor:-0}" -ge 30 ]; }; then
  export NCCL_MULTI_RANK_GPU_ENABLE=1
  multi=1
fi
bad=0 ran=0
for l in "${layouts[@]}"; do
  world=$(grep -o '"world": *[0-9]*' "$scn/$l.json" | grep -o '[0-9]*$')
  if [ $multi -eq 0 ] && [ "$world" -gt "$gpus" ]; then
    echo "skip $l: world $world > $gpus GPUs and NCCL $ver < 2.30 refuses two ranks on one GPU"
    continue
  fi
  out=$("$parity" run "$scn/$l.json" --backend nccl 2>&1)
  rc=$?
  echo "$out" | grep -E "^(verdict|time to verdict|parity run)" | sed "s/^/$l: /"
  ran=$((ran + 1))
  [ $rc -eq 0 ] || { echo "$out" | tail -20; echo "FAIL: $l on nccl exited $rc"; bad=1; }
done
[ $ran -eq 0 ] && { echo "skipped: no layout can run on nccl here (see above)"; exit 77; }
exit $bad
