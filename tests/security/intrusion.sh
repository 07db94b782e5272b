#!/usr/bin/env bash
# Strangers connect to a running 3-rank job: garbage, truncated, oversized and
# wrong-token frames, and a connect that never speaks, first at the
# coordinator (while it waits for the last rank) and then at a TCP data port
# (while the job runs collectives). The job must finish with exact results,
# and the logs must show every drop with the stranger's address.
#   intrusion.sh CHORUSRUN VICTIM INTRUDE_PY
set -u
chorusrun=$1 victim=$2 intrude=$3
dir=$(mktemp -d /tmp/chorus-intrusion.XXXXXX)
job_pid=
cleanup() {
  [ -n "$job_pid" ] && kill "$job_pid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; echo "---- job log"; cat "$dir/job.log"; exit 1; }
wait_file() {  # path seconds
  for _ in $(seq 1 $(( $2 * 10 ))); do [ -s "$1" ] && return 0; sleep 0.1; done
  return 1
}

"$chorusrun" -n 3 --timeout 120 --env CHORUS_LOG=debug -- "$victim" "$dir" >"$dir/job.log" 2>&1 &
job_pid=$!

wait_file "$dir/coordinator" 30 || fail "rank 0 never wrote its coordinator address"
coordinator=$(cat "$dir/coordinator")
# Rank 0 listens once it has bound; give it a moment.
for _ in $(seq 1 50); do grep -q "listening on .*(coordinator" "$dir/job.log" && break; sleep 0.1; done
python3 "$intrude" coordinator "$coordinator" "$dir/go1" "$dir/ready" | tee "$dir/intrude.log"
[ "${PIPESTATUS[0]}" = 0 ] || fail "coordinator intrusion"

wait_file "$dir/ready" 60 || fail "the job did not come up after the coordinator attacks"
grep -q "coordinator silent: .*(refused: the job had already formed)" "$dir/intrude.log" ||
  fail "the silent caller was not sent the late caller's refusal when the job formed"
data=$(grep -o "listening on [0-9.]*:[0-9]* (sockets=" "$dir/job.log" | head -1 | sed 's/listening on \([^ ]*\) .*/\1/')
[ -n "$data" ] || fail "no TCP data port in the debug log"
# Every listener of the job binds the configured interface (loopback by
# default), never a wildcard.
if command -v ss >/dev/null; then
  listeners=$(ss -Hltnp | grep '"auth_victim"')
  [ -n "$listeners" ] || fail "ss shows no listener of the job"
  echo "$listeners" | awk '{print $4}' | grep -v '^127\.0\.0\.1:' &&
    fail "a listener is bound beyond loopback: $listeners"
fi
# The silent connection is held until the acceptor drops it at its 10 s
# handshake deadline (100 s at most: a hang guard).
python3 "$intrude" data "$data" 100 || fail "data-port intrusion"
touch "$dir/go2"

wait "$job_pid"; rc=$?; job_pid=
[ "$rc" = 0 ] || fail "the job exited $rc"
[ "$(grep -c "all_reduces exact" "$dir/job.log")" = 3 ] || fail "not every rank reported exact results"

expect() {  # pattern description
  grep -q -- "$1" "$dir/job.log" || fail "no log line for $2 (pattern: $1)"
}
expect "dropped a connection from 127.0.0.1:[0-9]* before it authenticated (bad magic" "coordinator garbage"
expect "dropped a connection from 127.0.0.1:[0-9]* before it authenticated (End of file" "coordinator truncated frame"
expect "before it authenticated (auth-init frame of 4294967280 bytes exceeds" "coordinator oversized frame"
expect "refused a connection from 127.0.0.1:[0-9]*: sent a hello frame before authenticating" "coordinator unauthenticated hello"
expect "refused a connection from 127.0.0.1:[0-9]*: authentication failed" "coordinator wrong token"
expect "refused a connection from 127.0.0.1:[0-9]* that had not said hello when the job formed" "coordinator silent connect"
expect "dropped connection from 127.0.0.1:[0-9]*: not a Chorus TCP handshake" "data-port garbage"
expect "dropped connection from 127.0.0.1:[0-9]*: it ended before its handshake" "data-port truncated hello"
expect "dropped connection from 127.0.0.1:[0-9]* claiming rank 1 (channel 0): authentication failed" "data-port wrong key / oversized"
expect "dropped connection from 127.0.0.1:[0-9]*: no handshake within 10 s" "data-port silent connect"
grep -E "warn.*(dropped|refused) (a )?connection" "$dir/job.log" | sed 's/^/  /'
echo "PASS: the job finished exactly; every intrusion was dropped and logged"
