"""Reliability checks: random SIGKILLs then `nslab clean`; two experiments at once."""
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from nslab.model.naming import STATE_DIR

from nslab.runtime.clean import discover
from nslab.runtime.testing import left_behind, needs, state_left

pytestmark = pytest.mark.root

NSLAB = os.path.join(os.path.dirname(sys.executable), "nslab")


# Runs once, in the host tier (not versioned): nslab's journal and clean; tests/integration/test_lab.py kills labs in every tier
@needs("iperf", "ovs-vsctl")
def test_twenty_random_sigkills_leave_nothing_tagged_and_spare_the_rest(tmp_path, bystanders):
    def frr_tmp():
        try:
            return set(os.listdir("/var/tmp/frr"))
        except OSError:
            return set()
    frr_before = frr_tmp()
    state_before = set(os.listdir(STATE_DIR)) if os.path.isdir(STATE_DIR) else set()
    rng = random.Random(2544)
    commands = [
        ["topo", "up", "single", "--k", "4", "--switch", "bridge"],
        ["topo", "up", "single", "--k", "4", "--switch", "ovs"],
        ["run", "alias", "--aliases", "1,8", "--duration", "2", "--repeat", "1"],
        ["topo", "up", "clos", "--spines", "2", "--servers", "2"],
    ]
    for i in range(20):
        # Runs already on this machine are not this kill's: `make test`'s
        # virtual bed runs beside this test, and one of its tests kills its own
        # controller on purpose and cleans after it. A CI run here saw that run
        # (its guest and journal) between this test's clean and its count.
        others = set(discover())
        state_before |= set(os.listdir(STATE_DIR)) if os.path.isdir(STATE_DIR) else set()
        argv = [NSLAB, "--results", str(tmp_path), *commands[i % len(commands)]]
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.05, 2.5))
        p.send_signal(signal.SIGKILL)
        p.wait()
        res = subprocess.run([NSLAB, "clean"], capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        left = {r: inv.describe() for r, inv in left_behind().items() if r not in others}
        assert not left, f"kill {i} ({' '.join(argv[3:])}): left {left}"
        assert frr_tmp() <= frr_before, f"kill {i}: FRR left {frr_tmp() - frr_before}"
        # a run a live process owns is not left (make test's virtual bed may
        # start one beside this test)
        assert not state_left(state_before), f"kill {i}: left {state_left(state_before)}"
        bystanders.assert_intact()


@needs("iperf")
@needs("frr")
def test_two_experiments_at_once_both_finish_apart(tmp_path):
    # Each study's points run while the other's iperf and FRR take the CPUs, so
    # each point would be measured again (--host-reruns, default 1), most likely
    # still disturbed: measured once instead. A point is one record either way,
    # so the counts below are unchanged, and no rate is asserted here.
    a = subprocess.Popen([NSLAB, "--results", str(tmp_path / "a"), "run", "alias", "--aliases",
                          "1,4", "--duration", "2", "--repeat", "1", "--variants", "alias,parallel",
                          "--host-reruns", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    b = subprocess.Popen([NSLAB, "--results", str(tmp_path / "b"), "run", "ecmp", "--trials", "1",
                          "--duration", "2", "--host-reruns", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out_a, err_a = a.communicate(timeout=300)
    out_b, err_b = b.communicate(timeout=300)
    assert a.returncode == 0, err_a[-2000:]
    assert b.returncode == 0, err_b[-2000:]
    (ra,) = (tmp_path / "a" / "alias").iterdir()
    (rb,) = (tmp_path / "b" / "ecmp").iterdir()
    recs_a = [json.loads(l) for l in open(ra / "records.jsonl")]
    recs_b = [json.loads(l) for l in open(rb / "records.jsonl")]
    # alias N=1, 4 and the -P 4 control (-P 1 is the alias N=1 point)
    assert len(recs_a) == 3 and {r["experiment"] for r in recs_a} == {"alias"}
    assert len(recs_b) == 2 and {r["experiment"] for r in recs_b} == {"ecmp"}
    assert recs_a[0]["run_id"] != recs_b[0]["run_id"]


@needs("ovs-vsctl")
def test_a_lab_killed_while_it_starts_ovs_leaves_no_daemons_after_clean(tmp_path):
    # The daemons nslab starts for a lab are its own until they are stopped:
    # a kill before, during or after `ovs-ctl start`, then `nslab clean`,
    # must leave OVS as it was found (here: not running), and no state file.
    from nslab.ovs import probes as ovs_probes
    if ovs_probes.ovs_running():
        pytest.skip("OVS is already running here: the lab would not start it")
    state_before = set(os.listdir(STATE_DIR)) if os.path.isdir(STATE_DIR) else set()
    for delay in (0.25, 0.4, 0.55, 0.7, 0.85, 1.0, 1.3, 1.8):
        p = subprocess.Popen([NSLAB, "--results", str(tmp_path), "topo", "up", "single", "--k", "2",
                              "--switch", "ovs"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.wait()
        res = subprocess.run([NSLAB, "clean"], capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        daemons = subprocess.run(["pgrep", "-x", "ovsdb-server|ovs-vswitchd"], capture_output=True,
                                 text=True).stdout.split()
        assert not daemons, f"killed after {delay} s: OVS daemons {daemons} left running"
        left = state_left(state_before)
        assert not left, f"killed after {delay} s: left {left}"
