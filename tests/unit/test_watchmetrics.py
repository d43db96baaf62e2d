"""`/metrics` of `nslab watch --web/--metrics` and the server's stop, without root:
the collector on captured `ip -s -j link` output, the exposition formats, the
app over an injected sampler (a scrape runs no sampler), and SIGINT/SIGTERM of
a real server process with pages and scrapers connected."""
import asyncio
import contextlib
import copy
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
import yaml
from prometheus_client.openmetrics.parser import \
    text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from nslab.traffic.watch import parse_link_stats
from nslab.traffic.watchmetrics import (INTERFACE_METRICS, LABELS, Reading, exposition, registry,
                                sample_names)
from nslab.traffic.webwatch import Watcher, app, run_server
from tests.conftest import ROOT, data

#: What Prometheus 2.x sends.
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                     "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")


def captured_with_distinct_counters():
    """The captured `ip -s -j link` output, each counter of each interface set
    to a value of its own, so a counter read into the wrong metric shows."""
    raw = json.load(open(data("ip/link-stats.json")))
    n = 1000
    for link in raw:
        for side in ("rx", "tx"):
            for key in ("bytes", "packets", "dropped", "errors"):
                n += 7
                link["stats64"][side][key] = link["stats64"][side][key] + n
    return raw


class Source:
    """The sampler's state as the collector sees it."""

    def __init__(self, reading, run="nl1234"):
        self.run, self.interval, self.reading = run, 1.0, reading
        self.samples, self.samplers, self.streams = 7, 1, 2


def families(text, openmetrics):
    parse = parse_openmetrics if openmetrics else parse_text
    return {f.name: f for f in parse(text)}


@pytest.mark.parametrize("openmetrics", [False, True])
def test_every_counter_of_every_interface_with_its_labels_and_time(openmetrics):
    raw = captured_with_distinct_counters()
    counters = parse_link_stats(json.dumps(raw))
    reading = Reading(1_795_000_000.25, {"h1": counters, "s1": copy.deepcopy(counters)})
    body, ctype = exposition(registry(Source(reading)),
                             PROMETHEUS_ACCEPT if openmetrics else None)
    fams = families(body.decode(), openmetrics)
    by_name = {x["ifname"]: x["stats64"] for x in raw}
    seen = 0
    for key, name, unit, _ in INTERFACE_METRICS:
        fam = fams[name]
        assert fam.type == "counter" and (fam.unit == unit if openmetrics else True)
        samples = [s for s in fam.samples if s.name == f"{name}_total"]
        assert {(s.labels["node"], s.labels["interface"]) for s in samples} == \
            {(n, i) for n in ("h1", "s1") for i in by_name if i != "lo"}
        for s in samples:
            assert set(s.labels) == set(LABELS) and s.labels["lab"] == "nl1234"
            side, what = key.split("_")
            assert s.value == by_name[s.labels["interface"]][side][what], (name, s)
            assert float(s.timestamp) == pytest.approx(1_795_000_000.25, abs=1e-3)
            seen += 1
    assert seen == 8 * 2 * (len(by_name) - 1)
    assert fams["nslab_watch_samplers"].samples[0].value == 1
    assert [s.value for s in fams["nslab_watch_samples"].samples
            if s.name == "nslab_watch_samples_total"] == [7]
    assert fams["nslab_watch_event_streams"].samples[0].value == 2


def test_each_node_s_values_carry_the_time_that_node_was_read(monkeypatch):
    """A sweep reads node after node; each value carries its own node's time,
    not the sweep's end (a value read 0.5 s before the time it carried made
    Prometheus' rate over 5 s read 11 % low in a CI run). The sampler stamps
    each node with the midpoint of its netlink dump (nlstats.sweep)."""
    from nslab.traffic import watch
    raw = captured_with_distinct_counters()
    stats = {l["ifname"]: {f"{d}_{k}": l["stats64"][d][k] for d in ("rx", "tx")
                           for k in ("bytes", "packets", "dropped", "errors")} for l in raw}
    monkeypatch.setattr(watch.time, "monotonic", lambda: 12.0)  # the sweep's end
    monkeypatch.setattr(watch, "sweep", lambda nss: [(10.1, 1e-5, stats), None, (11.1, 1e-5, stats)])
    got = watch.sample({"h1": "nl1234-h1", "gone": "nl1234-gone", "s1": "nl1234-s1"})
    assert got.time == 12.0 and got.node_times == {"h1": 10.1, "s1": 11.1}
    assert got[0] == 12.0 and set(got[1]) == {"h1", "s1"}  # still (time, counters) first
    assert got.counters["h1"] == parse_link_stats(json.dumps(raw))  # as ip's JSON read
    reading = Reading(1_795_000_002.0, got.counters,
                      {"h1": 1_795_000_000.1, "s1": 1_795_000_001.1})
    body, _ = exposition(registry(Source(reading)), None)
    for s in families(body.decode(), False)["nslab_interface_transmit_bytes"].samples:
        want = {"h1": 1_795_000_000.1, "s1": 1_795_000_001.1}[s.labels["node"]]
        assert float(s.timestamp) == pytest.approx(want, abs=1e-3), s
    # a reading without node times (an older sampler) carries the sweep's time
    body, _ = exposition(registry(Source(Reading(1_795_000_002.0, got.counters))), None)
    stamps = [float(s.timestamp) for s in
              families(body.decode(), False)["nslab_interface_transmit_bytes"].samples]
    assert stamps and stamps == pytest.approx([1_795_000_002.0] * len(stamps), abs=1e-3)


def test_parse_keeps_each_directions_drops_and_errors():
    raw = captured_with_distinct_counters()
    got = parse_link_stats(json.dumps(raw))
    for link in raw:
        if link["ifname"] == "lo":
            continue
        c, st = got[link["ifname"]], link["stats64"]
        assert (c["rx_dropped"], c["tx_dropped"], c["rx_errors"], c["tx_errors"]) == \
            (st["rx"]["dropped"], st["tx"]["dropped"], st["rx"]["errors"], st["tx"]["errors"])
        assert c["drops"] == c["rx_dropped"] + c["tx_dropped"]


@pytest.mark.parametrize("accept, ctype, eof", [
    (PROMETHEUS_ACCEPT, "application/openmetrics-text", True),
    ("application/openmetrics-text", "application/openmetrics-text", True),
    (None, "text/plain; version=0.0.4", False),
    ("text/plain;version=0.0.4;q=0.5,*/*;q=0.1", "text/plain; version=0.0.4", False),
    ("text/html", "text/plain; version=0.0.4", False),
])
def test_content_negotiation(accept, ctype, eof):
    body, content_type = exposition(registry(Source(None)), accept)
    assert content_type.startswith(ctype)
    assert body.decode().endswith("# EOF\n") is eof
    # no reading yet: the families are there, without samples
    assert "# TYPE nslab_interface_transmit_bytes" in body.decode()
    assert "nslab_interface_transmit_bytes_total{" not in body.decode()


def test_sample_names_are_what_the_collector_exposes():
    names = sample_names()
    assert {f"{n}_total" for _, n, _, _ in INTERFACE_METRICS} <= names
    assert {"nslab_watch_samplers", "nslab_watch_samples_total",
            "nslab_watch_event_streams", "nslab_watch_interval_seconds"} <= names
    assert {"nslab_link_change_info", "nslab_link_down", "nslab_link_rate_bits_per_second",
            "nslab_link_delay_seconds", "nslab_link_jitter_seconds",
            "nslab_link_loss_ratio"} <= names


@pytest.mark.parametrize("openmetrics", [False, True])
def test_a_link_changed_while_the_lab_runs_has_its_series(openmetrics):
    """`nslab link set h1-s1 --rate 10Mbit --delay 50ms --loss 1% --down` (at
    s1) and `nslab link set h2-s1 --jitter 5ms` then reset: an info series
    per changed link, one gauge per value set, in base units; none for a
    link reset to its topology."""
    from nslab.traffic.linkset import RunTime
    changes = {"h1-s1": RunTime(rate=10_000_000, delay_ms=50.0, loss_pct=1.0, down="s1"),
               "h2-s1": RunTime()}
    body, _ = exposition(registry(Source(Reading(1_795_000_000.0, {}, {}, changes))),
                         PROMETHEUS_ACCEPT if openmetrics else None)
    fams = families(body.decode(), openmetrics)
    info = fams["nslab_link_change"] if openmetrics else fams["nslab_link_change_info"]
    assert [(s.name, s.labels, s.value) for s in info.samples] == [
        ("nslab_link_change_info", {"lab": "nl1234", "link": "h1-s1",
                                    "change": "rate 10.0 Mbit/s, delay 50ms, loss 1%, down at s1"},
         1.0)]
    got = {name: [(s.labels, s.value) for s in fams[name].samples]
           for name in ("nslab_link_down", "nslab_link_rate_bits_per_second",
                        "nslab_link_delay_seconds", "nslab_link_jitter_seconds",
                        "nslab_link_loss_ratio")}
    one = {"lab": "nl1234", "link": "h1-s1"}
    assert got == {"nslab_link_down": [({**one, "node": "s1"}, 1.0)],
                   "nslab_link_rate_bits_per_second": [(one, 10e6)],
                   "nslab_link_delay_seconds": [(one, pytest.approx(0.05))],
                   "nslab_link_jitter_seconds": [],
                   "nslab_link_loss_ratio": [(one, pytest.approx(0.01))]}
    # no change: no link series at all
    body, _ = exposition(registry(Source(Reading(1.0, {}))), None)
    assert "nslab_link_change_info{" not in body.decode() and "nslab_link_down{" not in body.decode()


# -- the server, over an injected sampler ----------------------------------------------------
class FakeSampler:
    """Counters that grow by 125 kB per call on h1-eth0; counts its calls."""

    def __init__(self):
        self.calls = 0
        self.base = parse_link_stats(open(data("ip/link-stats.json")).read())["eth0"]

    def __call__(self, nss):
        self.calls += 1
        c = dict(self.base, tx_bytes=self.base["tx_bytes"] + 125_000 * self.calls)
        return time.monotonic(), {"h1": {"h1-eth0": c}, "h2": {"h2-eth0": dict(self.base)}}


def watcher(interval, sampler=None):
    return Watcher("nltest", interval, picture=False, sampler=sampler or FakeSampler(),
                   nss={"h1": "nltest-h1", "h2": "nltest-h2"}, live=lambda: True)


async def first_event(resp):
    line = b""
    while not line.startswith(b"data: "):
        line = await resp.content.readline()
        assert line, "the stream ended before its first event"
    return json.loads(line[len(b"data: "):])


def test_a_scrape_runs_no_sampler():
    """One reading, then twenty scrapes: still one sampler call, and the
    exposition says so (one sampler, one sample)."""
    from aiohttp.test_utils import TestClient, TestServer
    fake = FakeSampler()
    w = watcher(3600, fake)  # no second reading during the test

    async def go():
        async with TestClient(TestServer(app(w, page=False))) as client:
            while w.reading is None:
                await asyncio.sleep(0.01)
            bodies = []
            for _ in range(20):
                resp = await client.get("/metrics", headers={"Accept": PROMETHEUS_ACCEPT})
                assert resp.status == 200
                bodies.append(await resp.text())
            return bodies

    bodies = asyncio.run(go())
    assert fake.calls == 1
    fams = families(bodies[-1], openmetrics=True)
    assert [s.value for s in fams["nslab_watch_samples"].samples
            if s.name.endswith("_total")] == [1]
    assert fams["nslab_watch_samplers"].samples[0].value == 1
    tx = {s.labels["node"]: s.value for s in fams["nslab_interface_transmit_bytes"].samples}
    assert tx["h1"] == fake.base["tx_bytes"] + 125_000


def test_metrics_alone_serves_no_page_and_checks_the_host():
    from aiohttp.test_utils import TestClient, TestServer
    w = watcher(3600)

    async def go():
        async with TestClient(TestServer(app(w, page=False))) as client:
            out = {p: (await client.get(p)).status for p in ("/", "/events", "/rates.json")}
            ok = await client.get("/metrics", headers={"Host": f"127.0.0.1:{client.port}"})
            rebound = await client.get("/metrics", headers={"Host": "rebind.example:8765"})
            return out, ok.status, ok.headers, rebound.status, await rebound.text()

    out, ok, headers, rebound, text = asyncio.run(go())
    assert out == {"/": 404, "/events": 404, "/rates.json": 404}
    assert ok == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert rebound == 421 and "nslab_" not in text


@contextlib.asynccontextmanager
async def serving(w, page=True):
    """``run_server`` (the server ``nslab watch`` runs, not aiohttp's test
    server) on 127.0.0.1:0: yields (base URL, the stop event, the server task)."""
    sock = socket.create_server(("127.0.0.1", 0))
    stop = asyncio.Event()
    server = asyncio.create_task(run_server(w, sock, "127.0.0.1", page=page, stop=stop))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", stop, server
    finally:
        stop.set()
        await asyncio.wait_for(server, 10)


async def open_pages(session, base, n):
    import aiohttp
    for _ in range(100):
        try:
            pages = [await session.get(f"{base}/events") for _ in range(n)]
            break
        except aiohttp.ClientConnectionError:  # not listening yet
            await asyncio.sleep(0.02)
    for p in pages:
        await first_event(p)
    return pages


def test_pages_and_scrapers_share_one_sampler(caplog):
    """Three pages and forty scrapes: the readings follow the clock (one per
    interval), not the pages or the scrapes, and each is one sampler call; a
    closed page is a debug line, never an error."""
    import aiohttp
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="nslab.traffic.webwatch")  # whatever its parents say
    fake = FakeSampler()
    w = watcher(0.05, fake)

    async def go():
        async with serving(w) as (base, _, _), aiohttp.ClientSession() as session:
            pages = await open_pages(session, base, 3)
            scrapes, samples0 = 0, w.samples
            t0 = time.monotonic()
            while scrapes < 40:
                async with session.get(f"{base}/metrics") as resp:
                    assert resp.status == 200
                    body = await resp.text()
                scrapes += 1
            elapsed, readings = time.monotonic() - t0, w.samples - samples0
            # a call in flight has not made its reading yet
            assert w.samples <= fake.calls <= w.samples + 1
            streams = families(body, openmetrics=False)["nslab_watch_event_streams"]
            pages[0].close()
            for _ in range(100):  # the server notices at its next write
                if w.streams == 2:
                    break
                await asyncio.sleep(0.02)
            left = w.streams
            return elapsed, readings, streams.samples[0].value, left

    elapsed, readings, streams, left = asyncio.run(go())
    assert streams == 3 and left == 2
    assert readings <= elapsed / 0.05 + 2, (readings, elapsed)
    assert w.samplers == 0 and w.streams == 0  # after the stop
    assert any("a page closed its event stream" in r.getMessage() for r in caplog.records), \
        "\n".join(f"{r.levelname} {r.name} {r.getMessage()}" for r in caplog.records
                  if r.name != "aiohttp.access")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


@pytest.mark.timed
def test_the_server_stops_at_once_with_pages_and_scrapers_connected(caplog):
    """run_server with two pages and a scraper connected: the stop (what
    SIGINT sets) ends it well within 2 s; the pages' streams end cleanly;
    nothing is logged as an error."""
    import aiohttp
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="nslab.traffic.webwatch")  # whatever its parents say
    w = watcher(0.1)

    async def go():
        async with serving(w) as (base, stop, server), aiohttp.ClientSession() as session:
            pages = await open_pages(session, base, 2)
            scraping = True

            async def scrape():
                n = 0
                while scraping:
                    try:
                        async with session.get(f"{base}/metrics") as r:
                            await r.read()
                            n += 1
                    except aiohttp.ClientError:  # the server has stopped
                        await asyncio.sleep(0.01)
                return n

            scraper = asyncio.create_task(scrape())
            await asyncio.sleep(0.3)
            t0 = time.monotonic()
            stop.set()
            await asyncio.wait_for(asyncio.shield(server), 5)
            took = time.monotonic() - t0
            scraping = False
            scrapes = await scraper
            rest = [await p.content.read() for p in pages]  # the streams end
            return took, scrapes, rest

    took, scrapes, rest = asyncio.run(go())
    assert took < 2.0, took
    # the streams ended cleanly (a stream aiohttp cancels ends without its
    # last chunk: reading it raises)
    assert scrapes > 0 and all(isinstance(r, bytes) for r in rest)
    assert w.samplers == 0 and w.streams == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


# -- a real server process and a real signal -------------------------------------------------
SERVER = r"""
import sys, time
from nslab.traffic.webwatch import Watcher, listen, serve_watcher
n = [0]
def sampler(nss):
    n[0] += 1
    c = {k: n[0] * 1000 for k in ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets")}
    c.update(rx_dropped=0, tx_dropped=0, rx_errors=0, tx_errors=0, drops=0)
    return time.monotonic(), {"h1": {"h1-eth0": c}}
w = Watcher("nltest", 0.2, picture=False, sampler=sampler, nss={"h1": "nltest-h1"},
            live=lambda: True)
serve_watcher(w, listen("127.0.0.1", 0), "127.0.0.1", page=sys.argv[1] == "web")
"""


def _reader(url, stop, events):
    """Reads an event stream (a page) until the server ends it or ``stop``;
    counts its events in ``events`` (a list)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            while not stop.is_set():
                line = r.readline()
                if not line:
                    return
                if line.startswith(b"data: "):
                    events.append(line)
    except OSError:
        pass


@pytest.mark.timed
@pytest.mark.parametrize("sig, ignored, mode", [
    (signal.SIGINT, False, "web"),
    (signal.SIGINT, True, "web"),  # started as a background job is: SIGINT ignored
    (signal.SIGTERM, False, "metrics"),
])
def test_a_server_process_stops_within_2_s_of_a_signal(sig, ignored, mode):
    def child_signals():
        signal.signal(signal.SIGINT, signal.SIG_IGN if ignored else signal.SIG_DFL)
    proc = subprocess.Popen([sys.executable, "-c", SERVER, mode], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=child_signals)
    stop = threading.Event()
    threads, events = [], [[], []]
    try:
        line = proc.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert m, line + proc.stderr.read()
        base = f"http://127.0.0.1:{m.group(1)}"
        if mode == "web":
            threads = [threading.Thread(target=_reader, args=(f"{base}/events", stop, got))
                       for got in events]
            for t in threads:
                t.start()
        bodies = []
        deadline = time.monotonic() + 10
        while len(bodies) < 5 or (threads and not all(events)):  # pages and a scraper
            assert time.monotonic() < deadline, (len(bodies), events)
            with urllib.request.urlopen(f"{base}/metrics", timeout=5) as r:
                bodies.append(r.read())
            time.sleep(0.05)
        assert b'nslab_interface_transmit_bytes_total{interface="h1-eth0"' in bodies[-1]
        t0 = time.monotonic()
        proc.send_signal(sig)
        proc.wait(timeout=10)
        took = time.monotonic() - t0
        err = proc.stderr.read()
        assert took < 2.0, took
        assert proc.returncode == 0, err
        assert "Traceback" not in err and "Error" not in err, err
        for t in threads:
            t.join(timeout=5)
            assert not t.is_alive()  # the server ended the page's stream
    finally:
        stop.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


# -- docs: the Grafana dashboard and the scrape configuration ---------------------------------
DASHBOARD = os.path.join(ROOT, "docs", "grafana", "nslab-dashboard.json")
SCRAPE = os.path.join(ROOT, "docs", "prometheus", "nslab.yml")
PROMTOOL = os.path.join(os.environ.get("NSLAB_PROMETHEUS_CACHE",
                                       os.path.join(ROOT, ".cache", "prometheus")),
                        "usr", "bin", "promtool")


def _exprs(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("expr", "query", "definition") and isinstance(v, str):
                yield v
            elif isinstance(v, dict) and k == "query" and isinstance(v.get("query"), str):
                yield v["query"]
            else:
                yield from _exprs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _exprs(v)


def test_the_grafana_dashboard_queries_only_metrics_that_exist():
    dash = json.load(open(DASHBOARD))
    assert dash["title"] and dash["panels"]
    exprs = list(_exprs(dash))
    used = {m for e in exprs for m in re.findall(r"\b(nslab_[a-z_]+)\b", e)}
    assert used and used <= sample_names(), used - sample_names()
    # the links' rates and drops are drawn
    assert any(re.search(r"rate\(nslab_interface_transmit_bytes_total\{", e) for e in exprs)
    assert any("drops_total" in e for e in exprs)
    # every panel's targets go to the dashboard's Prometheus data source
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            assert target["datasource"]["type"] == "prometheus"
    templating = {v["name"] for v in dash["templating"]["list"]}
    assert {"datasource", "lab", "node"} <= templating


def test_the_scrape_configuration_points_at_the_default_server():
    conf = yaml.safe_load(open(SCRAPE))
    (job,) = conf["scrape_configs"]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    assert job["static_configs"][0]["targets"] == ["127.0.0.1:8765"]
    if not os.access(PROMTOOL, os.X_OK):
        pytest.skip("promtool is not unpacked (scripts/setup-prometheus.sh)")
    res = subprocess.run([PROMTOOL, "check", "config", SCRAPE], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("fail_at", ["app", "setup"])
def test_signal_handlers_are_given_back_when_the_server_cannot_start(monkeypatch, fail_at):
    """A server that fails before it serves leaves SIGUSR1 (standing in for
    SIGINT/SIGTERM/SIGHUP) as it found it: no loop handler, the former Python one."""
    import signal

    import nslab.traffic.webwatch as webwatch
    from aiohttp import web

    def boom(*a, **k):
        raise RuntimeError("cannot start")

    if fail_at == "app":
        monkeypatch.setattr(webwatch, "app", boom)
    else:
        monkeypatch.setattr(web.AppRunner, "setup", boom)
    former = []

    def mine(signum, frame):
        former.append(signum)

    previous = signal.signal(signal.SIGUSR1, mine)
    try:
        async def go():
            w = Watcher("nltest", 0.05)
            sock = socket.create_server(("127.0.0.1", 0))
            try:
                with pytest.raises(RuntimeError, match="cannot start"):
                    await run_server(w, sock, "127.0.0.1", stop=asyncio.Event(),
                                     signals=(signal.SIGUSR1,))
                # the loop no longer answers SIGUSR1: removing it finds nothing
                assert asyncio.get_running_loop().remove_signal_handler(signal.SIGUSR1) is False
            finally:
                sock.close()
        asyncio.run(go())
        assert signal.getsignal(signal.SIGUSR1) is mine
        signal.raise_signal(signal.SIGUSR1)
        assert former == [signal.SIGUSR1]
    finally:
        signal.signal(signal.SIGUSR1, previous)
