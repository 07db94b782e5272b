#!/usr/bin/env bash
# run-in-guest.sh COMMAND [ARG...]
#
# Runs COMMAND inside a QEMU guest that boots Debian's stock kernel and has a
# soft-RoCE device, rxe0 (rdma_rxe on a veth pair, GID 0 link-local IPv6,
# GID 1 the IPv4-mapped 169.254.10.1, rdma_ucm loaded). The guest's root is
# the host's / shared read-only over 9p, so the build tree and the host's
# binaries and libraries are all there at the same paths; /tmp, /run and
# /dev/shm are guest-private tmpfs, except that a working directory under
# /tmp (its top folder) is shared read-only too. COMMAND runs as root with this script's
# environment and working directory. Its stdout and stderr come out here as
# they are written, and this script exits with COMMAND's exit status.
#
# Exit status: COMMAND's; 124 when SOFTROCE_TIMEOUT (seconds, default 900)
# passed first; 125 when the guest could not boot or set up rxe0 (never
# skipped: a guest that does not come up is a failure). Needs
# scripts/install-softroce.sh once. Boot + setup take about 20 s (TCG).
#
# Environment:
#   SOFTROCE_TIMEOUT   seconds before the guest is killed (default 900)
#   SOFTROCE_CACHE     where install-softroce.sh put the kernel
#                      (default /var/cache/chorus-softroce)
#   SOFTROCE_SMP, SOFTROCE_MEM   guest CPUs (2) and memory in MiB (2048)
#   SOFTROCE_KEEP=1    keep the run folder (console log, setup log)
set -uo pipefail

if [ $# -eq 0 ]; then
  echo "usage: $0 COMMAND [ARG...]" >&2
  exit 2
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${SOFTROCE_CACHE:-/var/cache/chorus-softroce}"
timeout_s="${SOFTROCE_TIMEOUT:-900}"
kdir="$cache/kernel"

die() {
  echo "run-in-guest: $*" >&2
  exit 125
}

[ -s "$kdir/READY" ] || die "no kernel in $kdir; run scripts/install-softroce.sh first"
kver="$(cat "$kdir/READY")"
vmlinuz="$kdir/boot/vmlinuz-$kver"
[ -f "$vmlinuz" ] || die "$vmlinuz missing; run scripts/install-softroce.sh"
qemu="$(command -v qemu-system-x86_64)" || die "qemu-system-x86_64 not found; run scripts/install-softroce.sh"
busybox=/bin/busybox
[ -x "$busybox" ] && { LC_ALL=C ldd "$busybox" 2>&1 || true; } | grep -q 'not a dynamic' || die "$busybox is missing or not static; run scripts/install-softroce.sh"
[[ "$timeout_s" =~ ^[0-9]+$ ]] || die "SOFTROCE_TIMEOUT must be whole seconds, not '$timeout_s'"

# ---- the initramfs: busybox, /init and the 9p modules. Built once per kernel,
# busybox and init script, kept in the cache (or per run when that is read-only).
initramfs_modules=(virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci
                   netfs fscache 9pnet 9pnet_virtio 9p)
key="$( (echo "$kver"; sha256sum "$busybox" "$here/guest-init.sh") | sha256sum | cut -c1-16)"
initramfs="$cache/initramfs-$key.cpio.gz"

run="$(mktemp -d "${TMPDIR:-/tmp}/chorus-softroce.XXXXXX")" || die "mktemp failed"
qemu_pid=""
tail_pids=()
cleanup() {
  [ -n "$qemu_pid" ] && kill -KILL "$qemu_pid" 2>/dev/null
  for p in "${tail_pids[@]}"; do kill "$p" 2>/dev/null; done
  if [ "${SOFTROCE_KEEP:-0}" = 1 ]; then
    echo "run-in-guest: run folder kept: $run" >&2
  else
    rm -rf "$run"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

build_initramfs() {
  local out="$1" root="$run/initramfs"
  mkdir -p "$root/bin" "$root/proc" "$root/sys" "$root/dev" "$root/modules" "$root/newroot"
  cp "$busybox" "$root/bin/busybox"
  cp "$here/guest-init.sh" "$root/init"
  chmod 755 "$root/init" "$root/bin/busybox"
  local m path
  for m in "${initramfs_modules[@]}"; do
    path="$(awk -v m="$m" -F: '{ n = $1; sub(".*/", "", n); sub("\\.ko.*$", "", n);
                                  gsub("-", "_", n); if (n == m) { print $1; exit } }' \
            "$kdir/lib/modules/$kver/modules.dep")"
    [ -n "$path" ] || die "module $m not found in $kdir/lib/modules/$kver"
    cp "$kdir/lib/modules/$kver/$path" "$root/modules/$m.ko"
  done
  (cd "$root" && find . | "$busybox" cpio -o -H newc 2>/dev/null | gzip -1) >"$out.tmp.$$" &&
    mv "$out.tmp.$$" "$out"
}
if [ ! -s "$initramfs" ]; then
  if ! { : >"$initramfs.probe.$$"; } 2>/dev/null; then
    initramfs="$run/initramfs.cpio.gz"
  fi
  rm -f "$cache/initramfs-$key.cpio.gz.probe.$$"
  build_initramfs "$initramfs" || die "building the initramfs failed"
fi

# ---- what the guest runs: the setup script, the command, the environment and
# the working directory, in the run folder the guest mounts at /run/softroce.
cp "$here/guest-setup.sh" "$run/guest-setup.sh"
echo "$kver" >"$run/kernel-version"
echo "$kdir" >"$run/kernel-dir"
pwd -P >"$run/cwd"
{
  printf 'exec'
  printf ' %q' "$@"
  printf '\n'
} >"$run/command.sh"
# Every exported variable, except the shell's own bookkeeping.
export -p | grep -Ev '^declare -x (PWD|OLDPWD|SHLVL|_|BASH_FUNC_[^=]*)(=|$)' >"$run/environment.sh"
: >"$run/stdout"
: >"$run/stderr"
: >"$run/console.log"

# Stream the command's output while it runs.
tail -n +1 -f "$run/stdout" &
tail_pids+=($!)
tail -n +1 -f "$run/stderr" >&2 &
tail_pids+=($!)

start=$(date +%s)
"$qemu" -nodefaults -no-user-config \
  -accel tcg,thread=multi -cpu max -m "${SOFTROCE_MEM:-2048}" -smp "${SOFTROCE_SMP:-2}" \
  -nic none -display none -monitor none -serial "file:$run/console.log" -no-reboot \
  -kernel "$vmlinuz" -initrd "$initramfs" \
  -append "console=ttyS0 quiet loglevel=3 panic=-1 no_timer_check" \
  -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
  -virtfs "local,path=$run,mount_tag=chorusio,security_model=none,multidevs=remap" \
  </dev/null >"$run/qemu.log" 2>&1 &
qemu_pid=$!

timed_out=0
while kill -0 "$qemu_pid" 2>/dev/null; do
  if [ $(( $(date +%s) - start )) -ge "$timeout_s" ]; then
    timed_out=1
    kill -KILL "$qemu_pid" 2>/dev/null
    break
  fi
  sleep 0.5
done
wait "$qemu_pid" 2>/dev/null
qemu_rc=$?
qemu_pid=""
# Let the tails print what is left, then stop them.
sleep 1.2
for p in "${tail_pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
tail_pids=()
elapsed=$(( $(date +%s) - start ))

if [ "$timed_out" = 1 ]; then
  echo "run-in-guest: timed out after ${timeout_s} s (SOFTROCE_TIMEOUT); last console lines:" >&2
  tail -n 20 "$run/console.log" | tr -d '\r' >&2
  exit 124
fi
marker="$(tr -d '\r' <"$run/console.log" | sed -n 's/^.*CHORUS-SOFTROCE-EXIT=\([0-9]\{1,3\}\).*$/\1/p' | tail -n1)"
if [ -z "$marker" ]; then
  echo "run-in-guest: the guest stopped without reporting an exit status (qemu exit $qemu_rc after ${elapsed} s)" >&2
  echo "--- qemu:" >&2
  tail -n 20 "$run/qemu.log" >&2
  echo "--- console:" >&2
  tail -n 40 "$run/console.log" | tr -d '\r' >&2
  exit 125
fi
if [ "$marker" = 125 ]; then
  echo "run-in-guest: the guest could not be set up (after ${elapsed} s):" >&2
  tr -d '\r' <"$run/console.log" | grep -E 'INIT-ERROR|setup failed' >&2
  [ -s "$run/setup.log" ] && { echo "--- setup log:" >&2; tail -n 30 "$run/setup.log" >&2; }
fi
exit "$marker"
