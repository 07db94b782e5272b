#!/usr/bin/env bash
# host-no-device.sh BUILD_DIR — ctest verbs.no_device.
#
# On a host without RDMA devices (this project's machines: the kernel has no
# CONFIG_INFINIBAND), the verbs transport must fail cleanly:
#  1. chorus-bench with CHORUS_TRANSPORT=verbs exits non-zero at init, and
#     its stderr carries the "no RDMA device found" message;
#  2. chorus-info lists the verbs plugin with "0 devices".
# Exits 77 (ctest: skipped) on a host that does have devices; 1 under
# CHORUS_TEST_REQUIRE=1 (CI), where nothing may skip.
set -uo pipefail
build="${1:?usage: $0 BUILD_DIR}"
if [ -d /sys/class/infiniband ] && [ -n "$(ls -A /sys/class/infiniband 2>/dev/null)" ]; then
  echo "this host has RDMA devices ($(ls /sys/class/infiniband | tr '\n' ' ')); the no-device case does not apply"
  [ -n "${CHORUS_TEST_REQUIRE:-}" ] && { echo "FAIL: CHORUS_TEST_REQUIRE=1 and this case cannot run here"; exit 1; }
  exit 77
fi
fail=0
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

# 1. chorus-bench over verbs, one rank: context_open must refuse.
CHORUS_TRANSPORT=verbs timeout 30 "$build/bin/chorus-bench" -b 8 -e 8 -n 1 -w 0 \
  >"$out/bench.out" 2>"$out/bench.err"
rc=$?
if [ "$rc" -eq 0 ]; then
  echo "FAIL: chorus-bench over verbs succeeded on a host without RDMA devices"
  fail=1
elif [ "$rc" -eq 124 ]; then
  echo "FAIL: chorus-bench over verbs hung (killed after 30 s)"
  fail=1
elif ! grep -q "no RDMA device found (ibv_get_device_list returned 0 devices); load rdma_rxe/siw or pick another transport" "$out/bench.err"; then
  echo "FAIL: chorus-bench's stderr lacks the no-device message; it said:"
  cat "$out/bench.err"
  fail=1
else
  echo "ok: chorus-bench over verbs exits $rc: $(grep -m1 'no RDMA device' "$out/bench.err")"
fi

# 2. chorus-info: the verbs plugin loads, is not usable here and reports 0 devices.
timeout 30 "$build/bin/chorus-info" >"$out/info.out" 2>&1
# Two answers: it loads (yes) and is not usable here (no).
if grep -Eq '^  verbs +yes +no ' "$out/info.out" &&
  grep -A1 -E '^[[:space:]]+verbs[[:space:]]' "$out/info.out" | grep -q "0 devices"; then
  echo "ok: chorus-info: $(grep -A1 -E '^[[:space:]]+verbs[[:space:]]' "$out/info.out" | tr -s ' ' | tr '\n' ' ')"
else
  echo "FAIL: chorus-info does not list verbs with '0 devices'; it said:"
  cat "$out/info.out"
  fail=1
fi
exit "$fail"
