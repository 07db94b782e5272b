#!/usr/bin/env bash
# chorus-bench --stats on 3 ranks: every rank prints its counters; check that
# they are there and consistent (bytes r sent to p == bytes p received from r,
# totals == sum over peers, all_reduce count == warmup + iterations per size
# plus the bench's own bookkeeping all_reduce of the times).
set -euo pipefail
chorusrun=$1
bench=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$chorusrun" -n 3 --timeout 50 -- "$bench" -b 1K -e 64K -f 8 -n 3 -w 1 -c --stats >"$out" 2>&1 || {
  cat "$out"; echo "bench_stats: chorus-bench failed"; exit 1; }
awk '
  /# stats r[0-9]+ / {
    for (i = 1; i <= NF; i++) if ($i == "stats") break
    r = substr($(i + 1), 2); name = $(i + 3); v = $(i + 4)
    val[r, name] = v; seen[r] = 1; lines++
  }
  END {
    bad = 0
    if (length(seen) != 3) { print "expected stats from 3 ranks, got " length(seen); bad++ }
    for (a = 0; a < 3; a++) {
      tot = 0
      for (b = 0; b < 3; b++) {
        if (a == b) continue
        s = val[a, "peer." b ".bytes_sent"]; rcv = val[b, "peer." a ".bytes_received"]
        if (s == "" || s + 0 == 0) { print "rank " a ": no bytes sent to " b; bad++ }
        if (s != rcv) { print "rank " a " sent " s " bytes to " b ", which received " rcv; bad++ }
        tot += s
      }
      if (tot != val[a, "bytes_sent"]) { print "rank " a ": bytes_sent " val[a, "bytes_sent"] " != sum " tot; bad++ }
      # 3 sizes x 2 passes (out-of-place, in-place) x (1 warmup + 3 iters)
      # all_reduces + 1 per pass collecting the times (-c checks on each rank
      # and uses no collective for its verdict)
      ar = 0
      for (k in val) { split(k, parts, SUBSEP); if (parts[1] == a && parts[2] ~ /^ops\.all_reduce\./) ar += val[k] }
      if (ar != 30) { print "rank " a ": counted " ar " all_reduces, expected 30"; bad++ }
      if (val[a, "errors"] != 0) { print "rank " a ": errors " val[a, "errors"]; bad++ }
    }
    printf "bench_stats: %d stats lines, %d problem(s)\n", lines, bad
    exit bad != 0
  }' "$out" || { cat "$out"; exit 1; }
