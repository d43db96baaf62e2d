"""A noisy neighbour on demand: processes that take CPU time in bursts, as the
other programs of a busy laptop do, for ``nslab bench verdicts --noise``.

A profile is data: a list of hogs, each with the CPU it is pinned to (or none:
the scheduler places it), the share of that CPU it takes over time (its duty)
and the range its bursts' lengths are drawn from, and whether it preempts:
a hog at ``SCHED_FIFO`` takes its CPU away for each whole burst, which no
thread of the lab can cut short, as a hypervisor's steal does (the
``pieces-*`` profiles: the same quarter of each CPU in 1 ms or 40 ms pieces,
which :mod:`nslab.traffic.lateness` tells apart). Each hog is one process,
``python -I -m nslab.traffic.noisegen hog ...``, a child of the benchmark, stopped with
it; the random bursts come from a seed, so a profile's noise can be replayed.

A hog can also be a program we did not write (``command``): the ``tools``
profile runs two ``sha256sum /dev/zero`` and one ``xz -9 -T1`` compressing
``/dev/urandom``, a neighbour that also works the caches and the memory bus,
which no weight and no count of run time sees.
"""
from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import LabError


@dataclass(frozen=True)
class Hog:
    """One noisy process: ``duty`` of a CPU in bursts of ``burst_ms`` (low, high)."""

    cpu: Optional[int]
    duty: float
    burst_ms: Tuple[float, float]
    #: at ``SCHED_FIFO`` (priority :data:`PREEMPT_PRIORITY`): each burst
    #: holds its CPU whole; needs root, and a pinned CPU
    preempt: bool = False
    #: a program to run instead of the Python hog (its own duty: ``duty`` 1,
    #: no pinning), its output thrown away; and the file its input is read from
    command: Tuple[str, ...] = ()
    stdin: Optional[str] = None

    def __post_init__(self) -> None:
        if not 0 < self.duty <= 1:
            raise ValueError(f"duty {self.duty}: above 0, at most 1")
        lo, hi = self.burst_ms
        if not 0 < lo <= hi <= 1000:
            raise ValueError(f"bursts {self.burst_ms} ms: 0 < low <= high <= 1000")
        if self.preempt and (self.cpu is None or self.duty > 0.5):
            raise ValueError("a preempting hog is pinned to a CPU and takes at most half of it")
        if self.command and (self.cpu is not None or self.duty != 1 or self.preempt):
            raise ValueError("a program's hog runs as the program does: unpinned, duty 1, "
                             "at the normal policy")


#: A preempting hog's ``SCHED_FIFO`` priority: above the lab's samplers (10)
#: and every thread the lab runs at ``SCHED_OTHER``
PREEMPT_PRIORITY = 50


#: The profiles ``--noise`` knows. Bursts of a few to tens of milliseconds,
#: up to half of a CPU, as the issue describes a laptop's other programs, and
#: two loops busy all the time.
PROFILES: Dict[str, List[Hog]] = {
    "idle": [],
    # half of the DUT's CPU (CPU1 on the RFC 2544 bed), bursts of 2-40 ms
    "dut-bursts": [Hog(1, 0.5, (2.0, 40.0))],
    # half of each CPU, bursts of 2-40 ms
    "both-bursts": [Hog(0, 0.5, (2.0, 40.0)), Hog(1, 0.5, (2.0, 40.0))],
    # two unpinned processes, a quarter of a CPU each, bursts of 5-80 ms
    "roaming": [Hog(None, 0.25, (5.0, 80.0)), Hog(None, 0.25, (5.0, 80.0))],
    # two unpinned busy loops at the normal policy, busy all the time: the
    # neighbour of the issue's own feasibility test ("busy loops on both host
    # CPUs"), and what anyone's first noisy neighbour is
    "busy": [Hog(None, 1.0, (100.0, 100.0)), Hog(None, 1.0, (100.0, 100.0))],
    # a quarter of each CPU taken whole (SCHED_FIFO), 1 ms at a time: the
    # shares of a busy host, in pieces no timer notices
    "pieces-1ms": [Hog(0, 0.25, (1.0, 1.0), preempt=True), Hog(1, 0.25, (1.0, 1.0), preempt=True)],
    # the same quarter, 40 ms at a time: every timer on the CPU is late by that
    "pieces-40ms": [Hog(0, 0.25, (40.0, 40.0), preempt=True),
                    Hog(1, 0.25, (40.0, 40.0), preempt=True)],
    # programs we did not write: two hashing a stream of zeros (the CPU) and
    # one compressing random bytes at its heaviest setting (the caches and
    # the memory bus too), all at the normal policy
    "tools": [Hog(None, 1.0, (100.0, 100.0), command=("sha256sum", "/dev/zero")),
              Hog(None, 1.0, (100.0, 100.0), command=("sha256sum", "/dev/zero")),
              Hog(None, 1.0, (100.0, 100.0), command=("xz", "-9", "-T1", "-c"),
                  stdin="/dev/urandom")],
}


def profile(name: str) -> List[Hog]:
    """The hogs of a named profile (InputError-free: ValueError names the known ones)."""
    if name not in PROFILES:
        raise ValueError(f"unknown noise profile {name!r} (known: {', '.join(PROFILES)})")
    return PROFILES[name]


def schedule(hog: Hog, rng: random.Random) -> Tuple[float, float]:
    """One cycle: (seconds busy, seconds asleep), the busy share ``duty`` on average."""
    busy = rng.uniform(*hog.burst_ms) / 1000.0
    return busy, busy * (1 - hog.duty) / hog.duty


class Noise:
    """Context manager: the profile's hogs run while the block runs, and stop
    (SIGTERM, then SIGKILL) when it ends, however it ends."""

    def __init__(self, hogs: Sequence[Hog], seed: int = 1) -> None:
        self.hogs, self.seed = list(hogs), seed
        self.procs: List[subprocess.Popen] = []

    def __enter__(self) -> "Noise":
        try:
            for i, h in enumerate(self.hogs):
                if h.command:
                    self.procs.append(_program(h))
                    continue
                argv = [sys.executable, "-I", "-m", "nslab.traffic.noisegen", "hog", "--duty", str(h.duty),
                        "--burst-ms", f"{h.burst_ms[0]}:{h.burst_ms[1]}",
                        "--seed", str(self.seed * 1000 + i)]
                if h.cpu is not None:
                    argv += ["--cpu", str(h.cpu)]
                if h.preempt:
                    argv += ["--preempt"]
                self.procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL))
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _program(hog: Hog) -> subprocess.Popen:
    """A program's hog, started (a missing program is named, with its package's
    set-up: ``make setup``)."""
    try:
        if hog.stdin is None:
            return subprocess.Popen(list(hog.command), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL)
        with open(hog.stdin, "rb") as src:
            return subprocess.Popen(list(hog.command), stdin=src, stdout=subprocess.DEVNULL)
    except FileNotFoundError:
        raise LabError(f"the noise program {hog.command[0]!r} is not installed "
                         "(make setup installs it)") from None


def run_hog(hog: Hog, seed: int) -> None:
    """Busy-wait and sleep in the hog's cycles until SIGTERM."""
    if hog.cpu is not None:
        os.sched_setaffinity(0, {hog.cpu})
    if hog.preempt:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(PREEMPT_PRIORITY))
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    rng = random.Random(seed)
    while not stop:
        busy, idle = schedule(hog, rng)
        t = time.monotonic()
        while time.monotonic() - t < busy:
            pass
        if idle > 0:
            time.sleep(idle)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nslab.traffic.noisegen")
    sub = ap.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("hog", help="one noisy process")
    h.add_argument("--cpu", type=int, default=None)
    h.add_argument("--duty", type=float, required=True)
    h.add_argument("--burst-ms", required=True, help="LOW:HIGH")
    h.add_argument("--seed", type=int, default=1)
    h.add_argument("--preempt", action="store_true", help="at SCHED_FIFO (root)")
    a = ap.parse_args(argv)
    lo, _, hi = a.burst_ms.partition(":")
    run_hog(Hog(a.cpu, a.duty, (float(lo), float(hi or lo)), a.preempt), a.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
