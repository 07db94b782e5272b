#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) into build-fuzz/ and
# runs each for a bounded time from its seed corpus in tests/fuzz/corpus/.
#   tests/fuzz/run.sh [SECONDS_PER_TARGET]   (default 60)
# Exits non-zero when a target crashes, leaks, runs out of memory or times
# out; the reproducer is left in build-fuzz/artifacts/<target>/.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
seconds=${1:-60}
build=$root/build-fuzz
CC=${CC:-clang} CXX=${CXX:-clang++} cmake -S "$root/tests/fuzz" -B "$build" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"${JOBS:-2}"

status=0
passed=0
failed=0
for target in config_fuzz bootstrap_frame_fuzz tcp_wire_fuzz; do
  seeds=$root/tests/fuzz/corpus/${target%_fuzz}
  work=$build/corpus/$target          # grows across runs; the seeds stay as checked in
  artifacts=$build/artifacts/$target/
  mkdir -p "$work" "$artifacts"
  echo "== $target: ${seconds}s"
  if ! "$build/$target" "$work" "$seeds" -max_total_time="$seconds" -rss_limit_mb=2048 \
      -malloc_limit_mb=512 -timeout=10 -print_final_stats=1 -artifact_prefix="$artifacts" \
      2>"$build/$target.log"; then
    echo "FAIL: $target (log: $build/$target.log, reproducer in $artifacts)"
    tail -40 "$build/$target.log"
    status=1
    failed=$((failed + 1))
  else
    passed=$((passed + 1))
    grep -E "^stat::number_of_executed_units|^stat::new_units_added" "$build/$target.log" | sed 's/^/  /'
  fi
done
echo "fuzz: $passed passed, $failed failed"
exit $status
