#!/usr/bin/env bash
# Installs pando-helper's build, test and packaging dependencies from Debian 12
# packages. Idempotent: does nothing when everything is already installed.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config clang
  libboost-dev libcap-dev libprotobuf-dev protobuf-compiler libspdlog-dev libfmt-dev
  libseccomp-dev libgtest-dev googletest
  cloc universal-ctags
  passwd util-linux procps coreutils iproute2 git python3
  bubblewrap
  dpkg-dev debhelper fakeroot lintian rpm systemd libxml2-utils
  systemd-container debootstrap
  qemu-system-x86 e2fsprogs
  gcovr
)

missing=()
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: run as root to install: ${missing[*]}" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
