#!/usr/bin/env bash
# A GPU run is bitwise reproducible: `parity dump SCENARIO --device cuda` twice, every file
# (parameters, gradients, losses, routing of every step) compared byte for byte.
# Usage: bitwise_rerun.sh PARITY SCENARIO. Exit 77 (skipped) without a CUDA device.
set -uo pipefail
parity=$1 scenario=$2
dir=$(mktemp -d) && trap 'rm -rf "$dir"' EXIT
for run in a b; do
  "$parity" dump "$scenario" "$dir/$run" --device cuda --steps 3 > "$dir/$run.log" 2>&1
  rc=$?
  [ $rc -eq 77 ] && { cat "$dir/$run.log"; exit 77; }
  [ $rc -ne 0 ] && { cat "$dir/$run.log"; echo "FAIL: dump $run exited $rc"; exit 1; }
done
files=$(cd "$dir/a" && ls *.safetensors | wc -l)
[ "$files" -ge 4 ] || { echo "FAIL: only $files files dumped"; exit 1; }
bad=0
for f in "$dir"/a/*.safetensors; do
  cmp -s "$f" "$dir/b/$(basename "$f")" || { echo "FAIL: $(basename "$f") differs between two GPU runs"; bad=1; }
done
[ $bad -eq 0 ] && echo "PASS: $files files bitwise identical across two GPU runs"
exit $bad
