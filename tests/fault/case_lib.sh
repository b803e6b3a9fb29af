# What the issue fault scripts share (tests/fault/issue26.sh, issue42.sh), sourced after they
# set `parity`, `scen`, `case` and `tag` (the issue's name in their lines): a private TMPDIR
# removed on exit, and the helpers below. Every command runs under `timeout`: a hang is a
# failure, never a hung test.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
export TMPDIR=$work
trap 'rm -rf "$work"' EXIT
fail() { echo "$tag $case: FAIL: $*"; echo "---- output"; tail -20 "$work/out.log" 2>/dev/null; exit 1; }
# run BOUND CMD...: runs CMD under `timeout BOUND`, output in out.log; sets rc and ms.
run() {
  local bound=$1; shift
  local t0; t0=$(date +%s%N)
  timeout -k 2 "$bound" "$@" >"$work/out.log" 2>&1 </dev/null
  rc=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && fail "still running after $bound s (it blocks): $*"
  return 0
}
want() {  # want CODE PATTERN: the last run's exit code and a line of its output
  [ "$rc" -eq "$1" ] || fail "exit $rc, want $1: $(head -3 "$work/out.log")"
  grep -qE -- "$2" "$work/out.log" || fail "no line matching '$2'"
}
no_launch() { grep -qE "time to verdict|parity: rank|parity launch" "$work/out.log" && fail "ranks were started"; return 0; }
save_ckpt() {  # a real checkpoint of fsdp2 after 1 step in $work/$1
  "$parity" run "$scen/fsdp2.json" --steps 1 --save-at 1 --ckpt "$work/$1" >"$work/save.log" 2>&1 ||
    { cat "$work/save.log"; fail "the checkpoint could not be saved"; }
}
