"""The taskstats exit listener on this kernel: threads that end inside a
window are reported with their process, parent, wait for a CPU and run time,
so the lab's wait counts the point's short-lived clients
(:mod:`nslab.traffic.exits`). A few milliseconds, no lab."""
import os
import subprocess
import threading
import time

import pytest

pytestmark = pytest.mark.root


def test_a_child_and_a_thread_that_end_inside_the_window_are_reported():
    from nslab.traffic.exits import Exits
    with Exits() as exits:
        assert not exits.why, exits.why
        subprocess.run(["sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"],
                       check=True)
        t = threading.Thread(target=lambda: sum(range(100_000)), name="nslab-exit-t")
        t.start()
        t.join()
        # join returns before the kernel's exit of the thread: its report
        # follows within moments (a process's comes before its parent reaps it)
        deadline = time.monotonic() + 2
        while True:
            ended = exits.drain()
            if ended is None or any(e.tid == t.native_id for e in ended) or \
                    time.monotonic() > deadline:
                break
            time.sleep(0.01)
    assert ended is not None and not exits.lost, exits.why
    # the shell: a process of its own, this process its parent, and it ran
    sh = [e for e in ended if e.ppid == os.getpid() and e.name == "sh"]
    assert len(sh) == 1, ended
    assert sh[0].tgid == sh[0].tid and sh[0].run_ns > 1_000_000
    assert sh[0].policy == os.SCHED_OTHER
    # this process's own thread: its process is this one, its parent this one's
    ours = [e for e in ended if e.tid == t.native_id]
    assert len(ours) == 1 and ours[0].tgid == os.getpid() and ours[0].ppid == os.getppid()
    # the listener's own canary is not among them, and a closed one reads nothing
    assert all(e.name != "nslab-exits" for e in ended)
    assert exits.drain() is None
