"""What users' stock kernels have and this CI host lacks: the openvswitch module,
netem, VRF, 802.1Q, bonding, dummy. These tests skip where a feature is
missing and run for real in `make test-kernel`'s guest (Debian's
linux-image-amd64 under QEMU), where a missing feature fails them."""
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

from nslab.runtime.clean import discover
from nslab.traffic.iperf import run_client, start_server, wait_listening
from nslab.runtime.testing import needs
from nslab.topologies import pair, single

pytestmark = [pytest.mark.root, pytest.mark.kernel]

NSLAB = os.path.join(os.path.dirname(sys.executable), "nslab")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STOCK = ("ovs_kernel", "netem", "vrf", "vlan", "bond", "dummy")


def ping_rtts(node, ip, count=20, interval=0.05):
    out = node.run(["ping", "-c", str(count), "-i", str(interval), "-W", "2", ip],
                   check=False, timeout=120).stdout
    return [float(x) for x in re.findall(r"time=([\d.]+) ms", out)], out


@needs(*STOCK)
def test_doctor_reports_every_stock_kernel_feature(tmp_path):
    res = subprocess.run([NSLAB, "--results", str(tmp_path), "doctor"], capture_output=True,
                         text=True, timeout=600, env=dict(os.environ, COLUMNS="160"))
    assert res.returncode == 0, res.stderr
    rows = {}
    for line in res.stdout.splitlines():
        cells = [c.strip() for c in line.strip("│┃ ").split("│")]
        if len(cells) == 3:
            rows[cells[0]] = (cells[1], cells[2])
    for cap in STOCK:
        assert rows[cap][0] == "yes", (cap, rows.get(cap))
    assert rows["ovs_kernel"][1] == "kernel datapath"
    assert rows["ovs"][1] == "Open vSwitch (kernel)"


@needs("ovs_kernel", "iperf", "ovs-vsctl")
def test_ovs_kernel_datapath_carries_tcp_with_checksum_offload_left_on(make_lab):
    lab = make_lab(single(k=2, switch="ovs"))
    assert lab.datapath == "system"
    dp = subprocess.run(["ovs-dpctl", "show"], capture_output=True, text=True, check=True).stdout
    ports = lab.plan.root_ports["s1"]
    assert "system@ovs-system" in dp and all(p in dp for p in ports), dp
    # Measured: the kernel datapath completes partial checksums itself, so the
    # lab leaves tx checksum offload on (it turns it off only for netdev).
    assert "tx-checksumming: on" in lab["h1"].run(["ethtool", "-k", "h1-eth0"]).stdout
    start_server(lab["h2"])
    wait_listening(lab["h2"])
    mbps = run_client(lab["h1"], lab["h2"].ip, time=3).total_bps / 1e6
    assert mbps > 20, mbps  # a checksum stall gives ~0 (here: emulated CPU, so a low floor)


@needs("netem", "ping")
def test_netem_delay_is_what_ping_measures(make_lab):
    lab = make_lab(pair(delay="20ms"))
    lab["h1"].run(["ping", "-c", "1", "-W", "3", lab["h2"].ip])  # ARP out of the way
    rtts, out = ping_rtts(lab["h1"], lab["h2"].ip, count=30)
    assert len(rtts) >= 28, out
    # 20 ms on each direction's egress: 40 ms round trip, plus the bed's own
    # time (under 1 ms natively, a few ms on an emulated CPU).
    assert 40.0 <= min(rtts) <= 46.0, out
    assert sorted(rtts)[len(rtts) // 2] <= 60.0, out


@needs("netem", "ping")
def test_netem_jitter_spreads_the_delay(make_lab):
    lab = make_lab(pair(delay="20ms", jitter="5ms"))
    lab["h1"].run(["ping", "-c", "1", "-W", "3", lab["h2"].ip])
    rtts, out = ping_rtts(lab["h1"], lab["h2"].ip, count=40)
    assert len(rtts) >= 38, out
    assert min(rtts) >= 30.0 and max(rtts) - min(rtts) >= 5.0, out


@needs("netem")
def test_netem_loss_count_falls_in_the_binomial_interval(make_lab):
    from scipy.stats import binom

    from nslab.traffic.pktgen import pktgen_path
    lab = make_lab(pair(loss=10))
    lab.static_arp()
    pg = pktgen_path()
    n, p_loss = 4000, 0.10
    sink = lab["h2"].popen([pg, "recv", "--port", "9", "--duration", "60"], name="sink")
    assert "ready" in sink.popen.stdout.readline()
    lab["h1"].run([pg, "send", "--dst", lab["h2"].ip, "--port", "9", "--size", "128",
                   "--rate", "2000", "--count", str(n), "--duration", "30"], timeout=60)
    time.sleep(0.5)
    sink.stop()
    import json
    got = json.loads(sink.wait(timeout=10).stdout.strip().splitlines()[-1])["received"]
    lo, hi = binom.interval(0.999, n, 1 - p_loss)
    assert lo <= got <= hi, (got, lo, hi)


@needs("netem", "iperf", "ping")
def test_rate_and_delay_together(make_lab):
    """netem under the shaper: TCP fills a 10 Mbit/s, 40 ms-RTT pipe when its
    window covers the bandwidth-delay product, and is held to window/RTT when
    it does not."""
    lab = make_lab(pair(bw="10Mbit", delay="20ms"))
    h1, h2 = lab["h1"], lab["h2"]
    rtts, out = ping_rtts(h1, h2.ip, count=10, interval=0.1)
    assert min(rtts) >= 40.0, out
    big = start_server(h2, extra=["-w", "1M"])
    wait_listening(h2)
    full = run_client(h1, h2.ip, time=8, extra=["-w", "1M"]).total_bps / 1e6
    assert 8.0 <= full <= 10.2, full  # BDP = 10 Mbit/s x 40 ms = 50 KB < 1 MB window
    big.stop()
    start_server(h2, port=5002, extra=["-w", "8K"])
    wait_listening(h2, port=5002)
    small = run_client(h1, h2.ip, time=8, port=5002).total_bps / 1e6
    assert small < 0.7 * full, (small, full)  # the window, not the link, limits it


CRASHER = textwrap.dedent("""
    import sys, time
    from nslab import Lab
    from nslab.topologies import single
    lab = Lab(single(k=2, switch="ovs"))
    lab.start()
    print(lab.run_id, flush=True)
    time.sleep(600)
""")


@needs("ovs_kernel", "ovs-vsctl", "iperf")
def test_crash_and_clean_on_the_kernel_datapath(tmp_path, bystanders):
    crasher = subprocess.Popen([sys.executable, "-c", CRASHER], stdout=subprocess.PIPE, text=True,
                               cwd=ROOT)
    try:
        run_id = crasher.stdout.readline().strip()
        assert run_id.startswith("nl")
        dp = subprocess.run(["ovs-dpctl", "show"], capture_output=True, text=True).stdout
        assert f"{run_id}-p1" in dp
    finally:
        crasher.kill()
        crasher.wait()
    res = subprocess.run([NSLAB, "clean"], capture_output=True, text=True, cwd=str(tmp_path))
    assert res.returncode == 0 and run_id in res.stdout, res
    dp = subprocess.run(["ovs-dpctl", "show"], capture_output=True, text=True).stdout
    assert run_id not in dp, dp
    left = discover(run_id)
    assert run_id not in left or left[run_id].empty
    bystanders.assert_intact()


def _has_pktgen_module() -> bool:
    from nslab.traffic.pktgen import kernel_pktgen_present
    return kernel_pktgen_present() or subprocess.run(
        ["modprobe", "-n", "pktgen"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _has_pktgen_module(), reason="no pktgen module on this kernel")
def test_bench_generator_measures_the_kernel_pktgen_anchor(tmp_path):
    """Where the kernel has pktgen, `nslab bench generator` measures it beside
    nslab-pktgen and prints the ratio; a module it loaded is unloaded again."""
    import glob
    import json

    from nslab.traffic.pktgen import kernel_pktgen_present
    before = kernel_pktgen_present()
    res = subprocess.run([NSLAB, "--results", str(tmp_path), "bench", "generator", "--sizes",
                          "64", "--modes", "udp", "--seconds", "1", "--repeat", "1"],
                         capture_output=True, text=True, timeout=900,
                         env=dict(os.environ, COLUMNS="200"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "best / kernel pktgen" in res.stdout, res.stdout
    (saved,) = glob.glob(str(tmp_path / "bench" / "generator-*.json"))
    out = json.load(open(saved))
    (row,) = out["rows"]
    assert out["kernel_pktgen"] is True
    assert row["kernel_pktgen_pps"] > 0 and row["udp_pps"] > 0
    ratio = row["udp_pps"] / row["kernel_pktgen_pps"]
    assert f"{ratio:.2f}x" in res.stdout, res.stdout
    assert kernel_pktgen_present() == before


@needs("netem", "ping")
def test_a_study_file_adds_netem_mid_trial_and_takes_it_away(tmp_path):
    """A study file's `link-netem` event where the kernel has netem (refused in
    one line on a kernel without it: tests/smoke/test_study_files_smoke.py).
    The round trips before the event are fast and those after it slow, in
    every trial: the second starts with the first's netem taken away."""
    study = tmp_path / "delay.yaml"
    study.write_text(textwrap.dedent("""\
        name: delay-step
        title: 25 ms each way from the second second
        topology:
          ready: pair
        duration: 6
        settle: 0
        traffic:
          - {id: ping, kind: ping, src: h1, dst: h2, interval: 0.05}
        events:
          - {at: 2, do: link-netem, link: [h1, h2], delay: 25ms}
        metrics:
          - {metric: latency, flow: ping}
        claims:
          - {claim: "the delay shows in the slowest round trips", value: latency-ping.p90_ms,
             above: 40}
        repeat: 2
        """))
    res = subprocess.run([NSLAB, "--results", str(tmp_path / "r"), "run", str(study)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    (run,) = (tmp_path / "r" / "delay-step").iterdir()
    import json
    recs = [json.loads(l) for l in open(run / "records.jsonl")]
    assert len(recs) == 2
    for r in recs:
        m = r["measurements"]
        (ev,) = m["events"]
        # in time: done before the traffic ended (else the trial says it is invalid)
        assert not m["invalid"] and ev["done_at"] < 6, (m["invalid"], ev)
        v = m["values"]
        assert v["latency-ping.max_ms"] >= 45 and v["latency-ping.p90_ms"] > 40, (v, ev)
        raw = run / next(p for p in r["raw"] if p.endswith("-ping.txt"))
        rtts = [float(x) for x in re.findall(r"time=([\d.]+) ms", raw.read_text())]
        # (the first round trip of a fresh lab also resolves the neighbour;
        # before the event none has the 50 ms the delay adds, and they are
        # fast: their median, as one emulated-CPU hiccup may take a few ms)
        before = rtts[1:10]
        assert all(x < 45 for x in before) and sorted(before)[len(before) // 2] < 10 \
            and min(rtts[-10:]) >= 45, (rtts[:10], rtts[-10:], ev)
