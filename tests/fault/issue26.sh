#!/usr/bin/env bash
# Issue 26 through the real parity binary, one ctest per case (tests/fault/issue26.cmake):
#   issue26.sh PARITY SCENARIO_DIR CASE
# Classes: nothing lost (out_*), no read of a file that is not regular (nonreg_*), numbers on
# the command line (num_*), the signals that end a launch like SIGTERM (sig_*), checkpoint
# identity (ident_*), a baseline or layout that goes non-finite (diverge_*), exhausted
# resources (res_*), stale /dev/shm names (stale_shm) and blame of a stopped rank. Every
# command that could hang on a FIFO runs under `timeout` (a hang is a failure, never a hung
# test). Prints "issue26 CASE: PASS" (exit 0) only when every check held.
set -u
parity=$1 scen=$2 case=$3
tag=issue26
source "$(dirname "$0")/case_lib.sh"
# SIGSTOP of $victim (rank $vrank) under $launcher: the run must end within 60 s, exit 3, its
# first launcher line matching $1 and its summary naming the stopped rank; sets rc and ms.
stop_and_blame() {
  t0=$(date +%s%N)
  kill -STOP "$victim"
  for _ in $(seq 600); do kill -0 $launcher 2>/dev/null || break; sleep 0.1; done
  kill -0 $launcher 2>/dev/null && { kill -9 $launcher; kill -9 "$victim"; fail "still running 60 s after SIGSTOP"; }
  wait $launcher; rc=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  first=$(grep -m1 '^parity launch:' "$work/out.log")
  echo "$first" | grep -q "$1" || fail "the first line blames another rank: $first"
  want 3 "the rank the others waited on: rank $vrank \(pid $victim\), stopped"
  [ $ms -lt 30000 ] || fail "took $ms ms with --timeout 3"
}
wait_ranks() {  # wait_ranks N TRIES: the pids of this test's fork-started ranks, once N run (0.1 s a try)
  local ranks=""
  for _ in $(seq "$2"); do
    ranks=$(for p in $(pgrep -- '^parity-rank[0-9]+$'); do
              tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "TMPDIR=$work" && echo "$p"; done)
    [ "$(echo "$ranks" | grep -c .)" -ge "$1" ] && break
    sleep 0.1
  done
  echo "$ranks"
  [ "$(echo "$ranks" | grep -c .)" -ge "$1" ]
}
private_shm() { [ "$(id -u)" -eq 0 ] && unshare -m true 2>/dev/null; }  # root: a /dev/shm of the test's own
d=$work/d
case $case in
  # ---- nothing lost -------------------------------------------------------------------------
  out_ckpt_foreign_dir)  # once: the directory and its file deleted, exit 0
    mkdir -p "$d" && echo precious >"$d/notes.txt"
    run 60 "$parity" run "$scen/fsdp2.json" --steps 1 --save-at 1 --ckpt "$d"
    want 2 "--ckpt: .*/d: is not a parity checkpoint .*parity never overwrites what it did not create"
    no_launch
    [ "$(cat "$d/notes.txt" 2>/dev/null)" = precious ] || fail "the directory's file was lost"
    # the same directory once parity's: saved, then saved over again (its own output)
    run 60 "$parity" run "$scen/fsdp2.json" --steps 1 --save-at 1 --ckpt "$work/c"
    want 0 "saved"
    run 60 "$parity" run "$scen/fsdp2.json" --steps 1 --save-at 1 --ckpt "$work/c"
    want 0 "saved"
    mkdir "$work/empty"
    run 60 "$parity" run "$scen/fsdp2.json" --steps 1 --save-at 1 --ckpt "$work/empty"
    want 0 "saved" ;;
  out_ckpt_regular_file)  # once: the file replaced by a checkpoint
    echo precious >"$d"
    run 60 "$parity" run "$scen/fsdp2.json" --steps 1 --save-at 1 --ckpt "$d"
    want 2 "--ckpt: .*/d: is a regular file where a directory is expected"
    [ "$(cat "$d")" = precious ] || fail "the file was lost" ;;
  out_report_foreign)  # --report over a file that is not a report; --junit/--summary likewise
    echo precious >"$work/r.json"
    run 60 "$parity" run "$scen/fsdp2.json" --steps 1 --report "$work/r.json"
    want 2 "--report: .*/r\.json: exists and is not a file parity wrote"
    no_launch
    [ "$(cat "$work/r.json")" = precious ] || fail "the file was overwritten"
    run 60 "$parity" run "$scen/fsdp2.json" --steps 1 --report "$work/own.json"
    want 0 "verdict: PASS"
    run 60 "$parity" run "$scen/fsdp2.json" --steps 1 --report "$work/own.json"  # its own: replaced
    want 0 "verdict: PASS"
    echo precious >"$work/s.md"
    run 60 "$parity" matrix "$scen/fsdp2.json" --summary "$work/s.md"
    want 2 "--summary: .*/s\.md: exists and is not a file parity wrote"
    [ "$(cat "$work/s.md")" = precious ] || fail "the summary's file was overwritten" ;;
  out_dir_foreign)  # matrix --out / --plots into a directory that is not parity's
    mkdir -p "$d" && echo precious >"$d/fsdp2.log"
    run 60 "$parity" matrix "$scen/fsdp2.json" --out "$d"
    want 2 "--out: .*/d: is a non-empty directory that parity did not write"
    grep -q "matrix verdict" "$work/out.log" && fail "the matrix ran"
    [ "$(cat "$d/fsdp2.log")" = precious ] || fail "the log's file was overwritten"
    run 60 "$parity" matrix "$scen/fsdp2.json" --out "$work/o"
    want 0 "matrix verdict: PASS"
    run 60 "$parity" matrix "$scen/fsdp2.json" --out "$work/o"  # its own output directory
    want 0 "matrix verdict: PASS" ;;
  out_missing_parent)  # --junit in a directory that does not exist: nothing created
    run 60 "$parity" matrix "$scen/fsdp2.json" --junit "$work/nonexistent/x.xml"
    want 2 "--junit: .*/nonexistent/x\.xml: its directory .*/nonexistent does not exist"
    [ -e "$work/nonexistent" ] && fail "the missing directory was created"
    run 60 "$parity" run "$scen/fsdp2.json" --steps 1 --report "$work/nonexistent/r.json"
    want 2 "--report: .*its directory .*does not exist"
    [ -e "$work/nonexistent" ] && fail "the missing directory was created" ;;
  # ---- files that are not regular ------------------------------------------------------------
  nonreg_scenario)  # a FIFO, /dev/zero, a directory as the scenario: once a hang for ever
    mkfifo "$work/s.json"
    for sub in run explain dump; do
      extra=""; [ $sub = dump ] && extra="$work/dumpdir"
      run 20 "$parity" $sub "$work/s.json" $extra
      want 2 "s\.json: scenario file is a FIFO \(named pipe\), not a regular file"
      echo "$sub on a FIFO: exit $rc after $ms ms"
    done
    for sub in matrix cover; do  # once: "no such scenario file or directory"
      run 20 "$parity" $sub "$work/s.json"
      want 2 "s\.json: scenario file is a FIFO \(named pipe\), not a regular file"
      grep -q "no such scenario" "$work/out.log" && fail "$sub calls a FIFO 'no such scenario file'"
    done
    ln -s /dev/zero "$work/z.json"
    run 20 "$parity" run "$work/z.json"
    want 2 "z\.json: scenario file is a character device, not a regular file"
    echo "run on a link to /dev/zero: exit $rc after $ms ms" ;;
  nonreg_golden)  # a FIFO as the golden file
    mkdir "$work/g" && mkfifo "$work/g/tiny.json"
    run 20 "$parity" golden check "$scen/tiny.json" --golden-dir "$work/g"
    want 2 "tiny\.json: golden file is a FIFO \(named pipe\), not a regular file"
    echo "golden check on a FIFO: exit $rc after $ms ms" ;;
  nonreg_ckpt)  # FIFOs, a directory and /dev/zero inside a checkpoint: damaged, exit 3, never a hang
    save_ckpt good
    for what in meta_fifo rank_fifo rank_zero rank_dir; do
      rm -rf "$d" && cp -r "$work/good" "$d"
      case $what in
        meta_fifo) rm "$d/metadata.json" && mkfifo "$d/metadata.json"; pat="metadata\.json: checkpoint metadata is a FIFO" ;;
        rank_fifo) rm "$d/rank1.safetensors" && mkfifo "$d/rank1.safetensors"; pat="rank1\.safetensors: checkpoint rank file is a FIFO" ;;
        rank_zero) rm "$d/rank1.safetensors" && ln -s /dev/zero "$d/rank1.safetensors"; pat="rank1\.safetensors: checkpoint rank file is a character device" ;;
        rank_dir) rm "$d/rank1.safetensors" && mkdir "$d/rank1.safetensors"; pat="rank1\.safetensors: checkpoint rank file is a directory" ;;
      esac
      for cmd in "ckpt inspect $d" "ckpt export $d $work/x.safetensors" "ckpt diff $d $work/good" \
                 "run $scen/fsdp2.json --steps 2 --resume $d"; do
        # shellcheck disable=SC2086  # cmd is words
        run 30 "$parity" $cmd
        want 3 "$pat"
        echo "$what, $cmd: exit $rc after $ms ms"
      done
    done ;;
  # ---- numbers on the command line -----------------------------------------------------------
  num_steps)
    run 20 "$parity" run "$scen/tiny.json" --steps 99999999999999999999
    want 2 "--steps: is beyond the 64-bit range \[-2\^63, 2\^63 - 1\], got '99999999999999999999'"
    run 20 "$parity" run "$scen/tiny.json" --steps -1
    want 2 "--steps: must be an integer in \[1, 1000000\], got '-1'"
    [ "$(awk '{ if (length($0) > m) m = length($0) } END { print m + 0 }' "$work/out.log")" -lt 200 ] ||
      fail "a line of more than 200 characters (a 309-digit bound?)"
    run 20 "$parity" launch -n 99999999999999999999 -- true
    want 2 "--nproc: is beyond the 64-bit range"
    run 20 "$parity" run "$scen/tiny.json" --timeout 1e999
    want 2 "--timeout: must be a finite number, got '1e999'" ;;
  num_lr)
    for v in nan inf -inf; do
      run 20 "$parity" run "$scen/tiny.json" --lr "$v"
      want 2 "--lr: must be a finite number, got '$v'"
    done
    run 20 "$parity" run "$scen/tiny.json" --lr 0
    want 2 "--lr: must be a number in \(0, 1e\+300\], got '0'" ;;
  num_empty_name)  # once accepted; golden update wrote golden/.json
    printf '{"name": "", "steps": 2}' >"$work/s.json"
    run 20 "$parity" run "$work/s.json"
    want 2 "s\.json: \\\$\.name: must not be empty"
    mkdir "$work/g"
    run 20 "$parity" golden update "$work/s.json" --golden-dir "$work/g"
    want 2 "\\\$\.name: must not be empty"
    [ -e "$work/g/.json" ] && fail "golden update wrote .json"
    [ -z "$(ls -A "$work/g")" ] || fail "golden update wrote $(ls -A "$work/g")" ;;
  # ---- signals: like SIGTERM ------------------------------------------------------------------
  sig_HUP | sig_QUIT)  # once: the launcher killed at once, no summary, ranks left to PDEATHSIG
    sig=${case#sig_}
    "$parity" run "$scen/fsdp2.json" --steps 1000000 --timeout 60 >"$work/out.log" 2>&1 &
    launcher=$!
    ranks=$(wait_ranks 2 300) || { kill -9 $launcher; fail "the ranks did not start"; }
    sleep 0.5
    t0=$(date +%s%N)
    kill -s "$sig" $launcher
    for _ in $(seq 150); do kill -0 $launcher 2>/dev/null || break; sleep 0.1; done
    kill -0 $launcher 2>/dev/null && { kill -9 $launcher; fail "still running 15 s after SIG$sig"; }
    wait $launcher; rc=$?
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    want $((128 + $(kill -l "$sig"))) "parity launch: received [A-Za-z]+, stopping every rank"
    grep -q "parity launch: failed; rank verdicts:" "$work/out.log" || fail "no summary"
    grep -q "stopped by the launcher" "$work/out.log" || fail "the summary names no stopped rank"
    for p in $ranks; do
      kill -0 "$p" 2>/dev/null && fail "rank pid $p left running"
      ls /dev/shm/parity-"$p"-* >/dev/null 2>&1 && fail "rank pid $p's shared-memory segment left in /dev/shm"
    done
    echo "SIG$sig of the launcher: exit $rc after $ms ms, ranks stopped, summary printed" ;;
  sig_PIPE)  # `| head -1`: once killed by SIGPIPE at the next line, without a word
    ( "$parity" launch -n 2 -- sh -c 'while :; do echo tick; sleep 0.05; done' 2>"$work/out.log"
      echo "exit=$?" >>"$work/out.log" ) | head -1 >/dev/null
    rc=$(sed -n 's/^exit=//p' "$work/out.log")
    want 141 "parity launch: received Broken pipe, stopping every rank"
    grep -q "parity launch: failed; rank verdicts:" "$work/out.log" || fail "no summary"
    sleep 0.2
    pgrep -f "while :; do echo tick" >/dev/null && fail "a rank left running"
    echo "SIGPIPE (| head -1): exit $rc, ranks stopped, summary printed" ;;
  # ---- checkpoint identity: a resume under another run is bad input, never "parity broken" --
  ident_resume)  # once: seed, data seed, lr, optimizer loaded, then the verdict failed with exit 1
    save_ckpt good
    sed 's/"seed": 1234/"seed": 99/' "$scen/fsdp2.json" >"$work/seed.json"
    sed 's/"data_seed": 5678/"data_seed": 99/' "$scen/fsdp2.json" >"$work/data.json"
    for what in seed data lr optim beta2 precision; do
      args=("$scen/fsdp2.json" --steps 2 --resume "$work/good")
      case $what in
        seed) args[0]=$work/seed.json; pat='\$\.run\.seed: the checkpoint was saved by a run with another seed: checkpoint has 1234, this run has 99' ;;
        data) args[0]=$work/data.json; pat='\$\.run\.data_seed: .*checkpoint has 5678, this run has 99' ;;
        lr) args+=(--lr 0.5); pat='\$\.run\.optim\.lr: .*checkpoint has 0\.003, this run has 0\.5' ;;
        optim) args+=(--optim sgd); pat='\$\.run\.optim\.kind: .*checkpoint has "adam", this run has "sgd"' ;;
        beta2) sed 's/"beta2": 0.999/"beta2": 0.99/' "$scen/fsdp2.json" >"$work/b2.json"; args[0]=$work/b2.json
               pat='\$\.run\.optim\.beta2: ' ;;
        precision) args+=(--precision fp32); pat='\$\.run\.precision: .*checkpoint has "fp64", this run has "fp32"' ;;
      esac
      run 60 "$parity" run "${args[@]}"
      want 2 "good/metadata\.json: $pat"
      no_launch
      echo "resume with another $what: exit $rc after $ms ms: $(grep -m1 'run\.' "$work/out.log")"
    done
    # world 1 (the baseline loads it itself) and the scenario's own settings: as before
    sed 's/"seed": 1234/"seed": 99/' "$scen/tiny.json" >"$work/tiny99.json"
    "$parity" run "$scen/tiny.json" --steps 1 --save-at 1 --ckpt "$work/t1" >"$work/save.log" 2>&1 || fail "tiny save"
    run 60 "$parity" run "$work/tiny99.json" --steps 2 --resume "$work/t1"
    want 2 "\\\$\.run\.seed: the checkpoint was saved by a run with another seed"
    run 60 "$parity" run "$scen/fsdp2.json" --steps 2 --resume "$work/good"
    want 0 "verdict: PASS"
    grep -q '"run":' "$work/good/metadata.json" || fail "metadata.json records no run" ;;
  # ---- a baseline that goes non-finite: its own outcome (exit 4), not "parity broken" --------
  diverge_baseline)  # once: exit 1, "parity broken", every row FAIL
    run 120 "$parity" run "$scen/fsdp2.json" --steps 4 --lr 1e100
    want 4 "baseline diverged: the one-device baseline went non-finite at step [0-9]+: (loss|micro-batch [0-9]+ loss|grad [^ ]+|grad_norm|param \(after the update\) [^ ]+)[^=]* = (-?nan|-?inf)"
    grep -q "verdict: FAIL" "$work/out.log" && fail "a diverged baseline reported as a failed verdict"
    [ "$(grep -c 'went non-finite' "$work/out.log")" -eq 1 ] || fail "the divergence is not said exactly once"
    echo "W2: exit $rc after $ms ms: $(grep -m1 'went non-finite' "$work/out.log" | cut -c1-160)"
    run 60 "$parity" run "$scen/tiny.json" --steps 4 --lr 1e100
    want 4 "baseline diverged: the one-device baseline went non-finite at step [0-9]+"
    echo "W1: exit $rc after $ms ms" ;;
  diverge_layout)  # a layout non-finite where the baseline is finite: parity broken, root says so
    PARITY_FAULT=scale_grad:router:nan run 120 "$parity" run "$scen/fsdp2.json" --steps 2
    want 1 "verdict: FAIL"
    want 1 "root: grad router at step 0[ ,].*-> non-finite: the layout's first non-finite quantity \(layers\.1\.moe\.router\.gate\[[0-9, ]+\] = nan where the baseline has [-0-9.e]+\); the baseline is finite"
    echo "layout NaN: exit $rc after $ms ms: $(grep -m1 '^root:' "$work/out.log" | cut -c1-160)" ;;
  # ---- exhausted resources: exit 3 naming the resource, nothing left behind --------------------
  res_fd)  # once: exit 1, "pipe failed", the world's /dev/shm segment left behind
    # in a mount namespace of its own with a /dev/shm of its own: what is left there is this run's
    private_shm || { echo "issue26 $case: no private mount namespace here (skipped)"; exit 77; }
    run 60 unshare -m bash -c "mount -t tmpfs tmpfs /dev/shm && ulimit -n 12 &&
      { \"$parity\" run \"$scen/fsdp8.json\" --steps 2; rc=\$?; ls /dev/shm >\"$work/shm.txt\"; exit \$rc; }"
    want 3 "pipe for rank [1-7] failed: Too many open files \(the open-file limit, ulimit -n, is 12\)"
    [ -s "$work/shm.txt" ] && fail "left in /dev/shm: $(cat "$work/shm.txt")"
    echo "ulimit -n 12, fsdp8: exit $rc after $ms ms, nothing left in /dev/shm" ;;
  res_shm)  # once: a rank killed by SIGBUS, no mention of /dev/shm
    private_shm || { echo "issue26 $case: no private mount namespace here (skipped)"; exit 77; }
    run 60 unshare -m bash -c "mount -t tmpfs -o size=64k tmpfs /dev/shm && head -c 60000 /dev/zero >/dev/shm/filler &&
      { \"$parity\" run \"$scen/fsdp8.json\" --steps 2; rc=\$?; ls /dev/shm >\"$work/shm.txt\"; exit \$rc; }"
    want 3 "shared memory /dev/shm/parity-[^:]+: cannot reserve [0-9]+ bytes: No space left on device \(/dev/shm: the filesystem is full"
    grep -q "Bus error" "$work/out.log" && fail "a rank died of SIGBUS"
    [ "$(cat "$work/shm.txt")" = filler ] || fail "left in /dev/shm: $(cat "$work/shm.txt")"
    echo "full /dev/shm: exit $rc after $ms ms: $(grep -m1 'cannot reserve' "$work/out.log" | cut -c1-150)" ;;
  res_fork)  # once: exit 1, "fork failed"
    # root is exempt from the process limit: run as nobody, where the launcher and 3 ranks fit
    # (a copy of the binary in the work directory: nobody may not reach the build's, e.g. under /root)
    as=() exe=$parity
    if [ "$(id -u)" -eq 0 ]; then
      chmod 777 "$work" && cp "$parity" "$work/parity" && chmod 755 "$work/parity" || fail "the binary was not copied"
      as=(setpriv --reuid=65534 --regid=65534 --clear-groups) exe=$work/parity
    fi
    n=$(( $(ps -U "$( [ ${#as[@]} -gt 0 ] && echo 65534 || id -u)" -L --no-headers | wc -l) + 4 ))
    run 60 "${as[@]}" bash -c "ulimit -u $n; exec \"$exe\" launch -n 64 -- sleep 5"
    want 3 "fork failed: Resource temporarily unavailable \(the process limit, ulimit -u, is [0-9]+; or memory\)"
    pgrep -f "^sleep 5$" -P $$ >/dev/null && fail "a rank left running"
    echo "ulimit -u $n: exit $rc after $ms ms" ;;
  res_fsize)  # once: killed by SIGXFSZ (exit 153)
    run 60 bash -c "ulimit -f 64; exec \"$parity\" run \"$scen/fsdp2.json\" --steps 2"
    want 3 "File too large \(the file-size limit, ulimit -f, is 65536 bytes\)"
    no_launch
    ls "$work"/parity-baseline-* >/dev/null 2>&1 && fail "the shared baseline file was left in TMPDIR"
    echo "ulimit -f 64: exit $rc after $ms ms" ;;
  res_tmpdir)  # once: SIGBUS (exit 135), no message
    mkdir "$work/full"
    mount -t tmpfs -o size=64k tmpfs "$work/full" 2>/dev/null || { echo "issue26 $case: cannot mount a tmpfs here (skipped)"; exit 77; }
    head -c 60000 /dev/zero >"$work/full/filler" 2>/dev/null
    TMPDIR=$work/full run 60 "$parity" run "$scen/fsdp2.json" --steps 2
    left=$(ls -A "$work/full" | grep -vx filler)
    umount "$work/full"
    [ -z "$left" ] || fail "left in TMPDIR: $left"
    want 3 "shared baseline: cannot reserve [0-9]+ bytes for .*/full/parity-baseline-.*: No space left on device \(.*/full: the filesystem is full"
    echo "full TMPDIR: exit $rc after $ms ms" ;;
  # ---- stale segments: the next launch sweeps /dev/shm names of ranks that are gone ----------
  stale_shm)  # once: left for ever
    sh -c 'exit 0' & dead=$!; wait $dead
    kill -0 "$dead" 2>/dev/null && fail "pid $dead was reused at once; rerun"
    sleep 60 & alive=$!
    head -c 4096 /dev/zero >"/dev/shm/parity-$dead-issue26test-00000000"
    head -c 4096 /dev/zero >"/dev/shm/parity-$alive-issue26test-00000000"
    run 60 "$parity" launch -n 2 -- true
    rc_launch=$rc
    stale_left=0; [ -e "/dev/shm/parity-$dead-issue26test-00000000" ] && stale_left=1
    live_kept=0; [ -e "/dev/shm/parity-$alive-issue26test-00000000" ] && live_kept=1
    rm -f "/dev/shm/parity-$dead-issue26test-00000000" "/dev/shm/parity-$alive-issue26test-00000000"
    kill $alive
    [ $rc_launch -eq 0 ] || fail "the launch failed: exit $rc_launch"
    [ $stale_left -eq 0 ] && [ $live_kept -eq 1 ] || fail "stale segment left: $stale_left, live one kept: $live_kept"
    echo "a dead pid's segment swept, a live pid's kept" ;;
  # ---- blame: the stopped rank, not the ranks waiting on it ----------------------------------
  blame_stop)  # once: the first line named a rank that timed out waiting, the grace spent
    "$parity" run "$scen/w8_tp4_ep4.json" --steps 1000000 --timeout 3 >"$work/out.log" 2>&1 &
    launcher=$!
    ranks=$(wait_ranks 8 600) || { kill -9 $launcher; fail "the ranks did not start"; }
    sleep 1
    victim=$(echo "$ranks" | sed -n 6p)
    vrank=$(sed 's/^parity-rank//' "/proc/$victim/comm")  # its name (a forked rank's environ is the launcher's)
    stop_and_blame "rank $vrank (pid $victim) is stopped"
    echo "SIGSTOP of rank $vrank: exit $rc after $ms ms: $first" ;;
  # ---- part 3: OpenMPI's leftovers, the per-host cap, memory, blame under mpi ----------------
  stale_mpi)  # once: kill -9 of the launcher under mpi left vader_segment.* in /dev/shm for ever
    decoy=/dev/shm/vader_segment.issue26decoy-$$.0.1.0  # another program's: never touched
    head -c 4096 /dev/zero >"$decoy"
    sh -c 'exit 0' & dead=$!; wait $dead
    sleep 60 & alive=$!
    mkdir -p "/dev/shm/parity-mpi-i26dead$$" "/dev/shm/parity-mpi-i26live$$"
    echo "$dead 1" >"/dev/shm/parity-mpi-i26dead$$/launcher"  # a launcher that is gone
    echo "$alive $(cut -d' ' -f22 "/proc/$alive/stat")" >"/dev/shm/parity-mpi-i26live$$/launcher"  # one that runs
    cleanup_decoys() { rm -rf "$decoy" "/dev/shm/parity-mpi-i26dead$$" "/dev/shm/parity-mpi-i26live$$"; kill $alive 2>/dev/null; }
    top_before=$(ls /dev/shm | grep '^vader_segment\.' | sort)
    "$parity" run "$scen/fsdp2.json" --backend mpi --steps 1000000 --timeout 60 >"$work/out.log" 2>&1 &
    launcher=$!
    mine=""
    for _ in $(seq 300); do  # this launcher's /dev/shm directory, once OpenMPI's segments are in it
      for dir in /dev/shm/parity-mpi-*; do
        [ "$(cut -d' ' -f1 "$dir/launcher" 2>/dev/null)" = "$launcher" ] && ls "$dir"/vader_segment.* >/dev/null 2>&1 && mine=$dir
      done
      [ -n "$mine" ] && break
      sleep 0.1
    done
    top_during=$(ls /dev/shm | grep '^vader_segment\.' | sort)
    mpirun_pid=$(pgrep -P $launcher | head -1)
    ranks=$( [ -n "$mpirun_pid" ] && pgrep -P "$mpirun_pid")
    kill -9 $launcher; wait $launcher 2>/dev/null
    for _ in $(seq 100); do  # until mpirun and its ranks are dead (gone, or zombies nobody reaps yet)
      left=0; for p in $mpirun_pid $ranks; do st=$(cut -d' ' -f3 "/proc/$p/stat" 2>/dev/null); [ -n "$st" ] && [ "$st" != Z ] && left=1; done
      [ $left -eq 0 ] && break; sleep 0.1
    done
    [ -n "$mine" ] || { cleanup_decoys; fail "OpenMPI's segments are not in a parity-mpi directory of the launcher's (in /dev/shm: $(comm -13 <(echo "$top_before") <(echo "$top_during") | head -3))"; }
    [ "$top_during" = "$top_before" ] || { cleanup_decoys; fail "OpenMPI put segments straight into /dev/shm"; }
    ls -d "$work"/parity-rdzv-*/ompi.* >/dev/null 2>&1 || { cleanup_decoys; fail "OpenMPI's session directory is not in the launcher's store directory"; }
    ls -d "$work"/ompi.* >/dev/null 2>&1 && { cleanup_decoys; fail "OpenMPI's session directory is in TMPDIR itself"; }
    echo "kill -9 of the launcher: left $(ls "$mine" | tr '\n' ' ')and $(ls -d "$work"/parity-rdzv-*/ompi.*/pid.* | sed "s|$work/||")"
    run 60 "$parity" launch -n 1 -- true  # the next launch sweeps
    rc_launch=$rc
    still=""; [ -e "$mine" ] && still="$mine "
    ls -d "$work"/parity-rdzv-* >/dev/null 2>&1 && still+="$(ls -d "$work"/parity-rdzv-*) "
    [ -e "/dev/shm/parity-mpi-i26dead$$" ] && still+="the dead launcher's decoy "
    kept=1; [ -e "$decoy" ] && [ -e "/dev/shm/parity-mpi-i26live$$/launcher" ] || kept=0
    cleanup_decoys
    [ $rc_launch -eq 0 ] || fail "the next launch failed: exit $rc_launch"
    [ -z "$still" ] || fail "not swept by the next launch: $still"
    [ $kept -eq 1 ] || fail "another program's vader_segment or a live launcher's directory was removed"
    # a run that ends normally leaves none of it either
    shm_before=$(ls -d /dev/shm/parity-mpi-* 2>/dev/null)
    run 120 "$parity" run "$scen/fsdp2.json" --backend mpi --steps 2
    want 0 "verdict: PASS"
    ls -d "$work"/parity-rdzv-* "$work"/ompi.* >/dev/null 2>&1 && fail "a finished mpi run left $(ls "$work")"
    new=$(comm -13 <(echo "$shm_before") <(ls -d /dev/shm/parity-mpi-* 2>/dev/null))
    for d in $new; do  # a directory of a launcher that has ended: this run's
      p=$(cut -d' ' -f1 "$d/launcher" 2>/dev/null); [ -n "$p" ] && ! kill -0 "$p" 2>/dev/null && fail "a finished mpi run left $d"
    done
    echo "the next launch swept them; another program's vader_segment and a live launcher's directory kept" ;;
  launch_cap)  # once: -n 257 started 257 processes, -n 100000 ran out of descriptors after 20000
    for n in 257 100000; do
      run 30 "$parity" launch -n $n -- touch "$work/started"
      want 2 "--nproc: must be at most 256 \(the per-host cap: ranks one launcher starts on one host; more hosts: --nnodes\), got $n"
      [ -e "$work/started" ] && fail "-n $n started a rank"
      echo "launch -n $n: exit $rc after $ms ms"
    done
    run 60 "$parity" launch -n 256 -- true  # the cap itself runs
    [ $rc -eq 0 ] || fail "launch -n 256: exit $rc"
    echo "launch -n 256 -- true: exit 0 after $ms ms" ;;
  world_cap)  # once: exit 1, "shared baseline: 512 ranks on one host (at most 256)", no JSON path
    sed 's/"world": 2,/"world": 512,/; s/"dp_shard": 2,/"dp_shard": 512,/' "$scen/fsdp2.json" >"$work/w512.json"
    grep -q '"world": 512' "$work/w512.json" || fail "the test's scenario was not made"
    run 60 "$parity" run "$work/w512.json" --steps 1
    want 2 "w512\.json: \\\$\.layout\.world: must put at most 256 ranks on one host \(the per-host cap: ranks one launcher starts\), got 512; spread it over more hosts with --nnodes \(at least 2\)"
    no_launch
    echo "world 512: exit $rc after $ms ms"
    sed 's/"world": 4,/"world": 512,/; s/"dp_shard": 4,/"dp_shard": 512,/' "$scen/resume_fsdp3_to_fsdp4.json" >"$work/r512.json"
    run 60 "$parity" run "$work/r512.json"
    want 2 "r512\.json: \\\$\.resume\.layout\.world: must put at most 256 ranks on one host"
    no_launch
    grep -q "resume check, phase 1" "$work/out.log" && fail "phase 1 ran before the refusal"
    mkdir "$work/g"
    run 60 "$parity" golden check "$work/w512.json" --golden-dir "$work/g"
    want 2 "w512\.json: \\\$\.layout\.world: must put at most 256 ranks on one host" ;;
  res_memory)  # once: a bare "std::bad_alloc", or exit 1 ("parity broken") when the launcher's baseline ran out
    private_shm || { echo "issue26 $case: no private mount namespace here"; exit 77; }
    python3 -c "import json,sys; s=json.load(open(sys.argv[1])); s['name']='bigmlp'; s['steps']=2; s['model']['mlp_hidden']=200000; json.dump(s,open(sys.argv[2],'w'))" \
      "$scen/fsdp2.json" "$work/bigmlp.json" || fail "the test's scenario was not made"
    # about 80 MB of parameters: the limit decides where memory runs out first (the launcher's
    # map of the shared baseline, a rank, the launcher's baseline thread); each is exit 3
    for kib in 300000 600000 1000000; do
      run 120 unshare -m bash -c "mount -t tmpfs tmpfs /dev/shm && ulimit -v $kib &&
        { \"$parity\" run \"$work/bigmlp.json\"; rc=\$?; ls /dev/shm >\"$work/shm.txt\"; exit \$rc; }"
      want 3 "(out of memory: an allocation failed \(|Cannot allocate memory \(out of memory; )the address-space limit, ulimit -v, is $((kib * 1024)) bytes"
      grep -q "std::bad_alloc" "$work/out.log" && fail "ulimit -v $kib: a bare std::bad_alloc"
      [ -s "$work/shm.txt" ] && fail "ulimit -v $kib: left in /dev/shm: $(cat "$work/shm.txt")"
      left=$(ls "$work" | grep '^parity-' | tr '\n' ' ')
      [ -z "$left" ] || fail "ulimit -v $kib: left in TMPDIR: $left"
      echo "ulimit -v $kib: exit $rc after $ms ms: $(grep -m1 -E 'out of memory' "$work/out.log" | cut -c1-170)"
    done ;;
  blame_stop_mpi | blame_stop_mpi_init)
    # once: the first line named the rank mpirun reported (one that timed out waiting); stopped
    # at once (_init: most likely in MPI_Init, which has no timeout), the run hung for ever
    delay=1.5; [ $case = blame_stop_mpi_init ] && delay=0
    "$parity" run "$scen/w8_tp4_ep4.json" --backend mpi --steps 1000000 --timeout 3 >"$work/out.log" 2>&1 &
    launcher=$!
    ranks=""
    for _ in $(seq 600); do
      mpirun_pid=$(pgrep -P $launcher | head -1)
      [ -n "$mpirun_pid" ] && ranks=$(pgrep -P "$mpirun_pid")
      [ "$(echo "$ranks" | grep -c .)" -ge 8 ] && break
      sleep 0.1
    done
    [ "$(echo "$ranks" | grep -c .)" -ge 8 ] || { kill -9 $launcher; fail "the ranks did not start"; }
    sleep $delay
    victim=$(echo "$ranks" | sed -n 6p)
    vrank=$(tr '\0' '\n' <"/proc/$victim/environ" | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    [ -n "$vrank" ] || { kill -9 $launcher; fail "no OMPI_COMM_WORLD_RANK for pid $victim"; }
    stop_and_blame "^parity launch: rank $vrank (pid $victim) was stopped"
    sleep 0.5
    # dead: gone, or a zombie that nobody reaps yet (its parent mpirun is gone)
    state=$(cut -d' ' -f3 "/proc/$victim/stat" 2>/dev/null)
    [ -z "$state" ] || [ "$state" = Z ] || { kill -9 "$victim"; fail "the stopped rank was left running (state $state)"; }
    echo "SIGSTOP of rank $vrank under mpi ${delay} s after start: exit $rc after $ms ms: $(echo "$first" | cut -c1-200)" ;;
  *) echo "unknown case $case"; exit 2 ;;
esac
echo "issue26 $case: PASS"
