#!/bin/sh
# Run first in a QEMU guest (nslab.hosts.vm.Guest's `cached`): the folders the
# guest's Python imports from, read through the guest's page and dentry caches.
# virtme-ng shares the host's folders over 9p without a cache, so each import
# read the host's files again; here one more share of the host's root, made
# read-only by virtme-ng, is mounted again with cache=loose, and each folder
# is bind-mounted (read-only) from it over the path the guest already sees it
# at. A folder whose bind fails stays as it was, readable and uncached.
# Prints how many folders it cached, on stderr.
#
#   cache.sh FILE   first line: TAG MOUNTPOINT (the share's 9p tag and where
#                   virtme-ng mounted it); then one line per folder:
#                   HOST-PATH GUEST-PATH
[ -r "$1" ] || { echo "usage: cache.sh FILE" >&2; exit 2; }
opts=ro,version=9p2000.L,trans=virtio,access=any,msize=512000,cache=loose
n=0
{
  read -r tag top
  # a 9p channel serves one mount at a time: virtme-ng's uncached one goes first
  if ! { umount "$top" && mount -t 9p -o "$opts" "$tag" "$top"; } 2>/dev/null; then
    echo "nslab: no cached share of the host's files; the guest reads them uncached" >&2
    exit 0
  fi
  while read -r host path; do
    [ -n "$path" ] || continue
    # read-only already: the share's superblock is mounted ro, and QEMU
    # exports it read-only (virtme-ng's --rodir); no remount (a process each)
    if mount --bind "$top$host" "$path" 2>/dev/null; then
      n=$((n + 1))
    else
      echo "nslab: $path read without a cache" >&2
    fi
  done
} < "$1"
echo "nslab: $n code folders read through the guest's cache" >&2
