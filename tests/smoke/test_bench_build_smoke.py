"""`nslab bench build`: nslab, the kernel floor (and Mininet where it can run),
side by side, with nothing left behind."""
import glob
import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.root, pytest.mark.slow]

NSLAB = os.path.join(os.path.dirname(sys.executable), "nslab")


def _netns():
    return set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()


def test_bench_build_prints_the_kernel_floor_beside_nslab(tmp_path):
    before, links = _netns(), set(os.listdir("/sys/class/net"))
    res = subprocess.run([NSLAB, "--results", str(tmp_path), "bench", "build", "--sizes", "4,16",
                          "--repeat", "1", "--no-mininet"], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    assert "k=16: kernel floor" in res.stdout
    (saved,) = glob.glob(str(tmp_path / "bench" / "build-bridge-*.json"))
    rows = json.load(open(saved))["rows"]
    assert [r["k"] for r in rows] == [4, 16]
    for r in rows:
        assert 0 < r["floor_s"] and 0 < r["nslab_s"]
        assert r["vs_floor"] == pytest.approx(r["nslab_s"] / r["floor_s"])
        assert r["nslab_ms_per_node"] > 0 and r["memory_kib"]["nslab"]
    assert _netns() == before and set(os.listdir("/sys/class/net")) == links


def test_kernel_floor_builds_the_objects_and_removes_them():
    from nslab.topologies.bench import kernel_floor
    before, links = _netns(), set(os.listdir("/sys/class/net"))
    k = 64
    secs, kib = kernel_floor(k, "bridge")
    assert secs > 0
    # k+1 namespaces and k veth pairs take memory while they exist (measured
    # ~70-290 KiB a node at k=1000); 0 would mean nothing was measured, and
    # megabytes a node that something other than these objects was counted
    assert 0 < kib < 8 * 1024 * (k + 1), kib
    assert _netns() == before and set(os.listdir("/sys/class/net")) == links


def _spinners(policy_idle):
    """One busy loop per CPU, at the SCHED_IDLE policy or the normal one."""
    code = ("import os, sys\n"
            + ("os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\n" if policy_idle else "")
            + "print('ready', flush=True)\nwhile True: pass\n")
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
             for _ in range(os.cpu_count() or 1)]
    for p in procs:
        assert p.stdout.readline() == "ready\n"
    return procs


@pytest.mark.parametrize("policy_idle", [True, False], ids=["sched-idle", "normal"])
def test_quiesce_waits_out_busy_tasks_but_not_sched_idle_ones(policy_idle):
    """Before each timed build the bench waits for an idle machine (a busy
    loop of its own on each CPU gets nearly all of it): busy loops on every
    CPU keep it waiting to its timeout; the same loops at the SCHED_IDLE
    policy (as `make test` runs its guests beside the labs) give way to it,
    and it goes on at once."""
    from nslab.run.bench import quiesce
    procs = _spinners(policy_idle)
    try:
        # in CI, set-up beside the labs may keep the kernel's own threads
        # (writeback) busy for a while: a quiet moment within 5 s, where a
        # busy loop on every CPU would keep it waiting to the end
        waited = quiesce(timeout=5.0)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    if policy_idle:
        assert waited < 4.0, waited
    else:
        assert waited >= 5.0, waited
