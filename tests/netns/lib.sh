# shellcheck shell=bash
# Multi-host harness: every rank in its own network namespace ("host"), the
# namespaces joined by veth pairs to a Linux bridge that lives in one more
# namespace ("switch"). Nothing is created in the caller's namespace, so
# parallel tests cannot collide and the host's network is never touched.
#
# Addressing: namespace h is 169.254.77.(h+1)/24 on its interface eth0; the
# coordinator is rank 0's address. Only these link-local addresses and
# loopback are ever used. Usually namespace r holds rank r alone
# (netns_start_ranks); netns_start_hosts PER puts PER ranks in each
# namespace instead (ranks h*PER .. h*PER+PER-1 in namespace h, all bound to
# its address), as several ranks share one host.
#
# Source this file, then call netns_init (installs the cleanup trap), then
# netns_create N. Fault helpers: netns_loss, netns_delay, netns_link_down.
# Rank processes are started with netns_start_ranks / netns_start_hosts and
# tracked through files in $NETNS_DIR: pid.R (the rank process), rc.R
# ("<exit code> <end us>" once it has ended), out.R, err.R.
#
# Needs root, iproute2 and nftables (scripts/install-deps.sh). Without them
# the tests exit 77 (ctest reports them as skipped) unless
# CHORUS_TEST_REQUIRE=1 (set by scripts/test.sh in CI) or
# CHORUS_TEST_NETNS_REQUIRE=1 is set, which turns that into a failure.

NETNS_PREFIX="chorus-$$"
NETNS_SWITCH="${NETNS_PREFIX}-sw"
NETNS_SUBNET="169.254.77"
NETNS_PORT=29500
NETNS_N=0          # namespaces ("hosts")
NETNS_RANKS=0      # ranks of the job started last (NETNS_N * ranks per namespace)
NETNS_PER_NS=1     # ranks per namespace of that job
NETNS_DIR=""
NETNS_PIDS=()      # every process this harness started (ranks, helpers)

netns_log() { echo "[netns $(date +%H:%M:%S.%3N)] $*"; }
netns_fail() { echo "FAIL: $*"; exit 1; }

# Microseconds since the epoch without forking (bash 5's EPOCHREALTIME), so
# that timestamps taken under load are not skewed by process start-up.
netns_now_us() { echo "${EPOCHREALTIME/./}"; }

netns_ns() { echo "${NETNS_PREFIX}-$1"; }
# netns_addr H: namespace H's address (rank H's when there is one rank each).
netns_addr() { echo "${NETNS_SUBNET}.$(($1 + 1))"; }
# netns_host_of R: the namespace index of rank R in the job started last.
netns_host_of() { echo $(($1 / NETNS_PER_NS)); }

# Exits 77 (skip) or 1 when the machine cannot run these tests.
netns_require() {
  local missing=()
  [ "$(id -u)" -eq 0 ] || missing+=("root")
  command -v ip >/dev/null || missing+=("ip (iproute2)")
  command -v nft >/dev/null || missing+=("nft (nftables; run scripts/install-deps.sh)")
  [ -x /usr/bin/python3 ] || missing+=("/usr/bin/python3")
  if [ ${#missing[@]} -eq 0 ]; then
    local probe="${NETNS_PREFIX}-probe" err
    if err="$(ip netns add "$probe" 2>&1)"; then
      ip netns del "$probe" 2>/dev/null
    else
      missing+=("network namespaces (ip netns add: $err)")
    fi
  fi
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "netns tests need: ${missing[*]}"
  if [ -n "${CHORUS_TEST_REQUIRE:-}" ] || [ "${CHORUS_TEST_NETNS_REQUIRE:-0}" = 1 ]; then
    echo "FAIL: a missing capability fails under CHORUS_TEST_REQUIRE / CHORUS_TEST_NETNS_REQUIRE"
    exit 1
  fi
  echo "skipped (set CHORUS_TEST_REQUIRE=1 to make this a failure)"
  exit 77
}

netns_cleanup() {
  local rc=$?
  set +e
  # Our own processes first, by pid; then anything still inside our
  # namespaces (only processes we started can be in them).
  local ns p f
  {
    for p in "${NETNS_PIDS[@]}"; do kill -9 "$p"; done
    if [ -n "$NETNS_DIR" ]; then
      for f in "$NETNS_DIR"/pid.*; do [ -f "$f" ] && kill -9 "$(cat "$f")"; done
    fi
    for ns in $(ip netns list | awk -v p="^${NETNS_PREFIX}-" '$1 ~ p {print $1}'); do
      for p in $(ip netns pids "$ns"); do kill -9 "$p"; done
    done
    wait
  } 2>/dev/null
  # Deleting a namespace removes its veth ends, the bridge and its nft tables.
  for ns in $(ip netns list 2>/dev/null | awk -v p="^${NETNS_PREFIX}-" '$1 ~ p {print $1}'); do
    ip netns del "$ns" || echo "netns: could not delete $ns"
  done
  if ip netns list 2>/dev/null | grep -q "^${NETNS_PREFIX}-"; then
    echo "FAIL: namespaces left behind: $(ip netns list | grep "^${NETNS_PREFIX}-")"
    rc=1
  fi
  [ -n "$NETNS_DIR" ] && [ "${CHORUS_TEST_NETNS_KEEP:-0}" != 1 ] && rm -rf "$NETNS_DIR"
  exit "$rc"
}

# Removes namespaces of earlier runs whose harness died without its trap
# (ctest kills a test that overruns its TIMEOUT with SIGKILL): names
# chorus-<pid>-* whose <pid> is no longer alive.
netns_reap_stale() {
  local ns owner p
  for ns in $(ip netns list 2>/dev/null | awk '$1 ~ /^chorus-[0-9]+-/ {print $1}'); do
    owner=${ns#chorus-}
    owner=${owner%%-*}
    kill -0 "$owner" 2>/dev/null && continue
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null && echo "netns: removed $ns, left by a dead run"
  done
}

# netns_init BENCH: checks prerequisites, sets the EXIT trap, makes $NETNS_DIR.
netns_init() {
  NETNS_BENCH="$1"
  [ -x "$NETNS_BENCH" ] || netns_fail "not an executable: $NETNS_BENCH"
  netns_require
  netns_reap_stale
  NETNS_DIR=$(mktemp -d /tmp/chorus-netns.XXXXXX)
  trap netns_cleanup EXIT
  trap 'exit 130' INT TERM
}

# netns_reachable R ADDR: true when a TCP connect from rank R's namespace to
# ADDR (port 9, where nothing listens) is refused, i.e. the address answers.
netns_reachable() {
  local said
  said=$(ip netns exec "$(netns_ns "$1")" timeout 2 bash -c "exec 3<>/dev/tcp/$2/9" 2>&1)
  [[ "$said" == *refused* ]]
}

# netns_create N: the switch namespace with bridge br0, and N rank namespaces.
netns_create() {
  NETNS_N="$1"
  NETNS_RANKS="$1"
  ip netns add "$NETNS_SWITCH" || netns_fail "ip netns add $NETNS_SWITCH"
  ip -n "$NETNS_SWITCH" link add br0 type bridge || netns_fail "creating the bridge"
  ip -n "$NETNS_SWITCH" link set br0 up
  local r ns
  for ((r = 0; r < NETNS_N; ++r)); do
    ns=$(netns_ns "$r")
    ip netns add "$ns" || netns_fail "ip netns add $ns"
    # Created inside the switch namespace with its peer placed straight into
    # the rank's namespace, so no name ever exists in the caller's namespace.
    ip -n "$NETNS_SWITCH" link add "p$r" type veth peer name eth0 netns "$ns" ||
      netns_fail "veth for rank $r"
    ip -n "$NETNS_SWITCH" link set "p$r" master br0 up
    ip -n "$ns" addr add "$(netns_addr "$r")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
  done
  # The bridge forwards only once its ports leave the learning states; wait
  # until rank 0 can reach every other rank (a few hundred ms).
  local deadline=$(($(netns_now_us) + 10000000))
  for ((r = 1; r < NETNS_N; ++r)); do
    until netns_reachable 0 "$(netns_addr "$r")"; do
      (($(netns_now_us) < deadline)) || netns_fail "rank 0's namespace cannot reach $(netns_addr "$r")"
      sleep 0.1
    done
  done
  netns_log "created $NETNS_N namespaces ${NETNS_PREFIX}-0..$((NETNS_N - 1)) on bridge br0 in $NETNS_SWITCH"
}

# Runs one nft script (stdin) inside rank R's namespace.
netns_nft() { ip netns exec "$(netns_ns "$1")" nft -f -; }

# netns_loss PCT: in every rank namespace, drops PCT % of the packets leaving
# eth0 at random. Each packet leaves exactly one namespace, so this is PCT %
# loss on every path, in both directions.
netns_loss() {
  local pct="$1" r
  for ((r = 0; r < NETNS_N; ++r)); do
    netns_nft "$r" <<EOF || netns_fail "nft loss rule in rank $r"
add table inet chorus_loss
add chain inet chorus_loss out { type filter hook output priority 0; policy accept; }
add rule inet chorus_loss out oifname "eth0" counter
add rule inet chorus_loss out oifname "eth0" numgen random mod 100 < $pct counter drop
EOF
  done
}

# Prints "<dropped> <seen>": packets the loss rules dropped, and all packets
# that reached them, summed over ranks.
netns_loss_counts() {
  local r seen=0 dropped=0 counts
  for ((r = 0; r < NETNS_N; ++r)); do
    # Two counters per chain, in rule order: every packet, then the dropped.
    read -r -d '' -a counts < <(ip netns exec "$(netns_ns "$r")" nft list chain inet chorus_loss out |
      sed -n 's/.*counter packets \([0-9]*\).*/\1/p')
    seen=$((seen + ${counts[0]:-0}))
    dropped=$((dropped + ${counts[1]:-0}))
  done
  echo "$dropped $seen"
}

# netns_delay MS: starts delay_proxy.py in every rank namespace and redirects
# all TCP connections a rank opens to another rank through it (see the
# proxy's header for what this models and what it does not).
NETNS_PROXY_PORT=29999
NETNS_PROXY_MARK=0x2a
netns_delay() {
  local ms="$1" r ns addr here
  here="$(dirname "${BASH_SOURCE[0]}")"
  for ((r = 0; r < NETNS_N; ++r)); do
    ns=$(netns_ns "$r")
    addr=$(netns_addr "$r")
    ip netns exec "$ns" /usr/bin/python3 "$here/delay_proxy.py" "$addr" "$NETNS_PROXY_PORT" \
      "$ms" "$NETNS_PROXY_MARK" >"$NETNS_DIR/proxy.$r" 2>&1 &
    NETNS_PIDS+=($!)
    netns_nft "$r" <<EOF || netns_fail "nft redirect rule in rank $r"
add table ip chorus_delay
add chain ip chorus_delay out { type nat hook output priority -100; policy accept; }
add rule ip chorus_delay out meta mark $NETNS_PROXY_MARK return
add rule ip chorus_delay out ip daddr ${NETNS_SUBNET}.0/24 tcp dport != $NETNS_PROXY_PORT counter dnat to $addr:$NETNS_PROXY_PORT
EOF
  done
  local deadline=$(($(netns_now_us) + 10000000))
  for ((r = 0; r < NETNS_N; ++r)); do
    until grep -q ready "$NETNS_DIR/proxy.$r" 2>/dev/null; do
      (($(netns_now_us) < deadline)) || netns_fail "delay proxy of rank $r did not start: $(cat "$NETNS_DIR/proxy.$r")"
      sleep 0.05
    done
  done
}

# Prints the number of connections the delay rules sent through the proxies.
netns_delay_redirected() {
  local r total=0 n
  for ((r = 0; r < NETNS_N; ++r)); do
    n=$(ip netns exec "$(netns_ns "$r")" nft list chain ip chorus_delay out |
      sed -n 's/.*counter packets \([0-9]*\).*/\1/p')
    total=$((total + ${n:-0}))
  done
  echo "$total"
}

# netns_link_down R / netns_link_up R: rank R's interface.
netns_link_down() { ip -n "$(netns_ns "$1")" link set eth0 down; }
netns_link_up() { ip -n "$(netns_ns "$1")" link set eth0 up; }

# netns_start_ranks SETTINGS -- BENCH_ARGS...
# Starts one chorus-bench per rank namespace. SETTINGS is a space-separated
# list of extra VAR=value environment entries (e.g. timeouts). A fresh job
# token and output files per call; any CHORUS_* variable of the caller is
# removed so only what the test sets applies.
netns_start_ranks() { netns_start_hosts 1 "$@"; }

# netns_start_hosts PER SETTINGS -- BENCH_ARGS...
# The same with PER ranks in every namespace: NETNS_N * PER ranks, rank r in
# namespace r / PER and bound to its address.
netns_start_hosts() {
  local per="$1" extra="$2"; shift 2
  [ "$1" = "--" ] && shift
  local token r h ns v unset_args=()
  NETNS_PER_NS="$per"
  NETNS_RANKS=$((NETNS_N * per))
  token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  for v in $(compgen -e | grep '^CHORUS_'); do unset_args+=(-u "$v"); done
  rm -f "$NETNS_DIR"/pid.* "$NETNS_DIR"/rc.* "$NETNS_DIR"/out.* "$NETNS_DIR"/err.*
  for ((r = 0; r < NETNS_RANKS; ++r)); do
    # netns_host_of, netns_ns and netns_addr spelled out: no fork per rank,
    # which matters when 32 ranks start on a loaded machine.
    h=$((r / per))
    ns="${NETNS_PREFIX}-$h"
    # The subshell records the rank's exit code and end time the moment it
    # ends (wait returns then), independent of how often the test polls.
    (
      # `ip netns exec`, `env` and `stdbuf` (line-buffered stdout, so progress
      # shows while the rank runs) all exec: $! is the rank process itself.
      # shellcheck disable=SC2086
      ip netns exec "$ns" env "${unset_args[@]}" \
        CHORUS_RANK="$r" CHORUS_WORLD_SIZE="$NETNS_RANKS" \
        CHORUS_COORDINATOR="$NETNS_SUBNET.1:$NETNS_PORT" \
        CHORUS_BIND_ADDRESS="$NETNS_SUBNET.$((h + 1))" CHORUS_JOB_TOKEN="$token" \
        $extra stdbuf -oL "$NETNS_BENCH" "$@" >"$NETNS_DIR/out.$r" 2>"$NETNS_DIR/err.$r" &
      p=$!
      echo "$p" >"$NETNS_DIR/pid.$r"
      wait "$p"
      rc=$?
      echo "$rc ${EPOCHREALTIME/./}" >"$NETNS_DIR/rc.$r.tmp"
      mv "$NETNS_DIR/rc.$r.tmp" "$NETNS_DIR/rc.$r"
    ) 2>/dev/null &  # quiet: bash would report the SIGKILLs the tests deal out
    NETNS_PIDS+=($!)
  done
  for ((r = 0; r < NETNS_RANKS; ++r)); do
    until [ -s "$NETNS_DIR/pid.$r" ]; do sleep 0.01; done
  done
}

netns_rank_pid() { cat "$NETNS_DIR/pid.$1"; }
netns_rank_done() { [ -f "$NETNS_DIR/rc.$1" ]; }
netns_rank_rc() { cut -d' ' -f1 "$NETNS_DIR/rc.$1"; }
netns_rank_end_us() { cut -d' ' -f2 "$NETNS_DIR/rc.$1"; }

# netns_wait_until DEADLINE_US [RANKS...]: waits until the given ranks
# (default all) have ended or the clock passes DEADLINE_US. Ranks still
# running then are reported and SIGKILLed; returns how many overran.
netns_wait_until() {
  local deadline="$1"; shift
  local ranks=("$@") r overran=0
  [ ${#ranks[@]} -eq 0 ] && for ((r = 0; r < NETNS_RANKS; ++r)); do ranks+=("$r"); done
  for r in "${ranks[@]}"; do
    while ! netns_rank_done "$r"; do
      if ((${EPOCHREALTIME/./} >= deadline)); then
        echo "FAIL: rank $r still running $(((${EPOCHREALTIME/./} - deadline) / 1000)) ms past its bound"
        kill -9 "$(netns_rank_pid "$r")" 2>/dev/null
        overran=$((overran + 1))
        while ! netns_rank_done "$r"; do sleep 0.02; done
        break
      fi
      # Exit times come from rc.R, so the poll rate only sets how soon this
      # returns; each sleep is a fork, which 32 oversubscribed ranks feel.
      sleep 0.05
    done
  done
  return "$overran"
}

# netns_wait_ranks BOUND_S [RANKS...]: netns_wait_until, BOUND_S from now.
netns_wait_ranks() {
  local bound_s="$1"; shift
  netns_wait_until $((${EPOCHREALTIME/./} + bound_s * 1000000)) "$@"
}

# netns_wait_joined TIMEOUT_S: waits until every other rank holds an
# established side-channel connection to rank 0's coordinator port, or rank
# 0 (chorus-bench) printed its header: its communicator is up, so every rank
# joined, and the side channel's connections are closed again by then
# (Bootstrap::close_links).
netns_wait_joined() {
  local deadline=$((${EPOCHREALTIME/./} + $1 * 1000000)) n
  while :; do
    n=$(ip netns exec "$(netns_ns 0)" ss -Htn state established "( sport = :$NETNS_PORT )" | wc -l)
    ((n >= NETNS_RANKS - 1)) && return 0
    grep -q "^# chorus-bench" "$NETNS_DIR/out.0" 2>/dev/null && return 0
    netns_rank_done 0 && { echo "FAIL: rank 0 ended before every rank joined"; netns_dump; exit 1; }
    ((${EPOCHREALTIME/./} < deadline)) || { echo "FAIL: only $n ranks joined within $1 s"; netns_dump; exit 1; }
    sleep 0.01
  done
}

# netns_wait_for_output R PATTERN TIMEOUT_S: waits until rank R's stdout
# matches PATTERN; fails the test if the rank ends or time runs out first.
netns_wait_for_output() {
  local r="$1" pattern="$2" timeout_s="$3"
  local deadline=$(($(netns_now_us) + timeout_s * 1000000))
  until grep -qE "$pattern" "$NETNS_DIR/out.$r" 2>/dev/null; do
    if netns_rank_done "$r"; then
      echo "FAIL: rank $r ended (exit $(netns_rank_rc "$r")) before printing /$pattern/"
      netns_dump; exit 1
    fi
    (($(netns_now_us) < deadline)) || { echo "FAIL: rank $r printed no /$pattern/ within $timeout_s s"; netns_dump; exit 1; }
    sleep 0.02
  done
}

netns_dump() {
  local r
  for ((r = 0; r < NETNS_RANKS; ++r)); do
    echo "--- rank $r: exit $(netns_rank_done "$r" && netns_rank_rc "$r" || echo running)"
    sed 's/^/  out: /' "$NETNS_DIR/out.$r" 2>/dev/null | tail -n 20
    sed 's/^/  err: /' "$NETNS_DIR/err.$r" 2>/dev/null | tail -n 20
  done
}

# Prints the first error line chorus-bench wrote for rank R.
netns_rank_error() { grep -m1 -E "chorus-bench: .* failed: " "$NETNS_DIR/err.$1" | cut -c1-400; }

# netns_rank_list R...: ascending ranks the way core/auto_transport.cc's
# auto_rank_list prints them: runs of three or more as "a..b", the rest
# separated by commas ("0,1", "4..31", "0..11,16..31").
netns_rank_list() {
  local out="" i=0 j k n=$#
  local v=("$@")
  while ((i < n)); do
    j=$i
    while ((j + 1 < n && v[j + 1] == v[j] + 1)); do j=$((j + 1)); done
    if ((j - i >= 2)); then
      out+=",${v[i]}..${v[j]}"
    else
      for ((k = i; k <= j; ++k)); do out+=",${v[k]}"; done
    fi
    i=$((j + 1))
  done
  echo "${out#,}"
}

# netns_auto_expected R: the info line ("auto: shm to ranks 1..3; tcp to
# ranks 4..31") that transport.name = auto must log for rank R of the job
# started last: shm to the other ranks in R's namespace, tcp to all others.
netns_auto_expected() {
  local r="$1" q shm=() tcp=() line="" s
  for ((q = 0; q < NETNS_RANKS; ++q)); do
    ((q == r)) && continue
    if ((q / NETNS_PER_NS == r / NETNS_PER_NS)); then shm+=("$q"); else tcp+=("$q"); fi
  done
  s=""; ((${#shm[@]} > 1)) && s=s
  ((${#shm[@]})) && line="shm to rank$s $(netns_rank_list "${shm[@]}")"
  s=""; ((${#tcp[@]} > 1)) && s=s
  ((${#tcp[@]})) && line+="${line:+; }tcp to rank$s $(netns_rank_list "${tcp[@]}")"
  echo "auto: ${line:-no peers}"
}

# netns_auto_logged R: the "auto: ..." line rank R logged for its first
# communicator (w0), or nothing.
netns_auto_logged() { grep -m1 -E "comm w0: auto: " "$NETNS_DIR/err.$1" | sed 's/.*comm w0: //'; }

# netns_blamed_rank ERROR_TEXT: the rank a peer-loss error names as gone:
# "(rank 2 is lost; ...)" or "connection to rank 2 (channel 0) lost" (data
# connections), "lost rank 2 on the side channel", "lost the coordinator
# (rank 0 at ...)" (bootstrap). Nothing when it names none.
netns_blamed_rank() {
  local re
  # Leading ".*" as in a sed match: the last mention on the line wins.
  for re in '.*\(rank ([0-9]+) is lost' '.*connection to rank ([0-9]+) .*lost' \
            '.*lost rank ([0-9]+) ' '.*lost the coordinator \(rank ([0-9]+) '; do
    [[ "$1" =~ $re ]] && { echo "${BASH_REMATCH[1]}"; return 0; }
  done
}

# netns_stats MS...: prints "min median max" (ms) of the numbers given.
netns_stats() {
  printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {
    if (NR == 0) { print "- - -"; exit }
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%d %d %d\n", v[1], m, v[NR] }'
}
