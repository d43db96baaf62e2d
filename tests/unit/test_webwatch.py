"""`nslab watch --web` without root: per-link rates from per-interface ones, and
the aiohttp app (page, event stream) over a sampler fed with counters."""
import asyncio
import json

import pytest

from nslab.store.draw import available, links
from nslab.run.registry import topology
from nslab.traffic.watch import Rate
from nslab.traffic.webwatch import LOAD_COLOURS, Watcher, app, colour, link_rates


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
    monkeypatch.setattr("nslab.traffic.webwatch.namespaces", lambda run: {"h1": "x-h1", "h2": "x-h2"})
    monkeypatch.setattr("nslab.traffic.webwatch.load_topology", lambda run: topology("pair")(bw="1Gbit"))
    monkeypatch.setattr("nslab.traffic.webwatch.sample", lambda nss: next(it))
    monkeypatch.setattr("nslab.runtime.clean.read_journal", lambda run: {"run": run})
    monkeypatch.setattr("nslab.runtime.clean.run_is_live", lambda j: True)
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
    # the interface's row is coloured as its link on the picture, by the legend
    assert event["interfaces"][0]["colour"] == l0["colour"] == LOAD_COLOURS[-1][1]
    assert "tr.style.color = r.colour" in page and "color: #2e7d32" not in page


def test_each_row_takes_the_colour_its_load_has_in_the_legend():
    from nslab.traffic.watch import Rate
    from nslab.traffic.webwatch import payload
    links = [{"id": "link0", "a": "s1", "ia": "s1-eth1", "b": "h1", "ib": "h1-eth0",
              "rate": 100e6}]
    rows = [Rate("h1", "h1-eth0", 0, 20e6, 0, 0, 0),    # 20 % of its 100 Mbit/s link: green
            Rate("s1", "s1-eth1", 50e6, 0, 0, 0, 0),     # 50 %: amber
            Rate("h1", "lo0", 0, 5e6, 0, 0, 0),          # no link's: of 1 Gbit/s, green
            Rate("s1", "s1", 0, 0, 0, 0, 0)]             # idle: grey
    got = [(r["load"], r["colour"]) for r in payload("nl1234", links, rows)["interfaces"]]
    assert got == [(pytest.approx(0.2), "#2e7d32"), (pytest.approx(0.5), "#f9a825"),
                   (pytest.approx(0.005), "#2e7d32"), (0, "#9aa0a6")]


def test_the_stream_says_when_the_lab_is_gone(monkeypatch):
    from aiohttp.test_utils import TestClient, TestServer
    w = fake_watcher(monkeypatch, [(0.0, counters(0))] * 100)
    monkeypatch.setattr("nslab.runtime.clean.run_is_live", lambda j: False)

    async def go():
        async with TestClient(TestServer(app(w))) as client:
            resp = await client.get("/events")
            return await resp.content.read()

    assert asyncio.run(go()).startswith(b"event: gone")


# -- the page carries no script but its own; Host check; client cap (issue 31) --------------
SVG_OPEN = '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink">'


@pytest.mark.parametrize("name", sorted(__import__("nslab.run.registry").run.registry.topologies()))
def test_every_ready_topology_picture_is_clean_and_keeps_its_link_ids(name):
    import xml.etree.ElementTree as ET

    from nslab.store.draw import to_graph
    from nslab.run.registry import topologies
    from nslab.traffic.webwatch import clean_svg
    if not available():
        pytest.skip("Graphviz (dot) is not installed")
    topo = topologies()[name]()
    raw = to_graph(topo, spacious=True).pipe(format="svg").decode()
    cleaned = clean_svg(raw)
    before, after = ET.fromstring(raw[raw.index("<svg"):]), ET.fromstring(cleaned)
    assert [(e.tag, e.attrib) for e in before.iter()] == [(e.tag, e.attrib) for e in after.iter()]
    assert cleaned.startswith("<svg") and "<!--" not in cleaned and "ns0:" not in cleaned
    for l in links(topo):
        assert f'id="{l["id"]}"' in cleaned


@pytest.mark.parametrize("body, why", [
    ("<script>alert(1)</script>", "<script>"),
    ('<a xlink:href="javascript:alert(1)"><text>x</text></a>', "<a>"),
    ('<g onload="alert(1)"/>', "'onload'"),
    ('<foreignObject><p xmlns="http://www.w3.org/1999/xhtml">x</p></foreignObject>',
     "<foreignObject>"),
    ('<image href="x.png"/>', "<image>"),
    ('<g style="fill:red"/>', "'style'"),
    ('<path fill="url(https://example.org/x)"/>', "not plain"),
    ('<path fill="JavaScript:alert(1)"/>', "not plain"),
    ('<set attributeName="fill" to="red"/>', "<set>"),
    ('<p xmlns="http://www.w3.org/1999/xhtml">x</p>', "<p>"),
])
def test_a_picture_with_anything_but_drawing_is_refused(body, why):
    from nslab.traffic.webwatch import UnsafeSvgError, clean_svg
    with pytest.raises(UnsafeSvgError, match=why.replace("(", r"\(")):
        clean_svg(SVG_OPEN + body + "</svg>")


def test_comments_processing_instructions_and_entities_do_not_reach_the_page():
    """The HTML parser reads ``<?...>`` as a comment that ends at the first
    ``>``, and XML does not: what is inlined is re-serialised from the parsed
    elements, so neither can smuggle markup past the check."""
    from nslab.traffic.webwatch import UnsafeSvgError, clean_svg
    out = clean_svg(SVG_OPEN + '<?x <script>alert(1)</script> ?><!-- <script>x</script> -->'
                    '<g id="link0" class="edge link"><title>a&lt;b&gt;</title>'
                    '<path fill="url(#l_0)" d="M0,0"/></g></svg>')
    assert "<script" not in out and "<!--" not in out and "<?" not in out
    assert '<title>a&lt;b&gt;</title>' in out and 'fill="url(#l_0)"' in out
    with pytest.raises(UnsafeSvgError, match="DOCTYPE"):
        clean_svg('<svg xmlns="http://www.w3.org/2000/svg"><!DOCTYPE x [<!ENTITY a "b">]></svg>')
    with pytest.raises(UnsafeSvgError, match="not SVG"):
        clean_svg("<html></html>")


def test_the_page_of_a_hostile_topology_runs_only_its_own_script(monkeypatch):
    """A topology named with an HTML-like label: its picture on the live page
    has no link and no script; the page has one script, whose nonce is the
    one its Content-Security-Policy allows."""
    import re

    from aiohttp.test_utils import TestClient, TestServer

    from nslab.model.topo import Topology
    hostile = Topology(name='<<TABLE HREF="javascript:alert(1)"><TR><TD>x</TD></TR></TABLE>>')
    hostile.add_host("h1")
    hostile.add_host("h2")
    hostile.add_link("h1", "h2")
    w = fake_watcher(monkeypatch, [(0.0, counters(0))] * 100)
    monkeypatch.setattr("nslab.traffic.webwatch.load_topology", lambda run: hostile)
    w = Watcher("nltest", 0.05)

    async def go():
        async with TestClient(TestServer(app(w))) as client:
            resp = await client.get("/")
            return resp.status, resp.headers, await resp.text()

    status, headers, page = asyncio.run(go())
    assert status == 200
    (nonce,) = re.findall(r"<script nonce=\"([^\"]+)\">", page)
    assert page.count("<script") == 1
    policy = headers["Content-Security-Policy"]
    assert f"script-src 'nonce-{nonce}'" in policy and "default-src 'none'" in policy
    tags = page_tags(page)
    assert [t for t, _ in tags if t in ("a", "table", "foreignobject", "iframe")] == ["table"]
    assert not any("javascript" in (v or "").lower() or k.startswith("on") or "href" in k
                   for _, attrs in tags for k, v in attrs)
    if available():  # the name is there, as text
        assert "&lt;&lt;TABLE HREF=\"javascript:alert(1)\"&gt;" in page
        assert 'id="link0"' in page


def page_tags(page):
    """Every (tag, attributes) of an HTML page, as a browser's tokenizer sees them."""
    from html.parser import HTMLParser

    class Tags(HTMLParser):
        def __init__(self):
            super().__init__()
            self.seen = []

        def handle_starttag(self, tag, attrs):
            self.seen.append((tag, attrs))

        handle_startendtag = handle_starttag

    t = Tags()
    t.feed(page)
    return t.seen


@pytest.mark.parametrize("host, bind, ok", [
    ("127.0.0.1:8765", "127.0.0.1", True),
    ("localhost:8765", "127.0.0.1", True),
    ("LOCALHOST.", "127.0.0.1", True),
    ("[::1]:8765", "127.0.0.1", True),
    ("127.0.0.1", "::1", True),
    ("evil.example:8765", "127.0.0.1", False),  # a DNS-rebinding page's own name
    ("127.0.0.1.evil.example", "127.0.0.1", False),
    ("10.1.2.3:8765", "127.0.0.1", False),
    ("", "127.0.0.1", False),
    (None, "127.0.0.1", False),
    ("[::1", "127.0.0.1", False),
    ("127.0.0.1:80:80", "127.0.0.1", False),
    ("192.0.2.7:8765", "192.0.2.7", True),
    ("localhost:8765", "192.0.2.7", False),
    ("192.0.2.8", "192.0.2.7", False),
    ("192.0.2.8:8765", "0.0.0.0", True),   # a wildcard bind: any address...
    ("[2001:db8::1]", "::", True),
    ("localhost", "0.0.0.0", True),
    ("lab.example:8765", "0.0.0.0", False),  # ...but no other name
])
def test_host_header(host, bind, ok):
    from nslab.traffic.webwatch import host_allowed
    assert host_allowed(host, bind) is ok


def test_a_request_for_another_host_is_refused(monkeypatch):
    from aiohttp.test_utils import TestClient, TestServer
    w = fake_watcher(monkeypatch, [(0.0, counters(0))] * 100)

    async def go():
        async with TestClient(TestServer(app(w))) as client:
            out = {}
            for path in ("/", "/rates.json", "/events"):
                resp = await client.get(path, headers={"Host": "rebind.example:8765"})
                out[path] = (resp.status, await resp.text())
            ok = await client.get("/rates.json", headers={"Host": f"localhost:{client.port}"})
            return out, ok.status, ok.headers

    refused, ok, headers = asyncio.run(go())
    for path, (status, text) in refused.items():
        assert status == 421, path
        assert "answers only to the address it listens on (127.0.0.1)" in text
        assert "run" not in text and "links" not in text  # no counters
    assert ok == 200 and headers["X-Content-Type-Options"] == "nosniff"


def test_event_streams_are_capped(monkeypatch):
    """Two streams with max_clients=2; a third gets 503 and a short text;
    when a page closes, its slot is given back."""
    from aiohttp.test_utils import TestClient, TestServer
    w = fake_watcher(monkeypatch, [(float(i), counters(i * 1000)) for i in range(10_000)])

    async def first_event(resp):
        line = b""
        while not line.startswith(b"data: "):
            line = await resp.content.readline()

    async def go():
        async with TestClient(TestServer(app(w, max_clients=2))) as client:
            a, b = await client.get("/events"), await client.get("/events")
            await first_event(a)
            await first_event(b)
            third = await client.get("/events")
            refused = (third.status, await third.text(), third.headers.get("Retry-After"))
            a.close()
            for _ in range(200):  # the server notices at its next write
                again = await client.get("/events")
                if again.status == 200:
                    await first_event(again)
                    again.close()
                    break
                await again.release()
                await asyncio.sleep(0.05)
            b.close()
            return refused, again.status

    (status, text, retry), again = asyncio.run(go())
    assert status == 503 and text == "nslab watch: 2 pages are open already; close one\n"
    assert retry == "10"
    assert again == 200


def test_max_clients_must_be_positive(monkeypatch):
    from nslab.errors import InputError
    w = fake_watcher(monkeypatch, [(0.0, counters(0))])
    with pytest.raises(InputError, match="at least 1"):
        app(w, max_clients=0)


def test_a_link_changed_while_the_lab_runs_is_said_on_it_and_loaded_by_its_new_rate():
    """`nslab link set h1-s1 --rate 10Mbit --down`: the link's label says so,
    its load is of the 10 Mbit/s set (9 Mbit/s: 90 %, red, not 9 % of its
    topology's 100), the picture dashes it, and the event lists the change;
    a link reset to its topology (an empty change) says nothing."""
    from nslab.traffic.linkset import RunTime
    from nslab.traffic.webwatch import payload
    topo = topology("single")(k=2, bw=100)
    ls = links(topo)
    assert [l["name"] for l in ls] == ["h1-s1", "h2-s1"]  # as `nslab link set` names them
    changes = {"h1-s1": RunTime(rate=10_000_000, down="h1"), "h2-s1": RunTime()}
    ev = payload("nl1234", ls, [rate("h1", "h1-eth0", tx=9e6)], changes)
    l0, l1 = ev["links"]
    assert l0["load"] == pytest.approx(0.9) and l0["colour"] == LOAD_COLOURS[-1][1]
    assert l0["set"] == "rate 10.0 Mbit/s, down at h1" and l0["down"] == "h1"
    assert l0["lines"][-1] == "set: rate 10.0 Mbit/s, down at h1"
    assert l1 == {"id": "link1", "known": False}
    assert ev["changes"] == [{"link": "h1-s1", "set": "rate 10.0 Mbit/s, down at h1",
                              "down": "h1"}]
    # h1's row: 90 % of the rate set on its link
    assert ev["interfaces"][0]["load"] == pytest.approx(0.9)
    assert payload("nl1234", ls, [])["changes"] == []


def test_the_event_stream_carries_the_links_changed_at_run_time(monkeypatch):
    from aiohttp.test_utils import TestClient, TestServer
    from nslab.traffic.linkset import RunTime
    w = fake_watcher(monkeypatch, [(0.0, counters(0))] + [(1.0 + i, counters(0)) for i in range(100)])
    seen = []

    def record(run):
        seen.append(run)
        return {"h1-h2": RunTime(delay_ms=50.0, loss_pct=1.0)}
    w.read_changes = record

    async def go():
        async with TestClient(TestServer(app(w))) as client:
            page = await (await client.get("/")).text()
            resp = await client.get("/events")
            line = b""
            while not line.startswith(b"data: "):
                line = await resp.content.readline()
            return page, json.loads(line[len(b"data: "):])

    page, event = asyncio.run(go())
    assert seen and set(seen) == {"nltest"}  # read with the samples, for this lab
    assert event["changes"] == [{"link": "h1-h2", "set": "delay 50ms, loss 1%", "down": None}]
    assert event["links"][0]["set"] == "delay 50ms, loss 1%"
    assert 'id="changes"' in page and "drawChanges(data.changes" in page
    assert w.reading.links == {"h1-h2": RunTime(delay_ms=50.0, loss_pct=1.0)}  # and /metrics
