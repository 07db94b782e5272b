#!/usr/bin/env bash
# Starts N ranks by hand (the chorusrun contract: CHORUS_RANK, CHORUS_WORLD_SIZE,
# CHORUS_COORDINATOR), lets them run a long all_reduce loop, SIGKILLs one rank
# mid-collective, and requires every survivor to exit non-zero within BOUND
# seconds with a peer-lost error naming the killed rank. No survivor's output
# may name a channel the job does not have ("channel N" for N >= the data
# channels, CHORUS_ALGORITHM_CHANNELS, default 1): transports call the core's
# peer-loss notice endpoint "notice channel". Nothing may be left running.
# usage: kill_rank.sh BENCH NRANKS VICTIM [BOUND_S] [DELAY_S]
set -uo pipefail
bench="$1"; n="$2"; victim="$3"; bound="${4:-15}"; delay="${5:-2}"
channels="${CHORUS_ALGORITHM_CHANNELS:-1}"
. "$(dirname "${BASH_SOURCE[0]}")/../lib/free_port.sh"
port=$(chorus_free_port)
dir=$(mktemp -d)
trap 'kill -9 "${pids[@]}" 2>/dev/null; rm -rf "$dir"' EXIT
pids=()
for r in $(seq 0 $((n - 1))); do
  CHORUS_RANK=$r CHORUS_WORLD_SIZE=$n CHORUS_COORDINATOR=127.0.0.1:$port \
  CHORUS_TIMEOUT_COLLECTIVE=120 \
    "$bench" -b 16M -e 16M -n 100000 -w 0 >"$dir/out.$r" 2>"$dir/err.$r" &
  pids+=($!)
done
sleep "$delay"
# The kill is meant for the collective, not init: on a loaded machine (ofi's
# init is the slowest) wait, within a bound, for rank 0's header, which
# chorus-bench prints once the communicator is up.
for _ in $(seq 1 600); do
  grep -q "^# chorus-bench" "$dir/out.0" 2>/dev/null && break
  kill -0 "${pids[0]}" 2>/dev/null || break
  sleep 0.1
done
for r in $(seq 0 $((n - 1))); do
  if ! kill -0 "${pids[$r]}" 2>/dev/null; then
    echo "FAIL: rank $r ended before the kill:"; cat "$dir/err.$r"; exit 1
  fi
done
kill -9 "${pids[$victim]}"
wait "${pids[$victim]}" 2>/dev/null
t0=$(date +%s%N)
failed=0; passed=0
for r in $(seq 0 $((n - 1))); do
  [ "$r" = "$victim" ] && continue
  # Wait for this survivor up to the bound.
  while kill -0 "${pids[$r]}" 2>/dev/null; do
    if (( ($(date +%s%N) - t0) / 1000000 > bound * 1000 )); then
      echo "FAIL: rank $r still running $bound s after rank $victim was killed"
      failed=$((failed + 1)); kill -9 "${pids[$r]}"; break
    fi
    sleep 0.05
  done
  wait "${pids[$r]}" 2>/dev/null; rc=$?
  took_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  if [ "$rc" -eq 0 ]; then
    echo "FAIL: rank $r exited 0 after a peer died"; failed=$((failed + 1)); continue
  fi
  if grep -qE "failed: CHORUS_ERR_PEER_LOST" "$dir/err.$r"; then
    line=$(grep -m1 -E "failed: CHORUS_ERR_PEER_LOST" "$dir/err.$r")
    # Every survivor must name the killed rank, also those that saw a
    # neighbour leave first (that neighbour's peer-loss notice names it).
    # A call whose data endpoints were still to be connected on first use
    # says "<call>: rank N is lost (rank M reported it), so the data
    # endpoints ..." (core/data_connect.cc) instead of "(rank N is lost".
    blamed=$(sed -nE 's/.*(\(|: )rank ([0-9]+) is lost.*/\2/p' <<<"$line" | head -n1)
    if [ "$blamed" != "$victim" ]; then
      echo "FAIL: rank $r blames rank '${blamed}', not the killed rank $victim: $line"
      failed=$((failed + 1)); continue
    fi
    bad=$(cat "$dir/out.$r" "$dir/err.$r" | grep -oE "channel [0-9]+" |
          awk -v c="$channels" '$2 >= c' | head -n1)
    if [ -n "$bad" ]; then
      echo "FAIL: rank $r names '$bad', but the job has $channels channel(s):"
      grep -hE "channel [0-9]+" "$dir/out.$r" "$dir/err.$r" | head -n 5
      failed=$((failed + 1)); continue
    fi
    notice=$(cat "$dir/out.$r" "$dir/err.$r" | grep -c "notice channel")
    echo "ok: rank $r exited $rc after ${took_ms} ms, $notice line(s) naming the notice channel:" \
      "$(cut -c1-300 <<<"$line")"
    passed=$((passed + 1))
  else
    echo "FAIL: rank $r exited $rc without a peer-lost error:"; cat "$dir/err.$r"; failed=$((failed + 1))
  fi
done
echo "kill_rank: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
