"""`nslab watch --web` without root: per-link rates from per-interface ones, and
the aiohttp app (page, event stream) over a sampler fed with counters."""
import asyncio
import json

import pytest

from nslab.draw import available, links
from nslab.registry import topology
from nslab.watch import Rate
from nslab.webwatch import LOAD_COLOURS, Watcher, app, colour, link_rates


def rate(node, intf, tx=0.0, rx=0.0, drops=0):
    return Rate(node, intf, rx_bps=rx, tx_bps=tx, rx_pps=rx / 8000, tx_pps=tx / 8000,
                drops=drops)


def test_a_link_reads_the_sending_end_or_else_the_receiving_one():
    topo = topology("single")(k=2, bw=100)  # 100 Mbit/s links, s1 on top
    ls = links(topo)
    assert [(l["a"], l["b"], l["rate"]) for l in ls] == [("s1", "h1", 100e6), ("s1", "h2", 100e6)]
    # an OVS switch's ports have no namespace: only the hosts' ends are read
    got = link_rates(ls, [rate("h1", "h1-eth0", tx=90e6, rx=1e6, drops=2)])
    l0, l1 = got
    assert l0["ab_bps"] == 1e6 and l0["ba_bps"] == 90e6  # s1 -> h1 is what h1 received
    assert l0["load"] == pytest.approx(0.9) and l0["colour"] == LOAD_COLOURS[-1][1]
    assert l0["lines"] == ["→h1 1.0 Mbit/s", "→s1 90.0 Mbit/s", "drops 2"]
    assert l1 == {"id": "link1", "known": False}
    # with the switch's own counters (a Linux bridge's namespace), its end wins
    both = link_rates(ls, [rate("s1", "s1-eth1", tx=5e6, rx=7e6, drops=1),
                           rate("h1", "h1-eth0", tx=7e6, rx=5e6, drops=1)])
    assert both[0]["ab_bps"] == 5e6 and both[0]["ba_bps"] == 7e6 and both[0]["drops"] == 2


def test_colours_by_load():
    assert colour(0) == "#9aa0a6"
    assert colour(0.1) == "#2e7d32"
    assert colour(0.5) == "#f9a825"
    assert colour(0.95) == colour(3.0) == "#c62828"


def fake_watcher(monkeypatch, samples):
    """A Watcher over a pair topology whose counters come from ``samples``."""
    it = iter(samples)
    monkeypatch.setattr("nslab.webwatch.namespaces", lambda run: {"h1": "x-h1", "h2": "x-h2"})
    monkeypatch.setattr("nslab.webwatch.load_topology", lambda run: topology("pair")(bw="1Gbit"))
    monkeypatch.setattr("nslab.webwatch.sample", lambda nss: next(it))
    monkeypatch.setattr("nslab.clean.read_journal", lambda run: {"run": run})
    monkeypatch.setattr("nslab.clean.run_is_live", lambda j: True)
    w = Watcher("nltest", 0.05)
    return w


def counters(tx_bytes):
    c = {"rx_bytes": 0, "tx_bytes": tx_bytes, "rx_packets": 0, "tx_packets": tx_bytes // 1000,
         "drops": 0}
    return {"h1": {"h1-eth0": c}}


def test_the_page_and_its_event_stream(monkeypatch):
    from aiohttp.test_utils import TestClient, TestServer
    # 125 MB in 1 s between the first two samples: 1 Gbit/s from h1 to h2
    w = fake_watcher(monkeypatch, [(0.0, counters(0)), (1.0, counters(125_000_000))]
                     + [(2.0 + i, counters(125_000_000)) for i in range(100)])

    async def go():
        async with TestClient(TestServer(app(w))) as client:
            page = await (await client.get("/")).text()
            resp = await client.get("/events")
            assert resp.headers["Content-Type"] == "text/event-stream"
            line = b""
            while not line.startswith(b"data: "):
                line = await resp.content.readline()
            return page, json.loads(line[len(b"data: "):])

    page, event = asyncio.run(go())
    assert 'new EventSource("events")' in page
    if available():
        assert 'id="link0"' in page and "<title>h1</title>" in page
    (l0,) = event["links"]
    assert l0["a"] in ("h1", "h2") and l0["known"]
    assert max(l0["ab_bps"], l0["ba_bps"]) == pytest.approx(1e9)
    assert event["interfaces"][0]["tx"] == "1.0 Gbit/s"


def test_the_stream_says_when_the_lab_is_gone(monkeypatch):
    from aiohttp.test_utils import TestClient, TestServer
    w = fake_watcher(monkeypatch, [(0.0, counters(0))] * 100)
    monkeypatch.setattr("nslab.clean.run_is_live", lambda j: False)

    async def go():
        async with TestClient(TestServer(app(w))) as client:
            resp = await client.get("/events")
            return await resp.content.read()

    assert asyncio.run(go()).startswith(b"event: gone")
