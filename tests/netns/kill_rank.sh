#!/usr/bin/env bash
# A rank SIGKILLed at a random point, ITERATIONS times, each time a new job
# on the same namespaces: random victim (rank 0, the coordinator, included),
# random collective, random moment between 0 and WINDOW_MS after every rank
# has joined rank 0's side channel (so the kill lands in init's connection
# setup, in a collective, in a barrier or in the result collection).
#
# Every survivor must exit non-zero with CHORUS_ERR_PEER_LOST. The status is
# the verdict: TIMEOUT_S is timeout.collective of the job
# (CHORUS_TIMEOUT_COLLECTIVE), and a survivor that missed the loss would only
# stop at that deadline, with CHORUS_ERR_TIMEOUT, which fails the status
# check. Time only guards against a hang: a survivor still running 10 x
# TIMEOUT_S after the kill is a failure (and is killed).
#
# The rank a survivor names must be one that is really gone: the victim, or
# another survivor that had already failed (a survivor that fails closes its
# connections, and its neighbours can see that before they see the victim's).
# Both cases are counted and printed.
#
# Prints one line per kill and "kill_rank stats: ..." with min/median/max of
# the time from the kill to each survivor's exit.
# usage: kill_rank.sh BENCH NRANKS ITERATIONS [TIMEOUT_S] [WINDOW_MS] [SEED]
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$here/lib.sh"

bench="$1"; n="$2"; iterations="$3"; timeout_s="${4:-3}"; window_ms="${5:-1500}"
bound_s=$((10 * timeout_s))
seed="${6:-${CHORUS_TEST_NETNS_SEED:-$$}}"
RANDOM=$seed
echo "kill_rank: $iterations kills on $n ranks, timeout.collective $timeout_s s, hang bound $bound_s s, window $window_ms ms, seed $seed"
netns_init "$bench"
netns_create "$n"

colls=(all_reduce all_gather reduce_scatter broadcast)
settings="CHORUS_TIMEOUT_INIT=10 CHORUS_TIMEOUT_COLLECTIVE=$timeout_s"
times_ms=()
failed=0
named_victim=0
named_cascade=0
in_init=0
for ((it = 1; it <= iterations; ++it)); do
  victim=$((RANDOM % n))
  coll=${colls[RANDOM % ${#colls[@]}]}
  delay_ms=$((RANDOM % window_ms))
  # Nine sizes, 10000 iterations each, every element checked: a minute even
  # for the fastest (reduce_scatter over mesh: ~6 ms per round here), far
  # longer than the join plus the window (checked below); the kill ends it.
  netns_start_ranks "$settings" -- -c --coll "$coll" -b 64 -e 4M -f 4 -n 10000 -w 1
  netns_wait_joined 20
  sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
  for ((r = 0; r < n; ++r)); do
    if netns_rank_done "$r"; then
      echo "FAIL: kill $it: rank $r ended (exit $(netns_rank_rc "$r")) before the kill"
      netns_dump; exit 1
    fi
  done
  # Where rank 0 was: the last size it completed, or still in init.
  if grep -q "^# chorus-bench" "$NETNS_DIR/out.0"; then
    last=$(awk '/^ +[0-9]+ / {s = $1} END {print s ? "after size " s : "first size"}' "$NETNS_DIR/out.0")
  else
    last="init"; in_init=$((in_init + 1))
  fi
  t_kill=${EPOCHREALTIME/./}
  kill -9 "$(netns_rank_pid "$victim")"
  survivors=()
  for ((r = 0; r < n; ++r)); do [ "$r" != "$victim" ] && survivors+=("$r"); done
  netns_wait_until $((t_kill + bound_s * 1000000)) "${survivors[@]}" || failed=$((failed + 1))
  line="kill $it: $coll, rank $victim killed ${delay_ms} ms after the join ($last):"
  for r in "${survivors[@]}"; do
    rc=$(netns_rank_rc "$r")
    took_ms=$((($(netns_rank_end_us "$r") - t_kill) / 1000))
    times_ms+=("$took_ms")
    err=$(netns_rank_error "$r")
    blamed=$(netns_blamed_rank "$err")
    verdict=ok
    if [ "$rc" = 0 ]; then
      verdict="FAIL(exit 0)"
    elif [[ "$err" != *"CHORUS_ERR_PEER_LOST"* ]]; then
      verdict="FAIL(not peer-lost)"
    elif [ "$blamed" = "$victim" ]; then
      named_victim=$((named_victim + 1))
    elif [ -n "$blamed" ] && [ "$blamed" != "$r" ] && [ "$blamed" != "$victim" ] &&
         netns_rank_done "$blamed" && [ "$(netns_rank_rc "$blamed")" != 0 ]; then
      # A survivor that failed first: its peer-loss notice should have
      # named the victim (docs/reliability.md §4.3).
      named_cascade=$((named_cascade + 1))
      verdict="FAIL(blames rank ${blamed}, a survivor that failed first, not the victim ${victim})"
    else
      verdict="FAIL(blames rank '${blamed}', which is not gone)"
    fi
    line+=" rank $r $verdict after ${took_ms} ms (blames rank ${blamed:-?});"
    if [ "$verdict" != ok ]; then
      failed=$((failed + 1))
      echo "FAIL: kill $it: rank $r: exit $rc: $err"
    fi
  done
  echo "$line"
  # Let every process of this job go before the next one starts.
  netns_wait_ranks 10 || failed=$((failed + 1))
done

read -r tmin tmed tmax < <(netns_stats "${times_ms[@]}")
echo "kill_rank stats: ${#times_ms[@]} survivor exits after $iterations kills ($in_init in init);" \
  "time to error min/median/max = $tmin/$tmed/$tmax ms (timeout.collective $((timeout_s * 1000)) ms);" \
  "blamed the victim $named_victim, a survivor that failed first $named_cascade; $failed failures"
[ "$failed" -eq 0 ]
