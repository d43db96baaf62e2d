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
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional

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


@dataclass
class Steadiness:
    """How steady some CPUs ran over a short probe (:func:`steadiness`):
    ``rounds`` readings of every CPU, of which ``slow`` had one CPU more than
    ``threshold_pct`` slower than its fastest in the probe, and the worst
    slowdown seen."""

    cpus: List[int]
    seconds: float
    rounds: int
    slow: int
    worst_pct: float
    threshold_pct: float

    @property
    def slow_share(self) -> float:
        """The share of rounds with a CPU over the threshold."""
        return self.slow / self.rounds if self.rounds else 0.0

    def left_out(self, reruns: int) -> float:
        """The share of trials a rule like RFC 2544's would leave out: a try
        is disturbed when either of its two readings (at its start and its
        end) is slow, and left out when it and its ``reruns`` re-runs all are.
        A lower bound: slow stretches last seconds, so a re-run soon after a
        slow try is more often slow too than this (independent) figure says."""
        per_try = 1.0 - (1.0 - self.slow_share) ** 2
        return per_try ** (1 + max(0, reruns))


def steadiness(cpus: Iterable[int], seconds: float = 3.0, threshold_pct: float = 10.0,
               every_s: float = 0.05, watch: Optional[SpeedWatch] = None,
               clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep) -> Steadiness:
    """Read the speed of ``cpus`` every ``every_s`` for ``seconds`` (each
    reading some 10 ms of one thread's work: a probe of 3 s keeps a CPU busy
    well under a second), then judge each round against each CPU's fastest in
    the probe, as a study judges a trial against the fastest in its run."""
    watch = watch or SpeedWatch(cpus)
    rounds: List[Dict[int, float]] = []
    end = clock() + seconds
    while not rounds or clock() < end:
        rounds.append(watch.read())
        sleep(every_s)
    worst = [max(slowdown_pct(r[c], watch.fastest[c]) for c in watch.cpus) for r in rounds]
    return Steadiness(list(watch.cpus), seconds, len(rounds),
                      sum(1 for w in worst if w > threshold_pct), max(worst), threshold_pct)
