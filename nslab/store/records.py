"""Typed, versioned records: each study declares the model of its records, its
current schema version and how older versions are upgraded.

A stored record is one JSON line: ``schema_version``, ``experiment``,
``run_id``, ``kind``, ``time``, ``params``, ``measurements``, ``raw``. Loading
validates it against the study's model (pydantic), after upgrading it from
the version it was written with: a renamed or missing key fails at load time,
with the file and line, instead of leaving a blank cell in a report; a record
from a newer schema than this nslab knows is refused in one line.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import (Any, Callable, Dict, Generic, Iterator, List, Optional, Tuple, Type, TypeVar,
                    Union)

from pydantic import BaseModel, ConfigDict, ValidationError

from ..model import bounded
from ..errors import InputError
from ..model.topo import explain
from ..safeio import read_lines

RECORDS = "records.jsonl"
#: The most of a records file nslab reads. A run of nslab's stores a few KiB
#: per point (the longest line seen is 14 KiB, the largest test run's file
#: 72 KiB): 64 MiB is thousands of runs' worth, and bounds what a folder's
#: file can make a report or an export hold in memory.
MAX_FILE_BYTES = 64 * 1024 * 1024
#: The longest record line read (70 times the longest seen).
MAX_LINE_BYTES = 1024 * 1024


def json_lines(path: str) -> Iterator[Tuple[int, Any, bool]]:
    """``(line number, value, last)`` of each non-blank line of the records
    file ``path``, one at a time (never the whole file in memory): ``value``
    is the line's JSON, or the ``ValueError`` that parsing it raised
    (malformed, nested too deeply, not UTF-8) for the caller to judge;
    ``last``: no line follows (a torn last line is a run killed mid-write).

    The one reader of records files: nothing but a regular file is opened (a
    link, a FIFO or a device is refused before it is opened), a file over
    :data:`MAX_FILE_BYTES` or a line over :data:`MAX_LINE_BYTES` is refused
    in one line (:func:`nslab.safeio.read_lines`); a missing file has no lines.
    """
    prev: Optional[Tuple[int, Any]] = None
    try:
        for number, raw in read_lines(path, MAX_FILE_BYTES, MAX_LINE_BYTES):
            if not raw.strip():
                continue
            try:
                value: Any = bounded.loads(raw.decode("utf-8"))
            except ValueError as exc:  # BadJson, UnicodeDecodeError
                value = exc
            if prev is not None:
                yield prev[0], prev[1], False
            prev = (number, value)
    except FileNotFoundError:
        return
    if prev is not None:
        yield prev[0], prev[1], True

#: a point's parameters: a model, or a dict of sweep keys (a study written as a file)
P = TypeVar("P", bound=Union[BaseModel, Dict[str, Any]])
M = TypeVar("M", bound=BaseModel)


class Strict(BaseModel):
    """Record parts: unknown keys refused, values typed."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class HostLoad(Strict):
    """Host interference while a point was measured (:mod:`nslab.traffic.interference`):
    other tasks' share of each CPU (an upper bound each), ``worst_pct`` their
    share of all CPUs together, ``bed_wait_pct`` the lab's own threads' wait
    for a CPU (the smaller of the two is judged, with the hypervisor's
    steal added), and whether the point
    stayed over the study's threshold after its re-runs."""

    other_pct: Dict[str, float]
    worst_cpu: Optional[int]
    worst_pct: float
    #: the lab's own tasks' wait for a CPU, as a share of all CPUs (None:
    #: records from before it was measured, judged on ``worst_pct`` alone)
    bed_wait_pct: Optional[float] = None
    #: the time the hypervisor withheld from the CPUs (steal), as a share of
    #: all CPUs, added to the smaller of the two (None: not known, or records
    #: from before it was measured)
    steal_pct: Optional[float] = None
    source: str
    reruns: int = 0
    disturbed: bool = False
    threshold_pct: float
    #: the other tasks that ran most: [name, ms], largest first
    top: List[Tuple[str, float]] = []
    #: the lab's own threads that waited longest for a CPU: [name, ms]
    bed_waits: List[Tuple[str, float]] = []
    #: the kernel dropped exits of threads that ended inside the point (or one
    #: could not be read): neither bound holds them, so the point is disturbed
    exits_lost: bool = False
    #: disturbed, and not measured again: the host had stayed busy through the
    #: re-runs of the points before (:class:`nslab.run.study.BusyHost`)
    busy_for_good: bool = False
    #: the longest a thread at the lab's priority waited past its timer, in
    #: ms, by CPU (:mod:`nslab.traffic.lateness`; 0: under its floor; None:
    #: not watched, as in studies without timers, or a sampler ended)
    late_ms: Optional[Dict[str, float]] = None


class Record(Strict, Generic[P, M]):
    """One measured point."""

    schema_version: int
    experiment: str
    run_id: str
    kind: str = "point"
    time: float
    params: P
    measurements: M
    raw: List[str] = []
    #: host interference while it was measured (None: runs before it was recorded)
    host: Optional[HostLoad] = None


Upgrade = Callable[[Dict[str, Any]], Dict[str, Any]]


def disturbed(rec: Any) -> bool:
    """Was this point measured while other tasks took more of the CPUs than its
    study allows, and the lab's own threads waited for one more than that
    too, even after its re-runs (``host.disturbed``)? Reports leave such
    points out of their verdicts (but for outcomes a busy host moves one way
    only)."""
    host = getattr(rec, "host", None)
    return bool(host is not None and host.disturbed)


#: A disturbed point whose every CPU's timers were late by no more than this
#: (``host.late_ms``) measured timer-driven values as a quiet host would, to
#: within about one interval of the failover study's probe (5 ms at 200 a
#: second): what the host took from the lab, it took in pieces too short to
#: move a protocol timer by more (:func:`on_time`).
ON_TIME_MS = 10.0


def on_time(rec: Any, limit_ms: float = ON_TIME_MS) -> bool:
    """Were the lab's timers, on every CPU, late by no more than
    ``limit_ms`` while ``rec``'s point was measured (``host.late_ms``)? False
    when not watched."""
    late = getattr(getattr(rec, "host", None), "late_ms", None)
    return bool(late and max(late.values()) <= limit_ms)


@dataclass(frozen=True)
class RecordSchema:
    """A study's record model, its version, and upgrades ``{from_version: fn}``
    (each turns a record of that version into one of the next)."""

    model: Type[BaseModel]
    version: int
    upgrades: Dict[int, Upgrade] = field(default_factory=dict)

    def upgrade(self, rec: Dict[str, Any], where: str) -> Dict[str, Any]:
        v = int(rec.get("schema_version", 1))
        if v > self.version:
            raise InputError(f"{where}: schema version {v} is newer than this nslab understands "
                             f"({self.version}): upgrade nslab to read it")
        while v < self.version:
            if v not in self.upgrades:
                raise InputError(f"{where}: no upgrade from schema version {v}")
            rec = self.upgrades[v](dict(rec))
            v += 1
            rec["schema_version"] = v
        return rec

    def load(self, run_dir: str, kind: Optional[str] = "point") -> List[Any]:
        """Every record of ``run_dir`` (of ``kind``), typed, read through
        :func:`json_lines` (bounded, one line at a time). A torn last line (a
        crash while writing) is skipped; any other bad line is an error."""
        path = os.path.join(run_dir, RECORDS)
        out: List[Any] = []
        for i, raw, last in json_lines(path):
            if isinstance(raw, ValueError):
                if last:
                    continue  # torn last line: the run was killed mid-write
                deep = " (nested too deeply)" if "nested" in str(raw) else ""
                raise InputError(f"{path}:{i}: not a JSON record{deep}")
            if not isinstance(raw, dict):
                raise InputError(f"{path}:{i}: not a JSON record (a {type(raw).__name__})")
            if kind is not None and raw.get("kind", "point") != kind:
                continue
            raw = self.upgrade(raw, f"{path}:{i}")
            try:
                out.append(self.model.model_validate(raw))
            except ValidationError as exc:
                raise InputError(f"{path}:{i}: {explain(exc)}") from None
        return out
