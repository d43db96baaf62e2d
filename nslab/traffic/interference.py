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

import functools
import os
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Dict, FrozenSet, Iterable, List, Mapping, Optional, Set, Tuple

from ..runtime.proc import parse_steal as parse_steal  # re-exported
from ..runtime.proc import read_steal_ns, steal_pct

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
    #: its process (thread group), that process's parent, and the thread's
    #: start (clock ticks after boot; -1: not known): a thread id the kernel
    #: gave again inside a window has another start
    pid: int = 0
    ppid: int = 0
    start: int = -1


@dataclass
class Snapshot:
    """The scheduler's counters at one moment."""

    t: float
    tasks: Dict[int, Task] = field(default_factory=dict)
    #: the processes an orphan of the bed's can be given to: ``init`` and the
    #: bed's root's ancestors (a subreaper among them, ``systemd --user``,
    #: adopts before ``init`` does)
    adopters: FrozenSet[int] = frozenset({1})
    #: the time the hypervisor withheld from this machine's CPUs since boot,
    #: all CPUs together (``/proc/stat``'s steal), in ns; None: not known
    steal_ns: Optional[int] = None


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


def ancestors(pid: int, parents: Mapping[int, int]) -> Set[int]:
    """The processes above ``pid``, from each process's parent (``parents``)."""
    out: Set[int] = set()
    while pid in parents and parents[pid] not in out and parents[pid] > 0:
        pid = parents[pid]
        out.add(pid)
    return out


def descendants(roots: "int | Iterable[int]", parents: Mapping[int, int]) -> Set[int]:
    """``roots`` and every process below them, from each process's parent
    (``parents``: pid -> ppid)."""
    kids: Dict[int, List[int]] = {}
    for pid, ppid in parents.items():
        kids.setdefault(ppid, []).append(pid)
    out, todo = set(), [roots] if isinstance(roots, int) else list(roots)
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
    this process's tree and the softirq and NAPI kernel threads always are.
    ``ignore_pids``: processes counted nowhere, neither the bed's nor
    others' (the lateness samplers, :mod:`nslab.traffic.lateness`: their
    waits are what they measure)."""

    def __init__(self, cpus: Iterable[int], bed_pids: Iterable[int] = (),
                 proc: str = PROC, root_pid: Optional[int] = None,
                 ignore_pids: Iterable[int] = ()) -> None:
        self.cpus = sorted(set(cpus))
        self.bed_pids = set(bed_pids)
        self.ignore_pids = frozenset(ignore_pids)
        self.proc = proc
        self.root_pid = os.getpid() if root_pid is None else root_pid
        #: the processes the last snapshot found the bed's, by their start: one
        #: whose parent went since (init or a subreaper adopted it) stays so
        self._bed_seen: Dict[int, int] = {}

    def snapshot(self) -> Snapshot:
        """Every thread's counters now. The bed's processes are worked out
        from the parents this scan read, so a process the lab forked during
        it is the lab's."""
        snap = Snapshot(time.monotonic())
        snap.steal_ns = read_steal_ns(self.proc)
        parents: Dict[int, int] = {}
        names: Dict[int, str] = {}
        starts: Dict[int, int] = {}
        for name in os.listdir(self.proc):
            if not name.isdigit():
                continue
            pid = int(name)
            if pid in self.ignore_pids:
                continue
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
                comm = (_read(f"{self.proc}/{pid}/task/{t}/comm") or "").strip()
                fields = stat_fields(_read(f"{self.proc}/{pid}/task/{t}/stat") or "")
                ppid = _field(fields, 1)
                if ppid >= 0:
                    parents.setdefault(pid, ppid)
                if tid == pid:
                    names[pid] = comm
                    starts[pid] = _field(fields, 19)
                snap.tasks[tid] = Task(times, allowed, False, comm,
                                       _policy(fields) == SCHED_IDLE, pid=pid,
                                       ppid=max(ppid, 0), start=_field(fields, 19))
        kept = [pid for pid, start in self._bed_seen.items() if starts.get(pid) == start]
        bed = descendants([self.root_pid, *kept], parents) | self.bed_pids
        self._bed_seen = {pid: starts[pid] for pid in bed if pid in starts}
        snap.adopters = frozenset(ancestors(self.root_pid, parents) | {1})
        for task in snap.tasks.values():
            task.bed = (task.pid in bed or task.name.startswith(BED_KTHREAD_PREFIXES)
                        or names.get(task.pid, "") == "ovs-vswitchd")
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


def steal_share(a: Snapshot, b: Snapshot, ncpus: int) -> Optional[float]:
    """The time the hypervisor withheld from the CPUs between two snapshots,
    as a share of all CPUs (%): time a CPU of this machine wanted to run
    and did not, whatever ran on it. None where steal is not known."""
    if a.steal_ns is None or b.steal_ns is None:
        return None
    return steal_pct(b.steal_ns - a.steal_ns, b.t - a.t, ncpus)


def stat_fields(stat: str) -> List[str]:
    """The fields of a ``/proc/<pid>/task/<tid>/stat`` line after the name
    (field 3 on: state, ppid, ...), or none when the line is not one."""
    head, sep, rest = stat.rpartition(")")
    return rest.split() if sep else []


def _field(fields: List[str], i: int, default: int = -1) -> int:
    try:
        return int(fields[i])
    except (IndexError, ValueError):
        return default


def _policy(fields: List[str]) -> int:
    """The scheduling policy among a stat line's fields (:func:`stat_fields`:
    field 41 of the line), or -1."""
    return _field(fields, 38)


def sched_policy(stat: str) -> Optional[int]:
    """The scheduling policy in a ``/proc/<pid>/task/<tid>/stat`` line (field
    41), or None when the line is not one."""
    policy = _policy(stat_fields(stat))
    return None if policy < 0 else policy


def parse_cpu_list(text: str) -> Set[int]:
    """"0-2,5" -> {0, 1, 2, 5}."""
    out: Set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def same_thread(x: Task, y: Task) -> bool:
    """Whether ``y`` (later) is the thread ``x`` was, not another the kernel
    gave its id to since: the same start where both are known, and counters
    that did not go back."""
    if x.start >= 0 and y.start >= 0 and x.start != y.start:
        return False
    return counted_on(x.times, y.times)


def counted_on(x: SchedTimes, y: SchedTimes) -> bool:
    """Whether the counters ``y`` (later) can be the same thread's as ``x``:
    neither went back (a thread whose id was given again counts from zero)."""
    return y.run_ns >= x.run_ns and y.wait_ns >= x.wait_ns


def _deltas(a: Snapshot, b: Snapshot) -> List[Tuple[Task, int, int]]:
    """(thread at b, ns run, ns waited) between two snapshots; a thread born
    between them (its id new, or given again) counts from zero."""
    out = []
    zero = SchedTimes(0, 0)
    for tid, y in b.tasks.items():
        x = a.tasks.get(tid)
        same = x is not None and same_thread(x, y)
        t = x.times if x is not None and same else zero
        if same and x is not None and x.bed and not y.bed:
            y = replace(y, bed=True)  # the bed's at the start: its parent went since
        out.append((y, y.times.run_ns - t.run_ns, y.times.wait_ns - t.wait_ns))
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



#: Whose a thread that ended inside a window was (:func:`resolve_ended`)
LAB, OTHER, IDLE, UNKNOWN = "lab", "other", "idle", "unknown"

#: Parents followed up from a process born inside a window, at most
MAX_CHAIN = 64


@dataclass(frozen=True)
class Gone:
    """A thread that ended inside a window, resolved once: whose it was
    (:data:`LAB`, :data:`OTHER`, :data:`IDLE` or :data:`UNKNOWN`), and the
    ns it ran and waited for a CPU inside the window."""

    name: str
    owner: str
    run_ns: int
    wait_ns: int

    @property
    def lab(self) -> bool:
        """Its wait counts as the lab's (one of nobody known does too)."""
        return self.owner in (LAB, UNKNOWN)

    @property
    def other(self) -> bool:
        """Its run time counts as other tasks' (one of nobody known does too)."""
        return self.owner in (OTHER, UNKNOWN)


#: The longest tick Linux has (HZ=100), where the kernel's own is not known
LONGEST_TICK_NS = 10_000_000

def last_stint_ns(config: Optional[str] = None, nohz_full: str = "") -> Optional[int]:
    """The most run time an exit report can leave out, in ns: the stint a
    thread exits in is folded into its run time at the next tick or switch,
    which never come, so up to one tick (``CONFIG_HZ`` of this kernel's
    config, or :data:`LONGEST_TICK_NS`). None where CPUs run without ticks
    (``nohz_full``): a thread's whole life then bounds it. ``config``: the kernel config's text (default: this kernel's);
    ``nohz_full``: the CPUs that go without ticks (default: this machine's,
    ``/sys/devices/system/cpu/nohz_full``; a kernel built with NO_HZ_FULL
    ticks on every CPU not named there)."""
    if config is None:
        return _this_kernel_stint()
    if nohz_full.strip() not in ("", "(null)"):
        return None  # the file is there only on a NO_HZ_FULL kernel
    hz = 0
    for line in config.splitlines():
        if line.startswith("CONFIG_HZ="):
            try:
                hz = int(line.split("=", 1)[1])
            except ValueError:
                hz = 0
    return 1_000_000_000 // hz if hz > 0 else LONGEST_TICK_NS


@functools.lru_cache(maxsize=None)
def _this_kernel_stint() -> Optional[int]:
    """:func:`last_stint_ns` of this kernel, read once."""
    return last_stint_ns(_kernel_config(), _nohz_full())


def _nohz_full() -> str:
    """The CPUs this kernel runs without ticks, as it lists them ("" none)."""
    return (_read("/sys/devices/system/cpu/nohz_full") or "").strip()


def _kernel_config() -> str:
    """This kernel's config (``/proc/config.gz``, or ``/boot/config-<release>``),
    or "" when neither is there."""
    import gzip
    try:
        with gzip.open("/proc/config.gz", "rt") as f:
            return f.read()
    except OSError:
        pass
    return _read(f"/boot/config-{os.uname().release}") or ""


def _owner(task: Task) -> str:
    return IDLE if task.idle else LAB if task.bed else OTHER


def resolve_ended(a: Snapshot, b: Snapshot, ended: Iterable["Ended"]) -> List[Gone]:
    """Each thread that ended inside the window (:class:`nslab.traffic.exits.Exits`),
    whose it was and what it ran and waited there:

    - a ``SCHED_IDLE`` thread is no one's (:data:`IDLE`);
    - a thread the first snapshot saw is what it saw, and counts from
      there: the first report of its id, with counters not below those the
      snapshot saw (a later report of the same id is another thread's, born
      since: an id is given again only once its report is out);
    - one born since counts from its start: it is its process's (its thread
      group, as the first snapshot saw it: the lab's or another's), or, a
      process itself born since, its parent's, followed up through the
      processes born since (those that ended, by their reports; those
      alive, by the second snapshot) to one the first snapshot saw;
    - one of nobody known (:data:`UNKNOWN`) counts both as the bed's wait
      and as other tasks' run time, so that each bound stays one: a chain
      that ends nowhere known, or at ``init`` (an orphan's parent, whoever
      started it), or a thread of a kernel that does not report thread
      groups (before taskstats version 12) that the first snapshot did not
      see.

    An exit report's run time leaves out the stint the thread exited in
    (:func:`last_stint_ns`): another's thread, and one of nobody known, add
    it at its most (:func:`unfolded_ns`). Its wait leaves out nothing: a
    wait is counted when the thread gets its CPU. What a thread runs after
    its report (its memory and files let go) is in no report."""
    ended = list(ended)
    parents: Dict[int, int] = {t.pid: t.ppid for t in b.tasks.values() if t.pid and t.ppid}
    for e in ended:
        if e.tgid is not None:
            parents.setdefault(e.tgid, e.ppid)
    stint = last_stint_ns()
    window_ns = max(0, int((b.t - a.t) * 1e9))
    reported: Set[int] = set()
    out: List[Gone] = []
    for e in ended:
        known = a.tasks.get(e.tid) if e.tid not in reported else None
        reported.add(e.tid)
        if known is not None and not counted_on(known.times, SchedTimes(e.run_ns, e.wait_ns)):
            known = None  # its id given again: another thread
        run = e.run_ns - (known.times.run_ns if known else 0)
        wait = e.wait_ns - (known.times.wait_ns if known else 0)
        if e.policy == SCHED_IDLE:
            owner = IDLE
        elif known is not None:
            owner = _owner(known)
        else:
            owner = _born_owner(a, e, parents)
        if owner in (OTHER, UNKNOWN):
            run += unfolded_ns(e, stint, window_ns)
        out.append(Gone(e.name, owner, run, wait))
    return out


def unfolded_ns(e: "Ended", stint: Optional[int], window_ns: int) -> int:
    """The most run time ``e``'s exit report can have left out: its last
    stint (``stint``, :func:`last_stint_ns`; None: no bound but its life),
    no more of its life than its report does not count as run (its wall
    time is given to the microsecond, so a microsecond more), and no more
    than the window."""
    rest = max(0, e.elapsed_ns + 1000 - e.run_ns) if e.elapsed_ns else window_ns
    return min(rest, window_ns) if stint is None else min(stint, rest, window_ns)


def _born_owner(a: Snapshot, e: "Ended", parents: Mapping[int, int]) -> str:
    """Whose a thread born inside the window was (:func:`resolve_ended`)."""
    if e.tgid is None:
        return UNKNOWN  # its own process or another's: the report does not say
    group = a.tasks.get(e.tgid) if e.tgid != e.tid else None
    if group is not None:
        return LAB if group.bed else OTHER  # its own policy is its own
    pid = e.ppid
    for _ in range(MAX_CHAIN):
        if pid <= 1 or pid in a.adopters:
            return UNKNOWN  # an orphan's adopter: whose it was, it does not say
        known = a.tasks.get(pid)
        if known is not None:
            return LAB if known.bed else OTHER
        if pid not in parents:
            break
        pid = parents[pid]
    return UNKNOWN


def others_share(a: Snapshot, b: Snapshot, ncpus: int, gone: Iterable[Gone] = ()) -> float:
    """Other tasks' run time, each counted once, as a share (percent) of all
    ``ncpus`` CPUs over the window: the figure for a study whose tasks are
    not pinned (they run wherever the scheduler puts them). ``gone``: the
    threads that ended inside the window (:func:`resolve_ended`), whose run
    time the second snapshot no longer shows."""
    window = b.t - a.t
    if window <= 0 or ncpus <= 0:
        return 0.0
    other = sum(run for t, run, _ in _deltas(a, b) if not t.bed and not t.idle)
    other += sum(g.run_ns for g in gone if g.other)
    return 100.0 * other / 1e9 / (window * ncpus)


def bed_wait_share(a: Snapshot, b: Snapshot, ncpus: int, gone: Iterable[Gone] = ()) -> float:
    """The bed's own tasks' wait for a CPU (runnable, not running), summed over
    them, as a share (percent) of all ``ncpus`` CPUs over the window: the
    threads alive at its end from their schedstat, those that ended inside it
    from the kernel's report of their exit (``gone``: :func:`resolve_ended`).

    Whatever other tasks did, they delayed the bed by no more than this: a
    task kept from a CPU it wanted is counted as waiting from the moment it
    is runnable until it runs. It counts the bed's waits for its own tasks
    too (on an idle host), so it is an upper bound on the delay other tasks
    caused, as :func:`others_share` is another; a study judges the smaller
    (:func:`displaced_share`). An orphan born inside the window counts
    (:func:`orphan`). A thread of the ``SCHED_IDLE`` policy waits
    by design whenever anything else runs (the virtual RFC 2544 bed's QEMU
    beside the other studies): its wait delays nothing measured, and is not
    counted."""
    window = b.t - a.t
    if window <= 0 or ncpus <= 0:
        return 0.0
    wait = sum(w for t, _, w in _deltas(a, b) if (t.bed or orphan(a, t)) and not t.idle)
    wait += sum(g.wait_ns for g in gone if g.lab)
    return 100.0 * wait / 1e9 / (window * ncpus)


def orphan(a: Snapshot, t: Task) -> bool:
    """Whether ``t``, alive at a window's end and not the bed's, is of a
    process born inside the window whose parent is an adopter (``init``, or
    the bed's root's ancestors, a subreaper among them: ``a.adopters``): an
    orphan may be the bed's, so its wait counts as the bed's too (it counts
    as other tasks' run time already). A process an adopter started itself
    counts so too: an upper bound stays one."""
    return not t.bed and t.pid not in a.tasks and (t.ppid in a.adopters or 0 < t.ppid <= 1)


def counts_waits(a: Snapshot, b: Snapshot, gone: Iterable[Gone] = ()) -> bool:
    """Whether this kernel counts threads' waits: a kernel that keeps
    ``schedstat`` but counts waits only with delay accounting on (before
    5.14, without ``CONFIG_SCHEDSTATS``) shows every wait as 0. It does not
    where the bed's threads (those that ended inside the window too) ran
    for a tenth of a second and not one of them waited at all; on a kernel
    that counts, a bed that busy has waited somewhere."""
    moved = [(run, wait) for t, run, wait in _deltas(a, b) if t.bed]
    moved += [(g.run_ns, g.wait_ns) for g in gone if g.owner == LAB]
    return any(wait for _, wait in moved) or sum(run for run, _ in moved) < 100_000_000


def displaced_share(others_pct: float, bed_wait_pct: float) -> float:
    """The most CPU time (percent of all CPUs) other tasks can have taken
    from the bed: no more than they ran (``others_pct``), and no more than the
    bed waited for a CPU (``bed_wait_pct``). Other tasks that ran only where
    the bed did not want to run took nothing from it."""
    return min(others_pct, bed_wait_pct)


def top_bed_waits(a: Snapshot, b: Snapshot, gone: Iterable[Gone] = (),
                  n: int = 3) -> Tuple[Tuple[str, float], ...]:
    """The lab's own threads that waited longest for a CPU between two
    snapshots, those that ended in between included (:func:`top_tasks`,
    over their waits)."""
    return top_tasks([(t.name or "?", wait) for t, _, wait in _deltas(a, b)
                      if t.bed and not t.idle and wait]
                     + [(g.name, g.wait_ns) for g in gone if g.lab and g.wait_ns], n)


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
        exits.drain()
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
