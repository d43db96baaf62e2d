"""Files of a node's FRR directories, touched by root without trusting ``frr``.

Each FRR node has two directories under the run's work dir:

* ``frr/<node>/`` (owner ``frr``, mode 0770): what the daemons write (sockets,
  pid files, logs, their stdout). The ``frr`` user (any daemon it runs, or
  anyone in its group) can put anything there: a link to ``/etc/shadow``, a
  hard link to a root file, a FIFO, a pid file naming any process.
* ``frr-conf/<node>/`` (owner root, group ``frr``, mode 0750): the
  configuration nslab renders, readable by the daemons, writable by root only.

Root never follows a link in the first: every access goes through a descriptor
of the directory itself (opened with ``O_NOFOLLOW``), each file is opened
relative to it with ``O_NOFOLLOW`` (and ``O_NONBLOCK``, so a FIFO cannot
block), and only a regular file with a single link is read or appended to.
Copies go out through :mod:`nslab.safeio`. Pid files are not read at all: the
lab signals only the processes it started (see :meth:`frr.daemon.Daemon.signal`).
"""
from __future__ import annotations

import errno
import grp
import logging
import os
import pwd
import stat
import time
from typing import IO, Iterable, List, Optional, Tuple

from nslab.errors import LabError
from nslab.safeio import UnsafePathError, check_path, make_dirs, write_atomic

log = logging.getLogger(__name__)

#: The most of one file copied out of a run directory (a log can grow without end).
COPY_LIMIT = 64 * 1024 * 1024


def frr_ids() -> Tuple[int, int]:
    """The ``frr`` user's uid and group's gid; (-1, -1) when missing (the daemons will say so)."""
    try:
        return pwd.getpwnam("frr").pw_uid, grp.getgrnam("frr").gr_gid
    except KeyError:  # pragma: no cover - frr not installed
        return -1, -1


def _safe_name(name: str) -> str:
    if not name or "/" in name or name in (".", "..") or "\0" in name:
        raise LabError(f"not a plain file name: {name!r}")
    return name


class NodeDir:
    """One directory of a node, reached only through a descriptor of it.

    Args:
        path: the directory.
        owner: ``"frr"`` for the daemons' directory (mode 0770, theirs),
            ``"root"`` for the configuration (mode 0750, group ``frr``).
    """

    def __init__(self, path: str, owner: str = "frr") -> None:
        self.path = os.path.abspath(path)
        self.owner = owner

    # -- the directory ---------------------------------------------------------------
    def create(self) -> None:
        """Create the directory (its parents as root's, 0755), exclusively: one
        that exists already, or a link by its name, is refused."""
        make_dirs(os.path.dirname(self.path))
        try:
            os.mkdir(self.path, 0o700)
        except FileExistsError:
            raise UnsafePathError(f"{self.path} exists already; a node's FRR directory is "
                                  f"made fresh for each run") from None
        uid, gid = frr_ids()
        fd = self._open_dir()
        try:
            if os.geteuid() == 0 and gid >= 0:
                os.fchown(fd, uid if self.owner == "frr" else 0, gid)
            os.fchmod(fd, 0o770 if self.owner == "frr" else 0o750)
        finally:
            os.close(fd)

    def _open_dir(self) -> int:
        check_path(self.path)
        try:
            return os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise UnsafePathError(f"{self.path} is not a directory of nslab's "
                                      f"(a link, or a file)") from None
            raise

    def _open(self, name: str, flags: int, perm: int = 0o600) -> int:
        """Open ``name`` in the directory, never following a link; a file other
        than a regular one with one link is refused."""
        dfd = self._open_dir()
        try:
            try:
                fd = os.open(_safe_name(name), flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                             perm, dir_fd=dfd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise UnsafePathError(f"{self.path}/{name} is a symbolic link; nslab runs as "
                                          f"root and does not follow links there") from None
                if exc.errno == errno.ENXIO:  # a FIFO with no reader, opened for writing
                    raise UnsafePathError(f"{self.path}/{name} is not a regular file") from None
                raise
        finally:
            os.close(dfd)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            os.close(fd)
            raise UnsafePathError(f"{self.path}/{name}: not a regular file of its own "
                                  f"(type {stat.filemode(st.st_mode)}, {st.st_nlink} links); "
                                  f"not touched")
        return fd

    # -- files -----------------------------------------------------------------------
    def write(self, name: str, data: str, perm: int = 0o640) -> str:
        """(Re)create ``name`` with ``data``: whatever had the name (a link
        included) is unlinked, never followed, then a new file is made with
        ``O_EXCL``, owned by root, group ``frr``. Returns its path."""
        dfd = self._open_dir()
        try:
            try:
                os.unlink(_safe_name(name), dir_fd=dfd)
            except FileNotFoundError:
                pass
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600, dir_fd=dfd)
        finally:
            os.close(dfd)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(data)
            f.flush()
            _, gid = frr_ids()
            if gid >= 0 and os.geteuid() == 0:
                os.fchown(f.fileno(), 0, gid)
            os.fchmod(f.fileno(), perm)
        return os.path.join(self.path, name)

    def open_output(self, name: str) -> IO[bytes]:
        """``name`` opened to append a daemon's output (created if missing);
        a link, a FIFO, a hard-linked or special file is refused."""
        fd = self._open(name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "ab")

    def read(self, name: str, limit: int = COPY_LIMIT) -> bytes:
        """Up to ``limit`` bytes of ``name`` (a regular file with one link)."""
        fd = self._open(name, os.O_RDONLY)
        try:
            chunks, left = [], limit
            while left > 0:
                b = os.read(fd, min(left, 1 << 20))
                if not b:
                    break
                chunks.append(b)
                left -= len(b)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def tail(self, name: str, lines: int = 5) -> str:
        """The last lines of ``name``, or ``""`` if it cannot be read safely."""
        try:
            data = self.read(name, 1 << 20)
        except (OSError, LabError):
            return ""
        return "\n".join(data.decode("utf-8", "replace").strip().splitlines()[-lines:])

    def names(self) -> List[str]:
        """The entries of the directory, sorted."""
        dfd = self._open_dir()
        try:
            return sorted(os.listdir(dfd))
        finally:
            os.close(dfd)

    def has_socket(self, name: str) -> bool:
        """True if ``name`` exists as a socket (not as a link to one)."""
        dfd = self._open_dir()
        try:
            st = os.stat(_safe_name(name), dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        finally:
            os.close(dfd)
        return stat.S_ISSOCK(st.st_mode)

    def copy_out(self, dest: str, suffixes: Iterable[str]) -> Tuple[List[str], List[str]]:
        """Copy each file whose name ends with one of ``suffixes`` into the
        directory ``dest`` (created, links refused; files written by
        :func:`nslab.safeio.write_atomic`). Returns ``(copied, skipped)``; a
        skipped file is logged with the reason."""
        suffixes = tuple(suffixes)
        copied: List[str] = []
        skipped: List[str] = []
        for name in self.names():
            if not name.endswith(suffixes) or name.startswith("."):
                continue
            try:
                data = self.read(name)
            except (OSError, LabError) as exc:
                log.warning("not copying %s/%s: %s", self.path, name, exc)
                skipped.append(name)
                continue
            if len(data) >= COPY_LIMIT:
                log.warning("%s/%s: copied its first %d bytes only", self.path, name, COPY_LIMIT)
            make_dirs(dest)
            write_atomic(os.path.join(dest, name), data)
            copied.append(name)
        return copied, skipped


def copy_frr_files(workdir: str, dest_root: str, suffixes: Iterable[str]) -> List[str]:
    """Copy every FRR node's configuration and daemon files (those ending with
    one of ``suffixes``) from a run's work dir into ``dest_root/<node>/``,
    never following a link. Returns the paths written."""
    suffixes = tuple(suffixes)
    out: List[str] = []
    # configuration comes from root's directory only: a "zebra.conf" the frr
    # user puts in its own directory is not taken for the real one
    for sub, wanted in (("frr-conf", tuple(s for s in suffixes if s == ".conf")),
                        ("frr", tuple(s for s in suffixes if s != ".conf"))):
        if not wanted:
            continue
        top = os.path.join(workdir, sub)
        try:
            nodes = NodeDir(top, "root").names()
        except FileNotFoundError:
            continue
        for node in nodes:
            src = NodeDir(os.path.join(top, node))
            try:
                src.names()
            except (OSError, LabError) as exc:  # not a directory of nslab's: left alone
                log.warning("not copying from %s: %s", src.path, exc)
                continue
            # a source file that is not safe to read is skipped; a destination
            # that is not safe to write (a link in the results) raises
            copied, _ = src.copy_out(os.path.join(dest_root, node), wanted)
            out += [os.path.join(dest_root, node, n) for n in copied]
    return out


def owned_process(pid: int, start_time: Optional[float], run_id: Optional[str]) -> Optional[str]:
    """Why ``pid`` is not the process nslab started (None if it is): its start
    time (from ``/proc/PID/stat``) must be the one recorded when nslab started
    it, and its environment must carry this run's ``NSLAB_RUN`` tag."""
    import psutil

    from nslab.runtime.proc import TAG_ENV, process_start_time, same_process
    started = process_start_time(pid)
    if started is None:
        return f"pid {pid} is not running"
    if start_time is None or not same_process(pid, start_time):
        return (f"pid {pid} started {started:.2f} s after boot, not when nslab started its "
                f"daemon ({start_time!r} recorded)")
    # A process that has just exec'd shows an empty environment for a moment:
    # the kernel closes the parent's exec pipe (so Popen returns) before it
    # lays out the new stack, so an empty reading is read again, up to 1 s.
    deadline = time.monotonic() + 1.0
    while True:
        try:
            env = psutil.Process(pid).environ()
        except (psutil.Error, OSError) as exc:
            return f"pid {pid}: its environment cannot be read ({exc})"
        if env or time.monotonic() >= deadline:
            break
        time.sleep(0.01)
    tag = env.get(TAG_ENV)
    if not run_id or tag != run_id:
        return f"pid {pid} carries {TAG_ENV}={tag!r}, not {run_id!r}"
    return None
