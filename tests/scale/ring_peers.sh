#!/usr/bin/env bash
# The ring-only scale guard: every collective pinned to the ring (which
# declares CHORUS_ALGO_PEERS_RING), two channels. ring_peers_check checks on
# every rank that the communicator (and each half of a split) opened
# exactly 2 x channels data endpoints (1 x channels at 2 ranks), a notice
# endpoint to each ring neighbour only (so data + notice = 2 x channels + 2
# from 4 ranks up, whatever N), two point-to-point endpoints per peer, and a
# checked ring all_reduce; this script adds the file descriptors and that
# data + notice is the same at 16 and 64 ranks. The mesh runs (--mesh) check
# that a communicator whose algorithms declare every peer connects only its
# ring neighbours' data endpoints until its first mesh call, and every peer
# from then on (docs/scale.md, "Data endpoints on first use").
#   ring_peers.sh CHORUSRUN RING_PEERS_CHECK tcp   2, 16 and 64 ranks, fd growth;
#                                                  16 ranks untagged (every peer);
#                                                  mesh at 6 ranks
#   ring_peers.sh CHORUSRUN RING_PEERS_CHECK shm   16 ranks; mesh at 6 ranks
#
# The fd bound (tcp): each tcp endpoint is one connected socket. From 16 to
# 64 ranks a rank gains 48 peers, and per peer exactly two endpoints that
# are still opened for every peer (the tagged engine's control and data
# endpoints): 2 x 48 = 96 fds, plus 16 of slack for the transport's and the
# runtime's own descriptors (listeners, epoll, eventfds, which do not grow
# with N). Rank 0 also holds one bootstrap socket per rank (docs/scale.md),
# so its bound is 3 x 48 + 16. A return of data endpoints to every peer
# would add 2 x 48 = 96 fds (two channels), one of notice endpoints to every
# peer 48: either fails the bound.
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
    echo "fd growth 16 -> 64 ranks: other ranks (max) +$others (bound $((2 * 48 + 16))), rank 0 +$root (bound $((3 * 48 + 16)))"
    if [ "$others" -gt $((2 * 48 + 16)) ] || [ "$root" -gt $((3 * 48 + 16)) ]; then
      echo "FAIL: file descriptors grow faster than the point-to-point endpoints"
      fails=$((fails + 1))
    fi
    ep_small=$(field "$small" data+notice) ep_large=$(field "$large" data+notice)
    echo "data + notice endpoints per rank: $ep_small at 16 ranks, $ep_large at 64"
    if [ -z "$ep_small" ] || [ "$ep_small" != "$ep_large" ]; then
      echo "FAIL: a ring-only rank's data + notice endpoints depend on N"
      fails=$((fails + 1))
    fi
  fi
fi
[ "$fails" -eq 0 ] && echo PASS
exit $((fails > 0))
