"""RFC 2544 logic, the generator on loopback (no root), and the report from a captured run."""
import json
import os
import shutil
import subprocess

import pytest

from nslab.traffic.counters import busy_pct
from nslab.errors import CapabilityError, InputError
from nslab.experiments.rfc2544.config import Rfc2544Config
from nslab.experiments.rfc2544.model import PAPER_FPS, loads, theory_table
from nslab.experiments.rfc2544.records import SCHEMA, BackToBack, Throughput
from nslab.experiments.rfc2544.report import write_report
from nslab.experiments.rfc2544.tables import back_to_back_rows, table3
from nslab.experiments.rfc2544.study import Rfc2544Study
from nslab.traffic.pktgen import pktgen_path
from nslab.store.published import load_published
from nslab.topologies.rfc2544 import dut_chain, roles
from tests.conftest import data


def test_theory_table_matches_rfc2544():
    rows = {s: fps for s, fps, _ in theory_table(100e6, [64, 1518])}
    assert round(rows[64]) == 148_810 and round(rows[1518]) == 8_127


@pytest.mark.parametrize("kwargs, message", [
    ({"frame_sizes": [63]}, "frame_sizes.0: Input should be greater than or equal to 64"),
    ({"frame_sizes": [1519]}, "over what an MTU of 1500"),
    ({"duts": ["switch9"]}, "duts.0: 'switch9' is not one of"),
    ({"tests": ["speed"]}, "tests.0: 'speed' is not one of"),
    ({"link_rate": "10 parsecs"}, "link_rate: bad rate"),
    ({"trial": 0.1}, "trial: Input should be greater than or equal to 0.5"),
    ({"resolution": 0}, "resolution: Input should be greater than 0"),
    ({"dut_cost": -1}, "dut_cost: Input should be greater than or equal to 0"),
    ({"tests": []}, "tests: empty list"),
    ({"tests": ["back-to-back"], "b2b_repeat": 0}, "b2b_repeat: Input should be greater"),
    ({"dut_cost": 100, "dut_fps_64": 50000}, "dut_fps_64 and dut_cost: give one way"),
    ({"dut_fps_64": 10}, "dut_fps_64: Input should be greater than or equal to 1000"),
])
def test_config_validation(kwargs, message):
    with pytest.raises(InputError, match=message):
        Rfc2544Config.parse(kwargs)


def test_topologies_for_each_dut():
    b = dut_chain("bridge")
    assert b.nodes["dut"].is_switch and b.switch_type_of("dut") == "bridge"
    assert b.links[0].shaping.overhead == 24 and b.links[0].shaping.rate == 100_000_000
    r = dut_chain("router")
    assert r.nodes["dut"].kind == "router"
    assert str(r.addresses()[("dut", "dut-eth1")]) == "192.168.2.1/24"
    assert roles("router") == ("192.168.2.10", "dut-eth0")
    with pytest.raises(InputError):
        dut_chain("hub")


def test_busy_pct():
    assert busy_pct([(0, 0), (10, 100)], [(0, 0), (60, 200)], 1) == 50.0


def test_the_load_sweep_uses_the_papers_rates_for_64_bytes():
    t3 = load_published("rfc2544")["table3_bridge_overload_64B"]
    assert [r[0] for r in t3["rows"]] == PAPER_FPS  # the sweep offers the paper's own loads
    assert loads(64, 148810.0, True, False, [10]) == [float(f) for f in PAPER_FPS] + [163691.0]
    assert loads(1518, 8127.0, True, True, [10]) == [812.7, 4063.5, 7314.3, 8939.7]


def test_the_quick_preset_measures_64_byte_frames_only():
    """The demo's budget: at 1518 bytes both DUTs forward line rate; the
    default preset measures every size."""
    assert Rfc2544Config.preset("quick").frame_sizes == [64]
    assert 1518 in Rfc2544Config.preset("default").frame_sizes


def test_one_lab_per_dut_and_the_points_in_order():
    cfg = Rfc2544Config.preset("quick", duts=["router", "ovs"], frame_sizes=[64, 1518],
                               tests=["cost", "throughput", "latency", "loss"])
    study = Rfc2544Study()
    assert list(study.labs(cfg)) == ["router", "ovs"]
    pts = study.points(cfg)
    # 2 DUTs x 2 sizes x (throughput, latency, two loss sweeps), and the intrinsic
    # cost at 64 B only
    assert len(pts) == 2 * 2 * 4 + 2 and pts[0] == {"dut": "router", "frame": 64, "test": "cost",
                                                    "repeat": 0}
    assert [p["frame"] for p in pts if p["test"] == "cost"] == [64, 64]
    assert {study.lab_key(cfg, p) for p in pts} == {"router", "ovs"}


def test_each_loss_sweep_is_its_own_point_and_a_later_round_adds_after_them():
    from nslab.run.study import config_of_round, point_key
    cfg = Rfc2544Config.preset("quick", duts=["router"])
    study = Rfc2544Study()
    first = [p["repeat"] for p in study.points(cfg) if p["test"] == "loss"]
    assert first == [0, 1]
    later = study.points(config_of_round(cfg, 1))
    assert [p["repeat"] for p in later if p["test"] == "loss"] == [0, 1, 2, 3]
    assert len({point_key(p) for p in later}) == len(later)
    one = Rfc2544Config.preset("default", duts=["router"], frame_sizes=[64])
    assert [p["repeat"] for p in study.points(one) if p["test"] == "loss"] == [0]


def test_a_later_round_measures_only_the_points_of_undecided_claims(tmp_path):
    """Every claim of a captured run names the points it is judged on; a later
    round of RFC 2544 keeps those of the undecided ones only (the
    intrinsic-cost test feeds no claim), and every point for a claim that
    does not say what it reads."""
    import dataclasses

    from nslab.store.reporting import Claim
    run = tmp_path / "rfc2544" / "nlb9f9"
    shutil.copytree(data("rfc2544_run"), run)
    found = {c.claim: c for c in write_report(str(run)).claims}
    assert found and all(c.reads for c in found.values()), \
        [t for t, c in found.items() if not c.reads]
    cfg = Rfc2544Config.preset("quick")
    study = Rfc2544Study()
    pts = study.points(cfg)

    def open_(title: str) -> Claim:
        return dataclasses.replace(found[title], verdict="undecided")
    knee = open_("router: latency stays low until the DUT CPU saturates, then jumps")
    lat = open_("A router adds about 5 us of latency over a bridge (64 bytes)")
    got = study.needed(cfg, pts, [knee, lat])
    assert sorted((p["dut"], p["test"], p["repeat"]) for p in got) == [
        ("bridge", "latency", 0), ("router", "latency", 0), ("router", "loss", 0),
        ("router", "loss", 1)]
    same = open_("Bridge and router forward about the same at 64 bytes")
    assert {(p["dut"], p["test"]) for p in study.needed(cfg, pts, [same])} == {
        ("bridge", "throughput"), ("router", "throughput")}
    cal = open_("The bridge saturates at ~66 kfps of 64-byte frames (Table 3)")
    assert {(p["dut"], p["test"]) for p in study.needed(cfg, pts, [cal])} == {
        ("bridge", "throughput")}
    assert not any(p["test"] == "cost" for p in study.needed(cfg, pts, list(found.values())))
    unsaid = Claim("a claim that does not say what it reads", "", "undecided", "")
    assert study.needed(cfg, pts, [same, unsaid]) == pts
    assert study.needed(cfg, pts, []) == []


def _threshold_dut(limit: float, probes: list):
    def ok(fps: float) -> bool:
        probes.append(fps)
        return fps <= limit
    return ok


def test_the_rate_search_finds_the_highest_passing_rate_within_its_step():
    import random
    from nslab.experiments.rfc2544.model import rate_search
    rng = random.Random(1)
    for limit in (1000.0, 66225.0, 74000.0, 148810.0):
        probes: list = []
        got = rate_search(_threshold_dut(limit, probes), 148810.0, 2232.0, None, rng)
        assert limit - 2232.0 <= got <= limit, (limit, got)
        hinted: list = []
        again = rate_search(_threshold_dut(limit, hinted), 148810.0, 2232.0, got, rng)
        assert limit - 2232.0 <= again <= limit
        assert len(hinted) <= len(probes)  # the hint saves probes
    assert rate_search(_threshold_dut(0.0, []), 148810.0, 2232.0, None, rng) == 0.0


def test_the_rate_searches_of_one_point_round_independently():
    """The regression: a midpoint bisection bracketing the first search's
    result walked one grid, so the later searches repeated the first's
    rounding (three searches of one lab came out at 74,591 fps each). On a
    DUT that passes exactly up to a limit, the dithered searches' rounding
    errors spread over the step, as independent samples' would."""
    import random
    import statistics
    from nslab.experiments.rfc2544.model import rate_search
    rng = random.Random(7)
    limit, step = 74000.0, 2232.0
    first = rate_search(_threshold_dut(limit, []), 148810.0, step, None, rng)
    later = [rate_search(_threshold_dut(limit, []), 148810.0, step, first, rng)
             for _ in range(200)]
    errors = [limit - x for x in later]
    assert all(0 <= e <= step for e in errors)
    assert len({round(x) for x in later}) > 150  # not one grid point
    # uniform rounding over [0, step] has sd step / sqrt(12): dithered, the
    # spread is of that order, not zero
    assert 0.5 * step / 12 ** 0.5 < statistics.stdev(errors) < 1.5 * step / 12 ** 0.5


def test_generator_rejects_a_runt_frame():
    try:
        pg = pktgen_path()
    except CapabilityError:
        pytest.skip("nslab-pktgen not built (make setup)")
    res = subprocess.run([pg, "send", "--dst", "127.0.0.1", "--size", "40", "--rate", "1",
                          "--duration", "0.1"], capture_output=True, text=True)
    assert res.returncode == 2
    assert res.stderr == "nslab-pktgen: bad --size '40': a whole number from 64 to 1518\n"


def test_report_from_a_captured_run(tmp_path):
    run = tmp_path / "rfc2544" / "nlb9f9"
    shutil.copytree(data("rfc2544_run"), run)
    rep = write_report(str(run))
    text = open(rep.files["md"]).read()
    assert "Table 3 format: bridge" in text and "Published: the paper's Table 3" in text
    paper = load_published("rfc2544")["table3_bridge_overload_64B"]["rows"]
    fps, inp, lat, tp, _ = paper[-2]
    assert f"| {fps:,} | {inp:,} | {lat:,} | {tp:,} | N/A |" in text
    rows = table3(SCHEMA.load(str(run)), "bridge")
    assert rows[0]["fps"] == 1000 and rows[-1]["fps"] == 100000
    # The captured run saturated the DUT at the top load: latency far above the bottom.
    assert rows[-1]["latency_us"] > 100 * rows[0]["latency_us"]
    assert os.path.getsize(rep.files["plot_png"]) > 0


def test_back_to_back_is_opt_in_and_in_the_full_preset():
    assert "back-to-back" not in Rfc2544Config().tests
    assert "back-to-back" in Rfc2544Config.preset("full").tests


@pytest.mark.timed
def test_generator_sends_an_exact_burst_with_count():
    try:
        pg = pktgen_path()
    except CapabilityError:
        pytest.skip("nslab-pktgen not built (make setup)")
    port = 20000 + (os.getpid() + 7) % 20000
    sink = subprocess.Popen([pg, "recv", "--port", str(port), "--duration", "2"],
                            stdout=subprocess.PIPE, text=True)
    assert "ready" in sink.stdout.readline()
    gen = subprocess.run([pg, "send", "--dst", "127.0.0.1", "--port", str(port), "--size", "64",
                          "--rate", "100000", "--count", "1234", "--duration", "5"],
                         capture_output=True, text=True, timeout=10)
    g = json.loads(gen.stdout)
    s = json.loads(sink.communicate(timeout=10)[0].strip().splitlines()[-1])
    assert g["sent"] == 1234 and g["count"] == 1234 and g["errors"] == 0
    assert g["elapsed"] < 1.0  # stopped at the count, not at --duration
    assert s["received"] == 1234 and s["max_seq"] == 1233


def test_back_to_back_report_from_a_captured_run(tmp_path):
    run = tmp_path / "rfc2544" / "nlbdce"
    shutil.copytree(data("rfc2544_b2b_run"), run)
    text = open(write_report(str(run)).files["md"]).read()
    assert "## Back-to-back" in text
    recs = SCHEMA.load(str(run))
    rows = {(x["dut"], x["frame"]): x for x in back_to_back_rows(recs)}
    assert set(rows) == {("bridge", 64), ("bridge", 1518), ("router", 64), ("router", 1518)}
    # 1518 bytes: the DUT kept up for the whole trial, so there is no limit to predict.
    assert rows[("bridge", 1518)]["whole_trial"] and rows[("bridge", 1518)]["predicted"] is None
    assert "all 4,064 tried" in text
    # 64 bytes: the prediction is the input queue over the rate it fills at.
    tp = next(r.measurements for r in recs
              if (r.params.dut, r.params.frame, r.params.test) == ("bridge", 64, "throughput"))
    b2b = next(r.measurements for r in recs
               if (r.params.dut, r.params.frame, r.params.test) == ("bridge", 64, "back-to-back"))
    assert isinstance(tp, Throughput) and isinstance(b2b, BackToBack)
    want = b2b.backlog_limit / (1 - tp.throughput_fps / tp.line_fps)
    assert rows[("bridge", 64)]["predicted"] == pytest.approx(want)
    assert f"| bridge | 64 | {b2b.frames_mean:,.0f} |" in text
    assert "back-to-back, bridge at 64 bytes" in text


def test_rfc2544_across_hosts_is_refused_before_anything_is_built():
    from nslab.errors import InputError
    from nslab.experiments.rfc2544.config import Rfc2544Config
    from nslab.experiments.rfc2544.study import Rfc2544Study
    with pytest.raises(InputError, match="without --hosts"):
        Rfc2544Study().check_hosts(Rfc2544Config.preset("quick"))


def test_rfc2544_runner_takes_a_lab_on_this_machine_only():
    """check_hosts refuses --hosts before anything is built; should a lab of
    another kind reach the runner anyway, it says so in one line (the runner
    sets static ARP entries, which only a Lab offers)."""
    from nslab.errors import InputError
    from nslab.experiments.rfc2544.config import Rfc2544Config
    from nslab.experiments.rfc2544.study import Rfc2544Study

    class OtherLab:
        pass

    with pytest.raises(InputError, match="runs on one machine .*OtherLab"):
        Rfc2544Study().runner("bridge", OtherLab(), Rfc2544Config.preset("quick"), None)


def test_the_input_queue_is_read_from_softnet_stat_of_each_kernel():
    """Column 12 of /proc/net/softnet_stat (Linux 5.10+: 13 columns; 6.9+
    adds two more); a kernel before 5.10 has 11 and gives None."""
    from nslab.traffic.counters import softnet_queues
    captured = open(data("proc/6.18.44-fc-v595/softnet_stat")).read()
    rows = captured.splitlines()
    assert len(softnet_queues(captured)) == len(rows) and all(
        isinstance(q, int) for q in softnet_queues(captured))
    # a 6.1 row (13 columns) holding 0x3e8 frames, and a 4.19 row (11)
    six_one = "0004bf49 00000000 00000002 00000000 00000000 00000000 00000000 00000000 " \
              "00000000 00ede10d 00000000 000003e8 00000001"
    old = " ".join(["00000000"] * 11)
    assert softnet_queues(six_one + "\n" + old + "\n") == [1000, None]


def test_a_trial_whose_input_queue_grew_by_a_step_fell_behind():
    """0.7 s at 74 kfps against a DUT that sustains 69.5 kfps queues ~3,150
    frames and, with a 5,000-frame backlog, loses none: the search must not
    pass it. At 70 kfps (a few hundred queued) it passes; unknown passes."""
    from nslab.experiments.rfc2544.model import fell_behind
    step, elapsed = 0.015 * 148810, 0.7
    assert fell_behind(int((74000 - 69500) * elapsed), step, elapsed)
    assert not fell_behind(int((70000 - 69500) * elapsed), step, elapsed)
    assert not fell_behind(None, step, elapsed)


def test_a_queue_within_one_poll_of_the_step_did_not_fall_behind():
    """The virtual bed at the quick preset: a step of 37.2 fps over 0.7 s is
    26 frames, less than the 64 a poll takes. The frames a CI run's bridge
    left at its window's end while it kept up (42, 45, 64: the next run
    passed higher rates losing nothing) are a poll's sawtooth, not a DUT
    behind; a ring that grew by a step beyond one poll is."""
    from nslab.experiments.rfc2544.model import POLL_BUDGET, fell_behind, search_step
    step, elapsed = 0.015 * 7440 / 3, 0.7
    assert POLL_BUDGET == 64
    for queued in (0, 26, 42, 45, 64):
        assert not fell_behind(queued, step, elapsed), queued
    assert fell_behind(int(step * elapsed) + POLL_BUDGET + 1, step, elapsed)
    # and its searches step by what a 0.7 s trial can tell: 64 frames over it
    assert search_step(step, elapsed) == POLL_BUDGET / elapsed
    assert round(search_step(step, elapsed)) == 91
    assert search_step(step, 2.5) == step  # the standard preset's 2.5 s tell 26 fps apart
    real = 0.015 * 148810  # the real bed's step is coarser than any trial's reach
    assert search_step(real, 0.7) == real


def test_a_trial_is_counted_once_its_frames_arrived_or_stood_still_with_the_dut_empty():
    from nslab.experiments.rfc2544.model import DRAIN_MAX_S, DRAIN_STILL_S, drain_done
    # all arrived: at once, however recently the count moved
    assert drain_done(21505, 21505, 0.0, 40, 0.05)
    # the host's CI failure: 14 frames still to come, the count moving
    assert not drain_done(21505, 21491, 0.0, None, 0.5)
    # standing still, but the DUT still holds frames: it is slow, not done
    assert not drain_done(21505, 21491, DRAIN_STILL_S, 14, 1.0)
    # standing still with the DUT empty (or a kernel that does not say): lost
    assert drain_done(21505, 21491, DRAIN_STILL_S, 0, 1.0)
    assert drain_done(21505, 21491, DRAIN_STILL_S, None, 1.0)
    assert not drain_done(21505, 21491, DRAIN_STILL_S - 0.05, 0, 1.0)
    # RFC 2544's two seconds end any wait
    assert drain_done(21505, 100, 0.0, 5000, DRAIN_MAX_S)
