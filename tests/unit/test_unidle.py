"""nslab.runtime.proc.unidle_tree: a process tree at SCHED_IDLE moved to the
normal policy, every thread of it, children included (root: an unprivileged
thread at nice 0 leaves SCHED_IDLE only when its RLIMIT_NICE allows nice 0)."""
import os
import subprocess
import sys
import time

import pytest

from nslab.runtime.proc import unidle_tree

#: a parent at SCHED_IDLE with a second thread and a child, each of which inherits the policy
TREE = r"""
import os, subprocess, sys, threading, time
os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
print(child.pid, flush=True)
time.sleep(30)
"""


def _policies(pid: int) -> dict:
    out = {}
    for p in [pid] + [int(c) for t in os.listdir(f"/proc/{pid}/task")
                      for c in open(f"/proc/{pid}/task/{t}/children").read().split()]:
        for tid in os.listdir(f"/proc/{p}/task"):
            out[int(tid)] = os.sched_getscheduler(int(tid))
    return out


@pytest.mark.skipif(os.geteuid() != 0, reason="leaving SCHED_IDLE needs root here")
def test_every_thread_of_the_tree_leaves_the_idle_policy():
    proc = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    child = None
    try:
        child = int(proc.stdout.readline())
        deadline = time.monotonic() + 10
        while len(os.listdir(f"/proc/{proc.pid}/task")) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        before = _policies(proc.pid)
        assert child in before and len(before) >= 3
        assert set(before.values()) == {os.SCHED_IDLE}
        moved = unidle_tree(proc.pid)
        after = _policies(proc.pid)
        assert moved == len(before)
        assert set(after.values()) == {os.SCHED_OTHER}
        assert unidle_tree(proc.pid) == 0  # nothing left to move
    finally:
        if child is not None:
            os.kill(child, 9)
        proc.kill()
        proc.wait()
