#!/usr/bin/env bash
# The plugin SDK end to end, as a third party would use it.
#
# usage: tests/sdk/run.sh BUILD_DIR
#
# Installs BUILD_DIR (a built Chorus tree) into a temporary prefix, builds the
# example plugins plugins/halving_doubling and plugins/allpairs (both algorithm
# ABI v2, on the algorithm SDK), plugins/faulty and plugins/loopback out of tree
# against that installation (find_package(Chorus) + chorus_add_plugin), then:
#   - checks the installed chorus-info finds the installed plugins with an
#     empty environment, and that each example exports one symbol only;
#   - runs the transport conformance suite against faulty (faults off) and
#     against loopback (its [process] cases must say they did not run), and
#     loopback's ranks-as-threads collective check at 2, 3 and 4 ranks;
#   - runs the collective correctness matrix with halving_doubling pinned for
#     all_reduce and all_gather, at 1, 2, 3, 4, 5 and 8 ranks, and the
#     call-signature mismatch matrix with it at 4 ranks;
#   - runs allpairs (v2) through tests/collectives/v2_plugin.sh over tcp and
#     shm, and the collective matrix and mismatch matrix with it pinned;
#   - injects faults through faulty: a dropped connection and an injected
#     completion error make every rank fail promptly with a clear error, and
#     2 ms of latency on every send leaves results exact;
#   - prints a chorus-bench comparison of halving_doubling, ring and mesh.
# Prints "N passed, M failed" and exits non-zero when anything failed.
# CHORUS_TEST_SDK_KEEP=1 keeps the temporary folder (logs, builds) for
# inspection; CHORUS_TEST_SDK_JOBS sets the build parallelism (default 2).
# Other CHORUS_* variables of the caller are ignored: every run here sets
# exactly what it tests.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/free_port.sh"

if [ $# -ne 1 ] || [ ! -d "$1" ]; then
  echo "usage: $0 BUILD_DIR   (a built Chorus build tree)" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
keep="${CHORUS_TEST_SDK_KEEP:-0}"
jobs="${CHORUS_TEST_SDK_JOBS:-2}"
for var in $(compgen -e | grep '^CHORUS_'); do unset "$var"; done
src=$(cd "$(dirname "$0")/../.." && pwd)
for tool in chorusrun chorus-bench chorus-conformance collective_check mismatch_check; do
  if [ ! -x "$build/bin/$tool" ]; then
    echo "$0: $build/bin/$tool is missing; build the tree first" >&2
    exit 2
  fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/chorus-sdk.XXXXXX")
logs="$tmp/logs"
mkdir -p "$logs"
current=""  # process group of the running check
cleanup() {
  if [ -n "$current" ]; then kill -KILL -- "-$current" 2>/dev/null; fi
  if [ "$keep" = 1 ]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

passed=0
failed=0
t_start=$(date +%s%N)
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

# check NAME TIMEOUT_S COMMAND...: runs COMMAND (a program or a function of
# this script) in its own process group with its output in a log; COMMAND's
# exit status decides. After TIMEOUT_S the whole group is killed.
set -m
check() {
  local name="$1" limit="$2"
  shift 2
  local log t0 rc
  log="$logs/$(echo "$name" | tr -c 'A-Za-z0-9_.-' '_').log"
  t0=$(date +%s%N)
  ("$@") >"$log" 2>&1 </dev/null &
  local pid=$!
  current=$pid
  while kill -0 "$pid" 2>/dev/null; do
    if (( $(ms_since "$t0") > limit * 1000 )); then
      echo "check timed out after $limit s" >>"$log"
      kill -TERM -- "-$pid" 2>/dev/null; sleep 2; kill -KILL -- "-$pid" 2>/dev/null
      break
    fi
    sleep 0.2
  done
  wait "$pid"
  rc=$?
  current=""
  local secs
  secs=$(awk -v ms="$(ms_since "$t0")" 'BEGIN { printf "%.1f", ms / 1000 }')
  if [ "$rc" -eq 0 ]; then
    passed=$((passed + 1))
    printf 'ok    %-70s %6s s\n' "$name" "$secs"
  else
    failed=$((failed + 1))
    printf 'FAIL  %-70s %6s s (exit %d)\n' "$name" "$secs" "$rc"
    tail -n 40 "$log" | sed 's/^/      | /'
  fi
}

# ---- install, and build both plugins against the installation -----------------

build_plugin() {
  local dir="$1" out="$2"
  cmake -S "$src/plugins/$dir" -B "$out" -DCMAKE_PREFIX_PATH="$tmp" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_EXPORT_COMPILE_COMMANDS=ON || return 1
  cmake --build "$out" -j "$jobs" 2>&1 | tee "$out.buildlog" || return 1
  # Warnings-free, and nothing taken from Chorus's source tree.
  if grep -q "warning:" "$out.buildlog"; then echo "compiler warnings above"; return 1; fi
  if grep -q -- "-I$src/include" "$out/compile_commands.json"; then
    echo "the plugin was compiled against the source tree's headers"; return 1
  fi
}

check "install the build into a temporary prefix" 120 cmake --install "$build" --prefix "$tmp"
plugin_dir=$(dirname "$(find "$tmp" -name libchorus-transport-tcp.so -print -quit)")
hd_dir="$tmp/build-hd"
faulty_dir="$tmp/build-faulty"
loopback_dir="$tmp/build-loopback"
check "build plugins/halving_doubling against the installed package" 300 \
  build_plugin halving_doubling "$hd_dir"
allpairs_dir="$tmp/build-allpairs"
check "build plugins/allpairs (algorithm ABI v2) against the installed package" 300 \
  build_plugin allpairs "$allpairs_dir"
check "build plugins/faulty against the installed package" 300 build_plugin faulty "$faulty_dir"
check "build plugins/loopback against the installed package" 300 \
  build_plugin loopback "$loopback_dir"
check "halving_doubling schedule unit test" 120 ctest --test-dir "$hd_dir" --output-on-failure

exports_only() {
  local so="$1" symbol="$2"
  local got
  got=$(nm -D --defined-only "$so" | awk '{print $3}' | sort | tr '\n' ' ')
  echo "$so exports: $got"
  [ "$got" = "$symbol " ]
}
check "halving_doubling exports only chorus_algorithm_plugin_v2" 10 \
  exports_only "$hd_dir/libchorus-algorithm-halving_doubling.so" chorus_algorithm_plugin_v2
check "allpairs exports only chorus_algorithm_plugin_v2" 10 \
  exports_only "$allpairs_dir/libchorus-algorithm-allpairs.so" chorus_algorithm_plugin_v2
check "the installed ring exports only chorus_algorithm_plugin_v2" 10 \
  exports_only "$plugin_dir/libchorus-algorithm-ring.so" chorus_algorithm_plugin_v2
check "faulty exports only chorus_transport_plugin_v1" 10 \
  exports_only "$faulty_dir/libchorus-transport-faulty.so" chorus_transport_plugin_v1
check "loopback exports only chorus_transport_plugin_v1" 10 \
  exports_only "$loopback_dir/libchorus-transport-loopback.so" chorus_transport_plugin_v1

info_lists_installed() {
  env -i "$tmp/bin/chorus-info" | tee "$logs/chorus-info.out"
  grep -Eq "^  tcp +yes +yes +v1\.[0-9]+ +$plugin_dir/libchorus-transport-tcp\.so$" "$logs/chorus-info.out" &&
    grep -Eq "^  ring +yes +yes +v2\.[0-9]+ +$plugin_dir/libchorus-algorithm-ring\.so$" "$logs/chorus-info.out"
}
check "installed chorus-info (env -i) lists the installed tcp and ring" 30 info_lists_installed

# ---- the host package: find_package(Chorus) and pkg-config, relocated ----------

# pkg-config's answer for the prefix it was installed to: paths inside it,
# nothing pointing at /usr/local (the configure-time default prefix).
pc_points_into() {
  local prefix="$1" flags
  flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs chorus) || return 1
  echo "pkg-config --cflags --libs chorus: $flags"
  local inc lib
  inc=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --variable=includedir chorus)
  lib=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --variable=libdir chorus)
  echo "includedir=$inc libdir=$lib"
  [ "$(cd "$inc" && pwd -P)" = "$(cd "$prefix/include" && pwd -P)" ] &&
    [ "$(cd "$lib" && pwd -P)" = "$(cd "$prefix/lib" && pwd -P)" ] &&
    [ -f "$inc/chorus/chorus.hpp" ] && ! grep -q /usr/local <<<"$flags"
}
check "pkg-config chorus points into the install prefix $tmp" 10 pc_points_into "$tmp"

# The installed tree copied elsewhere must still work: both consumers build
# against the copy and run a one-rank job with the copy's library.
moved="$tmp/moved/prefix"
relocate() { mkdir -p "$moved" && cp -a "$tmp/include" "$tmp/lib" "$moved/"; }
build_with_pkg_config() {
  local flags
  flags=$(PKG_CONFIG_PATH="$moved/lib/pkgconfig" pkg-config --cflags --libs chorus) || return 1
  # shellcheck disable=SC2086
  g++ -std=c++20 -Wall -Wextra -o "$tmp/consumer-pc" "$src/tests/sdk/consumer/main.cc" $flags \
    -Wl,-rpath,"$moved/lib" || return 1
  ldd "$tmp/consumer-pc" | grep libchorus
  # grep without -q reads all of ldd's output: with pipefail, grep -q leaving
  # at the first match could fail the check through ldd's SIGPIPE.
  ldd "$tmp/consumer-pc" | grep "$moved/lib/libchorus.so" >/dev/null && env -i "$tmp/consumer-pc"
}
build_with_find_package() {
  cmake -S "$src/tests/sdk/consumer" -B "$tmp/build-consumer" -DCMAKE_PREFIX_PATH="$moved" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo || return 1
  grep "^Chorus_DIR" "$tmp/build-consumer/CMakeCache.txt"
  grep -q "^Chorus_DIR:PATH=$moved/lib/cmake/Chorus" "$tmp/build-consumer/CMakeCache.txt" ||
    return 1
  cmake --build "$tmp/build-consumer" -j "$jobs" || return 1
  env -i "$tmp/build-consumer/consumer"
}
check "copy the installed include/ and lib/ to another prefix" 60 relocate
check "pkg-config chorus points into the copied prefix" 10 pc_points_into "$moved"
check "host program built with pkg-config --cflags --libs chorus (copied prefix) runs" 120 \
  build_with_pkg_config
check "host program built with find_package(Chorus) (copied prefix) runs" 180 \
  build_with_find_package

# ---- the transport conformance suite against faulty -----------------------------

check "conformance: faulty over tcp, faults off" 300 \
  env CHORUS_PLUGIN_PATH="$faulty_dir:$plugin_dir" CHORUS_CONFORMANCE_TRANSPORT=faulty \
  CHORUS_CONFORMANCE_CONFIG=inner=tcp CHORUS_CONFORMANCE_REQUIRE_AVAILABLE=1 \
  "$build/bin/chorus-conformance"
# Immediates forwarded to an inner transport that has them (shm here, tcp above).
check "conformance [imm]: faulty over shm" 120 \
  env CHORUS_PLUGIN_PATH="$faulty_dir:$plugin_dir" CHORUS_CONFORMANCE_TRANSPORT=faulty \
  CHORUS_CONFORMANCE_CONFIG=inner=shm CHORUS_CONFORMANCE_REQUIRE_AVAILABLE=1 \
  "$build/bin/chorus-conformance" "[imm]"
# Pass-through settings and the delay path under the data contract (order,
# limits, short receives, duplex, close; the 64 MiB size cases ran above).
check "conformance [data]~[sizes]: faulty, inner.sockets=2, delay_us=300, seed=5" 300 \
  env CHORUS_PLUGIN_PATH="$faulty_dir:$plugin_dir" CHORUS_CONFORMANCE_TRANSPORT=faulty \
  CHORUS_CONFORMANCE_CONFIG="inner=tcp,inner.sockets=2,delay_us=300,seed=5" \
  CHORUS_CONFORMANCE_REQUIRE_AVAILABLE=1 "$build/bin/chorus-conformance" "[data]~[sizes]"

# ---- the worked example: loopback -------------------------------------------------

# Every case runs and passes, except the four [process] cases, which must each
# announce that they did not run because the transport is process-local.
conformance_loopback() {
  env CHORUS_PLUGIN_PATH="$loopback_dir" CHORUS_CONFORMANCE_TRANSPORT=loopback \
    CHORUS_CONFORMANCE_REQUIRE_AVAILABLE=1 "$build/bin/chorus-conformance" \
    >"$logs/conformance.loopback.out" 2>&1
  local rc=$? not_run
  cat "$logs/conformance.loopback.out"
  not_run=$(grep -c "not run: transport is process-local" "$logs/conformance.loopback.out")
  echo "[process] cases reported as not run: $not_run (expected 4)"
  [ "$rc" -eq 0 ] && [ "$not_run" -eq 4 ]
}
check "conformance: loopback (process-local: [process] cases not run)" 300 conformance_loopback

# The ranks-as-threads program, built out of tree above, against the
# installed libchorus.
loopback_ranks() {
  local n="$1" ring_port mesh_port
  ring_port=$(chorus_free_port)
  mesh_port=$(chorus_free_port)
  while [ "$mesh_port" = "$ring_port" ]; do mesh_port=$(chorus_free_port); done
  env CHORUS_PLUGIN_PATH="$loopback_dir" "$loopback_dir/loopback_ranks" "$n" \
    "127.0.0.1:$ring_port" "127.0.0.1:$mesh_port" >"$logs/loopback_ranks.$n.out" 2>&1
  local rc=$?
  cat "$logs/loopback_ranks.$n.out"
  [ "$rc" -eq 0 ] && grep -q "^loopback_ranks: $n ranks as threads, .* 0 failures$" \
    "$logs/loopback_ranks.$n.out"
}
for n in 2 3 4; do
  check "loopback_ranks $n: ring and mesh collectives, ranks as threads, every element" 120 \
    loopback_ranks "$n"
done

# ---- allpairs: the algorithm ABI v2 example ------------------------------------

for tp in tcp shm; do
  check "allpairs (v2) over $tp: pinned results, auto's choice, settings at init" 600 \
    "$src/tests/collectives/v2_plugin.sh" "$build/bin/chorusrun" "$build/bin/chorus-bench" \
    "$allpairs_dir" "$tp"
done
# Its all_reduce through the correctness matrix (every dtype and op it
# declares; the others must fall to the built-ins under auto), and the
# signature check with it pinned.
for n in 2 3 5; do
  check "collective_check -n $n --every 3, allpairs under auto" 600 \
    env CHORUS_PLUGIN_PATH="$allpairs_dir" "$build/bin/chorusrun" -n "$n" --timeout 550 -- \
    "$build/bin/collective_check" --every 3 --offset $((n % 3))
done
check "mismatch_check matrix -n 4, allpairs pinned for all_reduce" 120 \
  env CHORUS_PLUGIN_PATH="$allpairs_dir" CHORUS_ALGORITHM_ALL_REDUCE=allpairs \
  CHORUS_ALGORITHM_ALLPAIRS_MAX_BYTES=1073741824 "$build/bin/chorusrun" -n 4 --timeout 100 -- \
  "$build/bin/mismatch_check" matrix

# ---- the collective matrix with halving_doubling --------------------------------

hd_env=(env CHORUS_PLUGIN_PATH="$hd_dir" CHORUS_ALGORITHM_ALL_REDUCE=halving_doubling
        CHORUS_ALGORITHM_ALL_GATHER=halving_doubling)
# Half the (dtype, op) combinations per rank count, chosen so that each half
# meets both an odd and an even rank count (odd n: 1, 0, 1; even n: 1, 0, 0).
for n in 1 2 3 4 5 8; do
  k=$(((n + 1) / 2 % 2))
  check "collective_check -n $n --every 2 --offset $k, halving_doubling" 600 \
    "${hd_env[@]}" "$build/bin/chorusrun" -n "$n" --timeout 550 -- \
    "$build/bin/collective_check" --every 2 --offset "$k"
done

# The call-signature check needs nothing from the plugin: ranks that
# disagree while halving_doubling runs all_reduce and all_gather all get
# CHORUS_ERR_MISMATCH (docs/reliability.md §4.5).
check "mismatch_check matrix -n 4, halving_doubling" 120 \
  "${hd_env[@]}" "$build/bin/chorusrun" -n 4 --timeout 100 -- "$build/bin/mismatch_check" matrix

refused_for_broadcast() {
  if env CHORUS_PLUGIN_PATH="$hd_dir" CHORUS_ALGORITHM_BROADCAST=halving_doubling \
    "$build/bin/chorusrun" -n 2 --timeout 60 -- "$build/bin/chorus-bench" --coll broadcast \
    -b 8 -e 8 -n 1 -w 0 >"$logs/broadcast.out" 2>&1; then
    echo "pinning halving_doubling for broadcast was accepted"; return 1
  fi
  cat "$logs/broadcast.out"
  grep -q "does not implement broadcast" "$logs/broadcast.out"
}
check "pinning halving_doubling for broadcast fails at init, saying why" 90 refused_for_broadcast

# ---- fault injection through faulty ---------------------------------------------

faulty_env=(CHORUS_PLUGIN_PATH="$faulty_dir:$hd_dir" CHORUS_TRANSPORT=faulty
            CHORUS_TRANSPORT_FAULTY_INNER=tcp)

# Starts N ranks by hand (chorusrun's contract) so that every rank must fail
# on its own; each must exit non-zero within BOUND seconds with an error
# matching PATTERN, and at least one must name the injected fault (CAUSE).
# usage: every_rank_fails N BOUND PATTERN CAUSE VAR=VALUE... -- BENCH ARGS...
every_rank_fails() {
  local n="$1" bound="$2" pattern="$3" cause="$4"
  shift 4
  local vars=()
  while [ "$1" != "--" ]; do vars+=("$1"); shift; done
  shift
  local port dir="$tmp/ranks.$RANDOM" t0 r ok=1
  port=$(chorus_free_port)
  mkdir -p "$dir"
  local rpids=()
  t0=$(date +%s%N)
  for r in $(seq 0 $((n - 1))); do
    env "${vars[@]}" CHORUS_RANK="$r" CHORUS_WORLD_SIZE="$n" \
      CHORUS_COORDINATOR="127.0.0.1:$port" CHORUS_TIMEOUT_COLLECTIVE=120 \
      "$@" >"$dir/out.$r" 2>"$dir/err.$r" &
    rpids+=($!)
  done
  for r in $(seq 0 $((n - 1))); do
    while kill -0 "${rpids[$r]}" 2>/dev/null; do
      if (( $(ms_since "$t0") > bound * 1000 )); then
        echo "rank $r still running after $bound s"; kill -9 "${rpids[$r]}"; ok=0; break
      fi
      sleep 0.05
    done
    wait "${rpids[$r]}"
    local rc=$?
    if [ "$rc" -eq 0 ]; then echo "rank $r exited 0"; ok=0; continue; fi
    if grep -Eq "$pattern" "$dir/err.$r"; then
      echo "rank $r exited $rc after $(ms_since "$t0") ms: $(grep -m1 -E "$pattern" "$dir/err.$r" | cut -c1-300)"
    else
      echo "rank $r exited $rc without an error matching '$pattern':"; cat "$dir/err.$r"; ok=0
    fi
  done
  if ! grep -qs -- "$cause" "$dir"/err.*; then echo "no rank names the cause '$cause'"; ok=0; fi
  [ "$ok" = 1 ]
}

check "faulty drop_after=40: every rank of 4 fails with PEER_LOST within 30 s" 60 \
  every_rank_fails 4 30 "failed: CHORUS_ERR_PEER_LOST" "faulty: dropped the connection" \
  "${faulty_env[@]}" CHORUS_TRANSPORT_FAULTY_DROP_AFTER=40 -- \
  "$build/bin/chorus-bench" -b 1M -e 1M -n 100000 -w 0
check "faulty error_after=30: every rank of 3 fails within 30 s" 60 \
  every_rank_fails 3 30 "failed: CHORUS_ERR_(SYSTEM|PEER_LOST)" "faulty: injected error" \
  "${faulty_env[@]}" CHORUS_TRANSPORT_FAULTY_ERROR_AFTER=30 -- \
  "$build/bin/chorus-bench" -b 64K -e 64K -n 100000 -w 0

# usage: exact_under_delay [-a ALGORITHM] [VAR=VALUE...]
exact_under_delay() {
  local algo=()
  if [ "${1:-}" = "-a" ]; then algo=(-a "$2"); shift 2; fi
  env "${faulty_env[@]}" CHORUS_TRANSPORT_FAULTY_DELAY_US=2000 "$@" \
    "$build/bin/chorusrun" -n 4 --timeout 280 -- "$build/bin/chorus-bench" -c -b 8 -e 4M -f 8 \
    -n 2 -w 1 "${algo[@]}" >"$logs/delay.out" 2>&1
  local rc=$?
  cat "$logs/delay.out"
  [ "$rc" -eq 0 ] && grep -q "^\[0\] # Wrong elements: 0$" "$logs/delay.out"
}
check "faulty delay_us=2000: chorus-bench -c exact at 4 ranks (auto)" 300 exact_under_delay
check "faulty delay_us=2000 seed=3: chorus-bench -c exact (halving_doubling)" 300 \
  exact_under_delay -a halving_doubling CHORUS_TRANSPORT_FAULTY_SEED=3

# ---- halving_doubling against ring and mesh -------------------------------------

bench_json() {
  local name="$1"
  env CHORUS_PLUGIN_PATH="$hd_dir" "$build/bin/chorusrun" -n 4 --no-prefix --timeout 280 -- \
    "$build/bin/chorus-bench" -a "$name" -b 8 -e 64M -f 2 -n 3 -w 1 --no-inplace --json \
    >"$logs/bench.$name.json" ||
    return 1
  # The algorithm that ran is the one asked for, at every one of the 24 sizes.
  awk -v want="\"algorithm\":\"$name\"" '
    /"coll"/ { n++; if (index($0, want) == 0) { print "ran another algorithm: " $0; bad = 1 } }
    END { if (n != 24) { print n " sizes reported, expected 24"; bad = 1 }; exit bad }' \
    "$logs/bench.$name.json"
}
algos=(ring mesh halving_doubling)
for a in "${algos[@]}"; do
  check "chorus-bench all_reduce 8 B - 64 MiB at 4 ranks: $a" 300 bench_json "$a"
done

print_table() {
  echo
  echo "all_reduce float32 sum, 4 ranks, tcp on loopback: median time (us) and busbw (GB/s)"
  awk '
    function field(line, key,   m) {
      if (match(line, "\"" key "\":\"?[^,\"}]*")) {
        m = substr(line, RSTART, RLENGTH); sub(/^"[^"]*":"?/, "", m); return m
      }
      return ""
    }
    FNR == 1 { a = FILENAME; sub(/.*bench\./, "", a); sub(/\.json$/, "", a); order[++na] = a }
    /"coll"/ {
      b = field($0, "bytes") + 0; if (!(b in seen)) { seen[b] = 1; sizes[++ns] = b }
      t[a, b] = field($0, "time_us") + 0; bw[a, b] = field($0, "busbw_gbs") + 0
    }
    END {
      printf "%12s", "bytes"
      for (i = 1; i <= na; i++) printf " %18s", order[i]
      printf "  %s\n", "fastest"
      for (j = 1; j <= ns; j++) {
        b = sizes[j]; best = ""; bt = 0
        printf "%12d", b
        for (i = 1; i <= na; i++) {
          k = order[i]
          if ((k, b) in t) {
            printf " %9.1f %8.3f", t[k, b], bw[k, b]
            if (best == "" || t[k, b] < bt) { best = k; bt = t[k, b] }
          } else printf " %18s", "-"
        }
        printf "  %s\n", best
      }
    }' "$@"
}
jsons=()
for a in "${algos[@]}"; do [ -s "$logs/bench.$a.json" ] && jsons+=("$logs/bench.$a.json"); done
if [ ${#jsons[@]} -gt 0 ]; then print_table "${jsons[@]}"; fi

echo
echo "sdk: $passed passed, $failed failed ($(( $(ms_since "$t_start") / 1000 )) s)"
[ "$failed" -eq 0 ]
