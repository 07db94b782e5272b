#!/usr/bin/env bash
# auto_selection.sh CHORUSRUN CHORUS_BENCH PREFERRED_DIR — `auto` picks mesh
# for small and ring for large messages at the documented thresholds,
# switch_bytes moves the switch point, and chorus-bench reports the pick.
# PREFERRED_DIR holds libchorus-algorithm-preferred.so, a third-party plugin
# that answers 1000 for all_reduce and "never" otherwise: on the plugin path,
# `auto` must choose it for all_reduce and nothing else, a broken file beside
# it must only cost a warning, and CHORUS_LOG=info must show each choice once
# per rank and size class. Results are checked (-c).
set -euo pipefail
run="$1"
bench="$2"
preferred_dir="$3"

# pick COLL BYTES [ENV...] -> the algorithm chorus-bench reports for that size
pick() {
  local coll="$1" bytes="$2"
  shift 2
  env "$@" "$run" -n 4 --timeout 120 -- "$bench" --coll "$coll" -c -b "$bytes" -e "$bytes" -n 1 -w 0 --no-inplace --json |
    grep -o '"algorithm":"[a-z_]*"' | head -n1 | cut -d'"' -f4
}

fails=0
expect() {  # expect WANT COLL BYTES [ENV...]
  local want="$1"
  shift
  local got
  got="$(pick "$@")"
  if [ "$got" = "$want" ]; then
    echo "ok: $* -> $got"
  else
    echo "FAIL: $* -> '$got', expected $want"
    fails=$((fails + 1))
  fi
}

# all_reduce: mesh up to 4 MiB (one shot to 64 KiB), ring above (up to 8 ranks;
# docs/tuning.md).
expect mesh all_reduce 4194304
expect ring all_reduce 16777216
# all_gather: the size is the gathered buffer, 4 ranks, so 4 MiB is 1 MiB per
# rank (mesh) and 16 MiB is 4 MiB per rank (ring). reduce_scatter stays on the
# mesh at every size up to 8 ranks.
expect mesh all_gather 4194304
expect ring all_gather 16777216
expect mesh reduce_scatter 16777216
# Over shared memory (one host, shm for every peer) and up to 4 ranks the
# mesh keeps all_reduce up to 64 MiB per rank; all_gather's threshold stays.
expect mesh all_reduce 16777216 CHORUS_TRANSPORT=shm
expect ring all_gather 16777216 CHORUS_TRANSPORT=shm
expect ring all_reduce 16777216 CHORUS_TRANSPORT=tcp
# algorithm.switch_bytes overrides the plugins' thresholds.
expect mesh all_reduce 16777216 CHORUS_ALGORITHM_SWITCH_BYTES=32M
expect ring reduce_scatter 16777216 CHORUS_ALGORITHM_SWITCH_BYTES=1M
expect ring all_reduce 4096 CHORUS_ALGORITHM_SWITCH_BYTES=1K
# A pinned collective is not auto.
expect ring all_reduce 64 CHORUS_ALGORITHM_ALL_REDUCE=ring
# Both built-ins are deterministic, so deterministic=true keeps the same picks.
expect mesh all_reduce 64 CHORUS_ALGORITHM_DETERMINISTIC=true
expect ring all_reduce 16777216 CHORUS_ALGORITHM_DETERMINISTIC=true

# A plugin on the plugin path takes part in auto.
expect preferred all_reduce 64 CHORUS_PLUGIN_PATH="$preferred_dir"
expect preferred all_reduce 16777216 CHORUS_PLUGIN_PATH="$preferred_dir"
expect mesh all_gather 4194304 CHORUS_PLUGIN_PATH="$preferred_dir"
expect ring all_reduce 64 CHORUS_PLUGIN_PATH="$preferred_dir" CHORUS_ALGORITHM_ALL_REDUCE=ring

# A broken algorithm file beside it: still chosen, every rank warns naming it.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$preferred_dir/libchorus-algorithm-preferred.so" "$tmp/"
head -c 200 "$tmp/libchorus-algorithm-preferred.so" >"$tmp/libchorus-algorithm-broken.so"
expect preferred all_reduce 64 CHORUS_PLUGIN_PATH="$tmp"
CHORUS_PLUGIN_PATH="$tmp" CHORUS_LOG=info "$run" -n 4 --timeout 120 -- \
  "$bench" --coll all_reduce -c -b 64 -e 64 -n 5 -w 2 --no-inplace >"$tmp/out" 2>&1 || {
  echo "FAIL: the run with a broken plugin beside 'preferred' failed:"
  cat "$tmp/out"
  fails=$((fails + 1))
}
count() { grep -c -- "$1" "$tmp/out" || true; }
warned=$(count "algorithm plugin 'broken' on the plugin path is left out of auto")
chose=$(count "auto: all_reduce of 64 bytes (size class 7) runs 'preferred' (preferences: ring 50, mesh")
if [ "$warned" = 4 ] && [ "$chose" = 4 ]; then
  echo "ok: 4 ranks warn about 'broken' and log the all_reduce choice once each"
else
  echo "FAIL: expected 4 warnings and 4 choice lines, got $warned and $chose:"
  cat "$tmp/out"
  fails=$((fails + 1))
fi
[ "$fails" -eq 0 ]
