"""The labs running on this machine, as ``nslab topo ps`` lists them and as
every command that asks the user to pick a lab names them.

A lab runs while the process that owns it lives. Its journal
(``/run/nslab/<run>.json``, :func:`nslab.runtime.clean.read_journal`) names
that process (``pid`` and its start time), the topology, when the lab was
built, how many nodes it has here and, for one host's part of a lab across
machines, that host. The controller of a lab across machines keeps a record
of its own (:func:`nslab.runtime.clean.read_controller`) listing every host
and where each node is. Only those files are read: listing starts no
process and needs no root. A journal is data: a field of the wrong type is
shown as unknown, never trusted.

Each lab is named the same way wherever one must be picked
(:meth:`RunningLab.label`): ``nl2d9c (pair, 2 nodes, up 3 min)``.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import clean
from ..errors import InputError
from ..model import bounded
from ..model.naming import RUN_RE, check_run_id

#: What a running lab is to this machine: a lab built here (``local``), the
#: controller of a lab across machines (``controller``), or one host's part
#: of a lab whose controller runs elsewhere (``part``).
ROLES = ("local", "controller", "part")
#: The longest topology or host name shown (a journal is data).
MAX_NAME = 64
#: The largest topology file read to count a lab's nodes when its journal
#: does not say (a lab started by an nslab before journals counted them).
MAX_TOPOLOGY_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class RunningLab:
    """One running lab, as its journal or its controller's record describes it.

    Attributes:
        run: the run id (``nl2d9c``).
        topology: the topology's name (``pair``, ``clos-2x4``), or what else
            holds the run (``rfc2544 virtual bed``).
        nodes: how many nodes it has on this machine (the whole lab for a
            controller); None when the journal does not say.
        created: when it was built (seconds since the epoch), if known.
        pid: the process that owns it.
        hosts: the hosts of a lab across machines (a part: its own host).
        role: one of :data:`ROLES`.
    """

    run: str
    topology: str
    nodes: Optional[int]
    created: Optional[float]
    pid: int
    hosts: Tuple[str, ...] = ()
    role: str = "local"

    def age(self, now: Optional[float] = None) -> Optional[float]:
        """Seconds since it was built (never below 0), or None."""
        if self.created is None:
            return None
        return max(0.0, (time.time() if now is None else now) - self.created)

    def where(self) -> str:
        """Its host(s), for a table: ``this host``, ``box1, box2``, or
        ``box2 (a part; controlled elsewhere)``."""
        if self.role == "controller":
            return ", ".join(self.hosts) or "?"
        if self.role == "part":
            return f"{', '.join(self.hosts) or '?'} (a part; controlled elsewhere)"
        return "this host"

    def label(self, now: Optional[float] = None) -> str:
        """How a command names it when the user must pick one:
        ``nl2d9c (pair, 2 nodes, up 3 min)``."""
        parts = [self.topology]
        if self.nodes is not None:
            parts.append(f"{self.nodes} node{'' if self.nodes == 1 else 's'}")
        if self.role == "controller":
            parts.append(f"across {', '.join(self.hosts)}")
        age = self.age(now)
        if age is not None:
            parts.append(f"up {age_text(age)}")
        return f"{self.run} ({', '.join(parts)})"

    def to_json(self, now: Optional[float] = None) -> Dict[str, Any]:
        """The row of ``nslab topo ps --json``."""
        age = self.age(now)
        return {"run": self.run, "topology": self.topology, "nodes": self.nodes,
                "created_unix_s": self.created,
                "age_s": None if age is None else round(age, 1), "pid": self.pid,
                "hosts": list(self.hosts), "role": self.role}


def age_text(seconds: float) -> str:
    """A duration as ``ps`` would say it: ``12 s``, ``3 min``, ``2 h 5 min``, ``3 d 4 h``."""
    s = int(max(0.0, seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h" + (f" {s % 3600 // 60} min" if s % 3600 // 60 else "")
    return f"{s // 86400} d" + (f" {s % 86400 // 3600} h" if s % 86400 // 3600 else "")


def _name(value: Any) -> Optional[str]:
    """A name from a journal: a non-empty string, cut to :data:`MAX_NAME`."""
    if not isinstance(value, str) or not value:
        return None
    return value[:MAX_NAME] + ("..." if len(value) > MAX_NAME else "")


def _count(value: Any) -> Optional[int]:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _time(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _nodes_in_topology_file(run: str) -> Optional[int]:
    """How many nodes the topology the lab left beside its journal has
    (:func:`nslab.runtime.clean.topology_path`), or None."""
    try:
        data = bounded.load(clean.topology_path(run), MAX_TOPOLOGY_BYTES)
    except (OSError, ValueError, InputError):
        return None
    nodes = data.get("nodes") if isinstance(data, dict) else None
    return len(nodes) if isinstance(nodes, dict) else None


def from_journal(journal: Dict[str, Any]) -> Optional[RunningLab]:
    """The lab a live journal describes (None if it names no run or pid)."""
    run, pid = journal.get("run"), _count(journal.get("pid"))
    if not isinstance(run, str) or not RUN_RE.fullmatch(run) or not pid:
        return None
    nodes = _count(journal.get("nodes"))
    if nodes is None and "nodes" not in journal:
        nodes = _nodes_in_topology_file(run)
    host = _name(journal.get("host"))
    return RunningLab(run, _name(journal.get("topology")) or "?", nodes,
                      _time(journal.get("created")), pid, (host,) if host else (),
                      "part" if host else "local")


def from_controller(record: Dict[str, Any]) -> Optional[RunningLab]:
    """The lab across machines a live controller's record describes."""
    run, pid = record.get("run"), _count(record.get("pid"))
    if not isinstance(run, str) or not RUN_RE.fullmatch(run) or not pid:
        return None
    hosts = record.get("hosts")
    names = tuple(n for n in (_name(h) for h in (hosts if isinstance(hosts, dict) else ()))
                  if n)
    placement = record.get("placement")
    nodes = len(placement) if isinstance(placement, dict) else None
    return RunningLab(run, _name(record.get("topology")) or "?", nodes,
                      _time(record.get("created")), pid, names, "controller")


def _oldest_first(labs: Sequence[RunningLab]) -> List[RunningLab]:
    return sorted(labs, key=lambda lab: (lab.created or 0.0, lab.run))


def local_labs() -> List[RunningLab]:
    """The labs with nodes on this machine (a live journal each), oldest first."""
    found = (from_journal(journal) for journal in clean.live_journals())
    return _oldest_first([lab for lab in found if lab is not None])


def running_labs() -> List[RunningLab]:
    """Every lab running on this machine, oldest first: the live journals
    and the live controllers' records (a controller's record stands for the
    part of its lab this machine may hold too)."""
    found: Dict[str, RunningLab] = {lab.run: lab for lab in local_labs()}
    for run in clean.live_controllers():
        record = clean.read_controller(run)
        lab = from_controller(record) if record is not None else None
        if lab is not None:
            found[lab.run] = lab
    return _oldest_first(list(found.values()))


def labels(labs: Sequence[RunningLab], now: Optional[float] = None) -> str:
    """``nl2d9c (pair, 2 nodes, up 3 min), nl9c4a (...)``."""
    now = time.time() if now is None else now
    return ", ".join(lab.label(now) for lab in labs)


def pick(run: Optional[str], verb: str, how: str, labs: Optional[Sequence[RunningLab]] = None,
         ) -> RunningLab:
    """The lab a command acts on: ``run`` if it is running, else the only
    one running; otherwise one line listing them, each by its
    :meth:`~RunningLab.label`. ``verb`` says what the command does to it
    (``watch``), ``how`` how to name one (``nslab watch RUN``); ``labs``
    defaults to :func:`running_labs`."""
    labs = running_labs() if labs is None else list(labs)
    if run:
        check_run_id(run)
        for lab in labs:
            if lab.run == run:
                return lab
        raise InputError(f"no lab {run!r} is running on this host"
                         + (f" (running: {labels(labs)})" if labs else "")
                         + "; `nslab topo ps` lists the running labs")
    if len(labs) == 1:
        return labs[0]
    if not labs:
        raise InputError(f"no lab is running on this host: start one (nslab topo up pair), "
                         f"then {verb} it")
    raise InputError(f"{len(labs)} labs are running: {labels(labs)}; name the one to {verb} "
                     f"({how})")


def same_topology(name: str, labs: Optional[Sequence[RunningLab]] = None) -> List[RunningLab]:
    """The running labs whose topology is named ``name``."""
    return [lab for lab in (running_labs() if labs is None else labs) if lab.topology == name]
