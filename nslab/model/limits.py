"""Ceilings on what nslab builds and runs, checked before anything is built.

Files are data from anyone and nslab runs as root: a topology of 250,000
hosts, ``tree --depth 20 --fanout 20`` or a study sweep of 10^9 points must be
one line and a non-zero exit, not an out-of-memory killer choosing what dies.
Every size is counted from the input (a ready topology's parameters, a YAML
file's ``nodes`` and ``links``, the lengths of a sweep's axes) and compared
with a ceiling here *before* the topology, the lab or the list of points
exists. A ceiling is raised only on the command line (``--limit KEY=N``),
never by a file.

Keys, and where their default ceilings come from:

* ``namespaces`` (per lab): half of the machine's memory (``MemTotal``) at
  :data:`NAMESPACE_KIB` per namespace, and no more than the kernel's
  ``user.max_net_namespaces``. A bare network namespace costs about 300 KiB
  of kernel memory (netdev, 2016: "1000 namespaces requires about 300MB of
  RAM"); 512 KiB leaves room for a node's loopback, addresses, routes and
  neighbour table. That is about 1,950 on a 2 GiB guest (``single,1000`` needs
  1,001) and 24,105 on the 24 GiB machine the README's benchmarks ran on.
* ``nodes`` (per lab): the same figure; an OVS switch has no namespace but a
  bridge and ports in ovs-vswitchd.
* ``links`` (per lab): half of memory at :data:`LINK_KIB` per link. A link is
  a veth pair: two network devices, each with its per-device IPv4/IPv6
  sysctl tables, IPv6 state and a queue discipline (the clos of 16 x 64
  has 1,024 links; about 3,900 fit on a 2 GiB guest).
* ``labs`` (per run): :data:`MAX_LABS`. A study holds the model of every lab
  it will build (about 3 KiB per node, measured on ``single,5000``), so 64
  labs at the node ceiling hold at most 3/8 of the memory budget of one lab.
* ``points`` and ``trials`` (per run): an eighth of memory at
  :data:`TRIAL_KIB` per trial. A report holds every trial's typed record:
  6.7 KiB for an 8 s trial with per-second series (measured on
  ``tests/data/failover_run``); 64 KiB leaves room for long series and the
  point and analysis rows. A point is at least one trial, so both share the
  figure; the studies nslab ships plan at most 84 trials at ``full``.
* ``duration`` (per run, seconds): :data:`MAX_DURATION_S`, one day. Not a
  property of the machine: a run planned longer than that should be asked
  for on purpose.
* ``capture`` (bytes of one packet capture) and ``captures`` (bytes of all
  the captures of a run): :data:`CAPTURE_BYTES` and :data:`CAPTURES_BYTES`.
  They bound disk, not memory: a study file's ``captures:`` are counted as
  packets x (snap length + pcapng's per-packet bytes) per capture, times the
  trials it captures, before anything runs; dumpcap stops each file at its
  count and size.

The CPU count bounds none of these: more CPUs make a lab faster, not smaller.

Commands that build or plan take ``--limit KEY=N`` (repeatable; ``duration``
also takes ``90m``, ``36h`` or ``2d``); the active limits are a context
variable (:func:`active`, :func:`use`), so the ready topologies, the YAML
loader and the study planner check the same ones without taking a parameter
that would show as a topology option.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, Iterable, Iterator, Mapping, Optional, Sequence, Tuple

from ..errors import InputError

__all__ = ["KEYS", "Limits", "LimitError", "active", "use", "activate", "machine",
           "parse_limit", "product", "topology_size", "check_plan"]

#: What may be limited, in the order the plan shows them.
KEYS: Tuple[str, ...] = ("nodes", "links", "namespaces", "labs", "points", "trials",
                         "duration", "capture", "captures")
#: Estimated memory per namespace of a lab, KiB (see the module docstring).
NAMESPACE_KIB = 512
#: Estimated memory per link (a veth pair) of a lab, KiB.
LINK_KIB = 256
#: Estimated memory per planned trial, KiB.
TRIAL_KIB = 64
#: The share of memory one lab may take.
LAB_SHARE = 0.5
#: The share of memory a run's plan (its points and records) may take.
PLAN_SHARE = 0.125
#: Labs one run may build (one per combination of swept topology options).
MAX_LABS = 64
#: One day.
MAX_DURATION_S = 86400.0
#: Bytes one packet capture may take (a study file's ``snaplen`` x ``max_packets``).
CAPTURE_BYTES = 256 * 1024 ** 2
#: Bytes all the packet captures of one run may take.
CAPTURES_BYTES = 2 * 1024 ** 3
#: Keys counted in bytes.
BYTE_KEYS = ("capture", "captures")
#: Used when the machine's memory cannot be read.
FALLBACK_MEM_KIB = 2 * 1024 * 1024

_WHAT = {"nodes": "nodes", "links": "links", "namespaces": "namespaces", "labs": "labs",
         "points": "sweep points", "trials": "trials", "duration": "planned",
         "capture": "in one capture", "captures": "of captures"}


class LimitError(InputError):
    """Something is larger than a ceiling allows (the message says which and how
    to raise it)."""


@dataclass(frozen=True)
class Limits:
    """Ceilings, and where each came from.

    Attributes:
        nodes, links, namespaces: per lab.
        labs, points, trials: per run of a study.
        duration: seconds a run of a study is planned to take.
        capture, captures: bytes of one packet capture, and of all the
            captures of a run.
        why: for each key, a short reason (``from 23.5 GiB of memory``, or
            ``--limit`` when given on the command line).
    """

    nodes: int
    links: int
    namespaces: int
    labs: int
    points: int
    trials: int
    duration: float
    capture: int = CAPTURE_BYTES
    captures: int = CAPTURES_BYTES
    why: Mapping[str, str] = dataclasses.field(default_factory=dict, compare=False)

    def get(self, key: str) -> float:
        return getattr(self, key)

    def raised(self) -> FrozenSet[str]:
        """The keys given on the command line."""
        return frozenset(k for k, v in self.why.items() if v == "--limit")

    def with_values(self, values: Mapping[str, float]) -> "Limits":
        """These limits with ``values`` (from the command line) instead."""
        why = dict(self.why)
        why.update({k: "--limit" for k in values})
        changes: Dict[str, Any] = {k: (float(v) if k == "duration" else int(v))
                                   for k, v in values.items()}
        return dataclasses.replace(self, **changes, why=why)

    def check(self, key: str, value: float, where: str = "", detail: str = "") -> None:
        """Raise :class:`LimitError` if ``value`` is over the ceiling of ``key``.

        ``where`` starts the message (``FILE:LINE: field``); ``detail`` says
        how the value was counted (``vars.a 1000 x vars.b 1000``)."""
        ceiling = self.get(key)
        if value <= ceiling:
            return
        said = f"{fmt(key, value)} {_WHAT[key]}" + (f" ({detail})" if detail else "")
        raise LimitError(f"{where + ': ' if where else ''}{said}, over the limit of "
                         f"{fmt(key, ceiling)} ({self.why.get(key, 'default')}); "
                         f"raise it with --limit {key}=N")

    def check_topology(self, nodes: int, links: int, namespaces: int, where: str = "") -> None:
        """A lab's size, counted before it is built."""
        self.check("nodes", nodes, where)
        self.check("namespaces", namespaces, where)
        self.check("links", links, where)

    def describe(self, keys: Sequence[str] = KEYS) -> str:
        """``nodes 24,104, links 48,208, ...`` for a plan."""
        return ", ".join(f"{k} {fmt(k, self.get(k))}" + (" (--limit)" if k in self.raised()
                                                          else "") for k in keys)


def fmt(key: str, value: float) -> str:
    """A value of ``key`` for a message: ``1,000,000``, ``2.5 h`` for a
    duration, ``1.5 GiB`` for bytes."""
    if key in BYTE_KEYS:
        for unit, size in (("GiB", 1024 ** 3), ("MiB", 1024 ** 2), ("KiB", 1024)):
            if value >= size:
                return f"{value / size:,.1f} {unit}"
        return f"{int(value):,} B"
    if key == "duration":
        if value >= 3600:
            return f"{value / 3600:,.1f} h"
        if value >= 120:
            return f"{value / 60:,.1f} min"
        return f"{value:,.0f} s"
    return f"{int(value):,}"


# -- the machine -------------------------------------------------------------------------
def mem_total_kib() -> int:
    """``MemTotal`` in KiB (a fixed 2 GiB when it cannot be read)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return FALLBACK_MEM_KIB


def max_net_namespaces() -> Optional[int]:
    """The kernel's ``user.max_net_namespaces`` (None if unreadable)."""
    try:
        with open("/proc/sys/user/max_net_namespaces") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def derive(mem_kib: int, netns_max: Optional[int] = None) -> Limits:
    """The default ceilings for a machine with ``mem_kib`` of memory (see the
    module docstring for each figure)."""
    gib = f"{mem_kib / 1024 / 1024:.1f} GiB of memory"
    lab = mem_kib * LAB_SHARE
    per_ns = max(1, int(lab // NAMESPACE_KIB))
    namespaces, ns_why = per_ns, f"from {gib}"
    if netns_max is not None and 0 < netns_max < per_ns:
        namespaces, ns_why = netns_max, "the kernel's user.max_net_namespaces"
    trials = max(1, int(mem_kib * PLAN_SHARE // TRIAL_KIB))
    return Limits(nodes=per_ns, links=max(1, int(lab // LINK_KIB)), namespaces=namespaces,
                  labs=MAX_LABS, points=trials, trials=trials, duration=MAX_DURATION_S,
                  capture=CAPTURE_BYTES, captures=CAPTURES_BYTES,
                  why={"nodes": f"from {gib}", "links": f"from {gib}", "namespaces": ns_why,
                       "labs": "default", "points": f"from {gib}", "trials": f"from {gib}",
                       "duration": "default: a day", "capture": "default",
                       "captures": "default"})


def machine() -> Limits:
    """The default ceilings of this machine."""
    return derive(mem_total_kib(), max_net_namespaces())


# -- the active limits --------------------------------------------------------------------
_ACTIVE: contextvars.ContextVar[Optional[Limits]] = contextvars.ContextVar("nslab_limits",
                                                                          default=None)


def active() -> Limits:
    """The limits in force: those set by :func:`use`/:func:`activate`, else the machine's."""
    found = _ACTIVE.get()
    return found if found is not None else machine()


@contextlib.contextmanager
def use(limits: Limits) -> Iterator[Limits]:
    """Make ``limits`` the active ones inside the ``with`` block."""
    token = _ACTIVE.set(limits)
    try:
        yield limits
    finally:
        _ACTIVE.reset(token)


def activate(items: Iterable[str]) -> Limits:
    """The machine's limits with ``KEY=N`` items (``--limit``) on top, made the
    active ones for the rest of this command (the CLI's option callback)."""
    values: Dict[str, float] = {}
    for item in items:
        key, value = parse_limit(item)
        values[key] = value
    limits = machine().with_values(values)
    _ACTIVE.set(limits)
    return limits


_DURATION_RE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*(s|m|min|h|d)?$")
_UNIT_S = {None: 1, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
_SIZE_RE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*([kmgt]?)(?:i?b)?$")


def parse_limit(item: str) -> Tuple[str, float]:
    """``"nodes=5000"`` -> ``("nodes", 5000)``; one line naming the option on error."""
    key, sep, text = item.partition("=")
    key = key.strip().lower()
    text = text.strip().replace("_", "").replace(",", "")
    if not sep or key not in KEYS:
        raise InputError(f"--limit {item!r}: use KEY=N with KEY one of {', '.join(KEYS)}")
    if key == "duration":
        m = _DURATION_RE.fullmatch(text)
        value = float(m.group(1)) * _UNIT_S[m.group(2)] if m else math.nan
        if not m or not 0 < value <= 10 * 365 * 86400:
            raise InputError(f"--limit {item!r}: a duration in seconds (or 90m, 36h, 2d), "
                             "at most ten years")
        return key, value
    if key in BYTE_KEYS:
        return key, parse_bytes(text, f"--limit {item!r}")
    if not text.isdigit() or not 0 < int(text) <= 10**9:
        raise InputError(f"--limit {item!r}: a whole number from 1 to 1,000,000,000")
    return key, int(text)


def parse_bytes(text: str, what: str) -> int:
    """A size in bytes from ``text``: a number of bytes, or of KiB, MiB, GiB
    or TiB (``500M``, ``2G``, ``1.5GiB``; binary units, as :func:`fmt`
    shows them), from 1 byte to 1 PiB; one line naming ``what`` otherwise."""
    m = _SIZE_RE.fullmatch(text.strip().replace("_", "").replace(",", "").lower())
    value = float(m.group(1)) * 1024 ** " kmgt".index(m.group(2) or " ") if m else math.nan
    if not m or not 1 <= value <= 1024 ** 5:
        raise InputError(f"{what}: a size in bytes (or 500M, 2G, 1T), at most 1 PiB")
    return int(value)


# -- counting without building ------------------------------------------------------------
def product(lengths: Iterable[int], cap: int = 10**18) -> int:
    """The product of ``lengths``, stopped at ``cap`` + 1 once it is past ``cap``
    (a count of combinations that is never expanded)."""
    out = 1
    for n in lengths:
        out *= max(0, int(n))
        if out > cap:
            return cap + 1
    return out


def check_plan(labs: int, trials: Sequence[Mapping[str, object]], where: str) -> None:
    """A study's listed plan (``study.points(cfg)``: one dict per trial, with its
    ``repeat``) and its labs against the active limits, before any lab is built."""
    lim = active()
    points = {tuple(sorted((k, repr(v)) for k, v in t.items() if k != "repeat"))
              for t in trials}
    lim.check("labs", labs, where)
    lim.check("points", len(points), where)
    lim.check("trials", len(trials), where)


def topology_size(nodes: int, links: int, namespaces: int, where: str = "") -> None:
    """Check a lab's size, counted before it is built, against the active limits."""
    active().check_topology(nodes, links, namespaces, where)
