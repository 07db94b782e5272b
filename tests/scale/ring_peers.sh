#!/usr/bin/env bash
# The ring-only scale guard: every collective pinned to the ring (which
# declares CHORUS_ALGO_PEERS_RING), two channels. ring_peers_check checks on
# every rank that the communicator (and each half of a split) opened
# exactly 2 x channels data endpoints (1 x channels at 2 ranks), one notice
# endpoint and two point-to-point endpoints per peer, and a checked ring
# all_reduce; this script adds the file descriptors. The mesh runs
# (--mesh) check that a communicator whose algorithms declare every peer
# connects only its ring neighbours until its first mesh call, and every peer
# from then on (docs/scale.md, "Data endpoints on first use").
#   ring_peers.sh CHORUSRUN RING_PEERS_CHECK tcp   2, 16 and 64 ranks, fd growth;
#                                                  16 ranks untagged (every peer);
#                                                  mesh at 6 ranks
#   ring_peers.sh CHORUSRUN RING_PEERS_CHECK shm   16 ranks; mesh at 6 ranks
#
# The fd bound (tcp): each tcp endpoint is one connected socket. From 16 to
# 64 ranks a rank gains 48 peers, and per peer exactly three endpoints that
# are still opened for every peer (a notice endpoint, the tagged engine's
# control and data endpoints): 3 x 48 = 144 fds, plus 16 of slack for the
# transport's and the runtime's own descriptors (listeners, epoll, eventfds,
# which do not grow with N). Rank 0 also holds one bootstrap socket per rank
# (docs/scale.md), so its bound is 4 x 48 + 16. A return of data endpoints
# to every peer would add 2 x 48 = 96 fds (two channels) and fail the bound.
set -u
chorusrun=$1 check=$2 transport=$3
out=$(mktemp /tmp/chorus-ring-peers.XXXXXX)
trap 'rm -f "$out"' EXIT
fails=0
run() {  # ranks [extra option] -> the rank-0 "fds" line in $line
  line=""
  mode=--ring
  [ "${2:-}" = --mesh ] && mode=""
  if ! env CHORUS_TRANSPORT="$transport" "$chorusrun" -n "$1" --timeout 150 -- \
      "$check" $mode --channels 2 ${2:+"$2"} >"$out" 2>&1; then
    cat "$out"
    echo "FAIL: the $1-rank ring-only job over $transport failed"
    fails=$((fails + 1))
    return 1
  fi
  grep -q "ring_peers: every rank passed" "$out" || {
    cat "$out"
    echo "FAIL: $1 ranks over $transport: some rank's check failed"
    fails=$((fails + 1))
    return 1
  }
  line=$(grep -o "ring_peers: ranks .*fds.*" "$out")
  echo "$line"
}
if [ "$transport" = shm ]; then
  run 16
  run 6 --mesh
else
  run 2
  run 6 --mesh
  # point_to_point.tagged = false: untagged send/recv needs every peer.
  run 16 --untagged
  run 16 && small=$line
  run 64 && large=$line
  if [ -n "${small:-}" ] && [ -n "${large:-}" ]; then
    field() { echo "$1" | awk -v k="$2" '{ for (i = 1; i < NF; ++i) if ($i == k) print $(i + 1) }'; }
    r0_small=$(field "$small" rank0) r0_large=$(field "$large" rank0)
    max_small=$(field "$small" max) max_large=$(field "$large" max)
    others=$((max_large - max_small)) root=$((r0_large - r0_small))
    echo "fd growth 16 -> 64 ranks: other ranks (max) +$others (bound $((3 * 48 + 16))), rank 0 +$root (bound $((4 * 48 + 16)))"
    if [ "$others" -gt $((3 * 48 + 16)) ] || [ "$root" -gt $((4 * 48 + 16)) ]; then
      echo "FAIL: file descriptors grow faster than the notice and point-to-point endpoints"
      fails=$((fails + 1))
    fi
  fi
fi
[ "$fails" -eq 0 ] && echo PASS
exit $((fails > 0))
