#!/usr/bin/env bash
# The ring-only scale guard: every collective pinned to the ring (which
# declares CHORUS_ALGO_PEERS_RING), two channels. ring_peers_check checks on
# every rank that the communicator (and each half of a split) opened
# exactly 2 x channels data endpoints (1 x channels at 2 ranks), a notice
# endpoint to each ring neighbour only (so data + notice = 2 x channels + 2
# from 4 ranks up, whatever N), two point-to-point endpoints opened per peer
# (connected: none over tcp and shm, which connect them on first use), and a checked ring
# all_reduce; this script adds the file descriptors, and that data + notice
# and the connected point-to-point pairs are the same at 16 and 64 ranks. The mesh runs (--mesh) check
# that a communicator whose algorithms declare every peer connects only its
# ring neighbours' data endpoints until its first mesh call, and every peer
# from then on (docs/scale.md, "Data endpoints on first use"), and that its
# notice endpoints to non-neighbours connect only when a signature needs
# them (a broadcast: the root's pairs). The declared runs (--declared, tcp
# and auto at 16 and 64 ranks) pin every call to the ring but declare every
# peer: their descriptors must not grow with N either ("Notice endpoints on
# first use").
#   ring_peers.sh CHORUSRUN RING_PEERS_CHECK tcp   2, 16 and 64 ranks, fd growth;
#                                                  16 ranks untagged (every peer);
#                                                  mesh at 6 ranks
#   ring_peers.sh CHORUSRUN RING_PEERS_CHECK shm   16 and 64 ranks, fd growth;
#                                                  mesh at 6 ranks
#   ring_peers.sh CHORUSRUN RING_PEERS_CHECK auto  as tcp; the caller's
#                                                  environment picks auto's
#                                                  sub-transports and sets
#                                                  TAGGED_LAZY_EXPECT
#
# Over shm an opened endpoint holds no descriptor either (its segment is a
# range of the context's one memory file, docs/shm.md), and a connected one
# holds a pidfd of its peer: the same bound applies.
#
# The fd bound (tcp): each tcp endpoint is one connected socket, and an
# endpoint that is opened but not connected holds none. A ring-only rank
# connects its ring neighbours' data and notice endpoints at init; the
# tagged engine's two endpoints per peer are opened for every peer but
# connected on first use (docs/scale.md), and this job uses no tagged
# operation (endpoints.p2p_connected is 0, checked at both sizes). The
# bootstrap's sockets (on rank 0 one per rank) are closed once the
# communicator is up (Bootstrap::close_links). So from 16 to 64 ranks every
# rank, rank 0 included, holds the same descriptors: the bound is 8 of slack
# for the runtime's own. A return of eagerly connected
# point-to-point endpoints would add 2 x 48 = 96 fds, of data endpoints to
# every peer 96 (two channels), of notice endpoints to every peer 48: each
# fails the bound.
set -u
chorusrun=$1 check=$2 transport=$3
out=$(mktemp /tmp/chorus-ring-peers.XXXXXX)
trap 'rm -f "$out"' EXIT
fails=0
run() {  # ranks [extra option] -> the rank-0 "fds" line in $line
  line=""
  mode=--ring
  case "${2:-}" in --mesh | --declared) mode="" ;; esac
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
  run 6 --mesh
else
  run 2
  run 6 --mesh
  # point_to_point.tagged = false: untagged send/recv needs every peer.
  run 16 --untagged
fi
field() { echo "$1" | awk -v k="$2" '{ for (i = 1; i < NF; ++i) if ($i == k) print $(i + 1) }'; }
if [ "$transport" != shm ]; then
  # Every peer declared, the ring used: the endpoints to non-neighbours
  # (data and notice) are opened but never connected, so no descriptor.
  run 16 --declared && dsmall=$line
  run 64 --declared && dlarge=$line
  if [ -n "${dsmall:-}" ] && [ -n "${dlarge:-}" ]; then
    others=$(($(field "$dlarge" max) - $(field "$dsmall" max)))
    root=$(($(field "$dlarge" rank0) - $(field "$dsmall" rank0)))
    echo "declared mesh, ring used: fd growth 16 -> 64 ranks: other ranks (max) +$others (bound 8), rank 0 +$root (bound 8)"
    if [ "$others" -gt 8 ] || [ "$root" -gt 8 ]; then
      echo "FAIL: a rank whose algorithms declare every peer but use the ring holds descriptors that grow with N"
      fails=$((fails + 1))
    fi
  fi
fi
run 16 && small=$line
run 64 && large=$line
if [ -n "${small:-}" ] && [ -n "${large:-}" ]; then
  r0_small=$(field "$small" rank0) r0_large=$(field "$large" rank0)
  max_small=$(field "$small" max) max_large=$(field "$large" max)
  others=$((max_large - max_small)) root=$((r0_large - r0_small))
  echo "fd growth 16 -> 64 ranks: other ranks (max) +$others (bound 8), rank 0 +$root (bound 8)"
  if [ "$others" -gt 8 ] || [ "$root" -gt 8 ]; then
    echo "FAIL: a ring-only rank's file descriptors grow with N"
    fails=$((fails + 1))
  fi
  p2p_small=$(field "$small" p2p_connected) p2p_large=$(field "$large" p2p_connected)
  echo "point-to-point pairs connected per rank (no tagged traffic): $p2p_small at 16 ranks, $p2p_large at 64"
  if [ "$p2p_small" != 0 ] || [ "$p2p_large" != 0 ]; then
    echo "FAIL: tagged point-to-point pairs were connected although no tagged operation ran"
    fails=$((fails + 1))
  fi
  ep_small=$(field "$small" data+notice) ep_large=$(field "$large" data+notice)
  echo "data + notice endpoints per rank: $ep_small at 16 ranks, $ep_large at 64"
  if [ -z "$ep_small" ] || [ "$ep_small" != "$ep_large" ]; then
    echo "FAIL: a ring-only rank's data + notice endpoints depend on N"
    fails=$((fails + 1))
  fi
fi
[ "$fails" -eq 0 ] && echo PASS
exit $((fails > 0))
