#!/usr/bin/env bash
# Collectives across namespaces, checked element by element, on a clean
# network or with a fault that must not change any result:
#   clean  — nothing injected
#   loss   — 1 % of the packets leaving every namespace dropped (nftables)
#   delay  — every byte between ranks held 20 ms per direction (delay_proxy.py)
# Every rank must exit 0, rank 0 must report 0 wrong elements for every size,
# and the fault must demonstrably have been in effect (packets dropped,
# connections proxied and collectives slowed by the delay).
# usage: collectives.sh BENCH NRANKS clean|loss|delay
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$here/lib.sh"

bench="$1"; n="$2"; mode="$3"
delay_ms=20
netns_init "$bench"
netns_create "$n"

case "$mode" in
  clean) ;;
  loss) netns_loss 1 ;;
  delay) netns_delay "$delay_ms" ;;
  *) netns_fail "unknown mode $mode" ;;
esac

# Generous timeouts: the faults here must slow the job down, never fail it.
settings="CHORUS_TIMEOUT_INIT=60 CHORUS_TIMEOUT_COLLECTIVE=60"
case "$mode" in
  delay) runs=("all_reduce -b 4 -e 1M -f 16 -n 3 -w 1" "all_gather -b 1K -e 256K -f 16 -n 3 -w 1") ;;
  *) runs=("all_reduce -b 4 -e 4M -f 8 -n 5 -w 1" "all_gather -b 1K -e 4M -f 8 -n 5 -w 1"
           "reduce_scatter -b 1K -e 4M -f 8 -n 5 -w 1" "broadcast -b 1K -e 4M -f 8 -n 5 -w 1 -r 1") ;;
esac

failed=0
for run in "${runs[@]}"; do
  read -r coll args <<<"$run"
  t0=$(netns_now_us)
  # shellcheck disable=SC2086
  netns_start_ranks "$settings" -- -c --coll "$coll" $args
  netns_wait_ranks 150 || failed=$((failed + 1))
  took_ms=$((($(netns_now_us) - t0) / 1000))
  bad=0
  for ((r = 0; r < n; ++r)); do
    rc=$(netns_rank_rc "$r")
    [ "$rc" = 0 ] || { echo "FAIL: $coll: rank $r exited $rc: $(netns_rank_error "$r")"; bad=1; }
    # chorus-bench -c: every rank checks every iteration and reports its own count.
    grep -q "^# Wrong elements: 0$" "$NETNS_DIR/out.$r" ||
      { echo "FAIL: $coll: rank $r reported wrong elements or no check"; bad=1; }
  done
  out="$NETNS_DIR/out.0"
  grep -q "checking every iteration on every rank" "$out" || { echo "FAIL: $coll: rank 0 did not check the data"; bad=1; }
  sizes=$(grep -cE '^ +[0-9]+ ' "$out")
  [ "$sizes" -ge 2 ] || { echo "FAIL: $coll: only $sizes sizes reported"; bad=1; }
  if [ "$mode" = delay ]; then
    # One collective among ranks in different namespaces needs at least one
    # message to cross a proxy: the median time of every size, even the
    # smallest, must be at least the one-way delay. An order, not a speed
    # check: an iteration counts the slowest rank, which is no faster than the
    # first to leave the barrier, and that one needs bytes the others send
    # only after it started timing, each held DELAY_MS. A loaded host can
    # only make it longer.
    fastest_us=$(awk '/^ +[0-9]+ / {print $4}' "$out" | sort -n | head -n1)
    if awk -v t="$fastest_us" -v d="$delay_ms" 'BEGIN {exit !(t < d * 1000)}'; then
      echo "FAIL: $coll: fastest size took $fastest_us us, less than the ${delay_ms} ms delay"; bad=1
    fi
  fi
  if [ "$bad" = 0 ]; then
    echo "ok: $coll on $n namespaces ($mode): $sizes sizes exact on every rank, ${took_ms} ms"
  else
    netns_dump; failed=$((failed + 1))
  fi
  sed 's/^/    /' "$NETNS_DIR/out.0"
done

case "$mode" in
  loss)
    read -r dropped seen < <(netns_loss_counts)
    echo "loss: the rules dropped $dropped of $seen packets"
    [ "$dropped" -gt 0 ] || { echo "FAIL: no packet was dropped: the loss rule was not in effect"; failed=$((failed + 1)); } ;;
  delay)
    proxied=$(netns_delay_redirected)
    echo "delay: $proxied connections went through the ${delay_ms} ms proxies"
    [ "$proxied" -gt 0 ] || { echo "FAIL: no connection was proxied"; failed=$((failed + 1)); } ;;
esac
echo "collectives $mode: ${#runs[@]} runs, $failed failed"
[ "$failed" -eq 0 ]
