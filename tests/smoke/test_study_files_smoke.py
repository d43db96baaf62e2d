"""Study files end to end, as root: a minimal one (a pair, one iperf flow, one
event), the shipped failover study at a tiny preset, and input refused
before anything is built."""
import json
import os
import subprocess
import sys

import pytest

from nslab.runtime.testing import needs
from tests.conftest import undisturbed

pytestmark = [pytest.mark.root, pytest.mark.slow]

NSLAB = os.path.join(os.path.dirname(sys.executable), "nslab")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MINIMAL = """\
name: minimal
title: One iperf flow on a pair, its link slowed mid-way
topology:
  inline:
    nodes: {h1: {ip: 10.9.0.1/24}, h2: {ip: 10.9.0.2/24}}
    links: [{a: h1, b: h2, bw: 200}]
duration: 4
settle: 0
traffic:
  - {id: tcp, kind: iperf-tcp, src: h1, dst: h2}
  - {id: probe, kind: probe, src: h1, dst: h2, rate: 100}
  - {id: ping, kind: ping, src: h2, dst: h1, interval: 0.1}
  - {id: frames, kind: pktgen, src: h2, dst: h1, rate: 1000, size: 128}
events:
  - {at: 2, do: link-rate, link: [h1, h2], rate: 50M}
metrics:
  - {metric: goodput, flow: tcp, name: before, window: [0, 2]}
  - {metric: goodput, flow: tcp, name: after, window: [2.5, 4]}
  - {metric: outage, flow: probe}
  - {metric: latency, flow: ping}
  - {metric: delivery, flow: frames}
  - {metric: cpu, node: h1}
  - {metric: links, node: h1}
plots:
  - {kind: timeseries, metric: before}
  - {kind: links, metric: links-h1, x: repeat}
claims:
  - claim: slowing the link to a quarter lowers goodput
    value: after
    below: 100
repeat: 2
checks:
  - {check: ping, from: h1, to: h2, loss: 0, within: 5}
  - {check: interface, node: h2, interface: h2-eth0, state: up}
"""


def tagged_namespaces():
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {l.split()[0] for l in out.splitlines() if l.startswith("nl")}


@pytest.mark.versioned  # iperf, tc, ping, nslab-pktgen
def test_a_minimal_study_file_end_to_end(tmp_path):
    path = tmp_path / "minimal.yaml"
    path.write_text(MINIMAL)
    before = tagged_namespaces()
    res = subprocess.run([NSLAB, "--results", str(tmp_path / "results"), "run", str(path)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    (run,) = (tmp_path / "results" / "minimal").iterdir()
    recs = [json.loads(l) for l in open(run / "records.jsonl")]
    assert len(recs) == 2
    for r in recs:
        v = r["measurements"]["values"]
        assert r["measurements"]["invalid"] == []
        assert 150 < v["before"] < 215, v          # Mbit/s through a 200 Mbit/s shaper
        assert 35 < v["after"] < 60, v             # then 50 Mbit/s
        assert v["outage-probe.lost"] < 20 and v["latency-ping.p50_ms"] is not None
        assert v["cpu-h1.cpu_pct"] > 0
        assert v["delivery-frames.sent"] == 4000 and v["delivery-frames.loss_pct"] < 5, v
        assert r["measurements"]["links"]["links-h1"]["h1-eth0"] > 1e6
        (ev,) = r["measurements"]["events"]
        assert ev["do"] == "link-rate" and abs(ev["done_at"] - 2) < 0.5
        assert ev["switch"] is False  # h1 -- h2: no switch between them
    md = (run / "report.md").read_text()
    assert (run / "plots.png").exists()
    if len(undisturbed(recs)) >= 2:
        assert "| agrees |" in md
    else:
        # too few undisturbed trials for an interval (CI of 2026-12-02: the
        # hypervisor withheld 28 and 32 % of the CPUs over the two): no
        # verdict, and the row says why
        assert "| undecided |" in md and "host interference:" in md, md
    assert (run / "study.yaml").read_text() == MINIMAL
    # the file's checks ran on the lab before its first trial, and are kept
    (setup,) = json.load(open(run / "provenance.json"))["setups"].values()
    assert [(c["kind"], c["status"]) for c in setup["checks"]] == [("ping", "pass"),
                                                                   ("interface", "pass")]
    assert tagged_namespaces() == before


@pytest.mark.versioned  # FRR (and its BFD)
@needs("frr")
def test_the_failover_study_at_a_tiny_preset(tmp_path):
    res = subprocess.run([NSLAB, "--results", str(tmp_path), "run", "ecmp-failover", "--quick",
                          "--rounds", "1", "--topology-bfd", "true", "--vars-failure", "blackhole"],
                         capture_output=True, text=True, timeout=400)
    assert res.returncode == 0, res.stderr
    (run,) = (tmp_path / "ecmp-failover").iterdir()
    recs = [json.loads(l) for l in open(run / "records.jsonl")]
    assert len(recs) == 2
    for r in recs:
        v = r["measurements"]["values"]
        # BFD 100 ms x 3: the probe's path is cut well under the 3 s hold time
        assert 100 < v["outage-probe.gap_ms"] < 1500, v
        assert v["convergence-server2.withdrawn_ms"] < 1500, v
        assert r["params"]["topology.bfd"] is True
        # server2's route was whole until the failure (a trial whose route
        # had lost a nexthop before it would be invalid)
        assert r["measurements"]["invalid"] == [], r["measurements"]["invalid"]
        (ev,) = r["measurements"]["events"]
        assert ev["do"] == "link-blackhole" and ev["switch"] is False  # server2 -- a spine
    assert "With BFD a silent failure" in (run / "report.md").read_text()
    # the shipped file's checks held on its lab before the first trial
    (setup,) = json.load(open(run / "provenance.json"))["setups"].values()
    assert [(c["kind"], c["status"]) for c in setup["checks"]] == [
        ("route", "pass"), ("route", "pass"), ("ping", "pass")]


def test_netem_where_the_kernel_has_none_is_one_line_and_nothing_is_built(tmp_path):
    from nslab.runtime.caps import probe
    if probe()["netem"].ok:
        pytest.skip("this kernel has netem")
    path = tmp_path / "netem.yaml"
    path.write_text(MINIMAL.replace("do: link-rate, link: [h1, h2], rate: 50M",
                                    "do: link-netem, link: [h1, h2], delay: 20ms"))
    before = tagged_namespaces()
    res = subprocess.run([NSLAB, "--results", str(tmp_path / "r"), "run", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode != 0 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "netem" in res.stderr
    assert tagged_namespaces() == before
    assert not (tmp_path / "r" / "minimal").exists() or not any(
        (p / "records.jsonl").exists() for p in (tmp_path / "r" / "minimal").iterdir())
