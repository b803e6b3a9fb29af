#!/bin/sh
# Runs python3 with ARGS using the first interpreter that has PyYAML (Debian python3-yaml,
# installed by ci/setup): `python3` on PATH, else /usr/bin/python3 (another python3 on PATH
# may shadow Debian's). None: exit 77, which ctest shows as skipped, never passed.
for py in python3 /usr/bin/python3; do
  if "$py" -c 'import yaml' >/dev/null 2>&1; then exec "$py" "$@"; fi
done
echo "SKIP: no python3 with PyYAML (Debian python3-yaml; ci/setup installs it)"
exit 77
