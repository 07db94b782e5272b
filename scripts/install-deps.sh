#!/usr/bin/env bash
# Installs everything Chorus's build, tests and benchmarks need from Debian 12's
# packages, including the soft-RoCE guest (scripts/install-softroce.sh).
# Idempotent: does nothing when everything is already installed.
# tests/deps/check_deps.py (ctest deps.declared) fails when the tree uses a
# header, program or Python module from a package that this list and
# install-softroce.sh's neither name nor pull in.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libasio-dev libtomlplusplus-dev libcli11-dev libfmt-dev nlohmann-json3-dev
  catch2 libssl-dev openmpi-bin libopenmpi-dev
  slurmctld slurmd slurm-client munge
  libibverbs-dev libfabric-dev libfabric-bin
  iproute2 procps nftables
  libgloo-dev libbenchmark-dev python3-matplotlib libxxhash-dev
  python3-torch python3-pytest python3-setuptools libtorch-dev pybind11-dev
  clang libclang-rt-dev
)

# --list prints the package names and installs nothing (tests/deps reads it).
if [ "${1:-}" = --list ]; then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
else
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# The soft-RoCE guest (QEMU, rdma-core, Debian's kernel) that the RDMA verbs
# suite runs in; its own script, since it also unpacks a kernel.
bash "$(dirname "$0")/install-softroce.sh"
