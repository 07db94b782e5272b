#!/usr/bin/env bash
# Two jobs, one coordinator port (docs/reliability.md, "Two jobs, one port").
# No rank may ever return OK with data from the other job; a rank that cannot
# join fails by a refusal from rank 0 (its init deadline is 60 s, so a
# refusal is the only way it can fail earlier than that: an order, not a
# timing), and the refusal names the cause and the fix.
#   two_jobs.sh JOB_MIX
set -u
mix=$1
dir=$(mktemp -d /tmp/chorus-two-jobs.XXXXXX)
pids=()
passed=0
failed=0
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; [ -n "${KEEP:-}" ] || rm -rf "$dir"; }
trap cleanup EXIT
t0=$(date +%s.%N); stamp() { echo "[$(python3 -c "print(round($(date +%s.%N)-$t0,1))")s] $*"; }
check() { # check CONDITION-STATUS WHAT
  if [ "$1" = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: $2"; for f in "$dir"/$scenario.*.log; do echo "---- $f"; cat "$f"; done; fi
}
. "$(dirname "${BASH_SOURCE[0]}")/../lib/free_port.sh"
declare -A pid_of
start() { # start NAME MARK RANK [VAR=VALUE...] [-- ARGS]
  local name=$1 mark=$2 rank=$3; shift 3
  env CHORUS_WORLD_SIZE=4 CHORUS_COORDINATOR=127.0.0.1:$port CHORUS_RANK=$rank \
    CHORUS_TIMEOUT_INIT=60 CHORUS_LOG=warn "$@" "$mix" "$mark" ${hold:+$hold} \
    >"$dir/$scenario.$name.log" 2>&1 &
  pid_of[$name]=$!
  pids+=($!)
}
finish() { wait "${pid_of[$1]}"; echo $? >"$dir/$scenario.$1.rc"; }
rc_of() { cat "$dir/$scenario.$1.rc"; }
listening() { # waits until rank 0 listens on $port (rank 0 logs nothing we could wait for at warn)
  for _ in $(seq 1 600); do ss -Hltn "sport = :$port" | grep -q . && return 0; sleep 0.05; done
  return 1
}
refused() { grep -q "refused this rank" "$dir/$scenario.$1.log" && grep -q "two jobs were started on one coordinator port" "$dir/$scenario.$1.log"; }
no_mix() { ! grep -q MIXED "$dir"/$scenario.*.log && for n in "$@"; do [ "$(rc_of "$n")" != 3 ] || return 1; done; }

# 1. No token, no launcher identity, started interleaved: B's rank 0 finds the
#    port taken and tells A's rank 0, which can no longer tell whose ranks
#    are whose: both jobs fail, every rank with the cause and the fix.
scenario=interleaved hold=; stamp "$scenario"
port=$(chorus_free_port)
start A0 1 0; listening || echo "rank 0 never listened"
start B0 2 0; finish B0
for r in 1 2 3; do start A$r 1 $r; start B$r 2 $r; done
for n in A0 A1 A2 A3 B1 B2 B3; do finish $n; done
no_mix A0 A1 A2 A3 B0 B1 B2 B3; check $? "$scenario: a rank returned data of the other job"
grep -q "cannot listen on" "$dir/$scenario.B0.log"; check $? "$scenario: B's rank 0 did not fail on the taken port"
ok=0; for n in A0 A1 A2 A3; do [ "$(rc_of $n)" = 0 ] && ok=$((ok + 1)); done
if [ $ok = 4 ]; then
  res=0  # A won cleanly: every B rank must have been refused
else
  res=$ok  # A must fail as a whole, each rank with the reason
  for n in A1 A2 A3; do refused $n || res=1; done
  grep -q "this job cannot tell its ranks from another job's" "$dir/$scenario.A0.log" || res=1
fi
check $res "$scenario: job A neither ran cleanly nor failed as a whole with the reason ($ok of 4 OK)"
res=0; for n in B1 B2 B3; do [ "$(rc_of $n)" != 0 ] && refused $n || res=1; done
check $res "$scenario: a rank of job B was not refused with the cause and the fix"

# 2. A job that has formed: a late rank (of another job, or stale) is refused
#    at once, and the formed job is not disturbed.
scenario=late; stamp "$scenario"
port=$(chorus_free_port)
hold="$dir/late.formed $dir/late.stop"
for r in 0 1 2 3; do start A$r 1 $r; done
for _ in $(seq 1 1200); do [ -e "$dir/late.formed" ] && break; sleep 0.05; done
hold=
for r in 1 2 3; do start B$r 2 $r; done
for r in 1 2 3; do finish B$r; done
touch "$dir/late.stop"
for n in A0 A1 A2 A3; do finish $n; done
no_mix A0 A1 A2 A3 B1 B2 B3; check $? "$scenario: a rank returned data of the other job"
res=0; for n in A0 A1 A2 A3; do [ "$(rc_of $n)" = 0 ] || res=1; done
check $res "$scenario: the formed job was disturbed"
res=0; for n in B1 B2 B3; do [ "$(rc_of $n)" != 0 ] && refused $n && grep -q "had already formed" "$dir/$scenario.$n.log" || res=1; done
check $res "$scenario: a late rank was not refused with the cause and the fix"

# 3. Launcher identities (Slurm job ids) differ, no token, fully interleaved:
#    the jobs never merge; A runs, every rank of B is refused. A stays up
#    until B's ranks have ended: a B rank that first calls after A has exited
#    finds no one on the port, and nothing could tell it the cause. Whether
#    a B rank calls before A forms, during A's formation (mid-handshake) or
#    after it, it must be refused.
scenario=identity; stamp "$scenario"
port=$(chorus_free_port)
hold="$dir/identity.formed $dir/identity.stop"
start A0 1 0 SLURM_JOB_ID=1001 SLURM_STEP_ID=0; listening || echo "rank 0 never listened"
hold= start B0 2 0 SLURM_JOB_ID=1002 SLURM_STEP_ID=0
for r in 1 2 3; do start A$r 1 $r SLURM_JOB_ID=1001 SLURM_STEP_ID=0; hold= start B$r 2 $r SLURM_JOB_ID=1002 SLURM_STEP_ID=0; done
hold=
for n in B0 B1 B2 B3; do finish $n; done
touch "$dir/identity.stop"
for n in A0 A1 A2 A3; do finish $n; done
no_mix A0 A1 A2 A3 B0 B1 B2 B3; check $? "$scenario: a rank returned data of the other job"
res=0; for n in A0 A1 A2 A3; do [ "$(rc_of $n)" = 0 ] || res=1; done
check $res "$scenario: job A did not run"
res=0; for n in B1 B2 B3; do [ "$(rc_of $n)" != 0 ] && refused $n || res=1; done
check $res "$scenario: a rank of job B was not refused with the cause"

# 4. A duplicate rank number in a job with a token: the duplicate is refused
#    at once, naming the cause and the fix; the job then completes.
scenario=duplicate; stamp "$scenario"
port=$(chorus_free_port)
start A0 1 0 CHORUS_JOB_TOKEN=t0k CHORUS_LOG=debug; listening || echo "rank 0 never listened"
start A1 1 1 CHORUS_JOB_TOKEN=t0k
for _ in $(seq 1 1200); do grep -q "rank 1 joined from" "$dir/$scenario.A0.log" && break; sleep 0.05; done
start D1 1 1 CHORUS_JOB_TOKEN=t0k; finish D1
for r in 2 3; do start A$r 1 $r CHORUS_JOB_TOKEN=t0k; done
for n in A0 A1 A2 A3; do finish $n; done
res=0; for n in A0 A1 A2 A3; do [ "$(rc_of $n)" = 0 ] || res=1; done
check $res "$scenario: the job did not complete after the duplicate was refused"
[ "$(rc_of D1)" != 0 ] && grep -q "refused this rank: .*claims rank 1, which already joined from .*Fix: " "$dir/$scenario.D1.log"
check $? "$scenario: the duplicate rank was not refused with the cause and the fix"

pids=()
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
