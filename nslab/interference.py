"""Host interference: how much CPU time other tasks took on the bed's CPUs
during a trial, from the scheduler's own accounting (not the tick-sampled busy
counters).

A measurement made while something else ran on the DUT's CPU (a browser, an
update, a neighbour's build) is a measurement of the neighbour as much as of the
DUT. Every trial that asks for it gets, per CPU of the bed, the milliseconds
that tasks other than the bed's own ran there, and the milliseconds the bed's
own tasks waited for a CPU; the study re-runs a trial above its threshold and
excludes it, with the reason, if it stays disturbed.

Two sources, the exact one first:

* ``/proc/schedstat`` (``CONFIG_SCHEDSTATS``, on in Debian's kernels): per
  CPU, the nanoseconds every task ran there (``rq_cpu_time``). Other tasks'
  time = that - the bed's pinned tasks' time.
* Without it (a kernel built without schedstats): every thread's
  ``/proc/<pid>/task/<tid>/schedstat`` (``CONFIG_SCHED_INFO``), summed over
  the threads that are not the bed's and may run on that CPU (their affinity
  includes it). An upper bound: a thread allowed on two CPUs is counted on
  both, and a task born and gone within the trial is missed. The record says
  which source it came from.

The bed's own tasks: this process and its descendants (the harness pins itself
and every tool it starts), the kernel's softirq and NAPI threads, and any pid
the caller names (ovs-vswitchd).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Iterable, List, Mapping, Optional, Set, Tuple

PROC = "/proc"

#: Kernel threads that do the bed's own packet work (softirq, threaded NAPI).
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


def parse_cpu_schedstat(text: str) -> Dict[int, SchedTimes]:
    """``/proc/schedstat`` (versions 15-17): per ``cpuN`` line, the 7th and 8th
    numbers are the time tasks ran on that CPU and waited for it (ns)."""
    out: Dict[int, SchedTimes] = {}
    version = None
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "version":
            version = int(parts[1])
        elif parts[0].startswith("cpu") and parts[0][3:].isdigit():
            if len(parts) < 10:
                raise ValueError(f"schedstat: {parts[0]}: {len(parts) - 1} fields, expected 9")
            out[int(parts[0][3:])] = SchedTimes(int(parts[7]), int(parts[8]))
    if version is not None and not 15 <= version <= 17:
        raise ValueError(f"schedstat version {version}: only 15 to 17 are known")
    return out


@dataclass
class Task:
    """One thread at one moment: its times, the CPUs it may run on, whether it
    is the bed's."""

    times: SchedTimes
    cpus: FrozenSet[int]
    bed: bool


@dataclass
class Snapshot:
    """The scheduler's counters at one moment."""

    t: float
    cpus: Dict[int, SchedTimes] = field(default_factory=dict)  # empty: no /proc/schedstat
    tasks: Dict[int, Task] = field(default_factory=dict)


@dataclass(frozen=True)
class CpuInterference:
    """One CPU over one window: other tasks' run time and the bed's wait."""

    cpu: int
    window_s: float
    other_ms: float
    bed_wait_ms: float
    source: str  # "schedstat" or "task scan (upper bound)"

    @property
    def other_pct(self) -> float:
        """Other tasks' time as a share of the window, percent."""
        return 100.0 * self.other_ms / 1000.0 / self.window_s if self.window_s > 0 else 0.0

    def as_dict(self) -> Dict[str, object]:
        return {"cpu": self.cpu, "window_s": round(self.window_s, 4),
                "other_ms": round(self.other_ms, 3), "other_pct": round(self.other_pct, 2),
                "bed_wait_ms": round(self.bed_wait_ms, 3), "source": self.source}


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

    def snapshot(self) -> Snapshot:
        snap = Snapshot(time.monotonic())
        text = _read(f"{self.proc}/schedstat")
        if text is not None:
            snap.cpus = parse_cpu_schedstat(text)
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
                if not is_bed:
                    comm = (_read(f"{self.proc}/{pid}/task/{t}/comm") or "").strip()
                    is_bed = comm.startswith(BED_KTHREAD_PREFIXES)
                snap.tasks[tid] = Task(times, allowed, is_bed)
        return snap

    def _affinity(self, pid: int, tid: str) -> FrozenSet[int]:
        """The CPUs a thread of a captured /proc tree may run on (its status)."""
        text = _read(f"{self.proc}/{pid}/task/{tid}/status") or ""
        for line in text.splitlines():
            if line.startswith("Cpus_allowed_list:"):
                return frozenset(parse_cpu_list(line.split(":", 1)[1]))
        raise ValueError("no Cpus_allowed_list")


def parse_cpu_list(text: str) -> Set[int]:
    """"0-2,5" -> {0, 1, 2, 5}."""
    out: Set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def account(a: Snapshot, b: Snapshot, cpus: Iterable[int]) -> Dict[int, CpuInterference]:
    """Per CPU of ``cpus``, other tasks' run time and the bed's wait between
    two snapshots (see the module's docstring for the two sources)."""
    window = b.t - a.t
    both = [(a.tasks[tid], b.tasks[tid]) for tid in b.tasks if tid in a.tasks]
    out: Dict[int, CpuInterference] = {}
    for cpu in cpus:
        bed_wait = sum(max(0, y.times.wait_ns - x.times.wait_ns) for x, y in both
                       if y.bed and cpu in y.cpus and len(y.cpus) == 1)
        if cpu in a.cpus and cpu in b.cpus:
            total = b.cpus[cpu].run_ns - a.cpus[cpu].run_ns
            bed_run = sum(max(0, y.times.run_ns - x.times.run_ns) for x, y in both
                          if y.bed and y.cpus == frozenset({cpu}))
            other, source = max(0, total - bed_run), "schedstat"
        else:
            other = sum(max(0, y.times.run_ns - x.times.run_ns) for x, y in both
                        if not y.bed and cpu in y.cpus)
            source = "task scan (upper bound)"
        out[cpu] = CpuInterference(cpu, window, other / 1e6, bed_wait / 1e6, source)
    return out


def worst(found: Mapping[int, CpuInterference]) -> Tuple[Optional[int], float]:
    """The CPU with the largest share of other tasks' time, and that share (%)."""
    if not found:
        return None, 0.0
    cpu = max(found, key=lambda c: found[c].other_pct)
    return cpu, found[cpu].other_pct
