"""The host's noise figure: how late a sleeping thread wakes up.

A short idle-jitter probe (``samples`` sleeps of ``interval`` each, timed with
the monotonic clock) run at the start of every study and by ``nslab doctor``.
Its tail says how much a timer-paced generator, a sampler or a latency figure
can be disturbed by the host itself (a busy neighbour, a hypervisor stealing
time, a slow timer), independently of the lab.
"""
from __future__ import annotations

import statistics
import time
from typing import Dict, List, Tuple

#: Fitness of the host per study: the 99th percentile of wake-up lateness a
#: study tolerates (us); the TCP studies average over seconds. RFC 2544 is
#: judged apart, per bed, by its own rules (``nslab doctor``:
#: :mod:`nslab.cmdline.fitness`): its virtual bed's clock counts instructions,
#: and on the real bed the host's speed, not its wake-ups, decides.
LIMITS_US = {"alias": 5000.0, "ecmp": 5000.0}


def idle_jitter(samples: int = 300, interval_s: float = 0.001) -> Dict[str, float]:
    """Wake-up lateness of ``samples`` sleeps of ``interval_s``: percentiles in us."""
    late: List[float] = []
    for _ in range(samples):
        t0 = time.perf_counter()
        time.sleep(interval_s)
        late.append((time.perf_counter() - t0 - interval_s) * 1e6)
    return summarize(late, interval_s)


def summarize(late_us: List[float], interval_s: float) -> Dict[str, float]:
    """Percentiles of wake-up lateness (us)."""
    q = statistics.quantiles(late_us, n=100, method="inclusive")
    return {"samples": len(late_us), "interval_us": interval_s * 1e6,
            "p50_us": statistics.median(late_us), "p99_us": q[98], "max_us": max(late_us)}


def fitness(noise: Dict[str, float], cpus: int) -> Dict[str, Tuple[bool, str]]:
    """Per study: is this host fit, and why (or why not)."""
    out = {}
    for study, limit in LIMITS_US.items():
        ok = noise["p99_us"] <= limit
        why = (f"p99 wake-up lateness {noise['p99_us']:.0f} us "
               f"{'<=' if ok else '>'} {limit:.0f} us")
        out[study] = (ok, why)
    return out
