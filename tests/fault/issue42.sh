#!/usr/bin/env bash
# Issue 42 through the real parity binary, one ctest per case (tests/fault/issue42.cmake):
#   issue42.sh PARITY SCENARIO_DIR CASE
# The output side: nothing a user owns is overwritten (out_*), no fixed temporary name or
# followed link (tmp_*), a user's files kept in a checkpoint saved over (ckpt_keep), one writer
# per directory (lock_*), bounded reads in plot (plot_*), a diverging dump (dump_diverge); the
# newest keys' bounds (key_*) and messages (msg_*). Every command runs under `timeout` (a hang
# is a failure). Prints "issue42 CASE: PASS" (exit 0) only when every check held.
set -u
parity=$1 scen=$2 case=$3
tag=issue42
source "$(dirname "$0")/case_lib.sh"
intact() { [ "$(cat "$1" 2>/dev/null)" = precious ] || fail "$1 was overwritten or removed"; }
# edit SRC DST SED: a scenario file changed by a sed expression (the change must happen)
edit() { sed -e "$3" "$1" >"$2"; cmp -s "$1" "$2" && fail "the edit '$3' changed nothing"; return 0; }
case $case in
  # ---- nothing a user owns is overwritten ------------------------------------------------------
  out_export)  # once: exit 0 and the user's file gone; a FIFO replaced
    save_ckpt ck
    echo precious >"$work/o.st"
    run 30 "$parity" ckpt export "$work/ck" "$work/o.st"
    want 2 "out: .*/o\.st: exists and is not a file parity wrote.*--force"
    intact "$work/o.st"
    echo "export over a user's file: exit $rc after $ms ms: $(head -1 "$work/out.log" | cut -c1-150)"
    mkfifo "$work/o.fifo"
    run 30 "$parity" ckpt export "$work/ck" "$work/o.fifo"
    want 2 "o\.fifo: is a FIFO \(named pipe\) where a file is expected"
    [ -p "$work/o.fifo" ] || fail "the FIFO was replaced"
    ln -s /dev/null "$work/o.null"
    run 30 "$parity" ckpt export "$work/ck" "$work/o.null"
    want 2 "o\.null: is a symbolic link where a file is expected"
    [ -c /dev/null ] && [ -L "$work/o.null" ] || fail "the link or /dev/null was replaced"
    run 30 "$parity" ckpt export "$work/ck" "$work/new.st"
    want 0 "-> .*/new\.st"
    run 30 "$parity" ckpt export "$work/ck" "$work/new.st"  # its own export: replaced
    want 0 "-> .*/new\.st"
    run 30 "$parity" ckpt export "$work/ck" "$work/o.st" --force  # the user means it
    want 0 "-> .*/o\.st"
    cmp -s "$work/o.st" "$work/new.st" || fail "--force wrote another export"
    ls -A "$work" | grep -q "parity-tmp" && fail "a temporary file was left: $(ls -A "$work")"
    ;;
  out_links)  # --report / --junit through a link or into a FIFO: refused, the target untouched
    echo precious >"$work/victim"
    ln -s "$work/victim" "$work/r.json"
    run 60 "$parity" run "$scen/fsdp2.json" --steps 1 --report "$work/r.json"
    want 2 "--report: .*/r\.json: is a symbolic link where a file is expected"
    no_launch
    intact "$work/victim"
    mkfifo "$work/j.xml"
    run 60 "$parity" matrix "$scen/fsdp2.json" --junit "$work/j.xml"
    want 2 "--junit: .*/j\.xml: is a FIFO"
    [ -p "$work/j.xml" ] || fail "the FIFO was replaced" ;;
  # ---- no fixed temporary name, no followed link ---------------------------------------------
  tmp_export)  # once: a link at OUT.tmp made export write through it; a user's OUT.tmp consumed
    save_ckpt ck
    echo precious >"$work/victim"
    ln -s "$work/victim" "$work/e.st.tmp"
    echo precious >"$work/f.st.tmp"
    run 30 "$parity" ckpt export "$work/ck" "$work/e.st"
    want 0 "-> .*/e\.st"
    run 30 "$parity" ckpt export "$work/ck" "$work/f.st"
    want 0 "-> .*/f\.st"
    intact "$work/victim"
    intact "$work/f.st.tmp"
    [ -L "$work/e.st.tmp" ] || fail "the planted link was consumed" ;;
  tmp_dump)  # the manifest and step files of a dump: a link at NAME.tmp never followed
    echo precious >"$work/victim"
    run 60 "$parity" dump "$scen/tiny.json" "$work/d" --steps 1 --no-bounds  # a dump parity wrote
    want 0 "wrote 2 files and manifest.json"
    for f in manifest.json init.safetensors step_000000.safetensors; do ln -s "$work/victim" "$work/d/$f.tmp"; done
    run 60 "$parity" dump "$scen/tiny.json" "$work/d" --steps 1 --no-bounds
    want 0 "wrote 2 files and manifest.json"
    intact "$work/victim"
    for f in manifest.json init.safetensors step_000000.safetensors; do
      [ -L "$work/d/$f.tmp" ] || fail "the planted link $f.tmp was consumed"
    done ;;
  tmp_golden)  # golden update: a link at golden/NAME.json.tmp never followed
    echo precious >"$work/victim"
    mkdir "$work/g"
    ln -s "$work/victim" "$work/g/tiny.json.tmp"
    run 120 "$parity" golden update "$scen/tiny.json" --golden-dir "$work/g" --steps 2
    [ "$rc" -eq 0 ] || fail "golden update: exit $rc"
    intact "$work/victim"
    [ -L "$work/g/tiny.json.tmp" ] || fail "the planted link was consumed"
    grep -q '"format": "parity-golden-1"' "$work/g/tiny.json" || fail "no golden written" ;;
  # ---- a user's files in a checkpoint saved over ------------------------------------------------
  ckpt_keep)  # once: NOTES.txt gone after a save over the checkpoint
    save_ckpt ck
    echo precious >"$work/ck/NOTES.txt"
    mkdir "$work/ck/mine" && echo precious >"$work/ck/mine/a.txt"
    run 120 "$parity" run "$scen/fsdp2.json" --steps 2 --save-at 2 --ckpt "$work/ck"
    want 0 "saved"
    intact "$work/ck/NOTES.txt"
    intact "$work/ck/mine/a.txt"
    run 60 "$parity" ckpt inspect "$work/ck"
    [ "$rc" -eq 0 ] || fail "the checkpoint saved over is not whole: exit $rc"
    grep -q '"step": 2' "$work/ck/metadata.json" || fail "the new checkpoint is not the one in place"
    run 120 "$parity" run "$scen/tiny.json" --steps 2 --save-at 2 --ckpt "$work/ck1"  # world 1: save_all
    want 0 "saved"
    echo precious >"$work/ck1/NOTES.txt"
    run 120 "$parity" run "$scen/tiny.json" --steps 2 --save-at 2 --ckpt "$work/ck1"
    want 0 "saved"
    intact "$work/ck1/NOTES.txt" ;;
  # ---- one writer per directory --------------------------------------------------------------
  lock_ckpt)  # once: a second writer ran beside the first and both said "saved"
    save_ckpt ck
    "$parity" run "$scen/fsdp2.json" --steps 20000 --save-at 20000 --ckpt "$work/ck" >"$work/first.log" 2>&1 &
    first=$!
    for _ in $(seq 100); do grep -qE "^$first *$" "$work/ck/.parity-lock" 2>/dev/null && break; sleep 0.1; done
    run 60 "$parity" run "$scen/fsdp2.json" --steps 1 --save-at 1 --ckpt "$work/ck"
    kill -0 "$first" 2>/dev/null || { cat "$work/first.log"; fail "the first writer had ended"; }
    kill "$first" 2>/dev/null; wait "$first" 2>/dev/null
    want 2 "--ckpt: .*/ck: is being written by another parity \(pid $first\)"
    no_launch
    echo "second writer: exit $rc after $ms ms: $(grep -m1 'being written' "$work/out.log" | cut -c1-160)"
    # ten writers at once: each saves or is refused; the checkpoint is whole
    rm -rf "$work/ten"
    pids=()
    for i in $(seq 10); do
      "$parity" run "$scen/fsdp2.json" --steps 1 --save-at 1 --ckpt "$work/ten" >"$work/w$i.log" 2>&1 &
      pids+=($!)
    done
    saved=0 refused=0
    for i in $(seq 10); do
      wait "${pids[$((i - 1))]}"; r=$?
      case $r in
        0) saved=$((saved + 1)) ;;
        2) grep -q "is being written by another parity (pid [0-9]*)" "$work/w$i.log" || fail "writer $i: exit 2 without the holder";
           refused=$((refused + 1)) ;;
        *) cat "$work/w$i.log"; fail "writer $i: exit $r" ;;
      esac
    done
    run 60 "$parity" ckpt inspect "$work/ten"
    [ "$rc" -eq 0 ] || fail "ten writers left a damaged checkpoint (saved $saved, refused $refused)"
    echo "ten writers: $saved saved, $refused refused, the checkpoint whole" ;;
  lock_dump)  # two dumps into one directory
    mkdir "$work/d"
    "$parity" dump "$scen/tiny.json" "$work/d" --steps 20000 --no-bounds >"$work/first.log" 2>&1 &
    first=$!
    for _ in $(seq 100); do grep -qE "^$first *$" "$work/d/.parity-lock" 2>/dev/null && break; sleep 0.1; done
    kill -0 "$first" 2>/dev/null || { cat "$work/first.log"; fail "the first dump had ended"; }
    run 60 "$parity" dump "$scen/tiny.json" "$work/d" --steps 1 --no-bounds
    kill "$first" 2>/dev/null; wait "$first" 2>/dev/null
    want 2 "dir: .*/d: is being written by another parity \(pid $first\)" ;;
  # ---- bounded reads in plot -----------------------------------------------------------------
  plot_nonreg)  # once: a link to /dev/zero grew without bound; a FIFO blocked for ever
    ln -s /dev/zero "$work/z.json"
    run 20 "$parity" plot "$work/z.json" -o "$work/p"
    want 2 "z\.json: plot input \(a golden or scenario file\) is a character device, not a regular file"
    echo "plot of a link to /dev/zero: exit $rc after $ms ms"
    mkfifo "$work/f.json"
    run 20 "$parity" plot "$work/f.json" -o "$work/p"
    want 2 "f\.json: plot input \(a golden or scenario file\) is a FIFO"
    echo "plot of a FIFO: exit $rc after $ms ms"
    mkdir -p "$work/s" "$work/golden" && cp "$scen/tiny.json" "$work/s/tiny.json" && mkfifo "$work/golden/tiny.json"
    run 20 "$parity" plot "$work/s/tiny.json" -o "$work/p"
    want 2 "tiny\.json: golden file is a FIFO" ;;
  plot_outputs)  # plot over a user's files: refused; over its own: replaced
    command -v gnuplot >/dev/null || { echo "issue42 $case: no gnuplot"; exit 77; }
    echo precious >"$work/p.png"
    run 60 "$parity" plot "$scen/fsdp2.json" -o "$work/p"
    want 2 "--out: .*/p\.png: exists and is not a file parity wrote"
    intact "$work/p.png"
    run 60 "$parity" plot "$scen/fsdp2.json" -o "$work/q"
    want 0 "wrote .*/q\.svg"
    run 60 "$parity" plot "$scen/fsdp2.json" -o "$work/q"
    want 0 "wrote .*/q\.svg"
    ls -A "$work" | grep -q "parity-plot\|parity-tmp" && fail "a temporary was left: $(ls -A "$work")"
    ;;
  read_compare)  # compare's manifest and --map: once read unbounded (a FIFO --map blocked for ever)
    run 60 "$parity" dump "$scen/tiny.json" "$work/a" --steps 1 --no-bounds
    want 0 "wrote 2 files and manifest.json"
    mkfifo "$work/map.json"
    run 20 "$parity" compare "$work/a" "$work/a" --map "$work/map.json"
    want 2 "map\.json: --map file is a FIFO \(named pipe\), not a regular file"
    mkdir "$work/b" && ln -s /dev/zero "$work/b/manifest.json"
    run 20 "$parity" compare "$work/a" "$work/b"
    want 2 "manifest\.json: dump manifest is a character device, not a regular file" ;;
  # ---- a diverging dump ------------------------------------------------------------------------
  dump_diverge)  # once: exit 0 and NaN tensors with a manifest
    edit "$scen/tiny.json" "$work/big_lr.json" 's/"lr": 3e-3/"lr": 1e100/'
    mkdir "$work/d"
    run 60 "$parity" dump "$work/big_lr.json" "$work/d" --steps 4 --no-bounds
    want 4 "baseline diverged: the one-device baseline went non-finite at step [0-9]+"
    [ -e "$work/d/manifest.json" ] && fail "a manifest describes the diverged dump"
    echo "dump of a diverging baseline: exit $rc after $ms ms" ;;
  # ---- the newest keys -------------------------------------------------------------------------
  key_pp_virtual)  # once: 10^6 ran away
    edit "$scen/pp2_1f1b.json" "$work/v.json" 's/"pp_schedule": "1f1b"/"pp_schedule": "interleaved", "pp_virtual": 1000000/'
    run 30 "$parity" run "$work/v.json" --steps 1
    want 2 "v\.json: \\\$\.layout\.pp_virtual: must be at most model\.layers / layout\.pp \(4 / 2 = 2"
    no_launch
    echo "pp_virtual 10^6: exit $rc after $ms ms" ;;
  key_interleaved_pp1)  # once: ranks started, the error named parity's request file
    edit "$scen/fsdp2.json" "$work/i.json" 's/"world": 2,/"world": 2, "pp_schedule": "interleaved",/'
    run 30 "$parity" run "$work/i.json" --steps 1
    want 2 "i\.json: \\\$\.layout\.pp_schedule: the interleaved schedule needs layout\.pp > 1"
    no_launch
    grep -q "parity-run-" "$work/out.log" && fail "the message names parity's request file" ;;
  key_pp_layers_empty)  # once: accepted
    edit "$scen/pp2_1f1b.json" "$work/e.json" 's/"pp": 2,/"pp": 2, "pp_layers": [],/'
    run 30 "$parity" run "$work/e.json" --steps 1
    want 2 "e\.json: \\\$\.layout\.pp_layers: must not be empty"
    no_launch ;;
  key_precision_empty)  # once: silently ignored
    for sub in run dump matrix; do
      extra=""; [ $sub = dump ] && extra="$work/dd"
      run 30 "$parity" $sub "$scen/tiny.json" $extra --precision ''
      want 2 "--precision: must be fp64, fp32, bf16, bf16-reduce-bf16, fp16, fp8 or fp8-delayed, got \"\""
    done ;;
  key_steps)  # once: 2^63 - 1 in a file ran until killed; --steps 0 blamed on the file's $.steps
    edit "$scen/fsdp2.json" "$work/st.json" 's/"steps": [0-9]*/"steps": 9223372036854775807/'
    run 30 "$parity" run "$work/st.json"
    want 2 "st\.json: \\\$\.steps: must be at most 1000000"
    no_launch
    run 30 "$parity" run "$scen/fsdp2.json" --steps 0
    want 2 "^--steps: must be an integer in \[1, 1000000\], got '0'"
    grep -q '\$\.steps' "$work/out.log" && fail "--steps 0 blamed on the file's \$.steps"
    run 30 "$parity" run "$scen/fsdp2.json" --steps 1000001
    want 2 "--steps: must be an integer in \[1, 1000000\]" ;;
  # ---- messages --------------------------------------------------------------------------------
  msg_dump_loop)  # once: a raw std::filesystem message
    ln -s "$work/loop" "$work/loop"
    run 30 "$parity" dump "$scen/tiny.json" "$work/loop" --steps 1
    want 2 "dir: .*/loop: cannot be looked at: Too many levels of symbolic links"
    grep -q "filesystem error" "$work/out.log" && fail "a raw std::filesystem message"
    run 30 "$parity" plot "$scen/fsdp2.json" -o "$work/loop/p"  # once: exit 3, "filesystem error: ..."
    want 2 "--out: .*/loop: cannot be made a directory: Too many levels of symbolic links"
    grep -q "filesystem error" "$work/out.log" && fail "a raw std::filesystem message" ;;
  msg_golden_type)  # once: a raw json exception without a JSON path
    mkdir "$work/g"
    run 120 "$parity" golden update "$scen/tiny.json" --golden-dir "$work/g" --steps 2
    [ "$rc" -eq 0 ] || fail "golden update: exit $rc"
    python3 - "$work/g/tiny.json" <<'PY' || fail "cannot edit the golden"
import json, sys
p = sys.argv[1]; j = json.load(open(p)); j["baseline"]["loss"]["values"]["1"] = "x"; json.dump(j, open(p, "w"))
PY
    run 60 "$parity" golden check "$scen/tiny.json" --golden-dir "$work/g"
    want 2 "tiny\.json: \\\$\.baseline\.loss\.values\.1: expected a number, got string"
    grep -q "json.exception" "$work/out.log" && fail "a raw json exception" ;;
  msg_matrix_tmp)  # once: --summary without --out left its temporary directory unmentioned
    run 120 "$parity" matrix "$scen/fsdp2.json" --summary "$work/s.md"
    want 0 "logs: .*parity-matrix-[A-Za-z0-9]+ \(a temporary directory, kept: the summary links it"
    d=$(sed -n 's/^logs: \([^ ]*\) .*/\1/p' "$work/out.log")
    [ -d "$d" ] || fail "the directory named is not there"
    run 120 "$parity" matrix "$scen/fsdp2.json" --summary "$work/t.md" --summary-links none
    want 0 "summary: "
    ls -d "$work"/parity-matrix-* | grep -qv "^$d\$" && fail "a summary without links kept its logs"
    ;;
  *) echo "issue42: unknown case $case"; exit 2 ;;
esac
echo "issue42 $case: PASS"
