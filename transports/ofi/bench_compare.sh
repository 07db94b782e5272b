#!/bin/sh
# Compares all_reduce over the ofi transport (tcp;ofi_rxm and shm) with the
# tcp transport, as in docs/benchmarks.md ("libfabric"). The configurations
# run side by side in alternating rounds, so machine noise hits them alike;
# each run reports per-size medians (chorus-bench), and the table shows the
# median of those over the rounds and the ratio to the tcp transport.
#
# usage: bench_compare.sh <build dir> [ranks...]   (default ranks: 2 4)
# env:   ROUNDS (3), ITERS (20), WARMUP (5), MAXBYTES (64M), FACTOR (2), OUT (a temp dir)
set -eu

build=${1:?usage: bench_compare.sh <build dir> [ranks...]}
shift
ranks=${*:-2 4}
rounds=${ROUNDS:-3}
iters=${ITERS:-20}
warmup=${WARMUP:-5}
maxbytes=${MAXBYTES:-64M}
factor=${FACTOR:-2}
out=${OUT:-$(mktemp -d)}

run() {  # <label> <ranks> <round> <env...>
  label=$1 n=$2 round=$3
  shift 3
  env "$@" "$build/bin/chorusrun" -n "$n" --timeout 3000 -- \
    "$build/bin/chorus-bench" -b 8 -e "$maxbytes" -f "$factor" -n "$iters" -w "$warmup" --json |
    sed -n 's/^\[0\] //p' >"$out/$label.n$n.r$round.json"
}

for n in $ranks; do
  r=1
  while [ "$r" -le "$rounds" ]; do
    run tcp "$n" "$r" CHORUS_TRANSPORT=tcp
    run ofi-tcp "$n" "$r" CHORUS_TRANSPORT=ofi "CHORUS_TRANSPORT_OFI_PROVIDER=tcp;ofi_rxm"
    run ofi-shm "$n" "$r" CHORUS_TRANSPORT=ofi CHORUS_TRANSPORT_OFI_PROVIDER=shm
    r=$((r + 1))
  done
done

python3 - "$out" $ranks <<'EOF'
import glob, json, statistics, sys
out, ranks = sys.argv[1], sys.argv[2:]
def load(label, n):
    times = {}
    for path in sorted(glob.glob(f"{out}/{label}.n{n}.r*.json")):
        for line in open(path):
            rec = json.loads(line)
            times.setdefault(rec["bytes"], []).append(rec["time_us"])
    return {b: statistics.median(v) for b, v in times.items()}
def size(b):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift} {unit}"
    return f"{b} B"
for n in ranks:
    tcp, otcp, oshm = load("tcp", n), load("ofi-tcp", n), load("ofi-shm", n)
    print(f"\n{n} ranks, all_reduce float32 sum, time per call in µs (median of round medians)\n")
    print("| size | tcp | ofi tcp;ofi_rxm | ratio | ofi shm | ratio |")
    print("|---:|---:|---:|---:|---:|---:|")
    for b in sorted(tcp):
        t, a, s = tcp[b], otcp.get(b), oshm.get(b)
        fmt = lambda x: f"{x:,.1f}" if x is not None else "—"
        rat = lambda x: f"{x / t:.2f}" if x is not None else "—"
        print(f"| {size(b)} | {fmt(t)} | {fmt(a)} | {rat(a)} | {fmt(s)} | {rat(s)} |")
print(f"\nraw results: {out}")
EOF
