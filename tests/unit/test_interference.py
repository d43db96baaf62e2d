"""Host interference accounting on captured /proc data (tests/data/proc, made
by its capture.py on the development VM's kernel, which has no /proc/schedstat,
so the task scan is what runs there) and on /proc/schedstat text."""
import os

import pytest

from nslab.interference import (Snapshot, Watch, account, parse_cpu_list, parse_cpu_schedstat,
                                parse_task_schedstat, worst)
from nslab.experiments.rfc2544.model import baseline_of, cost_unmeasured, disturbed

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "proc")
KERNELS = sorted(d for d in os.listdir(DATA) if os.path.isdir(os.path.join(DATA, d)))


def roles(kdir):
    with open(os.path.join(kdir, "roles")) as f:
        return {k: int(v) for k, v in (line.split() for line in f)}


def snap(kdir, which, root_pid):
    s = Watch([0, 1], proc=os.path.join(kdir, which), root_pid=root_pid).snapshot()
    with open(os.path.join(kdir, which, "t")) as f:
        s.t = float(f.read())
    return s


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_hog_pinned_to_cpu1_shows_as_half_of_cpu1_and_not_on_cpu0(kernel):
    kdir = os.path.join(DATA, kernel)
    r = roles(kdir)
    # Nothing is the bed's but the softirq threads (root 0: no harness tree).
    a, b = snap(kdir, "a", 0), snap(kdir, "b", 0)
    assert {r["hog"], r["self"], r["idle"]} <= set(a.tasks)
    assert a.tasks[r["hog"]].cpus == frozenset({1}) and a.tasks[r["self"]].cpus == frozenset({0})
    assert not a.tasks[r["hog"]].bed
    found = account(a, b, [0, 1])
    hog_ms = (b.tasks[r["hog"]].times.run_ns - a.tasks[r["hog"]].times.run_ns) / 1e6
    # The hog spins 10 ms of every 20: about half the window.
    assert 0.4 <= hog_ms / 1000 / found[1].window_s <= 0.6
    if not a.cpus:  # no /proc/schedstat: the task scan, an upper bound
        assert found[1].source == "task scan (upper bound)"
        idle_ms = (b.tasks[r["idle"]].times.run_ns - a.tasks[r["idle"]].times.run_ns) / 1e6
        assert found[1].other_ms == pytest.approx(hog_ms + idle_ms)
    assert 40 <= found[1].other_pct <= 60
    # CPU0 saw only the capturing process (not the bed here) and the sleeper.
    assert found[0].other_pct < 10
    assert worst(found) == (1, found[1].other_pct)


@pytest.mark.parametrize("kernel", KERNELS)
def test_the_harness_tree_is_the_beds_own(kernel):
    kdir = os.path.join(DATA, kernel)
    r = roles(kdir)
    # With the capturing process as the harness, its children (the hog, the
    # sleeper) are the bed's: nothing else ran on CPU1.
    a, b = snap(kdir, "a", r["self"]), snap(kdir, "b", r["self"])
    assert a.tasks[r["hog"]].bed and a.tasks[r["self"]].bed
    found = account(a, b, [0, 1])
    if not a.cpus:
        assert found[1].other_ms == 0 and found[0].other_ms == 0


def test_task_schedstat_and_cpu_lists():
    assert parse_task_schedstat("42899459 791373 40\n").run_ns == 42899459
    assert parse_task_schedstat("42899459 791373 40\n").wait_ns == 791373
    with pytest.raises(ValueError):
        parse_task_schedstat("")
    assert parse_cpu_list("0-2,5\n") == {0, 1, 2, 5}
    assert parse_cpu_list("1") == {1}


# /proc/schedstat lines in the version-15 layout (cpuN then nine numbers);
# only the fields read here matter: cpuN's 7th and 8th numbers.
SCHEDSTAT_V15 = """version 15
timestamp 4294892356
cpu0 0 0 0 0 0 0 1583920443 218803530 1523
domain0 3 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
cpu1 0 0 0 0 0 0 2217703917 121418440 2059
domain0 3 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
"""


def test_cpu_schedstat_gives_each_cpus_run_and_wait():
    got = parse_cpu_schedstat(SCHEDSTAT_V15)
    assert got[0].run_ns == 1583920443 and got[1].wait_ns == 121418440
    with pytest.raises(ValueError, match="version 9"):
        parse_cpu_schedstat("version 9\ncpu0 0 0 0 0 0 0 1 2 3\n")
    with pytest.raises(ValueError, match="cpu0"):
        parse_cpu_schedstat("version 15\ncpu0 0 0 0\n")


def test_with_schedstat_other_time_is_the_cpus_total_less_the_beds_pinned_tasks():
    from nslab.interference import SchedTimes, Task
    a = Snapshot(0.0, {1: SchedTimes(1_000_000_000, 0)},
                 {10: Task(SchedTimes(100_000_000, 0), frozenset({1}), True),
                  11: Task(SchedTimes(0, 0), frozenset({0, 1}), False)})
    b = Snapshot(1.0, {1: SchedTimes(1_600_000_000, 0)},
                 {10: Task(SchedTimes(500_000_000, 3_000_000), frozenset({1}), True),
                  11: Task(SchedTimes(900_000_000, 0), frozenset({0, 1}), False)})
    got = account(a, b, [1])[1]
    # 600 ms ran on CPU1, 400 of them the bed's: 200 ms others' (the unpinned
    # task's 900 ms were mostly on CPU0: the scan would have over-counted).
    assert got.source == "schedstat" and got.other_ms == pytest.approx(200.0)
    assert got.other_pct == pytest.approx(20.0) and got.bed_wait_ms == pytest.approx(3.0)


def test_a_trial_is_disturbed_above_the_threshold_on_either_cpu_dut_first():
    quiet = {"dut": {"other_pct": 1.0}, "gen": {"other_pct": 2.0}}
    assert disturbed(quiet, 5.0) is None and disturbed(None, 5.0) is None
    why = disturbed({"dut": {"other_pct": 23.4}, "gen": {"other_pct": 40.0}}, 5.0)
    assert why == ("host interference: 23 % of the DUT CPU's time went to other tasks "
                   "(over 5 %)")
    assert "generator/sink CPU" in disturbed({"dut": {"other_pct": 0}, "gen": {"other_pct": 9}}, 5)


def test_the_baseline_leaves_out_disturbed_windows_and_takes_a_low_quantile():
    # One window of six caught a neighbour's burst (the 100 % baseline).
    w = [{"busy_pct": b, "other_pct": o} for b, o in
         [(3.1, 0.5), (2.9, 0.4), (100.0, 96.0), (3.4, 0.6), (3.0, 0.5), (2.8, 0.3)]]
    got = baseline_of(w, 5.0)
    assert got["ok"] and got["busy_pct"] == 2.9 and got["clean_windows"] == 5
    # Busy with nothing offered and no other task to show for it: refused.
    busy = [{"busy_pct": b, "other_pct": 1.0} for b in (60, 55, 70, 65, 58, 62)]
    got = baseline_of(busy, 5.0)
    assert not got["ok"] and got["busy_pct"] == 58 and "no other task" in got["why"]
    # Every window disturbed (a hog on the DUT's CPU): busy less the others'
    # time stands in, and the baseline says it is not clean.
    hog = [{"busy_pct": b, "other_pct": o} for b, o in
           [(53.0, 50.0), (55.0, 51.0), (52.0, 49.5), (56.0, 52.0)]]
    got = baseline_of(hog, 5.0)
    assert not got["ok"] and got["busy_pct"] == pytest.approx(2.5)
    assert got["why"].startswith("host interference: other tasks took 50 %")
    with pytest.raises(ValueError):
        baseline_of([], 5.0)


def test_a_cost_trial_without_a_figure_says_why():
    assert cost_unmeasured({"dut_forwarded_fps": 0.0}) == "the DUT forwarded nothing"
    assert "not above its idle baseline" in cost_unmeasured({"dut_forwarded_fps": 5e4,
                                                             "dut_busy_pct": 3.0})


def test_rfc2544_claims_leave_out_disturbed_searches_and_say_why(tmp_path):
    """A stored run whose bridge search at 64 B stayed disturbed by other tasks,
    and whose bridge baseline was not clean: the knee claim has one search
    left and is undecided with the interference reason; the CPU claims say
    the baseline could not carry an occupancy figure."""
    import json
    import shutil

    from nslab.experiments.rfc2544.study import Rfc2544Study
    from tests.conftest import data
    run = tmp_path / "nl0001"
    shutil.copytree(data("rfc2544_run"), run)
    lines = (run / "records.jsonl").read_text().splitlines()
    out = []
    for line in lines:
        r = json.loads(line)
        if r["params"] == {"dut": "bridge", "frame": 64, "repeat": 0, "test": "throughput"}:
            m = r["measurements"]
            m["searches_fps"] = [m["throughput_fps"], 40000.0]
            m["searches_disturbed"] = [False, True]
            m["occupancy_at_throughput_pct"] = [97.0]
            m["probes"][-1]["invalid"] = ["host interference: 48 % of the DUT CPU's time went "
                                          "to other tasks (over 5 %) (3 tries)"]
            m["probes"][-1]["dut_other_pct"] = 47.6
            r["schema_version"] = 2
        out.append(json.dumps(r))
    (run / "records.jsonl").write_text("\n".join(out) + "\n")
    prov = json.loads((run / "provenance.json").read_text())
    prov["setups"]["bridge"]["baseline"] = {
        "busy_pct": 2.5, "ok": False, "other_pct": 50.0, "clean_windows": 0,
        "why": "host interference: other tasks took 50 % of the DUT's CPU or more in every "
               "window (over 5 %)"}
    (run / "provenance.json").write_text(json.dumps(prov))
    claims = {c.claim: c for c in Rfc2544Study().report(str(run)).claims}
    knee = claims["The bridge saturates at ~66 kfps of 64-byte frames (Table 3)"]
    assert knee.verdict == "undecided"
    assert knee.why == ("host interference: 48 % of the DUT CPU's time went to other tasks "
                        "(1 of 2 searches of the bridge at 64 B left out)")
    cpu = claims["bridge: the CPU is the limit (it saturates at the throughput)"]
    assert cpu.verdict == "undecided" and cpu.why.startswith(
        "the idle baseline of the bridge's CPU: host interference: other tasks took 50 %")
