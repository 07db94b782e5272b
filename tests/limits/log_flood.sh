#!/usr/bin/env bash
# A flood of stranger connections at a TCP data port of a running 2-rank job
# (tests/security/auth_victim.cc) must leave a bounded number of warning lines
# (core/log_limiter.h: 5 per kind per 10 s, then one "N more like this"
# line), while every dropped connection is still accounted for: the lines
# written in full plus the counts in the summaries add up to the connections
# the acceptor dropped. The verdict counts lines; it never looks at a clock.
#   log_flood.sh CHORUSRUN VICTIM CONNECTIONS
set -u
chorusrun=$1 victim=$2 n=$3
dir=$(mktemp -d /tmp/chorus-log-flood.XXXXXX)
job_pid=
cleanup() {
  [ -n "$job_pid" ] && kill "$job_pid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; echo "---- job log (first 40 lines)"; head -40 "$dir/job.log"; echo "0 passed, 1 failed"; exit 1; }
wait_file() {  # path seconds
  for _ in $(seq 1 $(( $2 * 10 ))); do [ -s "$1" ] && return 0; sleep 0.1; done
  return 1
}

touch "$dir/go1"  # no coordinator attacks here: the last rank may start at once
# Debug level only to learn the data port ("listening on"); debug lines are
# never limited, so only warnings are counted below.
"$chorusrun" -n 2 --timeout 120 --env CHORUS_LOG=debug -- "$victim" "$dir" >"$dir/job.log" 2>&1 &
job_pid=$!
wait_file "$dir/ready" 60 || fail "the job did not come up"
data=$(grep -o "listening on [0-9.]*:[0-9]* (sockets=" "$dir/job.log" | head -1 | sed 's/listening on \([^ ]*\) .*/\1/')
[ -n "$data" ] || fail "no TCP data port in the debug log"

# Each stranger sends 72 bytes that are no Chorus handshake and waits for the
# port to close the connection, so every one is dropped (and logged) before
# the next arrives.
sent=$(python3 - "$data" "$n" <<'PY'
import os, socket, sys
host, port = sys.argv[1].rsplit(":", 1)
done = 0
for _ in range(int(sys.argv[2])):
    s = socket.create_connection((host, int(port)), timeout=10)
    try:
        s.sendall(os.urandom(72))
        s.settimeout(10)
        while s.recv(4096):
            pass
    except OSError:
        pass
    s.close()
    done += 1
print(done)
PY
) || fail "the flood script failed"
touch "$dir/go2"
wait "$job_pid"; rc=$?; job_pid=
[ "$rc" = 0 ] || fail "the job exited $rc"
[ "$(grep -c "all_reduces exact" "$dir/job.log")" = 2 ] || fail "not every rank reported exact results"

full=$(grep -v "more like this" "$dir/job.log" |
  grep -c "WARN\].*dropped connection from 127\.0\.0\.1:[0-9]*: not a Chorus TCP handshake")
summaries=$(grep "WARN\] \.\.\. [0-9]* more like this in the last .*dropped connection from 127\.0\.0\.1:[0-9]*: not a Chorus TCP handshake" "$dir/job.log")
n_summaries=$(printf '%s' "$summaries" | grep -c "more like this")
suppressed=$(printf '%s\n' "$summaries" | sed -n 's/.*\.\.\. \([0-9]*\) more like this.*/\1/p' | awk '{s += $1} END {print s + 0}')
warn_lines=$(grep -c "WARN\]" "$dir/job.log")
echo "strangers: $sent; warning lines: $warn_lines; written in full: $full; summaries: $n_summaries counting $suppressed"
grep "more like this" "$dir/job.log" | sed 's/^/  /' | cut -c1-200

[ "$sent" = "$n" ] || fail "only $sent of $n stranger connections were made"
[ "$((full + suppressed))" = "$n" ] ||
  fail "$full lines + $suppressed counted = $((full + suppressed)), not the $n dropped connections"
[ "$full" -ge 1 ] || fail "no drop was written in full"
# 5 in full and one summary per 10 s interval: far below one line per
# connection however slowly the flood ran (3000 strangers would need over
# 80 minutes to reach 100 lines).
[ "$warn_lines" -le 100 ] || fail "$warn_lines warning lines for $n strangers: not rate-limited"
echo "1 passed, 0 failed"
