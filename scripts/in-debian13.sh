#!/usr/bin/env bash
# Run a command inside the Debian 13 (trixie) root made by setup-debian13.sh:
#
#   scripts/in-debian13.sh make VENV=.venv-debian13 unit
#
# The command runs as root, chrooted into $NSLAB_DEBIAN13_ROOT (default
# .cache/debian13 in the repository), in the repository's own directory: the
# checkout is bind-mounted at the same absolute path inside, so `make` works
# there. Everything is mounted in a mount namespace of its own (unshare), so
# nothing is ever mounted in this machine's table, even if this script is
# killed; on exit the mounts are undone in reverse order and every process still
# running inside the root is stopped (only one entry at a time: a lock).
#
# What is mounted, and why:
#   the root onto itself    `ip netns` makes /run/netns shared: needs a mount point
#   proc, sys, dev (+pts)   this machine's (sys and dev recursively)
#   tmpfs on run and tmp    as a booted trixie has them (daemons' pid files, sockets)
#   the repository          read-write, at the same path
#   <repo>/.cache           the root's own var/cache/nslab-repo: the unpacked
#                           sshd, prometheus and kernels are per userland (and the root
#                           itself lives in the host's .cache)
#   /lib/modules/<uname -r> this machine's modules, read-only, if it has any
#   pip's find-links dirs   read-only (PIP_FIND_LINKS), at the same path
# Copied in at each entry: /etc/resolv.conf, /etc/pip.conf and the CA bundle
# (so apt and pip reach the same mirrors and package index as this machine).
# The environment inside is clean: PATH, HOME, LANG, TERM, CI, and the
# PIP_*/proxy variables of this machine.
#
# The repository's .venv is Debian 12's: inside, use VENV=.venv-debian13.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
ROOT="${NSLAB_DEBIAN13_ROOT:-$REPO/.cache/debian13}"
ROOT="$(realpath -m "$ROOT")"
SELF="$(realpath "$0")"
say() { echo "nslab debian13: $*" >&2; }

[ "$#" -gt 0 ] || { say "usage: $0 COMMAND [ARG...]"; exit 2; }
[ "$(id -u)" -eq 0 ] || { say "needs root (chroot, mounts)"; exit 1; }
[ -x "$ROOT/usr/bin/env" ] || { say "no Debian 13 root at $ROOT: run scripts/setup-debian13.sh"; exit 1; }

if [ "${_NSLAB_DEBIAN13_NS:-}" != "$ROOT" ]; then
  # One entry at a time: on exit an entry stops every process inside the root.
  exec 9>"$ROOT.lock"
  if ! flock -n 9; then
    say "another entry into $ROOT is running; waiting for it"
    flock 9
  fi
  exec unshare --mount --propagation private env _NSLAB_DEBIAN13_NS="$ROOT" "$SELF" "$@"
fi

# --- from here on: inside our own mount namespace (private propagation) ---
mounted=()
mnt() {  # mnt TARGET MOUNT-ARGS...: mount, and remember it for the unmount on exit
  local target="$1"; shift
  mount "$@" "$target"
  mounted+=("$target")
}
in_root() {  # pids of processes whose root directory is the Debian 13 root
  local p r
  for p in /proc/[0-9]*; do
    r="$(readlink "$p/root" 2>/dev/null)" || continue
    [ "$r" = "$ROOT" ] && echo "${p#/proc/}"
  done
  return 0
}
cleanup() {
  local rc=$? pids i
  trap - EXIT INT TERM
  pids="$(in_root)"
  if [ -n "$pids" ]; then
    say "stopping processes left inside the root: $(echo $pids)"
    kill -TERM $pids 2>/dev/null || true
    for i in $(seq 50); do
      pids="$(in_root)"; [ -z "$pids" ] && break; sleep 0.1
    done
    [ -n "$pids" ] && { kill -KILL $pids 2>/dev/null || true; sleep 0.2; }
  fi
  for ((i=${#mounted[@]}-1; i>=0; i--)); do
    umount -R "${mounted[i]}" 2>/dev/null || umount -R -l "${mounted[i]}" \
      || say "could not unmount ${mounted[i]}"
  done
  # Anything still mounted under the root (in this namespace) is a bug: say so.
  if awk -v r="$ROOT" '$5 == r || index($5, r "/") == 1 {found=1} END {exit !found}' \
      /proc/self/mountinfo; then
    say "still mounted under $ROOT:"; awk -v r="$ROOT" '$5 == r || index($5, r "/") == 1 {print "  " $5}' /proc/self/mountinfo >&2
    [ "$rc" -eq 0 ] && rc=1
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mnt "$ROOT" --bind "$ROOT"
mnt "$ROOT/proc" -t proc proc
mnt "$ROOT/sys" --rbind /sys
mnt "$ROOT/dev" --rbind /dev
mnt "$ROOT/run" -t tmpfs -o mode=0755,nosuid,nodev tmpfs
mkdir -p "$ROOT/run/lock"
mnt "$ROOT/tmp" -t tmpfs -o mode=1777,nosuid,nodev tmpfs
mkdir -p "$ROOT$REPO"
mnt "$ROOT$REPO" --bind "$REPO"
mkdir -p "$REPO/.cache" "$ROOT/var/cache/nslab-repo"
mnt "$ROOT$REPO/.cache" --bind "$ROOT/var/cache/nslab-repo"
kver="$(uname -r)"
if [ -d "/lib/modules/$kver" ]; then
  mkdir -p "$ROOT/usr/lib/modules/$kver"
  mnt "$ROOT/usr/lib/modules/$kver" --bind -o ro "/lib/modules/$kver"
fi
for d in ${PIP_FIND_LINKS:-}; do
  case "$d" in
    /*) if [ -d "$d" ]; then mkdir -p "$ROOT$d"; mnt "$ROOT$d" --bind -o ro "$d"; fi ;;
  esac
done

# Files this machine's apt and pip rely on.
[ -f /etc/resolv.conf ] && cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf"
[ -f /etc/pip.conf ] && cp -L /etc/pip.conf "$ROOT/etc/pip.conf"
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  mkdir -p "$ROOT/etc/ssl/certs"
  cp -L /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/ssl/certs/ca-certificates.crt"
fi

envs=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
      LANG=C.UTF-8 TERM="${TERM:-dumb}")
while IFS='=' read -r name _; do
  case "$name" in
    PIP_*|CI|http_proxy|https_proxy|no_proxy|HTTP_PROXY|HTTPS_PROXY|NO_PROXY|PYTEST_ADDOPTS)
      envs+=("$name=${!name}") ;;
  esac
done < <(env)

cwd="$PWD"
case "$cwd/" in "$REPO"/*) ;; *) cwd="$REPO" ;; esac
# In the background, so that a signal to this script runs its trap at once (bash
# defers traps while a foreground command runs); stdin is kept (<&0).
set +e
chroot "$ROOT" /usr/bin/env -i "${envs[@]}" /bin/sh -c 'cd "$1" && shift && exec "$@"' sh "$cwd" "$@" <&0 9>&- &
wait "$!"
rc=$?
set -e
exit "$rc"
