"""How fast each of the bed's CPUs runs right now: a fixed piece of work,
timed on it.

A guest cannot see its host. When the hypervisor gives a vCPU less (another
guest on the same core or on its SMT sibling, a lower clock), every task in
the guest runs slower, and nothing in ``/proc`` says so: the tasks' own run
time grows with the wall clock, and steal time stays at zero. Measured on
the development VM (2 vCPUs, idle, steal 0 throughout): the same 60,000-step
loop took 2.3 ms, and for stretches of one to tens of seconds up to 4.3 ms;
its thread CPU time grew with it; 3 s capacity readings of one RFC 2544
bridge, 20 s apart, read 69.6k, 68.8k and 61.6k frames/s.

:class:`SpeedWatch` times the loop on each CPU (the calling thread moves
there and back) and keeps the fastest time seen in the run: a reading's
slowdown is how much longer the loop took than that. The work is pure Python
arithmetic, with no memory traffic or system calls, so it measures the CPU's
speed, not the kernel's; each reading is the fastest of a few tries, so one
interrupt does not make a CPU look slow.
"""
from __future__ import annotations

import math
import os
import time
from typing import Dict, Iterable

#: Steps of the timed loop: about 2.3 ms on the development VM at full speed.
PROBE_STEPS = 60_000
#: Tries per reading (its time is the fastest of them).
PROBE_TRIES = 2


def loop_ms(steps: int = PROBE_STEPS) -> float:
    """CPU milliseconds the calling thread takes for ``steps`` of fixed
    arithmetic: its own run time, so another task that preempts it adds
    nothing (that is :mod:`~nslab.traffic.interference`'s to count), while a
    host that gives the vCPU less adds all of it (the guest books that time
    to whatever it thinks was running)."""
    t = time.thread_time()
    x = 0
    for i in range(steps):
        x += i * i
    return (time.thread_time() - t) * 1000.0


def probe_ms(cpu: int, steps: int = PROBE_STEPS, tries: int = PROBE_TRIES) -> float:
    """The fastest of ``tries`` timings of the loop on ``cpu`` (the calling
    thread runs there meanwhile and gets its own CPUs back after)."""
    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        return min(loop_ms(steps) for _ in range(max(1, tries)))
    finally:
        os.sched_setaffinity(0, mine)


def slowdown_pct(ms: float, fastest: float) -> float:
    """How much longer than ``fastest`` a reading of ``ms`` took, percent (0
    when it is the fastest, or when there is no reference yet)."""
    if not (math.isfinite(fastest) and fastest > 0):
        return 0.0
    return max(0.0, 100.0 * (ms / fastest - 1.0))


class SpeedWatch:
    """The speed of some CPUs over a run: :meth:`read` times each, and keeps
    the fastest time seen per CPU; :meth:`slowdown` of a trial's readings is
    the worst of them against that fastest time."""

    def __init__(self, cpus: Iterable[int]) -> None:
        self.cpus = sorted(set(cpus))
        self.fastest: Dict[int, float] = {c: math.inf for c in self.cpus}

    def read(self) -> Dict[int, float]:
        """One reading per CPU, milliseconds (the fastest times are updated)."""
        got = {c: probe_ms(c) for c in self.cpus}
        for c, ms in got.items():
            self.fastest[c] = min(self.fastest[c], ms)
        return got

    def prime(self, readings: int = 5) -> None:
        """A few readings, so the first trial is judged against more than itself."""
        for _ in range(readings):
            self.read()

    def slowdown(self, cpu: int, *readings: Dict[int, float]) -> float:
        """The most ``cpu`` ran slower than its fastest in any of ``readings``,
        percent."""
        return max((slowdown_pct(r[cpu], self.fastest[cpu]) for r in readings if cpu in r),
                   default=0.0)
