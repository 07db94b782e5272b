#!/usr/bin/env bash
# ThreadSanitizer over the threaded parts of Chorus: builds only the targets
# the subset needs in build-tsan/ (same configuration as `scripts/build.sh
# tsan`) and runs the subset. Called by scripts/test.sh; exits non-zero when
# a test fails or any process of any test wrote a TSan report.
#   scripts/tsan-subset.sh            JOBS=n sets the build and ctest parallelism (2)
#
# What runs, and which threads each one exercises:
#   unit.bootstrap             bootstrap side channel, ranks as threads of one process
#   conformance.tcp            TCP transport: Asio acceptor thread vs the caller
#   faults.{timeout,abort}.n2  deadlines, and chorus_comm_abort from another thread
#   security.wrong_token.n2    handshake refusal while the acceptor keeps serving
#   embedding.nonblocking.n*   progress thread, test/wait/cancel, abort and
#                              finalize with requests pending
#   embedding.split.n*         split run on the progress thread, child communicators
#   p2p.threads.tcp.n3         tagged point-to-point on one thread while another runs
#   p2p.lazy.tcp.n5            tagged pairs connected on first use (tcp's dial threads)
#                              all_reduce on the same communicator (the engine driven
#                              by whichever thread executes the stream)
#   lanes.tcp.n2.l4            collectives on four lanes at once, each lane its own thread
#   launcher.* (a sample)      chorusrun's signal, pipe and exit handling
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
dir=build-tsan
jobs="${JOBS:-2}"

# Keep in step with the tsan case of scripts/build.sh. The libfabric plugin is
# left out: no test here uses it, and chorus-conformance would otherwise build
# it first.
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHORUS_WITH_OFI=OFF \
  -DCMAKE_C_FLAGS="-fsanitize=thread" -DCMAKE_CXX_FLAGS="-fsanitize=thread" >/dev/null
# The executables the tests below run, and the plugins they load at run time
# (the TCP transport, the ring and mesh algorithms); chorus-conformance also
# pulls in every transport plugin it is declared to depend on.
targets=(chorus chorusrun chorus_transport_tcp chorus_transport_shm core_test chorus_algorithm_ring chorus_algorithm_mesh
         bootstrap_test chorus-conformance deadline_check auth_victim
         nonblocking_check split_check tagged_check lanes_check group_check launcher_test launcher_rank_helper)
cmake --build "$dir" -j"$jobs" --target "${targets[@]}"
built=$(date +%s)

launcher_sample='every rank gets its own rank|output lines stay whole|the first failure|a rank killed by SIGKILL|ranks that ignore SIGTERM|a timeout stops the job|SIGINT to chorusrun|a second signal to chorusrun|ranks die with chorusrun'
subset="^(unit\\.(bootstrap|core)|conformance\\.tcp|faults\\.(timeout|abort)\\.n2|security\\.wrong_token\\.n2|embedding\\.(nonblocking|split)\\.n[0-9]+|embedding\\.split\\.auto_transport\\.n4|p2p\\.threads\\.tcp\\.n3|p2p\\.lazy\\.tcp\\.n5|lanes\\.tcp\\.n2\\.l4|group\\.tcp\\.n4\\.f4194304\\.l2|group\\.shm\\.n3\\.f65536|launcher\\.($launcher_sample).*)\$"

# Reports go to files: ranks run under chorusrun or a shell script, and a
# report from a process whose exit status nobody checks must still fail the run.
reports=$(mktemp -d /tmp/chorus-tsan.XXXXXX)
trap 'rm -rf "$reports"' EXIT
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp log_path=$reports/report"

status=0
ctest --test-dir "$dir" -j"$jobs" --output-on-failure --no-tests=error -R "$subset" \
  --output-junit "$reports/junit.xml" || status=1
tests=$(grep -c '<testcase ' "$reports/junit.xml" 2>/dev/null || echo 0)
passed=$(grep -c '<testcase [^>]*status="run"' "$reports/junit.xml" 2>/dev/null || echo 0)
for f in "$reports"/report.*; do
  [ -e "$f" ] || continue
  echo "==== ThreadSanitizer report ($(basename "$f"))"
  cat "$f"
  status=1
done
end=$(date +%s)
echo "tsan-subset: configure+build $((built - start)) s, tests $((end - built)) s, total $((end - start)) s"
echo "tsan-subset: $passed passed, $((tests - passed)) failed"
exit $status
