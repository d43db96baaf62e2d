"""Small JSON state files that survive a kill at any moment.

A file is written to ``<path>.tmp`` and renamed over ``<path>``. A process
killed between the two leaves a ``.tmp``: when it holds complete JSON it is the
newer state and wins; a truncated one (killed during the write) is ignored.
Used for the run journals and the OVS start mark under ``/run/nslab`` (or
``NSLAB_STATE_DIR``): each call first checks that the directory is root's own
(:func:`nslab.model.naming.check_state_dir`), and a file is read with bounded size
and depth (:mod:`nslab.model.bounded`).
"""
from __future__ import annotations

import json
import os
from typing import Optional

from ..model import bounded
from ..model.naming import check_state_dir

#: A state file is a few KiB; anything larger is not one of ours.
MAX_BYTES = 4 * 1024 * 1024


def tmp_path(path: str) -> str:
    """Where :func:`write` puts the new state before the rename."""
    return path + ".tmp"


def _check_dir(path: str) -> None:
    """The state directory holding ``path`` must be root's own (a file there
    can tell root what to stop and restore): one line if it is not."""
    check_state_dir(os.path.dirname(os.path.abspath(path)))


def write(path: str, data: dict) -> None:
    """Write ``data`` atomically (write ``.tmp``, fsync, rename)."""
    _check_dir(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = tmp_path(path)
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read(path: str) -> Optional[dict]:
    """The newest complete state (a complete ``.tmp`` first), or None."""
    _check_dir(path)
    for candidate in (tmp_path(path), path):
        try:
            data = bounded.load(candidate, MAX_BYTES)  # bounded size and depth
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            return data
    return None


def remove(path: str) -> None:
    """Remove the state and any half-renamed copy of it."""
    _check_dir(path)
    for candidate in (tmp_path(path), path):
        try:
            os.unlink(candidate)
        except FileNotFoundError:
            pass
