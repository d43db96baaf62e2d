"""Run ids and the names the lab gives to the objects it creates.

A run id is ``nl`` + 4 hex digits (``nl3f2a``). Every object carries it:
namespaces ``<run>-<node>``, root-namespace interfaces ``<run>-p<N>`` (with
``ifalias nslab:<run>:<node>:<intf>``), OVS bridges ``<run>-b<N>`` (with
``external_ids:nslab-run=<run>``), processes ``NSLAB_RUN=<run>``.
"""
from __future__ import annotations

import os
import re
import secrets
import stat
from typing import Optional
from ..errors import InputError

RUN_RE = re.compile(r"^nl[0-9a-f]{4}$")
NS_RE = re.compile(r"^(nl[0-9a-f]{4})-([A-Za-z0-9_]+)$")
ALIAS_PREFIX = "nslab:"
#: Where root's run journals live (``nslab clean`` reads them, and runs the
#: restore commands they hold): ``/run/nslab``, or ``NSLAB_STATE_DIR`` if that
#: passes :func:`state_dir_problem` (see :func:`check_state_dir`).
STATE_ENV = "NSLAB_STATE_DIR"
DEFAULT_STATE_DIR = "/run/nslab"
STATE_DIR = os.environ.get(STATE_ENV, DEFAULT_STATE_DIR)


def state_dir_problem(path: str, euid: Optional[int] = None) -> Optional[str]:
    """Why ``path`` may not be the state directory, or None if it may.

    It must be absolute, with no ``..``; it and every directory above it must
    be a real directory (not a symbolic link) owned by root (or by the
    effective user, ``euid``) and writable by nobody else. A directory above
    it may be root's sticky one (``/tmp``: others cannot rename or remove
    what is not theirs). Parts that do not exist yet are fine: nslab creates
    them, as root's own."""
    if not os.path.isabs(path) or ".." in path.split("/"):
        return "not an absolute path without '..'"
    me = os.geteuid() if euid is None else euid
    parts = [p for p in path.split("/") if p and p != "."]
    comps = ["/"] + ["/" + "/".join(parts[:i + 1]) for i in range(len(parts))]
    for i, comp in enumerate(comps):
        try:
            st = os.lstat(comp)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return f"{comp}: {exc.strerror}"
        if stat.S_ISLNK(st.st_mode):
            return f"{comp} is a symbolic link"
        if not stat.S_ISDIR(st.st_mode):
            return f"{comp} is not a directory"
        if st.st_uid not in (0, me):
            return f"{comp} belongs to uid {st.st_uid}, not to root"
        sticky_root_parent = (i < len(comps) - 1 and st.st_uid == 0
                              and st.st_mode & stat.S_ISVTX)
        if st.st_mode & 0o022 and not sticky_root_parent:
            return f"{comp} is writable by group or others ({stat.filemode(st.st_mode)})"
    return None


def check_state_dir(path: Optional[str] = None) -> str:
    """The state directory (``path``, default :data:`STATE_DIR`); raise a
    one-line ``InputError`` if it is not safe to keep root's journals in."""
    path = STATE_DIR if path is None else path
    why = state_dir_problem(path)
    if why is not None:
        src = f"{STATE_ENV}={path}" if os.environ.get(STATE_ENV) == path else path
        raise InputError(f"{src}: {why}; the state directory holds root's run journals "
                         "(what `nslab clean` removes and restores), so it must be root's own "
                         "directory, not a link, writable by nobody else")
    return path


def new_run_id() -> str:
    """A fresh run id not used by a namespace or journal on this machine."""
    existing = set()
    try:
        existing = {n.split("-", 1)[0] for n in os.listdir("/run/netns")}
    except OSError:
        pass
    try:
        existing |= {n.split(".", 1)[0] for n in os.listdir(STATE_DIR)}
    except OSError:
        pass
    while True:
        rid = "nl" + secrets.token_hex(2)
        if rid not in existing:
            return rid


def check_run_id(run_id: str) -> str:
    if not RUN_RE.fullmatch(run_id):
        raise InputError(f"bad run id {run_id!r}: run ids look like nl3f2a")
    return run_id


def ns_name(run_id: str, node: str) -> str:
    return f"{run_id}-{node}"


def root_intf(run_id: str, index: int) -> str:
    return f"{run_id}-p{index}"


def ovs_bridge(run_id: str, index: int) -> str:
    return f"{run_id}-b{index}"
