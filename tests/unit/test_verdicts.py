"""Every claim gets an interval and a verdict: the studies' claim logic on
synthetic records whose answer is known, and the calibration arithmetic.
No root, no lab."""
import math

import pytest

from nslab.experiments.alias import report as alias_report
from nslab.experiments.alias.records import AliasRecord
from nslab.experiments.ecmp import report as ecmp_report
from nslab.experiments.ecmp.records import EcmpRecord
from nslab.experiments.rfc2544 import claims as rfc_claims
from nslab.experiments.rfc2544 import report as rfc_report
from nslab.experiments.rfc2544 import tables as rfc_tables
from nslab.experiments.rfc2544.model import knee_index, next_filters, paper_knee
from nslab.experiments.rfc2544.records import SCHEMA as RFC_SCHEMA, RfcRecord
from nslab.store.published import load_published
from nslab.store.reporting import Claim
from nslab.store.stats import Estimate, Interval, judge, mean


HEAD = {"schema_version": 2, "experiment": "test", "run_id": "t", "time": 0.0}


def test_a_claim_refuses_a_verdict_outside_the_three():
    with pytest.raises(ValueError, match="not one of agrees, disagrees, undecided"):
        Claim("x", "y", "reproduced", "z")


def test_judge_names_the_band_and_never_decides_on_one_sample():
    assert judge(mean([1.0]), 0, 2, "a band").verdict == "undecided"
    assert "one sample" in judge(mean([1.0]), 0, 2, "a band").why
    inside = judge(Estimate(1, Interval(0.5, 1.5, 0.95, "t"), 3), 0, 2, "a band")
    assert inside.verdict == "agrees" and "[0.0, 2.0]" in inside.why
    assert judge(Estimate(3, Interval(2.5, 3.5, 0.95, "t"), 3), 0, 2, "b").verdict == "disagrees"
    assert judge(Estimate(2, Interval(1.5, 2.5, 0.95, "t"), 3), 0, 2, "b").verdict == "undecided"
    assert "+inf" in judge(Estimate(2, Interval(1.5, 2.5, 0.95, "t"), 3), 1, math.inf, "b").why


# -- alias ---------------------------------------------------------------------

def _alias(mode, n, rep, rx, cs):
    return AliasRecord.model_validate({
        **HEAD, "params": {"mode": mode, "n": n, "repeat": rep},
        "measurements": {
            "receiver_bps": rx, "receiver_l2_bps": rx, "clients_sum_bps": cs, "window_s": 2.0,
            "sockets_at_window_start": n, "sockets_at_window_end": n,
            "sockets_closed_in_window": 0, "clients_reported": n, "clients_finished": n,
            "streams": n, "spawn_spread_s": 0.01, "start_margin_s": 0.2, "late_start": False,
            "cpu_busy_pct": 40.0, "receiver_measured_at": "receiver sockets",
            "start_time": 0.0, "sample_s": 0.01, "invalid": []}})


def _alias_run(rise_rx, rise_cs, reps=3):
    out = []
    for rep in range(reps):
        jitter = (rep - 1) * 1e6  # +-1 Mbit/s between repeats
        for n in (1, 16, 254):
            rx = 955e6 * (1 + (rise_rx if n == 254 else 0)) + jitter
            cs = rx * (1 + (rise_cs if n == 254 else 0.002))
            out.append(_alias("alias", n, rep, rx, cs))
            out.append(_alias("parallel", n, rep, rx + 0.5e6, cs))
    return out


def test_alias_flat_receiver_and_rising_reports_give_the_posts_artefact():
    recs = _alias_run(rise_rx=0.0, rise_cs=0.03)
    got = {c.claim.split(" (")[0]: c for c in alias_report.claims(recs, {})}
    assert got["Linux IP aliasing adds no measurable overhead"].verdict == "agrees"
    assert got["Throughput rises with the number of aliases"].verdict == "disagrees"
    assert got["The posts' rise comes from how iperf's reports were summed"].verdict == "agrees"
    assert got["The rise comes from more TCP connections, not from the aliases"].verdict == "agrees"
    for c in got.values():
        assert "95 %" in c.measured or "90 %" in c.measured, c


def test_alias_a_real_overhead_is_called_out():
    recs = _alias_run(rise_rx=-0.10, rise_cs=0.0)
    got = {c.claim.split(" (")[0]: c.verdict for c in alias_report.claims(recs, {})}
    assert got["Linux IP aliasing adds no measurable overhead"] == "disagrees"


def test_alias_one_repeat_is_undecided_and_says_what_to_run():
    recs = [r for r in _alias_run(0.0, 0.03) if r.params.repeat == 0]
    got = alias_report.claims(recs, {})
    # every claim of the study rests on N=254, which has a single sample here
    assert len(got) == 4, [c.claim for c in got]
    for c in got:
        assert "N=254" in c.measured and "(n=1: no interval)" in c.measured, c
        assert c.verdict == "undecided" and "default preset" in c.why, c


def test_alias_rows_that_read_iperfs_own_reports_name_its_version():
    recs = _alias_run(rise_rx=0.0, rise_cs=0.03)
    got = {c.claim.split(" (")[0]: c for c in alias_report.claims(recs, {}, iperf="2.2.1")}
    posts = got["The posts' rise comes from how iperf's reports were summed"]
    assert "iperf 2.2.1" in posts.measured
    par = got["The rise comes from more TCP connections, not from the aliases"]
    assert "iperf 2.2.1's own SUM" in par.measured and "depends on iperf's version" in par.measured
    # the receiver's figure does not depend on iperf: its rows do not claim a version
    assert "iperf" not in got["Linux IP aliasing adds no measurable overhead"].measured


# -- ECMP ----------------------------------------------------------------------

def _ecmp(policy, trial, split, sum_bps):
    links = {"3+0": [0, 0, 0], "2+1": [0, 0, 1]}[split]
    streams = [{"id": str(i), "local_port": 40000 + i, "bps": sum_bps / 3,
                "link": f"server2-eth{l}"} for i, l in enumerate(links)]
    return EcmpRecord.model_validate({
        **HEAD, "params": {"policy": policy, "trial": trial},
        "measurements": {"streams": streams, "sum_bps": sum_bps, "sum_reported_by_iperf": None,
                         "split": split, "streams_per_link": {}, "unassigned_streams": 0,
                         "link_bytes": {}, "link_mbps_avg": {}, "policy_set_in": "server2"}})


def test_ecmp_claims_are_proportions_with_wilson_intervals():
    recs = [_ecmp(0, t, "3+0", 955e6) for t in range(5)]
    recs += [_ecmp(1, t, s, b) for t, (s, b) in enumerate(
        [("2+1", 1.91e9), ("2+1", 1.92e9), ("3+0", 955e6), ("2+1", 1.90e9), ("2+1", 1.92e9)])]
    got = ecmp_report.claims(recs, {"streams": 3, "spines": 2, "link_rate": "1Gbit"})
    assert [c.verdict for c in got] == ["agrees", "agrees", "agrees"]
    assert "Wilson" in got[0].measured and "5/5" in got[0].measured


def test_ecmp_three_trials_cannot_settle_l3():
    recs = [_ecmp(0, t, "3+0", 955e6) for t in range(3)]
    got = ecmp_report.claims(recs, {"streams": 3, "spines": 2, "link_rate": "1Gbit"})
    assert got[0].verdict == "undecided" and "10 trials" in got[0].why


# -- RFC 2544 ------------------------------------------------------------------

def _throughput(dut, frame, searches, occ):
    return RfcRecord.model_validate({
        **HEAD, "params": {"dut": dut, "frame": frame, "test": "throughput", "repeat": 0},
        "measurements": {"throughput_fps": sorted(searches)[len(searches) // 2],
                         "throughput_bps": 0.0, "line_fps": 148810.0,
                         "generator_ceiling_fps": 380000.0, "generator_limited": False,
                         "confirmed": True, "probes": [], "pct_of_line": 40.0,
                         "searches_fps": searches, "occupancy_at_throughput_pct": occ}})


def test_rfc2544_equivalence_and_the_calibrated_knee():
    pub = load_published("rfc2544")
    recs = [_throughput("bridge", 64, [66000, 66500, 65800], [96, 97, 95]),
            _throughput("router", 64, [65900, 66300, 66100], [97, 96, 98])]
    got = {c.claim: c for c in rfc_claims.claims(recs, ["bridge", "router"], pub, {})}
    same = got["Bridge and router forward about the same at 64 bytes"]
    assert same.verdict == "agrees" and "two one-sided" in same.why
    assert got["The bridge saturates at ~66 kfps of 64-byte frames (Table 3)"].verdict == "agrees"
    assert got["bridge: the CPU is the limit (it saturates at the throughput)"].verdict == "agrees"


def test_rfc2544_a_real_difference_is_a_disagreement():
    pub = load_published("rfc2544")
    recs = [_throughput("bridge", 64, [66000, 66500, 65800], [96, 97, 95]),
            _throughput("router", 64, [52000, 52500, 51800], [97, 96, 98])]
    got = {c.claim: c.verdict for c in rfc_claims.claims(recs, ["bridge", "router"], pub, {})}
    assert got["Bridge and router forward about the same at 64 bytes"] == "disagrees"


def test_version_1_throughput_records_read_as_one_search(tmp_path):
    import json
    m = _throughput("bridge", 64, [1.0], []).measurements.model_dump()
    del m["searches_fps"], m["occupancy_at_throughput_pct"]
    m["throughput_fps"] = 61000.0
    line = {"params": {"dut": "bridge", "frame": 64, "test": "throughput", "repeat": 0},
            "measurements": m, **HEAD, "schema_version": 1, "kind": "point"}
    (tmp_path / "records.jsonl").write_text(json.dumps(line) + "\n")
    (rec,) = RFC_SCHEMA.load(str(tmp_path))
    assert rec.measurements.searches_fps == [61000.0]


def test_the_papers_knee_comes_from_its_table_3():
    assert paper_knee(load_published("rfc2544")) == 66225.0
    assert knee_index([25, 25, 29, 87, 22987]) == 4
    assert knee_index([25, 26, 27]) is None


def test_calibration_steps_scale_the_count_by_capacity_over_target():
    # 500 filters forward 120 kfps at overload; the target is 66,225 fps: a frame
    # must cost 120/66.2 = 1.81x as much, so 906 filters.
    assert next_filters(500, 120000, 66225) == 906
    assert next_filters(906, 66225, 66225) == 906  # on target: unchanged
    with pytest.raises(ValueError):
        next_filters(0, 1, 1)


def test_the_fidelity_guard_on_stored_trials():
    from nslab.experiments.rfc2544.model import trial_invalid
    ok = {"target_fps": 50000, "offered_fps": 49900, "gen_pps": 49990, "gen_cpu_busy_pct": 40.0,
          "sink_backlog_drops": 0, "generator_limited": False}
    assert trial_invalid(ok, 148810) == []
    # past line rate the shaper caps what is offered: not the generator's fault
    assert trial_invalid(dict(ok, target_fps=163691, gen_pps=148000), 148810) == []
    bad = dict(ok, gen_pps=30000, gen_cpu_busy_pct=99.0, sink_backlog_drops=12,
               generator_limited=True)
    reasons = trial_invalid(bad, 148810)
    assert len(reasons) == 4 and "99 % busy" in reasons[0] and "30,000 of 50,000" in reasons[1]


def test_invalid_loads_are_left_out_of_the_verdicts(tmp_path):
    import json
    import shutil

    from tests.conftest import data
    shutil.copytree(data("rfc2544_run"), tmp_path / "r")
    path = tmp_path / "r" / "records.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    for rec in lines:
        if rec["params"]["test"] == "loss" and rec["params"]["dut"] == "bridge":
            for t in rec["measurements"]["trials"]:
                if t["target_fps"] >= 60000:
                    t["invalid"] = ["the generator/sink CPU was 99 % busy"]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    recs = RFC_SCHEMA.load(str(tmp_path / "r"))
    rows = rfc_tables.table3(recs, "bridge")
    assert any(x["invalid"] for x in rows)
    got = {c.claim: c for c in rfc_claims.claims(recs, ["bridge"], load_published("rfc2544"), {})}
    fit = got["bridge: occupancy vs load follows the paper's Table 3"]
    assert "excluded by the fidelity guard" in fit.measured
    rep = rfc_report.write_report(str(tmp_path / "r"))
    assert "excluded: the generator/sink CPU" in open(rep.files["md"]).read()


def test_the_occupancy_claim_stays_when_one_load_of_the_paper_is_left(tmp_path):
    """A sweep with one valid load at the paper's rates cannot be set beside
    Table 3 (a curve needs two): the claim stays, undecided, naming what was
    left out and why (it dropped out of the table, 18 claims where a run has 19)."""
    import json
    import shutil

    from tests.conftest import data
    shutil.copytree(data("rfc2544_run"), tmp_path / "r")
    paper = {float(r[0]) for r in load_published("rfc2544")["table3_bridge_overload_64B"]["rows"]
             if r[4] is not None}
    path = tmp_path / "r" / "records.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    kept = None
    why = "host interference: the DUT CPU ran 97 % slower than its fastest in this run"
    for rec in lines:
        if rec["params"]["test"] == "loss" and rec["params"]["dut"] == "bridge":
            for t in rec["measurements"]["trials"]:
                if kept is None and float(t["target_fps"]) in paper:
                    kept = t["target_fps"]
                else:
                    t["invalid"] = [why]
    assert kept is not None
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    recs = RFC_SCHEMA.load(str(tmp_path / "r"))
    at = [x for x in rfc_tables.table3(recs, "bridge") if x["fps"] in paper]
    got = {c.claim: c for c in rfc_claims.claims(recs, ["bridge"], load_published("rfc2544"), {})}
    fit = got["bridge: occupancy vs load follows the paper's Table 3"]
    assert fit.verdict == "undecided"
    # the row names host interference; what it did (97 % slower) is the run's note
    assert fit.why.startswith(f"1 of the paper's loads left to set beside Table 3 (a curve "
                              f"needs 2): {len(at) - 1} of the {len(at)} trials at them left out "
                              f"({len(at) - 1} of them: host interference); host interference "
                              f"left out "), fit.why
    assert "trials of this run" in fit.why, fit.why
    # a later sampling round can ask for the sweep again
    assert fit.reads == [{"test": "loss", "dut": "bridge", "frame": 64}]
    # with none measured at the paper's loads, or only one and nothing left out
    paper1 = {1000.0: [0, 0, 0, 0, 5.0]}
    assert rfc_claims.few_loads_why([], paper1, 0) == (
        "0 of the paper's loads left to set beside Table 3 (a curve needs 2): the sweep "
        "measured none of them")
    row = {"fps": 1000.0, "invalid": [], "cpu_ok": True}
    assert rfc_claims.few_loads_why([row], paper1, 1) == (
        "1 of the paper's loads left to set beside Table 3 (a curve needs 2): the sweep "
        "measured only 1 trial(s) at them")
    # kept without an occupancy figure: baseline_why says why, not this
    assert rfc_claims.few_loads_why([dict(row, cpu_ok=False)], paper1, 0) == (
        "0 of the paper's loads left to set beside Table 3 (a curve needs 2)")


def test_ecmp_trials_with_an_unknown_split_are_left_out():
    from nslab.experiments.ecmp.model import trial_invalid
    assert trial_invalid(3, 0, 3) == []
    assert trial_invalid(2, 1, 3) == ["2 of 3 streams reported", "1 stream(s) on no captured link"]
    recs = [_ecmp(0, t, "3+0", 955e6) for t in range(5)]
    broken = recs[0].model_copy(update={"measurements": recs[0].measurements.model_copy(
        update={"unassigned_streams": 1})})
    got = ecmp_report.claims([broken] + recs[1:], {"streams": 3, "spines": 2,
                                                   "link_rate": "1Gbit"})
    assert "4/4" in got[0].measured and "1 trial(s) excluded" in got[0].why


def test_ecmp_l4_that_never_split_is_undecided_not_a_crash():
    recs = [_ecmp(1, 0, "3+0", 955e6)]
    got = {c.claim: c for c in ecmp_report.claims(recs, {"streams": 3, "spines": 2,
                                                          "link_rate": "1Gbit"})}
    spread = got["L4 hashing spreads the streams over both links (1.97 Gbit/s)"]
    assert spread.verdict == "undecided" and "no trial used more than one link" in spread.why


def test_the_bed_floor_is_shown_beside_latency_once_per_run():
    prov = {"config": {"keep_awake": True}, "setups": {
        "bridge": {"bed_floor": {"idle_us": [13, 14, 12], "awake_us": [9, 9, 10]}},
        "router": {"bed_floor": {"idle_us": [13, 14, 12], "awake_us": [9, 9, 10],
                                 "reused": True}}}}
    assert rfc_tables.bed_text(prov) == ("; the bed alone (generator -> sink, no DUT): 9 us "
                                         "with CPUs kept awake")
    prov["config"]["keep_awake"] = False
    assert "13 us" in rfc_tables.bed_text(prov) and "awake" not in rfc_tables.bed_text(prov)
    assert rfc_tables.bed_text({}) == ""


def _reading(fps: float, offered: float, loss: float, busy: float) -> dict:
    return {"received_fps": fps, "offered_fps": offered, "loss_pct": loss,
            "dut_busy_pct": busy, "cpus_kept_awake": False}


def test_a_calibration_reading_is_saturated_by_loss_or_a_busy_cpu_not_by_a_short_generator():
    from nslab.experiments.rfc2544.model import calibration_saturated, calibration_step
    # The reading that steered a real calibration wrong: nothing lost, the DUT
    # CPU 88 % busy, but the generator offered 79 of 82.8 kfps in the window.
    short = _reading(79000, 79000, 0.0, 88.0)
    assert not calibration_saturated(short)
    assert calibration_step(500, short, 66225, 0.04) == 750  # more filters, never fewer
    assert calibration_saturated(_reading(76882, 81900, 6.1, 100.0))
    assert calibration_saturated(_reading(81554, 81600, 0.0, 98.0))  # CPU-bound, no loss yet
    # kept awake, the CPU reads 100 %: only loss says saturated
    assert not calibration_saturated(dict(_reading(81554, 81600, 0.0, 100.0),
                                          cpus_kept_awake=True))
    # saturated within the tolerance: done; outside: scaled by capacity / target
    assert calibration_step(934, _reading(66128, 82000, 16.7, 100.0), 66225, 0.04) is None
    assert calibration_step(750, _reading(76882, 81900, 6.1, 100.0), 66225, 0.04) == 871


class _ModelDut:
    """A DUT whose frame costs 2,000 ns plus 14 ns per filter, behind a
    generator that offers 95 % of what it is asked: calibration readings
    without a lab."""

    def __init__(self, noise=(), disturbed_at=()):
        self.noise, self.disturbed_at, self.counts = list(noise), set(disturbed_at), []

    def __call__(self, n: int, offered: float) -> dict:
        self.counts.append(n)
        sent = 0.95 * offered
        cap = 1e9 / (2000 + 14 * n) * (self.noise.pop(0) if self.noise else 1.0)
        got = min(sent, cap)
        m = _reading(got, sent, 100 * (1 - got / sent), min(100.0, 100 * sent / cap))
        busy = 60.0 if len(self.counts) in self.disturbed_at else 0.0
        m["interference"] = {"dut": {"other_pct": busy, "other_s": 0.0, "top": []},
                             "gen": {"other_pct": 0.0, "other_s": 0.0, "top": []}}
        return m


def _calibrate(dut: "_ModelDut"):
    from nslab.experiments.rfc2544.config import Rfc2544Config
    from nslab.experiments.rfc2544.runner import Rfc2544Runner

    class Runner(Rfc2544Runner):
        def __init__(self):  # no lab: readings come from the model; the real bed's CPUs
            from nslab.experiments.rfc2544.bed import REAL
            self.cfg, self.dut = Rfc2544Config.preset("quick", bed="real"), "bridge"
            self.layout = REAL

        def target_ns(self):
            return 1e9 / 66225, "test"

        def line_fps(self, size):
            return 148810.0

        def _uncost(self):
            pass

        _reading = staticmethod(dut)

    return Runner().calibrate()


def test_calibration_converges_from_an_unsaturated_start_and_its_check_confirms_it():
    dut = _ModelDut()
    n, cal = _calibrate(dut)
    cap = 1e9 / (2000 + 14 * n)
    assert abs(cap / 66225 - 1) <= 0.04 and cal["checked"] is True
    assert dut.counts[:2] == [500, 750]  # unsaturated at 500: grown, not shrunk
    assert len(cal["checks"]) == 1 and len(cal["checks"][0]["readings"]) == 2
    assert [s["saturated"] for s in cal["steps"]][:2] == [False, True]


def test_a_check_off_by_more_than_its_tolerance_calibrates_again_from_the_check(caplog):
    # the search lands on 930 filters; both check readings then read 10 % low
    # (59.9 kfps): the search goes on from the check's figure and lands again
    dut = _ModelDut(noise=[1.0, 1.0, 1.0, 1.0, 0.90, 0.90])
    n, cal = _calibrate(dut)
    assert "930 filters forwarded 59" in caplog.text and "not within 5 %" in caplog.text
    assert len(cal["checks"]) == 2 and cal["checks"][0]["ok"] is False
    assert cal["checks"][1]["ok"] is True
    assert dut.counts[4:7] == [930, 930, 841]  # 930 x 59.9 / 66.2: from the check


def test_a_disturbed_saturated_calibration_reading_is_taken_again_at_the_same_count():
    dut = _ModelDut(disturbed_at={2})  # 750 filters: saturated (98 % busy), disturbed
    n, cal = _calibrate(dut)
    assert dut.counts[:3] == [500, 750, 750] and cal["checked"] is True
    assert cal["steps"][1]["saturated"]


def test_a_disturbed_reading_that_forwarded_past_the_target_unsaturated_still_grows_the_count(
        caplog):
    # A disturbance only takes CPU from the DUT: 78.7 kfps forwarded at 500
    # filters without saturating, disturbed or not, says "more filters".
    dut = _ModelDut(disturbed_at={1})
    n, cal = _calibrate(dut)
    assert dut.counts[:2] == [500, 750] and cal["checked"] is True
    # A host that disturbs every reading: the count grows from the unsaturated
    # one, and no saturated disturbed reading moves it; the check is never
    # clean, so the calibration ends unconfirmed (and the report says so).
    dut = _ModelDut(disturbed_at=set(range(1, 40)))
    n, cal = _calibrate(dut)
    assert n == 750 and set(dut.counts[1:]) == {750} and cal["checked"] is False
    assert "a reading disturbed by the host: calibrating again" in caplog.text


def test_only_an_unsaturated_reading_past_the_target_survives_a_disturbance():
    from nslab.experiments.rfc2544.model import calibration_still_says_more
    target = 66225
    assert calibration_still_says_more(_reading(82120, 82073, 0.0, 55.3), target, 0.04)
    # saturated: its capacity may be the host's
    assert not calibration_still_says_more(_reading(60000, 82000, 26.8, 100.0), target, 0.04)
    assert not calibration_still_says_more(_reading(81554, 81600, 0.0, 98.0), target, 0.04)
    # a generator short of the target: the DUT was not offered enough to say
    assert not calibration_still_says_more(_reading(60000, 60000, 0.0, 50.0), target, 0.04)
    assert not calibration_still_says_more(_reading(68000, 68000, 0.0, 50.0), target, 0.04)


def _latency_run(tmp_path, p50s):
    """The captured run's records, each DUT's 1,000-fps latency trial at 64 B
    repeated with the given per-trial medians (None: a trial without one)."""
    import json
    import shutil

    from tests.conftest import data
    shutil.copytree(data("rfc2544_run"), tmp_path / "r")
    path = tmp_path / "r" / "records.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    for rec in lines:
        p = rec["params"]
        if p["test"] == "latency" and p["frame"] == 64:
            nominal = rec["measurements"]["trials"][0]
            trials = []
            for i, (p50, avg) in enumerate(p50s[p["dut"]]):
                lat = dict(nominal["latency_us"], avg=avg)
                if p50 is not None:
                    lat.update(p50=p50, p99=p50 * 3)
                trials.append(dict(nominal, latency_us=lat))
            rec["measurements"]["trials"] = trials + rec["measurements"]["trials"][1:]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return RFC_SCHEMA.load(str(tmp_path / "r"))


def test_the_routers_extra_latency_stays_on_each_trials_mean(tmp_path):
    # Medians are recorded, but judged per trial they let lab builds that
    # differ pass for a decided interval: the claim reads the means.
    pub = load_published("rfc2544")
    title = "A router adds about 5 us of latency over a bridge (64 bytes)"
    recs = _latency_run(tmp_path, {"bridge": [(50.1, 68.0), (50.3, 60.3), (50.2, 66.1)],
                                   "router": [(55.0, 91.1), (55.4, 57.3), (55.1, 81.0)]})
    nominal = [t for r in recs if r.params.test == "latency" and r.params.frame == 64
               for t in r.measurements.trials if t.target_fps == 1000]
    assert len(nominal) == 6 and all(t.latency_us.p50 for t in nominal)  # the records keep them
    claim = {c.claim: c for c in rfc_claims.claims(recs, ["bridge", "router"], pub, {})}[title]
    assert claim.verdict == "undecided" and "+11.7 us" in claim.measured


def test_claims_on_the_calibrated_cost_are_undecided_when_the_calibration_was_not_confirmed():
    from nslab.experiments.rfc2544.claims import calibration_why, on_the_calibration
    from nslab.store.reporting import Claim
    reading = {"filters": 500, "capacity_fps": 82367.0, "invalid": [
        "host interference: the DUT CPU ran 30 % slower than its fastest in this run (over "
        "10 %: the host gave this guest's CPU less) (3 tries)"]}
    cal = {"filters": 500, "target_fps": 66225.0, "checked": False,
           "checks": [{"filters": 500, "capacity_fps": 82244.0, "ok": False,
                       "readings": [reading]}]}
    prov = {"setups": {"bridge": {"calibration": cal}, "router": {"calibration": cal}}}
    why = calibration_why(prov)
    assert why == ("the calibration was not confirmed: its check forwarded 82,244 fps with 500 "
                   "filters, but a reading of it was left out (host interference)")
    made = [Claim("bridge: the CPU is the limit", "42 %", "disagrees", "below 90 %"),
            Claim("router: the CPU is the limit", "-", "undecided", "n=1")]
    got = on_the_calibration(made, prov)
    assert got[0].verdict == "undecided"
    # the calibration's reason is a part of its own: the same in every row it
    # touches, a report states it once
    assert got[0].why == f"{why}; on its own, the interval disagrees: below 90 %"
    assert got[1] is made[1]
    # confirmed, given (--dut-cost) or older runs: the claims as they were
    for ok in ({"setups": {"bridge": {"calibration": dict(cal, checked=True)}}},
               {"setups": {"bridge": {"dut_cost_filters": 700}}}, None):
        assert calibration_why(ok) is None and on_the_calibration(made, ok) == made


def test_the_latency_claim_stays_when_only_a_duts_nominal_trials_were_left_out(tmp_path):
    """The router's trials at 1,000 fps all left out for host interference, its
    trial at 90 % of line rate valid: the claim is made, undecided, with the
    reason (it once dropped out of a quick run's table)."""
    import json
    pub = load_published("rfc2544")
    title = "A router adds about 5 us of latency over a bridge (64 bytes)"
    _latency_run(tmp_path, {"bridge": [(50.1, 68.0), (50.3, 60.3)],
                            "router": [(55.0, 91.1), (55.4, 57.3)]})
    path = tmp_path / "r" / "records.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    slow = ("host interference: the DUT CPU ran 72 % slower than its fastest in this run (over "
            "10 %: the host gave this guest's CPU less) (1 tries)")
    for rec in lines:
        if rec["params"]["test"] == "latency" and rec["params"]["dut"] == "router":
            trials = rec["measurements"]["trials"]
            assert any(t["target_fps"] != 1000 and not t.get("invalid") for t in trials)
            for t in trials:
                if t["target_fps"] == 1000:
                    t["invalid"] = [slow]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    recs = RFC_SCHEMA.load(str(tmp_path / "r"))
    claim = {c.claim: c for c in rfc_claims.claims(recs, ["bridge", "router"], pub, {})}[title]
    assert claim.verdict == "undecided" and claim.measured == "no valid latency trial"
    # counted at its own size (the 1518-byte trial is its own claim's)
    assert claim.why.startswith("every latency trial of the router at 1,000 fps was left out "
                                "(2 of 2: host interference); host interference left out "
                                ), claim.why
    # ...then what the host did in the run (every size's trials), stated once in a report
    assert "trials of this run" in claim.why, claim.why
    assert claim.decide == "a quiet host, or --bed virtual"


def test_the_latency_claim_is_made_per_frame_size_whatever_was_left_out_at_another(tmp_path):
    """Latency at 64 and 1518 bytes (the captured run), the router's 1,000 fps
    trial left out at 1518 only: the 64-byte claim is judged, the 1518-byte
    one stays, undecided, with the reason of its own size. Before, one DUT
    with no valid trial at some size turned every size's claim into a single
    undecided "(64 bytes)" one, counting every size's trials."""
    import json
    pub = load_published("rfc2544")
    _latency_run(tmp_path, {"bridge": [(50.1, 68.0), (50.3, 60.3), (50.2, 66.1)],
                            "router": [(55.0, 71.1), (55.4, 72.3), (55.1, 70.0)]})
    path = tmp_path / "r" / "records.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    slow = "host interference: the DUT CPU ran 72 % slower than its fastest in this run"
    hit = 0
    for rec in lines:
        p = rec["params"]
        if p["test"] == "latency" and p["dut"] == "router" and p["frame"] == 1518:
            for t in rec["measurements"]["trials"]:
                if t["target_fps"] == 1000:
                    t["invalid"] = [slow]
                    hit += 1
    assert hit == 1
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    recs = RFC_SCHEMA.load(str(tmp_path / "r"))
    got = {c.claim: c for c in rfc_claims.claims(recs, ["bridge", "router"], pub, {})}
    judged = got["A router adds about 5 us of latency over a bridge (64 bytes)"]
    assert judged.measured.startswith("router minus bridge at 1,000 fps: +6.3 us")
    gone = got["A router adds about 5 us of latency over a bridge (1518 bytes)"]
    assert gone.verdict == "undecided" and gone.measured == "no valid latency trial"
    assert gone.why.startswith("every latency trial of the router at 1,000 fps was left out "
                               "(1 of 1: host interference)"), gone.why
    assert gone.reads == [{"test": "latency", "dut": "bridge", "frame": 1518},
                          {"test": "latency", "dut": "router", "frame": 1518}]


def test_a_sweep_left_out_says_how_many_trials_and_its_most_frequent_reason(tmp_path):
    import json
    import shutil

    from tests.conftest import data
    shutil.copytree(data("rfc2544_run"), tmp_path / "r")
    path = tmp_path / "r" / "records.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    n = 0
    for rec in lines:
        if rec["params"]["test"] == "loss" and rec["params"]["dut"] == "bridge":
            for t in rec["measurements"]["trials"]:
                n += 1
                t["invalid"] = ["the generator/sink CPU was 96 % busy" if n == 1 else
                                "host interference: the DUT CPU ran 80 % slower (1 tries)"]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert n > 2
    why = rfc_tables.invalid_why(RFC_SCHEMA.load(str(tmp_path / "r")), "loss", "bridge")
    assert why == (f"every loss trial was left out ({n} of {n}; {n - 1} of them: host "
                   "interference)")


def _occupancy_claim(tmp_path, cpu_of):
    """The stored run's bridge sweep measured twice at each load (its trials
    copied), with ``cpu_of(paper_fps, paper_cpu, sweep)`` as each trial's DUT
    CPU occupancy; the occupancy claim judged from those records."""
    import copy
    import json
    import shutil

    from tests.conftest import data
    shutil.copytree(data("rfc2544_run"), tmp_path / "r")
    pub = load_published("rfc2544")
    paper = {float(r[0]): r[4] for r in pub["table3_bridge_overload_64B"]["rows"]}
    path = tmp_path / "r" / "records.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    for rec in lines:
        if rec["params"]["test"] == "loss" and rec["params"]["dut"] == "bridge":
            trials = rec["measurements"]["trials"]
            trials += copy.deepcopy(trials)
            for i, t in enumerate(trials):
                fps = float(t["target_fps"])
                if paper.get(fps) is not None:
                    t["dut_occupancy_pct"] = cpu_of(fps, paper[fps], i * 2 // len(trials))
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    recs = RFC_SCHEMA.load(str(tmp_path / "r"))
    got = {c.claim: c for c in rfc_claims.claims(recs, ["bridge"], pub, {})}
    return got["bridge: occupancy vs load follows the paper's Table 3"]


def test_the_occupancy_curve_follows_table_3_where_every_load_lies_inside_the_band(tmp_path):
    # Two sweeps 0.02 points apart at each load (a quick run's two sweeps on
    # the virtual bed differed by 0.0005, 0.03 and 0.10 points where the CPU
    # was not saturated): each load's 99 % t interval from two values,
    # t(0.995, 1) = 63.66, is +-0.64 points.
    fit = _occupancy_claim(tmp_path, lambda fps, cpu, sweep: cpu + (0.01 if sweep else -0.01))
    assert fit.verdict == "agrees", fit.why
    assert fit.why == ("every load's interval lies inside [-10, 10] points (each load's t "
                       "interval at 99 %: Bonferroni over 5 loads)")
    assert "20,000 fps: +0.0, [-0.6, 0.6] (99 % t), n=2" in fit.measured, fit.measured


def test_the_curves_part_where_one_load_lies_outside_the_band(tmp_path):
    """Its mean difference over the loads (+6 points) is inside the band, but at
    55,556 fps ours is 30 points above the paper's, and so the curves part."""
    fit = _occupancy_claim(tmp_path, lambda fps, cpu, sweep: cpu + (30 if fps == 55556 else 0)
                           + (0.01 if sweep else -0.01))
    assert fit.verdict == "disagrees", fit.why
    assert fit.why.startswith("the interval at 55,556 fps lies outside [-10, 10] points: the "
                              "curves part there"), fit.why


def test_a_load_across_the_bands_edge_leaves_the_curve_undecided(tmp_path):
    fit = _occupancy_claim(tmp_path, lambda fps, cpu, sweep: cpu + ((12 if sweep else 6)
                                                                   if fps == 40000 else 0))
    assert fit.verdict == "undecided" and not fit.decide.startswith("--loss"), fit
    assert fit.why.startswith("no load's interval lies outside [-10, 10] points; the interval "
                              "at 40,000 fps straddles the band's edge"), fit.why
    assert fit.why.endswith("undecided: run the default preset")


def test_one_sweep_gives_no_interval_at_a_load_and_says_to_measure_each_twice():
    from tests.conftest import data
    recs = RFC_SCHEMA.load(data("rfc2544_run"))
    got = {c.claim: c for c in rfc_claims.claims(recs, ["bridge"], load_published("rfc2544"), {})}
    fit = got["bridge: occupancy vs load follows the paper's Table 3"]
    assert fit.verdict == "undecided" and fit.decide == "--loss-sweeps 2", fit
    assert fit.why == ("no load has an interval; at 1,000; 20,000; 40,000; 55,556 and 62,500 fps "
                       "one valid trial was kept, which gives no interval; undecided: "
                       "--loss-sweeps 2 measures each load twice"), fit.why


def test_a_run_that_looks_twice_draws_each_loads_interval_for_both_looks(tmp_path):
    """Sampling in rounds (the real bed's quick preset: 2) draws every interval
    at 1 - 0.05/2; over 5 loads each load's is at 1 - 0.05/10, and says so."""
    from nslab.store.stats import sequential
    with sequential(2):
        fit = _occupancy_claim(tmp_path, lambda fps, cpu, sweep: cpu + (0.01 if sweep else -0.01))
    assert fit.verdict == "agrees", fit.why
    assert fit.why.endswith("(each load's t interval at 99.5 %: Bonferroni over 5 loads and 2 "
                            "looks)"), fit.why
    assert "(99.5 % t), n=2" in fit.measured, fit.measured
