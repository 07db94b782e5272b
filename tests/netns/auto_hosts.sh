#!/usr/bin/env bash
# A simulated cluster: HOSTS network namespaces with PER_HOST ranks each
# (default 8 x 4 = 32 ranks), transport.name = "auto", every rank bound to
# its namespace's address, a fresh job token per job. Each namespace counts
# as a host (docs/configuration.md), so a rank must reach the PER_HOST - 1
# ranks of its own namespace over shm and every other rank over tcp.
#
# 1. Every collective chorus-bench offers (--coll), each in a job of its own
#    with ring and again with mesh pinned (-a), and sendrecv (p2p) once,
#    checked element by element on every rank (-c) at 3 sizes from one
#    element to about 1 MiB; rooted collectives use a root outside rank 0's
#    namespace. Every rank must exit 0, print "# Wrong elements: 0" and log
#    exactly netns_auto_expected's "auto: shm to ...; tcp to ..." line, and
#    rank 0's table must show the pinned algorithm at every size.
# 2. A job looping over checked all_reduces; once it runs, rank VICTIM
#    (default 13: not rank 0, and in another namespace than rank 0) is
#    SIGKILLed. Every survivor, shm neighbours and tcp peers alike, must exit
#    non-zero with CHORUS_ERR_PEER_LOST naming VICTIM as the lost rank. The
#    status is the verdict: a survivor that missed the loss would stop only
#    at timeout.collective (KILL_TIMEOUT_S) with CHORUS_ERR_TIMEOUT. A
#    survivor still running 2 x KILL_TIMEOUT_S after the kill is a hang: it
#    is reported and killed.
#
# 32 ranks oversubscribe this 2-core machine, so iterations are few and the
# bounds generous (they only guard against hangs); no verdict depends on
# speed. Prints the time of every job and the kill's detection times.
# usage: auto_hosts.sh BENCH [HOSTS] [PER_HOST] [VICTIM] [KILL_TIMEOUT_S]
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$here/lib.sh"

bench="$1"; hosts="${2:-8}"; per_host="${3:-4}"; victim="${4:-13}"; kill_timeout_s="${5:-20}"
nranks=$((hosts * per_host))
((hosts >= 2 && per_host >= 2)) || netns_fail "need at least 2 namespaces of 2 ranks"
((victim > 0 && victim < nranks && victim / per_host != 0)) ||
  netns_fail "VICTIM must be a rank outside rank 0's namespace, got $victim"

# Open files per rank grow with the peers (sockets to tcp peers, shm
# descriptors, per data and notice channel): a rank of the 32-rank kill job
# held 84 (printed below). Raise a small soft limit (1024 on many systems)
# so that larger HOSTS x PER_HOST runs are not cut short by it.
want_fds=4096
if [ "$(ulimit -n)" != unlimited ] && (($(ulimit -n) < want_fds)); then
  ulimit -n "$want_fds" 2>/dev/null || ulimit -n "$(ulimit -Hn)"
fi

netns_init "$bench"
netns_create "$hosts"
echo "auto_hosts: $hosts namespaces x $per_host ranks = $nranks ranks, open files limit $(ulimit -n)"

settings="CHORUS_TRANSPORT=auto CHORUS_LOG=info CHORUS_TIMEOUT_INIT=120 CHORUS_TIMEOUT_COLLECTIVE=120"
# Sizes: one element (fewer elements than ranks), counts that do not divide
# by the rank count, and close to 1 MiB. Block collectives (the size is the
# whole buffer, count per rank = size / 4 / ranks) start at one element per
# rank.
flat_sizes="-b 4 -e 1M -f 470"                # 4, 1880, 883600 bytes
block_sizes="-b $((4 * nranks)) -e 1M -f 90"  # 32 ranks: 128, 11520, 1036800 bytes
iters="-n 1 -w 1"                             # both iterations checked
root=$((per_host + 2))  # namespace 1, not its first rank
job_bound_s=120         # per job: a hang guard (a job takes 4-17 s at load 28)

# What every rank's "auto: ..." line must say: the same in every job.
NETNS_PER_NS=$per_host NETNS_RANKS=$nranks
expected=()
for ((r = 0; r < nranks; ++r)); do expected+=("$(netns_auto_expected "$r")"); done

failed=0
jobs_run=0
# rank_files PREFIX PATTERN: "<rank> <first line matching PATTERN>" for
# every rank file $NETNS_DIR/PREFIX.<rank> holding one, from a single grep
# (forks add up at 32 ranks on a loaded machine).
rank_files() {
  grep -H -m1 -E "$2" "$NETNS_DIR/$1".* | sed -E "s|^$NETNS_DIR/$1\.([0-9]+):|\1 |"
}

# check_job NAME ALGORITHM: checks the job that just ended; sets job_bad (0:
# all good) and job_rows (sizes rank 0 reported).
check_job() {
  local name="$1" algo="$2" r rc end line bad=0 rows=0 checked=0 wrong_algo=""
  local -A logged=() error=() clean=()
  while read -r r line; do logged[$r]=${line#*comm w0: }; done < <(rank_files err "comm w0: auto: ")
  while read -r r line; do error[$r]=${line:0:400}; done < <(rank_files err "(chorus-bench: .* failed: |wrong elements)")
  while read -r r line; do clean[$r]=1; done < <(rank_files out "^# Wrong elements: 0$")
  for ((r = 0; r < NETNS_RANKS; ++r)); do
    read -r rc end <"$NETNS_DIR/rc.$r"
    [ "$rc" = 0 ] || { echo "FAIL: $name: rank $r exited $rc: ${error[$r]:-}"; bad=1; }
    [ -n "${clean[$r]:-}" ] ||
      { echo "FAIL: $name: rank $r reported wrong elements or no check: ${error[$r]:-}"; bad=1; }
    [ "${logged[$r]:-}" = "${expected[r]}" ] ||
      { echo "FAIL: $name: rank $r logged '${logged[$r]:-}', expected '${expected[r]}'"; bad=1; }
  done
  # Rank 0's table: it checked, how many sizes, and the algorithm of each.
  read -r checked rows wrong_algo < <(awk -v a="$algo" '
    /checking every iteration on every rank/ {c = 1}
    /^ +[0-9]+ / {n++; if ($3 != a) w = w $1 "=" $3 ","}
    END {print c + 0, n + 0, w}' "$NETNS_DIR/out.0")
  [ "$checked" = 1 ] || { echo "FAIL: $name: rank 0 did not check the data"; bad=1; }
  [ "$rows" -ge 1 ] || { echo "FAIL: $name: rank 0 reported no size"; bad=1; }
  [ -z "$wrong_algo" ] || { echo "FAIL: $name: not $algo at size(s) $wrong_algo"; bad=1; }
  job_bad=$bad job_rows=$rows
}

run_job() {  # run_job COLL ALGORITHM ARGS...
  local coll="$1" algo="$2"; shift 2
  local name="$coll/$algo" t0 took_ms pin=()
  [ "$algo" = p2p ] || pin=(-a "$algo")
  t0=$(netns_now_us)
  netns_start_hosts "$per_host" "$settings" -- -c --coll "$coll" "${pin[@]}" "$@"
  netns_wait_ranks "$job_bound_s" || { echo "FAIL: $name: a rank hung"; failed=$((failed + 1)); }
  took_ms=$((($(netns_now_us) - t0) / 1000))
  jobs_run=$((jobs_run + 1))
  check_job "$name" "$algo"
  if [ "$job_bad" = 0 ]; then
    echo "ok: $name: $job_rows size(s) exact on all $NETNS_RANKS ranks, auto lines right, ${took_ms} ms"
  else
    sed 's/^/    /' "$NETNS_DIR/out.0"
    netns_dump | head -n 200
    failed=$((failed + 1))
  fi
}

t_start=$(netns_now_us)
netns_log "phase 1: every collective, ring and mesh"
for algo in ring mesh; do
  # shellcheck disable=SC2086
  {
    run_job all_reduce "$algo" $flat_sizes $iters
    run_job all_gather "$algo" $block_sizes $iters
    run_job reduce_scatter "$algo" $block_sizes $iters
    run_job broadcast "$algo" $flat_sizes $iters -r "$root"
    run_job barrier "$algo" -n 5 -w 1
    run_job reduce "$algo" $flat_sizes $iters -r "$root"
    run_job gather "$algo" $block_sizes $iters -r "$root"
    run_job scatter "$algo" $block_sizes $iters -r "$root"
    run_job all_to_all "$algo" $block_sizes $iters
    run_job all_to_allv "$algo" $block_sizes $iters
  }
done
# shellcheck disable=SC2086
run_job sendrecv p2p $flat_sizes $iters
phase1_ms=$((($(netns_now_us) - t_start) / 1000))
netns_log "phase 1: $jobs_run jobs in ${phase1_ms} ms, $failed failed"

netns_log "phase 2: rank $victim (namespace $((victim / per_host))) SIGKILLed mid all_reduce"
t2=$(netns_now_us)
kill_failed=0
# One size looped far longer than the test runs: only the kill ends it.
netns_start_hosts "$per_host" \
  "CHORUS_TRANSPORT=auto CHORUS_LOG=info CHORUS_TIMEOUT_INIT=120 CHORUS_TIMEOUT_COLLECTIVE=$kill_timeout_s" -- \
  -c --coll all_reduce -b 256K -e 256K -n 1000000 -w 0
# The header is printed once init is done; give every rank a moment inside
# the loop before the kill.
netns_wait_for_output 0 "^# chorus-bench" 150
netns_log "rank 0 is past init"
sleep 2
for ((r = 0; r < NETNS_RANKS; ++r)); do
  netns_rank_done "$r" && { echo "FAIL: rank $r ended (exit $(netns_rank_rc "$r")) before the kill"; netns_dump; exit 1; }
done
fd_list=("/proc/$(netns_rank_pid "$victim")/fd"/*)
t_kill=$(netns_now_us)
kill -9 "$(netns_rank_pid "$victim")"
netns_log "rank $victim killed"
survivors=()
for ((r = 0; r < NETNS_RANKS; ++r)); do ((r != victim)) && survivors+=("$r"); done
netns_wait_until $((t_kill + 2 * kill_timeout_s * 1000000)) "${survivors[@]}" || kill_failed=$((kill_failed + 1))
times_ms=()
declare -A kill_error=()
while read -r r line; do kill_error[$r]=${line:0:400}; done < <(rank_files err "chorus-bench: .* failed: ")
for r in "${survivors[@]}"; do
  read -r rc end <"$NETNS_DIR/rc.$r"
  took_ms=$(((end - t_kill) / 1000))
  times_ms+=("$took_ms")
  err=${kill_error[$r]:-}
  blamed=$(netns_blamed_rank "$err")
  via=tcp; ((r / per_host == victim / per_host)) && via=shm
  if [ "$rc" = 0 ]; then
    echo "FAIL: rank $r ($via peer of the victim) exited 0 after the kill"
  elif [[ "$err" != *"CHORUS_ERR_PEER_LOST"* ]]; then
    echo "FAIL: rank $r ($via) exit $rc after ${took_ms} ms, not peer-lost: ${err:-no error line}"
  elif [ "$blamed" != "$victim" ]; then
    echo "FAIL: rank $r ($via) blames rank '${blamed}', not the victim $victim: $err"
  else
    continue
  fi
  kill_failed=$((kill_failed + 1))
done
read -r tmin tmed tmax < <(netns_stats "${times_ms[@]}")
grep -m1 -E "auto: all_reduce of " "$NETNS_DIR/err.0" | sed 's/^/    rank 0: /'
echo "    the victim held ${#fd_list[@]} open files"
if [ "$kill_failed" = 0 ]; then
  echo "ok: all ${#survivors[@]} survivors exited with CHORUS_ERR_PEER_LOST naming rank $victim;" \
    "time to exit min/median/max = $tmin/$tmed/$tmax ms (timeout.collective $((kill_timeout_s * 1000)) ms)"
else
  echo "FAIL: $kill_failed of ${#survivors[@]} survivors wrong; time to exit min/median/max = $tmin/$tmed/$tmax ms"
  netns_dump | head -n 200
  failed=$((failed + 1))
fi
netns_wait_ranks 10 || failed=$((failed + 1))
netns_log "phase 2: $((($(netns_now_us) - t2) / 1000)) ms"

echo "auto_hosts: $jobs_run checked jobs and 1 kill on $nranks ranks in $hosts namespaces," \
  "$((($(netns_now_us) - t_start) / 1000)) ms; $failed failed"
[ "$failed" -eq 0 ]
