#!/usr/bin/env bash
# The whole test suite: builds the release and the ASan+UBSan configurations
# once each and runs ctest on both (the sanitizer build runs the unit,
# plugin ABI, conformance and a sample of the multi-rank tests).
# Then the plugin SDK suite (tests/sdk/run.sh) and the RDMA verbs suite in
# the soft-RoCE guest (tests/softroce/ci.sh), when present.
# Then ThreadSanitizer over the threaded parts (scripts/tsan-subset.sh) and
# the libFuzzer targets (tests/fuzz/run.sh, 30 s each).
# Set CHORUS_TEST_SKIP_SANITIZERS=1 to run the release suite only.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0

t0=$(date +%s)
scripts/build.sh release
echo "test.sh: release build took $(( $(date +%s) - t0 )) s"

t0=$(date +%s)
ctest --test-dir build -j2 --output-on-failure --timeout 900 -LE full || status=1
echo "test.sh: release tests took $(( $(date +%s) - t0 )) s"

# Suites that drive whole installs or a QEMU guest, run as scripts.
for suite in "tests/sdk/run.sh" "tests/softroce/ci.sh"; do
  [ -f "$suite" ] || continue
  t0=$(date +%s)
  bash "$suite" build || status=1
  echo "test.sh: $suite took $(( $(date +%s) - t0 )) s"
done

if [ "${CHORUS_TEST_SKIP_SANITIZERS:-0}" != 1 ]; then
  t0=$(date +%s)
  scripts/build.sh asan
  echo "test.sh: asan build took $(( $(date +%s) - t0 )) s"
  t0=$(date +%s)
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan -j2 --output-on-failure --timeout 900 \
      -LE full -R '^(unit\.|jaccl\.|plugin_abi|conformance\.(tcp|shm)|launcher\.|matrix\.(ring|mesh)\.n[23]$|bench\.check\.n3\.|embedding\.(nonblocking|split)|security\.)' || status=1
  echo "test.sh: asan tests took $(( $(date +%s) - t0 )) s"
fi
# ThreadSanitizer over the threaded parts, and the libFuzzer targets for a
# bounded time each (clang, their own build directories).
if [ "${CHORUS_TEST_SKIP_SANITIZERS:-0}" != 1 ]; then
  if [ -f scripts/tsan-subset.sh ]; then
    t0=$(date +%s)
    bash scripts/tsan-subset.sh || status=1
    echo "test.sh: tsan subset took $(( $(date +%s) - t0 )) s"
  fi
  t0=$(date +%s)
  bash tests/fuzz/run.sh "${CHORUS_FUZZ_SECONDS:-30}" || status=1
  echo "test.sh: fuzzing took $(( $(date +%s) - t0 )) s"
fi
exit $status
