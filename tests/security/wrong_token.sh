#!/usr/bin/env bash
# A rank started with the wrong job token fails to join, at once, with an
# error naming the cause and the fix; the job it tried to join is not
# disturbed and completes once the right rank arrives.
# "At once" is an order: the refusal ends the wrong rank's init before its
# own init deadline could (which would be a timeout, not a refusal).
#   wrong_token.sh VICTIM
set -u
victim=$1
dir=$(mktemp -d /tmp/chorus-token.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$dir"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$dir"/*.log; do echo "---- $f"; cat "$f"; done; exit 1; }

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
wrong_init_s=30  # the wrong rank's init deadline; rank 0 waits longer
common=(CHORUS_WORLD_SIZE=2 CHORUS_COORDINATOR=127.0.0.1:$port CHORUS_TIMEOUT_INIT=60)
env "${common[@]}" CHORUS_RANK=0 CHORUS_JOB_TOKEN=right-token "$victim" - >"$dir/rank0.log" 2>&1 &
pids+=($!)
start=$(date +%s)
env "${common[@]}" CHORUS_RANK=1 CHORUS_JOB_TOKEN=wrong-token CHORUS_TIMEOUT_INIT=$wrong_init_s \
  "$victim" - >"$dir/wrong.log" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
[ "$rc" != 0 ] || fail "the rank with the wrong token joined"
[ "$took" -lt "$wrong_init_s" ] || fail "the wrong-token rank took ${took}s to fail: its init deadline ended it, not the refusal"
grep -q "job token differs" "$dir/wrong.log" || fail "the error does not name the cause"
grep -q "CHORUS_JOB_TOKEN" "$dir/wrong.log" || fail "the error does not name the fix"
cat "$dir/wrong.log"

env "${common[@]}" CHORUS_RANK=1 CHORUS_JOB_TOKEN=right-token "$victim" - >"$dir/rank1.log" 2>&1
rc1=$?
wait "${pids[0]}"; rc0=$?; pids=()
[ "$rc0" = 0 ] && [ "$rc1" = 0 ] || fail "the real job failed (rank 0: $rc0, rank 1: $rc1)"
echo "PASS: wrong token refused in ${took}s with cause and fix; the job then ran"
