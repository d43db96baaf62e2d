"""Writing files as root in a folder that may come from anyone.

A lab folder (topologies, study files, earlier results) can ship symbolic
links: ``results/alias/nl3f2a/report.md -> /etc/passwd``. nslab runs as root,
so every file it writes goes through this module:

* no component of the path may be a symbolic link, except a link that only
  root could have placed (owned by root, in a directory owned by root that
  nobody else can write) and that lies outside the current directory;
* new files are created with ``O_CREAT | O_EXCL | O_NOFOLLOW``; a file that
  is rewritten (a report, a provenance) is written to a new temporary file
  beside it and renamed over it, which replaces a link instead of following
  it; appending refuses anything but a regular file with one link;
* a run directory is created with an exclusive ``mkdir``: an existing one
  (or a link of that name) is never reused for a new run.

The checks are made on the path as it is when nslab writes: they stop a
folder's pre-placed links, not another local user racing nslab in a folder
that user can write (see ``docs/security.md``).
"""
from __future__ import annotations

import os
import stat
import tempfile
from typing import IO, Optional, Union

from .errors import InputError


class UnsafePathError(InputError):
    """A path nslab would write through is (or passes through) a link."""


def _inside(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _trusted_link(path: str, st: os.stat_result, cwd: str) -> bool:
    """A link root placed itself (``/var/run -> /run``), outside the folder."""
    if _inside(path, cwd):
        return False
    try:
        pst = os.lstat(os.path.dirname(path) or "/")
    except OSError:
        return False
    return st.st_uid == 0 and pst.st_uid == 0 and not (pst.st_mode & 0o022)


def check_path(path: str, *, leaf: bool = True) -> str:
    """Refuse ``path`` if a component of it is a link (see the module's rule).

    Components that do not exist yet are fine (they will be created as real
    directories by :func:`make_dirs`). With ``leaf=False`` the last component
    is not checked (a file that will be replaced by rename). Returns the
    absolute path.
    """
    cwd = os.getcwd()
    full = os.path.abspath(path)
    parts = [p for p in full.split("/") if p]
    cur = ""
    last = len(parts) - 1
    for i, part in enumerate(parts):
        cur = f"{cur}/{part}"
        if i == last and not leaf:
            break
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            break
        if stat.S_ISLNK(st.st_mode) and not _trusted_link(cur, st, cwd):
            raise UnsafePathError(
                f"{path}: {cur} is a symbolic link; nslab runs as root and does not "
                f"write through links (remove it, or write elsewhere)")
    return full


def make_dirs(path: str, mode: int = 0o755) -> str:
    """``mkdir -p`` that refuses a link in any component. Returns the absolute path."""
    full = check_path(path)
    cur = ""
    for part in [p for p in full.split("/") if p]:
        cur = f"{cur}/{part}"
        try:
            os.mkdir(cur, mode)
        except FileExistsError:
            st = os.lstat(cur)
            if not stat.S_ISDIR(st.st_mode) and not stat.S_ISLNK(st.st_mode):
                raise UnsafePathError(f"{path}: {cur} exists and is not a directory") from None
    return full


def make_fresh_dir(path: str, mode: int = 0o755) -> str:
    """Create ``path`` itself with an exclusive ``mkdir`` (its parents as
    :func:`make_dirs`). Raises :class:`FileExistsError` if anything by that
    name exists already, a link included."""
    full = os.path.abspath(path)
    make_dirs(os.path.dirname(full))
    os.mkdir(full, mode)
    return full


def _check_regular(fd: int, path: str) -> None:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        raise UnsafePathError(f"{path}: not a regular file of nslab's own "
                              f"(type {stat.filemode(st.st_mode)}, {st.st_nlink} links)")


def open_new(path: str, mode: str = "w", *, encoding: Optional[str] = "utf-8",
             perm: int = 0o644) -> IO:
    """Open a file that must not exist yet (``O_EXCL | O_NOFOLLOW``)."""
    check_path(path, leaf=False)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, perm)
    return os.fdopen(fd, mode, encoding=None if "b" in mode else encoding)


def open_append(path: str, *, encoding: str = "utf-8", perm: int = 0o644) -> IO:
    """Open a file to append to: created if missing; refused if it is a link,
    not a regular file, or has another hard link."""
    check_path(path, leaf=False)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                 perm)
    _check_regular(fd, path)
    return os.fdopen(fd, "a", encoding=encoding)


def write_atomic(path: str, data: Union[str, bytes], *, perm: int = 0o644) -> str:
    """Write ``data`` to ``path`` through a new temporary file in the same
    directory, renamed over ``path`` (a link there is replaced, not followed).
    Returns ``path``."""
    check_path(path, leaf=False)
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".nslab-", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, perm)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def tree_is_safe(path: str) -> Optional[str]:
    """Whether nslab may write into the existing directory ``path``: ``None``
    if so, else why not. Safe means: no link in the path or anywhere below it,
    everything owned by the current user (root) and writable by nobody else."""
    try:
        check_path(path)
    except UnsafePathError as exc:
        return str(exc)
    me = os.geteuid()
    for top, dirs, files in os.walk(path, followlinks=False):
        for name in [top] + [os.path.join(top, n) for n in dirs + files]:
            try:
                st = os.lstat(name)
            except OSError as exc:
                return f"{name}: {exc.strerror}"
            if stat.S_ISLNK(st.st_mode):
                return f"{name} is a symbolic link"
            if st.st_uid != me:
                return f"{name} belongs to uid {st.st_uid}, not to uid {me}"
            if st.st_mode & 0o022:
                return f"{name} is writable by others ({stat.filemode(st.st_mode)})"
    return None
