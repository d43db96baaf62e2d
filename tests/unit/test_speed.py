"""The bed's CPU speed (nslab.traffic.speed) and the RFC 2544 rule built on it:
a trial during which the host gave the guest's CPU less is measured again,
then left out with its reason, like one another task disturbed."""
import json
import os
import shutil

import pytest

from nslab.experiments.rfc2544.model import SLOWED, disturbed
from nslab.traffic import speed
from nslab.traffic.speed import SpeedWatch, slowdown_pct


def test_slowdown_is_the_extra_time_over_the_fastest_reading():
    assert slowdown_pct(2.3, 2.3) == 0.0
    assert slowdown_pct(4.14, 2.3) == pytest.approx(80.0)
    assert slowdown_pct(2.2, 2.3) == 0.0  # a new fastest reading is not a slowdown
    assert slowdown_pct(3.0, float("inf")) == 0.0  # no reference yet


def test_the_watch_keeps_each_cpus_fastest_and_judges_a_trials_ends_against_it(monkeypatch):
    # readings as the development VM gave them: 2.3 ms at full speed, 4.1 ms
    # in one of the host's slow stretches
    seq = iter([2.35, 2.31, 2.30, 2.40, 2.32, 2.36, 4.10, 2.33, 2.31, 2.34])
    monkeypatch.setattr(speed, "probe_ms", lambda cpu: next(seq))
    w = SpeedWatch([1, 0])
    w.prime(2)
    assert w.cpus == [0, 1] and w.fastest == {0: 2.30, 1: 2.31}
    before, after = w.read(), w.read()  # CPU0 slowed at the trial's start
    assert w.slowdown(0, before, after) == pytest.approx(100 * (4.10 / 2.30 - 1))
    assert w.slowdown(1, before, after) == pytest.approx(100 * (2.36 / 2.31 - 1))
    assert w.slowdown(1) == 0.0


def test_the_probe_times_work_on_the_cpu_it_names_and_gives_the_thread_back():
    mine = os.sched_getaffinity(0)
    cpu = min(mine)
    ms = speed.probe_ms(cpu, steps=20_000, tries=2)
    assert 0 < ms < 1000 and os.sched_getaffinity(0) == mine


def test_a_trial_on_a_slowed_cpu_is_disturbed_with_its_own_reason():
    quiet = {"dut": {"other_pct": 1.0, "slowdown_pct": 3.0},
             "gen": {"other_pct": 2.0, "slowdown_pct": 4.0}}
    assert disturbed(quiet, 10.0, 10.0) is None
    slow = {"dut": {"other_pct": 1.0, "slowdown_pct": 3.0},
            "gen": {"other_pct": 2.0, "slowdown_pct": 55.4}}
    why = disturbed(slow, 10.0, 10.0)
    assert why == ("host interference: the generator/sink CPU ran 55 % slower than its fastest "
                   "in this run (over 10 %: the host gave this guest's CPU less)")
    assert SLOWED in why
    assert disturbed(slow, 10.0) is None  # no slowdown threshold: the rule is off
    # records from before the speed was measured carry no slowdown
    assert disturbed({"dut": {"other_pct": 1.0}, "gen": {"other_pct": 2.0}}, 10.0, 10.0) is None
    # other tasks' time is named first when both hold
    both = {"dut": {"other_pct": 30.0, "slowdown_pct": 60.0}, "gen": {"other_pct": 0.0}}
    assert "30 % of the DUT CPU's time went to other tasks" in disturbed(both, 10.0, 10.0)


def throughput_edited(tmp_path, dut, edit):
    """The captured RFC 2544 run, copied, with ``edit(record)`` applied to the
    throughput record of ``dut`` at 64 B."""
    from tests.conftest import data
    run = tmp_path / "nl0001"
    shutil.copytree(data("rfc2544_run"), run)
    want = {"dut": dut, "frame": 64, "repeat": 0, "test": "throughput"}
    out = []
    for line in (run / "records.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["params"] == want:
            edit(r)
        out.append(json.dumps(r))
    (run / "records.jsonl").write_text("\n".join(out) + "\n")
    return run


def slowed(probe, pct, **figures):
    """Mark a captured probe as left out because the host slowed the DUT's CPU by ``pct``."""
    probe["invalid"] = [f"host interference: the DUT CPU ran {pct:.0f} % slower than its "
                        "fastest in this run (over 10 %: the host gave this guest's CPU "
                        "less) (3 tries)"]
    probe.update(dut_slowdown_pct=pct, **figures)


def test_a_claim_whose_searches_the_host_slowed_says_so(tmp_path):
    """A stored run whose bridge search at 64 B stayed disturbed because the
    host slowed the DUT's CPU (no other task ran there): the knee claim is
    undecided and its reason names the slowdown, not other tasks."""
    from nslab.experiments.rfc2544.study import Rfc2544Study

    def edit(r):
        m = r["measurements"]
        m["searches_fps"] = [m["throughput_fps"], 40000.0]
        m["searches_disturbed"] = [False, True]
        slowed(m["probes"][-1], 61.9, dut_other_pct=0.4, gen_other_pct=1.0,
               gen_slowdown_pct=3.0)
    run = throughput_edited(tmp_path, "bridge", edit)
    claims = {c.claim: c for c in Rfc2544Study().report(str(run)).claims}
    knee = claims["The bridge saturates at ~66 kfps of 64-byte frames (Table 3)"]
    assert knee.verdict == "undecided"
    # how many searches in the row; what the host did is the run's note, the
    # same words in every row it touches (a report states them once)
    assert knee.why.startswith("host interference left out 1 of 2 searches of the bridge at "
                               "64 B; host interference left out 1 trial of this run (at worst "
                               "the host ran the DUT CPU 62 % slower than its fastest in this "
                               "run): a trial during which"), knee.why
    assert "other tasks took 0" not in knee.why
    assert knee.decide == "a quiet host, or --bed virtual"


def test_an_undecided_claim_says_how_many_of_its_trials_host_interference_left_out(tmp_path):
    """A claim whose own reason is about its interval (too few samples, or
    one that straddles its band) also says how many of the trials it reads
    were left out for host interference, then the run's note (what the host
    did: the same words in every row); a decided claim, and one whose reason
    names the interference already, get no count."""
    from nslab.experiments.rfc2544.claims import host_noted
    from nslab.experiments.rfc2544.records import SCHEMA
    from nslab.store.reporting import Claim
    n = 0

    def edit(r):
        nonlocal n
        probes = r["measurements"]["probes"]
        probes[0]["invalid"] = ["host interference: the DUT CPU ran 41 % slower than its "
                                "fastest in this run (over 10 %: the host gave this "
                                "guest's CPU less) (3 tries)"]
        probes[1]["invalid"] = ["host interference: 23 % of the DUT CPU's time went to "
                                "other tasks (over 10 %) (3 tries)"]
        n = len(probes)
    run = throughput_edited(tmp_path, "router", edit)
    recs = SCHEMA.load(str(run))
    reads = [{"test": "throughput", "dut": "router", "frame": 64}]
    c = Claim("router: the CPU is the limit", "n=1", "undecided", "n=1: no interval", reads=reads)
    assert host_noted(c, recs).why == (
        f"n=1: no interval; host interference left out 2 of {n} trials it reads")
    assert host_noted(c, recs, "NOTE").why == (
        f"n=1: no interval; host interference left out 2 of {n} trials it reads; NOTE")
    decided = Claim("router: the CPU is the limit", "97 %", "agrees", "inside", reads=reads)
    assert host_noted(decided, recs, "NOTE") is decided
    said = Claim("x", "", "undecided", "host interference: 23 % of ...", reads=reads)
    assert host_noted(said, recs) is said
    assert host_noted(said, recs, "NOTE").why == "host interference: 23 % of ...; NOTE"
    elsewhere = Claim("x", "", "undecided", "n=1", reads=[{"test": "latency"}])
    assert host_noted(elsewhere, recs) is elsewhere


def test_a_cpu_claim_whose_searches_were_all_left_out_stays_undecided_with_the_reason(tmp_path):
    """Every search of the router at 64 B left out because the host slowed the
    DUT's CPU: no occupancy figure is left, and the claim is still made
    (undecided, with the reason), not dropped from the table."""
    from nslab.experiments.rfc2544.study import Rfc2544Study

    def edit(r):
        m = r["measurements"]
        m["searches_fps"] = [m["throughput_fps"], 40000.0]
        m["searches_disturbed"] = [True, True]
        m["occupancy_at_throughput_pct"] = []
        r["schema_version"] = 2
        slowed(m["probes"][-1], 82.0, dut_other_pct=0.2, gen_other_pct=0.5,
               gen_slowdown_pct=1.0)
    run = throughput_edited(tmp_path, "router", edit)
    claims = {c.claim: c for c in Rfc2544Study().report(str(run)).claims}
    cpu = claims["router: the CPU is the limit (it saturates at the throughput)"]
    assert cpu.verdict == "undecided" and cpu.measured == "no occupancy figure left"
    assert cpu.why.startswith("host interference left out 2 of 2 searches of the router at "
                              "64 B; host interference left out 1 trial of this run (at worst "
                              "the host ran the DUT CPU 82 % slower"), cpu.why


def test_a_disturbed_pass_stands_and_a_disturbed_failure_leaves_its_search_out():
    """A disturbance only takes CPU from the bed: a probe that passed anyway
    would have passed with the whole CPU (it stands); one that failed may
    have failed for the host."""
    from nslab.experiments.rfc2544.model import search_disturbed
    host = ["host interference: the DUT CPU ran 93 % slower than its fastest in this run "
            "(over 10 %: the host gave this guest's CPU less) (1 tries)"]
    clean = {"loss_pct": 0.0, "invalid": []}
    stood = {"loss_pct": 0.0, "invalid": host, "stands": True}
    failed = {"loss_pct": 3.6, "invalid": host}
    guard = {"loss_pct": 0.0, "invalid": ["the generator/sink CPU was 96 % busy"]}
    assert not search_disturbed([clean, stood, guard])
    assert search_disturbed([clean, stood, failed])
    assert search_disturbed([dict(stood, stands=None)])  # older runs: left out, as they were


class _Trials:
    """An Rfc2544Runner without a lab: each try's loss and disturbance from a list."""

    def __init__(self, tries):
        from nslab.experiments.rfc2544.config import Rfc2544Config
        from nslab.experiments.rfc2544.runner import Rfc2544Runner

        class Runner(Rfc2544Runner):
            def __init__(self):
                self.cfg = Rfc2544Config.preset("quick")
                self._excluded_streak, self.calls = 0, 0

            def _trial_once(self, size, fps, seconds=None):
                loss, slow = tries[self.calls]
                self.calls += 1
                return {"loss_pct": loss, "invalid": [], "interference": {
                    "dut": {"other_pct": 0.0, "slowdown_pct": slow, "top": []},
                    "gen": {"other_pct": 0.0, "slowdown_pct": 0.0, "top": []}}}
        self.runner = Runner()


def test_a_trial_whose_outcome_stands_is_not_measured_again():
    passes = lambda m: m["loss_pct"] == 0 and not m["invalid"]  # noqa: E731
    r = _Trials([(0.0, 90.0)]).runner
    m = r.trial(64, 60000, stands=passes)
    assert r.calls == 1 and m["stands"] is True and m["interference_reruns"] == 0
    assert "90 % slower" in m["invalid"][0] and r._excluded_streak == 0
    # a disturbed failure is measured again (the quick preset's re-runs), then
    # kept with the reason, and counts towards the streak that stops re-runs
    r = _Trials([(4.0, 90.0)] * 5).runner
    m = r.trial(64, 60000, stands=passes)
    assert r.calls == 1 + r.cfg.interference_reruns and "stands" not in m
    assert r._excluded_streak == 1
    # without a rule (a loss sweep's trial) a disturbed pass is measured again too
    r = _Trials([(0.0, 90.0), (0.0, 2.0)]).runner
    m = r.trial(64, 60000)
    assert r.calls == 2 and m["invalid"] == [] and "stands" not in m


def test_a_standing_probe_is_not_counted_as_left_out(tmp_path):
    from nslab.experiments.rfc2544.claims import host_noted
    from nslab.experiments.rfc2544.records import SCHEMA
    from nslab.store.reporting import Claim

    def edit(r):
        probes = r["measurements"]["probes"]
        slowed(probes[0], 41.0)
        slowed(probes[1], 77.0)
        probes[1]["stands"] = True
    recs = SCHEMA.load(str(throughput_edited(tmp_path, "router", edit)))
    reads = [{"test": "throughput", "dut": "router", "frame": 64}]
    c = Claim("router: the CPU is the limit", "n=1", "undecided", "n=1", reads=reads)
    why = host_noted(c, recs).why
    assert "left out 1 of" in why
    assert why.endswith("; 1 more disturbed, kept as passes (their outcome, not their CPU "
                        "figures)")


def test_a_pass_stands_only_if_nothing_else_is_wrong_and_the_generator_sent_the_rate():
    from nslab.experiments.rfc2544.model import pass_stands
    step = 0.015 * 148810  # the quick preset's at 64 bytes: 2,232 fps
    trial = {"target_fps": 64000.0, "gen_pps": 63700.0, "invalid": []}
    assert pass_stands(trial, True, step)
    assert not pass_stands(trial, False, step)  # a failure never stands
    # the generator, its CPU slowed, sent 2 % less: the DUT was offered less
    assert not pass_stands(dict(trial, gen_pps=62720.0), True, step)
    assert not pass_stands(dict(trial, gen_pps=None), True, step)
    # a reason of the fidelity guard's as well as the host's
    assert not pass_stands(dict(trial, invalid=["the generator/sink CPU was 96 % busy"]),
                           True, step)


def test_a_search_keeps_disturbed_passes_and_measures_disturbed_failures_again():
    """A DUT that forwards 65 kfps without loss, on a host that disturbs every
    other trial: the search keeps each disturbed pass without measuring it
    again, measures each disturbed failure again (clean the next time), and
    its result stands. A generator that fell short on a disturbed pass gets
    no such credit: that trial is measured again."""
    from nslab.experiments.rfc2544.config import Rfc2544Config
    from nslab.experiments.rfc2544.bed import REAL
    from nslab.experiments.rfc2544.runner import Rfc2544Runner

    class Runner(Rfc2544Runner):
        def __init__(self, short):
            self.cfg = Rfc2544Config.preset("quick")
            self.layout = REAL  # the real bed's two CPUs (its search steps)
            self._excluded_streak, self.calls, self.short = 0, 0, short
            self.baseline_ok, self.rng_seed = True, "3"  # the searches repeat themselves

        def line_fps(self, size):
            return 148810.0

        def measure_ceiling(self, size):
            return 1e6

        def _trial_once(self, size, fps, seconds=None):
            self.calls += 1
            hit = self.calls % 2 == 1
            sent = fps * (1 - self.short) if hit else fps
            return {"target_fps": fps, "offered_fps": sent, "received_fps": min(sent, 65000.0),
                    "loss_pct": 0.0 if sent <= 65000 else 100 * (1 - 65000 / sent),
                    "dut_occupancy_pct": 50.0, "gen_path": "packet", "gen_pps": sent,
                    "invalid": [], "dut_queue_frames": 0, "interference": {
                        "dut": {"other_pct": 0.0, "slowdown_pct": 90.0 if hit else 1.0,
                                "top": []},
                        "gen": {"other_pct": 0.0, "slowdown_pct": 1.0, "top": []}}}

    r = Runner(short=0.0)
    m = r.throughput(64)
    probes = m["probes"]
    assert m["searches_disturbed"] == [False] * 3
    assert all(65000 - 2233 <= f <= 65000 for f in m["searches_fps"]), m["searches_fps"]
    stood = [p for p in probes if p.get("stands")]
    assert stood and all(p["loss_pct"] == 0 and p["interference_reruns"] == 0
                         and "90 % slower" in p["invalid"][0] for p in stood)
    # each failure measured while disturbed was measured again, and came out clean
    failed = [p for p in probes if p["loss_pct"] > 0]
    assert failed and all(not p["invalid"] for p in failed)
    assert any(p["interference_reruns"] == 1 for p in failed)
    assert r.calls == len(probes) + sum(p["interference_reruns"] for p in probes)
    # a generator 10 % short on the disturbed trials (more than half a step at
    # every rate these searches can probe: none is below 22 kfps): no pass
    # stands on them
    r = Runner(short=0.10)
    m = r.throughput(64)
    assert not any(p.get("stands") for p in m["probes"])
    assert m["searches_disturbed"] == [False] * 3


def test_a_cpu_claim_without_an_occupancy_figure_stays_with_its_reason(tmp_path):
    """Every confirmation trial of the router's searches gave no occupancy
    figure (each a disturbed pass, which confirms the rate, not the CPU),
    while no search was left out: the claim is made, undecided, saying so;
    a run from before searches recorded why (the captured one) makes none."""
    from nslab.experiments.rfc2544.study import Rfc2544Study
    title = "router: the CPU is the limit (it saturates at the throughput)"

    def edit(r):
        m = r["measurements"]
        m.update(searches_fps=[m["throughput_fps"]] * 2, searches_disturbed=[False, False],
                 occupancy_at_throughput_pct=[], baseline_ok=True)
    run = throughput_edited(tmp_path, "router", edit)
    claims = {c.claim: c for c in Rfc2544Study().report(str(run)).claims}
    assert claims[title].verdict == "undecided"
    assert claims[title].why.startswith("no confirmation trial at the throughput gave an "
                                        "occupancy figure")
    old = throughput_edited(tmp_path / "old", "router", lambda r: None)
    assert title not in {c.claim for c in Rfc2544Study().report(str(old)).claims}


def test_a_flipped_probe_in_one_search_moves_no_other_search():
    """On the virtual bed a probe at the knee may lose 2 frames of 2,485 in
    one run and none in the next. Each search brackets the calibration's
    target (not the earlier searches' results) with dithers of its own, so
    such a flip in the first search leaves the other searches' probes and
    results as they were, and the mean of three moves by a third of what
    that one search moved. Without a calibration, the later searches
    bracket the earlier ones' median, as before."""
    from nslab.experiments.rfc2544.config import Rfc2544Config
    from nslab.experiments.rfc2544.bed import SHARED
    from nslab.experiments.rfc2544.runner import Rfc2544Runner

    class Runner(Rfc2544Runner):
        def __init__(self, flip, target=3311.25):
            self.cfg = Rfc2544Config.preset("quick", bed="virtual")
            self.layout = SHARED
            self._excluded_streak, self.baseline_ok = 0, True
            self.rng_seed, self.cal_target_fps, self.flip = "2/router", target, flip
            self.searches_started = 0
            self.rates: list = []

        def line_fps(self, size):
            return 18280.0

        def measure_ceiling(self, size):
            return 19000.0

        def search(self, size, probes, hint=None, rng=None):
            self.searches_started += 1
            self.rates.append([])
            return super().search(size, probes, hint, rng)

        def _trial_once(self, size, fps, seconds=None):
            self.rates[-1].append(round(fps, 3))
            # a knee at 3,500 fps; in the first search of the "flip" run, a
            # probe just under it loses 2 frames
            knee = 3400.0 if self.flip and self.searches_started == 1 else 3500.0
            lost = 0.0 if fps <= knee else 100 * (1 - knee / fps)
            return {"target_fps": fps, "offered_fps": fps, "received_fps": fps * (1 - lost / 100),
                    "loss_pct": lost, "dut_occupancy_pct": 99.0, "gen_path": "packet",
                    "gen_pps": fps, "invalid": [], "dut_queue_frames": 0, "interference": {
                        "dut": {"other_pct": 0.0, "slowdown_pct": 0.0, "top": []},
                        "gen": {"other_pct": 0.0, "slowdown_pct": 0.0, "top": []}}}

    same, flipped = Runner(flip=False), Runner(flip=True)
    a, b = same.throughput(64), flipped.throughput(64)
    assert a["prior_fps"] == b["prior_fps"] == 3311.25
    from nslab.experiments.rfc2544.records import Throughput
    assert Throughput.model_validate(a).prior_fps == 3311.25  # as the records keep it
    assert same.rates[0] != flipped.rates[0]  # the first search took another path
    assert same.rates[1:] == flipped.rates[1:]  # the others probed the very same rates
    assert a["searches_fps"][1:] == b["searches_fps"][1:]
    assert a["throughput_fps"] - b["throughput_fps"] == pytest.approx(
        (a["searches_fps"][0] - b["searches_fps"][0]) / 3)
    step = a["step_fps"]
    assert all(3500 - 2 * step <= f <= 3500 for f in a["searches_fps"]), a["searches_fps"]
    # a run repeats itself: the same outcomes, the same rates
    again = Runner(flip=False)
    assert again.throughput(64)["searches_fps"] == a["searches_fps"] and again.rates == same.rates
    # another repeat of the point: dithers of its own (the same ones would
    # repeat its searches to the frame, and the repeats' spread would be none)
    other = Runner(flip=False)
    other.throughput(64, repeat=1)
    assert all(x != y for x, y in zip(other.rates, same.rates)), (other.rates, same.rates)
    # no calibration: the later searches bracket the earlier ones' median
    none = Runner(flip=False, target=None)
    m = none.throughput(64)
    assert m["prior_fps"] is None and none.rates[0][0] == 18280.0  # the first from the top
    assert none.rates[1][0] != same.rates[1][0]


def test_a_points_throughput_is_the_mean_of_its_searches_left_in():
    """The searches dither, each ending within a step of its threshold: their
    mean resolves finer than a step, where the median of three is one
    search's value. A version 2 record (which kept the median) reads as the
    mean of the searches it stored, its bit rate and share of the line with it."""
    from nslab.experiments.rfc2544.records import SCHEMA
    v2 = {"schema_version": 2, "experiment": "rfc2544", "run_id": "t", "time": 0.0,
          "params": {"dut": "router", "frame": 64, "test": "throughput", "repeat": 0},
          "measurements": {"throughput_fps": 3466.7, "throughput_bps": 3466.7 * 512,
                           "pct_of_line": 100 * 3466.7 / 7440.0, "line_fps": 7440.0,
                           "generator_ceiling_fps": 3840.0, "generator_limited": True,
                           "searches_fps": [3472.8, 3413.4, 3466.7, 1000.0],
                           "searches_disturbed": [False, False, False, True]}}
    m = SCHEMA.upgrade(v2, "records.jsonl:1")["measurements"]
    assert v2["measurements"]["throughput_fps"] == 3466.7  # the record read is left as it was
    assert m["throughput_fps"] == pytest.approx((3472.8 + 3413.4 + 3466.7) / 3)
    assert m["throughput_bps"] == pytest.approx(m["throughput_fps"] * 512)
    assert m["pct_of_line"] == pytest.approx(100 * m["throughput_fps"] / 7440.0)
    assert m["searches_fps"][3] == 1000.0  # what was measured stays as it was
    # the mean, 3,451, is under 90 % of the ceiling (3,456), the median was not
    assert m["generator_limited"] is False


def test_the_virtual_beds_tester_clock_drifts_one_period_per_trial_and_alternates():
    from nslab.experiments.rfc2544.model import GUEST_TICK_S, MAX_CLOCK_OFFSET, tester_clock_offset
    # 1,000 fps against a 4 ms tick: one frame period (1 ms) over a 0.5 s window
    assert tester_clock_offset(1000, 0.5, 0) == pytest.approx(0.002)
    assert tester_clock_offset(1000, 0.5, 1) == pytest.approx(-0.002)
    # 50 fps: its period (20 ms) is five ticks; one tick over the window
    assert tester_clock_offset(50, 0.5, 2) == pytest.approx(GUEST_TICK_S / 0.5)
    assert tester_clock_offset(50, 0.1, 0) == MAX_CLOCK_OFFSET  # capped
    assert tester_clock_offset(0, 0.5, 0) == tester_clock_offset(1000, 0, 0) == 0.0
    # frames at 1,000 (1 + d) fps meet a tick every phase of a frame period
    # once over the window: the offsets of frame times from the tick grid span it
    d = tester_clock_offset(1000, 0.5, 0)
    phases = sorted(((k / (1000 * (1 + d))) % 0.001) for k in range(500))
    assert phases[0] < 0.00001 and phases[-1] > 0.00099
    assert max(b - a for a, b in zip(phases, phases[1:])) < 0.00001
    # 50 fps (a period of five ticks): its 25 frames meet the tick 0.16-0.19 ms apart
    d = tester_clock_offset(50, 0.5, 0)
    phases = sorted(((k / (50 * (1 + d))) % GUEST_TICK_S) for k in range(25))
    gaps = [b - a for a, b in zip(phases, phases[1:])] + [GUEST_TICK_S - phases[-1] + phases[0]]
    assert max(gaps) < 0.0002


def test_a_fixed_loads_trials_on_the_virtual_bed_alternate_their_clock_and_keep_the_load():
    from nslab.experiments.rfc2544.bed import REAL, SHARED
    from nslab.experiments.rfc2544.config import Rfc2544Config
    from nslab.experiments.rfc2544.runner import Rfc2544Runner

    class Runner(Rfc2544Runner):
        def __init__(self, layout):
            self.cfg = Rfc2544Config.preset("quick")
            self.layout, self._excluded_streak, self._at_load, self.asked = layout, 0, {}, []
            self.tick_s = 0.004

        def _trial_once(self, size, fps, seconds=None):
            self.asked.append(fps)
            return {"target_fps": fps, "loss_pct": 0.0, "invalid": [], "interference": {
                "dut": {"other_pct": 0.0, "slowdown_pct": 0.0, "top": []},
                "gen": {"other_pct": 0.0, "slowdown_pct": 0.0, "top": []}}}

    r = Runner(SHARED)
    got = [r.trial(64, 1000.0, drift=True) for _ in range(2)] + [r.trial(64, 2000.0, drift=True)]
    assert r.asked == pytest.approx([1002.0, 998.0, 2002.0])
    assert [m["target_fps"] for m in got] == [1000.0, 1000.0, 2000.0]
    assert [m["tester_clock_offset_pct"] for m in got] == [0.2, -0.2, 0.1]
    r.trial(64, 3000.0)  # a search's probe: the rate asked
    assert r.asked[-1] == 3000.0
    real = Runner(REAL)  # the real bed: two boxes' clocks of its own
    assert "asked_fps" not in real.trial(64, 1000.0, drift=True) and real.asked == [1000.0]
