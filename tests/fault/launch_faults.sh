#!/usr/bin/env bash
# Faults injected from outside into real runs (issue 15), through the real parity binary:
#   launch_faults.sh PARITY SCENARIO_DIR CASE [TRIES]
# CASE: kill9_gloo | stop_gloo | kill9_mpi | deadline | launcher_kill9
# Prints "fault CASE: PASS ..." (and exits 0) only when every try ended the way it must: the
# exit code of core/exit_codes.h, the message naming the rank, and an end time bound that
# holds on a loaded machine ("ended well before the timeout", not a tight figure).
set -u
parity=$1 scen=$2 case=$3 tries=${4:-1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
work=$(mktemp -d)
export TMPDIR=$work  # this test's store directories only
trap 'pkill -9 -f -- "$work" 2>/dev/null; rm -rf "$work"' EXIT
now() { date +%s.%N; }
fail() { echo "fault $case: FAIL: $*"; echo "---- output"; tail -30 "$work/out.log"; exit 1; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
# the pids of the rank processes of the run whose request file lives in $work: exec'd ones
# (mpirun's, PARITY_RANK_START=exec) by their command line, fork-started ones (gloo's, by
# default) by their name parity-rank<R> and the TMPDIR they inherited from the launcher
ranks() {
  { pgrep -f -- " rank $work/parity-run-[0-9-]+\.json$"
    for p in $(pgrep -- '^parity-rank[0-9]+$'); do
      tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "TMPDIR=$work" && echo "$p"
    done; } | sort -n
}
# a rank's number: its RANK (exec'd) or its name (fork-started)
rank_of() {
  local r
  r=$(tr '\0' '\n' <"/proc/$1/environ" | sed -n 's/^\(RANK\|OMPI_COMM_WORLD_RANK\)=//p' | head -1)
  [ -n "$r" ] || r=$(sed -n 's/^parity-rank//p' "/proc/$1/comm")
  echo "$r"
}
wait_ranks() {  # wait until N ranks run and the run is past its start-up (up to 30 s)
  for _ in $(seq 300); do [ "$(ranks | wc -l)" -ge "$1" ] && { sleep 0.6; return 0; }; sleep 0.1; done
  fail "the ranks did not start"
}
cp "$scen/fsdp8.json" "$work/s.json"
worst=0
for try in $(seq "$tries"); do
  case $case in
    kill9_gloo | stop_gloo | kill9_mpi)
      backend=gloo timeout=60 sig=KILL
      [ "$case" = kill9_mpi ] && backend=mpi
      [ "$case" = stop_gloo ] && timeout=3 sig=STOP
      "$parity" run "$work/s.json" --steps 100000 --backend $backend --timeout $timeout >"$work/out.log" 2>&1 &
      launcher=$!
      wait_ranks 8
      victim=$(ranks | sed -n 4p)
      rank=$(rank_of "$victim")
      t0=$(now)
      kill -$sig "$victim"
      # bound: well before the 60 s collective timeout (kill); the 3 s timeout plus far less
      # than the old 17 s of waiting (stop)
      bound=20; [ "$case" = stop_gloo ] && bound=12
      for _ in $(seq $((bound * 10))); do kill -0 $launcher 2>/dev/null || break; sleep 0.1; done
      if kill -0 $launcher 2>/dev/null; then kill -9 $launcher; fail "try $try: still running ${bound} s after SIG$sig of rank $rank"; fi
      wait $launcher; rc=$?
      t=$(elapsed "$t0" "$(now)")
      [ $rc -eq 3 ] || fail "try $try: exit $rc, want 3 (infrastructure failed)"
      case $case in
        kill9_gloo) grep -q "rank $rank (pid $victim) died: killed by signal 9" "$work/out.log" || fail "try $try: rank $rank's death not named" ;;
        kill9_mpi) grep -q "rank $rank killed by signal 9" "$work/out.log" || fail "try $try: mpirun's dead rank $rank not named" ;;
        stop_gloo)
          grep -q "rank $rank (pid $victim on [^ ]* is stopped: SIGSTOP or a debugger; it did not answer [a-z_]* #[0-9]*)" "$work/out.log" ||
            fail "try $try: no survivor named the stopped rank $rank and the collective"
          grep -q "rank $rank (pid $victim): did not answer (stopped or hung: T (stopped))" "$work/out.log" ||
            fail "try $try: the launcher's summary does not name the stopped rank $rank" ;;
      esac
      [ "$(ranks | wc -l)" -eq 0 ] || fail "try $try: rank processes left behind"
      echo "try $try: SIG$sig of rank $rank, the run ended ${t} s later, exit $rc"
      worst=$(awk -v a="$worst" -v b="$t" 'BEGIN { print (b > a ? b : a) }')
      ;;
    deadline)
      t0=$(now)
      "$parity" launch -n 2 --timeout 3 --deadline 2 -- sleep 1000 >"$work/out.log" 2>&1 &
      launcher=$!
      for _ in $(seq 150); do kill -0 $launcher 2>/dev/null || break; sleep 0.1; done
      kill -0 $launcher 2>/dev/null && { kill -9 $launcher; fail "launch --deadline 2 still running after 15 s"; }
      wait $launcher; rc=$?
      t=$(elapsed "$t0" "$(now)")
      [ $rc -eq 3 ] || fail "exit $rc, want 3"
      grep -q "the deadline of 2 s (--deadline) passed; stopping every rank" "$work/out.log" || fail "no deadline message"
      pgrep -f "^sleep 1000$" -P $launcher >/dev/null && fail "a rank left behind"
      echo "try $try: launch -- sleep 1000 with --deadline 2 ended after ${t} s, exit $rc"
      worst=$t
      ;;
    launcher_kill9)
      "$parity" run "$work/s.json" --steps 100000 >"$work/out.log" 2>&1 &
      launcher=$!
      wait_ranks 8
      [ "$(ls -d "$work"/parity-rdzv-* | wc -l)" -eq 1 ] || fail "no store directory while the run is on"
      kill -9 $launcher
      for _ in $(seq 100); do [ "$(ranks | wc -l)" -eq 0 ] && break; sleep 0.1; done
      [ "$(ranks | wc -l)" -eq 0 ] || fail "ranks outlived their launcher by 10 s"
      wait $launcher 2>/dev/null
      "$parity" launch -n 1 -- true >>"$work/out.log" 2>&1 || fail "the next launch failed"
      left=$(ls -d "$work"/parity-rdzv-* 2>/dev/null | wc -l)
      [ "$left" -eq 0 ] || fail "$left store directories left after the next launch"
      echo "try $try: kill -9 of the launcher: ranks gone, its store directory removed by the next launch"
      ;;
    *) echo "unknown case $case"; exit 2 ;;
  esac
done
echo "fault $case: PASS: $tries tries, worst ${worst} s"
