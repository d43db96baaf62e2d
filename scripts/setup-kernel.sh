#!/usr/bin/env bash
# Set up the stock-kernel tier: QEMU, virtme-ng's host needs, and a Debian kernel
# package unpacked into a cache. Idempotent; quick when everything is present.
#
# The kernel is NEVER installed into what this machine boots: the package is
# fetched with `apt-get download` and unpacked with `dpkg-deb -x` into
#   $NSLAB_KERNEL_CACHE/<package>/   (default .cache/kernel in the repository)
# which a QEMU guest boots, finding its modules there.
#
# KERNEL_PKG selects the kernel: a metapackage (linux-image-amd64, the default)
# or an exact one (linux-image-6.1.0-56-amd64); a backports kernel is one
# variable away (KERNEL_PKG=linux-image-amd64/bookworm-backports, if the
# machine has that suite in its apt sources).
set -euo pipefail
KERNEL_PKG="${KERNEL_PKG:-linux-image-amd64}"
CACHE="${NSLAB_KERNEL_CACHE:-$(cd "$(dirname "$0")/.." && pwd)/.cache/kernel}"
# qemu-system-x86: the emulator; busybox-static: virtme-ng's initramfs; udev:
# the guest's /dev/virtio-ports (the command's stdin/stdout/exit status); file
# and kmod: virtme-ng reads the kernel's version and runs depmod.
pkgs=(qemu-system-x86 busybox-static udev file kmod)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  [ "$(id -u)" -eq 0 ] || { echo "nslab setup-kernel: needs root to install ${missing[*]}" >&2; exit 1; }
  echo "nslab setup-kernel: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Resolve a metapackage to the kernel image it depends on (apt-cache, no install).
pkg="${KERNEL_PKG%%/*}"
suite=""
[ "$pkg" != "$KERNEL_PKG" ] && suite="/${KERNEL_PKG#*/}"
image="$pkg"
if ! apt-cache show "$pkg$suite" >/dev/null 2>&1; then
  apt-get update -qq
fi
dep=$(apt-cache depends "$pkg$suite" 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
[ -n "$dep" ] && image="$dep"
dest="$CACHE/$image"
if [ -f "$dest/.unpacked" ]; then
  ln -sfn "$image" "$CACHE/current"
  exit 0
fi
mkdir -p "$CACHE"
tmp=$(mktemp -d "$CACHE/.download.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "nslab setup-kernel: fetching $image$suite into $dest (not installed: unpacked only)"
(cd "$tmp" && apt-get download -q "$image$suite" 2>&1 | grep -v "^W: Download is performed unsandboxed" || true)
deb=$(ls "$tmp"/*.deb 2>/dev/null | head -1)
[ -n "$deb" ] || { echo "nslab setup-kernel: apt-get download $image$suite failed" >&2; exit 1; }
rm -rf "$dest"
mkdir -p "$dest"
dpkg-deb -x "$deb" "$dest"
kver=$(ls "$dest/lib/modules" | head -1)
depmod -a -b "$dest" "$kver"
touch "$dest/.unpacked"
ln -sfn "$image" "$CACHE/current"
echo "nslab setup-kernel: $kver ready ($(du -sh "$dest" | cut -f1))"
