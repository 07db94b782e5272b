#!/usr/bin/env bash
# transport.name = "auto" across network namespaces (each namespace counts as
# a host: docs/configuration.md). Two runs, both checked element by element:
#   1 rank in each of 2 namespaces: every peer over tcp, none over shm;
#   2 ranks in each of 2 namespaces: shm to the rank in the same namespace,
#   tcp to the two in the other.
# Each rank's info log line ("auto: shm to rank 1; tcp to ranks 2,3") must
# name exactly those peers, and rank 0 must report 0 wrong elements.
# usage: auto_transport.sh BENCH [PER_NS...]   (default: 1 2, both runs)
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$here/lib.sh"

bench="$1"
netns_init "$bench"
netns_create 2

# start_ranks PER_NS: PER_NS ranks in each of the 2 namespaces, rank r in
# namespace r / PER_NS, all bound to their namespace's address. Same files
# as netns_start_ranks (pid.R, rc.R, out.R, err.R).
start_ranks() {
  local per="$1"; shift
  local total=$((2 * per)) token r ns unset_args=()
  token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  for v in $(compgen -e | grep '^CHORUS_'); do unset_args+=(-u "$v"); done
  rm -f "$NETNS_DIR"/pid.* "$NETNS_DIR"/rc.* "$NETNS_DIR"/out.* "$NETNS_DIR"/err.*
  for ((r = 0; r < total; ++r)); do
    ns=$(netns_ns $((r / per)))
    (
      ip netns exec "$ns" env "${unset_args[@]}" \
        CHORUS_RANK="$r" CHORUS_WORLD_SIZE="$total" \
        CHORUS_COORDINATOR="$(netns_addr 0):$NETNS_PORT" \
        CHORUS_BIND_ADDRESS="$(netns_addr $((r / per)))" CHORUS_JOB_TOKEN="$token" \
        CHORUS_TRANSPORT=auto CHORUS_LOG=info CHORUS_TIMEOUT_INIT=60 CHORUS_TIMEOUT_COLLECTIVE=60 \
        stdbuf -oL "$NETNS_BENCH" "$@" >"$NETNS_DIR/out.$r" 2>"$NETNS_DIR/err.$r" &
      p=$!
      echo "$p" >"$NETNS_DIR/pid.$r"
      wait "$p"
      echo "$? ${EPOCHREALTIME/./}" >"$NETNS_DIR/rc.$r.tmp"
      mv "$NETNS_DIR/rc.$r.tmp" "$NETNS_DIR/rc.$r"
    ) 2>/dev/null &
    NETNS_PIDS+=($!)
  done
  for ((r = 0; r < total; ++r)); do
    until [ -s "$NETNS_DIR/pid.$r" ]; do sleep 0.01; done
  done
}

failed=0
# run PER_NS EXPECTED... (one expected "auto: ..." text per rank)
run() {
  local per="$1"; shift
  local total=$((2 * per)) r bad=0 ranks=() line
  local expected=("$@")
  for ((r = 0; r < total; ++r)); do ranks+=("$r"); done
  NETNS_N=$total  # netns_dump and the waits walk ranks 0..total-1
  start_ranks "$per" -c --coll all_reduce -b 4 -e 4M -f 16 -n 3 -w 1
  netns_wait_ranks 120 "${ranks[@]}" || bad=1
  for ((r = 0; r < total; ++r)); do
    rc=$(netns_rank_rc "$r")
    [ "$rc" = 0 ] || { echo "FAIL: rank $r exited $rc: $(netns_rank_error "$r")"; bad=1; }
    line=$(grep -m1 -E "comm w0: auto: " "$NETNS_DIR/err.$r" | sed 's/.*comm w0: //')
    if [ "$line" = "${expected[$r]}" ]; then
      echo "ok: rank $r (namespace $((r / per))): $line"
    else
      echo "FAIL: rank $r logged '$line', expected '${expected[$r]}'"; bad=1
    fi
  done
  grep -q "checking every iteration on every rank" "$NETNS_DIR/out.0" || { echo "FAIL: rank 0 did not check the data"; bad=1; }
  for ((r = 0; r < total; ++r)); do
    grep -q "^# Wrong elements: 0$" "$NETNS_DIR/out.$r" || { echo "FAIL: rank $r reported wrong elements or no check"; bad=1; }
  done
  sed 's/^/    /' "$NETNS_DIR/out.0"
  if [ "$bad" = 0 ]; then
    echo "ok: all_reduce over auto, $per rank(s) per namespace: exact on every rank"
  else
    netns_dump; failed=$((failed + 1))
  fi
  NETNS_N=2
}

shift
per_ns=("$@")
[ ${#per_ns[@]} -eq 0 ] && per_ns=(1 2)
for per in "${per_ns[@]}"; do
  case "$per" in
    1) run 1 "auto: tcp to rank 1" "auto: tcp to rank 0" ;;
    2) run 2 "auto: shm to rank 1; tcp to ranks 2,3" "auto: shm to rank 0; tcp to ranks 2,3" \
             "auto: shm to rank 3; tcp to ranks 0,1" "auto: shm to rank 2; tcp to ranks 0,1" ;;
    *) netns_fail "PER_NS must be 1 or 2, got $per" ;;
  esac
done
echo "auto transport across namespaces: ${#per_ns[@]} runs, $failed failed"
[ "$failed" -eq 0 ]
