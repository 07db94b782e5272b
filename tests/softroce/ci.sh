#!/usr/bin/env bash
# ci.sh BUILD_DIR — the verbs transport's CI on real RDMA verbs: boots the
# soft-RoCE guest ONCE (run-in-guest.sh) and runs guest-suite.sh there over
# rxe0: the transport conformance suite, collective_check through chorusrun
# for 2, 3 and 4 ranks (ring, and mesh when its plugin is built), a checked
# chorus-bench, the configuration-error cases (wrong gid_index, missing
# device, inconsistent device matrix, unknown key), a ring-only device matrix
# and a rank SIGKILLed mid-collective; connections on first use (group
# ondemand); then the libfabric transport over
# verbs;ofi_rxm (group ofi). Prints "N passed, M failed" last and
# exits non-zero on any failure, including a guest that does not boot.
#
# Called by .ci/run as `bash tests/softroce/ci.sh <build-dir>`; needs the
# build to contain the verbs plugin (libibverbs-dev installed at configure
# time). About 8-12 minutes on the 2-core machine.
set -uo pipefail
build="$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)" || exit 2
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$(cd "$here/../.." && pwd)"
t0=$(date +%s)

finish() {
  echo "softroce ci: $(( $(date +%s) - t0 )) s"
  echo "$1 passed, $2 failed"
  [ "$2" -eq 0 ]
  exit $?
}

if ! bash "$src/scripts/install-softroce.sh"; then
  echo "softroce ci: installing QEMU / rdma-core / the guest kernel failed"
  finish 0 1
fi
missing=()
for f in bin/chorus-conformance bin/chorusrun bin/chorus-bench bin/chorus-info \
         bin/collective_check bin/mismatch_check bin/tagged_check bin/ring_peers_check \
         bin/first_use_kill_check bin/p2p_first_use_kill_check \
         lib/chorus/libchorus-transport-verbs.so \
         lib/chorus/libchorus-transport-tcp.so lib/chorus/libchorus-algorithm-ring.so; do
  [ -e "$build/$f" ] || missing+=("$f")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "softroce ci: $build lacks ${missing[*]} (the verbs plugin needs libibverbs-dev at configure time)"
  finish 0 1
fi

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
SOFTROCE_TIMEOUT="${SOFTROCE_TIMEOUT:-1500}" \
  "$here/run-in-guest.sh" bash "$here/guest-suite.sh" "$build" conformance collectives errors kill ondemand jaccl ofi 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
line="$(grep -E '^guest: [0-9]+ passed, [0-9]+ failed' "$log" | tail -n1)"
if [ -z "$line" ]; then
  echo "softroce ci: the guest suite did not finish (run-in-guest.sh exit $rc)"
  finish 0 1
fi
passed="$(sed -E 's/^guest: ([0-9]+) passed.*/\1/' <<<"$line")"
failed="$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line")"
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
  echo "softroce ci: the guest reported no failure but run-in-guest.sh exited $rc"
  failed=1
fi
finish "$passed" "$failed"
