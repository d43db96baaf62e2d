"""``nslab bench verdicts``' pure parts: the claims of a reproduction directory
(captured runs), interference counts from records, flips and the table; and
the noisy neighbour's schedule and life cycle (no root)."""
import json
import os
import random
import shutil
import statistics
import time

import pytest

from nslab.traffic.noisegen import PROFILES, Hog, Noise, profile, schedule
from nslab.cmdline.verdictbench import RunResult, claims_of, flips, interference_counts, table
from tests.conftest import data


def reproduction(tmp_path):
    root = tmp_path / "reproduce" / "x"
    for study, src, rid in (("alias", "alias_run", "nlc945"), ("ecmp", "ecmp_run", "nle9b7"),
                            ("rfc2544", "rfc2544_run", "nlb9f9")):
        shutil.copytree(data(src), root / study / rid)
    (root / "mode").write_text("quick\n")
    return root


def test_claims_of_a_reproduction_are_every_studys_claims_with_verdicts(tmp_path):
    root = reproduction(tmp_path)
    got = claims_of(str(root))
    studies = {s for s, _ in got}
    assert studies == {"alias", "ecmp", "rfc2544"}
    assert set(got.values()) <= {"agrees", "disagrees", "undecided"}
    assert any(s == "ecmp" and c.startswith("L3 hashing keeps -P3 on one link") for s, c in got)
    # The captured runs predate interference accounting: nothing re-run or excluded.
    assert interference_counts(str(root)) == (0, 0)


def test_interference_counts_sum_every_studys_records(tmp_path):
    root = reproduction(tmp_path)
    d = root / "rfc2544" / "nlb9f9"
    lines = (d / "records.jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    rec["host"] = {"other_pct": {"0": 1.0}, "worst_cpu": 0, "worst_pct": 1.0, "source": "x",
                   "reruns": 1, "disturbed": False, "threshold_pct": 10.0}
    (d / "records.jsonl").write_text("\n".join([json.dumps(rec)] + lines[1:]) + "\n")
    a = root / "alias" / "nlc945"
    lines = (a / "records.jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    rec["host"] = {"other_pct": {"1": 30.0}, "worst_cpu": 1, "worst_pct": 30.0, "source": "x",
                   "reruns": 1, "disturbed": True, "threshold_pct": 10.0}
    (a / "records.jsonl").write_text("\n".join([json.dumps(rec)] + lines[1:]) + "\n")
    assert interference_counts(str(root)) == (2, 1)


def test_flips_are_claims_that_agree_in_one_run_and_disagree_in_another():
    a = RunResult("r1", 60, {("s", "x"): "agrees", ("s", "y"): "undecided", ("s", "z"): "agrees"})
    b = RunResult("r2", 70, {("s", "x"): "disagrees", ("s", "y"): "agrees", ("s", "z"): "agrees"})
    assert flips([a, b]) == [("s", "x")]
    assert a.decided == 2 and a.share == pytest.approx(2 / 3)
    text = table([a, b, RunResult("r3", 5, failed="nslab: boom")], "dut-bursts")
    lines = text.splitlines()
    assert lines[0].startswith("noise: dut-bursts")
    row = next(line for line in lines if line.startswith("s: x"))
    assert row.split()[2:] == ["A", "D", "-", "FLIPS"]
    assert "run 1: 2 of 3 decided (67 %)" in text and "run 3: failed after 5 s: nslab: boom" in text
    assert "decided: 67-100 % of claims per run; flips: 1 (s: x)" in text


def test_a_hogs_bursts_take_its_duty_of_the_cpu_on_average():
    for h in (Hog(1, 0.5, (2.0, 40.0)), Hog(None, 0.25, (5.0, 80.0))):
        rng = random.Random(7)
        cycles = [schedule(h, rng) for _ in range(2000)]
        busy = sum(b for b, _ in cycles)
        assert busy / sum(b + i for b, i in cycles) == pytest.approx(h.duty)
        lengths = [b * 1000 for b, _ in cycles]
        assert h.burst_ms[0] <= min(lengths) and max(lengths) <= h.burst_ms[1]
        assert statistics.mean(lengths) == pytest.approx(sum(h.burst_ms) / 2, rel=0.05)


def test_the_pieces_profiles_take_the_same_quarter_in_pieces_of_1_and_40_ms():
    """The two preempting profiles differ only in the size of their pieces:
    each takes a quarter of each CPU, whole, at SCHED_FIFO."""
    import random
    fine, coarse = profile("pieces-1ms"), profile("pieces-40ms")
    assert [(h.cpu, h.duty, h.preempt) for h in fine] == \
        [(h.cpu, h.duty, h.preempt) for h in coarse] == [(0, 0.25, True), (1, 0.25, True)]
    rng = random.Random(1)
    assert schedule(fine[0], rng) == pytest.approx((0.001, 0.003))
    assert schedule(coarse[0], rng) == pytest.approx((0.040, 0.120))
    with pytest.raises(ValueError, match="pinned"):
        Hog(None, 0.25, (1.0, 1.0), preempt=True)
    with pytest.raises(ValueError, match="at most half"):
        Hog(0, 0.75, (1.0, 1.0), preempt=True)


def test_profiles_are_checked_and_unknown_ones_named():
    assert profile("idle") == [] and {h.cpu for h in profile("both-bursts")} == {0, 1}
    with pytest.raises(ValueError, match="known: idle, dut-bursts"):
        profile("loud")
    with pytest.raises(ValueError):
        Hog(0, 1.5, (1.0, 2.0))
    with pytest.raises(ValueError):
        Hog(0, 0.5, (5.0, 2.0))
    assert all(isinstance(h, Hog) for hogs in PROFILES.values() for h in hogs)


def test_the_noise_runs_while_the_block_runs_and_is_gone_after(tmp_path):
    with Noise([Hog(None, 0.1, (1.0, 2.0))], seed=3) as n:
        pids = [p.pid for p in n.procs]
        assert len(pids) == 1 and os.path.exists(f"/proc/{pids[0]}")
        assert n.procs[0].poll() is None
    assert not os.path.exists(f"/proc/{pids[0]}")


def test_the_busy_profile_is_two_unpinned_loops_that_never_sleep():
    """The issue's own neighbour: busy loops on both CPUs, at the normal policy."""
    import random
    busy = profile("busy")
    assert [(h.cpu, h.duty, h.preempt) for h in busy] == [(None, 1.0, False)] * 2
    assert schedule(busy[0], random.Random(1))[1] == 0.0
    with pytest.raises(ValueError, match="at most 1"):
        Hog(None, 1.01, (1.0, 1.0))


def test_the_tools_profile_runs_programs_we_did_not_write_and_stops_them():
    """Two sha256sum and an xz (its input /dev/urandom), at the normal policy,
    gone when the block ends; a program that is not installed is named."""
    from nslab.errors import LabError
    tools = profile("tools")
    assert sorted(h.command[0] for h in tools) == ["sha256sum", "sha256sum", "xz"]
    with Noise(tools) as n:
        pids = [p.pid for p in n.procs]
        time.sleep(0.2)
        names = [open(f"/proc/{pid}/comm").read().strip() for pid in pids]
        assert sorted(names) == ["sha256sum", "sha256sum", "xz"]
        assert all(p.poll() is None for p in n.procs)  # still working
    assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)
    with pytest.raises(LabError, match="'nslab-no-such-tool' is not installed"):
        with Noise([Hog(None, 1.0, (100.0, 100.0), command=("nslab-no-such-tool",))]):
            pass
    with pytest.raises(ValueError, match="unpinned, duty 1"):
        Hog(0, 1.0, (100.0, 100.0), command=("true",))
