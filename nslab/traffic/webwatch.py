"""``nslab watch --web``: the topology picture with live per-link rates, in a browser.

One sampler reads the lab's counters every interval (the same one netlink
dump per namespace as the terminal view, whatever the number of open pages) and pushes the per-link rates to every page as server-sent
events (aiohttp). The page is the Graphviz picture of the lab's topology
(written by the lab into its work directory); a small script colours each link
by its load and writes its rates beside it. The server binds 127.0.0.1 unless
told otherwise.

The page is hardened against what a lab folder or another web site could do
with it: the picture is Graphviz's SVG re-serialised through an allow-list of
plain drawing elements and attributes (:func:`clean_svg`: no script, link,
event handler or foreign content can reach the page), the page runs only its
own script (a Content-Security-Policy with a per-response nonce), every request
must name the bound address in its ``Host`` header (so a DNS-rebinding page of
another site cannot read the lab's counters), and at most ``max_clients`` event
streams are served at once.

``/metrics`` (:mod:`nslab.traffic.watchmetrics`) gives the same sampler's readings to
Prometheus; ``nslab watch --metrics`` serves it alone, without the page.

The server stops within a second of SIGINT (Ctrl-C) or SIGTERM, whatever pages
and scrapers are connected: the signal ends every event stream, then the
server closes (a write that a stuck client never reads is cancelled after
:data:`SHUTDOWN_TIMEOUT`). A page that closes is not an error (a debug line).
"""
from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import os
import re
import secrets
import signal
import socket
import time
import xml.etree.ElementTree as ET
from typing import Any, Callable, Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple

from . import watchmetrics
from ..errors import InputError
from ..model.shaping import format_rate
from ..runtime.clean import read_topology as load_topology
from .linkset import RunTime, read_record
from .watch import Rate, find_run, namespaces, rates, sample
from ..runtime import clean
from ..store.draw import available, links, to_graph

#: What a sampler returns: ``(time.monotonic(), {node: counters})``, and
#: optionally each node's own reading time (:class:`nslab.traffic.watch.Sample`).
Sample = Tuple[Any, ...]

log = logging.getLogger(__name__)

_TEMPLATES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "templates")

#: Link colours by load: (upper bound of the fraction of the link's rate, colour).
#: An unshaped link counts 1 Gbit/s as full.
LOAD_COLOURS = ((0.001, "#9aa0a6"), (0.3, "#2e7d32"), (0.8, "#f9a825"), (float("inf"), "#c62828"))
UNSHAPED_FULL = 1e9

#: Event streams (``/events``, one per open page) served at once by default.
MAX_CLIENTS = 16
#: Seconds a stopping server waits for a request still being written (a client
#: that does not read) before cancelling it; event streams end at once.
SHUTDOWN_TIMEOUT = 0.5

SVG_NS = "http://www.w3.org/2000/svg"
#: What a Graphviz picture is made of: plain drawing elements (no ``script``,
#: ``a``, ``image``, ``use``, ``foreignObject``, ``style``, animation) ...
SVG_ELEMENTS = frozenset({"svg", "g", "title", "desc", "path", "polygon", "polyline", "ellipse",
                          "circle", "rect", "line", "text", "tspan", "defs", "linearGradient",
                          "radialGradient", "stop"})
#: ... and presentation attributes (no ``on*`` handler, no ``href``, no ``style``).
SVG_ATTRIBUTES = frozenset({
    "id", "class", "width", "height", "viewBox", "preserveAspectRatio", "transform", "points",
    "d", "x", "y", "x1", "y1", "x2", "y2", "cx", "cy", "r", "rx", "ry", "fx", "fy", "dx", "dy",
    "fill", "fill-opacity", "stroke", "stroke-width", "stroke-opacity", "stroke-dasharray",
    "stroke-linecap", "stroke-linejoin", "opacity", "text-anchor", "font-family", "font-size",
    "font-weight", "font-style", "text-decoration", "baseline-shift", "offset", "stop-color",
    "stop-opacity", "gradientUnits", "gradientTransform"})
#: ``url(...)`` is allowed only as a reference inside the picture (a gradient).
_URL_REF = re.compile(r"url\(#[a-z0-9_.-]+\)")


def colour(load: float) -> str:
    """The colour of a link carrying ``load`` (a fraction of its rate)."""
    for bound, c in LOAD_COLOURS:
        if load < bound:
            return c
    return LOAD_COLOURS[-1][1]


def _now(link: Dict[str, Any], changes: Mapping[str, RunTime]) -> Tuple[RunTime, float]:
    """What ``nslab link set`` changed on ``link``, and the rate its load is a
    share of: the rate set at run time, else the topology's, else 1 Gbit/s."""
    now = changes.get(link.get("name", ""), RunTime())
    return now, now.rate or link["rate"] or UNSHAPED_FULL


def link_rates(links: List[Dict[str, Any]], rows: List[Rate],
               changes: Optional[Mapping[str, RunTime]] = None) -> List[Dict[str, Any]]:
    """Per-link rates from per-interface ones. ``a -> b`` is what ``a`` sent
    on its end, or, where that end has no counters of its own (an OVS port in
    the host's namespace), what ``b`` received; drops of both ends add up.
    ``changes``: what ``nslab link set`` changed on each link (by name), said
    on the link (``set``, ``down``), its load taken of a rate set there."""
    by = {(r.node, r.intf): r for r in rows}
    changes = changes or {}
    out = []
    for l in links:
        now, full = _now(l, changes)
        said = {"set": now.describe(), "down": now.down} if not now.empty else {}
        ra, rb = by.get((l["a"], l["ia"])), by.get((l["b"], l["ib"]))
        if ra is not None:
            ab, ba, ab_p, ba_p = ra.tx_bps, ra.rx_bps, ra.tx_pps, ra.rx_pps
        elif rb is not None:
            ab, ba, ab_p, ba_p = rb.rx_bps, rb.tx_bps, rb.rx_pps, rb.tx_pps
        else:
            out.append({"id": l["id"], "known": False, **said})
            continue
        drops = (ra.drops if ra else 0) + (rb.drops if rb else 0)
        load = max(ab, ba) / full
        out.append({"id": l["id"], "known": True, "a": l["a"], "b": l["b"],
                    "ab_bps": ab, "ba_bps": ba, "ab_pps": ab_p, "ba_pps": ba_p, "drops": drops,
                    "load": load, "colour": colour(load),
                    "lines": [f"→{l['b']} {format_rate(ab)}", f"→{l['a']} {format_rate(ba)}"]
                    + ([f"drops {drops}"] if drops else [])
                    + ([f"set: {said['set']}"] if said else []), **said})
    return out


def payload(run: str, links: List[Dict[str, Any]], rows: List[Rate],
            changes: Optional[Mapping[str, RunTime]] = None) -> Dict[str, Any]:
    """One event: per-link and per-interface rates, and the links changed at
    run time (``changes``, by link name: ``nslab link set``). Each
    interface's row has the load and colour its link has on the picture (the
    busier way, as a share of the link's rate; an interface of no link's, of
    1 Gbit/s), so that the table reads as the legend says."""
    changes = changes or {}
    rate = {}
    for l in links:
        rate[(l["a"], l["ia"])] = rate[(l["b"], l["ib"])] = _now(l, changes)[1]
    out = []
    for r in rows:
        load = max(r.rx_bps, r.tx_bps) / rate.get((r.node, r.intf), UNSHAPED_FULL)
        out.append({"node": r.node, "intf": r.intf, "rx_bps": r.rx_bps, "tx_bps": r.tx_bps,
                    "rx_pps": r.rx_pps, "tx_pps": r.tx_pps, "drops": r.drops,
                    "rx": format_rate(r.rx_bps), "tx": format_rate(r.tx_bps),
                    "load": load, "colour": colour(load)})
    return {"run": run, "links": link_rates(links, rows, changes), "interfaces": out,
            "changes": [{"link": name, "set": now.describe(), "down": now.down}
                        for name, now in sorted(changes.items()) if not now.empty]}


class UnsafeSvgError(InputError):
    """A picture holds something other than plain drawing (a script, a link,
    an event handler, foreign content)."""


def clean_svg(svg: str) -> str:
    """``svg`` (Graphviz's output) re-serialised from its parsed elements,
    after checking each against :data:`SVG_ELEMENTS` and
    :data:`SVG_ATTRIBUTES`: what comes out is plain drawing and text, safe to
    inline in a page. Comments, processing instructions and a DOCTYPE are
    dropped; text and attribute values are escaped on the way out.

    Raises:
        UnsafeSvgError: an element or attribute outside the allow-lists, or a
            ``url(...)`` that points outside the picture.
    """
    start = svg.find("<svg")
    if start < 0:
        raise UnsafeSvgError("the picture is not SVG")
    if re.search(r"<!(?!--)", svg[start:]):  # a DOCTYPE, an entity, CDATA
        raise UnsafeSvgError("the picture declares a DOCTYPE, an entity or CDATA")
    try:
        root = ET.fromstring(svg[start:])
    except ET.ParseError as exc:
        raise UnsafeSvgError(f"the picture is not well-formed SVG ({exc})") from None
    for el in root.iter():
        ns, _, tag = el.tag.rpartition("}")
        if ns.lstrip("{") != SVG_NS or tag not in SVG_ELEMENTS:
            raise UnsafeSvgError(f"the picture holds a <{tag}> element")
        for name, value in el.attrib.items():
            if name not in SVG_ATTRIBUTES:
                raise UnsafeSvgError(f"the picture's <{tag}> has a {name!r} attribute")
            flat = _URL_REF.sub("", re.sub(r"\s", "", value.lower()))
            if any(bad in flat for bad in ("url(", "javascript:", "vbscript:", "data:")):
                raise UnsafeSvgError(f"the picture's <{tag}> {name}={value!r} is not plain")
        el.tag = tag  # written back in the default namespace, without a prefix
    root.set("xmlns", SVG_NS)
    return ET.tostring(root, encoding="unicode")


def _allowed_hosts(bind: str) -> Tuple[FrozenSet[Any], bool]:
    """The addresses (and whether ``localhost``) a request's ``Host`` may name
    for a server bound to ``bind``; an empty set for a wildcard bind, which
    takes any IP address but no other name."""
    addr = ipaddress.ip_address(bind)
    if addr.is_unspecified:
        return frozenset(), True
    if addr.is_loopback:
        return frozenset({addr, ipaddress.ip_address("127.0.0.1"),
                          ipaddress.ip_address("::1")}), True
    return frozenset({addr}), False


def host_allowed(host: Optional[str], bind: str) -> bool:
    """Does a request's ``Host`` header (``name``, ``name:port``, ``[v6]:port``)
    name the server bound to ``bind``? A loopback bind answers to
    ``localhost``, ``127.0.0.1`` and ``[::1]``; a wildcard bind (``0.0.0.0``,
    ``::``) to any IP address and ``localhost``; another bind to its own
    address only. Any other name (a DNS-rebinding page's own) is refused."""
    if not host:
        return False
    host = host.strip().lower()
    if host.startswith("["):
        name, sep, rest = host[1:].partition("]")
        if not sep or (rest and not re.fullmatch(r":\d{1,5}", rest)):
            return False
    else:
        name, _, port = host.partition(":")
        if ":" in port or (port and not port.isdigit()):
            return False
    name = name.rstrip(".")
    addrs, localhost = _allowed_hosts(bind)
    if name == "localhost":
        return localhost
    try:
        addr = ipaddress.ip_address(name)
    except ValueError:
        return False
    return addr in addrs if addrs else True


def page_html(run: str, svg: Optional[str], interval: float, nonce: str = "") -> str:
    """The live page: the picture (if the lab wrote its topology) and a table;
    its script carries ``nonce`` (see the Content-Security-Policy of
    :func:`app`)."""
    import jinja2
    from markupsafe import Markup
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(_TEMPLATES), autoescape=True)
    # the SVG has been through clean_svg: plain drawing, every text escaped
    return env.get_template("watch.html.j2").render(
        run=run, svg=Markup(svg) if svg else None, interval=interval, nonce=nonce)


def csp(nonce: str) -> str:
    """The live page's Content-Security-Policy: its own script (by ``nonce``),
    its own event stream, inline styles; nothing else."""
    return (f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'unsafe-inline'; "
            "connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; "
            "frame-ancestors 'none'")


class Watcher:
    """The sampler shared by every open page and every scraper: one reading of
    the lab's counters per interval, whatever the number of clients.

    Args:
        run: the lab's run id.
        interval: seconds between two readings.
        picture: load the lab's topology and draw it (the page); False for
            ``/metrics`` alone.
        sampler: reads ``{node: namespace}`` once (default
            :func:`nslab.traffic.watch.sample`: one netlink dump per namespace).
        nss: ``{node: namespace}`` (default: the run's namespaces).
        live: whether the lab is still up (default: its run journal says so).
        changes: reads the links' run-time changes, by link name (default:
            the lab's record of ``nslab link set``; read with each sample).
    """

    def __init__(self, run: str, interval: float, *, picture: bool = True,
                 sampler: Optional[Callable[[Dict[str, str]], Sample]] = None,
                 nss: Optional[Dict[str, str]] = None,
                 live: Optional[Callable[[], bool]] = None,
                 changes: Optional[Callable[[str], Mapping[str, RunTime]]] = None) -> None:
        self.run, self.interval = run, interval
        self.read_changes = changes or read_record
        self.nss = namespaces(run) if nss is None else nss
        self.sampler = sampler or sample
        self.live = live or self._journal_says_live
        topo = load_topology(run) if picture else None
        self.links: List[Dict[str, Any]] = []
        self.svg: Optional[str] = None
        if topo is not None:
            self.links = links(topo)
            if available():
                try:
                    self.svg = clean_svg(to_graph(topo, spacious=True).pipe(format="svg")
                                         .decode())
                except UnsafeSvgError as exc:
                    log.warning("lab %s: no picture on the page: %s", run, exc)
        self.latest: Optional[Dict[str, Any]] = None
        #: The latest counters, for ``/metrics``.
        self.reading: Optional[watchmetrics.Reading] = None
        self.seq = 0
        self.samples = 0  # readings taken
        self.samplers = 0  # sample loops running: one while the server runs
        self.streams = 0  # event streams open
        self.gone = False
        self.stopping = False
        self.changed = asyncio.Condition()

    def _journal_says_live(self) -> bool:
        return clean.run_is_live(clean.read_journal(self.run))

    def _sample(self) -> Tuple[Sample, Mapping[str, RunTime]]:
        """One reading of the counters, and the links' run-time changes."""
        s = self.sampler(self.nss)
        try:
            changes = self.read_changes(self.run)
        except (OSError, ValueError) as exc:
            log.warning("lab %s: its links' run-time changes unread: %s", self.run, exc)
            changes = {}
        return s, changes

    def _keep(self, s: Sample, changes: Optional[Mapping[str, RunTime]] = None) -> None:
        # the reading's wall-clock times, from the sampler's monotonic ones: the
        # sweep's, and each node's own when the sampler says (watch.Sample)
        shift = time.time() - time.monotonic()
        nodes = s[2] if len(s) > 2 else {}
        self.reading = watchmetrics.Reading(s[0] + shift, s[1],
                                            {n: t + shift for n, t in nodes.items()},
                                            dict(changes or {}))
        self.samples += 1

    async def sample_forever(self) -> None:
        """Sample every interval until the lab goes or the server stops; wake
        every page each time."""
        loop = asyncio.get_running_loop()
        self.samplers += 1
        try:
            prev, changes = await loop.run_in_executor(None, self._sample)
            self._keep(prev, changes)
            while not (self.gone or self.stopping):
                await asyncio.sleep(self.interval)
                if not self.live():
                    self.gone = True
                    log.info("lab %s is gone", self.run)
                else:
                    cur, changes = await loop.run_in_executor(None, self._sample)
                    self.latest = payload(self.run, self.links, rates(prev, cur), changes)
                    self._keep(cur, changes)
                    prev = cur
                async with self.changed:
                    self.seq += 1
                    self.changed.notify_all()
        finally:
            self.samplers -= 1

    async def stop(self) -> None:
        """End every event stream now: the server is stopping."""
        self.stopping = True
        async with self.changed:
            self.changed.notify_all()


def app(watcher: Watcher, bind: str = "127.0.0.1", max_clients: int = MAX_CLIENTS,
        page: bool = True) -> Any:
    """The aiohttp application: ``/`` the page, ``/events`` the stream,
    ``/rates.json`` the latest sample, ``/metrics`` the counters for
    Prometheus (:mod:`nslab.traffic.watchmetrics`); with ``page`` False, ``/metrics``
    alone.

    Args:
        watcher: the sampler.
        bind: the address the server listens on: a request whose ``Host``
            header names anything else gets 421 (see :func:`host_allowed`).
        max_clients: event streams served at once; one more gets 503.
        page: serve the page (``/``, ``/events``, ``/rates.json``) too.
    """
    from aiohttp import web

    if max_clients < 1:
        raise InputError(f"max_clients {max_clients}: must be at least 1")
    registry = watchmetrics.registry(watcher)

    @web.middleware
    async def only_our_host(request: web.Request, handler: Any) -> web.StreamResponse:
        if not host_allowed(request.headers.get("Host"), bind):
            return web.Response(status=421, text="nslab watch: this page answers only to the "
                                                 f"address it listens on ({bind})\n")
        return await handler(request)

    async def plain_headers(request: web.Request, resp: web.StreamResponse) -> None:
        resp.headers.setdefault("X-Content-Type-Options", "nosniff")
        resp.headers.setdefault("Referrer-Policy", "no-referrer")

    async def index(request: web.Request) -> web.Response:
        nonce = secrets.token_urlsafe(16)
        return web.Response(text=page_html(watcher.run, watcher.svg, watcher.interval, nonce),
                            content_type="text/html",
                            headers={"Content-Security-Policy": csp(nonce),
                                     "X-Frame-Options": "DENY", "Cache-Control": "no-store"})

    async def latest(request: web.Request) -> web.Response:
        return web.json_response(watcher.latest or {"run": watcher.run, "links": [],
                                                    "interfaces": []})

    async def metrics(request: web.Request) -> web.Response:
        # the sampler's latest reading, formatted: a scrape runs no tool
        body, content_type = watchmetrics.exposition(registry, request.headers.get("Accept"))
        return web.Response(body=body, headers={"Content-Type": content_type,
                                                "Cache-Control": "no-store"})

    async def events(request: web.Request) -> web.StreamResponse:
        if watcher.streams >= max_clients:
            return web.Response(status=503, headers={"Retry-After": "10"},
                                text=f"nslab watch: {max_clients} pages are open already; "
                                     "close one\n")
        watcher.streams += 1
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
        try:
            await resp.prepare(request)
            seen = -1
            while True:
                async with watcher.changed:
                    await watcher.changed.wait_for(
                        lambda: watcher.seq != seen or watcher.stopping)
                    seen = watcher.seq
                if watcher.stopping:  # the server is stopping: end the stream now
                    return resp
                if watcher.gone:
                    await resp.write(b"event: gone\ndata: {}\n\n")
                    return resp
                if watcher.latest is not None:
                    await resp.write(f"data: {json.dumps(watcher.latest)}\n\n".encode())
        except ConnectionError:  # aiohttp's ClientConnectionResetError is one
            log.debug("lab %s: a page closed its event stream", watcher.run)
            return resp
        finally:
            watcher.streams -= 1

    sampler = web.AppKey("sampler", asyncio.Task)

    async def start(application: web.Application) -> None:
        application[sampler] = asyncio.create_task(watcher.sample_forever())

    async def end_streams(application: web.Application) -> None:
        # before aiohttp waits for the handlers still running: streams end now
        await watcher.stop()

    async def stop(application: web.Application) -> None:
        task = application[sampler]
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    application = web.Application(middlewares=[only_our_host])
    if page:
        application.router.add_get("/", index)
        application.router.add_get("/events", events)
        application.router.add_get("/rates.json", latest)
    application.router.add_get("/metrics", metrics)
    application.on_response_prepare.append(plain_headers)
    application.on_startup.append(start)
    application.on_shutdown.append(end_streams)
    application.on_cleanup.append(stop)
    return application


def listen(bind: str, port: int) -> socket.socket:
    """A listening socket on ``bind``:``port`` (0: any free port).

    Raises:
        InputError: the address cannot be bound (in use, not this machine's).
    """
    try:
        return socket.create_server((bind, port), reuse_port=False)
    except OSError as exc:
        raise InputError(f"cannot listen on {bind}:{port}: {exc.strerror} "
                         "(choose another with --port)") from None


def serve(run: Optional[str], interval: float, bind: str, port: int,
          max_clients: int = MAX_CLIENTS, page: bool = True) -> None:
    """Serve the live page of ``run`` (and ``/metrics``; with ``page`` False,
    ``/metrics`` alone) until SIGINT or SIGTERM, or until the lab goes;
    ``max_clients`` pages at once (see :func:`app`)."""
    run = find_run(run)
    sock = listen(bind, port)
    try:
        watcher = Watcher(run, interval, picture=page)
    except BaseException:
        sock.close()
        raise
    serve_watcher(watcher, sock, bind, max_clients, page)


def serve_watcher(watcher: Watcher, sock: socket.socket, bind: str,
                  max_clients: int = MAX_CLIENTS, page: bool = True) -> None:
    """Serve ``watcher`` on the listening ``sock`` until SIGINT or SIGTERM, or
    until the lab goes; prints the address first."""
    host, bound_port = sock.getsockname()[:2]
    host = f"[{host}]" if ":" in host else host
    url = f"http://{host}:{bound_port}/" + ("" if page else "metrics")
    print(f"nslab watch {watcher.run}: {url}  (Ctrl-C to stop)", flush=True)
    asyncio.run(run_server(watcher, sock, bind, max_clients, page,
                           signals=(signal.SIGINT, signal.SIGTERM, signal.SIGHUP)))


async def run_server(watcher: Watcher, sock: socket.socket, bind: str,
                     max_clients: int = MAX_CLIENTS, page: bool = True,
                     stop: Optional[asyncio.Event] = None,
                     signals: Sequence[int] = ()) -> None:
    """Serve until ``stop`` is set (by one of ``signals``, if given) or the lab
    goes, then stop within about a second whatever clients are connected.

    The signals are handled by the event loop (also one that was ignored when
    the process started, as a background job's SIGINT is): the first one sets
    ``stop``; while the server closes they have their former handlers back (a
    second Ctrl-C interrupts as it did before).
    """
    from aiohttp import web
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    runner = web.AppRunner(app(watcher, bind, max_clients, page), handle_signals=False,
                           shutdown_timeout=SHUTDOWN_TIMEOUT)
    before: Dict[int, Any] = {}
    try:
        for sig in signals:  # each one given back in `finally`, however far this got
            before[sig] = signal.getsignal(sig)
            loop.add_signal_handler(sig, stop.set)
        await runner.setup()
        await web.SockSite(runner, sock).start()
        while not (watcher.gone or stop.is_set()):
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.2)
        if watcher.gone and not stop.is_set():
            await asyncio.sleep(0.5)  # pages get the last event
            print(f"lab {watcher.run} is gone", flush=True)
    finally:
        for sig, handler in before.items():
            loop.remove_signal_handler(sig)
            if handler is not None:
                signal.signal(sig, handler)
        t0 = time.monotonic()
        await watcher.stop()
        await runner.cleanup()
        log.debug("lab %s: server stopped in %.2f s", watcher.run, time.monotonic() - t0)
