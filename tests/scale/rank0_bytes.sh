#!/usr/bin/env bash
# Rank 0's bootstrap bytes grow linearly with the job size: init (and one
# checked 8 B all_reduce) at 8 and at 32 ranks over tcp, each rank 0's
# bootstrap.bytes_sent counter read through chorus-bench --stats. 4x the
# ranks may cost rank 0 at most 6x the bytes (4x plus slack for fixed costs);
# the old star through rank 0 cost about 57x from 16 to 64 ranks (its
# all_gather of the address tables was O(N^3); docs/scale.md).
#   rank0_bytes.sh CHORUSRUN CHORUS_BENCH
set -u
chorusrun=$1 bench=$2
out=$(mktemp /tmp/chorus-rank0-bytes.XXXXXX)
trap 'rm -f "$out"' EXIT
bytes() {  # ranks
  "$chorusrun" -n "$1" --timeout 25 -- "$bench" --coll all_reduce -b 8 -e 8 -n 1 -w 0 -c --stats \
    >"$out" 2>&1 || { cat "$out"; echo "FAIL: the $1-rank job failed"; exit 1; }
  awk '/# stats r0 .* bootstrap.bytes_sent / { print $NF }' "$out"
}
small=$(bytes 8)
large=$(bytes 32)
[ -n "$small" ] && [ -n "$large" ] || { cat "$out"; echo "FAIL: no bootstrap.bytes_sent counter of rank 0"; exit 1; }
echo "rank 0 sent $small bytes at 8 ranks, $large bytes at 32 ranks"
awk -v s="$small" -v l="$large" 'BEGIN { r = l / s; printf "ratio %.2f (limit 6)\n", r; exit !(r <= 6) }' ||
  { echo "FAIL: rank 0's bootstrap bytes grow faster than linearly"; exit 1; }
echo "PASS"
