#!/bin/sh
# Run first in a QEMU guest (nslab.hosts.vm.Guest's `hold`): have the guest's
# overlays copy the programs named here, and the libraries they load, up into
# the guest's RAM, so that starting one reads nothing from the host's files
# again. `touch -c -r f f` leaves a file's times as they were and copies it up.
# Only files under /usr (and its /bin, /sbin, /lib links) are held, never one
# in a folder the guest shares read-write with the host; a missing program is
# left out. Prints how many files it held, on stderr.
#
#   hold.sh PROGRAM...      programs by name or path, resolved here with ldd
#   hold.sh --list FILE     files already resolved (one per line) by the host,
#                           whose files the guest's root are: one exec in all
if [ "$1" = "--list" ]; then
  files=$(grep -E '^/(usr|lib|lib64|bin|sbin)/' "$2")
  n=$(echo "$files" | grep -c '^/')
  # shellcheck disable=SC2086  # one path per word
  touch -c -a $files 2>/dev/null
  echo "nslab: ${n:-0} programs and libraries held in the guest's RAM" >&2
  exit 0
fi
held=0
paths=$(for p in "$@"; do w=$(command -v "$p") && readlink -f "$w"; done)
[ -n "$paths" ] || { echo "nslab: 0 programs and libraries held in the guest's RAM" >&2; exit 0; }
# shellcheck disable=SC2086  # one path per word
for f in $paths $(ldd $paths 2>/dev/null | sed -n 's|.*[[:space:]]\(/[^ ]*\) (0x.*|\1|p' | sort -u); do
  case "$f" in
    /usr/*|/lib/*|/lib64/*|/bin/*|/sbin/*)
      touch -c -r "$f" "$f" 2>/dev/null && held=$((held + 1)) ;;
  esac
done
echo "nslab: $held programs and libraries held in the guest's RAM" >&2
