#!/bin/sh
# `parity plot` draws a group of scenarios (the pipeline and pairwise goldens, one panel each) with
# gnuplot, and gnuplot, run again on the script it wrote, says nothing: no warning, no error. Without gnuplot: exit 77
# (ctest SKIP_RETURN_CODE), skipped, never passed. Usage: plot_renders.sh PARITY SOURCE_DIR
parity=$1 src=$2
command -v gnuplot > /dev/null 2>&1 || { echo "SKIP: no gnuplot (Debian gnuplot-nox)"; exit 77; }
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
"$parity" plot "$src"/scenarios/pw*.json "$src"/scenarios/pp*.json -o "$dir/group" || exit 1
test -s "$dir/group.png" && test -s "$dir/group.svg" || { echo "FAIL: no figure"; exit 1; }
n=$(ls "$src"/scenarios/pw*.json "$src"/scenarios/pp*.json | wc -l)
# a square-ish grid: the smallest c with c x c >= n columns (34 files: 6; 40: 7), as many rows as it takes
c=1; while [ $((c * c)) -lt "$n" ]; do c=$((c + 1)); done
grep -q "^# small multiples: $n panels, $c columns x $(( (n + c - 1) / c )) rows\$" "$dir/group.gp" ||
  { echo "FAIL: not $n panels in $c columns"; grep '^# small multiples' "$dir/group.gp"; exit 1; }
gnuplot "$dir/group.gp" > "$dir/log" 2>&1 || { cat "$dir/log"; exit 1; }
if test -s "$dir/log"; then echo "FAIL: gnuplot said:"; cat "$dir/log"; exit 1; fi
echo "PASS: $n panels drawn, gnuplot silent"
