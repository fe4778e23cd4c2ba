#!/usr/bin/env bash
# Installs what Strata needs to build, test and benchmark on Debian 12 (root).
# Sourced by scripts/demo.sh and scripts/test.sh; safe to run again.
set -euo pipefail
STRATA_PACKAGES=(
  build-essential cmake pkg-config clang clang-format clang-tidy ccache
  liburcu-dev libunwind-dev libgtest-dev googletest
  libbabeltrace2-dev babeltrace2 python3-bt2
  libelf-dev libdw-dev chromium protobuf-compiler python3-jsonschema
  liblttng-ust-dev lttng-tools
  openjdk-17-jdk-headless liblttng-ust-java
  qemu-system-x86 linux-image-amd64 linux-headers-amd64 busybox-static cpio kmod file xz-utils dkms kexec-tools
  mmdebstrap initramfs-tools systemd e2fsprogs
  python3-lttnganalyses babeltrace
  socat
  sqlite3 libsqlite3-dev time
  memcached libmemcached-tools
  debhelper devscripts dh-dkms groff-base
)
strata_install_deps() {
  local missing=()
  for p in "${STRATA_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "strata: installing ${missing[*]}"
    if [ "$(id -u)" != 0 ]; then
      echo "strata: run as root to install packages" >&2
      return 1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}
if [ "${BASH_SOURCE[0]}" = "$0" ]; then strata_install_deps; fi
