#!/usr/bin/env bash
# One scale measurement (docs/scale.md): N ranks of chorus-bench on this
# machine through chorusrun, init plus a checked 8-byte all_reduce, and what
# it cost. Prints one table row:
#   ranks transport init_s rank0_boot_bytes ss=rank0_boot_bytes fds_per_rank(min/mean/max)
#   rss_mib_per_rank(min/mean/max) allreduce8_us wrong=N sampled=N
#   hwm=peak_rss_mib_per_rank(min/mean/max)
# init_s: from starting chorusrun to rank 0's communicator being ready (rank
# 0 prints its header once chorus_comm_init returned, which is after the init
# barrier, so every rank's communicator is up then). fds and RSS are read from
# /proc of every rank once that header is out, while the ranks run their
# warm-up and timed all_reduces; hwm is each rank's peak RSS until then
# (VmHWM), which includes init's transient allocations. Rank 0's
# side-channel bytes come twice: its bootstrap.bytes_sent counter (builds
# that have it), and the kernel's
# bytes_sent of rank 0's sockets on the coordinator port (ss -ti), which
# works for any build: rank 0 holds no other side-channel sockets.
#
#   bench/scale.sh N TRANSPORT [BUILD_DIR]     e.g. bench/scale.sh 64 tcp build
#
# Raises the soft limit of open files to the hard limit (each rank holds
# O(N) sockets while every peer is connected); says so on stderr.
set -u
n=$1 transport=$2 build=${3:-build}
chorusrun=$build/bin/chorusrun bench=$build/bin/chorus-bench
[ -x "$chorusrun" ] && [ -x "$bench" ] || { echo "no $chorusrun or $bench" >&2; exit 2; }
hard=$(ulimit -Hn)
ulimit -n "$hard" 2>/dev/null && echo "scale.sh: ulimit -n raised to $(ulimit -n)" >&2
# Enough iterations that the ranks are still up while /proc is read.
iters=${SCALE_ITERS:-$([ "$n" -le 16 ] && echo 1000 || { [ "$n" -le 64 ] && echo 100 || echo 20; })}
dir=$(mktemp -d /tmp/chorus-scale.XXXXXX)
trap 'rm -rf "$dir"' EXIT
out=$dir/out

# --stats makes every rank print its counters (O(N) lines each): only up to
# 64 ranks unless SCALE_STATS=1; ss gives rank 0's bytes at any size.
stats_flag=
if [ "${SCALE_STATS:-$([ "$n" -le 64 ] && echo 1)}" = 1 ]; then stats_flag=--stats; fi
port=$((20000 + RANDOM % 10000))
start=$(date +%s.%N)
"$chorusrun" -n "$n" --coordinator "127.0.0.1:$port" --timeout "${SCALE_TIMEOUT:-600}" --env CHORUS_TRANSPORT="$transport" \
  --env CHORUS_TIMEOUT_INIT="${SCALE_INIT_TIMEOUT:-300}" -- \
  "$bench" --coll all_reduce -b 8 -e 8 -n "$iters" -w 5 -c $stats_flag >"$out" 2>&1 &
job=$!
ready=
while kill -0 "$job" 2>/dev/null; do
  if grep -q "# chorus-bench" "$out"; then ready=$(date +%s.%N); break; fi
  sleep 0.05
done
fds=() rss=() hwm=()
ss_bytes=?
if [ -n "$ready" ]; then
  ss_bytes=$(ss -Htin state established "( sport = :$port )" |
    grep -o 'bytes_sent:[0-9]*' | awk -F: '{ s += $2 } END { print s + 0 }')
  for pid in $(pgrep -P "$job"); do
    f=$(ls "/proc/$pid/fd" 2>/dev/null | wc -l)
    r=$(awk '/^VmRSS/ { print $2 }' "/proc/$pid/status" 2>/dev/null)
    h=$(awk '/^VmHWM/ { print $2 }' "/proc/$pid/status" 2>/dev/null)
    [ -n "$r" ] && [ -n "$h" ] && [ "$f" -gt 0 ] && fds+=("$f") rss+=("$r") hwm+=("$h")
  done
fi
wait "$job"
rc=$?
if [ "$rc" != 0 ] || [ -z "$ready" ]; then
  echo "scale.sh: the $n-rank $transport job failed (exit $rc); its last lines:" >&2
  grep -v "# stats" "$out" | tail -20 >&2
  exit 1
fi
stats() {  # values... -> min/mean/max
  printf '%s\n' "$@" | awk '{ s += $1; if (NR == 1 || $1 < lo) lo = $1; if ($1 > hi) hi = $1 }
    END { printf "%g/%.1f/%g", lo, s / NR, hi }'
}
init_s=$(awk -v a="$start" -v b="$ready" 'BEGIN { printf "%.2f", b - a }')
bytes=$(awk '/# stats r0 .* bootstrap.bytes_sent / { print $NF }' "$out")
time_us=$(awk '/^\[0\] +8 / { print $5; exit }' "$out")
wrong=$(awk '/^\[0\] +8 / { print $8; exit }' "$out")
rss_mib=$(printf '%s\n' "${rss[@]}" | awk '{ printf "%.1f\n", $1 / 1024 }')
hwm_mib=$(printf '%s\n' "${hwm[@]}" | awk '{ printf "%.1f\n", $1 / 1024 }')
# shellcheck disable=SC2086
echo "$n $transport ${init_s} ${bytes:-?} ss=${ss_bytes} $(stats "${fds[@]}") $(stats $rss_mib) ${time_us:-?} wrong=${wrong:-?} sampled=${#fds[@]} hwm=$(stats $hwm_mib)"
