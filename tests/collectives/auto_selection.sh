#!/usr/bin/env bash
# auto_selection.sh CHORUSRUN CHORUS_BENCH — `auto` picks mesh for small and
# ring for large messages at the documented thresholds, switch_bytes moves the
# switch point, and chorus-bench reports the pick. Results are checked (-c).
set -euo pipefail
run="$1"
bench="$2"

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
# algorithm.switch_bytes overrides the plugins' thresholds.
expect mesh all_reduce 16777216 CHORUS_ALGORITHM_SWITCH_BYTES=32M
expect ring reduce_scatter 16777216 CHORUS_ALGORITHM_SWITCH_BYTES=1M
expect ring all_reduce 4096 CHORUS_ALGORITHM_SWITCH_BYTES=1K
# A pinned collective is not auto.
expect ring all_reduce 64 CHORUS_ALGORITHM_ALL_REDUCE=ring
# Both built-ins are deterministic, so deterministic=true keeps the same picks.
expect mesh all_reduce 64 CHORUS_ALGORITHM_DETERMINISTIC=true
expect ring all_reduce 16777216 CHORUS_ALGORITHM_DETERMINISTIC=true
[ "$fails" -eq 0 ]
