#!/usr/bin/env bash
# Starts the ranks of a JACCL program by hand, the way a JACCL job is started
# without chorusrun: each rank in the background with its own JACCL_* (or
# MLX_*) variables and a device file generated here; then waits for all of
# them (each bounded by a timeout) and fails if any rank failed.
#
# Usage: run_ranks.sh --mode MODE -n N --dir DIR --free-port PROG [--timeout S] -- PROGRAM ARGS...
#   MODE env          mesh device file; even ranks get JACCL_RANK,
#                     JACCL_COORDINATOR, JACCL_IBV_DEVICES, odd ranks the
#                     MLX_RANK, MLX_JACCL_COORDINATOR, MLX_IBV_DEVICES aliases
#   MODE env-ring     as env with a device file that links ring neighbours
#                     only, and JACCL_RING (odd ranks: MLX_JACCL_RING)
#   MODE env-nocoord  JACCL_RANK and JACCL_IBV_DEVICES only, no coordinator
#   MODE plain        no JACCL variables; the program is told what it needs
# Options:
#   --device NAME       every link in the device file is NAME (default: a
#                       made-up name per pair, rdma_en<k>, as on a Mac)
#   --wires K           K devices per link (each link lists its name K times)
#   --env VAR=VALUE     set for every rank (after the job variables are cleared)
#   --expect-fail PAT   every rank must fail, its output matching PAT (grep -E)
#   --expect-log PAT    every rank's output must match PAT (grep -E)
# In PROGRAM ARGS, {rank} becomes the rank, {size} N and {dir} DIR.
set -u

mode="" n=0 dir="" free_port="" limit=120 device="" wires=1 expect_fail="" expect_logs=() extra_env=()
while [ $# -gt 0 ]; do
  case "$1" in
    --mode) mode=$2; shift 2 ;;
    -n) n=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --free-port) free_port=$2; shift 2 ;;
    --timeout) limit=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --wires) wires=$2; shift 2 ;;
    --env) extra_env+=("$2"); shift 2 ;;
    --expect-fail) expect_fail=$2; shift 2 ;;
    --expect-log) expect_logs+=("$2"); shift 2 ;;
    --) shift; break ;;
    *) echo "run_ranks.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
if [ -z "$mode" ] || [ "$n" -lt 1 ] || [ -z "$dir" ] || [ $# -lt 1 ]; then
  echo "usage: run_ranks.sh --mode MODE -n N --dir DIR --free-port PROG [--timeout S] -- PROGRAM ARGS..." >&2
  exit 2
fi

rm -rf "$dir" && mkdir -p "$dir" || exit 1

# Device matrix: entry [i][j] names the device linking rank i to rank j.
devices="$dir/devices.json"
{
  echo "["
  for ((i = 0; i < n; i++)); do
    row=""
    for ((j = 0; j < n; j++)); do
      linked=0
      if [ "$i" -ne "$j" ]; then
        if [ "$mode" != env-ring ] || [ $(((i + 1) % n)) -eq "$j" ] || [ $(((j + 1) % n)) -eq "$i" ]; then
          linked=1
        fi
      fi
      if [ $linked -eq 1 ]; then
        name=${device:-rdma_en$((i < j ? i * n + j : j * n + i))}
        cell="\"$name\""
        for ((w = 1; w < wires; w++)); do cell="$cell, \"$name\""; done
        [ "$wires" -gt 1 ] && cell="[$cell]"
      else
        cell=null
      fi
      row="$row${row:+, }$cell"
    done
    sep=","; [ "$i" -eq $((n - 1)) ] && sep=""
    echo "  [$row]$sep"
  done
  echo "]"
} > "$devices"

coordinator=""
if [ "$mode" = env ] || [ "$mode" = env-ring ]; then
  port=$("$free_port") || { echo "run_ranks.sh: no free port" >&2; exit 1; }
  coordinator="127.0.0.1:$port"
fi

# Nothing from the caller's job may leak in: these ranks form their own.
unset CHORUS_RANK CHORUS_WORLD_SIZE CHORUS_COORDINATOR CHORUS_JOB_TOKEN
unset JACCL_RANK JACCL_COORDINATOR JACCL_IBV_DEVICES JACCL_RING
unset MLX_RANK MLX_JACCL_COORDINATOR MLX_IBV_DEVICES MLX_JACCL_RING

pids=()
for ((r = 0; r < n; r++)); do
  vars=()
  case "$mode" in
    env | env-ring)
      if [ $((r % 2)) -eq 0 ]; then
        vars=(JACCL_RANK=$r JACCL_COORDINATOR=$coordinator JACCL_IBV_DEVICES=$devices)
        [ "$mode" = env-ring ] && vars+=(JACCL_RING=1)
      else
        vars=(MLX_RANK=$r MLX_JACCL_COORDINATOR=$coordinator MLX_IBV_DEVICES=$devices)
        [ "$mode" = env-ring ] && vars+=(MLX_JACCL_RING=1)
      fi ;;
    env-nocoord) vars=(JACCL_RANK=$r JACCL_IBV_DEVICES=$devices) ;;
    plain) ;;
    *) echo "run_ranks.sh: unknown mode '$mode'" >&2; exit 2 ;;
  esac
  args=()
  for a in "$@"; do
    a=${a//\{rank\}/$r}; a=${a//\{size\}/$n}; a=${a//\{dir\}/$dir}
    args+=("$a")
  done
  env "${vars[@]}" "${extra_env[@]}" timeout --kill-after=5 "$limit" "${args[@]}" > "$dir/rank$r.log" 2>&1 &
  pids+=($!)
done

status=0
for ((r = 0; r < n; r++)); do
  wait "${pids[$r]}"
  rc=$?
  sed "s/^/[rank $r] /" "$dir/rank$r.log"
  for pat in "${expect_logs[@]}"; do
    if ! grep -qE -- "$pat" "$dir/rank$r.log"; then
      echo "run_ranks.sh: rank $r's output lacks /$pat/" >&2
      status=1
    fi
  done
  if [ -n "$expect_fail" ]; then
    if [ $rc -eq 0 ]; then
      echo "run_ranks.sh: rank $r succeeded but was expected to fail with /$expect_fail/" >&2
      status=1
    elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
      echo "run_ranks.sh: rank $r hung (killed after ${limit}s) instead of failing with /$expect_fail/" >&2
      status=1
    elif ! grep -qE -- "$expect_fail" "$dir/rank$r.log"; then
      echo "run_ranks.sh: rank $r failed (status $rc) without /$expect_fail/" >&2
      status=1
    fi
  elif [ $rc -ne 0 ]; then
    [ $rc -eq 124 ] && echo "run_ranks.sh: rank $r timed out after ${limit}s" >&2
    echo "run_ranks.sh: rank $r exited with status $rc" >&2
    status=1
  fi
done
[ $status -eq 0 ] && echo "run_ranks.sh: all $n ranks passed ($mode${expect_fail:+, each failed as expected})"
exit $status
