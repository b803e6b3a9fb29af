#!/bin/sh
# Hostile inputs through the real command (issue 15; tests/cli/input_tests.cmake registers one
# ctest per case). Each case writes its file at run time, runs `parity run` on it and prints
# the output, then "exit=N", then "ended before B s" when it finished inside the generous
# bound B (or "took T s, over the B s bound"), and "error lines: K" (how many lines of the
# output carry the error: the launcher prints it once, no rank does).
# Usage: hostile_inputs.sh CASE PARITY_BINARY SCRATCH_DIR SCENARIO_DIR
set -u
case_name=$1 parity=$2 dir=$3/$1 scen=$4
rm -rf "$dir" && mkdir -p "$dir" || exit 1
f=$dir/input.json
bound=10

# n copies of string s, by doubling (no per-character shell loop).
repeat() {
  out=$1 n=$2 acc=""
  while [ "$n" -gt 0 ]; do
    [ $((n % 2)) -eq 1 ] && acc=$acc$out
    out=$out$out n=$((n / 2))
  done
  printf '%s' "$acc"
}

args=""
case $case_name in
  deep_nesting)        # 100 000 levels, 200 KB: once a stack overflow (SIGSEGV)
    { repeat '[' 100000; repeat ']' 100000; } > "$f" ;;
  long_name)           # a 1 MB name: once > 120 s of validation
    { printf '{"name": "'; repeat a 1000000; printf '"}'; } > "$f"; bound=5 ;;
  huge_file)           # 2 MB of spaces and a valid object: past the 1 MiB file limit
    { repeat ' ' 2000000; printf '{}'; } > "$f"; bound=5 ;;
  absurd_dim)          # dim 2^40: once passed validation, started the ranks, bad_alloc
    printf '{"model": {"dim": 1099511627776}, "layout": {"world": 2, "dp_shard": 2}}' > "$f" ;;
  dim_beyond_machine)  # dim 2^20: about 64 TiB per process, plausible but not on this machine
    printf '{"model": {"dim": 1048576, "heads": 2}, "layout": {"world": 2, "dp_shard": 2}}' > "$f" ;;
  microbatches_beyond_batch)  # 4 micro-batches of 3 sequences: one would be empty (batch 8 over dp 5 once
                       # was refused by every rank after the launch; uneven DP batches now run)
    printf '{"model": {"batch": 3, "microbatches": 4, "heads": 4}, "layout": {"world": 5, "dp_shard": 5}}' > "$f" ;;
  zero_steps)          # steps 0: once "PASS: 22 rows" with nothing compared
    printf '{"steps": 0, "layout": {"world": 2, "dp_shard": 2}}' > "$f" ;;
  escape_in_name)      # ESC [ 3 1 m in a name: once echoed raw, turning the terminal red
    printf '{"name": "a\\u001b[31mred", "layout": {"world": 2, "dp_shard": 2}}' > "$f" ;;
  escape_in_key)       # an OSC title sequence as an unknown key
    printf '{"\\u001b]0;owned\\u0007": 1}' > "$f" ;;
  resume_at_last_step) # a checkpoint saved after step 1 resumed by a run of 1 step: nothing to compare
    "$parity" run "$scen/fsdp2.json" --steps 1 --save-at 1 --ckpt "$dir/ckpt" > "$dir/save.log" 2>&1 ||
      { cat "$dir/save.log"; exit 1; }
    cp "$scen/fsdp2.json" "$f"; args="--steps 1 --resume $dir/ckpt" ;;
  resave_at_last_step) # the same with --save-at 1: a re-save under the layout, reported as such
    "$parity" run "$scen/fsdp2.json" --steps 1 --save-at 1 --ckpt "$dir/ckpt" > "$dir/save.log" 2>&1 ||
      { cat "$dir/save.log"; exit 1; }
    cp "$scen/fsdp2.json" "$f"; args="--steps 1 --resume $dir/ckpt --save-at 1 --ckpt $dir/again" ;;
  *) echo "unknown case $case_name"; exit 1 ;;
esac

t0=$(date +%s%N)
# shellcheck disable=SC2086  # args are words
"$parity" run "$f" $args > "$dir/out.log" 2>&1
rc=$?
t1=$(date +%s%N)
cat "$dir/out.log"
echo "exit=$rc"
ms=$(( (t1 - t0) / 1000000 ))
if [ "$ms" -lt $((bound * 1000)) ]; then echo "ended before $bound s"; else echo "took $ms ms, over the $bound s bound"; fi
echo "error lines: $(grep -c -E 'error|not run' "$dir/out.log")"
# The output carries no raw escape character (0x1b) nor bell (0x07).
if tr -d '\033\007' < "$dir/out.log" | cmp -s - "$dir/out.log"; then echo "no raw control characters"; fi
