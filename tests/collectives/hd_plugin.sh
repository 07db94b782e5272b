#!/usr/bin/env bash
# hd_plugin.sh CHORUSRUN CHORUS_BENCH HD_DIR TRANSPORT — the halving_doubling
# plugin (algorithm ABI v2: all_reduce and all_gather, never chosen by auto)
# at 4 and 5 ranks over TRANSPORT:
#   - the file exports the v2 table and nothing else;
#   - pinned, its all_reduce (several dtypes and ops) and all_gather results
#     are checked element by element on every rank, out-of-place and
#     in-place, from 4 B to 16 MiB, and every rank ran it (ops.* counters);
#     once more with two 4 KiB staging slots over two channels, so that
#     a transfer is thousands of pieces striped over both channels, and
#     receives wait for a free slot;
#   - a setting under algorithm.halving_doubling fails init on every rank,
#     naming the key; pinning it for broadcast fails init saying it does not
#     implement broadcast; under auto it is never chosen.
set -uo pipefail
run="$1"
bench="$2"
dir="$3"
tp="$4"
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=script_lib.sh
. "$here/script_lib.sh"
base=(env CHORUS_TRANSPORT="$tp" CHORUS_PLUGIN_PATH="$dir")
init_env=("${base[@]}")

# 1. One exported symbol, the v2 table.
so="$dir/libchorus-algorithm-halving_doubling.so"
got=$(nm -D --defined-only "$so" | awk '{print $3}' | sort | tr '\n' ' ')
if [ "$got" = "chorus_algorithm_plugin_v2 " ]; then ok "exports only chorus_algorithm_plugin_v2"
else bad "$so exports: $got (expected chorus_algorithm_plugin_v2 only)"; fi

# 2. Pinned: checked results on every rank, and every rank ran the plugin.
extra=()  # more VAR=VALUE for the runs of pinned()
pinned() {  # pinned N COLL ARGS...
  local n="$1" coll="$2"
  shift 2
  if "${base[@]}" "${extra[@]}" CHORUS_ALGORITHM_ALL_REDUCE=halving_doubling \
    CHORUS_ALGORITHM_ALL_GATHER=halving_doubling "$run" -n "$n" --timeout 300 -- \
    "$bench" --coll "$coll" -c -b 4 -e 16M -f 8 -n 2 -w 1 --stats "$@" >"$tmp/out" 2>&1; then
    expect_checked "$tmp/out" "$n" "${extra[*]:+${extra[*]}: }pinned $coll $* at $n ranks" \
      "$coll" halving_doubling
  else
    bad "pinned $coll $* at $n ranks failed"
    tail -20 "$tmp/out"
  fi
}
pinned 4 all_reduce -d float32 -o sum
pinned 4 all_reduce -d bfloat16 -o sum
pinned 5 all_reduce -d int64 -o max
pinned 5 all_reduce -d float64 -o prod
pinned 4 all_gather -d int32
pinned 5 all_gather -d uint8
extra=(CHORUS_ALGORITHM_STAGING_SLOT_SIZE=4K CHORUS_ALGORITHM_STAGING_SLOTS=2
       CHORUS_ALGORITHM_CHANNELS=2)
pinned 6 all_reduce -d float32 -o min
pinned 3 all_gather -d int16
extra=()

# 3. What it refuses, on every rank.
printf '[algorithm]\nall_reduce = "halving_doubling"\n[algorithm.halving_doubling]\nbogus = 1\n' \
  >"$tmp/bogus.toml"
expect_init_failure "halving_doubling: unknown setting 'bogus'" \
  CHORUS_CONFIG="$tmp/bogus.toml"
init_coll=broadcast
expect_init_failure "does not implement broadcast" \
  CHORUS_ALGORITHM_BROADCAST=halving_doubling

# 4. auto never runs it (its preference is -1), though it is loaded.
"${base[@]}" "$run" -n 4 --timeout 120 -- "$bench" --coll all_reduce -c -b 64K -e 64K -n 1 -w 0 \
  --stats >"$tmp/auto" 2>&1
if grep -q "ops\.all_reduce\.halving_doubling [1-9]" "$tmp/auto"; then
  bad "auto ran halving_doubling"
elif grep -qE "ops\.all_reduce\.[a-z_]+ [1-9]" "$tmp/auto"; then
  ok "auto ran $(grep -m1 -oE "ops\.all_reduce\.[a-z_]+ [1-9]" "$tmp/auto" | cut -d' ' -f1), not halving_doubling"
else
  bad "auto: no all_reduce counter found"
  tail -8 "$tmp/auto"
fi

finish
