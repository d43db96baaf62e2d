"""Changing a running lab's links: ``nslab link set A-B``, ``nslab link show``,
``nslab link reset``, and the ``links:`` of a checks file's stage.

A change is a :class:`~nslab.model.checks.LinkChange` (typed, the same from
the command line and from a file): a rate, delay, jitter or loss on both
directions, or the link's state. Shaping is the topology's own with the
change on top, put on both ends' egress as the lab built it (``tc``, htb or
tbf for a rate, netem for delay, jitter and loss): a kernel without netem
(``nslab doctor`` says) refuses a delay, jitter or loss in one line, and a
rate still works. ``down`` sets the first node's end administratively down
(the other end loses its carrier, as a cable pulled there); ``up`` brings
both ends up; ``reset`` puts back the topology's shaping and both ends up.

What a link carries at run time is recorded in the run's work directory
(:data:`RECORD`, root's own), under a lock (two ``nslab link set`` at once
do not lose a change), and in the lab's journal ``restore`` list, where
``nslab clean --dry-run`` shows it. The changes live in the lab's own
namespaces and ports, so the kernel undoes them when the lab's teardown or
``nslab clean`` (after a crash) removes those: the journal's item carries no
command.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from ..errors import InputError, LabError
from ..model import bounded
from ..model.checks import LINK_RE, LinkChange
from ..model.fields import NAME_RE
from ..model.render import text
from ..model.shaping import Shaping, format_rate
from ..model.topo import Link, Topology
from ..runtime import caps, clean
from ..runtime.proc import Result, in_each_namespace, run
from .capture import LabMap
from .capturerun import lab_map

__all__ = ["LinkEnd", "LabLink", "RunTime", "find_link", "set_link", "reset_links",
           "show_links", "RECORD"]

#: The record of a run's link changes, in its work directory.
RECORD = "links.json"
_LOCK = "links.lock"
#: Seconds one ``tc`` or ``ip`` call may take.
TIMEOUT = 30.0


@dataclass(frozen=True)
class LinkEnd:
    """One end of a link as it is now: the node, the topology's interface
    name, the namespace (None: the root one) and the device there."""

    node: str
    intf: str
    netns: Optional[str]
    dev: str

    def __str__(self) -> str:
        return f"{self.node}:{self.intf}"


@dataclass(frozen=True)
class LabLink:
    """A link of a running lab: its name as the topology orders its nodes
    (``server1-spine2``), its topology model, and its ends in the order the
    user named them."""

    name: str
    link: Link
    ends: Tuple[LinkEnd, LinkEnd]


@dataclass(frozen=True)
class RunTime:
    """What a link carries beyond its topology, set at run time: None for
    what was not changed; ``down`` names the node whose end is down."""

    rate: Optional[int] = None
    delay_ms: Optional[float] = None
    jitter_ms: Optional[float] = None
    loss_pct: Optional[float] = None
    down: Optional[str] = None

    @property
    def empty(self) -> bool:
        return self == RunTime()

    def then(self, change: LinkChange) -> "RunTime":
        """This state with ``change`` on top (``reset``: none)."""
        if change.reset:
            return RunTime()
        down = self.down
        if change.state == "down":
            down = change.ends[0]
        elif change.state == "up":
            down = None
        return RunTime(
            rate=change.rate if change.rate is not None else self.rate,
            delay_ms=change.delay if change.delay is not None else self.delay_ms,
            jitter_ms=change.jitter if change.jitter is not None else self.jitter_ms,
            loss_pct=change.loss if change.loss is not None else self.loss_pct, down=down)

    def shaping(self, base: Optional[Shaping]) -> Optional[Shaping]:
        """The topology's shaping ``base`` with these values on top (None: unshaped)."""
        s = base or Shaping()
        try:
            s = dataclasses.replace(
                s, rate=self.rate if self.rate is not None else s.rate,
                delay_ms=self.delay_ms if self.delay_ms is not None else s.delay_ms,
                jitter_ms=self.jitter_ms if self.jitter_ms is not None else s.jitter_ms,
                loss_pct=self.loss_pct if self.loss_pct is not None else s.loss_pct)
        except InputError as exc:
            raise InputError(f"link shaping: {exc}") from None
        return None if s.empty else s

    def describe(self) -> str:
        """``rate 10.0 Mbit/s, delay 50ms, down at spine2``; empty when nothing."""
        words = []
        if self.rate is not None:
            words.append(f"rate {format_rate(self.rate)}")
        if self.delay_ms is not None:
            words.append(f"delay {self.delay_ms:g}ms")
        if self.jitter_ms is not None:
            words.append(f"jitter {self.jitter_ms:g}ms")
        if self.loss_pct is not None:
            words.append(f"loss {self.loss_pct:g}%")
        if self.down:
            words.append(f"down at {self.down}")
        return ", ".join(words)

    def to_json(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> "RunTime":
        """A record read back (data: a field of the wrong type is dropped)."""
        if not isinstance(data, dict):
            return cls()

        def num(key: str) -> Optional[float]:
            v = data.get(key)
            return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) \
                and v >= 0 else None
        rate = data.get("rate")
        down = data.get("down")
        return cls(rate=int(rate) if isinstance(rate, int) and not isinstance(rate, bool)
                   and rate > 0 else None,
                   delay_ms=num("delay_ms"), jitter_ms=num("jitter_ms"), loss_pct=num("loss_pct"),
                   down=down if isinstance(down, str) and NAME_RE.fullmatch(down) else None)


# -- finding a link ---------------------------------------------------------------------
def find_link(topo: Topology, m: LabMap, a: str, b: str) -> LabLink:
    """The link between nodes ``a`` and ``b`` of the running lab ``m``; one
    line naming what is wrong otherwise."""
    for node in (a, b):
        if node not in topo.nodes:
            raise InputError(f"link {a}-{b}: no node {node!r} in lab {m.run}")
    found = [(link, na, ia, nb, ib) for link, na, ia, nb, ib in topo.interfaces()
             if {na, nb} == {a, b}]
    if not found:
        mine = sorted({nb if na == a else na for _, na, _, nb, _ in topo.interfaces()
                       if a in (na, nb)})
        raise InputError(f"link {a}-{b}: no link between {a} and {b} ({a} is linked to: "
                         f"{', '.join(mine) or 'nothing'})")
    if len(found) > 1:
        raise InputError(f"link {a}-{b}: {len(found)} links join {a} and {b}; nslab link set "
                         "takes two nodes joined by one link")
    link, na, ia, nb, ib = found[0]
    ends = {na: _end(m, na, ia), nb: _end(m, nb, ib)}
    return LabLink(f"{na}-{nb}", link, (ends[a], ends[b]))


def _end(m: LabMap, node: str, intf: str) -> LinkEnd:
    if node not in m.netns:
        raise InputError(f"{node} is not on this host (a lab across machines changes its links "
                         "on the host that has the node)")
    netns = m.netns[node]
    if netns is not None:
        return LinkEnd(node, intf, netns, intf)
    dev = m.ports.get(node, {}).get(intf)
    if dev is None:
        raise InputError(f"{node}:{intf} is not there now (is the lab going down?)")
    return LinkEnd(node, intf, None, dev)


def parse_link(name: str) -> Tuple[str, str]:
    """``A-B`` -> ``(A, B)``, through the same type a file's ``link:`` is."""
    from pydantic import ValidationError
    try:
        return LinkChange(link=name, reset=True).ends
    except ValidationError as exc:
        msg = str(exc.errors(include_url=False)[0].get("msg", "")).replace("Value error, ", "")
        raise InputError(f"link {name[:40]!r}: {msg}") from None


# -- the record -------------------------------------------------------------------------
def _record_path(run_id: str) -> str:
    return os.path.join(clean.workdir(run_id), RECORD)


def read_record(run_id: str) -> Dict[str, RunTime]:
    """The run-time changes of lab ``run_id``'s links, by link name."""
    try:
        data = bounded.load(_record_path(run_id), 4 * 1024 * 1024)
    except (OSError, ValueError):
        return {}
    links = data.get("links") if isinstance(data, dict) else None
    if not isinstance(links, dict):
        return {}
    return {k: RunTime.from_json(v) for k, v in links.items()
            if isinstance(k, str) and LINK_RE.fullmatch(k)}


def _write_record(run_id: str, record: Dict[str, RunTime]) -> None:
    from ..runtime import statefile
    statefile.write(_record_path(run_id), {"run": run_id, "links": {
        k: v.to_json() for k, v in record.items() if not v.empty}})


@contextlib.contextmanager
def _locked(run_id: str) -> Iterator[None]:
    """One change of lab ``run_id``'s links at a time (across processes)."""
    path = os.path.join(clean.workdir(run_id), _LOCK)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise LabError(f"lab {run_id}: cannot lock its links ({exc.strerror}): is it going "
                       "down?") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _journal(run_id: str, name: str, now: RunTime) -> None:
    """Note (or drop) link ``name``'s run-time change in the lab's journal
    ``restore`` list: what ``nslab clean --dry-run`` shows of it. No
    command: the kernel undoes it with the lab's namespaces and ports."""
    journal = clean.read_journal(run_id)
    if journal is None or not clean.run_is_live(journal):
        return  # the lab is going: its journal is not ours to write
    items = [r for r in journal.get("restore", []) if r.get("link") != name]
    if not now.empty:
        items.append({"what": f"link {name} ({now.describe()}; set at run time, undone with the "
                              "lab's namespaces and ports)", "argv": [], "link": name})
    journal["restore"] = items
    clean.write_journal(run_id, journal)


# -- applying ---------------------------------------------------------------------------
def run_in(netns: Optional[str], argv: List[str], run_id: str, input: Optional[str] = None,
           where: str = "") -> Result:
    """``argv`` in namespace ``netns`` (None: the root one), forked from a
    thread inside it, tagged with the run; never raises on a non-zero exit."""
    return in_each_namespace([netns], lambda _: run(argv, run_id=run_id, check=False,
                                                    input=input, timeout=TIMEOUT, where=where),
                             "link")[0]


def _shape(run_id: str, end: LinkEnd, shaping: Optional[Shaping]) -> None:
    """The root qdisc of ``end``'s device replaced by ``shaping`` (None: the default)."""
    run_in(end.netns, ["tc", "qdisc", "del", "dev", end.dev, "root"], run_id, where=str(end))
    if shaping is not None:
        res = run_in(end.netns, ["tc", "-batch", "-"], run_id, input=text(shaping.tc_batch(end.dev)),
                     where=str(end))
        if not res.ok:
            said = (res.stderr or res.stdout).strip().splitlines()
            raise LabError(f"{end}: tc refused the shaping: {said[0] if said else res.returncode}")


def _state(run_id: str, end: LinkEnd, up: bool) -> None:
    res = run_in(end.netns, ["ip", "link", "set", "dev", end.dev, "up" if up else "down"], run_id,
                 where=str(end))
    if not res.ok:
        said = (res.stderr or res.stdout).strip().splitlines()
        raise LabError(f"{end}: ip link set {'up' if up else 'down'}: "
                       f"{said[0] if said else res.returncode}")


def _apply(run_id: str, ll: LabLink, old: RunTime, new: RunTime, force: bool = False) -> None:
    base = ll.link.shaping
    before, after = old.shaping(base), new.shaping(base)
    if after is not None and after.needs_netem and not (base is not None and base.needs_netem):
        caps.require(["netem"], f"a delay, jitter or loss on link {ll.name} (nslab link set)")
    if force or before != after:
        done: List[LinkEnd] = []
        try:
            for end in ll.ends:
                _shape(run_id, end, after)
                done.append(end)
        except LabError:
            for end in done:  # an end changed before the other failed goes back
                _shape(run_id, end, before)
            raise
    if force or old.down != new.down:
        for end in ll.ends:
            if new.down is None or end.node == new.down:
                _state(run_id, end, up=new.down is None)


@dataclass
class LiveLab:
    """A running lab as link changes see it: its topology and where its nodes are."""

    run_id: str
    topology: Topology
    map: LabMap

    @classmethod
    def of(cls, run_id: str) -> "LiveLab":
        topo = clean.read_topology(run_id)
        if topo is None:
            raise InputError(f"lab {run_id} left no topology beside its journal (an older nslab "
                             "started it): its links cannot be named")
        return cls(run_id, topo, lab_map(run_id, []))

    def link(self, name: str) -> LabLink:
        a, b = parse_link(name)
        return find_link(self.topology, self.map, a, b)


def set_link(lab: LiveLab, change: LinkChange) -> Tuple[LabLink, RunTime]:
    """Apply ``change`` to a link of the running lab; its state after."""
    ll = lab.link(change.link)
    with _locked(lab.run_id):
        record = read_record(lab.run_id)
        old = record.get(ll.name, RunTime())
        new = old.then(change)
        _apply(lab.run_id, ll, old, new, force=change.reset)
        record[ll.name] = new
        _write_record(lab.run_id, record)
        _journal(lab.run_id, ll.name, new)
    return ll, new


def apply_changes(lab: LiveLab, changes: Sequence[LinkChange]) -> List[str]:
    """A stage's ``links:``, in order; one line per change made."""
    out = []
    for change in changes:
        ll, now = set_link(lab, change)
        out.append(f"{change.describe()}" + (f" (now: {now.describe()})" if not now.empty
                                               and not change.reset else ""))
    return out


def reset_links(lab: LiveLab, name: Optional[str] = None) -> List[str]:
    """Back to the topology: link ``name``, or every link changed at run time."""
    names = [name] if name else sorted(read_record(lab.run_id))
    out = []
    for n in names:
        ll, _ = set_link(lab, LinkChange(link=n, reset=True))
        out.append(ll.name)
    return out


# -- showing ----------------------------------------------------------------------------
def _live_states(lab: LiveLab) -> Dict[Tuple[Optional[str], str], str]:
    """``{(netns, dev): operstate}`` of every namespace of the lab (one ``ip -j link`` each)."""
    spaces: List[Optional[str]] = sorted({ns for ns in lab.map.netns.values() if ns},
                                         key=str)
    if any(ns is None for ns in lab.map.netns.values()):
        spaces.append(None)
    out: Dict[Tuple[Optional[str], str], str] = {}
    results = in_each_namespace(spaces, lambda ns: run(["ip", "-j", "link", "show"],
                                                       check=False, timeout=TIMEOUT),
                                "link-show")
    for ns, res in zip(spaces, results):
        try:
            links = json.loads(res.stdout or "[]")
        except ValueError:
            continue
        for item in links if isinstance(links, list) else []:
            if isinstance(item, dict) and isinstance(item.get("ifname"), str):
                out[(ns, item["ifname"].split("@")[0])] = str(item.get("operstate", "?"))
    return out


def show_links(lab: LiveLab) -> List[Tuple[str, str, str, str, str]]:
    """Rows ``(link, ends, state, shaping, set at run time)`` per link: the
    state of each end now (``up``, ``down``, ``lowerlayerdown``: no carrier),
    the shaping it carries (the topology's with the run-time changes)."""
    record = read_record(lab.run_id)
    states = _live_states(lab)
    rows = []
    for link, na, ia, nb, ib in lab.topology.interfaces():
        name = f"{na}-{nb}"
        now = record.get(name, RunTime())
        ends, state = [], []
        for node, intf in ((na, ia), (nb, ib)):
            ends.append(f"{node}:{intf}")
            try:
                end = _end(lab.map, node, intf)
            except InputError:
                state.append("elsewhere")
                continue
            state.append(states.get((end.netns, end.dev), "absent").lower())
        try:
            shaping = now.shaping(link.shaping)
        except InputError:
            shaping = link.shaping
        rows.append((name, " ".join(ends), "/".join(state), _shaping_text(shaping),
                     now.describe()))
    return rows


def _shaping_text(s: Optional[Shaping]) -> str:
    if s is None:
        return "none"
    words = []
    if s.rate is not None:
        words.append(f"{format_rate(s.rate)} ({s.qdisc})")
    if s.delay_ms:
        words.append(f"delay {s.delay_ms:g}ms" + (f" ±{s.jitter_ms:g}ms" if s.jitter_ms else ""))
    if s.loss_pct:
        words.append(f"loss {s.loss_pct:g}%")
    return ", ".join(words) or "none"

