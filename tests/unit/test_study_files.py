"""Study files without root: the schema, line-numbered errors on bad files,
plan expansion, the pure metrics on captured output, and claims judged on
stored records (a real quick run of the failover study, tests/data/failover_run)."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from nslab.errors import InputError
from nslab.experiments.filestudy import analysis
from nslab.experiments.filestudy.cli import schema
from nslab.experiments.filestudy.model import ClaimSpec
from nslab.experiments.filestudy.records import SCHEMA
from nslab.experiments.filestudy.spec import load
from nslab.experiments.filestudy.study import study_class
from nslab.traffic.iperf import parse
from nslab.traffic.probe import outage, parse_arrivals

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data")
FAILOVER = os.path.join(ROOT, "studies", "ecmp-failover.yaml")
NSLAB = os.path.join(os.path.dirname(sys.executable), "nslab")

MINIMAL = """\
name: minimal
title: One iperf flow on a pair, its rate halved mid-way
topology:
  ready: pair
duration: 4
traffic:
  - {id: tcp, kind: iperf-tcp, src: h1, dst: h2}
events:
  - {at: 2, do: link-rate, link: [h1, h2], rate: 50M}
metrics:
  - {metric: goodput, flow: tcp, name: before, window: [0, 2]}
  - {metric: goodput, flow: tcp, name: after, window: [2, 4]}
claims:
  - claim: halving the rate lowers goodput
    value: after
    versus: {where: {repeat: 0}}
    lower: true
repeat: 2
"""


def write(tmp_path, text, name="study.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return str(p)


def error_of(tmp_path, text):
    with pytest.raises(InputError) as exc:
        load(write(tmp_path, text))
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


# -- the schema --------------------------------------------------------------------------
def test_the_shipped_schema_is_the_models():
    with open(os.path.join(ROOT, "docs", "study.schema.json")) as f:
        shipped = json.load(f)
    assert shipped == schema(), "regenerate: nslab study schema > docs/study.schema.json"


def test_the_shipped_study_validates_against_the_published_schema():
    import jsonschema
    import yaml
    with open(FAILOVER) as f:
        doc = yaml.safe_load(f)
    jsonschema.validate(doc, schema())
    bad = dict(doc, traffic=[{"id": "x", "kind": "carrier-pigeon", "src": "a", "dst": "b"}])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema())


# -- plans -------------------------------------------------------------------------------
def test_the_failover_study_plans_two_labs_and_every_combination():
    cls = study_class(FAILOVER)
    study = cls()
    cfg = cls.Config.preset("default")
    points = study.points(cfg)
    # bfd x failure x policy x repeat, less link-down with BFD (excluded in the file)
    assert len(points) == (2 * 3 - 1) * 2 * 3
    assert not any(p["vars.failure"] == "link-down" and p["topology.bfd"] for p in points)
    assert set(study.labs(cfg)) == {"bfd=False", "bfd=True"}
    # grouped by lab: each lab is built once
    keys = [study.lab_key(cfg, p) for p in points]
    assert keys == sorted(keys, key=keys.index) and keys[0] != keys[-1]
    quick = cls.Config.preset("quick")
    assert len(study.points(quick)) == (2 * 2 - 1) * 1 * 2 and quick.duration == 4.5
    labs, n, seconds = cls.estimate(quick)
    assert (labs, n) == (2, 6) and 40 < seconds < 300


def test_a_command_line_value_is_checked_against_the_file():
    cls = study_class(FAILOVER)
    cfg = cls.Config.preset("quick", vars_failure=["bgpd-killed"])
    assert cls.sweep(cfg)["vars.failure"] == ["bgpd-killed"]
    cfg = cls.Config.preset("quick", topology_bfd=["true"])  # as --topology-bfd true gives it
    assert cls.sweep(cfg)["topology.bfd"] == [True]
    with pytest.raises(InputError, match="after the traffic ends"):
        cls.Config.preset("default", duration=1)
    with pytest.raises(InputError, match="not a duration|greater than 0"):
        cls.Config.preset("default", duration=-3)


def test_needs_name_netem_only_when_an_event_uses_it(tmp_path):
    cls = study_class(write(tmp_path, MINIMAL))
    assert "netem" not in cls().needs(cls.Config.preset())
    text = MINIMAL.replace("do: link-rate, link: [h1, h2], rate: 50M",
                           "do: link-netem, link: [h1, h2], delay: 20ms")
    cls = study_class(write(tmp_path, text, "netem.yaml"))
    assert "netem" in cls().needs(cls.Config.preset())


# -- bad input: one line naming file, line and field --------------------------------------
def test_an_unknown_node_names_the_line(tmp_path):
    msg = error_of(tmp_path, MINIMAL.replace("src: h1, dst: h2", "src: h1, dst: h9"))
    assert msg.startswith(str(tmp_path / "study.yaml") + ":7: traffic.0.dst: unknown node 'h9'")


def test_an_unknown_metric_is_refused_with_the_known_ones(tmp_path):
    msg = error_of(tmp_path, MINIMAL.replace("{metric: goodput, flow: tcp, name: before,",
                                             "{metric: jitter, flow: tcp, name: before,"))
    assert ":11: metrics.0" in msg and "'jitter'" in msg and "'goodput'" in msg


def test_an_event_after_the_traffic_ends(tmp_path):
    msg = error_of(tmp_path, MINIMAL.replace("{at: 2, do:", "{at: 4.5, do:"))
    assert ":9: events.0.at: at 4.5 s is after the traffic ends (4 s)" in msg


def test_a_sweep_over_a_field_that_does_not_exist(tmp_path):
    msg = error_of(tmp_path, MINIMAL + "sweep:\n  topology.colour: [red]\n")
    assert "sweep['topology.colour']: pair has no option 'colour'" in msg
    assert msg.split(":")[1] == "20"
    msg = error_of(tmp_path, MINIMAL + "sweep:\n  speed: [1, 2]\n")
    assert "unknown sweep key 'speed'" in msg


def test_a_sysctl_the_host_shares_is_refused_in_a_sweep(tmp_path):
    msg = error_of(tmp_path, MINIMAL + "sweep:\n  sysctl.h1.vm.swappiness: [10]\n")
    assert "sysctl.NODE.KEY" in msg and "vm.swappiness" in msg


def test_a_flow_that_a_metric_cannot_measure(tmp_path):
    msg = error_of(tmp_path, MINIMAL.replace("{metric: goodput, flow: tcp, name: before, "
                                             "window: [0, 2]}",
                                             "{metric: outage, flow: tcp, name: before}"))
    assert "metrics.0.flow: outage measures probe flows; tcp is iperf-tcp" in msg


def test_a_claim_on_a_value_nobody_measures(tmp_path):
    msg = error_of(tmp_path, MINIMAL.replace("value: after", "value: during"))
    assert ":15: claims.0.value: unknown value 'during' (values: after, before)" in msg


def test_a_python_topology_is_refused(tmp_path):
    text = MINIMAL.replace("  ready: pair", "  file: evil.py")
    msg = error_of(tmp_path, text)
    assert ":4: topology.file: 'evil.py': a topology file here must be YAML" in msg


def test_shell_text_in_a_name_goes_nowhere(tmp_path):
    msg = error_of(tmp_path, MINIMAL.replace("id: tcp, kind", "id: 'x; rm -rf /', kind"))
    assert "traffic.0.id" in msg and "not a name" in msg


def test_an_exclusion_on_a_key_that_is_not_swept(tmp_path):
    msg = error_of(tmp_path, MINIMAL + "exclude:\n  - {vars.y: 1}\n")
    assert "exclude.0['vars.y']: vars.y is not a sweep key" in msg


def test_a_when_on_a_key_that_is_not_swept(tmp_path):
    msg = error_of(tmp_path, MINIMAL.replace("{at: 2, do:", "{at: 2, when: {vars.x: 1}, do:"))
    assert "events.0.when['vars.x']: vars.x is not a sweep key" in msg


def test_a_daemon_event_on_a_node_without_frr(tmp_path):
    msg = error_of(tmp_path, MINIMAL.replace("do: link-rate, link: [h1, h2], rate: 50M",
                                             "do: daemon-kill, node: h1, daemon: bgpd"))
    assert "events.0.node: h1 runs no FRR" in msg


def test_the_cli_check_is_one_line_and_exit_1_on_a_bad_file(tmp_path):
    bad = write(tmp_path, MINIMAL.replace("dst: h2", "dst: h9"))
    res = subprocess.run([NSLAB, "study", "check", bad], capture_output=True, text=True)
    assert res.returncode != 0 and len(res.stderr.strip().splitlines()) == 1
    assert "unknown node 'h9'" in res.stderr
    res = subprocess.run([NSLAB, "study", "check", FAILOVER, "--preset", "quick"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "6 trials of 4.5 s on 2 lab(s)" in res.stdout and "frr" in res.stdout


# -- pure metrics on captured output -----------------------------------------------------
def test_probe_outage_on_a_captured_blackhole():
    with open(os.path.join(DATA, "studyfiles", "probe-arrivals-blackhole.txt")) as f:
        arrivals = parse_arrivals(f.read())
    o = outage(arrivals, sent=1000, rate=200)
    assert o.received == len(arrivals) == 405 and o.lost == 595
    # the hold timer (3 s after the last keepalive): between 2 and 3.1 s without a probe
    assert 2000 < o.gap_ms < 3100


def test_probe_outage_edges():
    assert outage([], 100, 100).gap_ms == 1000.0
    full = [(i, i * 0.01) for i in range(100)]
    assert outage(full, 100, 100).gap_ms == pytest.approx(10.0)
    tail_lost = full[:50]
    # 50 lost at the end: from the last arrival to where probe 100 would have come
    assert outage(tail_lost, 100, 100).gap_ms == pytest.approx(510.0)
    dup = full + [(5, 0.051)]
    assert outage(dup, 100, 100).received == 100


@pytest.mark.timed
def test_a_probe_receiver_kept_off_the_cpu_still_sees_the_gap(tmp_path):
    """The receiver keeps the kernel's receive times: stopped (as a busy host
    may keep it off the CPU) across a 300 ms pause of the sender, it reads
    everything late and at once, and still records the pause, so a busy
    host cannot make an outage look shorter. Loopback only."""
    import signal
    import socket
    import struct
    import sys
    import time

    from nslab.traffic.probe import _FMT
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out, ready = tmp_path / "arrivals", tmp_path / "ready"
    rx = subprocess.Popen([sys.executable, "-I", "-m", "nslab.traffic.probe", "recv", "--bind",
                           "127.0.0.1", "--port", str(port), "--duration", "3", "--out",
                           str(out), "--ready", str(ready)])
    try:
        deadline = time.monotonic() + 20
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ready.exists()
        rx.send_signal(signal.SIGSTOP)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            for seq in range(20):
                tx.sendto(struct.pack(_FMT, seq, time.time()), ("127.0.0.1", port))
                time.sleep(0.3 if seq == 9 else 0.005)
        time.sleep(0.2)
        rx.send_signal(signal.SIGCONT)
        assert rx.wait(timeout=20) == 0
    finally:
        if rx.poll() is None:
            rx.send_signal(signal.SIGCONT)
            rx.kill()
    arrivals = parse_arrivals(out.read_text())
    assert len(arrivals) == 20
    o = outage(arrivals, sent=20, rate=200)
    assert 290 <= o.gap_ms < 600, o  # the sender's pause, not the reader's burst


def test_probe_arrival_time_reads_the_kernels_timestamp():
    import socket
    import struct

    from nslab.traffic.probe import SO_TIMESTAMPNS, arrival_time
    ts = struct.pack("@qq", 1795949491, 554501000)
    assert arrival_time([(socket.SOL_SOCKET, SO_TIMESTAMPNS, ts)], 7.0) == pytest.approx(
        1795949491.554501)
    assert arrival_time([], 7.0) == 7.0
    assert arrival_time([(socket.SOL_SOCKET, SO_TIMESTAMPNS, b"short")], 7.0) == 7.0
    assert arrival_time([(socket.IPPROTO_IP, SO_TIMESTAMPNS, ts)], 7.0) == 7.0


def test_ping_latency_percentiles():
    with open(os.path.join(DATA, "ping", "ping-D-loopback.txt")) as f:
        lat = analysis.ping_latency(f.read())
    assert lat["loss_pct"] == 0.0
    assert 0 < lat["p50_ms"] <= lat["p90_ms"] <= lat["p99_ms"] <= lat["max_ms"] < 1


def test_iperf_series_uses_the_sum_line_of_each_second():
    with open(os.path.join(DATA, "iperf", "2.1.8", "tcp_client_P4_i1.txt")) as f:
        rep = parse(f.read())
    series = analysis.iperf_series(rep)
    assert len(series) >= 5
    # two 100 Mbit/s uplinks before the blackhole at 1.5 s (the sender's first
    # second also counts what filled its socket buffer)
    assert 150e6 < series[0] < 260e6
    assert series[2] < 120e6  # one uplink left, and no more
    assert analysis.window_mean([1.0, 2.0, 3.0, 4.0], (1, 3)) == 2.5
    assert analysis.window_mean([1.0, 2.0], None) == 1.5


def test_convergence_from_route_samples():
    with open(os.path.join(DATA, "studyfiles", "samples-blackhole.json")) as f:
        samples = json.load(f)
    (name, rows), = samples["routes"].items()
    at = samples["events"][0]["done_at"]
    c = analysis.convergence([tuple(r) for r in rows], 2, at)
    assert 2000 < c["withdrawn_ms"] < 3100 and c["restored_ms"] is None
    assert analysis.convergence([(0.0, 2), (1.0, 1), (1.5, 2)], 2, 0.5) == {
        "withdrawn_ms": 500.0, "restored_ms": 1000.0}
    assert analysis.convergence([(0.0, 2)], 2, None)["withdrawn_ms"] is None
    # the captured trial's route was whole until the event; one that had lost a
    # nexthop before it (a session that timed out while the host held a daemon
    # off the CPU) would count that change from the event: the runner marks
    # such a trial invalid
    assert analysis.short_before([tuple(r) for r in rows], 2, at) is None
    assert analysis.short_before([(0.0, 2), (0.4, 1), (0.6, 1)], 2, 0.5) == 1
    assert analysis.short_before([(0.0, 2), (0.4, 2), (0.6, 1)], 2, 0.5) is None
    assert analysis.short_before([(0.6, 1)], 2, 0.5) is None  # nothing sampled before
    assert analysis.short_before([(0.0, 1)], 2, None) is None


def test_an_event_done_after_the_traffic_ended_makes_its_trial_invalid():
    """The captured run's event came in time; the same event done at or after
    the traffic's end never acted in the trial, which is left out, saying so."""
    with open(os.path.join(DATA, "studyfiles", "samples-blackhole.json")) as f:
        done = json.load(f)["events"]
    assert analysis.late_events(done, 8.0) == []
    late = [dict(done[0], at=2.0, done_at=4.31)]
    assert analysis.late_events(late, 4.02) == [
        f"event {done[0]['do']} on {done[0]['target']} meant at 2 s was done at 4.3 s, after "
        "the traffic had ended (4.0 s): the host was too slow to apply it in time"]
    # the senders started 0.5 s into the trial: their traffic ran until 4.5 s
    assert analysis.late_events(late, 4.5) == []


def test_a_link_event_reaches_both_ends_at_once_and_raises_the_first_error():
    import threading
    from nslab.experiments.filestudy.runner import _each
    met = threading.Barrier(2, timeout=10)  # one end after the other would break it
    seen = []
    _each([("h1", "h1-eth0"), ("h2", "h2-eth0")], lambda n, d: seen.append((n, d, met.wait())))
    assert sorted(x[:2] for x in seen) == [("h1", "h1-eth0"), ("h2", "h2-eth0")]
    assert sorted(x[2] for x in seen) == [0, 1]

    def fail(n, d):
        if n == "h2":
            raise RuntimeError(f"{n}: tc refused")
        seen.append(n)
    seen.clear()
    with pytest.raises(RuntimeError, match="h2: tc refused"):
        _each([("h1", "a"), ("h2", "b")], fail)
    assert seen == ["h1"]  # the other end was still done


class _Started:
    """A receiver as the runner holds it: a real process, stopped by ``stop``."""

    def __init__(self, argv):
        self.argv = argv
        self.popen = subprocess.Popen(argv)

    def stop(self, grace=2.0):
        self.popen.terminate()
        return self.popen.wait(timeout=5)


def _runner_whose_receivers(start):
    """A FileRunner with no lab, whose receivers ``start(procs)`` starts."""
    from types import SimpleNamespace

    from nslab.experiments.filestudy.runner import FileRunner
    r = object.__new__(FileRunner)
    r.spec = SimpleNamespace(events=[], traffic=[], duration=1)
    r._start_receivers = lambda tag, procs: start(procs)
    return r


def test_a_receiver_slow_to_come_up_costs_its_trial_not_the_run():
    from nslab.errors import ReadinessError
    started = []

    def start(procs):
        procs["probe:p"] = _Started(["sleep", "30"])
        started.append(procs["probe:p"])
        raise ReadinessError("the probe receiver of p did not appear within 10 s: "
                             "it is running as 'python3', state R")
    m, raw, summary = _runner_whose_receivers(start)._measure({"repeat": 0}, "t", None)
    assert m["invalid"] == ["not measured: the probe receiver of p did not appear within "
                            "10 s: it is running as 'python3', state R"]
    assert m["values"] == {} and raw == [] and "invalid: not measured" in summary
    assert started[0].popen.poll() is not None  # stopped, not left to run on


def test_a_receiver_that_ended_before_it_was_ready_ends_the_run():
    from nslab.errors import ReadinessError

    procs = {}

    def start(got):
        got["a"] = _Started(["sleep", "30"])
        got["b"] = _Started(["false"])
        got["b"].popen.wait(timeout=5)
        procs.update(got)
        raise ReadinessError("b: nothing listening on port 5201 after 10 s")
    with pytest.raises(ReadinessError, match="nothing listening"):
        _runner_whose_receivers(start)._measure({"repeat": 0}, "t", None)
    assert procs["a"].popen.poll() is not None  # the others are stopped too


# -- claims on stored records ------------------------------------------------------------
def records():
    return SCHEMA.load(os.path.join(DATA, "failover_run"))


def test_claims_on_the_stored_failover_run():
    recs = records()
    assert len(recs) == 8
    below = ClaimSpec(claim="c", value="outage-probe.gap_ms",
                      where={"vars.failure": "link-down"}, below=300)
    assert analysis.judge_claim(below, recs).verdict == "agrees"
    wrong = ClaimSpec(claim="c", value="outage-probe.gap_ms",
                      where={"vars.failure": "link-down"}, above=1000)
    assert analysis.judge_claim(wrong, recs).verdict == "disagrees"
    bfd = ClaimSpec(claim="c", value="outage-probe.gap_ms",
                    where={"vars.failure": "blackhole", "topology.bfd": False},
                    versus={"where": {"topology.bfd": True}}, higher=True)
    c = analysis.judge_claim(bfd, recs)
    assert c.verdict == "agrees" and "Welch" in c.measured
    none = ClaimSpec(claim="c", value="outage-probe.gap_ms",
                     where={"vars.failure": "bgpd-killed"}, below=1000)
    assert analysis.judge_claim(none, recs).verdict == "undecided"
    one = ClaimSpec(claim="c", value="outage-probe.gap_ms",
                    where={"vars.failure": "link-down", "topology.bfd": True, "repeat": 0},
                    below=1000)
    c = analysis.judge_claim(one, recs)
    assert c.verdict == "undecided" and "one sample" in c.why
    same = ClaimSpec(claim="c", value="outage-probe.gap_ms", where={"vars.failure": "link-down",
                     "topology.bfd": False}, versus={"where": {"topology.bfd": True}},
                     same_within=5.0)
    assert analysis.judge_claim(same, recs).verdict in ("agrees", "undecided")


def test_raw_files_of_points_that_end_alike_never_collide():
    from nslab.experiments.filestudy.runner import raw_tag
    a = raw_tag({"sysctl.h1.net.ipv4.x": 1, "sysctl.h2.net.ipv4.x": 0, "repeat": 0})
    b = raw_tag({"sysctl.h1.net.ipv4.x": 0, "sysctl.h2.net.ipv4.x": 1, "repeat": 0})
    assert a != b and a.endswith("x=1-x=0-repeat=0") and "/" not in a
    assert raw_tag({"vars.f": "a/../b", "repeat": 1}).endswith("f=a_.._b-repeat=1")


def test_a_claim_needs_exactly_one_test():
    with pytest.raises(ValueError, match="exactly one"):
        ClaimSpec(claim="c", value="v", below=1, above=0)
    with pytest.raises(ValueError, match="versus"):
        ClaimSpec(claim="c", value="v", higher=True)


def test_the_report_redraws_from_the_stored_run(tmp_path):
    import shutil
    run = tmp_path / "run"
    shutil.copytree(os.path.join(DATA, "failover_run"), run)
    res = subprocess.run([NSLAB, "report", str(run)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    md = (run / "report.md").read_text()
    assert "| agrees |" in md and "outage-probe.gap_ms" in md
    assert (run / "plots.png").exists() and (run / "report.html").exists()


def test_a_saved_configuration_resumes_as_it_was():
    cls = study_class(FAILOVER)
    cfg = cls.Config.preset("quick", topology_bfd=["true"])
    saved = json.loads(json.dumps(cfg.model_dump(mode="json")))  # as provenance.json keeps it
    again = cls.Config.parse(saved, "provenance.json: saved configuration")
    assert again == cfg and cls().points(again) == cls().points(cfg)


def test_nslab_run_file_has_an_option_per_sweep_key():
    res = subprocess.run([NSLAB, "run", FAILOVER, "--help"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    for opt in ("--topology-bfd", "--vars-failure", "--repeat", "--duration", "--preset",
                "--resume", "--sysctl-server2-net-ipv4-fib-multipath-hash-policy"):
        assert opt in res.stdout
    res = subprocess.run([NSLAB, "run", "--list"], capture_output=True, text=True)
    assert "ecmp-failover" in res.stdout


def test_a_later_round_of_a_study_file_measures_what_its_open_claims_select():
    from nslab.experiments.filestudy.analysis import judge_claim
    from nslab.store.reporting import Claim
    cls = study_class(FAILOVER)
    study = cls()
    cfg = cls.Config.preset("quick")
    points = study.points(cfg)
    # the claims as the report builds them (nothing measured yet: undecided)
    made = {spec.claim: judge_claim(spec, []) for spec in cls.loaded.spec.claims}
    assert all(c.verdict == "undecided" and c.reads for c in made.values())
    hold = "A silent failure takes the hold time without BFD (2 to 3.5 s of outage)"
    got = study.needed(cfg, points, [made[hold]])
    assert got and len(got) < len(points)
    assert all(p["vars.failure"] == "blackhole" and p["topology.bfd"] is False for p in got)
    assert len(got) == sum(1 for p in points if p["vars.failure"] == "blackhole"
                           and p["topology.bfd"] is False)
    # a claim with a `versus` keeps both sides: with BFD and without
    shorter = "BFD shortens a silent failure's outage"
    both = study.needed(cfg, points, [made[shorter]])
    assert {p["topology.bfd"] for p in both} == {False, True}
    assert {p["vars.failure"] for p in both} == {"blackhole"}
    # a claim that does not say what it reads keeps every point
    assert study.needed(cfg, points, [Claim("something else", "", "undecided", "")]) == points


CAPTURED = """\
name: captured
title: ping across a switch, every trial captured
topology:
  ready: single
  options: {k: 2}
duration: 3
traffic:
  - {id: ping, kind: ping, src: h1, dst: h2, interval: 0.2}
metrics:
  - {metric: latency, flow: ping}
repeat: 4
captures:
  - {link: [s1, h2], trials: all, snaplen: 128, max_packets: 10000}
"""


def test_the_captures_of_every_sampling_round_count_against_the_limit(tmp_path):
    """Each later round adds `repeat` trials to a point (nslab.run.study.config_of_round):
    the captures' limit is checked against the last round's trials, before
    anything is built, not only against the first round's."""
    from nslab.model import limits
    from nslab.traffic.capture import bound_bytes
    from nslab.experiments.filestudy.captures import planned
    from nslab.run.study import ConfigError
    p = tmp_path / "captured.yaml"
    p.write_text(CAPTURED)
    cls = study_class(str(p))
    one = bound_bytes(128, 10_000)
    assert planned(cls.loaded.spec) == (4, 4 * one)
    assert planned(cls.loaded.spec, rounds=3) == (12, 12 * one)
    with limits.use(limits.machine().with_values({"captures": 6 * one})):
        assert cls.Config.preset().repeat == 4  # one round: 4 captures fit
        with pytest.raises(ConfigError) as exc:
            cls.Config.preset(rounds=3)  # three rounds: 12 captures do not
    msg = str(exc.value)
    assert msg.startswith(f"{p}:12: captures: ") and "\n" not in msg
    assert "s1-h2 12 trials in 3 rounds" in msg and "rounds=3" in msg


# -- a study file's checks -----------------------------------------------------------------
def test_a_study_file_carries_checks_read_as_a_checks_file(tmp_path):
    """`checks:` in a study file: typed as any checks file's, kept with the
    study (run on each lab before its first trial), and valid against the
    published schema; a bad check is one line naming the file, line and field."""
    import jsonschema
    import yaml
    text = MINIMAL + "checks:\n  - {check: ping, from: h1, to: h2, loss: 0, within: 5}\n"
    loaded = load(write(tmp_path, text))
    assert loaded.checks is not None and not loaded.checks.staged
    (plan,) = loaded.checks.stages
    ((origin, ping),) = plan.checks
    assert ping.check == "ping" and ping.within == 5
    jsonschema.validate(yaml.safe_load(text), schema())
    msg = error_of(tmp_path, MINIMAL + "checks:\n  - {check: ping, from: h1, to: h2, loss: 150}\n")
    assert msg.startswith(f"{tmp_path / 'study.yaml'}:20: checks.0.loss"), msg
    assert load(write(tmp_path, MINIMAL)).checks is None


class _Lab:
    run_id = "nl1234"
    topology = None


def _runner(tmp_path, monkeypatch, text, statuses):
    """A FileRunner over ``text`` whose checks come out ``statuses`` (no lab)."""
    from nslab.experiments.filestudy import runner as fr
    from nslab.store.checkreport import CheckResult
    from nslab.traffic import checkrun
    loaded = load(write(tmp_path, text))
    r = fr.FileRunner.__new__(fr.FileRunner)
    r.lab, r.loaded = _Lab(), loaded
    seen = []
    monkeypatch.setattr(checkrun.LabView, "of", classmethod(lambda cls, run: seen.append(run)))

    def run_stage(view, plan):
        return [CheckResult(number=i, label=f"ping h1 -> h{i + 1}", kind="ping", node="h1",
                            expected="loss 0 %", seen="loss 100 %" if st != "pass" else "loss 0 %",
                            status=st, diff=["loss: expected <= 0 %, saw 100 %"] if st != "pass"
                            else [])
                for i, st in enumerate(statuses, 1)]
    monkeypatch.setattr(checkrun, "run_stage", run_stage)
    return r, seen


def test_a_study_file_s_checks_run_before_its_first_trial_and_a_failure_measures_nothing(
        tmp_path, monkeypatch):
    from nslab.errors import LabError
    text = MINIMAL + "checks:\n  - {check: ping, from: h1, to: h2}\n  - {check: ping, from: h1, to: h2}\n"
    r, seen = _runner(tmp_path, monkeypatch, text, ["pass", "pass"])
    got = r.run_checks()
    assert seen == ["nl1234"] and [c["status"] for c in got] == ["pass", "pass"]
    r, _ = _runner(tmp_path, monkeypatch, text, ["pass", "fail"])
    with pytest.raises(LabError) as exc:
        r.run_checks()
    msg = str(exc.value)
    assert "\n" not in msg and "check 2 (ping h1 -> h3) failed: loss: expected <= 0 %, saw 100 %" \
        in msg and "nothing measured" in msg and "nslab check nl1234 --checks" in msg
    r, _ = _runner(tmp_path, monkeypatch, text, ["error", "fail"])
    with pytest.raises(LabError, match=r"check 1 .* could not run: .* \(and 1 more\)"):
        r.run_checks()
    # a classroom's stages are nslab check's, not the study's
    staged = MINIMAL + "stages:\n  - title: one\n    checks:\n      - {check: ping, from: h1, to: h2}\n"
    r, seen = _runner(tmp_path, monkeypatch, staged, ["fail"])
    assert r.run_checks() is None and seen == []


def test_study_check_says_the_checks_the_shipped_failover_study_runs_first():
    res = subprocess.run([NSLAB, "study", "check", FAILOVER, "--preset", "quick"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert f"  checks: 3 on each lab before its first trial (nslab check --checks {FAILOVER} " \
        "--list)" in res.stdout
    loaded = load(FAILOVER)
    kinds = [c.check for _, c in loaded.checks.stage(1).checks]
    assert kinds == ["route", "route", "ping"]
    # the file as a run resolves it for a preset (what FileRunner is given)
    # keeps its checks: a CI run found them dropped there, and no check ran
    cls = study_class(FAILOVER)
    resolved = cls.resolved(cls.Config.preset("quick"))
    assert [c.check for _, c in resolved.checks.stage(1).checks] == kinds


def test_a_convergence_metric_on_a_prefix_no_other_node_announces(tmp_path):
    """server2's own loopback, and a prefix only a wider route covers: server2
    has no BGP route of its own to either (it would count 0 nexthops of the
    one it expects, and every trial would read as a route lost before its
    event)."""
    text = open(FAILOVER).read()
    line = "{metric: convergence, node: server2, prefix: 10.0.200.1/32}"
    assert line in text
    for prefix in ("10.0.200.2/32", "10.9.0.0/16"):
        msg = error_of(tmp_path, text.replace(line, line.replace("10.0.200.1/32", prefix)))
        n = text[:text.index(line)].count("\n") + 1
        assert f"study.yaml:{n}: metrics." in msg and ".prefix: no other routing node announces " \
            f"{prefix}, so server2 has no BGP route of its own to it" in msg, msg
        assert "(announced: 10.0.200.1/32" in msg, msg
    # the prefix as the routing table writes it, which the runner looks up
    from nslab.experiments.filestudy.model import Convergence
    assert Convergence.model_validate({"metric": "convergence", "node": "server2",
                                       "prefix": "10.0.0.0/08"}).prefix == "10.0.0.0/8"


def test_a_probe_that_began_after_its_first_event_makes_its_trial_invalid():
    """Beside two busy loops a probe sender took 1.6-1.8 s to start; the
    blackhole had begun at 1 s, so the probes before it were missing and the
    outage (read from the sequence numbers) counted from the sender's start:
    1,635 and 1,795 ms, below BGP's hold time. Such a trial is left out,
    saying why; one that began at least a probe interval before is kept."""
    assert analysis.late_probe("probe", 1.63, 1.0001, 200.0) == [
        "probe probe began 1.63 s into the trial, after its first event was begun (1.00 s): "
        "the host was too slow to start it in time, so its outage would count from its start"]
    # within one interval (5 ms) of the event: no probe is known to precede it
    assert analysis.late_probe("probe", 0.997, 1.0, 200.0)[0].startswith("probe probe began 1.00")
    assert analysis.late_probe("probe", 0.9, 1.0, 200.0) == []
    assert analysis.late_probe("probe", 0.05, 1.0, 200.0) == []
    assert analysis.late_probe("probe", None, 1.0, 200.0) == []  # an older sender
    assert analysis.late_probe("probe", 3.0, None, 200.0) == []  # no event


def test_the_probe_sender_says_when_its_stream_began(tmp_path):
    """``sent N from T``: the count and the wall-clock time of the first
    probe's slot; an older sender's ``sent N`` reads with no time."""
    import socket
    import time

    from nslab.traffic.probe import parse_sent, send
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind(("127.0.0.1", 0))
    t = time.time()
    sent, began = send("127.0.0.1", sink.getsockname()[1], 200.0, 0.02)
    assert sent == 4 and t <= began <= time.time()
    sink.close()
    assert parse_sent(f"sent 4 from {began:.6f}\n") == (4, pytest.approx(began))
    assert parse_sent("sent 900\n") == (900, None)
    assert parse_sent("") == (0, None)


def test_a_probe_receiver_kept_off_the_cpu_keeps_what_arrived_before_its_stop(tmp_path):
    """A receiver stopped (SIGSTOP, as a host that gives it no CPU) while 50
    probes arrive, then told to end: it reads what the kernel queued for it,
    with the kernel's arrival times, before it writes its file."""
    import signal
    import socket
    import subprocess
    import sys
    import time

    from nslab.traffic.probe import parse_arrivals
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    out, ready = tmp_path / "arrivals.txt", tmp_path / "ready"
    recv = subprocess.Popen([sys.executable, "-m", "nslab.traffic.probe", "recv", "--bind",
                             "127.0.0.1", "--port", str(port), "--duration", "30", "--out",
                             str(out), "--ready", str(ready)], stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ready.exists()
        time.sleep(0.2)  # into its loop, with its handler set
        recv.send_signal(signal.SIGSTOP)
        from nslab.traffic.probe import send
        assert send("127.0.0.1", port, 1000.0, 0.05)[0] == 50
        recv.send_signal(signal.SIGTERM)
        recv.send_signal(signal.SIGCONT)
        stdout, _ = recv.communicate(timeout=20)
    finally:
        if recv.poll() is None:
            recv.kill()
            recv.wait()
    got = parse_arrivals(out.read_text())
    assert sorted(s for s, _ in got) == list(range(50)) and stdout.strip() == "received 50"
