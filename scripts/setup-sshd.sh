#!/usr/bin/env bash
# An OpenSSH server for the multi-host tests, unpacked (never installed: no
# service, no host keys, nothing listening on this machine) into
#   $NSLAB_SSHD_CACHE (default .cache/sshd in the repository).
# The tests start it inside their own pseudo-hosts and guests, bound to the
# addresses they create. Idempotent; quick when present.
set -euo pipefail
CACHE="${NSLAB_SSHD_CACHE:-$(cd "$(dirname "$0")/.." && pwd)/.cache/sshd}"
[ -x "$CACHE/usr/sbin/sshd" ] && exit 0
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
"$CACHE/usr/sbin/sshd" -V 2>&1 | head -1 || true
