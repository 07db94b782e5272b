#!/usr/bin/env bash
# Rank VICTIM's interface is taken down (`ip -n NS link set eth0 down`) in
# the middle of a collective loop and stays down until every rank has ended,
# longer than timeout.collective. No packet is lost "loudly" (no RST, no
# FIN), so only the deadline can end the wait.
#
# Every rank, the cut-off one included, must exit non-zero with
# CHORUS_ERR_TIMEOUT or CHORUS_ERR_PEER_LOST and a message that names at
# least one other rank, and at least one of the other ranks must name the
# victim. The statuses carry the verdict; time only guards against a hang:
# BOUND_S = 10 x TIMEOUT_S after the link went down (an idle host needs
# TIMEOUT_S plus well under a second).
#
# Why not "every other rank names the victim": a rank only knows whom it is
# waiting for. In a ring, the victim's downstream neighbour waits for the
# victim, but the next rank waits for that neighbour (alive, but stuck) and
# says so; and a rank that times out exits and closes its connections, so a
# neighbour may report peer-lost for it before its own deadline. Both are
# printed and counted.
# usage: link_down.sh BENCH NRANKS VICTIM [TIMEOUT_S]
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$here/lib.sh"

bench="$1"; n="$2"; victim="$3"; timeout_s="${4:-3}"
bound_s=$((10 * timeout_s))
netns_init "$bench"
netns_create "$n"

netns_start_ranks "CHORUS_TIMEOUT_INIT=20 CHORUS_TIMEOUT_COLLECTIVE=$timeout_s" -- \
  -c -b 256K -e 256K -n 1000000 -w 0
# The link goes down only once data is flowing: after the first size's
# warm-up there is no line to wait for (one size), so wait for the header and
# a moment of traffic.
netns_wait_for_output 0 "^# chorus-bench" 30
sleep 1
for ((r = 0; r < n; ++r)); do
  netns_rank_done "$r" && { echo "FAIL: rank $r ended before the link went down"; netns_dump; exit 1; }
done
t_down=${EPOCHREALTIME/./}
netns_link_down "$victim" || netns_fail "ip link set down"
netns_log "rank $victim's eth0 is down"
failed=0
netns_wait_until $((t_down + bound_s * 1000000)) || failed=$((failed + 1))
held_ms=$(((${EPOCHREALTIME/./} - t_down) / 1000))
netns_link_up "$victim"
netns_log "rank $victim's eth0 is up again after ${held_ms} ms"
((held_ms > timeout_s * 1000)) || { echo "FAIL: the link was down only ${held_ms} ms, not longer than the timeout"; failed=$((failed + 1)); }

times_ms=()
named_victim=0
for ((r = 0; r < n; ++r)); do
  rc=$(netns_rank_rc "$r")
  took_ms=$((($(netns_rank_end_us "$r") - t_down) / 1000))
  times_ms+=("$took_ms")
  err=$(netns_rank_error "$r")
  # "still waiting to receive from rank(s) 2" / "sends to rank(s) 2 not yet
  # taken" (deadline), "rank 2 is lost" (peer lost).
  named=$(grep -oE "rank\(s\) [0-9, ]+|rank [0-9]+ is lost" <<<"$err" | grep -oE "[0-9]+" | sort -un | tr '\n' ' ')
  bad=""
  [ "$rc" != 0 ] || bad="exited 0"
  [[ -z "$bad" && ( "$err" == *CHORUS_ERR_TIMEOUT* || "$err" == *CHORUS_ERR_PEER_LOST* ) ]] || bad="${bad:-neither timeout nor peer-lost}"
  if [ -z "$bad" ]; then
    others=$(tr ' ' '\n' <<<"$named" | grep -vx "$r" | grep -c .)
    ((others > 0)) || bad="names no other rank (names: ${named:-none})"
    [[ "$r" != "$victim" && " $named" == *" $victim "* ]] && named_victim=$((named_victim + 1))
  fi
  if [ -z "$bad" ]; then
    echo "ok: rank $r after ${took_ms} ms: ${err:0:240}"
  else
    echo "FAIL: rank $r $bad after ${took_ms} ms: $err"; failed=$((failed + 1))
  fi
done
read -r tmin tmed tmax < <(netns_stats "${times_ms[@]}")
echo "link_down stats: rank $victim cut off, timeout.collective $timeout_s s;" \
  "time to error min/median/max = $tmin/$tmed/$tmax ms (bound $((bound_s * 1000)) ms);" \
  "$named_victim of $((n - 1)) other ranks named rank $victim; $failed failures"
((named_victim > 0)) || { echo "FAIL: no rank named rank $victim"; failed=$((failed + 1)); }
[ "$failed" -eq 0 ]
