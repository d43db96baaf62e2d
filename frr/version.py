"""Which FRR this machine runs, and what that means for the lab.

FRR changed how a daemon gets its configuration between the releases the lab
meets (Debian 12 ships 8.4.4, Debian 13 ships 10.3):

* **8.4 and 9.x**: each daemon reads its own file (``zebra -f zebra.conf``);
  ``zebra.conf`` holds the interface configuration (router advertisements).
* **10.0 on**: zebra is a back end of the management daemon ``mgmtd``
  (FRR commit 3900813298, "zebra: convert to mgmtd", first in 10.0), which
  owns interface configuration. ``zebra -f`` refuses an ``interface`` block
  ("No such command on config line 9: interface spine1-eth0"). ``mgmtd``
  takes no ``-f`` and no ``-C`` (its ``FRR_NO_SPLIT_CONFIG`` flag): it reads
  ``<sysconfdir>/frr/{zebra,ripd,ripngd,staticd,mgmtd}.conf`` at start and
  pushes the result to each back end when it connects (again after a back end
  restarts). Its sockets (``mgmtd_fe.sock``, ``mgmtd_be.sock``) live in FRR's
  run-state directory, which no option moves, and it keeps a commit history in
  FRR's lib-state directory. See :mod:`frr.daemon` for how each node gets its
  own of all three.

The version and these paths come from ``zebra --version`` (its first line and
the ``configure`` arguments it prints), read once per process.
"""
from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from typing import Dict, List, Optional

from nslab.errors import LabError

FRR_DIR = "/usr/lib/frr"

_VERSION_RE = re.compile(r"\bversion\s+(\d+)\.(\d+)(?:\.(\d+))?([^\s]*)")


@dataclass(frozen=True)
class FrrVersion:
    """An FRR release and the directories compiled into it.

    Attributes:
        text: the version as FRR prints it (``8.4.4``, ``10.3``).
        major: major release number.
        minor: minor release number.
        sysconfdir: where daemons look for their configuration (``/etc/frr``).
        runstatedir: FRR's run-state directory (sockets, pid files: ``/run/frr``).
        libstatedir: FRR's lib-state directory (``/var/lib/frr``).
    """

    text: str
    major: int
    minor: int
    sysconfdir: str = "/etc/frr"
    runstatedir: str = "/var/run/frr"
    libstatedir: str = "/var/lib/frr"

    @property
    def mgmtd(self) -> bool:
        """True when ``mgmtd`` owns interface configuration (FRR 10.0 on)."""
        return self.major >= 10

    @property
    def bfdctl(self) -> bool:
        """True while bfdd has its control socket and ``--bfdctl`` (before 10.2:
        FRR commit 88a9aa9c6b, "bfdd: remove control socket obsolete code")."""
        return (self.major, self.minor) < (10, 2)

    @property
    def label(self) -> str:
        """``FRR 10.3 (mgmtd)`` or ``FRR 8.4.4 (per-daemon files)``, for logs and errors."""
        return f"FRR {self.text} ({'mgmtd' if self.mgmtd else 'per-daemon files'})"


def _configure_args(text: str) -> Dict[str, str]:
    """The ``--name=value`` arguments printed after ``configured with:`` (last wins)."""
    _, _, rest = text.partition("configured with:")
    try:
        words = shlex.split(rest)
    except ValueError:
        return {}
    out: Dict[str, str] = {}
    for w in words:
        if w.startswith("--") and "=" in w:
            k, v = w[2:].split("=", 1)
            out[k] = v
    return out


def _plain(path: Optional[str]) -> Optional[str]:
    """An absolute path without shell variables (``${prefix}/etc`` is not one)."""
    if not path or "$" in path or not path.startswith("/"):
        return None
    return os.path.normpath(path)


def parse_version(text: str) -> FrrVersion:
    """The :class:`FrrVersion` that ``zebra --version`` output describes.

    The directories follow FRR's ``configure.ac`` from 9.2 on (a trailing
    ``/frr`` or ``/run/frr`` given by a packager is stripped, then ``/frr``
    appended); where an argument is missing or not a plain path, the Debian
    defaults stand.

    Raises:
        LabError: no version in the text.
    """
    m = _VERSION_RE.search(text)
    if not m:
        first = text.strip().splitlines()[0] if text.strip() else "nothing"
        raise LabError(f"cannot read FRR's version from zebra --version (it printed {first!r})")
    major, minor, patch, suffix = m.groups()
    version = f"{major}.{minor}" + (f".{patch}" if patch else "") + suffix
    args = _configure_args(text)
    sysconf = _plain(args.get("sysconfdir"))
    if sysconf and sysconf.endswith("/frr"):
        sysconf = sysconf[:-len("/frr")] or "/"
    localstate = _plain(args.get("localstatedir"))
    for suffix_ in ("/run/frr", "/frr"):
        if localstate and localstate.endswith(suffix_):
            localstate = localstate[:-len(suffix_)] or "/"
            break
    runstate = _plain(args.get("runstatedir")) or (localstate and os.path.join(localstate, "run"))
    return FrrVersion(
        text=version, major=int(major), minor=int(minor),
        sysconfdir=os.path.join(sysconf, "frr") if sysconf else "/etc/frr",
        runstatedir=os.path.join(runstate, "frr") if runstate else "/var/run/frr",
        libstatedir=os.path.join(localstate, "lib", "frr") if localstate else "/var/lib/frr")


def version_argv(frr_dir: str = FRR_DIR) -> List[str]:
    return [os.path.join(frr_dir, "zebra"), "--version"]


@functools.lru_cache(maxsize=None)
def detect(frr_dir: str = FRR_DIR) -> FrrVersion:
    """This machine's FRR (``zebra --version``), asked once per process.

    Raises:
        LabError: zebra is missing or does not say its version.
    """
    argv = version_argv(frr_dir)
    try:
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LabError(f"cannot run {argv[0]} --version: {exc}") from None
    return parse_version(cp.stdout + cp.stderr)
