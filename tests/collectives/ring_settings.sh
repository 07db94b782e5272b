#!/usr/bin/env bash
# ring_settings.sh CHORUSRUN CHORUS_BENCH — the ring's settings
# (algorithm.ring.*) are checked once, when the communicator is made: a bad
# value or an unknown key fails init on all 4 ranks, naming the key, even
# when no collective is pinned to the ring; a good value runs, with results
# checked element by element on every rank.
set -uo pipefail
run="$1"
bench="$2"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok: $*"; }
bad() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}
# Each rank prints its own exit status: chorusrun stops the others once one
# fails, and every rank must be heard from.
# shellcheck disable=SC2016
wrap='"$@"; echo "bench exited $?"'

expect_init_failure() {  # expect_init_failure TEXT ENV...
  local text="$1"
  shift
  env CHORUS_TRANSPORT=tcp "$@" "$run" -n 4 --timeout 120 -- \
    sh -c "$wrap" rank "$bench" --coll all_reduce -b 64 -e 64 -n 1 -w 0 >"$tmp/init" 2>&1
  if [ "$(grep -c "bench exited 0" "$tmp/init")" != 0 ]; then
    bad "$* was accepted"
    tail -8 "$tmp/init"
    return
  fi
  local n
  n=$(grep -c -- "$text" "$tmp/init" || true)
  if [ "$n" -ge 4 ]; then ok "$*: init fails on all 4 ranks with \"$text\""; else
    bad "$*: $n of 4 ranks said \"$text\""
    tail -8 "$tmp/init"
  fi
}
expect_init_failure "ring: algorithm.ring.bidirectional = 'yes'" \
  CHORUS_ALGORITHM_RING_BIDIRECTIONAL=yes
expect_init_failure "ring: unknown setting algorithm.ring.pipeline" \
  CHORUS_ALGORITHM_RING_PIPELINE=4
# Not pinned anywhere (auto, mesh for 64 bytes): still refused at init.
expect_init_failure "ring: algorithm.ring.bidirectional = '2'" \
  CHORUS_ALGORITHM_RING_BIDIRECTIONAL=2 CHORUS_ALGORITHM_ALL_REDUCE=mesh

# A good value runs, every element checked on every rank.
if env CHORUS_TRANSPORT=tcp CHORUS_ALGORITHM_RING_BIDIRECTIONAL=true CHORUS_ALGORITHM_CHANNELS=2 \
  "$run" -n 4 --timeout 300 -- "$bench" -a ring -c -b 8 -e 4M -f 16 -n 2 -w 1 >"$tmp/good" 2>&1 &&
  [ "$(grep -c "# Wrong elements: 0$" "$tmp/good")" -ge 4 ]; then
  ok "algorithm.ring.bidirectional = true over 2 channels: 4 ranks report 0 wrong elements"
else
  bad "algorithm.ring.bidirectional = true over 2 channels failed"
  tail -8 "$tmp/good"
fi

echo "$fails failure(s)"
[ "$fails" = 0 ]
