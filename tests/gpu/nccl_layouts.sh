#!/usr/bin/env bash
# Every shipped layout on the nccl backend, W ranks sharing the visible GPUs (docs/gpu.md).
# NCCL before 2.30 refuses two ranks on one GPU ("Duplicate GPU detected"); 2.30 adds the
# experimental NCCL_MULTI_RANK_GPU_ENABLE, which this script sets, with few channels per rank
# (NCCL_MAX_CTAS, default 2 here) so that W ranks' kernels fit on one GPU together. So: with
# NCCL >= 2.30 every scenario runs; with an older NCCL only those whose world fits one rank
# per GPU run, and with none left the test is skipped (77), naming why. Never a pass for a
# layout that did not run.
# Usage: nccl_layouts.sh PARITY SCENARIO_DIR [JOBS]
# LAYOUTS (environment): the scenario files to run instead of SCENARIO_DIR's (ci/gpu_suite).
set -uo pipefail
parity=$1 scn=$2 jobs=${3:-4}
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "${gpus:-0}" -ge 1 ] || { echo "skipped: no CUDA device"; exit 77; }
lib=$(ldd "$parity" | awk '/libnccl/ {print $3}')
ver=$(readlink -f "$lib" | sed -E 's/.*libnccl\.so\.([0-9.]+)$/\1/')
echo "nccl library: $lib (version $ver), GPUs: $gpus"
major=${ver%%.*} rest=${ver#*.} minor=${rest%%.*}
files=()
if [ "${major:-0}" -gt 2 ] || { [ "${major:-0}" -eq 2 ] && [ "${minor:-0}" -ge 30 ]; }; then
  export NCCL_MULTI_RANK_GPU_ENABLE=1 NCCL_MAX_CTAS=${NCCL_MAX_CTAS:-2} NCCL_MIN_CTAS=${NCCL_MIN_CTAS:-1}
  export NCCL_NET_GDR_LEVEL=${NCCL_NET_GDR_LEVEL:-LOC}
  # shellcheck disable=SC2206
  files=(${LAYOUTS:-"$scn"/*.json})
else
  # shellcheck disable=SC2206
  for f in ${LAYOUTS:-"$scn"/*.json}; do
    world=$(grep -o '"world": *[0-9]*' "$f" | grep -o '[0-9]*$' | sort -n | tail -1)
    if [ "$world" -gt "$gpus" ]; then
      echo "skip $(basename "$f" .json): world $world > $gpus GPUs and NCCL $ver < 2.30 refuses two ranks on one GPU"
    else
      files+=("$f")
    fi
  done
fi
[ ${#files[@]} -gt 0 ] || { echo "skipped: no layout can run on nccl here (see above)"; exit 77; }
echo "running ${#files[@]} scenarios on nccl, $jobs at a time"
exec "$parity" matrix --backend nccl --device cuda -j "$jobs" "${files[@]}"
