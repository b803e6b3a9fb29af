#!/bin/sh
# The JUnit files of `parity matrix --junit` and `parity zoo --junit` against the common JUnit
# schema (tests/ci/junit.xsd, written for parity from the format's description; issue 30):
# a matrix with a failed layout, a passed one, a skipped world-1 run and golden checks that
# pass and fail, and a zoo with a caught bug and an escaped one, so that every element the
# writer emits is checked. First the schema itself must reject a testcase with file=, the
# attribute that failed Jenkins xunit's schema, so a schema that accepts anything fails here.
# Usage: junit_schema.sh PARITY SOURCE_DIR XSD. Exit 77 (ctest: skipped, never passed) without
# xmllint (Debian libxml2-utils, installed by ci/setup).
set -u
parity=$1 src=$2 xsd=$3
if ! command -v xmllint >/dev/null 2>&1; then
  echo "junit schema: SKIP: xmllint is missing (Debian libxml2-utils; ci/setup installs it)"
  exit 77
fi
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail() { echo "junit schema: FAIL: $*"; exit 1; }

# The control: a file= attribute on a testcase is refused.
printf '%s\n' '<?xml version="1.0" encoding="UTF-8"?>' '<testsuites><testsuite name="s" tests="1">' \
  '<testcase classname="c" name="n" file="x.json" time="0.1"/></testsuite></testsuites>' >"$d/control.xml"
xmllint --noout --schema "$xsd" "$d/control.xml" >"$d/control.log" 2>&1 &&
  fail "the schema accepts a testcase with file=: it checks nothing"
grep -q "attribute 'file'" "$d/control.log" || { cat "$d/control.log"; fail "the control failed for another reason"; }

# The matrix: fsdp4 fails (dp_averaged_twice), tp2 passes, tiny is world 1 (skipped); with
# --golden every one is also checked against its golden (fsdp4's fails with the bug on).
mkdir -p "$d/m/scenarios" "$d/m/golden"
for s in fsdp4 tp2 tiny; do
  cp "$src/scenarios/$s.json" "$d/m/scenarios/" && cp "$src/golden/$s.json" "$d/m/golden/" || fail "copying $s"
done
"$parity" matrix "$d/m/scenarios" -j 2 --steps 2 --golden --inject dp_averaged_twice --out "$d/m/logs" \
  --junit "$d/matrix.xml" >"$d/matrix.log" 2>&1
rc=$?
[ $rc -eq 1 ] || { cat "$d/matrix.log"; fail "parity matrix: exit $rc, expected 1 (one layout fails)"; }
for what in "<failure " "<skipped " "classname=\"golden\""; do
  grep -q "$what" "$d/matrix.xml" || { cat "$d/matrix.xml"; fail "matrix.xml has no $what: an element unchecked"; }
done

# The zoo: dp_averaged_twice caught in fsdp4 (passes); the same bug in a layout without data
# parallelism (tp2 under fsdp4's name) escapes (a failure).
"$parity" zoo dp_averaged_twice --scenarios "$src/scenarios" --out "$d/z1" --junit "$d/zoo.xml" >"$d/zoo.log" 2>&1
rc=$?
[ $rc -eq 0 ] || { cat "$d/zoo.log"; fail "parity zoo (caught): exit $rc, expected 0"; }
mkdir -p "$d/esc" && cp "$src/scenarios/tp2.json" "$d/esc/fsdp4.json"
"$parity" zoo dp_averaged_twice --scenarios "$d/esc" --out "$d/z2" --junit "$d/zoo_escaped.xml" >"$d/zoo2.log" 2>&1
rc=$?
[ $rc -eq 1 ] || { cat "$d/zoo2.log"; fail "parity zoo (escaped): exit $rc, expected 1"; }

errors=0
for f in matrix.xml zoo.xml zoo_escaped.xml; do
  if xmllint --noout --schema "$xsd" "$d/$f" >"$d/$f.lint" 2>&1; then
    echo "$f: valid ($(grep -c '<testcase ' "$d/$f") testcases)"
  else
    n=$(grep -c "validity error" "$d/$f.lint")
    errors=$((errors + n))
    echo "$f: $n schema errors"
    head -5 "$d/$f.lint"
  fi
done
[ $errors -eq 0 ] || fail "$errors schema errors"
echo "junit schema: ok (matrix and zoo valid against $(basename "$xsd"); the control with file= refused)"
