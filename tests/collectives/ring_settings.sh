#!/usr/bin/env bash
# ring_settings.sh CHORUSRUN CHORUS_BENCH — the ring's settings
# (algorithm.ring.*) are checked once, when the communicator is made: a bad
# value or an unknown key fails init on all 4 ranks, naming the key, even
# when no collective is pinned to the ring; a good value runs, with results
# checked element by element on every rank.
set -uo pipefail
run="$1"
bench="$2"
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=script_lib.sh
. "$here/script_lib.sh"
init_env=(env CHORUS_TRANSPORT=tcp)

expect_init_failure "ring: algorithm.ring.bidirectional = 'yes'" \
  CHORUS_ALGORITHM_RING_BIDIRECTIONAL=yes
expect_init_failure "ring: unknown setting algorithm.ring.pipeline" \
  CHORUS_ALGORITHM_RING_PIPELINE=4
# Not pinned anywhere (auto, mesh for 64 bytes): still refused at init.
expect_init_failure "ring: algorithm.ring.bidirectional = '2'" \
  CHORUS_ALGORITHM_RING_BIDIRECTIONAL=2 CHORUS_ALGORITHM_ALL_REDUCE=mesh

# A good value runs, every element checked on every rank.
if env CHORUS_TRANSPORT=tcp CHORUS_ALGORITHM_RING_BIDIRECTIONAL=true CHORUS_ALGORITHM_CHANNELS=2 \
  "$run" -n 4 --timeout 300 -- "$bench" -a ring -c -b 8 -e 4M -f 16 -n 2 -w 1 >"$tmp/good" 2>&1; then
  expect_checked "$tmp/good" 4 "algorithm.ring.bidirectional = true over 2 channels"
else
  bad "algorithm.ring.bidirectional = true over 2 channels failed"
  tail -8 "$tmp/good"
fi

finish
