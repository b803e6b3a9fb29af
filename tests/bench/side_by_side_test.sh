#!/usr/bin/env bash
# ci/bench/side_by_side --tiny (W=2, the small MoE, 2 steps, one repetition): the run ends
# with exit 0, the table is printed with its header and the W=2 row, and the row's peer
# cell is either "skipped" (no python3-torch) or a time "min / median"; when skipped, the
# skip line names the fix. With --against (the same binary as both builds) the before / after table has the
# W=2 row with both cells 'min / median' and a signed change. Usage: side_by_side_test.sh PARITY_BINARY
set -u
script="$(dirname "$0")/../../ci/bench/side_by_side"
out=$("$script" --tiny --parity "$1" --against "$1" 2>&1)
rc=$?
printf '%s\n' "$out"
fail() { echo "bench side_by_side: FAIL: $*"; exit 1; }
[ "$rc" = 0 ] || fail "exit $rc"
printf '%s\n' "$out" | grep -q '^| work | W | parity layout |' || fail "no table header"
row=$(printf '%s\n' "$out" | grep '^| small MoE[^|]*| 2 | dps 2 |') || fail "no W=2 row"
# columns: 1 work, 2 W, 3 layout, 4 one-device, 5 parity, 6 unshared, 7 peer
peer=$(printf '%s\n' "$row" | awk -F' [|] ' '{print $7}')
parity=$(printf '%s\n' "$row" | awk -F' [|] ' '{print $5}')
[[ "$parity" =~ ^[0-9]+\.[0-9]+\ /\ [0-9]+\.[0-9]+$ ]] || fail "parity cell '$parity' is not 'min / median'"
ba=$(printf '%s\n' "$out" | grep -A5 '^before / after, alternating' | grep '^| small MoE[^|]*| 2 |') ||
  fail "no before / after row"
[[ "$ba" =~ ^\|\ small[^|]*\|\ 2\ \|\ [0-9.]+\ /\ [0-9.]+\ \|\ [0-9.]+\ /\ [0-9.]+\ \|\ [-+][0-9.]+%\ \| ]] ||
  fail "before / after row '$ba' is not 'min / median' twice and a change"
if [ "$peer" = skipped ]; then
  printf '%s\n' "$out" | grep -q '^peer: skipped (python3-torch not installed: ci/setup)' ||
    fail "peer skipped without saying why"
  echo "bench side_by_side: PASS (peer skipped: no python3-torch)"
else
  [[ "$peer" =~ ^[0-9]+\.[0-9]+\ /\ [0-9]+\.[0-9]+$ ]] || fail "peer cell '$peer' is neither skipped nor 'min / median'"
  echo "bench side_by_side: PASS (peer $peer s)"
fi
