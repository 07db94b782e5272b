#!/usr/bin/env bash
# jaccl-bench.sh BUILD_DIR — run INSIDE the soft-RoCE guest:
#   tests/softroce/run-in-guest.sh bash tests/softroce/jaccl-bench.sh BUILD_DIR
# A JACCL-API program (jaccl_allsum, float32 all_sum, 2 ranks) started with
# JACCL_RANK / JACCL_COORDINATOR / JACCL_IBV_DEVICES as MLX's launcher does, at
# 1 MiB and 4 MiB: over verbs (the rxe0 device matrix, no transport named) and
# over tcp (CHORUS_TRANSPORT=tcp, same matrix), next to ib_send_bw on the same
# rxe0 in the same boot. Prints one table with the ratios docs/benchmarks.md
# quotes. Absolute numbers are emulation-bound (TCG); compare the ratios.
set -uo pipefail
build="$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$(cd "$here/../.." && pwd)"
bin="$build/bin"
export CHORUS_PLUGIN_PATH="$build/lib/chorus"
export CHORUS_LOG=warn
export CHORUS_TRANSPORT_VERBS_TIMEOUT=18
work="$(mktemp -d)"
iters=${JACCL_BENCH_ITERS:-20}

jaccl() {  # jaccl LABEL [VAR=VALUE...] -> rank 0's float32 rows
  local label="$1"; shift
  env "$@" "$src/tests/jaccl/run_ranks.sh" --free-port "$bin/jaccl_free_port" --timeout 280 \
    --device rxe0 --mode env -n 2 --dir "$work/$label" -- \
    "$bin/jaccl_allsum" -b 1M -e 4M -f 4 -n "$iters" -w 2 --check-max 64K >"$work/$label.out" 2>&1 ||
    { echo "jaccl-bench: $label run failed:"; tail -n 30 "$work/$label.out"; exit 1; }
  # "[rank 0] [0]  bytes count float32 time(us) algbw busbw OK"
  awk '$1 == "[rank" && $2 == "0]" && $5 == "float32" { print $3, $7 }' "$work/$label.out"
}

send_bw() {  # send_bw SIZE -> ib_send_bw MB/s (perftest MB: 2^20 bytes)
  local size="$1" n=$(( 268435456 / $1 ))
  ib_send_bw -d rxe0 -x 1 -s "$size" -n "$n" -F >"$work/send.$size.server" 2>&1 &
  local server=$!
  sleep 2
  ib_send_bw -d rxe0 -x 1 -s "$size" -n "$n" -F localhost >"$work/send.$size.client" 2>&1
  wait "$server"
  awk -v s="$size" '$1 == s { print $4 }' "$work/send.$size.client" | tail -n1
}

verbs_rows=$(jaccl verbs -u CHORUS_TRANSPORT)
tcp_rows=$(jaccl tcp CHORUS_TRANSPORT=tcp)
s1=$(send_bw 1048576)
s4=$(send_bw 4194304)
echo "JACCL all_sum float32, 2 ranks, $iters iterations (median iteration), kernel $(uname -r)"
printf "%-10s %14s %14s %14s %12s %12s\n" "bytes" "verbs MB/s" "tcp MB/s" "ib_send_bw MB/s" "verbs/tcp" "verbs/send"
for size in 1048576 4194304; do
  v=$(awk -v s="$size" '$1 == s { print $2 }' <<<"$verbs_rows")
  t=$(awk -v s="$size" '$1 == s { print $2 }' <<<"$tcp_rows")
  sb=$s1; [ "$size" -eq 4194304 ] && sb=$s4
  if [ -z "$v" ] || [ -z "$t" ] || [ -z "$sb" ]; then
    echo "jaccl-bench: no result at $size bytes (verbs '$v', tcp '$t', ib_send_bw '$sb')"; exit 1
  fi
  # algbw is GB/s (10^9 B/s); perftest MB/s is 2^20 B/s: both as 10^6 B/s.
  awk -v s="$size" -v v="$v" -v t="$t" -v sb="$sb" 'BEGIN {
    vm = v * 1000; tm = t * 1000; sm = sb * 1.048576
    printf "%-10d %14.1f %14.1f %14.1f %12.2f %12.2f\n", s, vm, tm, sm, vm / tm, vm / sm }'
done
rm -rf "$work"
