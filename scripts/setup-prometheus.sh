#!/usr/bin/env bash
# Debian's Prometheus server for the metrics tests, unpacked (never installed:
# no service, no user, no data directory, nothing listening on this machine) into
#   $NSLAB_PROMETHEUS_CACHE (default .cache/prometheus in the repository).
# The tests start the binary themselves, bound to 127.0.0.1, with a scrape
# configuration and a storage directory of their own, and stop it. Installing
# the package instead would start a service on all interfaces where the init
# system allows it. The unpacked binary is this distribution's (inside the
# Debian 13 root, .cache is the root's own: Debian 13's Prometheus).
# Idempotent; quick when present.
set -euo pipefail
CACHE="${NSLAB_PROMETHEUS_CACHE:-$(cd "$(dirname "$0")/.." && pwd)/.cache/prometheus}"
BIN="$CACHE/usr/bin/prometheus"
runs() { [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1; }
runs && exit 0
mkdir -p "$CACHE"
tmp=$(mktemp -d "$CACHE/../.prometheus-download.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "nslab setup: fetching prometheus into $CACHE (unpacked only, not installed)"
fetch() { (cd "$tmp" && apt-get download -q prometheus 2>&1 | grep -v "^W: Download is performed unsandboxed" || true); }
fetch
deb=$(ls "$tmp"/*.deb 2>/dev/null | head -1)
if [ -z "$deb" ]; then
  apt-get update -qq
  fetch
  deb=$(ls "$tmp"/*.deb 2>/dev/null | head -1)
fi
[ -n "$deb" ] || { echo "nslab setup: apt-get download prometheus failed" >&2; exit 1; }
# Only the binaries are kept (the package's web assets, man pages and service
# files are of no use to the tests); a partial tree never stays behind.
dpkg-deb -x "$deb" "$tmp/root"
mkdir -p "$CACHE/usr/bin"
for b in prometheus promtool; do
  [ -x "$tmp/root/usr/bin/$b" ] && install -m 0755 "$tmp/root/usr/bin/$b" "$CACHE/usr/bin/$b.new" \
    && mv -f "$CACHE/usr/bin/$b.new" "$CACHE/usr/bin/$b"
done
runs || { echo "nslab setup: the unpacked prometheus does not run: $("$BIN" --version 2>&1 | head -3)" >&2; exit 1; }
"$BIN" --version 2>&1 | head -1
