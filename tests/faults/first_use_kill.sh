#!/usr/bin/env bash
# A rank SIGKILLed before the first call that connects the data endpoints to
# every peer (docs/scale.md, "Data endpoints on first use"). Starts N ranks
# of first_use_kill_check by hand (chorusrun would stop the job when the
# victim dies) and requires: the victim dies by SIGKILL, every survivor
# exits 0 (its check: the mesh all_gather failed within timeout.collective
# + 3 s blaming the victim), and nothing is left running after BOUND_S.
# usage: first_use_kill.sh CHECK NRANKS VICTIM KILL_DELAY_MS CALL_DELAY_MS TIMEOUT_S BOUND_S [MODE]
# MODE (optional) is passed on to CHECK (first_use_kill_check: broadcast).
set -uo pipefail
check=$1 n=$2 victim=$3 kill_delay=$4 call_delay=$5 timeout_s=$6 bound=$7 mode=${8:-}
. "$(dirname "${BASH_SOURCE[0]}")/../lib/free_port.sh"
port=$(chorus_free_port)
dir=$(mktemp -d)
pids=()
trap 'kill -9 "${pids[@]}" 2>/dev/null; rm -rf "$dir"' EXIT
for r in $(seq 0 $((n - 1))); do
  CHORUS_RANK=$r CHORUS_WORLD_SIZE=$n CHORUS_COORDINATOR=127.0.0.1:$port \
    "$check" "$victim" "$kill_delay" "$call_delay" "$timeout_s" $mode >"$dir/out.$r" 2>"$dir/err.$r" &
  pids+=($!)
done
t0=$(date +%s)
failed=0
for r in $(seq 0 $((n - 1))); do
  while kill -0 "${pids[$r]}" 2>/dev/null; do
    if (( $(date +%s) - t0 > bound )); then
      echo "FAIL: rank $r still running after $bound s"; kill -9 "${pids[$r]}"; break
    fi
    sleep 0.1
  done
  wait "${pids[$r]}" 2>/dev/null; rc=$?
  if [ "$r" = "$victim" ]; then
    [ "$rc" -eq 137 ] || { echo "FAIL: the victim rank $r exited $rc, not by SIGKILL:";
                           cat "$dir/out.$r" "$dir/err.$r"; failed=$((failed + 1)); }
    continue
  fi
  grep -h "first_use:" "$dir/out.$r" | cut -c1-400
  if [ "$rc" -ne 0 ]; then
    echo "FAIL: rank $r exited $rc:"; grep -h "FAIL" "$dir/out.$r"; tail -n 5 "$dir/err.$r"
    failed=$((failed + 1))
  fi
done
echo "first_use_kill: $((n - 1 - failed)) of $((n - 1)) survivors passed"
[ "$failed" -eq 0 ]
