"""``nslab watch --web``: the topology picture with live per-link rates, in a browser.

One sampler reads the lab's counters every interval (the same one
``ip -s -j link`` call per namespace as the terminal view, whatever the number
of open pages) and pushes the per-link rates to every page as server-sent
events (aiohttp). The page is the Graphviz picture of the lab's topology
(written by the lab into its work directory); a small script colours each link
by its load and writes its rates beside it. The server binds 127.0.0.1 unless
told otherwise.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Any, Dict, List, Optional

from .errors import InputError
from .shaping import format_rate
from .watch import Rate, find_run, namespaces, rates, sample

log = logging.getLogger(__name__)

_TEMPLATES = os.path.join(os.path.dirname(__file__), "templates")

#: Link colours by load: (upper bound of the fraction of the link's rate, colour).
#: An unshaped link counts 1 Gbit/s as full.
LOAD_COLOURS = ((0.001, "#9aa0a6"), (0.3, "#2e7d32"), (0.8, "#f9a825"), (float("inf"), "#c62828"))
UNSHAPED_FULL = 1e9


def colour(load: float) -> str:
    """The colour of a link carrying ``load`` (a fraction of its rate)."""
    for bound, c in LOAD_COLOURS:
        if load < bound:
            return c
    return LOAD_COLOURS[-1][1]


def link_rates(links: List[Dict[str, Any]], rows: List[Rate]) -> List[Dict[str, Any]]:
    """Per-link rates from per-interface ones. ``a -> b`` is what ``a`` sent
    on its end, or, where that end has no counters of its own (an OVS port in
    the host's namespace), what ``b`` received; drops of both ends add up."""
    by = {(r.node, r.intf): r for r in rows}
    out = []
    for l in links:
        ra, rb = by.get((l["a"], l["ia"])), by.get((l["b"], l["ib"]))
        if ra is None and rb is None:
            out.append({"id": l["id"], "known": False})
            continue
        if ra is not None:
            ab, ba, ab_p, ba_p = ra.tx_bps, ra.rx_bps, ra.tx_pps, ra.rx_pps
        else:
            ab, ba, ab_p, ba_p = rb.rx_bps, rb.tx_bps, rb.rx_pps, rb.tx_pps
        drops = (ra.drops if ra else 0) + (rb.drops if rb else 0)
        load = max(ab, ba) / (l["rate"] or UNSHAPED_FULL)
        out.append({"id": l["id"], "known": True, "a": l["a"], "b": l["b"],
                    "ab_bps": ab, "ba_bps": ba, "ab_pps": ab_p, "ba_pps": ba_p, "drops": drops,
                    "load": load, "colour": colour(load),
                    "lines": [f"→{l['b']} {format_rate(ab)}", f"→{l['a']} {format_rate(ba)}"]
                    + ([f"drops {drops}"] if drops else [])})
    return out


def payload(run: str, links: List[Dict[str, Any]], rows: List[Rate]) -> Dict[str, Any]:
    """One event: per-link and per-interface rates."""
    return {"run": run, "links": link_rates(links, rows),
            "interfaces": [{"node": r.node, "intf": r.intf, "rx_bps": r.rx_bps,
                            "tx_bps": r.tx_bps, "rx_pps": r.rx_pps, "tx_pps": r.tx_pps,
                            "drops": r.drops, "rx": format_rate(r.rx_bps),
                            "tx": format_rate(r.tx_bps)} for r in rows]}


def page(run: str, svg: Optional[str], interval: float) -> str:
    """The live page: the picture (if the lab wrote its topology) and a table."""
    import jinja2
    from markupsafe import Markup
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(_TEMPLATES), autoescape=True)
    # the SVG comes from Graphviz over validated node and interface names
    return env.get_template("watch.html.j2").render(
        run=run, svg=Markup(svg) if svg else None, interval=interval)


def load_topology(run: str) -> Optional[Any]:
    """The topology the lab ``run`` wrote into its work directory, or None
    (a lab started by an older nslab)."""
    from .clean import topology_path
    from .topo import Topology
    try:
        with open(topology_path(run)) as f:
            return Topology.from_dict(json.load(f))
    except FileNotFoundError:
        return None


class Watcher:
    """The sampler shared by every open page."""

    def __init__(self, run: str, interval: float) -> None:
        self.run, self.interval = run, interval
        self.nss = namespaces(run)
        topo = load_topology(run)
        self.links: List[Dict[str, Any]] = []
        self.svg: Optional[str] = None
        if topo is not None:
            from .draw import available, links, to_graph
            self.links = links(topo)
            if available():
                svg = to_graph(topo, spacious=True).pipe(format="svg").decode()
                self.svg = svg[svg.index("<svg"):]
        self.latest: Optional[Dict[str, Any]] = None
        self.seq = 0
        self.gone = False
        self.changed = asyncio.Condition()

    async def sample_forever(self) -> None:
        """Sample every interval until the lab goes; wake every page each time."""
        from .clean import read_journal, run_is_live
        loop = asyncio.get_running_loop()
        prev = await loop.run_in_executor(None, sample, self.nss)
        while not self.gone:
            await asyncio.sleep(self.interval)
            if not run_is_live(read_journal(self.run)):
                self.gone = True
                log.info("lab %s is gone", self.run)
            else:
                cur = await loop.run_in_executor(None, sample, self.nss)
                self.latest = payload(self.run, self.links, rates(prev, cur))
                prev = cur
            async with self.changed:
                self.seq += 1
                self.changed.notify_all()


def app(watcher: Watcher) -> Any:
    """The aiohttp application: ``/`` the page, ``/events`` the stream,
    ``/rates.json`` the latest sample."""
    from aiohttp import web

    async def index(request: web.Request) -> web.Response:
        return web.Response(text=page(watcher.run, watcher.svg, watcher.interval),
                            content_type="text/html")

    async def latest(request: web.Request) -> web.Response:
        return web.json_response(watcher.latest or {"run": watcher.run, "links": [],
                                                    "interfaces": []})

    async def events(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
        await resp.prepare(request)
        seen = -1
        while True:
            async with watcher.changed:
                await watcher.changed.wait_for(lambda: watcher.seq != seen)
                seen = watcher.seq
            if watcher.gone:
                await resp.write(b"event: gone\ndata: {}\n\n")
                return resp
            if watcher.latest is not None:
                await resp.write(f"data: {json.dumps(watcher.latest)}\n\n".encode())

    sampler = web.AppKey("sampler", asyncio.Task)

    async def start(application: web.Application) -> None:
        application[sampler] = asyncio.create_task(watcher.sample_forever())

    async def stop(application: web.Application) -> None:
        application[sampler].cancel()

    application = web.Application()
    application.router.add_get("/", index)
    application.router.add_get("/events", events)
    application.router.add_get("/rates.json", latest)
    application.on_startup.append(start)
    application.on_cleanup.append(stop)
    return application


def serve(run: Optional[str], interval: float, bind: str, port: int) -> None:
    """Serve the live page of ``run`` until Ctrl-C, or until the lab goes."""
    import socket

    from aiohttp import web
    run = find_run(run)
    try:
        sock = socket.create_server((bind, port), reuse_port=False)
    except OSError as exc:
        raise InputError(f"cannot listen on {bind}:{port}: {exc.strerror} "
                         "(choose another with --port)") from None
    watcher = Watcher(run, interval)
    host, bound_port = sock.getsockname()[:2]
    print(f"nslab watch {run}: http://{host}:{bound_port}/  (Ctrl-C to stop)", flush=True)

    async def main() -> None:
        runner = web.AppRunner(app(watcher), handle_signals=False, shutdown_timeout=1.0)
        await runner.setup()
        site = web.SockSite(runner, sock)
        await site.start()
        try:
            while not watcher.gone:
                await asyncio.sleep(0.2)
            await asyncio.sleep(0.5)  # pages get the last event
            print(f"lab {run} is gone", flush=True)
        finally:
            await runner.cleanup()

    asyncio.run(main())
