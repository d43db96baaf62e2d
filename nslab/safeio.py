"""Writing and reading files as root in a folder that may come from anyone,
and showing what came from it on a terminal.

A lab folder (topologies, study files, earlier results) can ship symbolic
links: ``results/alias/nl3f2a/report.md -> /etc/passwd``, FIFOs, device nodes
(a tarball unpacked by root keeps them), files of any size. nslab runs as
root, so every file it writes goes through this module:

* no component of the path may be a symbolic link (checked as the kernel
  walks it, ``..`` included), except a distribution's own: a root-owned link
  directly under ``/``, ``/var`` or ``/usr`` (``/var/run -> /run``);
* new files are created with ``O_CREAT | O_EXCL | O_NOFOLLOW``; a file that
  is rewritten (a report, a provenance) is written to a new temporary file
  beside it and renamed over it, which replaces a link instead of following
  it; appending refuses anything but a regular file with one link;
* a run directory is created with an exclusive ``mkdir``: an existing one
  (or a link of that name) is never reused for a new run.

and every file it reads from a folder too (:func:`open_regular`,
:func:`read_bytes`, :func:`read_lines`): opened without following a link
(``O_NOFOLLOW``), first as a bare reference (``O_PATH``: no FIFO is waited
on and no device's driver opens), checked to be a regular file (``fstat``),
then read with a size bound, line by line where the file is a list of
records. Text that came from a file, a file name or another process reaches
the terminal through :func:`printable` (control characters escaped).

The checks are made on the path as it is when nslab writes: they stop a
folder's pre-placed links, not another local user racing nslab in a folder
that user can write (see ``docs/security.md``).
"""
from __future__ import annotations

import os
import stat
import tempfile
from typing import IO, Callable, Iterator, List, Optional, Tuple, Union

from .errors import InputError


#: How deep nslab walks a directory it did not make (a run directory is 2 deep;
#: os.walk and os.fwalk recurse, so a deeper tree would end in RecursionError).
MAX_DEPTH = 32


class UnsafePathError(InputError):
    """A path nslab would write through is (or passes through) a link."""


def _trusted_link(path: str, st: os.stat_result) -> bool:
    """A link the distribution made (``/var/run -> /run``; on Fedora Silverblue
    ``/home -> var/home``, ``/usr/local -> ../var/usrlocal``): a top-level
    directory or one of ``/var`` or ``/usr``, owned by root in a directory only
    root writes. A folder cloned or unpacked by root ships root-owned links
    too, deeper down: those are refused like any other."""
    parent = os.path.dirname(path) or "/"
    if parent not in ("/", "/var", "/usr"):
        return False
    try:
        pst = os.lstat(parent)
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
    # Walk the components as the kernel will, ".." included: normalising the
    # text first would skip a link that a following ".." steps out of.
    raw = path if path.startswith("/") else os.path.join(os.getcwd(), path)
    parts = [p for p in raw.split("/") if p and p != "."]
    while parts and parts[-1] == "..":
        parts.pop()  # a trailing ".." names a directory above: checked below
    stack: List[str] = []
    missing = False
    for i, part in enumerate(parts):
        if part == "..":
            if stack:
                stack.pop()
            continue
        stack.append(part)
        if missing or (i == len(parts) - 1 and not leaf):
            continue
        cur = "/" + "/".join(stack)
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            missing = True  # created later, as real directories (make_dirs)
            continue
        except NotADirectoryError:
            raise UnsafePathError(f"{path}: {os.path.dirname(cur)} is not a directory") from None
        if stat.S_ISLNK(st.st_mode) and not _trusted_link(cur, st):
            raise UnsafePathError(
                f"{path}: {cur} is a symbolic link; nslab runs as root and does not "
                f"write through links (remove it, or write elsewhere)")
    return os.path.abspath(path)


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


def _kind(mode: int) -> str:
    """What a file of ``mode`` is, in words (for a refusal)."""
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return f"of type {stat.filemode(mode)[0]}"


def _reference(path: str, dir_fd: Optional[int]) -> Tuple[int, os.stat_result]:
    """A bare reference (``O_PATH | O_NOFOLLOW``) to ``path`` and its status:
    opening one waits on no FIFO and runs no device driver's ``open``, and a
    link is the link itself, never its target. ``FileNotFoundError`` passes."""
    fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        return fd, os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise


def _reopen(ref: int, st: os.stat_result, path: str, flags: int,
            dir_fd: Optional[int]) -> int:
    """The file ``ref`` refers to, opened with ``flags``: through
    ``/proc/self/fd`` (the very file checked, whatever its name holds by
    now); without ``/proc``, by name and checked to be the same file."""
    try:
        return os.open(f"/proc/self/fd/{ref}", flags | os.O_CLOEXEC)
    except FileNotFoundError:
        if os.path.isdir("/proc/self/fd"):
            raise
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    now = os.fstat(fd)
    if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
        os.close(fd)
        raise UnsafePathError(f"{path}: replaced while nslab opened it; not read")
    return fd


def open_regular(path: str, *, dir_fd: Optional[int] = None, one_link: bool = False) -> int:
    """A read-only descriptor of the regular file ``path``.

    Nothing but a regular file is ever opened: a link at ``path`` is not
    followed (``O_NOFOLLOW``), and a FIFO, a device node, a socket or a
    directory is refused before it is opened for reading (a bare ``O_PATH``
    reference is checked with ``fstat`` first, so no FIFO is waited on and no
    driver runs, ``/dev/watchdog`` included); the file is opened
    ``O_NONBLOCK``. With ``one_link``, a file with another hard link is
    refused too. Raises :class:`UnsafePathError` (one line naming ``path`` and
    what it is); ``FileNotFoundError`` and other ``OSError`` pass through.
    """
    ref, st = _reference(path, dir_fd)
    try:
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePathError(f"{printable(path)}: {_kind(st.st_mode)}, not a regular file: "
                                  "nslab reads regular files only")
        if one_link and st.st_nlink != 1:
            raise UnsafePathError(f"{printable(path)}: a file with {st.st_nlink} hard links: "
                                  "nslab reads only files of the folder's own")
        return _reopen(ref, st, path, os.O_RDONLY | os.O_NONBLOCK, dir_fd)
    finally:
        os.close(ref)


def _bytes(n: int) -> str:
    """``16 MiB``, ``4,096 bytes``: a size limit in words."""
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    return f"{n:,} bytes"


def read_bytes(path: str, limit: int, *, dir_fd: Optional[int] = None) -> bytes:
    """The whole of the regular file ``path`` (:func:`open_regular`), at most
    ``limit`` bytes: a larger file is refused (:class:`~nslab.errors.InputError`)
    by its size before anything is read, or once ``limit`` bytes were read
    (a file that grows, or one whose size the kernel does not say)."""
    fd = open_regular(path, dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as f:
        if os.fstat(fd).st_size > limit:
            raise InputError(f"{printable(path)}: larger than {_bytes(limit)}")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise InputError(f"{printable(path)}: larger than {_bytes(limit)}")
    return data


def read_lines(path: str, limit: int, line_limit: int) -> Iterator[Tuple[int, bytes]]:
    """``(number, line)`` of each line of the regular file ``path``
    (:func:`open_regular`), newline included, read one at a time: never the
    whole file at once. A file over ``limit`` bytes is refused before its
    first line (by its size) or when the lines read pass it; a line over
    ``line_limit`` bytes is refused naming its number, after reading no more
    than ``line_limit + 1`` bytes of it (:class:`~nslab.errors.InputError`)."""
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as f:
        if os.fstat(fd).st_size > limit:
            raise InputError(f"{printable(path)}: larger than {_bytes(limit)}")
        total = 0
        number = 0
        while True:
            line = f.readline(line_limit + 1)
            if not line:
                return
            number += 1
            total += len(line)
            if total > limit:
                raise InputError(f"{printable(path)}: larger than {_bytes(limit)}")
            if len(line) > line_limit and not line.endswith(b"\n"):
                raise InputError(f"{printable(path)}:{number}: a line longer than "
                                 f"{_bytes(line_limit)}; read no further")
            yield number, line


def open_new(path: str, mode: str = "w", *, encoding: Optional[str] = "utf-8",
             perm: int = 0o644, replace: bool = False) -> IO:
    """Open a file that must not exist yet (``O_EXCL | O_NOFOLLOW``).

    With ``replace``, whatever has that name already (an earlier file, a
    link) is removed first, never followed: for an output handed to a
    process as its stdout, which cannot be renamed into place."""
    check_path(path, leaf=False)
    if replace:
        try:
            if stat.S_ISDIR(os.lstat(path).st_mode):
                raise UnsafePathError(f"{path}: a directory is in the way")
            os.unlink(path)
        except FileNotFoundError:
            pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, perm)
    return os.fdopen(fd, mode, encoding=None if "b" in mode else encoding)


def open_append(path: str, *, encoding: str = "utf-8", perm: int = 0o644) -> IO:
    """Open a file to append to: created if missing; refused if it is a link,
    not a regular file (a FIFO, a device: checked before it is opened, so no
    driver runs), or has another hard link."""
    check_path(path, leaf=False)
    flags = os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK
    try:
        ref, st = _reference(path, None)
    except FileNotFoundError:
        try:  # a new file: no other can be opened in its place
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         perm)
        except FileExistsError:  # made meanwhile: opened as an existing one
            return open_append(path, encoding=encoding, perm=perm)
    else:
        try:
            if stat.S_ISLNK(st.st_mode):
                raise UnsafePathError(f"{printable(path)} is a symbolic link; nslab runs as root "
                                      "and does not write through links")
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                what = "a file" if stat.S_ISREG(st.st_mode) else _kind(st.st_mode)
                raise UnsafePathError(f"{printable(path)}: not a regular file of nslab's own "
                                      f"({what}, {st.st_nlink} links)")
            fd = _reopen(ref, st, path, flags, None)
        finally:
            os.close(ref)
    os.set_blocking(fd, True)
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


def _open_regular(name: str, dir_fd: Optional[int] = None) -> Optional[int]:
    """A read-only descriptor of ``name`` if it is a regular file with one
    link (:func:`open_regular`: a link, a FIFO or a device is never opened);
    ``None`` otherwise."""
    try:
        return open_regular(name, dir_fd=dir_fd, one_link=True)
    except (OSError, UnsafePathError):
        return None


def _read_fd(fd: int, most: Optional[int]) -> bytes:
    """Up to ``most`` bytes (all without ``most``) of ``fd``, which is closed."""
    with os.fdopen(fd, "rb") as f:
        return f.read(-1 if most is None else most)


def copy_file(src: str, dst: str, *, limit: Optional[int] = None, perm: int = 0o644) -> int:
    """Copy the regular file ``src`` to ``dst`` (through :func:`write_atomic`)
    without following a link on either side: a link in ``src``'s path, or a
    source that is not a regular file with one link, raises
    :class:`UnsafePathError`. Returns the number of bytes copied."""
    check_path(src)
    fd = _open_regular(src)
    if fd is None:
        raise UnsafePathError(f"{src}: not a regular file (a link, a device or a hard link); "
                              "not copied")
    data = _read_fd(fd, None if limit is None else limit + 1)
    if limit is not None and len(data) > limit:
        raise InputError(f"{src}: larger than {limit} bytes; not copied")
    write_atomic(dst, data, perm=perm)
    return len(data)


#: Bytes :func:`copy_tree` holds in memory at a time.
COPY_CHUNK = 1 << 20


def copy_tree(src: str, dst: str, *, limit: Optional[int] = None,
              leave: Optional[Callable[[str], bool]] = None) -> List[str]:
    """Copy the regular files and directories under ``src`` into the existing,
    empty directory ``dst`` (one nslab has just made with :func:`make_fresh_dir`).

    Nothing under ``src`` is followed: links, FIFOs, devices and files with
    more than one hard link are left out (``os.fwalk`` opens each directory
    with ``O_NOFOLLOW``; ``src`` itself may not be a link either, the
    directories above it are taken as given). More than ``limit``
    bytes in all raises :class:`InputError`. A file for whose path relative
    to ``src`` ``leave`` is true is left out unread, uncounted and unlisted.
    Returns what else was left out, relative to ``src``."""
    skipped: List[str] = []
    total = 0
    for top, dirs, files, dfd in os.fwalk(src, follow_symlinks=False):
        rel = os.path.relpath(top, src)
        out = dst if rel == "." else os.path.join(dst, rel)
        if rel.count("/") >= MAX_DEPTH:  # os.fwalk recurses: a deep tree is left out
            skipped.append(rel)
            dirs.clear()
            continue
        for d in list(dirs):
            if stat.S_ISDIR(os.stat(d, dir_fd=dfd, follow_symlinks=False).st_mode):
                os.mkdir(os.path.join(out, d), 0o755)
            else:  # a link to a directory
                skipped.append(os.path.normpath(os.path.join(rel, d)))
                dirs.remove(d)
        for name in files:
            if leave is not None and leave(os.path.normpath(os.path.join(rel, name))):
                continue
            fd = _open_regular(name, dfd)
            if fd is None:
                skipped.append(os.path.normpath(os.path.join(rel, name)))
                continue
            with os.fdopen(fd, "rb") as f_in, open_new(os.path.join(out, name), "wb") as f_out:
                # in chunks: memory stays at one chunk whatever the file's size
                while chunk := f_in.read(COPY_CHUNK):
                    total += len(chunk)
                    if limit is not None and total > limit:
                        raise InputError(f"{src}: more than {limit} bytes to copy; "
                                         "nothing more copied")
                    f_out.write(chunk)
    return skipped


def tree_is_safe(path: str) -> Optional[str]:
    """Whether nslab may write into the existing directory ``path``: ``None``
    if so, else why not (one line, :func:`printable`). Safe means: no link in
    the path or anywhere below it, nothing but directories and regular files
    (no FIFO, no device node), everything owned by the current user (root)
    and writable by nobody else."""
    why = _tree_is_safe(path)
    return None if why is None else printable(why)  # a file name with a line break


def _tree_is_safe(path: str) -> Optional[str]:
    try:
        check_path(path)
    except UnsafePathError as exc:
        return str(exc)
    me = os.geteuid()
    unread: List[OSError] = []  # a directory that cannot be listed cannot be proved safe
    for top, dirs, files in os.walk(path, followlinks=False, onerror=unread.append):
        if os.path.relpath(top, path).count("/") >= MAX_DEPTH:
            return f"{top}: nested deeper than {MAX_DEPTH} directories"
        for name in [top] + [os.path.join(top, n) for n in dirs + files]:
            try:
                st = os.lstat(name)
            except OSError as exc:
                return f"{name}: {exc.strerror}"
            if stat.S_ISLNK(st.st_mode):
                return f"{name} is a symbolic link"
            if not stat.S_ISDIR(st.st_mode) and not stat.S_ISREG(st.st_mode):
                return f"{name} is {_kind(st.st_mode)}, not a regular file"
            if st.st_uid != me:
                return f"{name} belongs to uid {st.st_uid}, not to uid {me}"
            if st.st_mode & 0o022:
                return f"{name} is writable by others ({stat.filemode(st.st_mode)})"
    if unread:
        return f"{unread[0].filename}: {unread[0].strerror}"
    return None


def printable(text: object, *, lines: bool = False) -> str:
    """``text`` as a terminal may show it: every character a terminal could
    act on is written as its escape (``\\x1b``, ``\\u202e``): control
    characters (C0, DEL, C1: colours, cursor moves, titles, a screen
    clear), format characters (bidirectional overrides, zero widths), line
    and paragraph separators and every other character Python does not call
    printable. With ``lines``, line breaks and tabs stay (a log record of
    several lines). The one helper for whatever came from a file, a file
    name, another process or a library's message on its way to the
    terminal: the terminal is an output like HTML."""
    s = str(text)
    if s.isprintable():
        return s
    out = []
    for ch in s:
        if ch.isprintable() or (lines and ch in "\n\t"):
            out.append(ch)
        else:
            o = ord(ch)
            out.append(f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000
                       else f"\\U{o:08x}")
    return "".join(out)
