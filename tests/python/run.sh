#!/usr/bin/env bash
# Runs one Python test of parity_torch (python/, issue 29) with an interpreter that has torch:
# /usr/bin/python3 first (Debian's python3-torch, ci/setup), then the python3 on PATH, or only
# $PARITY_PYTHON when it is set. Without one the test is SKIPPED, visibly: exit 77, ctest's
# SKIP_RETURN_CODE (never a pass).
# Usage: run.sh SCRIPT.py ARGS...   (PYTHONPATH gets the source tree's python/)
set -u
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
py=""
if [ -n "${PARITY_PYTHON:-}" ]; then cands=("$PARITY_PYTHON"); else cands=(/usr/bin/python3 "$(command -v python3)"); fi
for cand in "${cands[@]}"; do
  if [ -n "$cand" ] && [ -x "$cand" ] && "$cand" -c "import torch" >/dev/null 2>&1; then py="$cand"; break; fi
done
if [ -z "$py" ]; then
  echo "python test $(basename "$1"): SKIPPED: no python3 with torch (tried: ${cands[*]};" \
       "install python3-torch, e.g. ci/setup, or set PARITY_PYTHON)"
  exit 77
fi
export PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
script="$1"
shift
case "$script" in /*) ;; *) script="$here/$script" ;; esac
exec "$py" "$script" "$@"
