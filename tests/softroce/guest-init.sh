#!/bin/busybox sh
# shellcheck shell=dash
# /init of the soft-RoCE guest's initramfs (busybox only). It mounts the
# host's / (read-only 9p, tag hostroot) and the run's I/O folder (read-write
# 9p, tag chorusio), chroots into the host root to run guest-setup.sh, and
# reports the exit status on the serial console as
#   CHORUS-SOFTROCE-EXIT=<status>
# before powering off. run-in-guest.sh turns that line into its own status.
# Nothing here installs anything: every binary after the chroot is the host's.
/bin/busybox --install -s /bin
export PATH=/bin

fail() {
  echo "CHORUS-SOFTROCE-INIT-ERROR: $*" >/dev/console
  echo "CHORUS-SOFTROCE-EXIT=125" >/dev/console
  poweroff -f
  exit 1
}

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci \
         netfs fscache 9pnet 9pnet_virtio 9p; do
  insmod "/modules/$m.ko" || fail "insmod $m failed"
done

mkdir -p /newroot
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 hostroot /newroot ||
  fail "mounting the host root over 9p failed"
mount -t proc proc /newroot/proc || fail "mount proc"
mount -t sysfs sysfs /newroot/sys || fail "mount sysfs"
mount -t devtmpfs devtmpfs /newroot/dev || fail "mount devtmpfs"
mkdir -p /newroot/dev/pts /newroot/dev/shm
mount -t devpts devpts /newroot/dev/pts
mount -t tmpfs -o mode=1777 tmpfs /newroot/dev/shm
mount -t tmpfs -o mode=755 tmpfs /newroot/run || fail "mount /run"
# Keep a handle on the host's /tmp before the guest's own tmpfs hides it: a
# checkout under /tmp (a CI clone, say) is put back in place below.
mkdir -p /newroot/run/hosttmp
mount -o bind /newroot/tmp /newroot/run/hosttmp || fail "bind the host's /tmp"
mount -t tmpfs -o mode=1777 tmpfs /newroot/tmp || fail "mount /tmp"
mkdir -p /newroot/run/softroce
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 chorusio /newroot/run/softroce ||
  fail "mounting the run's I/O folder over 9p failed"
cwd="$(cat /newroot/run/softroce/cwd)"
case "$cwd" in
  /tmp/?*)
    top="${cwd#/tmp/}"
    top="${top%%/*}"
    mkdir -p "/newroot/tmp/$top"
    mount -o bind "/newroot/run/hosttmp/$top" "/newroot/tmp/$top" ||
      fail "bind the host's /tmp/$top into the guest"
    ;;
esac

echo "CHORUS-SOFTROCE-BOOTED" >/dev/console
chroot /newroot /bin/bash /run/softroce/guest-setup.sh
rc=$?
sync
echo "CHORUS-SOFTROCE-EXIT=$rc" >/dev/console
umount /newroot/run/softroce 2>/dev/null
umount /newroot/run/hosttmp 2>/dev/null
poweroff -f
