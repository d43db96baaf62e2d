"""`nslab watch --metrics` scraped by a real Prometheus (Debian's, unpacked by
scripts/setup-prometheus.sh, never installed) during an iperf across a
two-host lab: its rate() of the sender's interface matches what iperf sent
(plus the known framing), the labels name the lab, node and interface, and one
sampler serves every scraper. And `nslab watch --web` with a page and a
scraper connected stops within 2 s of SIGINT, without a traceback.

Every process a test starts (the watch server, Prometheus, a page, a
scraper) is stopped in its ``finally``; iperf runs in the lab's nodes, which
stop it with the lab."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager

import pytest

from nslab.traffic.iperf import parse, version_of, wait_listening
from nslab.runtime.testing import needs
from nslab.topologies import pair

pytestmark = pytest.mark.root
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NSLAB = os.path.join(os.path.dirname(sys.executable), "nslab")
CACHE = os.environ.get("NSLAB_PROMETHEUS_CACHE", os.path.join(ROOT, ".cache", "prometheus"))
PROMETHEUS = os.path.join(CACHE, "usr", "bin", "prometheus")
INTERVAL = 0.5  # nslab watch --interval
#: UDP payload per datagram (iperf -l), and what the sender's interface counts
#: for each: + 8 (UDP) + 20 (IPv4) + 14 (Ethernet header; the kernel counts no
#: preamble, FCS or gap on a veth).
PAYLOAD = 1470
FRAME = PAYLOAD + 8 + 20 + 14


def prometheus_binary():
    """The unpacked Prometheus, else an installed one, else None."""
    if os.access(PROMETHEUS, os.X_OK):
        return PROMETHEUS
    return shutil.which("prometheus")


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=5.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def stop_process(proc, sig=signal.SIGTERM, grace=10.0):
    """Stop a process this test started (it and only it) and reap it."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def watch_server(run_id, mode, tmp_path):
    """``nslab watch RUN --<mode> --port 0``: yields (process, base URL, paths
    of its stdout and stderr); stopped on the way out if still running."""
    out, err = tmp_path / f"watch-{mode}.out", tmp_path / f"watch-{mode}.err"
    with open(out, "w") as fo, open(err, "w") as fe:
        proc = subprocess.Popen([NSLAB, "watch", run_id, f"--{mode}", "--port", "0",
                                 "--interval", str(INTERVAL)], stdout=fo, stderr=fe,
                                stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            m = re.search(r"http://127\.0\.0\.1:(\d+)/", out.read_text())
            if m:
                break
            assert proc.poll() is None, err.read_text()
            assert time.monotonic() < deadline, out.read_text() + err.read_text()
            time.sleep(0.1)
        base = f"http://127.0.0.1:{m.group(1)}"
        while b"nslab_interface_transmit_bytes_total{" not in get(f"{base}/metrics"):
            assert time.monotonic() < deadline, "no reading on /metrics"
            time.sleep(0.1)
        yield proc, base, out, err
    finally:
        stop_process(proc)


@contextmanager
def prometheus(target, tmp_path):
    """A Prometheus on 127.0.0.1 scraping ``target`` every second, its data in
    ``tmp_path``: yields its base URL once the target is up."""
    binary = prometheus_binary()
    conf = tmp_path / "prometheus.yml"
    conf.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: nslab\n    static_configs:\n"
        f"      - targets: [\"{target}\"]\n")
    port = free_port()
    log = tmp_path / "prometheus.log"
    with open(log, "w") as f:
        proc = subprocess.Popen([binary, f"--config.file={conf}",
                                 f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "Prometheus's target never came up:\n" + \
                log.read_text()[-3000:]
            try:
                targets = json.loads(get(f"{base}/api/v1/targets"))["data"]["activeTargets"]
                if targets and targets[0]["health"] == "up":
                    break
            except OSError:
                pass
            time.sleep(0.2)
        yield base
    finally:
        stop_process(proc)


def query(base, promql, at=None):
    """An instant query through Prometheus's HTTP API: its result vector."""
    params = {"query": promql}
    if at is not None:
        params["time"] = f"{at:.3f}"
    got = json.loads(get(f"{base}/api/v1/query?" + urllib.parse.urlencode(params)))
    assert got["status"] == "success", got
    return got["data"]["result"]


def one_value(base, promql, at=None):
    result = query(base, promql, at)
    assert len(result) == 1, (promql, result, held(base, at))
    return float(result[0]["value"][1])


def held(base, at):
    """What Prometheus holds in the 12 s before ``at``: each series' sample
    times (relative to ``at``), and its scrapes' health and durations (for a
    failure's message)."""
    if at is None:
        return {}
    out = {}
    for what in ('nslab_interface_transmit_bytes_total{node="h1",interface="h1-eth0"}',
                 "up", "scrape_duration_seconds", "nslab_watch_samples_total"):
        try:
            for series in query(base, f"{what}[12s]", at):
                labels = {k: v for k, v in series["metric"].items() if k != "__name__"}
                out[f"{what.split('{')[0]}{labels}"] = [(round(float(t) - at, 2), v)
                                                        for t, v in series["values"]]
        except (OSError, AssertionError, KeyError, ValueError) as exc:
            out[what] = repr(exc)
    return out


def traffic_readings(base, series, t0, t_end):
    """The samples of counter ``series`` Prometheus stored while it rose:
    ``(inside, stored)``, ``inside`` the ``(time, value)`` pairs strictly
    between the last value before the traffic and the first after it (a
    reading taken while traffic flowed on both sides of it), ``stored`` every
    sample from 3 s before ``t0`` to 3 s after ``t_end`` (times relative to
    ``t0``, for a failure's message)."""
    span = t_end - t0 + 6
    (got,) = query(base, f"{series}[{span * 1000:.0f}ms]", t_end + 3)
    samples = [(float(t), float(v)) for t, v in got["values"]]
    low, high = samples[0][1], samples[-1][1]
    inside = [(t, v) for t, v in samples if low < v < high]
    stored = [(round(t - t0, 2), v) for t, v in samples]
    assert len(inside) >= 2, ("no readings inside the traffic", stored)
    return inside, stored


class Scraper(threading.Thread):
    """Scrapes ``url`` every ``period`` until stopped; counts its scrapes."""

    def __init__(self, url, period=0.05):
        super().__init__(daemon=True)
        self.url, self.period, self.scrapes = url, period, 0
        self.halt = threading.Event()
        self.last = b""

    def run(self):
        while not self.halt.is_set():
            try:
                self.last = get(self.url)
                self.scrapes += 1
            except OSError:
                pass
            self.halt.wait(self.period)


class Page(threading.Thread):
    """A page's event stream: counts its events until the server ends it."""

    def __init__(self, url):
        super().__init__(daemon=True)
        self.url, self.events, self.ended = url, 0, False
        self.resp = None

    def run(self):
        try:
            self.resp = urllib.request.urlopen(self.url, timeout=30)
            for line in self.resp:
                if line.startswith(b"data: "):
                    self.events += 1
            self.ended = True  # the server ended the stream
        except (OSError, ValueError, AttributeError):  # closed by close() below
            pass

    def close(self):
        if self.resp is not None:
            self.resp.close()


def samples_total(body: bytes) -> float:
    m = re.search(rb"^nslab_watch_samples_total\{[^}]*\} ([0-9.e+]+)", body, re.M)
    assert m, body[-2000:]
    return float(m.group(1))


@needs("iperf")
@pytest.mark.quiet  # UDP at 100 Mbit/s with at most 0.5 % lost: nothing else may run
def test_prometheus_rate_matches_iperf(make_lab, tmp_path):
    binary = prometheus_binary()
    if binary is None:
        pytest.skip(f"no Prometheus server at {PROMETHEUS} and none installed "
                    "(scripts/setup-prometheus.sh unpacks Debian's)")
    # Without IPv6, h1-eth0 sends iperf's datagrams and its ARP only, so its
    # counter rises while the client runs and at no other time. With IPv6 the
    # kernel sends DAD, MLD and router solicitations from it, the last backed
    # off to 6.3 and 15.1 s after the build (measured here): a CI run saw the
    # counter rise half a second after the client had ended, and its reading
    # taken then counted as one inside the traffic.
    lab = make_lab(pair(bw="1Gbit").without_ipv6())
    srv = lab["h2"].popen(["iperf", "-s", "-u", "-e", "-B", "10.0.0.2"], name="iperf-server")
    wait_listening(lab["h2"], udp=True)
    with watch_server(lab.run_id, "metrics", tmp_path) as (proc, base, _, err), \
            prometheus(base[len("http://"):], tmp_path) as prom:
        assert _status(f"{base}/") == 404 and _status(f"{base}/events") == 404  # no page
        scraper = Scraper(f"{base}/metrics")  # a second scraper, 20 a second
        scraper.start()
        try:
            # the totals below need a reading stored before t0: the target is up
            # once its first scrape is reported, which can be within 0.1 s of t0
            # (seen here: nothing stored before t0 - 0.1 s, 1 run in 8)
            total = 'nslab_interface_transmit_bytes_total{node="h1",interface="h1-eth0"}'
            deadline = time.monotonic() + 30
            while not query(prom, total, time.time() - 0.5):
                assert time.monotonic() < deadline, held(prom, time.time())
                time.sleep(0.2)
            t0 = time.time()
            res = lab["h1"].run(["iperf", "-c", "10.0.0.2", "-u", "-b", "100M",
                                 "-l", str(PAYLOAD), "-t", "8", "-e"], check=False, timeout=60)
            t_end = time.time()
            time.sleep(2 * INTERVAL + 2)  # the last readings are scraped
        finally:
            scraper.halt.set()
            scraper.join(timeout=5)
        srv.stop()
        rep = parse(res.stdout, version_of(lab["h1"]))
        assert res.returncode == 0 and rep.server_reports, res.stdout + res.stderr
        (server,) = rep.server_reports
        # total: every datagram h1 sent (by sequence number). What the server's
        # socket missed is not compared with anything: h2-eth0 counts a datagram
        # before the socket can drop it (with both CPUs busy here the socket
        # missed 0.5-1.2 %, and once 0.5 % idle, while every count below held)
        assert server.total, res.stdout
        # the datagrams' exact rate: iperf's count over iperf's interval (its
        # printed Mbits/sec has 3 digits and counts what the socket received;
        # the count and the interval are exact)
        pps = server.total / server.duration
        sent_bps = pps * PAYLOAD * 8
        assert sent_bps * (server.total - server.lost) / server.total == \
            pytest.approx(server.bps, rel=0.01)
        assert t_end > t0 + 8, (t0, t_end)
        sel = '{node="h1",interface="h1-eth0"}'
        # The window: the readings Prometheus stored while h1-eth0's counter
        # rose (traffic flowed before and after each), found from the stored
        # samples, not from this test's clock. A window that ends more than 1.1
        # scrape intervals after its last sample is extrapolated by only half
        # an interval (rate()'s rule): 4.44 s of 5, the 11 % shortfall two CI
        # runs here saw with the window counted back from t_end.
        inside, stored = traffic_readings(prom, f"nslab_interface_transmit_packets_total{sel}",
                                          t0, t_end)
        # each reading carries the time it was read: one taken while the
        # counter rose was taken while the client ran
        assert t0 < inside[0][0] and inside[-1][0] < t_end, (t0, t_end, stored)
        at = inside[-1][0]
        first = next(t for t, _ in inside if at - t <= 6.0)
        assert at - first >= 4.0, ("under 4 s of readings inside the traffic", stored)
        # the window opens 10 ms before its first reading, and ends on its last:
        # rate() extrapolates 10 ms, a constant rate exactly
        window = f"{(at - first) * 1000 + 10:.0f}ms"
        wire_bps = 8 * one_value(
            prom, f"rate(nslab_interface_transmit_bytes_total{sel}[{window}])", at)
        wire_pps = one_value(
            prom, f"rate(nslab_interface_transmit_packets_total{sel}[{window}])", at)
        rx_bps = 8 * one_value(
            prom, 'rate(nslab_interface_receive_bytes_total{node="h2",interface="h2-eth0"}'
            f'[{window}])', at)
        # What h1-eth0 counts is iperf's payload plus UDP, IP and Ethernet
        # headers: FRAME/PAYLOAD = 1512/1470 (+2.9 %). The rate over the window
        # differs from iperf's 8 s average only by timing: every value carries
        # the time it was read (a few ms off over 5 s), and iperf paces its
        # datagrams evenly (its 1 s reports agree to 0.1 % when idle, to about
        # 1 % on a busy machine): 2 %. That the framing is counted exactly is
        # checked on the totals below; 2 % already tells a rate counted per
        # scrape (up to 10 % off with readings and scrapes out of step) or the
        # payload alone (-2.8 %).
        expected = sent_bps * FRAME / PAYLOAD
        report = (f"iperf {sent_bps / 1e6:.3f} Mbit/s payload ({pps:.0f} datagrams/s, "
                  f"{server.lost} missed by the server's socket), expected "
                  f"{expected / 1e6:.3f} on the wire; Prometheus over {window} ending "
                  f"{t_end - at:.2f} s before the client returned: h1-eth0 tx "
                  f"{wire_bps / 1e6:.3f} Mbit/s {wire_pps:.0f} pkt/s, h2-eth0 rx "
                  f"{rx_bps / 1e6:.3f} Mbit/s; the client ran {t_end - t0:.2f} s; "
                  f"{len(inside)} readings inside the traffic")
        print(report)
        assert wire_bps == pytest.approx(expected, rel=0.02), report
        assert wire_pps == pytest.approx(pps, rel=0.02), report
        assert rx_bps == pytest.approx(expected, rel=0.02), report
        # The totals: the counters' readings before the run and after it (an
        # instant query at a time gives the last reading before it) differ by
        # every datagram's frame. 0.2 % (about 130 datagrams of 68,000) leaves
        # room for iperf's closing datagrams and ARP and neighbour discovery
        # (under 1 kB) and none for a header more or less per datagram (8 B:
        # 0.5 %, 14 B: 0.9 %).
        sent = {}
        for what in ("bytes", "packets"):
            promql = f"nslab_interface_transmit_{what}_total{sel}"
            sent[what] = one_value(prom, promql, t_end + 1.5) - one_value(prom, promql, t0 - 0.1)
        h2 = 'nslab_interface_receive_bytes_total{node="h2",interface="h2-eth0"}'
        received = one_value(prom, h2, t_end + 1.5) - one_value(prom, h2, t0 - 0.1)
        totals = (f"h1-eth0 sent {sent['bytes']:.0f} B in {sent['packets']:.0f} packets, h2-eth0 "
                  f"received {received:.0f} B; iperf: {server.total} datagrams, "
                  f"{server.total * FRAME} B framed")
        print(totals)
        assert sent["bytes"] == pytest.approx(server.total * FRAME, rel=0.002), totals
        assert received == pytest.approx(server.total * FRAME, rel=0.002), totals
        assert sent["packets"] == pytest.approx(server.total, rel=0.002), totals

        # labels: the lab's run id, the node, the interface; one series per interface
        series = query(prom, f'nslab_interface_transmit_bytes_total{{lab="{lab.run_id}"}}')
        assert {(s["metric"]["node"], s["metric"]["interface"]) for s in series} == \
            {("h1", "h1-eth0"), ("h2", "h2-eth0")}
        for s in series:
            assert {"lab", "node", "interface", "job", "instance", "__name__"} == \
                set(s["metric"]), s
        # one sampler for Prometheus and the second scraper: readings follow the
        # interval (a reading is --interval plus the two netlink dumps apart), not
        # the ~20 scrapes a second
        assert one_value(prom, "nslab_watch_samplers", at) == 1
        readings = one_value(prom, "rate(nslab_watch_samples_total[5s])", at)
        assert 0.7 / INTERVAL <= readings <= 1.05 / INTERVAL, readings
        assert scraper.scrapes > 5 * 8, scraper.scrapes
        assert proc.poll() is None, err.read_text()


def _status(url):
    try:
        return urllib.request.urlopen(url, timeout=5).status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.versioned  # Python's asyncio server and SIGINT (3.11 vs 3.13)
def test_web_page_and_scraper_share_one_sampler_and_sigint_stops_it(make_lab, tmp_path):
    """A page (its event stream) and a scraper on `nslab watch --web`: the page
    gets one event per reading, and the readings counted on /metrics are the
    page's (not one more per scrape); SIGINT then ends the server within 2 s,
    the page's stream ends, and nothing went to stderr as a traceback."""
    lab = make_lab(pair(bw="1Gbit"))
    with watch_server(lab.run_id, "web", tmp_path) as (proc, base, _, err):
        page = Page(f"{base}/events")
        scraper = Scraper(f"{base}/metrics")
        page.start()
        scraper.start()
        try:
            deadline = time.monotonic() + 10
            while page.events < 2 or scraper.scrapes < 2:
                assert time.monotonic() < deadline, (page.events, scraper.scrapes)
                time.sleep(0.05)
            before_events, before = page.events, samples_total(get(f"{base}/metrics"))
            time.sleep(10 * INTERVAL)
            after_events, after = page.events, samples_total(get(f"{base}/metrics"))
            body = get(f"{base}/metrics")
            assert re.search(rb'^nslab_watch_samplers\{lab="%s"\} 1(\.0)?$' %
                             lab.run_id.encode(), body, re.M), body[-2000:]
            assert re.search(rb"^nslab_watch_event_streams\{[^}]*\} 1(\.0)?$", body, re.M)
            readings, events = after - before, after_events - before_events
            # about 10 readings; each reached the page (the two counts are read
            # a moment apart: at most one apart), and 100 scrapes added none
            assert 7 <= readings <= 11, readings
            assert abs(events - readings) <= 1, (events, readings)
            assert scraper.scrapes > 5 * readings, scraper.scrapes

            t0 = time.monotonic()
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=10)
            took = time.monotonic() - t0
        finally:
            scraper.halt.set()
            scraper.join(timeout=5)
            page.join(timeout=5)  # the server ends its stream
            if page.is_alive():
                page.close()
                page.join(timeout=5)
        stderr = err.read_text()
        print(f"nslab watch --web stopped {took:.2f} s after SIGINT; stderr: {stderr!r}")
        assert took < 2.0, took
        assert proc.returncode == 0, stderr
        assert "Traceback" not in stderr and "Error" not in stderr, stderr
        assert page.ended and not page.is_alive()


def _event_with(base, want, timeout=15.0):
    """The first event of the page's stream for which ``want(event)`` holds."""
    deadline = time.monotonic() + timeout
    with urllib.request.urlopen(f"{base}/events", timeout=timeout) as resp:
        while True:
            assert time.monotonic() < deadline, "no such event"
            line = resp.readline()
            assert line, "the stream ended"
            if line.startswith(b"data: "):
                event = json.loads(line[len(b"data: "):])
                if want(event):
                    return event


def test_a_link_changed_with_nslab_link_set_shows_on_the_page_and_in_metrics(make_lab, tmp_path):
    """`nslab link set h1-h2 --rate 5Mbit` on a running lab: the live page's
    next event lists the change and draws its link with it, /metrics has its
    series; `nslab link reset` takes both away."""
    lab = make_lab(pair(bw="1Gbit"))
    series = rb'^nslab_link_rate_bits_per_second\{lab="%s",link="h1-h2"\} 5(\.0)?e\+06$' % \
        lab.run_id.encode()
    with watch_server(lab.run_id, "web", tmp_path) as (proc, base, _, err):
        assert not re.search(series, get(f"{base}/metrics"), re.M)
        res = subprocess.run([NSLAB, "link", "set", "h1-h2", lab.run_id, "--rate", "5Mbit"],
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        try:
            event = _event_with(base, lambda e: e["changes"])
            assert event["changes"] == [{"link": "h1-h2", "set": "rate 5.0 Mbit/s", "down": None}]
            (link,) = event["links"]
            assert link["set"] == "rate 5.0 Mbit/s" and "set: rate 5.0 Mbit/s" in link["lines"]
            deadline = time.monotonic() + 10
            while not re.search(series, body := get(f"{base}/metrics"), re.M):
                assert time.monotonic() < deadline, body[-3000:]
                time.sleep(INTERVAL)
            assert re.search(rb'^nslab_link_change_info\{change="rate 5.0 Mbit/s",lab="%s",'
                             rb'link="h1-h2"\} 1(\.0)?$' % lab.run_id.encode(), body, re.M), body
        finally:
            res = subprocess.run([NSLAB, "link", "reset", lab.run_id], capture_output=True,
                                 text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        _event_with(base, lambda e: not e["changes"] and "set" not in e["links"][0])
        deadline = time.monotonic() + 10
        while b"nslab_link_change_info{" in get(f"{base}/metrics"):
            assert time.monotonic() < deadline, "the reset link's series stayed"
            time.sleep(INTERVAL)
    assert "Traceback" not in err.read_text()
