"""The lateness samplers against the bench's preempting neighbours
(``nslab bench verdicts --noise pieces-1ms|pieces-40ms``): the same quarter of
each CPU, taken whole at ``SCHED_FIFO``, in pieces of 1 ms or of 40 ms. The
shares cannot tell them apart; the samplers must."""
import os
import time

import pytest

from nslab.runtime.proc import read_steal_ns, steal_pct
from nslab.traffic.lateness import Lateness
from nslab.traffic.noisegen import Noise, profile

# root: SCHED_FIFO; quiet: the neighbours take a quarter of every CPU, whole,
# so nothing else may run beside them (make test runs these with nothing else)
pytestmark = [pytest.mark.root, pytest.mark.quiet]


def _late_beside(name, cpus, seconds=1.5):
    """Each CPU's longest wait past a timer over ``seconds`` beside profile
    ``name``, and the hypervisor's steal over them (% of all CPUs)."""
    with Lateness(cpus) as late, Noise(profile(name)):
        time.sleep(0.3)  # the hogs are up and in their cycles
        s0, t0 = read_steal_ns(), time.monotonic_ns()
        time.sleep(seconds)
        s1, t1 = read_steal_ns(), time.monotonic_ns()
        got = late.window(t0, t1)
    stolen = steal_pct(s1 - s0, (t1 - t0) / 1e9, len(cpus)) if None not in (s0, s1) else None
    return got, stolen


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 or not {0, 1} <= os.sched_getaffinity(0),
                    reason="the pieces profiles pin CPUs 0 and 1")
def test_the_samplers_tell_40_ms_pieces_from_1_ms_pieces_of_the_same_quarter():
    cpus = [0, 1]
    coarse, _ = _late_beside("pieces-40ms", cpus)
    assert coarse is not None
    for cpu in ("0", "1"):
        # a hog holds its CPU 40 ms at a time: a sampler waits at least that
        # less one of its periods, whatever else the host does
        assert coarse[cpu] >= 37.0, coarse
    fine, stolen = _late_beside("pieces-1ms", cpus)
    assert fine is not None
    if stolen is not None and stolen >= 1.0:
        pytest.skip(f"the hypervisor stole {stolen:.1f} % of the CPUs over the 1 ms "
                    f"neighbour's window (waits {fine}): its pieces are not this test's")
    # 1 ms pieces: no wait near the coarse ones (the lab's limit is 10 ms)
    assert max(fine.values()) <= 10.0, (fine, stolen)
