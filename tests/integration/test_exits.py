"""The taskstats exit listener on this kernel: threads that end inside a
window are reported with their wait for a CPU and their parent, so the lab's
wait counts the point's short-lived clients (:mod:`nslab.traffic.exits`). A
few milliseconds, no lab."""
import os
import subprocess
import threading

import pytest

pytestmark = pytest.mark.root


def test_a_child_and_a_thread_that_end_inside_the_window_are_reported():
    from nslab.traffic.exits import Exits
    with Exits() as exits:
        assert not exits.why, exits.why
        child = subprocess.run(["sh", "-c", "i=0; while [ $i -lt 2000 ]; do i=$((i+1)); done"],
                               check=True)
        assert child.returncode == 0
        t = threading.Thread(target=lambda: sum(range(100_000)), name="nslab-exit-t")
        t.start()
        t.join()
        ended = exits.drain()
    assert ended is not None and not exits.lost
    mine = [e for e in ended if e.ppid == os.getpid() and e.name == "sh"]
    assert len(mine) == 1, ended
    assert mine[0].wait_ns >= 0 and mine[0].policy == os.SCHED_OTHER
    # this process's own thread names this process's parent, as the kernel does
    ours = [e for e in ended if e.tid == t.native_id]
    assert len(ours) == 1 and ours[0].ppid == os.getppid(), ended
    assert exits.drain() is None  # closed with the window
