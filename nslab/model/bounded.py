"""JSON from files anyone may have written (stored results, provenance, the
topology a lab left beside its journal), read with bounds.

``json.loads`` of 100,000 nested ``[`` raises ``RecursionError``, which no
``except ValueError`` catches, and a structure a little less deep can still
exhaust the recursion of whatever walks it next (pydantic, a report). Here a
document may nest at most :data:`MAX_DEPTH` deep, and a file is read up to a
size given by its caller, if it is a regular file (never through a link,
never a FIFO or a device: :func:`nslab.safeio.read_bytes`); any failure is
a :class:`BadJson`, a ``ValueError``, so the handlers that already skip a
torn record or an unreadable provenance treat it the same way. YAML has its
own bounded loader (:mod:`nslab.model.topo_yaml`).
"""
from __future__ import annotations

import json
from typing import Any, List, Tuple

from ..errors import InputError
from ..safeio import read_bytes

#: How deep a JSON document may nest (nslab's own records nest about 5 deep).
MAX_DEPTH = 64
#: The largest JSON file read by default (a provenance is a few KiB).
MAX_FILE_BYTES = 16 * 1024 * 1024


class BadJson(ValueError):
    """JSON that is malformed, nested too deeply or too large."""


def depth(value: Any, most: int = MAX_DEPTH) -> int:
    """How deep ``value`` nests (a scalar is 0), without recursion; stops
    counting past ``most``."""
    deepest = 0
    stack: List[Tuple[Any, int]] = [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            d += 1
            if d > most:
                return d
            deepest = max(deepest, d)
            stack.extend((c, d) for c in (v.values() if isinstance(v, dict) else v))
    return deepest


def loads(text: str) -> Any:
    """``json.loads`` that raises :class:`BadJson` (never ``RecursionError``) and
    refuses a document nested more than :data:`MAX_DEPTH` deep."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise BadJson(f"nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as exc:
        raise BadJson(str(exc)) from None
    if depth(value) > MAX_DEPTH:
        raise BadJson(f"nested more than {MAX_DEPTH} levels deep")
    return value


def load(path: str, max_bytes: int = MAX_FILE_BYTES) -> Any:
    """The JSON document in ``path`` (at most ``max_bytes``); :class:`BadJson` if
    it is malformed, too deep or too large, or not a regular file (a link, a
    FIFO, a device: :func:`nslab.safeio.read_bytes` opens none of them),
    ``OSError`` if it cannot be read."""
    try:
        raw = read_bytes(path, max_bytes)
    except InputError as exc:  # too large, or not a regular file
        raise BadJson(str(exc)) from None
    try:
        return loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise BadJson(f"{path}: not UTF-8 text") from None


__all__ = ["BadJson", "MAX_DEPTH", "MAX_FILE_BYTES", "depth", "load", "loads"]
