#!/bin/bash
# Runs inside the soft-RoCE guest, chrooted into the host's root (read-only),
# from /run/softroce (the run's I/O folder, shared with the host). It loads the
# RDMA modules from the unpacked kernel package, makes rxe0 on a veth pair,
# then runs the command run-in-guest.sh wrote into command.sh with the
# caller's environment and working directory. Its exit status is the
# command's, or 125 when the guest could not be set up.
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
io=/run/softroce
kver="$(cat "$io/kernel-version")"
kdir="$(cat "$io/kernel-dir")"

setup_failed() {
  echo "run-in-guest: soft-RoCE setup failed: $*" >&2
  exit 125
}

exec 3>&2 2>>"$io/setup.log"
# The kernel's own module autoloading runs in the initramfs (no modprobe, no
# modules there), so everything is loaded by hand, crc32_generic first: without
# it `rdma link add` fails with ENOENT. `-d` points modprobe at the unpacked
# kernel package, whose /lib/modules/<version> is not on the host's /.
for m in crc32_generic rdma_rxe veth ib_uverbs rdma_ucm; do
  modprobe -d "$kdir" -S "$kver" "$m" || setup_failed "modprobe $m"
done
ip link set lo up || setup_failed "ip link set lo up"
ip link add veth0 type veth peer name veth1 || setup_failed "creating the veth pair"
ip link set veth0 up && ip link set veth1 up || setup_failed "bringing the veth pair up"
# Link-local IPv4 so rdma_cm (libfabric's verbs;ofi_rxm) has an address; it
# also adds GID index 1 (::ffff:169.254.10.1, RoCE v2). Nothing leaves the
# guest: it has no NIC.
ip addr add 169.254.10.1/24 dev veth0 || setup_failed "ip addr add"
rdma link add rxe0 type rxe netdev veth0 || setup_failed "rdma link add rxe0"
state=""
for _ in $(seq 1 100); do
  state="$(cat /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null)"
  case "$state" in *ACTIVE*) break ;; esac
  sleep 0.1
done
case "$state" in *ACTIVE*) ;; *) setup_failed "rxe0 port 1 did not become ACTIVE (state: ${state:-none})" ;; esac
# Wait for the IPv4-mapped GID too (it appears asynchronously).
for _ in $(seq 1 50); do
  grep -q "^0000:0000:0000:0000:0000:ffff" /sys/class/infiniband/rxe0/ports/1/gids/1 2>/dev/null && break
  sleep 0.1
done
exec 2>&3 3>&-

. "$io/environment.sh"
cd "$(cat "$io/cwd")" 2>/dev/null || {
  echo "run-in-guest: working directory $(cat "$io/cwd") does not exist in the guest" \
       "(/tmp and /run are guest-private); running in /" >&2
  cd /
}
bash "$io/command.sh" >"$io/stdout" 2>"$io/stderr" </dev/null
