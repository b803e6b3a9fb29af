#!/usr/bin/env bash
# `parity bench comm` at W=2 on the default backend (gloo): exit 0, the two ceiling lines
# (memcpy, and the host's allreduce ceiling for 2 ranks with a positive GB/s), one row per
# size with #wrong 0. Usage: bench_comm_test.sh PARITY_BINARY
set -u
out=$("$1" bench comm -n 2 -b 1024 -e 1048576 -f 32 --ops allreduce allgather 2>&1)
rc=$?
printf '%s\n' "$out"
fail() { echo "bench comm: FAIL: $*"; exit 1; }
[ "$rc" = 0 ] || fail "exit $rc"
printf '%s\n' "$out" | grep -Eq '^# backend gloo \([a-z]+\), 2 ranks; memcpy busbw ceiling [0-9.]+ GB/s' || fail "no memcpy ceiling line"
ceil=$(printf '%s\n' "$out" | sed -n 's/^# allreduce ceiling of this host for 2 ranks: busbw \([0-9.]*\) GB\/s.*/\1/p')
[ -n "$ceil" ] || fail "no allreduce ceiling line"
awk -v c="$ceil" 'BEGIN { exit !(c > 0) }' || fail "allreduce ceiling $ceil is not positive"
rows=$(printf '%s\n' "$out" | grep -Ec '^(allreduce|allgather) +[0-9]+ ')
[ "$rows" = 6 ] || fail "$rows rows, expected 6 (3 sizes x 2 collectives)"
bad=$(printf '%s\n' "$out" | grep -E '^(allreduce|allgather) ' | awk '$NF != 0' | head -1)
[ -z "$bad" ] || fail "a row has wrong elements: $bad"
echo "bench comm: PASS (allreduce ceiling $ceil GB/s)"
