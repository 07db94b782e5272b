#!/usr/bin/env bash
# What chorus-bench and collective_check report, on 2 and 3 ranks:
#  - a size that is not a whole number of elements is rounded down, the size
#    printed is the one that ran, and a header line says it was rounded;
#  - out-of-place and in-place columns side by side, both checked (-c);
#  - the algorithm printed is the one that ran, pinned by -a or by the
#    environment (collective_check too).
# usage: reports.sh CHORUSRUN CHORUS_BENCH COLLECTIVE_CHECK
# Prints "N passed, M failed".
set -uo pipefail
run=$1 bench=$2 check=$3
for var in $(compgen -e | grep '^CHORUS_'); do unset "$var"; done
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok    $1"; }
bad() { failed=$((failed + 1)); echo "FAIL  $1"; [ -n "${2:-}" ] && sed 's/^/      | /' <<<"$2"; }
expect() {  # expect NAME OUTPUT REGEX
  if grep -Eq -- "$3" <<<"$2"; then ok "$1"; else bad "$1 (no line matching '$3')" "$2"; fi
}

out=$("$run" -n 2 --no-prefix --timeout 60 -- "$bench" -b 3 -e 3 -d float64 -c -n 1 -w 0 2>&1)
expect "-b 3 -d float64: the note says 3 -> 0" "$out" "^# sizes rounded down to whole float64 elements: 3 -> 0$"
expect "-b 3 -d float64: runs 0 bytes, count 0, algbw 0" "$out" "^ +0 +0 +[a-z]+ +[0-9.]+ +0\.000 +0\.000 +0 "

out=$("$run" -n 3 --no-prefix --timeout 60 -- "$bench" --coll all_gather -b 100 -e 100 -c -n 1 -w 1 2>&1)
expect "all_gather -b 100 at 3 ranks runs 96 bytes, 8 per rank" "$out" "^ +96 +8 +[a-z]+ "
expect "all_gather: the note says 100 -> 96 per rank" "$out" "whole float32 elements per rank: 100 -> 96"
expect "all_gather: in-place column checked (0 wrong)" "$out" "^ +96 +8 +[a-z]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +0 +[0-9.]+ +[0-9.]+ +[0-9.]+ +0$"

out=$("$run" -n 3 --no-prefix --timeout 60 -- "$bench" -b 4K -e 4K -c -n 1 -w 1 -a mesh --json 2>&1)
expect "all_reduce --json: in-place object with 0 wrong" "$out" '"wrong":0,"checked":true,"inplace":\{"time_us":[0-9.]+,"algbw_gbs":[0-9.]+,"busbw_gbs":[0-9.]+,"wrong":0\}'
expect "-a mesh: the algorithm that ran is mesh" "$out" '"algorithm":"mesh"'
out=$(CHORUS_ALGORITHM_ALL_REDUCE=ring "$run" -n 3 --no-prefix --timeout 60 -- "$bench" -b 4K -e 4K -n 1 -w 0 2>&1)
expect "CHORUS_ALGORITHM_ALL_REDUCE=ring: the table says ring" "$out" "^ +4096 +1024 +ring "
out=$("$run" -n 3 --no-prefix --timeout 60 -- "$bench" --coll reduce_scatter -b 96 -e 96 -n 1 -w 0 2>&1)
expect "reduce_scatter: in-place columns n/a" "$out" "^ +96 +8 +[a-z]+ .* n/a +n/a +n/a +n/a$"

out=$(CHORUS_ALGORITHM_ALL_REDUCE=mesh "$run" -n 2 --no-prefix --timeout 60 -- "$check" --counts 5 --every 40 2>&1)
expect "collective_check, all_reduce pinned to mesh by the environment, says mesh" "$out" \
  "^collective_check rank 0 of 2 \(algorithms run: [^;]*all_reduce=mesh"
if grep -q "all_reduce=ring" <<<"$out"; then bad "collective_check: no ring all_reduce ran" "$out"; else ok "collective_check: no ring all_reduce ran"; fi
out=$("$run" -n 2 --no-prefix --timeout 60 -- "$check" -a ring --counts 5 --every 40 2>&1)
expect "collective_check -a ring says ring" "$out" "^collective_check rank 1 of 2 \(algorithms run: [^;]*all_reduce=ring"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
