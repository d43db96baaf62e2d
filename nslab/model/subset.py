"""A subset match of JSON values with a readable difference: the part of a
show command's output a check expects, as FRR's topotests match with
``json_cmp`` (munet's ``match_step_json``), and what differs when it does not.

``expected`` matches ``seen`` when:

* a mapping: every key of ``expected`` is in ``seen`` with a matching value
  (other keys of ``seen`` are ignored); a key whose expected value is
  ``None`` (YAML ``null``) must be absent;
* a list: each item of ``expected`` matches a different item of ``seen``, in
  any order (found by augmenting paths, so an earlier item never takes the
  only match of a later one); ``seen`` may have more items;
* a scalar: an equal scalar of the same kind: ``true`` is not ``1``, ``"1"``
  is not ``1``; an integer and a float compare by value (``2`` is ``2.0``).

:func:`differences` says where and how they differ, one
:class:`Difference` per place (``peers.eth0.state: expected "Established",
saw "Active"``), at most ``most`` of them. Pure: no I/O, no root.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

__all__ = ["Difference", "matches", "differences", "path_text", "show", "MISSING", "ABSENT"]

Key = Union[str, int]

#: ``Difference.seen`` of a key or item that is not there.
MISSING = "missing"
#: ``Difference.expected`` of a key that must not be there.
ABSENT = "absent"
#: The longest value a difference shows (then ``...``).
SHOWN = 80
#: A key written bare in a path; any other is quoted (``peers["10.0.0.1"]``).
_BARE_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


@dataclass(frozen=True)
class Difference:
    """One place where ``seen`` does not match ``expected``.

    Attributes:
        path: where, as ``a.b[2].c`` (empty: the whole value).
        expected: what was expected there, shown (:func:`show`), or :data:`ABSENT`.
        seen: what is there, shown, or :data:`MISSING`.
    """

    path: str
    expected: str
    seen: str

    def __str__(self) -> str:
        where = f"{self.path}: " if self.path else ""
        if self.seen == MISSING:
            return f"{where}missing (expected {self.expected})"
        if self.expected == ABSENT:
            return f"{where}expected absent, saw {self.seen}"
        return f"{where}expected {self.expected}, saw {self.seen}"


def show(value: Any, most: int = SHOWN) -> str:
    """``value`` as compact JSON, cut to ``most`` characters."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "), sort_keys=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= most else text[:most - 3] + "..."


def path_text(parts: Sequence[Key]) -> str:
    """``("peers", "eth0", "state")`` -> ``peers.eth0.state``; an index is
    ``[2]``; a key that is not a plain name is quoted (``peers["10.0.0.1"]``)."""
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif _BARE_KEY.fullmatch(p):
            out += ("." if out else "") + p
        else:
            out += f"[{json.dumps(p, ensure_ascii=False)}]"
    return out


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if value is None:
        return "null"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "mapping"
    if isinstance(value, list):
        return "list"
    return type(value).__name__


def matches(expected: Any, seen: Any) -> bool:
    """Does ``seen`` hold ``expected`` (the module's rules)?"""
    return _match(expected, seen)


def _match(expected: Any, seen: Any) -> bool:
    if isinstance(expected, dict):
        if not isinstance(seen, dict):
            return False
        for key, want in expected.items():
            if want is None:
                if key in seen:
                    return False
            elif key not in seen or not _match(want, seen[key]):
                return False
        return True
    if isinstance(expected, list):
        if not isinstance(seen, list):
            return False
        return len(_pairing(expected, seen)) == len(expected)
    if _kind(expected) != _kind(seen):
        return False
    return bool(expected == seen)


def _pairing(expected: List[Any], seen: List[Any]) -> Dict[int, int]:
    """A largest pairing of items of ``expected`` with items of ``seen`` that
    they match (``{expected index: seen index}``), by augmenting paths
    (Kuhn's algorithm): each expected item takes a different seen item."""
    fits: Dict[int, List[int]] = {}
    taken: Dict[int, int] = {}  # seen index -> expected index

    def candidates(i: int) -> List[int]:
        if i not in fits:
            fits[i] = [j for j, s in enumerate(seen) if _match(expected[i], s)]
        return fits[i]

    def place(i: int, visited: set) -> bool:
        for j in candidates(i):
            if j in visited:
                continue
            visited.add(j)
            if j not in taken or place(taken[j], visited):
                taken[j] = i
                return True
        return False

    for i in range(len(expected)):
        place(i, set())
    return {i: j for j, i in taken.items()}


def differences(expected: Any, seen: Any, most: int = 20) -> List[Difference]:
    """Where ``seen`` does not hold ``expected``: empty when it does
    (:func:`matches`), else at most ``most`` differences, in the order of
    ``expected``."""
    out: List[Difference] = []
    _diff(expected, seen, (), out, most)
    return out


def _diff(expected: Any, seen: Any, at: Tuple[Key, ...], out: List[Difference],
          most: int) -> None:
    if len(out) >= most:
        return
    here = path_text(at)
    if isinstance(expected, dict) and isinstance(seen, dict):
        for key, want in expected.items():
            if len(out) >= most:
                return
            where = at + (str(key),)
            if want is None:
                if key in seen:
                    out.append(Difference(path_text(where), ABSENT, show(seen[key])))
            elif key not in seen:
                out.append(Difference(path_text(where), show(want), MISSING))
            else:
                _diff(want, seen[key], where, out, most)
        return
    if isinstance(expected, list) and isinstance(seen, list):
        paired = _pairing(expected, seen)
        free = [j for j in range(len(seen)) if j not in set(paired.values())]
        for i, want in enumerate(expected):
            if i in paired or len(out) >= most:
                continue
            near = _closest(want, seen, free)
            if near is None:
                out.append(Difference(path_text(at + (i,)), show(want), MISSING))
                continue
            free.remove(near)
            _diff(want, seen[near], at + (near,), out, most)
        return
    if not _match(expected, seen):
        out.append(Difference(here, show(expected), show(seen)))


def _closest(want: Any, seen: List[Any], free: List[int]) -> Optional[int]:
    """The free item of ``seen`` with the fewest differences from ``want``;
    on a tie, the one that matches more of ``want``'s first keys (a list's
    items are usually named by the key written first: ``interface``,
    ``peer``), then the first. None if there is none, or when ``want`` is a
    scalar (no item is "close" to a missing value)."""
    if not free or not isinstance(want, (dict, list)):
        return None
    best: Optional[Tuple[int, int, int]] = None
    for j in free:
        if _kind(seen[j]) != _kind(want):
            continue
        n = len(differences(want, seen[j], most=50))
        lead = 0
        if isinstance(want, dict):
            for key, value in want.items():
                if value is None or key not in seen[j] or not _match(value, seen[j][key]):
                    break
                lead += 1
        if best is None or (n, -lead) < best[:2]:
            best = (n, -lead, j)
    return None if best is None else best[2]
