#!/usr/bin/env bash
# Make the Debian 13 (trixie) root of the Debian 13 test tier, by debootstrap
# into $NSLAB_DEBIAN13_ROOT (default .cache/debian13 in the repository, git-ignored).
# Nothing is installed into what this machine boots (only debootstrap itself,
# a Debian 12 package, by setup-system.sh).
#
# The root gets the packages nslab's own set-up needs there by running the
# very same scripts/setup-system.sh inside it (the per-distribution package
# logic lives in one place), plus `make` (the README's commands need it).
# Cached: the root is rebuilt, from scratch, only when this script or
# setup-system.sh changes (a hash stamp in the root); otherwise this exits at
# once. A build goes to <root>.build and replaces the old root only when whole.
#
# The mirror is the one this machine's apt uses for its own release (else
# deb.debian.org); NSLAB_DEBIAN_MIRROR overrides it. Enter the root with
# scripts/in-debian13.sh.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
ROOT="$(realpath -m "${NSLAB_DEBIAN13_ROOT:-$REPO/.cache/debian13}")"
SUITE=trixie
say() { echo "nslab setup-debian13: $*" >&2; }

stamp="$(cat "$REPO/scripts/setup-debian13.sh" "$REPO/scripts/setup-system.sh" | sha256sum | cut -d' ' -f1)"
current() { [ -f "$ROOT/.nslab-stamp" ] && [ "$(cat "$ROOT/.nslab-stamp")" = "$stamp" ]; }
current && exit 0
[ "$(id -u)" -eq 0 ] || { say "needs root (debootstrap, chroot)"; exit 1; }
command -v debootstrap >/dev/null || { say "debootstrap is missing: run scripts/setup-system.sh"; exit 1; }

# A tree is only ever deleted when nothing is mounted under it here (in-debian13.sh
# mounts in its own namespace; this guards against a hand-made mount).
mounted_under() {
  awk -v r="$1" '$5 == r || index($5, r "/") == 1 {found=1} END {exit !found}' /proc/self/mountinfo
}
remove_tree() {
  [ -e "$1" ] || return 0
  if mounted_under "$1"; then
    say "refusing to delete $1: something is mounted under it"; exit 1
  fi
  rm -rf --one-file-system "$1"
}

host_codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
site_for() {  # the URI this machine's apt uses for release $1, or nothing
  apt-get indextargets --format '$(RELEASE) $(REPO_URI)' 2>/dev/null \
    | awk -v rel="$1" '$1 == rel {print $2; exit}'
}
mirror="${NSLAB_DEBIAN_MIRROR:-$(site_for "$host_codename")}"
mirror="${mirror:-http://deb.debian.org/debian/}"
security="$(site_for "$host_codename-security")"
security="${security:-http://deb.debian.org/debian-security/}"

build="$ROOT.build"
exec 9>"$ROOT.setup.lock"
flock 9
current && exit 0  # made by another setup while this one waited
remove_tree "$build"
mkdir -p "$(dirname "$ROOT")"
t0=$(date +%s)
say "debootstrap $SUITE from $mirror into $build"
debootstrap --include=make,ca-certificates "$SUITE" "$build" "$mirror" >"$ROOT.debootstrap.log" 2>&1 \
  || { tail -20 "$ROOT.debootstrap.log" >&2; say "debootstrap failed (log: $ROOT.debootstrap.log)"; exit 1; }
t1=$(date +%s)
say "debootstrap: $((t1 - t0)) s"

# Services must not start when packages are installed (the lab starts what it needs).
printf '#!/bin/sh\nexit 101\n' >"$build/usr/sbin/policy-rc.d"
chmod 755 "$build/usr/sbin/policy-rc.d"
# The sources a trixie installer writes: the release, its updates and security.
rm -f "$build/etc/apt/sources.list"
cat >"$build/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF

# Into the root: its updates, then nslab's own package set-up, then apt's cache emptied.
say "installing nslab's packages (scripts/setup-system.sh inside; log: $ROOT.packages.log)"
NSLAB_DEBIAN13_ROOT="$build" "$REPO/scripts/in-debian13.sh" /bin/sh -c '
  set -e
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get upgrade -y -qq
  scripts/setup-system.sh
  apt-get clean' >"$ROOT.packages.log" 2>&1 \
  || { tail -20 "$ROOT.packages.log" >&2; say "installing packages failed (log: $ROOT.packages.log)"; exit 1; }
t2=$(date +%s)
say "packages: $((t2 - t1)) s"

echo "$stamp" >"$build/.nslab-stamp"
exec 8>"$ROOT.lock"  # no entry (in-debian13.sh) is inside the old root while it goes
flock 8
remove_tree "$ROOT.old"
[ -e "$ROOT" ] && mv "$ROOT" "$ROOT.old"
mv "$build" "$ROOT"
remove_tree "$ROOT.old"
say "ready: $ROOT, $(du -sh --one-file-system "$ROOT" | cut -f1) ($(cat "$ROOT/etc/debian_version")," \
    "$(chroot "$ROOT" python3 --version)); $(( $(date +%s) - t0 )) s in all"
