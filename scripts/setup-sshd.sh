#!/usr/bin/env bash
# An OpenSSH server for the multi-host tests, unpacked (never installed: no
# service, no host keys, nothing listening on this machine) into
#   $NSLAB_SSHD_CACHE (default .cache/sshd in the repository).
# The tests start it inside their own pseudo-hosts and guests, bound to the
# addresses they create. Idempotent; quick when present.
set -euo pipefail
CACHE="${NSLAB_SSHD_CACHE:-$(cd "$(dirname "$0")/.." && pwd)/.cache/sshd}"
missing_libs() {  # shared libraries the unpacked server lacks on this system
  local f
  for f in "$CACHE/usr/sbin/sshd" "$CACHE"/usr/lib/openssh/sshd-session "$CACHE"/usr/lib/openssh/sshd-auth; do
    [ -x "$f" ] || continue
    LD_LIBRARY_PATH="$CACHE/usr/lib/x86_64-linux-gnu" ldd "$f" 2>/dev/null | awk '/not found/ {print $1}' || true
  done | sort -u
}
[ -x "$CACHE/usr/sbin/sshd" ] && [ -z "$(missing_libs)" ] && exit 0
mkdir -p "$CACHE"
tmp=$(mktemp -d "$CACHE/../.sshd-download.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "nslab setup: fetching openssh-server into $CACHE (unpacked only, not installed)"
(cd "$tmp" && apt-get download -q openssh-server 2>&1 | grep -v "^W: Download is performed unsandboxed" || true)
deb=$(ls "$tmp"/*.deb 2>/dev/null | head -1)
if [ -z "$deb" ]; then
  apt-get update -qq
  (cd "$tmp" && apt-get download -q openssh-server 2>&1 | grep -v "^W: Download is performed unsandboxed" || true)
  deb=$(ls "$tmp"/*.deb 2>/dev/null | head -1)
fi
[ -n "$deb" ] || { echo "nslab setup: apt-get download openssh-server failed" >&2; exit 1; }
dpkg-deb -x "$deb" "$CACHE"
# Its library dependencies that this system lacks (Debian 13's sshd-session
# needs libwtmpdb0), unpacked beside it too; the tests point the loader there.
for pkg in $(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed 's/[|(].*//; s/ //g' | grep '^lib'); do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" && continue
  (cd "$tmp" && apt-get download -q "$pkg" 2>&1 | grep -v "^W: Download is performed unsandboxed" || true)
  for d in "$tmp"/"$pkg"_*.deb; do [ -f "$d" ] && dpkg-deb -x "$d" "$CACHE"; done
done
left=$(missing_libs)
[ -z "$left" ] || { echo "nslab setup: the unpacked sshd still lacks: $left" >&2; exit 1; }
"$CACHE/usr/sbin/sshd" -V 2>&1 | head -1 || true
