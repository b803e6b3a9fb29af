#!/usr/bin/env bash
# ci/check_format in a clone owned by another user (a CI container's checkout: git refuses it,
# "dubious ownership"): it must fail, never print "format: ok" having read no file (issue 42);
# with the workspace a safe.directory (what the workflow does) it checks the files.
#   format_foreign_owner.sh REPO
# Needs root (chown) and git: else exit 77, shown as skipped.
set -u
repo=$1
[ "$(id -u)" -eq 0 ] && command -v git >/dev/null || { echo "format_foreign_owner: needs root and git"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git clone -q "$repo" "$work/clone" || { echo "format_foreign_owner: FAIL: cannot clone $repo"; exit 1; }
chown -R nobody "$work/clone"
mkdir "$work/home"
out=$(HOME=$work/home XDG_CONFIG_HOME=$work/home GIT_CONFIG_NOSYSTEM=1 "$work/clone/ci/check_format" 2>&1); rc=$?
echo "refused clone: exit $rc: $(tail -1 <<<"$out")"
[ $rc -ne 0 ] || { echo "format_foreign_owner: FAIL: passed in a clone git refuses"; exit 1; }
grep -q "format: ok" <<<"$out" && { echo "format_foreign_owner: FAIL: said ok"; exit 1; }
printf '[safe]\n\tdirectory = %s\n' "$work/clone" >"$work/home/.gitconfig"
out=$(HOME=$work/home XDG_CONFIG_HOME=$work/home GIT_CONFIG_NOSYSTEM=1 "$work/clone/ci/check_format" 2>&1); rc=$?
echo "safe.directory: exit $rc: $(tail -1 <<<"$out")"
grep -qE "^format: ok \([1-9][0-9]* files" <<<"$out" || { echo "format_foreign_owner: FAIL: no files checked"; exit 1; }
echo "format_foreign_owner: PASS"
