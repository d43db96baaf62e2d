#!/bin/sh
# Run first in a QEMU guest (nslab.hosts.vm.Guest's `hold`): have the guest's
# overlays copy the programs named here, and the libraries they load, up into
# the guest's RAM, so that starting one reads nothing from the host's files
# again. `touch -c -a` (its access time only; nothing created) copies it up.
# Only files under /usr (and its /bin, /sbin, /lib links) are held, never one
# in a folder the guest shares read-write with the host; a missing program is
# left out. Prints how many files it held, on stderr.
#
#   hold.sh --names FILE    programs by name or path (one per line), resolved
#                           here with ldd
#   hold.sh --list FILE     files already resolved (one per line) by the host,
#                           whose files the guest's root are: three programs
#                           started in all (grep twice, touch)
if [ "$1" = "--list" ]; then
  files=$(grep -E '^/(usr|lib|lib64|bin|sbin)/' "$2")
  n=$(echo "$files" | grep -c '^/')
  # shellcheck disable=SC2086  # one path per word
  touch -c -a $files 2>/dev/null
  echo "nslab: ${n:-0} programs and libraries held in the guest's RAM" >&2
  exit 0
fi
[ "$1" = "--names" ] || { echo "usage: hold.sh --names FILE | --list FILE" >&2; exit 2; }
paths=$(while read -r p; do w=$(command -v "$p") && readlink -f "$w"; done < "$2")
[ -n "$paths" ] || { echo "nslab: 0 programs and libraries held in the guest's RAM" >&2; exit 0; }
# shellcheck disable=SC2086  # one path per word
files=$(for f in $paths $(ldd $paths 2>/dev/null | sed -n 's|.*[[:space:]]\(/[^ ]*\) (0x.*|\1|p'); do
  case "$f" in /usr/*|/lib/*|/lib64/*|/bin/*|/sbin/*) echo "$f" ;; esac
done | sort -u)
n=$(echo "$files" | grep -c '^/')
# shellcheck disable=SC2086  # one path per word
touch -c -a $files 2>/dev/null
echo "nslab: $n programs and libraries held in the guest's RAM" >&2
