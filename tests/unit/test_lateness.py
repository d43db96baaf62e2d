"""The lateness samplers (:mod:`nslab.traffic.lateness`): the pure parts on
made-up reports, and real samplers (no root needed) made late by stopping
one of them, as a hypervisor that takes a CPU away for a while does."""
import os
import signal
import subprocess
import sys
import time

import pytest

from nslab.traffic.lateness import Lateness, late_in_window, parse_report, worst_late


def test_a_report_is_two_integers_and_anything_else_is_ignored():
    assert parse_report("123456789 2500000\n") == (123456789, 2500000)
    for bad in ("", "ready", "1 2 3", "-1 5", "1.5 2", "x 2"):
        assert parse_report(bad) is None, bad


def test_a_wait_counts_in_every_window_it_overlaps_and_none_it_does_not():
    # a wake-up at t=100 ms that was 30 ms late waited over [70, 100] ms
    ms = 1_000_000
    reports = [(100 * ms, 30 * ms), (200 * ms, 2 * ms)]
    assert late_in_window(reports, 0, 500 * ms) == 30.0
    assert late_in_window(reports, 90 * ms, 95 * ms) == 30.0  # inside the wait
    assert late_in_window(reports, 0, 69 * ms) == 0.0  # before it began
    assert late_in_window(reports, 101 * ms, 150 * ms) == 0.0  # after it ended
    assert late_in_window(reports, 150 * ms, 250 * ms) == 2.0
    assert late_in_window([], 0, 10) == 0.0


def test_the_worst_cpu_is_the_records_lateness():
    assert worst_late({"0": 1.5, "1": 12.0}) == 12.0
    assert worst_late(None) is None and worst_late({}) is None


def test_a_sampler_stopped_for_100_ms_reports_it_on_its_cpu_and_all_end_on_exit():
    cpus = sorted(os.sched_getaffinity(0))
    with Lateness(cpus) as late:
        pids = [p.pid for p in late.procs.values()]
        start = time.monotonic_ns()
        victim = late.procs[cpus[0]]
        os.kill(victim.pid, signal.SIGSTOP)
        time.sleep(0.1)
        os.kill(victim.pid, signal.SIGCONT)
        time.sleep(0.05)
        got = late.window(start, time.monotonic_ns())
        assert got is not None and set(got) == {str(c) for c in cpus}
        # it woke at least the stop less one period after it was due
        assert got[str(cpus[0])] >= 95.0, got
        # a window that ended before the stop holds none of it
        assert late.window(start - 10**9, start - 10**8)[str(cpus[0])] == 0.0
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}"), pid


def test_a_sampler_that_ended_makes_its_window_unknown():
    with Lateness(sorted(os.sched_getaffinity(0))[:1]) as late:
        start = time.monotonic_ns()
        next(iter(late.procs.values())).kill()
        time.sleep(0.05)
        assert late.window(start, time.monotonic_ns()) is None


def _state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"


def test_the_samplers_die_with_the_process_that_started_them():
    """A controller killed outright (no clean-up runs) leaves no sampler
    running: each asked the kernel for SIGKILL at its parent's death."""
    code = ("from nslab.traffic.lateness import start_for; import time; L = start_for(); "
            "print(*[p.pid for p in L.procs.values()], flush=True); time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                                  os.path.abspath(__file__)))))
    try:
        pids = [int(x) for x in parent.stdout.readline().split()]
        assert pids and all(_state(p) not in ("gone", "Z") for p in pids)
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_state(p) not in ("gone", "Z") for p in pids):
        time.sleep(0.05)
    # dead: gone, or a zombie until whoever adopted it reaps it
    assert all(_state(p) in ("gone", "Z") for p in pids), [_state(p) for p in pids]


@pytest.mark.parametrize("late, kept", [({"0": 1.2, "1": 0.0}, True), ({"0": 5.0}, True),
                                        ({"0": 0.4, "1": 40.0}, False), (None, False)])
def test_a_point_is_on_time_when_every_cpu_stayed_within_the_limit(late, kept):
    from types import SimpleNamespace

    from nslab.store.records import on_time
    assert on_time(SimpleNamespace(host=SimpleNamespace(late_ms=late))) is kept
    assert on_time(SimpleNamespace(host=None)) is False


def test_a_wait_still_going_on_at_the_window_s_end_is_waited_for_and_counted():
    """The window is read only once every CPU has reported from past its end:
    a CPU taken away across the end is counted, not missed."""
    import threading
    cpus = sorted(os.sched_getaffinity(0))
    with Lateness(cpus) as late:
        start = time.monotonic_ns()
        victim = late.procs[cpus[0]]
        os.kill(victim.pid, signal.SIGSTOP)
        time.sleep(0.02)
        end = time.monotonic_ns()
        threading.Timer(0.1, os.kill, (victim.pid, signal.SIGCONT)).start()
        got = late.window(start, end)
    assert got is not None and got[str(cpus[0])] >= 100.0, got
