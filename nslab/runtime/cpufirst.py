"""The CPU first for a study's measurements (on unless turned off: ``nslab
--no-cpu-first`` or ``NSLAB_CPU_FIRST=0``): while a study measures on the
host, its process, and every process it starts (labs, daemons, traffic),
is in a cpu cgroup of its own, weighted :data:`WEIGHT` times an ordinary
task (cgroup v1 ``cpu.shares``, v2 ``cpu.weight``).

Why: a host study's figures are rates and timers the host's CPUs run, and
beside tasks that never sleep the kernel shares each CPU among runnable
tasks alike (measured here: two processes of a lab beside two busy loops at
nice 0 got 4.2 of 8.3 CPU-seconds; in a cgroup at 256 times the weight,
8.15 of 8.2). So weighted, the lab's tasks run whenever they are runnable,
and other tasks get the time it leaves. What other tasks still take is
measured, as before, for every point (:mod:`nslab.traffic.interference`),
and the verdicts judge it; this only makes that rarer.

Not done (the run measures as the equal of other tasks, and says why in its
log and provenance): where turned off; without root; when the caller runs at ``SCHED_IDLE``
(``chrt --idle 0``: it asked to take only time no other task wants);; when no cpu controller is
mounted where nslab can make a group (a v2 hierarchy whose root does not
delegate ``cpu``: enabling it is a change to the host nslab does not make);
inside such a group already (``nslab reproduce`` runs each host study in
its own).

The group is named after the run (``nslab-<run id>``), at the root of the
cpu hierarchy. When the study ends, every process still in it (a daemon a
lab started and left running) is moved back to where nslab was, and the
group is removed; after a crash, ``nslab clean`` removes any such group
that no process is in (:func:`remove_empty`).

The real-time counter samplers (``SCHED_FIFO``: :mod:`nslab.traffic.sampler`)
need no weight, and in a v1 group they would share the group's own small
real-time budget (:data:`RT_RUNTIME_US` of each second), past which the
kernel stops every real-time task in the group until the second ends:
each is moved back where nslab was as it starts (:func:`outside`), so it
runs as it does without the CPU first.
"""
from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional

log = logging.getLogger(__name__)

#: Times an ordinary task's weight that the study's group gets.
WEIGHT = 100
#: cgroup v1's weight of an ordinary task (``cpu.shares``), and v2's (``cpu.weight``).
V1_DEFAULT, V2_DEFAULT = 1024, 100
#: Microseconds of each second the group's real-time tasks may run (v1 with
#: real-time group scheduling: a group has none of its own by default).
RT_RUNTIME_US = 100_000
PREFIX = "nslab-"
FIRST_ENV = "NSLAB_CPU_FIRST"


@dataclass(frozen=True)
class Hierarchy:
    """Where the cpu controller is: its mount point and cgroup version."""

    root: str
    version: int


def hierarchy(mountinfo: str = "/proc/self/mountinfo") -> Optional[Hierarchy]:
    """The cpu controller's hierarchy: a v1 ``cgroup`` mount whose options
    name ``cpu``, else the v2 ``cgroup2`` mount if its root delegates ``cpu``
    to its children (``cgroup.subtree_control``); None without either."""
    v2 = None
    try:
        with open(mountinfo) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        pre, sep, post = line.partition(" - ")
        if not sep:
            continue
        fields, rest = pre.split(), post.split()
        if len(fields) < 5 or len(rest) < 3:
            continue
        point, fstype, opts = fields[4], rest[0], rest[2].split(",")
        if fstype == "cgroup" and "cpu" in opts:
            return Hierarchy(point, 1)
        if fstype == "cgroup2" and v2 is None:
            v2 = point
    if v2 is not None:
        try:
            with open(os.path.join(v2, "cgroup.subtree_control")) as f:
                if "cpu" in f.read().split():
                    return Hierarchy(v2, 2)
        except OSError:
            pass
    return None


def current(h: Hierarchy, pid: int = 0) -> str:
    """The cgroup (a path from the hierarchy's root, ``/`` first) ``pid``
    (0: this process) is in, in ``h``; ``/`` if it cannot be read."""
    try:
        with open(f"/proc/{pid or 'self'}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return "/"
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if (h.version == 2 and controllers == "") or \
                (h.version == 1 and "cpu" in controllers.split(",")):
            return path or "/"
    return "/"


def why_not(h: Optional[Hierarchy]) -> Optional[str]:
    """Why a study here measures as the equal of other tasks (None: it gets
    the CPU first)."""
    if os.environ.get(FIRST_ENV, "") == "0":
        return f"turned off (nslab --no-cpu-first, or {FIRST_ENV}=0)"
    if os.geteuid() != 0:
        return "not root"
    if os.sched_getscheduler(0) == os.SCHED_IDLE:
        return "nslab runs at the idle policy, as it was asked to"
    if h is None:
        return "no cpu cgroup controller nslab may use here"
    if os.path.basename(current(h)).startswith(PREFIX):
        return "already in a group of its own"
    return None


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _procs(group: str) -> List[int]:
    try:
        with open(os.path.join(group, "cgroup.procs")) as f:
            return [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return []


#: Where this process was before it entered its run's group (None outside
#: :func:`cpu_first`).
_FORMER: Optional[str] = None


def outside(pid: int) -> bool:
    """Move ``pid`` (a process this one started in the block of
    :func:`cpu_first`) out of the run's group, back where nslab was: for the
    real-time samplers. False where there is no group, or ``pid`` ended."""
    if _FORMER is None:
        return False
    try:
        _write(os.path.join(_FORMER, "cgroup.procs"), str(pid))
    except OSError:
        return False
    return True


@contextlib.contextmanager
def cpu_first(run_id: str) -> Iterator[Dict[str, Any]]:
    """This process, and what it starts in the block, in a cpu cgroup of the
    run's own at :data:`WEIGHT` times an ordinary task's weight; yields what
    the provenance keeps (``{"first": False, "why": ...}`` where it is not
    done: :func:`why_not`, or a write the kernel refused)."""
    h = hierarchy()
    why = why_not(h)
    if why is not None or h is None:
        log.info("measuring as the equal of other tasks on the CPUs: %s", why)
        yield {"first": False, "why": why}
        return
    former = os.path.join(h.root, current(h).lstrip("/"))
    group = os.path.join(h.root, PREFIX + run_id)
    weight = (V1_DEFAULT if h.version == 1 else V2_DEFAULT) * WEIGHT
    try:
        os.mkdir(group, 0o755)
    except OSError as e:
        log.warning("measuring as the equal of other tasks on the CPUs: cannot make %s (%s)",
                    group, e)
        yield {"first": False, "why": f"cannot make {group}: {e.strerror}"}
        return
    try:
        _write(os.path.join(group, "cpu.shares" if h.version == 1 else "cpu.weight"),
               str(weight))
        rt = os.path.join(group, "cpu.rt_runtime_us")
        if h.version == 1 and os.path.exists(rt):
            try:
                _write(rt, str(RT_RUNTIME_US))
            except OSError as e:  # the parent's budget is spoken for
                log.warning("%s: no real-time budget (%s): the lateness samplers run at "
                            "the normal policy", group, e.strerror)
        _write(os.path.join(group, "cgroup.procs"), str(os.getpid()))
    except OSError as e:
        _remove(group, former)
        log.warning("measuring as the equal of other tasks on the CPUs: %s refused (%s)",
                    group, e.strerror)
        yield {"first": False, "why": f"{group} refused: {e.strerror}"}
        return
    log.info("measuring with the CPU first: this run's processes are in %s at %d times an "
             "ordinary task's weight (nslab --cpu-first)", group, WEIGHT)
    global _FORMER
    _FORMER = former
    try:
        yield {"first": True, "cgroup": group, "version": h.version, "weight": weight,
               "times_ordinary": WEIGHT}
    finally:
        _FORMER = None
        _remove(group, former)


def _remove(group: str, back: str, tries: int = 50) -> None:
    """Move every process in ``group`` to ``back``, then remove ``group``
    (a process that is ending leaves it a moment later: tried ``tries``
    times, 0.1 s apart; ``nslab clean`` removes it later if it stays)."""
    for pid in _procs(group):
        try:
            _write(os.path.join(back, "cgroup.procs"), str(pid))
        except OSError:
            pass  # it ended meanwhile
    for i in range(tries):
        try:
            os.rmdir(group)
            return
        except FileNotFoundError:
            return
        except OSError:
            if i + 1 < tries:
                time.sleep(0.1)
    log.warning("%s could not be removed (processes still in it: %s); nslab clean removes "
                "it once they end", group, _procs(group)[:5])


def groups() -> Dict[str, str]:
    """Every run's group here: run id -> path."""
    h = hierarchy()
    if h is None:
        return {}
    try:
        names = os.listdir(h.root)
    except OSError:
        return {}
    return {n[len(PREFIX):]: os.path.join(h.root, n) for n in sorted(names)
            if n.startswith(PREFIX) and os.path.isdir(os.path.join(h.root, n))}


def remove_empty(run_id: Optional[str] = None, dry_run: bool = False) -> Dict[str, str]:
    """Remove the groups (of ``run_id``, or of every run) no process is in:
    run id -> what was (or would be) removed. A live run's own process is in
    its group, so a live run's group is never empty."""
    out: Dict[str, str] = {}
    for rid, path in groups().items():
        if (run_id is not None and rid != run_id) or _procs(path):
            continue
        if not dry_run:
            try:
                os.rmdir(path)
            except OSError:
                continue  # a process entered it meanwhile, or it is gone
        out[rid] = f"cpu cgroup {path}"
    return out
