"""Running a study file on a lab: per trial, the sweep's sysctls, the traffic,
the events on their timeline, the samplers (routes, CPU, interface bytes);
then everything the events changed is put back and the lab waits until its
routes are as they were before the trial.

Every action is an argv on a node (no shell), on names the loader checked.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import replace
from typing import Any, Callable, Dict, List, Optional, Tuple

from nslab.frr.options import bgp_of
from nslab.errors import LabError, ReadinessError
from nslab.frr.options import BgpOptions
from nslab.runtime.node import LabLike, LabNode
from nslab.runtime.proc import run, wait_path, where_is
from nslab.safeio import read_bytes, write_atomic

from . import analysis
from .trialcap import TrialCaptures
from .model import (Convergence, Cpu, DaemonCont, Delivery, Pktgen, DaemonKill, DaemonStart, DaemonStop,
                    Goodput, IperfTcp, IperfUdp, Latency, LinkBlackhole, LinkDown, LinkNetem,
                    LinkRate, LinkRestore, LinkUp, Links, Outage, Probe, SetSysctl)
from .spec import Loaded, address_of, link_ends, metric_name
from .analysis import late_events, late_probe
from nslab.run.study import Measured

log = logging.getLogger(__name__)

BASE_PORT = 5201
#: how often routes are read during a trial (s)
ROUTE_POLL_S = 0.02


class FileRunner:
    """One lab of a study file: ``setup``, ``measure(point)``, ``finish``."""

    def __init__(self, lab: LabLike, loaded: Loaded, store: Any) -> None:
        self.lab, self.loaded, self.spec, self.store = lab, loaded, loaded.spec, store
        self.topo = lab.topology
        self.baseline: Dict[str, Dict[str, int]] = {}
        #: the BGP options of every routing node, in the topology's order
        self.bgp: Dict[str, BgpOptions] = {
            n: bgp for n, bgp in ((n, bgp_of(node)) for n, node in self.topo.nodes.items())
            if bgp is not None}
        self.bgp_nodes = list(self.bgp)
        self._killed: Dict[str, int] = {}
        self.captures = TrialCaptures(lab, loaded.spec, store)

    # -- the lab's resting state ---------------------------------------------------------
    def _routes(self) -> Dict[str, Dict[str, int]]:
        """BGP routes of every routing node: prefix -> nexthops."""
        from nslab.runtime.proc import nexthop_count
        out = {}
        for n in self.bgp_nodes:
            res = run(["ip", "-n", _netns(self.lab[n]), "-j", "route", "show", "proto", "bgp"],
                      check=False)
            table = json.loads(res.stdout or "[]") if res.ok else []
            out[n] = {r["dst"]: nexthop_count(r) for r in table}
        return out

    def _bfd_down(self) -> List[str]:
        from nslab.frr.router import frr_of
        if not self.bgp_nodes:
            return []
        down = []
        for n, r in frr_of(self.lab).routers.items():
            bgp = bgp_of(self.topo.nodes[n])
            if bgp is None or bgp.bfd is None:
                continue
            try:
                peers = json.loads(r.vtysh("show bfd peers json") or "[]")
            except ValueError:
                peers = []
            down += [f"{n}:{p.get('peer')}" for p in peers if p.get("status") != "up"]
            if not peers:
                down.append(f"{n}: no BFD peers yet")
        return down

    def wait_rest(self, timeout: float = 90.0, stable: float = 1.0) -> float:
        """Wait until the routes are the baseline's (or, before there is one,
        every routing node has a route to every other's networks and nothing
        changed for ``stable`` s) and every BFD session is up."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        want_nets = {n: {str(p) for m in self.bgp_nodes if m != n
                         for p in self.bgp[m].networks} for n in self.bgp_nodes}
        last, since = None, time.monotonic()
        while True:
            now = self._routes()
            if now != last:
                last, since = now, time.monotonic()
            if self.baseline:
                ok = now == self.baseline
            else:
                ok = (all(want_nets[n] <= {_cidr(p) for p in now[n]} for n in self.bgp_nodes)
                      and time.monotonic() - since >= stable)
            if ok and not self._bfd_down():
                return time.monotonic() - t0
            if time.monotonic() > deadline:
                raise ReadinessError(
                    f"routes did not return to their state within {timeout:.0f} s: "
                    f"{json.dumps(now)[:300]}; BFD down: {self._bfd_down()[:4]}")
            time.sleep(0.1)

    def setup(self) -> Dict[str, Any]:
        took = self.wait_rest() if self.bgp_nodes else 0.0
        self.baseline = self._routes()
        out: Dict[str, Any] = {"converged_s": round(took, 2), "routes": self.baseline,
                               "file": self.loaded.path}
        checks = self.run_checks()
        if checks is not None:
            out["checks"] = checks
        return out

    def run_checks(self) -> Optional[List[Dict[str, Any]]]:
        """The file's ``checks:`` on this lab, before its first trial (None:
        it has none, or only a classroom's ``stages:``). A check that fails
        or cannot run stops the study in one line naming it and what it saw:
        a lab that is not what its file says measures nothing."""
        suite = self.loaded.checks
        if suite is None or suite.staged:
            return None
        from nslab.traffic.checkrun import LabView, run_stage
        results = run_stage(LabView.of(self.lab.run_id), suite.stage(1))
        for r in results:
            log.info("check %d %s: %s (%s)", r.number, r.label, r.status, r.seen)
        bad = [r for r in results if r.status != "pass"]
        if bad:
            r = bad[0]
            said = r.diff[0] if r.diff else f"expected {r.expected}, saw {r.seen}"
            more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
            raise LabError(f"{self.loaded.path}: check {r.number} ({r.label}) "
                           f"{'failed' if r.status == 'fail' else 'could not run'}: "
                           f"{said}{more}; nothing measured (nslab check "
                           f"{self.lab.run_id} --checks {self.loaded.path} shows them all "
                           "while the lab is up)")
        return [r.model_dump() for r in results]

    # -- one trial ------------------------------------------------------------------------
    def measure(self, point: Dict[str, Any]) -> Measured:
        return Measured(*self._measure_point(point))

    def _measure_point(self, point: Dict[str, Any]) -> Tuple[Dict[str, Any], List[str], str]:
        tag = raw_tag(point)
        captures = self.captures.start(point, tag)  # those the file asks of this trial
        try:
            m, raw, summary = self._measure(point, tag, captures)
        finally:
            captures.stop()  # once: a trial that failed keeps what its captures caught
        return m, raw, summary

    def _measure(self, point: Dict[str, Any], tag: str, captures: Any
                 ) -> Tuple[Dict[str, Any], List[str], str]:
        self._set_sweep_sysctls(point)
        events = self._events(point)
        servers: Dict[str, Any] = {}
        try:
            self._start_receivers(tag, servers)
        except ReadinessError as e:
            ended = any(p.popen.poll() is not None for p in servers.values())
            _stop_each(servers)
            if ended:
                raise  # one ended: what it was told to do fails, and would again
            return _not_started(str(e))
        undo: List[Callable[[], None]] = []
        samplers = _Samplers(self)
        duration = float(self.spec.duration)
        t0, t0_wall = time.monotonic(), time.time()
        clients = self._start_senders(duration)
        started = time.monotonic() - t0  # each sender's own clock starts about here
        samplers.start(t0)
        done: List[Dict[str, Any]] = []
        try:
            for at, ev in events:
                delay = t0 + at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                begun = time.monotonic() - t0
                target, switch = self._apply(ev, undo)
                done.append({"do": ev.do, "target": target, "at": at,
                             "begun_at": round(begun, 4),
                             "done_at": round(time.monotonic() - t0, 4),
                             **({"switch": switch} if switch is not None else {})})
            outputs = {fid: p.wait(timeout=duration + 60) for fid, p in clients.items()}
        finally:
            samplers.stop()
            for fn in reversed(undo):
                try:
                    fn()
                except Exception as exc:  # noqa: BLE001 - undo all, then complain
                    log.warning("undoing an event: %s", exc)
        time.sleep(0.2)  # the last probes in flight
        cap_raw, m_caps = captures.stop()
        rec_out = {fid: _finish(p) for fid, p in servers.items()}
        raw, m, invalid = self._collect(tag, outputs, rec_out, samplers, done, started, t0_wall)
        raw += cap_raw
        if m_caps:
            m["captures"] = m_caps
        if self.bgp_nodes:
            back = self.wait_rest()
            log.info("routes back %.2f s after the trial", back)
        time.sleep(self.spec.settle)
        summary = ", ".join(f"{k} {_short(v)}" for k, v in list(m["values"].items())[:4])
        if invalid:
            summary += f" (invalid: {'; '.join(invalid)})"
        m["invalid"] = invalid
        return m, raw, summary

    def _set_sweep_sysctls(self, point: Dict[str, Any]) -> None:
        by_node: Dict[str, Dict[str, Any]] = {}
        for k, v in point.items():
            if k.startswith("sysctl."):
                _, node, key = k.split(".", 2)
                by_node.setdefault(node, {})[key] = v
        for node, values in by_node.items():
            self.lab[node].set_sysctls(values)

    def _events(self, point: Dict[str, Any]) -> List[Tuple[float, Any]]:
        out = []
        for e in self.spec.events:
            if not analysis.matches(point, e.when):
                continue
            at = float(point.get(f"events.{e.id}.at", e.at)) if e.id else e.at
            out.append((at, e))
        return sorted(out, key=lambda ae: ae[0])

    def _addr(self, flow: Any) -> str:
        return str(flow.address) if flow.address else address_of(self.topo, flow.dst)  # type: ignore[return-value]

    def _start_receivers(self, tag: str, procs: Dict[str, Any]) -> None:
        """Start each flow's receiver into ``procs`` (by flow id; a probe's
        as ``probe:<id>``) and wait until it is ready; ReadinessError if one
        is not, ``procs`` then holding those started."""
        from nslab.traffic.iperf import server_argv, wait_listening
        for i, f in enumerate(self.spec.traffic):
            port = BASE_PORT + i
            node = self.lab[f.dst]
            if isinstance(f, (IperfTcp, IperfUdp)):
                argv = server_argv(udp=isinstance(f, IperfUdp), port=port, bind=self._addr(f),
                                   enhanced=False, extra=["-i", "1"])
                procs[f.id] = node.popen(argv, name=f"iperf-server-{f.id}")
                wait_listening(node, port=port, udp=isinstance(f, IperfUdp))
            elif isinstance(f, Pktgen):
                from nslab.traffic.pktgen import pktgen_path
                argv = [pktgen_path(), "recv", "--port", str(port), "--duration",
                        f"{self.spec.duration + 1:g}"]
                procs["probe:" + f.id] = node.popen(argv, name=f"pktgen-sink-{f.id}")
                if "ready" not in procs["probe:" + f.id].readline():
                    # it wrote something else, or ended: no wait for a CPU
                    raise LabError(f"the pktgen sink of {f.id} did not start: "
                                   f"{where_is(procs['probe:' + f.id])}")
            elif isinstance(f, Probe):
                out = self.store.raw_path(f"{tag}-{f.id}-arrivals.txt")
                ready = out + ".ready"
                argv = [sys.executable, "-I", "-m", "nslab.traffic.probe", "recv", "--bind", self._addr(f),
                        "--port", str(port), "--duration", f"{self.spec.duration + RECV_SPARE_S:g}",
                        "--out", out, "--ready", ready]
                procs["probe:" + f.id] = node.popen(argv, name=f"probe-recv-{f.id}")
                try:
                    wait_path(ready, 10, f"the probe receiver of {f.id}")
                except ReadinessError as e:
                    raise ReadinessError(f"{e}: {where_is(procs['probe:' + f.id])}") from None
                os.unlink(ready)

    def _start_senders(self, duration: float) -> Dict[str, Any]:
        from nslab.traffic.iperf import client_argv
        procs = {}
        for i, f in enumerate(self.spec.traffic):
            port = BASE_PORT + i
            node = self.lab[f.src]
            if isinstance(f, IperfTcp):
                argv = client_argv(self._addr(f), time=duration, parallel=f.streams, port=port,
                                   mss=f.mss, cc=f.cc, rate=str(f.rate) if f.rate else None,
                                   interval=1)
            elif isinstance(f, IperfUdp):
                argv = client_argv(self._addr(f), time=duration, parallel=f.streams, udp=True,
                                   rate=str(f.rate), length=f.length, port=port, interval=1)
            elif isinstance(f, Probe):
                argv = [sys.executable, "-I", "-m", "nslab.traffic.probe", "send", "--to", self._addr(f),
                        "--port", str(port), "--sport", str(port), "--rate", f"{f.rate:g}",
                        "--duration", f"{duration:g}"]
            elif isinstance(f, Pktgen):
                from nslab.traffic.pktgen import send_argv
                count = f.count or int(round(f.rate * duration))
                # The count ends the flow; the duration is only a cap. Its last
                # frame is due 1/rate before the duration ends, so a sender
                # 1 ms late at 1,000 fps stopped at 3,999 of 4,000 (a CI run
                # here): it gets half a second more (the sink listens 1 s more).
                argv = send_argv(self._addr(f), port, f.size, f.rate, duration + 0.5, count)
            else:
                argv = ["ping", "-n", "-D", "-i", f"{f.interval:g}", "-w", f"{duration:g}",
                        self._addr(f)]
            procs[f.id] = node.popen(argv, name=f"{f.kind}-{f.id}")
        return procs

    # -- events -------------------------------------------------------------------------
    def _apply(self, ev: Any, undo: List[Callable[[], None]]) -> Tuple[str, Optional[bool]]:
        """Apply ``ev``: its target, and for a link event whether an end of
        the link is a switch (the nodes on its other ports see no carrier
        change; :func:`.analysis.untimed`)."""
        if isinstance(ev, SetSysctl):
            node = self.lab[ev.node]
            before = {k: node.read_sysctl(k) for k in ev.set}
            node.set_sysctls(dict(ev.set))
            undo.append(lambda: node.set_sysctls(before))
            return ev.node, None
        if hasattr(ev, "daemon"):
            return self._daemon(ev, undo), None
        return self._link(ev, undo)

    def _daemon(self, ev: Any, undo: List[Callable[[], None]]) -> str:
        """Signal or restart a daemon. Signals go only to the process nslab
        started (its start time and NSLAB_RUN tag checked), never to a pid read
        from FRR's pid file, which the frr user can write."""
        from nslab.frr.router import frr_of
        node = ev.node or self._path(ev.path_of)[1][0]
        d = frr_of(self.lab).routers[node].daemon(ev.daemon)
        target = f"{node}/{ev.daemon}"

        def restart() -> None:
            if self._killed.pop(target, None) is not None:
                d.reap()
                d.start()
        if isinstance(ev, DaemonStart):
            restart()
        elif isinstance(ev, DaemonKill):
            self._killed[target] = d.signal(signal.SIGKILL)
            undo.append(restart)
        elif isinstance(ev, DaemonStop):
            pid = d.signal(signal.SIGSTOP)

            def cont() -> None:
                if d.pid() == pid:  # the process it stopped, not a successor
                    d.signal(signal.SIGCONT)
            undo.append(cont)
        elif isinstance(ev, DaemonCont):
            d.signal(signal.SIGCONT)
        return target

    def _path(self, flow_id: str) -> Tuple[Tuple[str, str], Tuple[str, str]]:
        """The first link a probe flow takes now: ``((src, dev), (next node, dev))``."""
        i, f = next((i, f) for i, f in enumerate(self.spec.traffic) if f.id == flow_id)
        port = str(BASE_PORT + i)
        res = self.lab[f.src].run(["ip", "-j", "route", "get", self._addr(f), "ipproto", "udp",
                                   "sport", port, "dport", port])
        dev = json.loads(res.stdout)[0]["dev"]
        for _, na, ia, nb, ib in self.topo.interfaces():
            if (na, ia) == (f.src, dev):
                return (na, ia), (nb, ib)
            if (nb, ib) == (f.src, dev):
                return (nb, ib), (na, ia)
        raise LabError(f"{f.src}: the probe {flow_id} leaves by {dev}, which is no lab link")

    def _ends(self, ev: Any) -> Tuple[List[Tuple[Any, str]], bool]:
        """The link's ends in a namespace, and whether either end is a switch."""
        ends = self._path(ev.path_of) if ev.path_of else link_ends(self.topo, *ev.link)
        assert ends is not None  # checked when the file was loaded
        switch = any(self.topo.nodes[n].is_switch for n, _ in ends)
        return [(self.lab[n], i) for n, i in ends if self.lab[n].netns is not None], switch

    def _link(self, ev: Any, undo: List[Callable[[], None]]) -> Tuple[str, bool]:
        ends, switch = self._ends(ev)
        target = "-".join(f"{n.name}:{dev}" for n, dev in ends)
        if isinstance(ev, LinkDown):
            node, dev = ends[0]
            node.run(["ip", "link", "set", "dev", dev, "down"])
            undo.append(lambda: node.run(["ip", "link", "set", "dev", dev, "up"]))
        elif isinstance(ev, LinkUp):
            _each(ends, lambda node, dev: node.run(["ip", "link", "set", "dev", dev, "up"]))
        else:
            def restore() -> None:
                _each(ends, lambda node, dev: self._reshape(node, dev, None))
            # registered first: an end done before the other failed is undone too
            undo.append(restore)
            if isinstance(ev, LinkBlackhole):
                _each(ends, lambda node, dev: node.run(
                    ["tc", "qdisc", "replace", "dev", dev, "root", "pfifo", "limit", "0"]))
            elif isinstance(ev, (LinkRate, LinkNetem)):
                _each(ends, lambda node, dev: self._reshape(node, dev, ev))
            elif isinstance(ev, LinkRestore):
                _each(ends, lambda node, dev: self._reshape(node, dev, None))
        return target, switch

    def _reshape(self, node: LabNode, dev: str, ev: Any) -> None:
        """The topology's shaping of this link, changed by ``ev`` (rate or netem)."""

        from nslab.model.render import text
        from nslab.model.shaping import Shaping
        link = next(l for l, na, ia, nb, ib in self.topo.interfaces()
                    if (na, ia) == (node.name, dev) or (nb, ib) == (node.name, dev))
        base = link.shaping or Shaping()
        if isinstance(ev, LinkRate):
            base = replace(base, rate=int(ev.rate))
        elif isinstance(ev, LinkNetem):
            base = replace(base, delay_ms=ev.delay or 0.0, jitter_ms=ev.jitter or 0.0,
                           loss_pct=ev.loss or 0.0)
        node.run(["tc", "qdisc", "del", "dev", dev, "root"], check=False)
        if not base.empty:
            node.run(["tc", "-batch", "-"], input=text(base.tc_batch(dev)))

    # -- results ------------------------------------------------------------------------
    def _collect(self, tag: str, outputs: Dict[str, Any], receivers: Dict[str, Any],
                 samplers: "_Samplers", done: List[Dict[str, Any]], started: float = 0.0,
                 t0_wall: Optional[float] = None
                 ) -> Tuple[List[str], Dict[str, Any], List[str]]:
        from nslab.traffic.iperf import parse
        from nslab.traffic.probe import outage, parse_arrivals, parse_sent
        raw: List[str] = []
        invalid: List[str] = []
        # convergence counts from just before the first event was applied (a
        # harness kept off the CPU after applying it cannot make a route's
        # change look quicker: analysis.RAISED_BY_A_BUSY_HOST)
        first_event = min((d["begun_at"] for d in done), default=None)
        flows: Dict[str, Dict[str, Any]] = {}
        duration = float(self.spec.duration)
        for f in self.spec.traffic:
            res = outputs[f.id]
            path = self.store.raw_path(f"{tag}-{f.id}.txt")
            write_atomic(path, res.stdout + ("\n# stderr\n" + res.stderr if res.stderr else ""))
            raw.append(path)
            if isinstance(f, (IperfTcp, IperfUdp)):
                # goodput is what the receiver got: a TCP sender's first second
                # also counts what filled its socket buffer (measured: 224 Mbit/s
                # "sent" through a 200 Mbit/s shaper)
                srv = receivers[f.id]
                spath = self.store.raw_path(f"{tag}-{f.id}-server.txt")
                write_atomic(spath, srv.stdout)
                raw.append(spath)
                flows[f.id] = {"series": analysis.iperf_series(parse(srv.stdout))}
            elif isinstance(f, Probe):
                apath = self.store.raw_path(f"{tag}-{f.id}-arrivals.txt")
                raw.append(apath)
                sent, began = parse_sent(res.stdout)
                invalid += late_probe(f.id, None if began is None or t0_wall is None
                                      else began - t0_wall, first_event, f.rate)
                # the receiver's file: a regular file, at most ~64 bytes a probe
                # (duplicates included) of what the flow could send in the trial
                text = read_bytes(apath, int(64 * f.rate * duration) + (1 << 20)).decode(
                    "utf-8", "replace")
                o = outage(parse_arrivals(text), sent, f.rate)
                flows[f.id] = {"outage": o}
                if not sent:
                    invalid.append(f"probe {f.id} sent nothing")
            elif isinstance(f, Pktgen):
                spath = self.store.raw_path(f"{tag}-{f.id}-sink.txt")
                write_atomic(spath, receivers["probe:" + f.id].stdout)
                raw.append(spath)
                d = analysis.pktgen_delivery(res.stdout, receivers["probe:" + f.id].stdout,
                                             duration)
                flows[f.id] = {"delivery": d}
                if d["sent"] is None or d["received"] is None:
                    invalid.append(f"pktgen {f.id}: no report from the sender or the sink")
            else:
                flows[f.id] = {"latency": analysis.ping_latency(res.stdout)}
            if isinstance(f, (IperfTcp, IperfUdp)) and not flows[f.id]["series"]:
                invalid.append(f"{f.id}: iperf reported no intervals")
        values: Dict[str, Optional[float]] = {}
        series: Dict[str, List[float]] = {}
        links: Dict[str, Dict[str, int]] = {}
        invalid += late_events(done, started + duration)
        for m in self.spec.metrics:
            name = metric_name(m)
            if isinstance(m, Goodput):
                # Mbit/s per second of the traffic (iperf may report a drain after it)
                s = [bps / 1e6 for bps in flows[m.flow]["series"]][:int(round(duration))]
                series[name] = s
                values[name] = analysis.window_mean(s, m.window)
            elif isinstance(m, Outage):
                o = flows[m.flow]["outage"]
                values.update({f"{name}.gap_ms": o.gap_ms, f"{name}.lost": float(o.lost),
                               f"{name}.loss_pct": o.loss_pct})
            elif isinstance(m, Delivery):
                values.update({f"{name}.{k}": v for k, v in flows[m.flow]["delivery"].items()})
            elif isinstance(m, Latency):
                values.update({f"{name}.{k}": v for k, v in flows[m.flow]["latency"].items()})
            elif isinstance(m, Convergence):
                expected = self.baseline.get(m.node, {}).get(_host(m.prefix))
                if expected is None:  # the file's check makes this rare: another node announces it
                    invalid.append(f"{name}: {m.node} had no BGP route to {m.prefix} when the "
                                   "lab had settled: no nexthops to count")
                    continue
                c = analysis.convergence(samplers.routes[name], expected, first_event)
                values.update({f"{name}.{k}": v for k, v in c.items()})
                short = analysis.short_before(samplers.routes[name], expected, first_event)
                if short is not None:
                    invalid.append(f"{name}: {m.node}'s route to {m.prefix} had {short} of its "
                                   f"{expected} nexthops before the first event (it lost one "
                                   "to something else, e.g. a session that timed out)")
            elif isinstance(m, Cpu):
                values[f"{name}.cpu_pct"] = samplers.cpu_pct(m.node)
            elif isinstance(m, Links):
                links[name] = samplers.link_bytes(m.node)
        spath = self.store.raw_path(f"{tag}-samples.json")
        write_atomic(spath, json.dumps({"routes": samplers.routes, "events": done}))
        raw.append(spath)
        return raw, {"values": values, "series": series, "links": links, "events": done}, invalid

    def finish(self) -> None:
        """Keep every node's FRR logs and configs (FRR can write its directory:
        a link, FIFO or hard link there is refused, not followed; see nslab.frr.rundir)."""
        from nslab.frr.rundir import copy_frr_files
        copy_frr_files(self.lab.workdir, os.path.join(self.store.raw_dir, "frr"), (".log", ".conf"))


def _each(ends: List[Tuple[Any, str]], fn: Callable[[Any, str], Any]) -> None:
    """``fn(node, dev)`` on every end of a link at once: an event reaches both
    ends together, where one after the other (each a process started in its
    namespace) could land seconds apart on a slow guest. The first error is
    raised once all are done."""
    if len(ends) < 2:
        for node, dev in ends:
            fn(node, dev)
        return
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=len(ends)) as pool:
        futures = [pool.submit(fn, node, dev) for node, dev in ends]
    for f in futures:
        f.result()


def raw_tag(point: Dict[str, Any]) -> str:
    """The stem of a point's raw files: a short hash of the whole point (two
    sweep keys may end alike: ``sysctl.h1.net.x``, ``sysctl.h2.net.x``), then
    the values, readable."""

    from nslab.store.results import point_key
    digest = hashlib.sha1(point_key(point).encode()).hexdigest()[:6]
    text = "-".join(f"{k.split('.')[-1]}={v}" for k, v in point.items())
    return f"p{digest}-" + "".join(c if c.isalnum() or c in "=_.-" else "_" for c in text)[:120]


class _Samplers:
    """Routes (every 20 ms), CPU of each node's processes and interface bytes,
    sampled during a trial in one thread."""

    def __init__(self, runner: FileRunner) -> None:
        self.lab = runner.lab
        self.conv = [m for m in runner.spec.metrics if isinstance(m, Convergence)]
        self.cpu_nodes = {m.node for m in runner.spec.metrics if isinstance(m, Cpu)}
        self.link_nodes = {m.node for m in runner.spec.metrics if isinstance(m, Links)}
        self.routes: Dict[str, List[Tuple[float, int]]] = {metric_name(m): [] for m in self.conv}
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._cpu0: Dict[str, Dict[int, float]] = {}
        self._cpu1: Dict[str, Dict[int, float]] = {}
        self._bytes0: Dict[str, Dict[str, int]] = {}

    def start(self, t0: float) -> None:
        self.t0 = t0
        self._bytes0 = {n: _tx_bytes(self.lab[n]) for n in self.link_nodes}
        self._cpu0 = {n: _ns_cpu(self.lab[n].netns) for n in self.cpu_nodes}
        self._thread = threading.Thread(target=self._loop, daemon=True, name="file-study-samplers")
        self._thread.start()

    def _loop(self) -> None:
        from nslab.runtime.proc import nexthop_count
        last_cpu = time.monotonic()
        while not self._stop.is_set():
            for m in self.conv:
                res = run(["ip", "-n", _netns(self.lab[m.node]), "-j", "route", "show",
                           _host(m.prefix)], check=False)
                # stamped when the read is back: the table was read no later,
                # so a late `ip` cannot make a change look earlier than it was
                t = time.monotonic() - self.t0
                try:
                    table = json.loads(res.stdout or "[]")
                except ValueError:
                    table = []
                self.routes[metric_name(m)].append(
                    (round(t, 4), sum(nexthop_count(r) for r in table)))
            if self.cpu_nodes and time.monotonic() - last_cpu > 0.5:
                for n in self.cpu_nodes:  # processes that exit mid-trial keep their last sample
                    self._cpu1.setdefault(n, {}).update(_ns_cpu(self.lab[n].netns))
                last_cpu = time.monotonic()
            self._stop.wait(ROUTE_POLL_S)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.elapsed = time.monotonic() - self.t0
        for n in self.cpu_nodes:
            self._cpu1.setdefault(n, {}).update(_ns_cpu(self.lab[n].netns))
        self._bytes1 = {n: _tx_bytes(self.lab[n]) for n in self.link_nodes}

    def cpu_pct(self, node: str) -> Optional[float]:
        a, b = self._cpu0.get(node, {}), self._cpu1.get(node, {})
        if not b or not self.elapsed:
            return None
        used = sum(v - a.get(pid, 0.0) for pid, v in b.items())
        return 100.0 * used / self.elapsed

    def link_bytes(self, node: str) -> Dict[str, int]:
        a, b = self._bytes0.get(node, {}), self._bytes1.get(node, {})
        return {i: b[i] - a.get(i, 0) for i in b}


def _tx_bytes(node: LabNode) -> Dict[str, int]:
    res = node.run(["ip", "-s", "-j", "link", "show"], check=False)
    out = {}
    for l in json.loads(res.stdout or "[]"):
        if l.get("ifname") in node.intfs:
            out[l["ifname"]] = int(l.get("stats64", {}).get("tx", {}).get("bytes", 0))
    return out


def _netns(node: LabNode) -> str:
    """The named namespace of a host or router (an OVS switch, in the root
    namespace, has none; the file's metrics and BGP nodes are never one)."""
    if node.netns is None:
        raise LabError(f"{node.name} has no network namespace of its own")
    return node.netns


def _ns_cpu(netns: Optional[str]) -> Dict[int, float]:
    """CPU seconds so far of every process in the named network namespace
    (none for a node in the root namespace)."""
    import psutil
    if netns is None:
        return {}
    try:
        target = os.stat(f"/run/netns/{netns}").st_ino
    except OSError:
        return {}
    out = {}
    for p in psutil.process_iter():
        try:
            if os.stat(f"/proc/{p.pid}/ns/net").st_ino != target:
                continue
            t = p.cpu_times()
            out[p.pid] = t.user + t.system
        except (OSError, psutil.Error):
            continue
    return out


def _host(prefix: str) -> str:
    return prefix[:-3] if prefix.endswith("/32") else prefix


def _cidr(dst: str) -> str:
    return dst if "/" in dst else f"{dst}/32"


def _short(v: Optional[float]) -> str:
    if v is None:
        return "-"
    return f"{v / 1e6:.0f}M" if abs(v) >= 1e5 else f"{v:.1f}"


#: Seconds a probe receiver records past the trial's duration at most: it is
#: stopped once the senders are done (:func:`_finish`), so a sender the host
#: started late keeps its last probes (with 1 s, two senders started 1.6-1.8 s
#: late lost their last 0.6 and 1.6 s of probes, 2026-12-02).
RECV_SPARE_S = 10.0


def _finish(proc: Any) -> Any:
    """A receiver's output once the senders are done: stopped (an iperf server
    would serve on; a probe receiver writes what arrived on SIGTERM); a pktgen
    sink ends by its own duration."""
    from nslab.runtime.proc import Result
    argv = " ".join(proc.argv)
    if "nslab-pktgen" in argv:
        return proc.wait(timeout=30)
    if "nslab.traffic.probe" in argv:
        proc.popen.terminate()
    else:
        proc.stop(grace=1.0)
    out, err = proc.popen.communicate(timeout=30)
    return Result(proc.argv, proc.popen.returncode, out or "", err or "")


def _stop_each(procs: Dict[str, Any]) -> None:
    """Stop every process of ``procs``, warning of one that would not."""
    for p in procs.values():
        try:
            p.stop(grace=1.0)
        except Exception as exc:  # noqa: BLE001 - stop every one, then go on
            log.warning("stopping a receiver: %s", exc)


def _not_started(why: str) -> Tuple[Dict[str, Any], List[str], str]:
    """The trial whose receivers did not all come up in time, though none
    ended (one that ended ends the run: it would again): invalid, saying
    why, so a later round measures the point again, instead of ending the
    run. On a busy host the kernel can keep a process it just started
    waiting for a CPU longer than any deadline (a probe receiver in state R
    for over 10 s beside two busy loops, Linux 6.18)."""
    invalid = [f"not measured: {why}"]
    log.warning("trial not measured: %s", why)
    m = {"values": {}, "series": {}, "links": {}, "events": [], "invalid": invalid}
    return m, [], f"(invalid: {invalid[0]})"
