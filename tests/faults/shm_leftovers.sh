#!/usr/bin/env bash
# shm leftovers after SIGKILL (docs/shm.md, "What a killed job leaves").
# Each round starts a 4-rank shm job and SIGKILLs every rank, in odd rounds
# inside init, in even rounds after a random delay that lands in the
# collectives; after each round at most one segment per rank may be left in
# /dev/shm. Then
# `chorus-info --clean` must remove every segment of a dead process and
# keep those of a live one, and a live shm job must be undisturbed by it.
# Verdicts are counts, never times.
#   shm_leftovers.sh COLLECTIVE_CHECK JOB_MIX CHORUS_INFO [ROUNDS]
set -u
check_bin=$1 mix=$2 info=$3 rounds=${4:-8}
ranks=4
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d /tmp/chorus-shm-leftovers.XXXXXX)
pids=()
passed=0 failed=0
ns=$(printf '%x' "$(stat -L -c %i /proc/self/ns/pid)")
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -f /dev/shm/chorus-shm-$ns-$decoy_live-* /dev/shm/chorus-shm-$ns-$decoy_dead-*; rm -rf "$dir"; }
decoy_live=0 decoy_dead=0
trap cleanup EXIT
ok() { if [ "$1" = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: $2"; fi; }
. "$(dirname "${BASH_SOURCE[0]}")/../lib/free_port.sh"
# Segments in /dev/shm owned (by name) or held (as a memfd) by any of the pids given.
left_by() { local n=0 p; for p in "$@"; do n=$((n + $(ls /dev/shm 2>/dev/null | grep -c "^chorus-shm-$ns-$p-"))); done; echo $n; }

worst=0 total=0 dead=()
for round in $(seq 1 "$rounds"); do
  port=$(chorus_free_port)
  job=()
  for r in $(seq 0 $((ranks - 1))); do
    env CHORUS_TRANSPORT=shm CHORUS_WORLD_SIZE=$ranks CHORUS_RANK=$r CHORUS_COORDINATOR=127.0.0.1:$port \
      CHORUS_JOB_TOKEN=leftovers CHORUS_LOG=error "$check_bin" --counts 1000,99991 >"$dir/round.$r.log" 2>&1 &
    job+=($!)
  done
  pids+=("${job[@]}")
  if [ $((round % 2)) = 1 ]; then
    # Inside init, while the transport is being set up (kill_in_init.py).
    when="in init, $(python3 "$here/kill_in_init.py" "$ns" "${job[@]}")"
  else
    # Somewhere in the collectives.
    delay_ms=$(( 300 + round * 100 + RANDOM % 200 ))
    sleep "$(printf '0.%03d' $((delay_ms % 1000)))"; [ $delay_ms -ge 1000 ] && sleep $((delay_ms / 1000))
    when="after ${delay_ms} ms"
  fi
  kill -9 "${job[@]}" 2>/dev/null
  for p in "${job[@]}"; do wait "$p" 2>/dev/null; done
  rm -f "$dir"/round.*.log
  n=$(left_by "${job[@]}")
  echo "round $round: killed every rank $when: $n segment(s) left"
  total=$((total + n)); [ $n -gt $worst ] && worst=$n
  ok $([ "$n" -le $ranks ] && echo 0 || echo 1) "round $round: $n segments left by $ranks killed ranks (at most $ranks allowed)"
  dead=("${dead[@]}" "${job[@]}")
done
echo "segments left per round: at most $worst (bound: $ranks), $total in all"

# A live shm job, held open while chorus-info --clean runs.
port=$(chorus_free_port)
live=()
for r in $(seq 0 $((ranks - 1))); do
  env CHORUS_TRANSPORT=shm CHORUS_WORLD_SIZE=$ranks CHORUS_RANK=$r CHORUS_COORDINATOR=127.0.0.1:$port \
    CHORUS_JOB_TOKEN=live "$mix" 7 "$dir/formed" "$dir/stop" >"$dir/live.$r.log" 2>&1 &
  live+=($!)
done
pids+=("${live[@]}")
for _ in $(seq 1 1200); do [ -e "$dir/formed" ] && break; sleep 0.05; done
# Named segments as an older Chorus leaves them: one of a live process, one of a dead one.
sleep 300 & decoy_live=$!; pids+=($decoy_live)
sh -c 'exit 0' & decoy_dead=$!; wait $decoy_dead
head -c 4096 /dev/zero >/dev/shm/chorus-shm-$ns-$decoy_live-00000000000000aa
head -c 4096 /dev/zero >/dev/shm/chorus-shm-$ns-$decoy_dead-00000000000000bb
"$info" --clean >"$dir/clean.log" 2>&1; rc=$?
cat "$dir/clean.log"
ok $rc "chorus-info --clean exited $rc"
ok "$(left_by "${dead[@]}" "$decoy_dead")" "segments of dead processes survived chorus-info --clean"
[ -e /dev/shm/chorus-shm-$ns-$decoy_live-00000000000000aa ]; ok $? "chorus-info --clean removed a live process's segment"
touch "$dir/stop"
res=0; for r in $(seq 0 $((ranks - 1))); do wait "${live[$r]}" || res=1; grep -q "job 7 rank $r: OK" "$dir/live.$r.log" || res=1; done
ok $res "the live shm job did not complete after chorus-info --clean: $(cat "$dir"/live.*.log)"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
