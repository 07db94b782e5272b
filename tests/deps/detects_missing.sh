#!/usr/bin/env bash
# detects_missing.sh SOURCE_DIR PACKAGE FILE — ctest deps.detects_missing.
# Runs check_deps.py against a copy of scripts/install-deps.sh with PACKAGE
# removed from it; passes only when the check fails and its report names
# PACKAGE together with FILE (a file of the tree that needs it).
set -uo pipefail
src="${1:?usage: $0 SOURCE_DIR PACKAGE FILE}"
pkg="${2:?}"
file="${3:?}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
grep -qw -- "$pkg" "$src/scripts/install-deps.sh" || { echo "FAIL: $pkg is not in install-deps.sh to begin with"; exit 1; }
sed -E "s/(^|[[:space:]])$pkg([[:space:]]|\$)/\1\2/" "$src/scripts/install-deps.sh" >"$work/install-deps.sh"
if grep -qw -- "$pkg" <(bash "$work/install-deps.sh" --list); then
  echo "FAIL: could not take $pkg out of the copy"; exit 1
fi
/usr/bin/python3 "$src/tests/deps/check_deps.py" "$src" --script "$work/install-deps.sh" \
  --script "$src/scripts/install-softroce.sh" >"$work/out" 2>&1
rc=$?
cat "$work/out"
if [ "$rc" -eq 0 ]; then
  echo "FAIL: check_deps.py passed with $pkg missing from the install script"; exit 1
fi
if ! grep -E "^MISSING: package $pkg .*$file" "$work/out" >/dev/null; then
  echo "FAIL: check_deps.py failed (exit $rc) but did not name $pkg and $file"; exit 1
fi
echo "ok: without $pkg the check fails (exit $rc) and names it with $file"
