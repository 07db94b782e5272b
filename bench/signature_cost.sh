#!/usr/bin/env bash
# Cost of the call-signature check (check.signatures, docs/reliability.md
# §4.5): chorus-bench all_reduce with the check on and off, alternating job
# by job for ROUNDS rounds so that both see the same machine; prints, per
# size, the median over the rounds of each job's time per call (chorus-bench
# already reports the median over its iterations) and the on/off ratio.
#
#   [MINBYTES=8] [MAXBYTES=4M] [ITERS=200] [WARMUP=20] bench/signature_cost.sh [BUILD_DIR] [RANKS] [ROUNDS] [chorus-bench args]
set -euo pipefail
build=${1:-build}
ranks=${2:-2}
rounds=${3:-5}
shift $(( $# < 3 ? $# : 3 ))
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for r in $(seq 1 "$rounds"); do
  for mode in true false; do
    CHORUS_CHECK_SIGNATURES=$mode "$build/bin/chorusrun" -n "$ranks" -- \
      "$build/bin/chorus-bench" --coll all_reduce -b "${MINBYTES:-8}" -e "${MAXBYTES:-4M}" -f 8 -n "${ITERS:-200}" -w "${WARMUP:-20}" --json "$@" |
      grep '^\[0\] {' | sed 's/^\[0\] //' | sed "s/^/$mode /" >>"$out/results"
  done
done
python3 - "$out/results" "$ranks" "$rounds" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    mode, js = line.split(" ", 1)
    d = json.loads(js)
    rows.setdefault((d["bytes"], d["algorithm"], d["transport"]), {}).setdefault(mode, []).append(d["time_us"])
print(f"all_reduce float32, {sys.argv[2]} ranks, median of {sys.argv[3]} alternating rounds")
print("| bytes | algorithm | transport | check on (us) | check off (us) | on / off |")
print("|---:|---|---|---:|---:|---:|")
for (b, algo, tp), m in sorted(rows.items()):
    on, off = statistics.median(m["true"]), statistics.median(m["false"])
    print(f"| {b} | {algo} | {tp} | {on:.2f} | {off:.2f} | {on / off:.3f} |")
PY
