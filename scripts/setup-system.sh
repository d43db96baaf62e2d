#!/usr/bin/env bash
# Install the distribution packages nslab needs, only those missing. Idempotent
# and quick when everything is present. Runs as root (apt).
#
#   scripts/setup-system.sh          install what is missing
#   scripts/setup-system.sh --list   print this distribution's package list and exit
#
# It knows the package names of Debian 12 and 13 and Ubuntu 24.04 (WSL2 runs
# those too). On any other distribution it names the packages to install by
# hand and stops; NSLAB_SKIP_SYSTEM=1 then skips this step. NSLAB_OS_RELEASE
# reads another os-release file (for tests).
set -euo pipefail
os_release=${NSLAB_OS_RELEASE:-/etc/os-release}
[ -r "$os_release" ] || os_release=/usr/lib/os-release
ID=unknown VERSION_ID="" PRETTY_NAME=""
# shellcheck disable=SC1090
[ -r "$os_release" ] && . "$os_release"
name=${PRETTY_NAME:-$ID}

# The same names on every distribution below. libc6-dev: gcc's headers (only
# recommended by gcc, and recommends are not installed; a fresh Debian 13 root
# has no arpa/inet.h without it). wireshark-common: dumpcap, which `nslab capture`
# runs (its debconf question, non-root capture, keeps its default "no" here).
# xz-utils: a program of the `tools` noisy neighbour (`nslab bench verdicts`).
pkgs=(mininet iputils-ping bridge-utils openvswitch-switch frr iperf iproute2 ethtool tcpdump
      wireshark-common gcc libc6-dev python3-venv sysstat procps graphviz tmux openssh-client
      xz-utils)
case "$ID:$VERSION_ID" in
  debian:12|debian:13)
    # the browser tests' Chromium; debootstrap makes the Debian 13 root of
    # `make test-debian13` (scripts/setup-debian13.sh)
    pkgs+=(chromium chromium-driver debootstrap) ;;
  ubuntu:24.04)
    # chromium and chromium-driver are transitional packages that install a
    # snap there: not installed (set-up must not wait on snapd); the browser
    # tests skip, naming what they looked for, unless a browser is present.
    pkgs+=(debootstrap) ;;
  *)
    if [ "${1:-}" = "--list" ]; then
      echo "unknown: $name" >&2
      exit 3
    fi
    [ "${NSLAB_SKIP_SYSTEM:-0}" = 1 ] && exit 0
    echo "nslab setup: $name is not a distribution this script knows (it knows Debian 12 and 13," \
         "Ubuntu 24.04). Install these packages (Debian's names) with your package manager:" \
         "${pkgs[*]}; then run make again with NSLAB_SKIP_SYSTEM=1. See docs/troubleshooting.md." >&2
    exit 1 ;;
esac

if [ "${1:-}" = "--list" ]; then
  printf '%s\n' "${pkgs[@]}"
  exit 0
fi
[ "${NSLAB_SKIP_SYSTEM:-0}" = 1 ] && exit 0

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "nslab setup: these $name packages are missing and installing them needs root: ${missing[*]}" >&2
  exit 1
fi
echo "nslab setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# policy-rc.d may forbid starting services at install time; the lab starts
# the OVS daemons itself when it needs them.
apt-get install -y -qq --no-install-recommends "${missing[@]}"
