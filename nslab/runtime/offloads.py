"""Segmentation offloads of a running lab's interfaces, turned off for a while
and put back: ``nslab capture --as-wire``.

A veth hands the kernel's segmentation offload super-packets over as they
are: TCP sends 64 KB segments (TSO, GSO) that no wire would carry, and a
receiver may merge frames again (GRO), so a capture of a "1 Gbit/s" link
shows frames of up to 64 KB. With ``tso``, ``gso`` and ``gro`` off on both
ends of the link, the kernel cuts segments to the MTU before they cross it,
as a NIC would on the wire.

Whatever is turned off is recorded first, in a record of the process that
turned it off, in the lab's work directory (``/run/nslab/<run>/offloads-<pid>.json``,
written atomically: :mod:`nslab.runtime.statefile`), and put back by that
process when it is done. If it dies first, ``nslab clean`` finds the record
of a process that is gone and puts the offloads back (the lab is still up:
only its interfaces are touched). The record is not the lab's journal: the
lab's own process rewrites that one, and two writers would lose each
other's changes. When the lab goes, its work directory goes with it, and
the interfaces too.
"""
from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import statefile
from ..errors import InputError, LabError
from .proc import netns_argv, process_start_time, run, same_process

log = logging.getLogger(__name__)

#: The features turned off, by their ``ethtool -K`` names, with the names
#: ``ethtool -k`` shows them under.
FEATURES = {"tso": "tcp-segmentation-offload", "gso": "generic-segmentation-offload",
            "gro": "generic-receive-offload"}
#: How a record's file is named in the lab's work directory.
RECORD_RE = re.compile(r"^offloads-([0-9]{1,10})\.json$")


def parse_features(text: str) -> Dict[str, Tuple[bool, bool]]:
    """``ethtool -k`` output as ``{feature: (on, fixed)}`` for its top-level
    features (``tcp-segmentation-offload: on``, ``... off [fixed]``)."""
    out: Dict[str, Tuple[bool, bool]] = {}
    for line in text.splitlines():
        if not line or line[0].isspace() or ": " not in line:
            continue
        name, _, state = line.partition(": ")
        words = state.split()
        if words and words[0] in ("on", "off"):
            out[name.strip()] = (words[0] == "on", "[fixed]" in state)
    return out


def to_turn_off(features: Dict[str, Tuple[bool, bool]]) -> List[str]:
    """The ``ethtool -K`` names of :data:`FEATURES` that are on and may be
    turned off (not ``[fixed]``)."""
    return [k for k, shown in FEATURES.items()
            if features.get(shown, (False, True))[0] and not features[shown][1]]


@dataclass(frozen=True)
class End:
    """One interface whose offloads are turned off: ``label`` (``h1:h1-eth0``)
    names it to people; ``netns`` (None: the root namespace) and ``dev``
    find it."""

    label: str
    netns: Optional[str]
    dev: str


def ethtool_argv(end: End, features: Sequence[str], on: bool) -> List[str]:
    """``[ip netns exec NS] ethtool -K DEV f1 on|off f2 on|off ...``."""
    argv = ["ethtool", "-K", end.dev]
    for f in features:
        argv += [f, "on" if on else "off"]
    return netns_argv(end.netns, argv)


def record_path(workdir: str, pid: Optional[int] = None) -> str:
    """The record of process ``pid`` (default: this one) in a lab's work directory."""
    return os.path.join(workdir, f"offloads-{os.getpid() if pid is None else pid}.json")


def records(workdir: str) -> List[Tuple[str, dict]]:
    """Every record in a lab's work directory: ``(path, record)``; a file
    that is not one of ours is skipped."""
    try:
        names = os.listdir(workdir)
    except OSError:
        return []
    stems = {n[:-len(".tmp")] if n.endswith(".tmp") else n for n in names}  # a torn rename too
    out = []
    for stem in sorted(s for s in stems if RECORD_RE.fullmatch(s)):
        path = os.path.join(workdir, stem)
        data = statefile.read(path)
        if isinstance(data, dict) and isinstance(data.get("restore"), list):
            out.append((path, data))
    return out


def _owner_alive(record: dict) -> bool:
    return same_process(record.get("pid"), record.get("pid_start"))


def stale(workdir: str) -> List[Tuple[str, dict]]:
    """The records in ``workdir`` whose process is gone (killed before it
    put the offloads back): what ``nslab clean`` restores."""
    return [(path, r) for path, r in records(workdir) if not _owner_alive(r)]


def held(workdir: str) -> Dict[Tuple[Optional[str], str], int]:
    """``{(netns, dev): pid}`` of the interfaces a live process has turned
    the offloads of off (its record)."""
    out: Dict[Tuple[Optional[str], str], int] = {}
    for _, r in records(workdir):
        if _owner_alive(r):
            for end in r.get("ends", []):
                if isinstance(end, dict) and isinstance(end.get("dev"), str):
                    netns = end.get("netns") if isinstance(end.get("netns"), str) else None
                    out[(netns, end["dev"])] = int(r["pid"])
    return out


class OffloadsOff:
    """A context manager: segmentation offloads (:data:`FEATURES`) off on
    ``ends`` of lab ``run`` while it is open, put back on exit; recorded
    first in ``workdir`` (the lab's) so that ``nslab clean`` puts them back
    if this process dies. Features already off, or fixed, are left alone and
    not recorded. An interface another live process holds so is refused in
    one line (its end would put them back under this one)."""

    def __init__(self, run: str, ends: Sequence[End], workdir: str) -> None:
        self.run = run
        self.ends = list(ends)
        self.workdir = workdir
        self.path = record_path(workdir)
        #: per end, the features this turned off (what is put back)
        self.changed: List[Tuple[End, List[str]]] = []

    def __enter__(self) -> "OffloadsOff":
        taken = held(self.workdir)
        for end in self.ends:
            if (end.netns, end.dev) in taken:
                raise InputError(f"--as-wire: the offloads of {end.label} are off already, "
                                 f"held by process {taken[(end.netns, end.dev)]} (another "
                                 "capture --as-wire); capture without --as-wire: it sees the "
                                 "wire too")
        if not os.path.isdir(self.workdir):
            raise LabError(f"--as-wire: lab {self.run} has no work directory here "
                           f"({self.workdir}), where the change would be recorded")
        plan = []
        for end in self.ends:
            res = run(netns_argv(end.netns, ["ethtool", "-k", end.dev]), check=False,
                      where=end.label)
            if not res.ok:
                raise LabError(f"--as-wire: cannot read the offloads of {end.label}: "
                               f"{(res.stderr.strip().splitlines() or ['ethtool failed'])[-1]}")
            off = to_turn_off(parse_features(res.stdout))
            if off:
                plan.append((end, off))
        if not plan:
            return self
        me = os.getpid()
        statefile.write(self.path, {
            "run": self.run, "pid": me, "pid_start": process_start_time(me),
            "ends": [{"label": e.label, "netns": e.netns, "dev": e.dev} for e, _ in plan],
            "restore": [{"what": f"segmentation offloads of {e.label} ({', '.join(off)} on)",
                         "argv": [ethtool_argv(e, off, on=True)]} for e, off in plan]})
        try:
            for end, off in plan:
                self.changed.append((end, off))  # recorded and about to change
                run(ethtool_argv(end, off, on=False), where=end.label)
        except BaseException:
            self.restore()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.restore()

    def restore(self) -> List[str]:
        """Put back what was turned off, then remove the record; the
        problems met (an interface gone with its lab is none)."""
        problems = []
        for end, off in self.changed:
            res = run(ethtool_argv(end, off, on=True), check=False, where=end.label)
            if not res.ok and (end.netns is None or os.path.exists(f"/run/netns/{end.netns}")):
                problems.append(f"{end.label}: {res.stderr.strip()[-200:]}")
        self.changed = []
        for p in problems:
            log.warning("putting the offloads back: %s", p)
        if os.path.isdir(self.workdir):
            statefile.remove(self.path)
        return problems
