"""nslab.runtime.proc on live processes: where a process stands
(:func:`where_is`), and a process tree at SCHED_IDLE moved to the normal
policy, every thread of it, children included (:func:`unidle_tree`; root: an
unprivileged thread at nice 0 leaves SCHED_IDLE only when its RLIMIT_NICE
allows nice 0)."""
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from nslab.runtime.proc import where_is

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


def _unidle_from_normal(pid: int) -> int:
    res = subprocess.run(
        ["chrt", "--other", "0", sys.executable, "-c",
         f"from nslab.runtime.proc import unidle_tree; print(unidle_tree({pid}))"],
        capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return int(res.stdout)


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
        # from a caller at the normal policy (the Debian 13 tier runs its
        # unit tests at the idle policy, where nothing is moved: the test below)
        moved = _unidle_from_normal(proc.pid)
        after = _policies(proc.pid)
        assert moved == len(before)
        assert set(after.values()) == {os.SCHED_OTHER}
        assert _unidle_from_normal(proc.pid) == 0  # nothing left to move
    finally:
        if child is not None:
            os.kill(child, 9)
        proc.kill()
        proc.wait()



@pytest.mark.skipif(os.geteuid() != 0, reason="leaving SCHED_IDLE needs root here")
def test_a_caller_at_the_idle_policy_moves_nothing():
    """``chrt --idle 0 nslab reproduce``: the guest it waits for stays at the
    policy the user asked for."""
    proc = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    child = None
    try:
        child = int(proc.stdout.readline())
        res = subprocess.run(
            ["chrt", "--idle", "0", sys.executable, "-c",
             f"from nslab.runtime.proc import unidle_tree; print(unidle_tree({proc.pid}))"],
            capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip() == "0"
        assert set(_policies(proc.pid).values()) == {os.SCHED_IDLE}
    finally:
        if child is not None:
            os.kill(child, 9)
        proc.kill()
        proc.wait()

def test_a_process_that_did_not_come_up_says_where_it_stands():
    """The error line of a receiver that never came up: the program it runs,
    its state and where it waits; or how it ended."""
    p = subprocess.Popen(["sleep", "30"])
    try:
        deadline = time.monotonic() + 5
        said = ""
        while time.monotonic() < deadline:  # until sleep has started sleeping
            said = where_is(SimpleNamespace(popen=p, pid=p.pid))
            if "'sleep', state S" in said:
                break
            time.sleep(0.01)
        assert said.startswith("it is running as 'sleep', state S"), said
    finally:
        p.kill()
        p.wait()
    assert where_is(SimpleNamespace(popen=p, pid=p.pid)) == "it ended with exit status -9"



def _exec_done(pid: int, prefix: str) -> None:
    """Wait until the child forked by ``sh`` has become the program named
    (its name is ``sh`` until its exec)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/comm") as f:
            if f.read().startswith(prefix):
                return
        time.sleep(0.01)
    raise AssertionError(f"{pid} never became {prefix}")


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_a_paused_tree_stops_the_named_descendants_and_continues_them():
    """Only the processes named stop (the parent that watches them does
    not), and they run again when the block ends, by an exception too."""
    from nslab.runtime.proc import paused_tree
    parent = subprocess.Popen(["sh", "-c", "sleep 30 & echo $!; wait"], stdout=subprocess.PIPE,
                              text=True)
    child = int(parent.stdout.readline())
    try:
        _exec_done(child, "sleep")
        with pytest.raises(RuntimeError):
            with paused_tree(parent.pid, prefix="sleep") as stopped:
                assert stopped == [child]
                deadline = time.monotonic() + 5
                while _state(child) != "T" and time.monotonic() < deadline:
                    time.sleep(0.01)
                assert _state(child) == "T" and _state(parent.pid) != "T"
                raise RuntimeError("the block ends by an exception")
        deadline = time.monotonic() + 5
        while _state(child) == "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _state(child) in ("S", "R")  # running again: asleep, or on its way there
    finally:
        os.kill(child, 9)
        parent.kill()
        parent.wait()


def test_kill_pids_ends_a_stopped_process_with_its_term():
    """A process left stopped (a guest paused when its controller died) acts
    on the TERM that ``nslab clean`` sends, not only on the KILL after it."""
    from nslab.runtime.proc import kill_pids
    p = subprocess.Popen(["sleep", "30"])
    os.kill(p.pid, 19)  # SIGSTOP
    kill_pids([p.pid], grace=5.0)
    assert p.wait(timeout=5) == -15


def test_reproduce_pauses_only_the_qemu_of_the_studies_beside(tmp_path):
    """nslab reproduce's pauser stops each running guest's QEMU (a process
    named qemu*, here a copy of sleep) and leaves the study's own process,
    which watches it, running; with no study beside there is nothing to hold."""
    import shutil

    from nslab.cmdline.reproduce import _pauser
    assert _pauser([]) is None
    fake = tmp_path / "qemu-system-x86_64"
    shutil.copy("/bin/sleep", fake)
    beside = subprocess.Popen(["sh", "-c", f"{fake} 30 & echo $!; wait"], stdout=subprocess.PIPE,
                              text=True)
    qemu = int(beside.stdout.readline())
    try:
        _exec_done(qemu, "qemu")
        pause = _pauser([("rfc2544", beside, 0.0)])
        assert pause is not None
        with pause():
            deadline = time.monotonic() + 5
            while _state(qemu) != "T" and time.monotonic() < deadline:
                time.sleep(0.01)
            assert _state(qemu) == "T" and _state(beside.pid) != "T"
        deadline = time.monotonic() + 5
        while _state(qemu) == "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _state(qemu) != "T"
    finally:
        os.kill(qemu, 9)
        beside.kill()
        beside.wait()
