#!/usr/bin/env bash
# Issue 46 item 4 (C++ side): `parity compare` does not trust its inputs. One ctest per case
# (tests/fault/issue46.cmake):   issue46.sh PARITY SCENARIO_DIR CASE
# Each case damages a copy of a dump (a reference with its twin, a candidate without) the way a
# hostile or broken writer could, and wants the exit-code table's code and a message naming
# what is wrong; before the fix each of them passed (exit 0), failed as a break (exit 1), ran
# out of memory (exit 3) or reported the wrong thing. Every command runs under `timeout`.
# Needs python3 (header and tensor edits); without it: exit 77 (skipped, never passed).
set -u
parity=$1 scen=$2 case=$3
tag=issue46
source "$(dirname "$0")/case_lib.sh"
command -v python3 >/dev/null || { echo "issue46 $case: SKIPPED: no python3"; exit 77; }
# py CODE: a python3 snippet run in $work, with st_edit(path, fn(header, data) -> (header, data))
py() {
  (cd "$work" && python3 -c "
import json, struct, sys
def st_edit(fn, f):
    raw = open(fn, 'rb').read(); n = int.from_bytes(raw[:8], 'little')
    h, data = f(json.loads(raw[8:8 + n]), bytearray(raw[8 + n:]))
    t = json.dumps(h, separators=(',', ':')).encode(); t += b' ' * ((8 - len(t) % 8) % 8)
    open(fn, 'wb').write(len(t).to_bytes(8, 'little') + t + bytes(data))
def scale(h, data, prefix, k):  # every F64 tensor whose name starts with prefix, times k
    for name, v in h.items():
        if name.startswith(prefix):
            a, b = v['data_offsets']; m = (b - a) // 8
            data[a:b] = struct.pack('<%dd' % m, *[k * x for x in struct.unpack('<%dd' % m, data[a:b])])
    return h, data
def manifest(d, f):
    m = json.load(open(d + '/manifest.json')); f(m); json.dump(m, open(d + '/manifest.json', 'w'))
$1") || fail "the edit failed: $1"
}
"$parity" dump "$scen/tiny.json" "$work/ref" --steps 2 >"$work/dump.log" 2>&1 || { cat "$work/dump.log"; fail "dump"; }
"$parity" dump "$scen/tiny.json" "$work/cand" --steps 2 --no-bounds >"$work/dump.log" 2>&1 || fail "dump"
cp -r "$work/cand" "$work/c"
compare() { run 30 "$parity" compare "$work/${1:-ref}" "$work/c" "${@:2}"; }
compare
want 0 "verdict: PASS"  # the control: the undamaged copy passes
case $case in
  path_dotdot)  # once: exit 0, PASS: the candidate's steps were the reference's files
    py "manifest('c', lambda m: [f.update(file='../ref/' + f['file']) for f in m['files']])"
    compare
    want 2 "candidate .*/c/manifest\.json: \\\$\.files\[0\]\.file: \"\.\./ref/init\.safetensors\" climbs out of the dump"
    echo "a ../ entry: exit $rc: $(head -1 "$work/out.log" | cut -c1-160)" ;;
  path_absolute)  # once: exit 0, PASS
    py "manifest('c', lambda m: [f.update(file='$work/ref/' + f['file']) for f in m['files']])"
    compare
    want 2 "\\\$\.files\[0\]\.file: \".*\" is an absolute path"
    echo "an absolute entry: exit $rc" ;;
  path_symlink)  # once: exit 0, PASS (a link to the reference's file)
    rm "$work/c/step_000001.safetensors" && ln -s "$work/ref/step_000001.safetensors" "$work/c/step_000001.safetensors"
    compare
    want 2 "step_000001\.safetensors \(step 1\) is a symbolic link"
    echo "a symlinked step: exit $rc" ;;
  path_hardlink)  # once: exit 0, PASS (the reference's very file, by a hard link)
    rm "$work/c/step_000000.safetensors" && ln "$work/ref/step_000000.safetensors" "$work/c/step_000000.safetensors"
    compare
    want 2 "step_000000\.safetensors \(step 0\) is the reference's own file .*same inode"
    echo "a hard-linked step: exit $rc" ;;
  dtype_swap)  # once: exit 1 with a scale of 5.1e17 (F64 bits read as I64); inputs as F64: 1 too
    py "st_edit('c/step_000000.safetensors', lambda h, d: (h['grads.layers.0.attn.wq'].update(dtype='I64'), (h, d))[1])"
    compare
    want 2 "step 0 .*\"grads\.layers\.0\.attn\.wq\" is stored as I64, expected a float \(F32 or F64\)"
    cp "$work/cand/step_000000.safetensors" "$work/c/"
    py "st_edit('c/step_000000.safetensors', lambda h, d: (h['inputs'].update(dtype='F64'), (h, d))[1])"
    compare
    want 2 "\"inputs\" is stored as F64, expected I64"
    echo "a same-size dtype swap: exit $rc" ;;
  damaged_header)  # once: exit 3 (infrastructure) for a candidate's damaged file
    py "st_edit('c/step_000001.safetensors', lambda h, d: (h['loss'].update(data_offsets=[0, 8]), (h, d))[1])"
    compare
    want 2 "step_000001\.safetensors: tensor '.*': data starts at .*\(step 1 of .*/c\)"
    echo "a damaged candidate file: exit $rc" ;;
  nan_reference)  # once: exit 1 and a root saying "the baseline is finite"
    cp -r "$work/ref" "$work/r"
    py "st_edit('r/step_000001.safetensors', lambda h, d: (d.__setitem__(slice(h['grads.layers.0.attn.wq']['data_offsets'][0], h['grads.layers.0.attn.wq']['data_offsets'][0] + 8), struct.pack('<d', float('nan'))), (h, d))[1])"
    compare r
    want 4 "baseline diverged: the reference .*/r is not finite at step 1: \"grads\.layers\.0\.attn\.wq\" element 0 is nan"
    grep -q "the baseline is finite" "$work/out.log" && fail "the root still says the baseline is finite"
    echo "a NaN in the reference: exit $rc" ;;
  nan_candidate)  # the control of the one above: a NaN in the candidate is a real break, exit 1
    py "st_edit('c/step_000001.safetensors', lambda h, d: (d.__setitem__(slice(h['grads.layers.0.attn.wq']['data_offsets'][0], h['grads.layers.0.attn.wq']['data_offsets'][0] + 8), struct.pack('<d', float('nan'))), (h, d))[1])"
    compare
    want 1 "root: grad attention at step 1 .*non-finite" ;;
  noise_forged)  # once: exit 0, PASS of doubled gradients under a noise of 1e300
    cp -r "$work/ref" "$work/r"
    py "manifest('r', lambda m: [s['noise'].update({k: 1e300 for k in s['noise'] if k.startswith('grad.')}) for s in m['steps']])"
    for t in 0 1; do py "st_edit('c/step_00000$t.safetensors', lambda h, d: scale(h, d, 'grads.', 2.0))"; done
    compare
    want 1 "root: grad head at step 0 .*scale 2\.0"  # held to the real bounds: fails
    compare r  # the forged noise held at its ceiling: the doubled gradients still fail
    want 1 "root: grad head at step 0 .*scale 2\.0"
    py "manifest('r', lambda m: [s['noise'].update({k: -1 for k in s['noise'] if k.startswith('grad.')}) for s in m['steps']])"
    compare r
    want 2 "noise\.grad\.embedding: expected a finite noise >= 0, got -1"
    echo "noise forged to 1e300: exit $rc" ;;
  map_fifo)  # --map, a manifest or a step that is a FIFO: refused at once, never read
    mkfifo "$work/map.json" && ln -s "$work/map.json" "$work/map_link.json"
    compare ref --map "$work/map.json"
    want 2 "map\.json: --map file is a FIFO \(named pipe\), not a regular file"
    compare ref --map "$work/map_link.json"
    want 2 "map_link\.json: --map file is a FIFO"
    rm "$work/c/step_000001.safetensors" && mkfifo "$work/c/step_000001.safetensors"
    compare
    want 2 "step_000001\.safetensors: safetensors file is a FIFO"
    echo "FIFOs: exit $rc after $ms ms" ;;
  sparse_file)  # once: "out of memory: an allocation failed (std::bad_alloc)", exit 3
    truncate -s 100G "$work/c/step_000000.safetensors"
    compare
    want 2 "step_000000\.safetensors \(step 0\) is 107374182400 bytes, more than any file of a dump of this model"
    [ "$ms" -lt 10000 ] || fail "took $ms ms: it read the file"
    echo "a 100 GiB sparse file: exit $rc after $ms ms" ;;
  manifest_entries)  # a step listed twice, a negative step: refused (once: the last one won)
    py "manifest('c', lambda m: m['files'].append(dict(m['files'][1])))"
    compare
    want 2 "\\\$\.files\[3\]\.step: step 0 is listed twice"
    cp "$work/cand/manifest.json" "$work/c/"
    py "manifest('c', lambda m: m['files'][1].update(step=-3))"
    compare
    want 2 "\\\$\.files\[1\]\.step: expected a step number >= 0" ;;
  *) fail "unknown case" ;;
esac
echo "issue46 $case: PASS"
