"""The SSH control directories of labs across machines: made by the
controller (``$TMPDIR/nslab-<run>-XXXXXXXX``, private, with an owner record),
found and removed by ``nslab clean`` once the process that made it is gone.

A control directory holds the lab's SSH masters' sockets
(``ControlPath``): one left behind by a killed controller keeps a master
persisting. It is found by its name only (a run id in it), and only when it
is a private directory of this user's whose owner record names a process
that is gone, in this PID namespace; a master still in it is asked to exit
over its own socket before it goes.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import stat
import tempfile
import time
from typing import Dict, List, Optional, Tuple

from ..errors import LabError
from ..model import bounded
from ..model.naming import RUN_RE
from .proc import process_start_time, run

log = logging.getLogger(__name__)


#: The SSH control directory of a lab across machines (``tempfile.mkdtemp``'s
#: suffix: eight of ``[a-z0-9_]``); ``nslab capture``'s own (``-capture-``) is not one.
CONTROL_DIR_RE = re.compile(r"nslab-([a-z0-9]+)-[a-z0-9_]{8}")


#: A control directory whose owner record is not there yet, younger than this,
#: is a lab being started (between ``mkdtemp`` and the record's rename): left alone.
CONTROL_GRACE_S = 60.0


def _pid_ns() -> str:
    """This process's PID namespace (``pid:[4026531836]``): a pid in an owner
    record means something only there."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _private_dir(st: os.stat_result) -> bool:
    """A real directory of this user's that nobody else can write to."""
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077


def control_dirs(run_id: Optional[str] = None
                 ) -> Dict[str, List[Tuple[str, Optional[dict]]]]:
    """The SSH control directories of labs across machines left in the temporary
    directory, with the owner record of each (``{run: [(path, owner or None)]}``),
    of ``run_id`` or of every run: only private
    directories of this user's (not links, writable by nobody else) named by a
    run id, and not those of a lab being started (no owner record yet, younger
    than :data:`CONTROL_GRACE_S`) or of a controller in another PID namespace
    that shares this temporary directory (its pid cannot be checked here)."""
    found: Dict[str, List[Tuple[str, Optional[dict]]]] = {}
    top = tempfile.gettempdir()
    try:
        entries = sorted(os.listdir(top))
    except OSError:
        return found
    for entry in entries:
        m = CONTROL_DIR_RE.fullmatch(entry)
        if not m or not RUN_RE.fullmatch(m.group(1)) or run_id not in (None, m.group(1)):
            continue
        path = os.path.join(top, entry)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not _private_dir(st):
            continue
        owner = control_dir_owner(path)
        if owner is None and time.time() - st.st_mtime < CONTROL_GRACE_S:
            continue
        if owner is not None and owner.get("pid_ns") != _pid_ns():
            continue
        found.setdefault(m.group(1), []).append((path, owner))
    return found


#: The file in a control directory naming the process that made it (a record
#: like a journal's: run, pid, pid_start, and its PID namespace), so that a lab
#: still coming up (no controller record yet) keeps its directory.
CONTROL_OWNER = "owner.json"


def make_control_dir(run_id: str) -> str:
    """A new SSH control directory for lab ``run_id`` (mode 0700), with its owner
    recorded in it (:data:`CONTROL_OWNER`, complete or absent: written aside
    and renamed): ``nslab clean`` removes it once that process is gone."""
    me = os.getpid()
    record = {"run": run_id, "pid": me, "pid_start": process_start_time(me),
              "pid_ns": _pid_ns()}
    path = tempfile.mkdtemp(prefix=f"nslab-{run_id}-")  # mode 0700
    tmp = os.path.join(path, CONTROL_OWNER + ".tmp")
    with open(tmp, "x") as f:  # a new file in a new directory
        json.dump(record, f)
    os.replace(tmp, os.path.join(path, CONTROL_OWNER))
    return path


def control_dir_owner(path: str) -> Optional[dict]:
    """The owner record of control directory ``path`` (data; None if it is not a
    regular file or does not parse)."""
    owner = os.path.join(path, CONTROL_OWNER)
    try:
        if not stat.S_ISREG(os.lstat(owner).st_mode):
            return None
        data = bounded.load(owner, 4096)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def remove_control_dir(path: str) -> None:
    """Remove one control directory, checked again just before (a private
    directory of this user's, not a link put in its place). A master still
    persisting there (``ControlPersist``) is asked to exit over its own socket
    first; one that does not answer is logged, and the directory goes anyway."""
    if not _private_dir(os.lstat(path)):
        raise LabError(f"{path}: not a private directory of this user's; left alone")
    for entry in os.listdir(path):
        sock = os.path.join(path, entry)
        try:
            if not stat.S_ISSOCK(os.lstat(sock).st_mode) or not shutil.which("ssh"):
                continue
            # the host name only fills in a ControlPath's tokens; this one has none
            run(["ssh", "-o", "BatchMode=yes", "-o", f"ControlPath={sock}", "-O", "exit",
                 "nslab-control"], check=False, timeout=10)
        except (OSError, LabError) as exc:
            log.warning("ssh master at %s: %s; its directory goes anyway", sock, exc)
    shutil.rmtree(path)
