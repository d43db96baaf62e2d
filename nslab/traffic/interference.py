"""Host interference: how much CPU time other tasks took on the bed's CPUs
during a trial, from the scheduler's own accounting (not the tick-sampled busy
counters).

A measurement made while something else ran on the DUT's CPU (a browser, an
update, a neighbour's build) is a measurement of the neighbour as much as of the
DUT. Every trial that asks for it gets, per CPU of the bed, the milliseconds
that tasks other than the bed's own ran there, and the milliseconds the bed's
own tasks waited for a CPU; the study re-runs a trial above its threshold and
excludes it, with the reason, if it stays disturbed.

The source is every thread's ``/proc/<pid>/task/<tid>/schedstat``
(``CONFIG_SCHED_INFO``: nanoseconds run and waited), read at both ends of the
window; a thread born inside the window counts from zero, one that ended
inside it is missed. A thread that is not the bed's counts on every CPU its
affinity allows (an upper bound per CPU: the scheduler does not say where it
ran), and once in :func:`others_share`, the share of all CPUs together.

The per-CPU ``/proc/schedstat`` is not used: its run time is booked when a
task is switched out (a stint begun before the window lands inside it) and
with IRQ time included, unlike a task's own, so "its total less the bed's"
mixes two clocks and can make a quiet bed look disturbed.

The bed's own tasks: this process and its descendants (the harness, and every
tool, iperf and FRR daemon the lab starts: none of them daemonizes), the
kernel's softirq and NAPI threads, ovs-vswitchd (the lab's datapath), and any
pid the caller names. A task of the ``SCHED_IDLE`` policy is no other task
either: it runs only on a CPU no other task wants, and gives it up the moment
one does (the virtual RFC 2544 bed's QEMU runs so beside the other studies).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, FrozenSet, Iterable, List, Mapping, Optional, Set, Tuple

if TYPE_CHECKING:
    from .exits import Ended

PROC = "/proc"

#: Kernel threads that do the bed's own packet work (softirq, threaded NAPI),
#: by name; ovs-vswitchd's threads are the bed's by their process's name.
BED_KTHREAD_PREFIXES = ("ksoftirqd/", "napi/")


@dataclass(frozen=True)
class SchedTimes:
    """Nanoseconds run and waited (runnable, not running), as the scheduler counts."""

    run_ns: int
    wait_ns: int


def parse_task_schedstat(text: str) -> SchedTimes:
    """``/proc/<pid>/schedstat``: "run_ns wait_ns timeslices"."""
    parts = text.split()
    if len(parts) < 2:
        raise ValueError(f"schedstat: {text.strip()!r}: expected 'run wait slices'")
    return SchedTimes(int(parts[0]), int(parts[1]))


@dataclass
class Task:
    """One thread at one moment: its times, the CPUs it may run on, whether it
    is the bed's."""

    times: SchedTimes
    cpus: FrozenSet[int]
    bed: bool
    #: the thread's name (``comm``), for naming who took the time
    name: str = ""
    #: of the SCHED_IDLE policy: it takes no time another task wants
    idle: bool = False


@dataclass
class Snapshot:
    """The scheduler's counters at one moment."""

    t: float
    tasks: Dict[int, Task] = field(default_factory=dict)


@dataclass(frozen=True)
class CpuInterference:
    """One CPU over one window: other tasks' run time and the bed's wait."""

    cpu: int
    window_s: float
    other_ms: float
    bed_wait_ms: float
    source: str  # "task scan (upper bound)"
    #: the other tasks that ran most and could run there (each counted on
    #: every CPU it may run on, as ``other_ms``): (name, ms), largest first
    top: Tuple[Tuple[str, float], ...] = ()

    @property
    def other_pct(self) -> float:
        """Other tasks' time as a share of the window, percent."""
        return 100.0 * self.other_ms / 1000.0 / self.window_s if self.window_s > 0 else 0.0

    def as_dict(self) -> Dict[str, object]:
        return {"cpu": self.cpu, "window_s": round(self.window_s, 4),
                "other_ms": round(self.other_ms, 3), "other_pct": round(self.other_pct, 2),
                "bed_wait_ms": round(self.bed_wait_ms, 3), "source": self.source,
                "top": [[name, round(ms, 1)] for name, ms in self.top]}


def _read(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _children(proc: str) -> Dict[int, List[int]]:
    """Parent pid -> child pids, from every process's stat."""
    kids: Dict[int, List[int]] = {}
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        text = _read(f"{proc}/{name}/stat")
        if not text:
            continue
        try:
            ppid = int(text.rsplit(")", 1)[1].split()[1])
        except (IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(name))
    return kids


def parent_of(pid: int, proc: str = PROC) -> int:
    """A process's parent pid (0 when it cannot be read)."""
    text = _read(f"{proc}/{pid}/stat") or ""
    try:
        return int(text.rsplit(")", 1)[1].split()[1])
    except (IndexError, ValueError):
        return 0


def descendants(root: int, proc: str = PROC) -> Set[int]:
    """``root`` and every process below it."""
    kids = _children(proc)
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in out:
            continue
        out.add(pid)
        todo.extend(kids.get(pid, ()))
    return out


class Watch:
    """Snapshots of the scheduler's counters for the bed's ``cpus``.

    ``bed_pids``: processes whose every thread is the bed's (ovs-vswitchd);
    this process's tree and the softirq and NAPI kernel threads always are."""

    def __init__(self, cpus: Iterable[int], bed_pids: Iterable[int] = (),
                 proc: str = PROC, root_pid: Optional[int] = None) -> None:
        self.cpus = sorted(set(cpus))
        self.bed_pids = set(bed_pids)
        self.proc = proc
        self.root_pid = os.getpid() if root_pid is None else root_pid
        #: the root's parent: a thread of the root's names it as its parent
        #: when it exits (:func:`ended_wait_ns`)
        self.root_parent = parent_of(self.root_pid, self.proc)

    def snapshot(self) -> Snapshot:
        snap = Snapshot(time.monotonic())
        bed = descendants(self.root_pid, self.proc) | self.bed_pids
        for name in os.listdir(self.proc):
            if not name.isdigit():
                continue
            pid = int(name)
            try:
                tids = os.listdir(f"{self.proc}/{pid}/task")
            except OSError:
                continue
            for t in tids:
                tid = int(t)
                st = _read(f"{self.proc}/{pid}/task/{t}/schedstat")
                if st is None:
                    continue
                try:
                    times = parse_task_schedstat(st)
                    allowed = frozenset(os.sched_getaffinity(tid)) if self.proc == PROC else \
                        self._affinity(pid, t)
                except (OSError, ValueError):
                    continue
                is_bed = pid in bed
                comm = (_read(f"{self.proc}/{pid}/task/{t}/comm") or "").strip()
                if not is_bed:
                    is_bed = comm.startswith(BED_KTHREAD_PREFIXES) or (
                        (_read(f"{self.proc}/{pid}/comm") or "").strip() == "ovs-vswitchd")
                idle = sched_policy(_read(f"{self.proc}/{pid}/task/{t}/stat") or "") == SCHED_IDLE
                snap.tasks[tid] = Task(times, allowed, is_bed, comm, idle)
        return snap

    def _affinity(self, pid: int, tid: str) -> FrozenSet[int]:
        """The CPUs a thread of a captured /proc tree may run on (its status)."""
        text = _read(f"{self.proc}/{pid}/task/{tid}/status") or ""
        for line in text.splitlines():
            if line.startswith("Cpus_allowed_list:"):
                return frozenset(parse_cpu_list(line.split(":", 1)[1]))
        raise ValueError("no Cpus_allowed_list")


#: ``SCHED_IDLE`` (linux/sched.h)
SCHED_IDLE = 5


def sched_policy(stat: str) -> Optional[int]:
    """The scheduling policy in a ``/proc/<pid>/task/<tid>/stat`` line (field
    41), or None when the line is not one."""
    try:
        return int(stat.rsplit(")", 1)[1].split()[38])
    except (IndexError, ValueError):
        return None


def parse_cpu_list(text: str) -> Set[int]:
    """"0-2,5" -> {0, 1, 2, 5}."""
    out: Set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def _deltas(a: Snapshot, b: Snapshot) -> List[Tuple[Task, int, int]]:
    """(thread at b, ns run, ns waited) between two snapshots; a thread born
    between them counts from zero."""
    out = []
    zero = SchedTimes(0, 0)
    for tid, y in b.tasks.items():
        x = a.tasks[tid].times if tid in a.tasks else zero
        out.append((y, max(0, y.times.run_ns - x.run_ns), max(0, y.times.wait_ns - x.wait_ns)))
    return out


def account(a: Snapshot, b: Snapshot, cpus: Iterable[int]) -> Dict[int, CpuInterference]:
    """Per CPU of ``cpus``: other tasks' run time (each counted on every CPU
    its affinity allows: an upper bound) and the bed's pinned tasks' wait."""
    window = b.t - a.t
    moved = _deltas(a, b)
    out: Dict[int, CpuInterference] = {}
    for cpu in cpus:
        others = [(t.name, run) for t, run, _ in moved
                  if not t.bed and not t.idle and cpu in t.cpus and run]
        bed_wait = sum(wait for t, _, wait in moved if t.bed and t.cpus == frozenset({cpu}))
        out[cpu] = CpuInterference(cpu, window, sum(run for _, run in others) / 1e6,
                                   bed_wait / 1e6,
                                   "task scan (upper bound)" if b.tasks else
                                   "unavailable: no /proc/<pid>/schedstat (CONFIG_SCHED_INFO)",
                                   top=top_tasks(others))
    return out


def top_tasks(runs: Iterable[Tuple[str, int]], n: int = 3) -> Tuple[Tuple[str, float], ...]:
    """The ``n`` names that ran longest, from (thread name, ns run) pairs: threads
    of one name add up (a kernel worker's without its number: ``kworker/1:2`` as
    ``kworker/1``, its CPU's pool; ``kworker/u8:3`` as ``kworker/u8``), in ms,
    largest first."""
    by: Dict[str, int] = {}
    for name, ns in runs:
        key = name.split(":", 1)[0] if name.startswith("kworker/") else (name or "?")
        by[key] = by.get(key, 0) + ns
    ranked = sorted(by.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
    return tuple((name, ns / 1e6) for name, ns in ranked)



def others_share(a: Snapshot, b: Snapshot, ncpus: int, ended: Iterable["Ended"] = (),
                 root_parent: int = 0) -> float:
    """Other tasks' run time, each counted once, as a share (percent) of all
    ``ncpus`` CPUs over the window: the figure for a study whose tasks are
    not pinned (they run wherever the scheduler puts them). ``ended``: the
    threads that ended inside the window, whose run time the second
    snapshot no longer shows (:func:`ended_others_run_ns`)."""
    window = b.t - a.t
    if window <= 0 or ncpus <= 0:
        return 0.0
    other = sum(run for t, run, _ in _deltas(a, b) if not t.bed and not t.idle)
    other += ended_others_run_ns(a, ended, root_parent)
    return 100.0 * other / 1e9 / (window * ncpus)


def ended_wait_ns(a: Snapshot, ended: Iterable["Ended"], root_parent: int = 0) -> int:
    """The bed's wait for a CPU, in ns, in the threads that ended inside the
    window (:class:`nslab.traffic.exits.Exits`; :func:`ended_is_bed`): a
    thread the first snapshot saw counts from there, one born inside the
    window from its start; a ``SCHED_IDLE`` thread waits by design and is
    not counted."""
    return sum(ns for _, ns in ended_waits(a, ended, root_parent))


def ended_is_bed(a: Snapshot, e: "Ended", root_parent: int = 0) -> Optional[bool]:
    """Whose a thread that ended inside the window was: the bed's (True),
    another's (False), or of the ``SCHED_IDLE`` policy (None: neither). A
    thread the first snapshot saw is what it saw; one born since is its
    process's (its thread group's leader, as the first snapshot saw it),
    or, a process itself born since, its parent's as the first snapshot saw
    it (but for ``root_parent``, the parent of the bed's root, which the
    root's threads name on a kernel that does not report thread groups);
    one of nobody known counts as the bed's (an upper bound stays one)."""
    if e.policy == SCHED_IDLE:
        return None
    for tid in (e.tid, e.tgid):
        known = a.tasks.get(tid) if tid is not None else None
        if known is not None:
            return None if known.idle else known.bed
    parent = a.tasks.get(e.ppid)
    if parent is not None and not parent.bed and e.ppid != root_parent:
        return False
    return True


def ended_waits(a: Snapshot, ended: Iterable["Ended"], root_parent: int = 0
                ) -> List[Tuple[str, int]]:
    """(name, ns waited inside the window) of each ended thread that was the
    bed's (:func:`ended_is_bed`)."""
    out: List[Tuple[str, int]] = []
    for e in ended:
        if ended_is_bed(a, e, root_parent):
            known = a.tasks.get(e.tid)
            out.append((e.name, max(0, e.wait_ns - (known.times.wait_ns if known else 0))))
    return out


def ended_others_run_ns(a: Snapshot, ended: Iterable["Ended"], root_parent: int = 0) -> int:
    """Other tasks' run time, in ns, inside the window, in their threads
    that ended there (:func:`ended_is_bed`)."""
    total = 0
    for e in ended:
        if ended_is_bed(a, e, root_parent) is False:
            known = a.tasks.get(e.tid)
            total += max(0, e.run_ns - (known.times.run_ns if known else 0))
    return total


def bed_wait_share(a: Snapshot, b: Snapshot, ncpus: int, ended: Iterable["Ended"] = (),
                   root_parent: int = 0) -> float:
    """The bed's own tasks' wait for a CPU (runnable, not running), summed over
    them, as a share (percent) of all ``ncpus`` CPUs over the window: the
    threads alive at its end from their schedstat, those that ended inside it
    from the kernel's report of their exit (``ended``: :func:`ended_wait_ns`).

    Whatever other tasks did, they delayed the bed by no more than this: a
    task kept from a CPU it wanted is counted as waiting from the moment it
    is runnable until it runs. It counts the bed's waits for its own tasks
    too (on an idle host), so it is an upper bound on the delay other tasks
    caused, as :func:`others_share` is another; a study judges the smaller
    (:func:`displaced_share`). A thread of the ``SCHED_IDLE`` policy waits
    by design whenever anything else runs (the virtual RFC 2544 bed's QEMU
    beside the other studies): its wait delays nothing measured, and is not
    counted."""
    window = b.t - a.t
    if window <= 0 or ncpus <= 0:
        return 0.0
    wait = sum(w for t, _, w in _deltas(a, b) if t.bed and not t.idle)
    wait += ended_wait_ns(a, ended, root_parent)
    return 100.0 * wait / 1e9 / (window * ncpus)


def counts_waits(a: Snapshot, b: Snapshot, ended: Iterable["Ended"] = ()) -> bool:
    """Whether this kernel counts threads' waits: a kernel that keeps
    ``schedstat`` but counts waits only with delay accounting on (before
    5.14, without ``CONFIG_SCHEDSTATS``) shows every wait as 0. It does not
    where the bed's threads (those that ended inside the window too) ran
    for a tenth of a second and not one of them waited at all; on a kernel
    that counts, a bed that busy has waited somewhere."""
    moved = [(run, wait) for t, run, wait in _deltas(a, b) if t.bed]
    moved += [(e.run_ns, e.wait_ns) for e in ended if ended_is_bed(a, e)]
    return any(wait for _, wait in moved) or sum(run for run, _ in moved) < 100_000_000


def displaced_share(others_pct: float, bed_wait_pct: float) -> float:
    """The most CPU time (percent of all CPUs) other tasks can have taken
    from the bed: no more than they ran (``others_pct``), and no more than the
    bed waited for a CPU (``bed_wait_pct``). Other tasks that ran only where
    the bed did not want to run took nothing from it."""
    return min(others_pct, bed_wait_pct)


def top_bed_waits(a: Snapshot, b: Snapshot, ended: Iterable["Ended"] = (),
                  root_parent: int = 0, n: int = 3) -> Tuple[Tuple[str, float], ...]:
    """The lab's own threads that waited longest for a CPU between two
    snapshots, those that ended in between included (:func:`top_tasks`,
    over their waits)."""
    return top_tasks([(t.name or "?", wait) for t, _, wait in _deltas(a, b)
                      if t.bed and not t.idle and wait]
                     + [(name, ns) for name, ns in ended_waits(a, ended, root_parent) if ns], n)


def top_others(a: Snapshot, b: Snapshot, n: int = 3) -> Tuple[Tuple[str, float], ...]:
    """The other tasks that ran most between two snapshots, each counted once
    (:func:`top_tasks`)."""
    return top_tasks([(t.name, run) for t, run, _ in _deltas(a, b)
                      if not t.bed and not t.idle and run], n)


def accounting_source() -> str:
    """Where the accounting comes from, in words (``nslab doctor``)."""
    if not os.path.exists(f"{PROC}/self/schedstat"):
        return ("nothing: this kernel has no /proc/<pid>/schedstat (CONFIG_SCHED_INFO), so "
                "trials are not checked for other tasks")
    from .exits import Exits
    with Exits() as exits:
        ended = ("the threads that end inside a point from the kernel's taskstats" if not
                 exits.why else f"the threads that end inside a point not seen ({exits.why}), "
                 "so other tasks' share alone decides")
    return ("every thread's /proc/<pid>/task/<tid>/schedstat at both ends of a trial (other "
            "tasks counted on every CPU they may run on: an upper bound per CPU); the lab's "
            f"own wait for a CPU with {ended}")


def worst(found: Mapping[int, CpuInterference]) -> Tuple[Optional[int], float]:
    """The CPU with the largest share of other tasks' time, and that share (%)."""
    if not found:
        return None, 0.0
    cpu = max(found, key=lambda c: found[c].other_pct)
    return cpu, found[cpu].other_pct
