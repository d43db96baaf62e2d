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
#
# KERNEL_DIST selects whose apt fetches it: empty (the default) for this
# machine's, `trixie` for Debian 13's, through the Debian 13 root of
# scripts/setup-debian13.sh (made first if missing; this machine's apt sources
# are never changed). Each kernel is also linked as $CACHE/<dist> (bookworm,
# trixie: what `make test-kernel` boots); $CACHE/current is this machine's
# release's. A trixie kernel's modules are also linked (hard links, no copy)
# into the Debian 13 root's /usr/lib/modules, where a guest booted on that root
# (virtme-ng --root) finds them.
set -euo pipefail
KERNEL_PKG="${KERNEL_PKG:-linux-image-amd64}"
REPO="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${NSLAB_KERNEL_CACHE:-$REPO/.cache/kernel}"
HOST_DIST="$(. /etc/os-release && echo "${VERSION_CODENAME:-host}")"
KERNEL_DIST="${KERNEL_DIST:-$HOST_DIST}"
D13_ROOT="$(realpath -m "${NSLAB_DEBIAN13_ROOT:-$REPO/.cache/debian13}")"
# qemu-system-x86: the emulator; busybox-static: virtme-ng's initramfs; udev:
# the guest's /dev/virtio-ports (the command's stdin/stdout/exit status); file
# and kmod: virtme-ng reads the kernel's version and runs depmod.
# zstd: nslab unpacks a Debian 13 kernel (zstd inside its bzImage) to boot it
# uncompressed (nslab/hosts/bootimage.py).
pkgs=(qemu-system-x86 busybox-static udev file kmod zstd)
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

# apt: this machine's, or the Debian 13 root's (through in-debian13.sh, which
# mounts what apt needs; the download lands in the root's /var/tmp).
case "$KERNEL_DIST" in
  "$HOST_DIST") in_dist() { "$@"; }; dl_dir() { mktemp -d "$CACHE/.download.XXXXXX"; } ;;
  trixie)
    "$REPO/scripts/setup-debian13.sh"
    in_dist() { "$REPO/scripts/in-debian13.sh" "$@"; }
    dl_dir() { mkdir -p "$D13_ROOT/var/tmp"; mktemp -d "$D13_ROOT/var/tmp/nslab-kernel.XXXXXX"; } ;;
  *) echo "nslab setup-kernel: KERNEL_DIST=$KERNEL_DIST: use $HOST_DIST (this machine's apt) or trixie" >&2
     exit 1 ;;
esac

# Resolve a metapackage to the kernel image it depends on (apt-cache, no install).
pkg="${KERNEL_PKG%%/*}"
suite=""
[ "$pkg" != "$KERNEL_PKG" ] && suite="/${KERNEL_PKG#*/}"
resolve() {
  local dep
  image="$pkg"
  dep=$(in_dist apt-cache depends "$pkg$suite" 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
  [ -n "$dep" ] && image="$dep"
  dest="$CACHE/$image"
}
if ! in_dist apt-cache show "$pkg$suite" >/dev/null 2>&1; then
  in_dist apt-get update -qq
fi
resolve

link_into_root() {  # a trixie kernel's modules into the Debian 13 root (hard links)
  [ "$KERNEL_DIST" = trixie ] || return 0
  local kver; kver=$(ls "$dest/usr/lib/modules" | head -1)
  [ -f "$D13_ROOT/usr/lib/modules/$kver/modules.dep" ] && return 0
  mkdir -p "$D13_ROOT/usr/lib/modules"
  rm -rf "$D13_ROOT/usr/lib/modules/$kver"
  cp -al "$dest/usr/lib/modules/$kver" "$D13_ROOT/usr/lib/modules/$kver" 2>/dev/null \
    || cp -a "$dest/usr/lib/modules/$kver" "$D13_ROOT/usr/lib/modules/$kver"
}
finish() {
  ln -sfn "$image" "$CACHE/$KERNEL_DIST"
  [ "$KERNEL_DIST" = "$HOST_DIST" ] && ln -sfn "$image" "$CACHE/current"
  link_into_root
}
if [ ! -f "$dest/.unpacked" ]; then
  # About to download: with fresh package lists (a kernel of old lists may be gone).
  in_dist apt-get update -qq
  resolve
fi
if [ -f "$dest/.unpacked" ]; then
  finish
  exit 0
fi
mkdir -p "$CACHE"
tmp=$(dl_dir)
trap 'rm -rf "$tmp"' EXIT
echo "nslab setup-kernel: fetching $image$suite ($KERNEL_DIST) into $dest (not installed: unpacked only)"
inner="$tmp"  # the download folder as apt sees it
[ "$KERNEL_DIST" = "$HOST_DIST" ] || inner="${tmp#"$D13_ROOT"}"
(in_dist sh -c 'cd "$1" && shift && exec "$@"' sh "$inner" apt-get download -q "$image$suite" 2>&1 \
  | grep -v "^W: Download is performed unsandboxed" || true)
deb=$(ls "$tmp"/*.deb 2>/dev/null | head -1)
[ -n "$deb" ] || { echo "nslab setup-kernel: apt-get download $image$suite failed" >&2; exit 1; }
rm -rf "$dest"
mkdir -p "$dest"
dpkg-deb -x "$deb" "$dest"
# Debian 13's packages put modules under usr/lib/modules (merged /usr); the
# tools that look in lib/modules (depmod -b, virtme-ng) find them through a link.
if [ ! -e "$dest/lib" ] && [ -d "$dest/usr/lib/modules" ]; then
  ln -s usr/lib "$dest/lib"
fi
kver=$(ls "$dest/lib/modules" | head -1)
depmod -a -b "$dest" "$kver"
touch "$dest/.unpacked"
finish
echo "nslab setup-kernel: $kver ready ($(du -sh "$dest" | cut -f1))"
