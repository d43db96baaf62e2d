"""Small JSON state files that survive a kill at any moment.

A file is written to ``<path>.tmp`` and renamed over ``<path>``. A process
killed between the two leaves a ``.tmp``: when it holds complete JSON it is the
newer state and wins; a truncated one (killed during the write) is ignored.
Used for the run journals and the OVS start mark under ``/run/nslab``.
"""
from __future__ import annotations

import json
import os
from typing import Optional


def tmp_path(path: str) -> str:
    """Where :func:`write` puts the new state before the rename."""
    return path + ".tmp"


def write(path: str, data: dict) -> None:
    """Write ``data`` atomically (write ``.tmp``, fsync, rename)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = tmp_path(path)
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read(path: str) -> Optional[dict]:
    """The newest complete state (a complete ``.tmp`` first), or None."""
    for candidate in (tmp_path(path), path):
        try:
            with open(candidate) as f:
                data = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            return data
    return None


def remove(path: str) -> None:
    """Remove the state and any half-renamed copy of it."""
    for candidate in (tmp_path(path), path):
        try:
            os.unlink(candidate)
        except FileNotFoundError:
            pass
