#!/usr/bin/env bash
# bench.sh BUILD_DIR [SIZE] — run INSIDE the soft-RoCE guest:
#   tests/softroce/run-in-guest.sh bash tests/softroce/bench.sh BUILD_DIR
# Measures, on the same rxe0 and in the same boot:
#   ib_send_bw and ib_write_bw (perftest, RC, one QP, SIZE-byte messages,
#   256 MiB in all);
#   chorus-bench all_reduce (float32 sum, 2 ranks, SIZE bytes) over the verbs
#   transport and over the tcp transport (loopback inside the guest);
# and prints one table plus the ratios that docs/benchmarks.md quotes.
# Absolute numbers are emulation-bound (TCG); compare the ratios.
set -uo pipefail
build="$(cd "${1:?usage: $0 BUILD_DIR [SIZE]}" && pwd)"
size="${2:-1048576}"
bin="$build/bin"
export CHORUS_PLUGIN_PATH="$build/lib/chorus"
export CHORUS_LOG=warn
work="$(mktemp -d)"
gid=1  # ::ffff:169.254.10.1, RoCE v2 (what the verbs transport picks too)
# About 256 MiB through perftest per run, at least 10 messages.
# perftest cannot post a message over the device's max_msg_sz (8 MiB on
# rxe); above it, its stream of the largest allowed messages is the reference.
max_msg=$(ibv_devinfo -v -d rxe0 2>/dev/null | awk '/max_msg_sz/ {print $2; exit}')
max_msg=$(( ${max_msg:-0} ))  # printed in hex
[ "$max_msg" -gt 0 ] || max_msg=8388608
psize=$size; [ "$psize" -gt "$max_msg" ] && psize=$max_msg
iters=$(( 268435456 / psize )); [ "$iters" -lt 10 ] && iters=10
citers=20; [ "$size" -ge 33554432 ] && citers=5

perftest() {  # perftest TOOL -> average MB/s (perftest's MB: 2^20 bytes)
  local tool="$1"
  "$tool" -d rxe0 -x "$gid" -s "$psize" -n "$iters" -F >"$work/$tool.server" 2>&1 &
  local server=$!
  sleep 2
  "$tool" -d rxe0 -x "$gid" -s "$psize" -n "$iters" -F localhost >"$work/$tool.client" 2>&1
  wait "$server"
  awk -v s="$psize" '$1 == s { print $4 }' "$work/$tool.client" | tail -n1
}

chorus() {  # chorus TRANSPORT -> busbw in GB/s (10^9 bytes) for SIZE, 2 ranks
  CHORUS_TRANSPORT="$1" "$bin/chorusrun" -n 2 --timeout 300 -- \
    "$bin/chorus-bench" -b "$size" -e "$size" -n "$citers" -w 1 --json >"$work/chorus.$1" 2>&1
  grep -o '"busbw_gbs":[0-9.]*' "$work/chorus.$1" | head -n1 | cut -d: -f2
}

send_mib=$(perftest ib_send_bw)
write_mib=$(perftest ib_write_bw)
verbs_gbs=$(chorus verbs)
tcp_gbs=$(chorus tcp)
for v in send_mib write_mib verbs_gbs tcp_gbs; do
  if [ -z "${!v}" ]; then
    echo "bench: no result for $v; logs:"
    tail -n 20 "$work"/*
    exit 1
  fi
done
awk -v s="$size" -v ps="$psize" -v send="$send_mib" -v write="$write_mib" -v vb="$verbs_gbs" -v tb="$tcp_gbs" -v kver="$(uname -r)" '
  BEGIN {
    # perftest MB/s are 2^20 bytes; chorus-bench GB/s are 10^9 bytes. All as MB/s = 10^6 B/s.
    send_mb = send * 1.048576; write_mb = write * 1.048576
    v = vb * 1000; t = tb * 1000
    printf "message size %d bytes (perftest: %d), kernel %s\n", s, ps, kver
    printf "%-44s %10s\n", "measurement", "MB/s"
    printf "%-44s %10.1f\n", "ib_send_bw (RC send, 1 QP)", send_mb
    printf "%-44s %10.1f\n", "ib_write_bw (RC RDMA write, 1 QP)", write_mb
    printf "%-44s %10.1f\n", "chorus-bench all_reduce busbw, verbs, 2 ranks", v
    printf "%-44s %10.1f\n", "chorus-bench all_reduce busbw, tcp, 2 ranks", t
    printf "ratio verbs / ib_send_bw   = %.2f\n", v / send_mb
    printf "ratio verbs / ib_write_bw  = %.2f\n", v / write_mb
    printf "ratio verbs / tcp          = %.2f\n", v / t
  }'
rm -rf "$work"
