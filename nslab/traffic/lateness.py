"""How late the lab's timers could have fired: one sampler per CPU.

A protocol timer (BGP's hold time, BFD's detection time, a probe's next
send) fires as late as the thread that runs it waits for its CPU. What the
host takes from a CPU in one piece, the hypervisor's steal above all, makes
every thread on it wait that long, whatever its share of the point comes to:
a fifth of a CPU taken a millisecond at a time moves no timer by more than
a millisecond, a fifth taken 200 ms at a time moves one by 200 ms. The
share the run judges (:func:`nslab.run.study.measure_point`) cannot tell the
two apart; these samplers can.

Each sampler is a tiny process pinned to one CPU, at the controller's
policy and nice (those the lab's daemons inherit: ``SCHED_OTHER``, nice 0
when run as the README says): it sleeps :data:`PERIOD_NS` at a time and
reports each wake-up later than :data:`FLOOR_NS` (``MONOTONIC_NS LATE_NS``),
and every :data:`BEAT` wake-ups one in any case (``MONOTONIC_NS 0``), so a
window's end is known to have passed on its CPU. Its parent's death kills
it (``PR_SET_PDEATHSIG``), so a crashed controller leaves none behind. It
costs about 2 % of each CPU (measured here: 1.7-2.2 % over 10 s); the
interference accounting leaves its time and its waits out (``Watch``'s
``ignore_pids``).

:func:`late_in_window` turns the reports into the longest wait per CPU over
a point, which the point's record keeps (``host.late_ms``).
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from typing import Deque, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

log = logging.getLogger(__name__)

#: the sampler's sleep (2 ms: 500 wake-ups a second, about 1 % of a CPU)
PERIOD_NS = 2_000_000
#: wake-ups later than this are reported; shorter ones read as 0 (no timer
#: the studies judge resolves them: the failover study's probe is 5 ms apart)
FLOOR_NS = 500_000
#: a report at least every this many wake-ups (40 ms)
BEAT = 20
#: reports kept per CPU (the oldest go first; :meth:`Lateness.window` also
#: drops those older than the window it read): 200 s of one every period
KEEP = 100_000
#: how long :meth:`Lateness.window` waits for each CPU's report from past
#: the window's end (a CPU taken away that long is not on time anyway)
WAIT_S = 0.5

#: The sampler, run as ``python -I -S -c SAMPLER CPU PERIOD_NS FLOOR_NS PARENT BEAT``:
#: only the standard library, no site, no current directory.
SAMPLER = r"""
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG: SIGKILL when the parent dies
if os.getppid() != int(sys.argv[4]):
    sys.exit(0)  # the parent died before the line above
os.sched_setaffinity(0, {int(sys.argv[1])})
period, floor, beat = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[5])
now, out = time.monotonic_ns, sys.stdout
print("ready", flush=True)
due, n = now() + period, 0
while True:
    d = due - now()
    if d > 0:
        time.sleep(d / 1e9)
    t, n = now(), n + 1
    late = t - due
    if late >= floor or n % beat == 0:
        out.write(f"{t} {late if late >= floor else 0}\n")
        out.flush()
    due = t + period  # from the wake-up: one wait is reported once
"""

Report = Tuple[int, int]  # (monotonic ns at the wake-up, ns late)


def parse_report(line: str) -> Optional[Report]:
    """``MONOTONIC_NS LATE_NS`` as two integers; None for anything else."""
    parts = line.split()
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def late_in_window(reports: Iterable[Report], start_ns: int, end_ns: int) -> float:
    """The longest wait, in ms, of the reports that overlap ``[start_ns,
    end_ns]``: a wake-up at ``t`` that was ``late`` ns late waited over
    ``[t - late, t]``. 0.0: none over the floor."""
    worst = 0
    for t, late in reports:
        if t >= start_ns and t - late <= end_ns:
            worst = max(worst, late)
    return worst / 1e6


def worst_late(late_ms: Optional[Mapping[str, float]]) -> Optional[float]:
    """The longest wait over all CPUs of a record's ``host.late_ms`` (None:
    not measured)."""
    if not late_ms:
        return None
    return max(late_ms.values())


class Lateness:
    """Samplers on ``cpus``, started on entry and ended on exit.

    ``window(start_ns, end_ns)`` gives each CPU's longest wait in ms, by
    CPU, or None when a sampler is not running (its CPU is not known)."""

    def __init__(self, cpus: Iterable[int], period_ns: int = PERIOD_NS,
                 floor_ns: int = FLOOR_NS, python: str = sys.executable) -> None:
        self.cpus = sorted(set(cpus))
        self.period_ns, self.floor_ns, self.python = period_ns, floor_ns, python
        self.procs: Dict[int, subprocess.Popen[str]] = {}
        self.reports: Dict[int, Deque[Report]] = {c: deque(maxlen=KEEP) for c in self.cpus}
        #: each CPU's latest report's time
        self.last: Dict[int, int] = {c: 0 for c in self.cpus}
        self._lock = threading.Lock()
        self._readers: List[threading.Thread] = []

    def __enter__(self) -> "Lateness":
        try:
            for cpu in self.cpus:
                self._start(cpu)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self, cpu: int) -> None:
        p = subprocess.Popen(
            [self.python, "-I", "-S", "-c", SAMPLER, str(cpu), str(self.period_ns),
             str(self.floor_ns), str(os.getpid()), str(BEAT)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, close_fds=True, cwd="/")
        self.procs[cpu] = p
        assert p.stdout is not None
        first = p.stdout.readline()
        if first.strip() != "ready":
            raise RuntimeError(f"the lateness sampler on CPU {cpu} did not start "
                               f"(exit status {p.poll()})")
        t = threading.Thread(target=self._read, args=(cpu, p), daemon=True,
                             name=f"nslab-late-{cpu}")
        t.start()
        self._readers.append(t)

    def _read(self, cpu: int, p: "subprocess.Popen[str]") -> None:
        assert p.stdout is not None
        for line in p.stdout:
            rep = parse_report(line)
            if rep is not None:
                with self._lock:
                    self.last[cpu] = rep[0]
                    if rep[1]:
                        self.reports[cpu].append(rep)

    @property
    def pids(self) -> List[int]:
        """The samplers' process ids."""
        return [p.pid for p in self.procs.values()]

    def window(self, start_ns: int, end_ns: int) -> Optional[Dict[str, float]]:
        """Each CPU's longest wait (ms) over ``[start_ns, end_ns]``, once
        every CPU has reported from past ``end_ns`` (a wait still going on
        at the end is then in), up to :data:`WAIT_S`; None if one has not by
        then, or a sampler ended (what its CPU saw is not known). Reports
        older than ``start_ns`` are dropped: windows come in time order."""
        deadline = time.monotonic() + WAIT_S
        while True:
            with self._lock:
                caught_up = all(self.last[c] >= end_ns for c in self.cpus)
            if caught_up or time.monotonic() >= deadline:
                break
            time.sleep(self.period_ns / 1e9)
        if not caught_up or any(p.poll() is not None for p in self.procs.values()) or \
                len(self.procs) != len(self.cpus):
            return None
        with self._lock:
            out = {str(c): round(late_in_window(list(self.reports[c]), start_ns, end_ns), 2)
                   for c in self.cpus}
            for c in self.cpus:
                q = self.reports[c]
                while q and q[0][0] < start_ns:
                    q.popleft()
        return out

    def close(self) -> None:
        """End every sampler (by its PID: they are this process's children)."""
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGKILL)
                except ProcessLookupError:
                    pass
            p.wait()
        for t in self._readers:  # each reads to the end of its pipe, then ends
            t.join(timeout=1)
        for p in self.procs.values():
            if p.stdout is not None:
                p.stdout.close()
        self.procs.clear()
        self._readers.clear()


def start_for(cpus: Optional[Sequence[int]] = None) -> Lateness:
    """A :class:`Lateness` on every CPU this process may run on (entered)."""
    return Lateness(cpus if cpus is not None else sorted(os.sched_getaffinity(0))).__enter__()
