#!/usr/bin/env bash
# mesh_settings.sh CHORUSRUN CHORUS_BENCH TRANSPORT — the built-in mesh's
# settings (algorithm.mesh.*) at 4 ranks over TRANSPORT, now that the mesh is
# an algorithm ABI v2 plugin that checks them once, at communicator init:
#   - an unknown key, a bad one_shot_max and a bad barrier_radix fail init on
#     every rank with the mesh's message naming the key, whether the mesh is
#     pinned or only loaded by `auto`;
#   - valid values take effect: one_shot_max = 0 sends more messages for a
#     4 KiB all_reduce than the default (reduce-scatter + all-gather instead
#     of one shot), one_shot_max = 1M fewer for a 256 KiB one, and
#     barrier_radix = 4 sends three tokens per barrier where radix 2 sends
#     two; every result is checked element by element on every rank.
set -uo pipefail
run="$1"
bench="$2"
tp="$3"
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=script_lib.sh
. "$here/script_lib.sh"
init_env=(env CHORUS_TRANSPORT="$tp")

# 1. Bad settings fail init on every rank, naming the key.
pin=CHORUS_ALGORITHM_ALL_REDUCE=mesh
expect_init_failure "mesh: unknown setting algorithm.mesh.bogus" $pin CHORUS_ALGORITHM_MESH_BOGUS=1
expect_init_failure "mesh: algorithm.mesh.one_shot_max = 'lots'" $pin \
  CHORUS_ALGORITHM_MESH_ONE_SHOT_MAX=lots
expect_init_failure "mesh: algorithm.mesh.barrier_radix = '1'" $pin \
  CHORUS_ALGORITHM_MESH_BARRIER_RADIX=1
# Not pinned: auto loads the mesh for its choice, so its settings are checked
# as well, before any call runs.
expect_init_failure "mesh: algorithm.mesh.one_shot_max = '-5'" \
  CHORUS_ALGORITHM_MESH_ONE_SHOT_MAX=-5

# 2. Valid settings take effect. messages COLL BYTES ENV... -> rank 0's
#    messages_sent for one checked out-of-place call (plus the bench's own
#    barriers, the same in every run), or "failed".
messages() {
  local coll="$1" bytes="$2"
  shift 2
  if ! env CHORUS_TRANSPORT="$tp" CHORUS_ALGORITHM_ALL_REDUCE=mesh CHORUS_ALGORITHM_BARRIER=mesh \
    "$@" "$run" -n 4 --timeout 120 -- "$bench" --coll "$coll" -c -b "$bytes" -e "$bytes" -n 1 \
    -w 0 --no-inplace --stats >"$tmp/stats" 2>&1; then
    echo failed
    return
  fi
  if [ "$(grep -c "# Wrong elements: 0$" "$tmp/stats")" -lt 4 ] && [ "$coll" != barrier ]; then
    echo failed
    return
  fi
  grep -oE "# stats r0 w0 messages_sent [0-9]+" "$tmp/stats" | awk '{print $NF}'
}
compare() {  # compare WHAT RELATION A B
  local what="$1" rel="$2" a="$3" b="$4"
  if [ "$a" = failed ] || [ "$b" = failed ] || [ -z "$a" ] || [ -z "$b" ]; then
    bad "$what: a run failed or had wrong elements"
    tail -8 "$tmp/stats"
  elif [ "$a" "$rel" "$b" ]; then
    ok "$what ($a $rel $b messages)"
  else
    bad "$what: $a messages against $b"
  fi
}
default=$(messages all_reduce 4096)
two_phase=$(messages all_reduce 4096 CHORUS_ALGORITHM_MESH_ONE_SHOT_MAX=0)
compare "one_shot_max = 0: a 4 KiB all_reduce runs reduce-scatter + all-gather" -gt \
  "$two_phase" "$default"
default=$(messages all_reduce 262144)
one_shot=$(messages all_reduce 262144 CHORUS_ALGORITHM_MESH_ONE_SHOT_MAX=1M)
compare "one_shot_max = 1M: a 256 KiB all_reduce runs one shot" -lt "$one_shot" "$default"
radix2=$(messages barrier 0)
radix4=$(messages barrier 0 CHORUS_ALGORITHM_MESH_BARRIER_RADIX=4)
compare "barrier_radix = 4: one round of three tokens instead of two rounds of one" -gt \
  "$radix4" "$radix2"

finish
