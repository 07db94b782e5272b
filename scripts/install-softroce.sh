#!/usr/bin/env bash
# Installs what tests/softroce/run-in-guest.sh needs to run real RDMA verbs
# (soft-RoCE, rdma_rxe) inside a QEMU guest on a host whose kernel has no RDMA:
#
#  - host packages: QEMU, a static busybox for the guest's initramfs, the
#    rdma-core userspace (libibverbs + the rxe provider), the verbs tools and
#    perftest (ib_send_bw / ib_write_bw), iproute2 (ip, rdma) and kmod
#    (modprobe, depmod; the guest runs the host's binaries);
#  - Debian's stock kernel (linux-image-amd64, which ships rdma_rxe as a
#    module), fetched with `apt-get download` and unpacked with `dpkg -x` into
#    a cache folder, plus a depmod index for it. Nothing is installed into the
#    host's /boot or /lib/modules and no initramfs is generated.
#
# Idempotent and fast when everything is already there.
#   SOFTROCE_CACHE   cache folder (default /var/cache/chorus-softroce)
set -euo pipefail

cache="${SOFTROCE_CACHE:-/var/cache/chorus-softroce}"
packages=(qemu-system-x86 busybox-static rdma-core ibverbs-providers ibverbs-utils perftest
          iproute2 kmod)

# --list prints the package names and installs nothing (tests/deps reads it).
if [ "${1:-}" = --list ]; then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
updated=0
apt_update() {
  if [ "$updated" -eq 0 ]; then
    $SUDO apt-get update -q >/dev/null
    updated=1
  fi
}

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-softroce: installing ${missing[*]}"
  apt_update
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

# The kernel: resolve the linux-image-amd64 metapackage to its versioned
# image package and unpack that once. The unpacked tree is complete when
# $cache/kernel/READY names the version.
if [ -s "$cache/kernel/READY" ] && [ -f "$cache/kernel/boot/vmlinuz-$(cat "$cache/kernel/READY")" ]; then
  echo "install-softroce: packages present, kernel $(cat "$cache/kernel/READY") in $cache"
  exit 0
fi

resolve_image() {
  apt-cache depends linux-image-amd64 2>/dev/null |
    awk '/Depends: linux-image-[0-9]/ { print $2; exit }'
}
image="$(resolve_image)"
if [ -z "$image" ]; then
  apt_update
  image="$(resolve_image)"
fi
if [ -z "$image" ]; then
  echo "install-softroce: cannot resolve linux-image-amd64 to a kernel package" >&2
  exit 1
fi

$SUDO mkdir -p "$cache"
work="$(mktemp -d "$cache/download.XXXXXX")"
trap 'rm -rf "$work"' EXIT
echo "install-softroce: downloading $image"
(cd "$work" && apt-get download -q "$image" >/dev/null 2>&1) || {
  apt_update
  (cd "$work" && apt-get download -q "$image" >/dev/null)
}
deb="$(ls "$work"/*.deb)"
rm -rf "$cache/kernel.new"
mkdir -p "$cache/kernel.new"
dpkg -x "$deb" "$cache/kernel.new"
version="$(ls "$cache/kernel.new/lib/modules" | head -n1)"
if [ -z "$version" ] || [ ! -f "$cache/kernel.new/boot/vmlinuz-$version" ]; then
  echo "install-softroce: $deb has no vmlinuz or modules" >&2
  exit 1
fi
# dpkg -x runs no maintainer scripts, so build the module index here; the
# guest's modprobe reads it from /lib/modules/$version, which run-in-guest.sh
# bind-mounts onto this tree.
depmod -b "$cache/kernel.new" "$version"
echo "$version" >"$cache/kernel.new/READY"
rm -rf "$cache/kernel"
mv "$cache/kernel.new" "$cache/kernel"
echo "install-softroce: kernel $version unpacked into $cache/kernel"
