#!/usr/bin/env bash
# v2_plugin.sh CHORUSRUN CHORUS_BENCH ALLPAIRS_DIR TRANSPORT — an algorithm
# ABI v2 plugin (plugins/allpairs: all_reduce; sum, min and max only;
# preference 1000 up to algorithm.allpairs.max_bytes, default 64 KiB) at 4
# ranks over TRANSPORT:
#   - pinned, its results are checked element by element on every rank
#     (out-of-place and in-place), and its task ran (the all_reduce.allpairs
#     counter);
#   - `auto` with it on the plugin path runs it for a small sum, and passes it
#     over for prod (which it does not support) and above max_bytes;
#   - a bad setting fails init on every rank, naming the key, and a pinned
#     prod is NOT_SUPPORTED on every rank.
set -uo pipefail
run="$1"
bench="$2"
dir="$3"
tp="$4"
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=script_lib.sh
. "$here/script_lib.sh"
base=(env CHORUS_TRANSPORT="$tp" CHORUS_PLUGIN_PATH="$dir")
init_env=("${base[@]}" CHORUS_ALGORITHM_ALL_REDUCE=allpairs)

# 1. Pinned: checked results, every rank, several dtypes and ops, sizes up to
#    4 MiB (more than one 1 MiB chunk per peer).
for args in "-d float32 -o sum" "-d int64 -o max" "-d bfloat16 -o sum" "-d int32 -o min"; do
  # shellcheck disable=SC2086
  if "${base[@]}" CHORUS_ALGORITHM_ALL_REDUCE=allpairs "$run" -n 4 --timeout 300 -- \
    "$bench" --coll all_reduce -c -b 4 -e 4M -f 8 -n 2 -w 1 $args --stats >"$tmp/out" 2>&1; then
    expect_checked "$tmp/out" 4 "pinned allpairs $args" all_reduce allpairs
  else
    bad "pinned allpairs $args failed"
    tail -20 "$tmp/out"
  fi
done

# 2. auto weighs it with the built-ins, seeing the whole call.
choice() {  # choice OP BYTES -> the algorithm rank 0 logs for that call
  local op="$1" bytes="$2"
  "${base[@]}" CHORUS_LOG=info "$run" -n 4 --timeout 120 -- \
    "$bench" --coll all_reduce -c -b "$bytes" -e "$bytes" -n 1 -w 0 --no-inplace -o "$op" \
    >"$tmp/auto" 2>&1 || { echo "run-failed"; return; }
  grep -o "auto: all_reduce of $bytes bytes (size class [0-9]*) runs '[a-z_]*'" "$tmp/auto" |
    head -n1 | sed "s/.*runs '\([a-z_]*\)'/\1/"
}
expect_choice() {  # expect_choice WANT OP BYTES
  local got
  got=$(choice "$2" "$3")
  if [ "$got" = "$1" ]; then ok "auto: all_reduce $2 of $3 bytes runs $got"; else
    bad "auto: all_reduce $2 of $3 bytes runs '$got', expected $1"
    tail -5 "$tmp/auto"
  fi
}
expect_choice allpairs sum 64
expect_choice allpairs max 4096
expect_choice mesh prod 64
expect_choice mesh sum 1048576

# 3. Settings are checked at init, on every rank, naming the key.
expect_init_failure "allpairs: unknown setting 'bogus'" CHORUS_ALGORITHM_ALLPAIRS_BOGUS=1
expect_init_failure "allpairs: max_bytes = 'lots'" CHORUS_ALGORITHM_ALLPAIRS_MAX_BYTES=lots
# A valid setting moves auto's switch point.
if [ "$(CHORUS_ALGORITHM_ALLPAIRS_MAX_BYTES=2097152 choice sum 1048576)" = allpairs ]; then
  ok "algorithm.allpairs.max_bytes = 2 MiB: auto runs allpairs at 1 MiB"
else
  bad "algorithm.allpairs.max_bytes = 2 MiB did not move auto's choice at 1 MiB"
fi

# 4. A pinned v2 plugin asked for an op it does not declare: NOT_SUPPORTED
#    on every rank, nothing run.
"${base[@]}" CHORUS_ALGORITHM_ALL_REDUCE=allpairs "$run" -n 4 --timeout 120 -- \
  sh -c "$wrap" rank "$bench" --coll all_reduce -c -b 64 -e 64 -n 1 -w 0 -o prod >"$tmp/prod" 2>&1
n=$(grep -c "algorithm 'allpairs' does not support float32 prod" "$tmp/prod" || true)
if [ "$(grep -c "bench exited 0" "$tmp/prod")" != 0 ]; then
  bad "a pinned allpairs ran prod"
elif [ "$n" -ge 4 ]; then
  ok "pinned allpairs with prod: refused on all 4 ranks"
else
  bad "pinned allpairs with prod: $n of 4 ranks refused it as unsupported"
  tail -8 "$tmp/prod"
fi

finish
