#!/usr/bin/env bash
# Installs Chorus's build and test dependencies from Debian 12's packages.
# Idempotent: does nothing when everything is already installed.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libasio-dev libtomlplusplus-dev libcli11-dev libfmt-dev nlohmann-json3-dev
  catch2 libssl-dev openmpi-bin libopenmpi-dev
  slurmctld slurmd slurm-client munge
  libibverbs-dev libfabric-dev libfabric-bin
  iproute2 procps nftables
  libgloo-dev libbenchmark-dev python3-matplotlib
  python3-torch python3-pytest
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
