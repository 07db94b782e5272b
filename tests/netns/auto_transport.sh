#!/usr/bin/env bash
# transport.name = "auto" across network namespaces (each namespace counts as
# a host: docs/configuration.md). Two runs, both checked element by element:
#   1 rank in each of 2 namespaces: every peer over tcp, none over shm;
#   2 ranks in each of 2 namespaces: shm to the rank in the same namespace,
#   tcp to the two in the other.
# Each rank's info log line ("auto: shm to rank 1; tcp to ranks 2,3") must
# name exactly those peers, and every rank must report 0 wrong elements.
# tests/netns/auto_hosts.sh does the same at 8 namespaces x 4 ranks, for
# every collective, plus a killed rank.
# usage: auto_transport.sh BENCH [PER_NS...]   (default: 1 2, both runs)
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$here/lib.sh"

bench="$1"
netns_init "$bench"
netns_create 2

settings="CHORUS_TRANSPORT=auto CHORUS_LOG=info CHORUS_TIMEOUT_INIT=60 CHORUS_TIMEOUT_COLLECTIVE=60"
failed=0
# run PER_NS: PER_NS ranks in each of the 2 namespaces (rank r in namespace
# r / PER_NS, bound to its address); each rank's "auto: ..." line must be
# netns_auto_expected's.
run() {
  local per="$1" r bad=0 line expected
  netns_start_hosts "$per" "$settings" -- -c --coll all_reduce -b 4 -e 4M -f 16 -n 3 -w 1
  netns_wait_ranks 120 || bad=1
  for ((r = 0; r < NETNS_RANKS; ++r)); do
    rc=$(netns_rank_rc "$r")
    [ "$rc" = 0 ] || { echo "FAIL: rank $r exited $rc: $(netns_rank_error "$r")"; bad=1; }
    line=$(netns_auto_logged "$r")
    expected=$(netns_auto_expected "$r")
    if [ "$line" = "$expected" ]; then
      echo "ok: rank $r (namespace $(netns_host_of "$r")): $line"
    else
      echo "FAIL: rank $r logged '$line', expected '$expected'"; bad=1
    fi
  done
  grep -q "checking every iteration on every rank" "$NETNS_DIR/out.0" || { echo "FAIL: rank 0 did not check the data"; bad=1; }
  for ((r = 0; r < NETNS_RANKS; ++r)); do
    grep -q "^# Wrong elements: 0$" "$NETNS_DIR/out.$r" || { echo "FAIL: rank $r reported wrong elements or no check"; bad=1; }
  done
  sed 's/^/    /' "$NETNS_DIR/out.0"
  if [ "$bad" = 0 ]; then
    echo "ok: all_reduce over auto, $per rank(s) per namespace: exact on every rank"
  else
    netns_dump; failed=$((failed + 1))
  fi
}

shift
per_ns=("$@")
[ ${#per_ns[@]} -eq 0 ] && per_ns=(1 2)
for per in "${per_ns[@]}"; do
  [[ "$per" =~ ^[1-9][0-9]*$ ]] || netns_fail "PER_NS must be a positive number, got $per"
  run "$per"
done
echo "auto transport across namespaces: ${#per_ns[@]} runs, $failed failed"
[ "$failed" -eq 0 ]
