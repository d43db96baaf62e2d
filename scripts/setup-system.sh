#!/usr/bin/env bash
# Install the Debian packages nslab needs, only those missing. Idempotent and
# quick when everything is present. Runs as root (apt).
set -euo pipefail
pkgs=(mininet iputils-ping bridge-utils openvswitch-switch frr iperf iproute2 ethtool tcpdump gcc python3-venv sysstat procps graphviz chromium chromium-driver tmux openssh-client)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "nslab setup: these Debian packages are missing and installing them needs root: ${missing[*]}" >&2
  exit 1
fi
echo "nslab setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# policy-rc.d may forbid starting services at install time; the lab starts
# the OVS daemons itself when it needs them.
apt-get install -y -qq --no-install-recommends "${missing[@]}"
