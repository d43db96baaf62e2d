"""What every benchmark shares: timing a command, saving the result as JSON.

The benchmarks themselves live with what they measure (``nslab.bench`` entry
points: topologies, studies) and print ratios measured side by side in one run.
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
import time
from typing import Dict, List, Optional

from ..errors import CapabilityError
from ..safeio import make_dirs, write_atomic

log = logging.getLogger(__name__)


def mem_available_kb() -> int:
    """``MemAvailable`` from ``/proc/meminfo`` in KiB."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    raise OSError("no MemAvailable in /proc/meminfo")


class PeakMemory:
    """Context manager: the largest drop of ``MemAvailable`` (KiB) below the
    highest value seen since entry, sampled every ``interval`` s while the block
    runs and once more as it ends, so a block shorter than one interval is
    measured too (kernel objects, daemons and the command's own process all count).

    The kernel frees a torn-down lab's namespaces lazily (its ``cleanup_net``
    work, after an RCU grace period), so right after another lab's teardown
    ``MemAvailable`` keeps rising for a while: measured from the entry value,
    what the block took could then read as nothing (a Debian 13 CI run read 0
    KiB for 64 namespaces built right after a lab's teardown). Hence the base
    is taken once ``MemAvailable`` has settled (at most ``settle_s`` s: within
    ``SETTLE_KB`` over ``SETTLE_WINDOW_S``), and a drop counts from the highest
    reading since (memory freed by others during the block is not a credit).
    """

    SETTLE_KB = 512
    SETTLE_WINDOW_S = 0.3

    def __init__(self, interval: float = 0.02, settle_s: float = 2.0) -> None:
        self.interval = interval
        self.settle_s = settle_s
        self.peak_kb = 0

    def __enter__(self) -> "PeakMemory":
        self._top = self._settled()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _settled(self) -> int:
        """``MemAvailable`` once it stops moving, or after ``settle_s`` s."""
        t0 = time.monotonic()
        readings = [(t0, mem_available_kb())]
        while time.monotonic() - t0 < self.settle_s:
            time.sleep(0.05)
            now = time.monotonic()
            readings.append((now, mem_available_kb()))
            recent = [v for t, v in readings if now - t <= self.SETTLE_WINDOW_S]
            if (now - t0 >= self.SETTLE_WINDOW_S
                    and max(recent) - min(recent) <= self.SETTLE_KB):
                break
        return readings[-1][1]

    def _read(self) -> None:
        avail = mem_available_kb()
        self._top = max(self._top, avail)
        self.peak_kb = max(self.peak_kb, self._top - avail)

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self._read()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._read()


def time_command(argv: List[str], cwd: Optional[str] = None,
                 memory: Optional[List[int]] = None) -> float:
    """Seconds a command takes to run to completion (raise if it fails).

    With ``memory``, the peak drop of available memory (KiB) while it ran is
    appended to it."""
    t0 = time.monotonic()
    with PeakMemory() as peak:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=cwd)
    dt = time.monotonic() - t0
    if memory is not None:
        memory.append(peak.peak_kb)
    if res.returncode != 0:
        tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or ["?"]
        raise CapabilityError(f"benchmark command failed: {' '.join(argv)}: {tail[0]}")
    return dt


#: A busy loop, pinned to the CPU given, run from the CLOCK_MONOTONIC time
#: given (so that the loops' windows coincide, after every one has started)
#: for the seconds given, at its parent's policy: the share of that wall
#: time it got, on stdout.
_PROBE = (
    "import os, sys, time\n"
    "os.sched_setaffinity(0, {int(sys.argv[1])})\n"
    "time.sleep(max(0.0, float(sys.argv[2]) - time.monotonic()))\n"
    "t0, c0 = time.monotonic(), time.process_time()\n"
    "while time.monotonic() - t0 < float(sys.argv[3]): pass\n"
    "print((time.process_time() - c0) / (time.monotonic() - t0))\n")
#: Seconds each loop has to start before the windows open.
_PROBE_START_S = 0.15


def cpu_share(window: float = 0.2) -> float:
    """The smallest share of the wall time (0-1) that a busy loop got over the
    same ``window`` seconds, one loop pinned to each CPU this process may
    use, at its policy: what a timed run started now would get of the CPUs.
    Another task that wants a CPU takes part of it (the kernel's own threads
    and softirqs too, and a hypervisor's steal); a task of the ``SCHED_IDLE``
    policy yields it. A loop that could not run on its CPU (one gone
    offline) is left out; with none, 0.0."""
    import sys
    start = time.monotonic() + _PROBE_START_S
    loops: List["subprocess.Popen[str]"] = []
    shares = []
    try:
        for cpu in sorted(os.sched_getaffinity(0)):
            loops.append(subprocess.Popen(
                [sys.executable, "-I", "-c", _PROBE, str(cpu), repr(start), f"{window:g}"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
        for p in loops:
            try:
                out, _ = p.communicate(timeout=_PROBE_START_S + window + 30)
                shares.append(float(out))
            except (subprocess.TimeoutExpired, ValueError):
                continue
    finally:
        for p in loops:
            if p.poll() is None:
                p.kill()
            p.wait()
    return min(shares, default=0.0)


def quiesce(busy_below: float = 0.10, window: float = 0.2, timeout: float = 15.0) -> float:
    """Wait until the machine's CPUs are idle (a busy loop on each gets all
    but ``busy_below`` of a ``window``: :func:`cpu_share`), at most
    ``timeout`` seconds; returns the seconds waited, and logs a warning
    with the share it last saw if it gave up.

    A benchmark calls it before each timed run: the kernel finishes a
    namespace's teardown after ``ip netns del`` has returned, and a thousand
    hosts' IPv6 start-up keeps a CPU busy for seconds after a build, so the
    next run measured right away would pay for the one before.

    Tasks of the ``SCHED_IDLE`` policy give way to the loops (``make test``
    runs its guests and set-up so beside the labs): they do not make it
    wait. They are not free: a guest under TCG beside a timed run still
    costs it some of the caches and memory bandwidth. A CPU quota (a
    container's ``cpu.max``) or a hypervisor that steals time keeps the
    share down for good: it waits out the timeout each time, and says so."""
    t0 = time.monotonic()
    share = 0.0
    while time.monotonic() - t0 < timeout:
        share = cpu_share(window)
        if share >= 1.0 - busy_below:
            return time.monotonic() - t0
    log.warning("the CPUs did not go quiet within %.0f s (a busy loop got %.0f %% of the "
                "busiest one): timing anyway", timeout, 100 * share)
    return time.monotonic() - t0


def save(results_root: str, name: str, out: Dict[str, object]) -> str:
    """Write a benchmark's result to ``<results>/bench/<name>-<time>.json``."""
    path = os.path.join(results_root, "bench", f"{name}-{int(time.time())}.json")
    make_dirs(os.path.dirname(path))
    out.setdefault("machine", {"cpus": os.cpu_count(), "kernel": os.uname().release})
    out.setdefault("time", time.strftime("%Y-%m-%dT%H:%M:%S"))
    return write_atomic(path, json.dumps(out, indent=1))
