#!/usr/bin/env bash
# auto_transport.sh CHORUSRUN COLLECTIVE_CHECK N [HOSTS] -- the collective
# matrix sample over transport.name = "auto" on this machine, every rank
# checking every element, and proof from each rank's info log line of which
# sub-transport served which peer.
#   HOSTS unset: all N ranks share one host identity, so every peer must be
#   reached over shm and none over tcp.
#   HOSTS = H: rank r pretends to be on host r*H/N (transport.auto.host_id),
#   so ranks of one pretend host use shm and the others tcp.
#   HOSTS = default: no CHORUS_TRANSPORT at all; auto is the embedded default,
#   so every peer must be reached over shm.
#   HOSTS = shm-refused: the default again, with the file size limit below
#   the smallest shm segment, so every segment is refused (EFBIG): every peer
#   must be reached over tcp, and each rank must warn once, saying why.
set -uo pipefail
run="$1"; check="$2"; n="$3"; hosts="${4:-}"
mode=explicit
case "$hosts" in default|shm-refused) mode=$hosts; hosts="" ;; esac
log=$(mktemp /tmp/chorus-auto-transport.XXXXXX)
trap 'rm -f "$log"' EXIT

offset=$((n % 4))
if [ "$mode" = default ]; then
  env -u CHORUS_TRANSPORT -u CHORUS_TRANSPORT_NAME CHORUS_LOG=info "$run" -n "$n" --timeout 600 -- \
    "$check" --every 4 --offset "$offset" >"$log" 2>&1
elif [ "$mode" = shm-refused ]; then
  # Only the job gets the limit (SIGXFSZ ignored, so ftruncate fails with
  # EFBIG); its output goes through a pipe, which the limit does not touch.
  (trap '' XFSZ; ulimit -f 16
   exec env -u CHORUS_TRANSPORT -u CHORUS_TRANSPORT_NAME CHORUS_LOG=info "$run" -n "$n" --timeout 600 -- \
     "$check" --every 16 --offset "$offset") 2>&1 | cat >"$log"
elif [ -z "$hosts" ]; then
  CHORUS_TRANSPORT=auto CHORUS_LOG=info "$run" -n "$n" --timeout 600 -- \
    "$check" --every 4 --offset "$offset" >"$log" 2>&1
else
  # chorusrun gives every rank CHORUS_RANK; the host id is derived from it.
  CHORUS_TRANSPORT=auto CHORUS_LOG=info "$run" -n "$n" --timeout 600 -- \
    bash -c 'CHORUS_TRANSPORT_AUTO_HOST_ID="pretend-host-$((CHORUS_RANK * '"$hosts"' / '"$n"'))" exec "$0" "$@"' \
    "$check" --every 4 --offset "$offset" >"$log" 2>&1
fi
rc=$?
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
[ "$rc" = 0 ] || fail "the job exited $rc"

# The ranks a rank should reach over each sub-transport, as auto logs them
# (runs of three or more collapsed to a..b).
rank_list() {
  local out="" prev=-2 start=-2 r
  flush() {
    [ "$start" -lt 0 ] && return
    [ -n "$out" ] && out+=","
    if ((prev - start >= 2)); then out+="$start..$prev"
    elif ((prev > start)); then out+="$start,$prev"
    else out+="$start"; fi
  }
  for r in "$@"; do
    if ((r == prev + 1)); then prev=$r; continue; fi
    flush; start=$r; prev=$r
  done
  flush
  echo "$out"
}
phrase() {  # phrase NAME RANKS...
  local name="$1"; shift
  [ $# -eq 0 ] && return
  if [ $# -eq 1 ]; then echo "$name to rank $1"; else echo "$name to ranks $(rank_list "$@")"; fi
}

for ((r = 0; r < n; ++r)); do
  local_peers=(); fabric_peers=()
  for ((p = 0; p < n; ++p)); do
    ((p == r)) && continue
    if [ "$mode" = shm-refused ]; then fabric_peers+=("$p")
    elif [ -z "$hosts" ] || ((p * hosts / n == r * hosts / n)); then local_peers+=("$p"); else fabric_peers+=("$p"); fi
  done
  want="$(phrase shm "${local_peers[@]}")"
  fab="$(phrase tcp "${fabric_peers[@]}")"
  [ -n "$fab" ] && want="${want:+$want; }$fab"
  line=$(grep -E "\[chorus r$r INFO\] comm w0: auto: " "$log" | head -n1 | sed 's/.*comm w0: auto: //')
  if [ "$line" = "$want" ]; then
    echo "ok: rank $r: auto: $line"
  else
    fail "rank $r logged 'auto: $line', expected 'auto: $want'"
  fi
done
grep -q "transport auto" "$log" || fail "no communicator reported transport auto"
if [ "$mode" = shm-refused ]; then
  for ((r = 0; r < n; ++r)); do
    warned=$(grep -cE "\[chorus r$r WARN\] (comm w0: )?auto: rank $r: the local sub-transport 'shm' could not open an endpoint to rank [0-9]+ \(.*\); ranks on this host are reached over 'tcp' instead.*To fix" "$log")
    # collective_check opens one communicator: one warning, however many
    # endpoints were refused.
    [ "$warned" = 1 ] || fail "rank $r warned $warned times that shm was refused (expected once, naming why and that tcp serves its peers)"
  done
fi
summaries=$(grep -cE "collective_check rank [0-9]+ of $n .*: [1-9][0-9]* passed, 0 failed" "$log")
[ "$summaries" = "$n" ] || fail "$summaries of $n ranks reported every check passed"
grep -E "collective_check rank [0-9]+ of" "$log"
if [ "$fails" -ne 0 ]; then
  echo "--- log (last 60 lines)"; tail -n 60 "$log"
fi
echo "auto transport, $n ranks${hosts:+ on $hosts pretend hosts}: $fails failure(s)"
[ "$fails" -eq 0 ]
