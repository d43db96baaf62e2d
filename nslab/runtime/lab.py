"""``Lab``: build a :class:`~nslab.model.topo.Topology` in named namespaces, own every
object it creates, and tear it down in stages on exit, error or Ctrl-C.

Example::

    from nslab import Lab
    from nslab.topologies import single
    with Lab(single(k=2)) as lab:
        print(lab["h1"].run(["ping", "-c1", lab["h2"].ip]).stdout)

The core builds what :func:`nslab.runtime.plan.plan` lists (namespaces, veths, Linux
bridges, addresses, routes, sysctls, shaping); extensions
(:mod:`nslab.runtime.extension`: OVS, FRR) build the rest.
"""
from __future__ import annotations

import ipaddress
import json
import logging
import os
import signal
import threading
import time
from types import FrameType
from typing import Callable, Collection, Dict, Iterator, List, NoReturn, Optional, Sequence, Set, Tuple

from . import caps, grants
from ..model.fields import MAC_RE
from ..model.render import line, text
from .clean import Inventory, block_sigint, remove, topology_path, workdir, write_journal
from ..errors import InputError, LabError, TopologyError
from .extension import Extension, for_topology, root_switch_types
from .grants import HostGrants
from ..model.multihost import Part
from ..model.naming import check_run_id, new_run_id
from .netlink import LinkDown, SysctlSet, apply as apply_ops, write_sysctls
from .node import LabNode
from .plan import BuildPlan, plan
from .proc import (NetnsJob, Process, Result, in_each_namespace, links_not_flowing,
                   process_start_time, route_tables, run, run_in_namespaces, stop_all)
from ..model.topo import Topology

log = logging.getLogger(__name__)

#: STP port states in which a port neither forwards nor has settled.
STP_TRANSIENT = ("listening", "learning")
#: ``ip -batch`` processes that create namespaces at once, and threads that
#: write their sysctls. Their links, addresses and routes go from one thread:
#: measured at 1000 hosts, two were slower (0.46-0.50 s against 0.41-0.45 s).
CONFIG_WORKERS = 2

#: The run ids of the labs this process has torn down (for the last line of an
#: interrupted command: it says a lab was torn down only if one was).
TORN_DOWN: List[str] = []


def stp_loops(switches: List[str], links: List[Tuple[str, str, str, str]],
              states: Dict[Tuple[str, str], str], open_to: Collection[str] = ()) -> List[str]:
    """What still keeps STP from a tree among ``switches`` (empty: nothing):
    ``links`` are ``(switch, port, switch, port)`` between them, ``states``
    every port's STP state by ``(switch, port)``, ``open_to`` the switches that
    also reach a bridge this check does not see (another kind of switch,
    another host's, a lossy link). A link forwards when both its ports do. The
    forwarding links must close no loop, and must join every group of
    connected switches that is not open to an unseen bridge (through which
    STP may have chosen the path). Every port forwarding or blocking and every
    bridge agreeing on the root is not enough: measured here, 1 lab in 8 had
    three ports still forwarding that blocked 3 s later (a loop)."""
    def finder(edges: List[Tuple[str, str]]) -> Tuple[Dict[str, str], List[Tuple[str, str]]]:
        """Each switch's group by ``edges``, and the edges that closed a loop."""
        head = {s: s for s in switches}

        def find(x: str) -> str:
            while head[x] != x:
                head[x] = head[head[x]]
                x = head[x]
            return x
        loops = []
        for a, b in edges:
            ra, rb = find(a), find(b)
            if ra == rb:
                loops.append((a, b))
            head[ra] = rb
        return {s: find(s) for s in switches}, loops
    wired, _ = finder([(a, b) for a, _, b, _ in links])
    live = [(a, pa, b, pb) for a, pa, b, pb in links
            if states.get((a, pa)) == "forwarding" and states.get((b, pb)) == "forwarding"]
    joined, loops = finder([(a, b) for a, _, b, _ in live])
    if loops:
        (a, b), more = loops[0], len(loops) - 1
        return [f"the links forwarding between {len(switches)} switches close a loop through "
                f"{a} and {b}{f' (and {more} more)' if more else ''}: until a port blocks"]
    opened = {wired[s] for s in open_to if s in wired}
    for group in sorted(set(wired.values()) - opened):
        parts = {joined[s] for s in switches if wired[s] == group}
        if len(parts) > 1:
            return [f"switches joined by cables are in {len(parts)} parts by the links that "
                    "forward: until a port forwards"]
    return []


def wait_stp_settled(what: str, unsettled: Callable[[], List[str]], timeout: float,
                     poll: float = 0.25, stable: float = 2.0) -> float:
    """Poll ``unsettled()`` (what still keeps STP from settling) until it has
    been empty for ``stable`` seconds (one STP hello time: a late BPDU can still
    move a port); the seconds it took. :class:`LabError` naming a few ports on
    timeout."""
    t0 = time.monotonic()
    quiet_since: Optional[float] = None
    log.info("waiting for %s", what)
    while True:
        left = unsettled()
        now = time.monotonic()
        if left:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = now
        elif now - quiet_since >= stable:
            log.info("%s settled in %.1f s", what, now - t0)
            return now - t0
        if now - t0 > timeout:
            raise LabError(f"{what} did not settle in {timeout:.0f} s: {', '.join(left[:5])}")
        time.sleep(poll)


class Lab:
    """A running topology. Use as a context manager.

    Args:
        topology: what to build (validated first, before anything is created;
            never modified).
        run_id: reuse a pre-allocated id (``nl`` + 4 hex), else a fresh one.
        switch_type: build with this default switch type instead of the
            topology's own.
        part: for a lab that spans hosts, the part this host builds (see
            :mod:`nslab.model.multihost`; built by ``nslab agent`` on each host).
        host_grants: what the command line allows the topology to change on
            this machine (uplinks, ``force``, controllers off the loopback);
            ``None`` trusts the topology (built by the calling Python code).

    A :class:`~nslab.runtime.node.LabLike`, as :class:`~nslab.hosts.remote.MultiLab` is.
    """

    #: every node is on this machine (see :class:`~nslab.runtime.node.LabLike`)
    remote = False

    def __init__(self, topology: Topology, run_id: Optional[str] = None,
                 switch_type: Optional[str] = None, part: Optional[Part] = None,
                 host_grants: Optional[HostGrants] = None) -> None:
        self.topology = topology.with_switch_type(switch_type) if switch_type else topology
        self.part = part
        #: what the command line allows the topology to change on the host
        #: (None: the caller built the topology itself; see :mod:`nslab.runtime.grants`)
        self.host_grants = host_grants
        self.run_id = check_run_id(run_id) if run_id else new_run_id()
        self.nodes: Dict[str, LabNode] = {}
        self.processes: List[Process] = []
        self.inventory = Inventory(self.run_id)
        self.extensions: Dict[str, Extension] = {}
        self.plan: Optional[BuildPlan] = None
        self.journal: dict = {}
        self.build_seconds = 0.0
        #: seconds spent in each stage of the last start (checks, core, links up, extensions)
        self.timings: Dict[str, float] = {}
        self._started = False

    # -- context manager ----------------------------------------------------------
    def __enter__(self) -> "Lab":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __getitem__(self, name: str) -> LabNode:
        try:
            return self.nodes[name]
        except KeyError:
            raise InputError(f"no node {name!r} in this lab (nodes: {', '.join(self.nodes)})") from None

    def __iter__(self) -> Iterator[LabNode]:
        return iter(self.nodes.values())

    def is_local(self, node: str) -> bool:
        """Does this lab build ``node`` (always, unless it is one host's part)?"""
        return self.part is None or self.part.is_local(node)

    @property
    def workdir(self) -> str:
        """A scratch directory owned by this run, removed on teardown."""
        return workdir(self.run_id)

    def extension(self, name: str) -> Extension:
        """The extension ``name`` this lab uses (e.g. ``frr``, ``ovs``)."""
        try:
            return self.extensions[name]
        except KeyError:
            raise LabError(f"this lab does not use the {name} extension "
                           f"(it uses: {', '.join(self.extensions) or 'none'})") from None

    @property
    def datapath(self) -> Optional[str]:
        """The datapath type of the switches an extension builds in the root
        namespace (OVS's ``system`` or ``netdev``), if this lab has any."""
        return next((d for d in (getattr(e, "datapath", None) for e in self.extensions.values())
                     if d), None)

    def run_each(self, nodes: List[str], argv: List[str], where: str = "") -> List[Result]:
        """Run ``argv`` in each of ``nodes`` (a few at a time, each forked from a
        thread inside the node's namespace); results in the order of ``nodes``."""
        return run_in_namespaces([NetnsJob(self[n].netns, list(argv), where=f"{n}: {where}")
                                  for n in nodes], run_id=self.run_id)

    def route_tables(self, nodes: List[str]) -> List[Dict[str, int]]:
        """Each node's IPv4 main table as ``{prefix: nexthops}`` (a netlink dump
        from a thread inside each namespace, no process); in the order of ``nodes``."""
        return route_tables([self[n].netns for n in nodes])

    def record_restore(self, what: str, argv_list: List[List[str]]) -> None:
        """Journal commands that undo a change outside the lab's own objects, so
        that teardown and ``nslab clean`` after a crash restore it."""
        self.journal.setdefault("restore", []).append({"what": what, "argv": argv_list})
        write_journal(self.run_id, self.journal)

    # -- lifecycle ----------------------------------------------------------------
    def start(self) -> None:
        """Validate, check capabilities, then build. On any failure, undo what was built."""
        if self._started:
            raise LabError("lab already started")
        t_checks = time.monotonic()
        topo = self.topology.validate()
        grants.check(topo, self.host_grants)
        caps.require_root("building a lab")
        exts = for_topology(topo)
        need = list(topo.needs())
        for ext in exts:
            need += ext.needs(topo)
        caps.require(need, f"topology {topo.name!r}")
        try:
            caps.check_sysctls(topo.sysctls())
        except TopologyError as exc:
            raise topo.locate(exc) from None
        # Fresh instances per lab: an extension keeps this lab's state.
        self.extensions = {e.name: type(e)() for e in exts}
        for name, ext in self.extensions.items():
            ext.name = name
            ext.check(self)
        self.plan = plan(topo, self.run_id, root_switch_types(), self.part)
        self.journal = {"run": self.run_id, "pid": os.getpid(),
                        "pid_start": process_start_time(os.getpid()),
                        "created": time.time(), "topology": topo.name,
                        "nodes": len(self.plan.nodes), "restore": [],
                        "host": self.part.host if self.part else None,
                        "extensions": {n: e.journal(self) for n, e in self.extensions.items()}}
        write_journal(self.run_id, self.journal)
        os.makedirs(self.workdir, exist_ok=True)
        # what `nslab watch --web` draws: the topology as data, beside the journal
        with open(topology_path(self.run_id), "w") as f:
            json.dump(topo.to_dict(), f)
        self._started = True
        self._install_signal_handlers()
        t0 = time.monotonic()
        self.timings = {"checks": t0 - t_checks}
        try:
            self._build(self.plan)
        except BaseException:
            log.info("build of %s failed; tearing down what was built", self.run_id)
            self.stop()
            raise
        self.build_seconds = time.monotonic() - t0
        log.info("lab %s up in %.2f s: %d nodes, %d links (%s)", self.run_id, self.build_seconds,
                 len(self.nodes), len(topo.links),
                 ", ".join(f"{k} {v:.2f} s" for k, v in self.timings.items()))

    def stop(self) -> List[str]:
        """Tear down in stages (extensions, processes, interfaces,
        namespaces, files). Best effort: every stage runs even if an earlier
        one failed. Returns the problems met."""
        if not self._started:
            return []
        with block_sigint():
            problems = []
            for name, ext in reversed(list(self.extensions.items())):
                try:
                    problems += [f"{name}: {p}" for p in ext.teardown(self)]
                except Exception as exc:  # noqa: BLE001 - teardown goes on
                    problems.append(f"{name}: {exc}")
            try:
                stop_all(self.processes)
            except Exception as exc:  # noqa: BLE001 - teardown goes on
                problems.append(f"processes: {exc}")
            self._quiet_bridges()
            self.inventory.journal = self.journal
            problems += remove(self.inventory)
            self._started = False
        self._restore_signal_handlers()
        for prob in problems:
            log.warning("teardown of %s: %s", self.run_id, prob)
        log.info("lab %s torn down", self.run_id)
        TORN_DOWN.append(self.run_id)
        return problems

    def _quiet_bridges(self) -> None:
        """Take the lab's Linux bridges down before its namespaces go. As a
        namespace is deleted its interfaces leave their IPv6 multicast groups,
        and a bridge still up floods each report to every port: a 1000-host
        lab's teardown took 0.5-0.65 s with IPv6, 0.2 s without. Best effort:
        a bridge a failed build never made is skipped."""
        if self.plan is None:
            return
        bridges = {np.netns: name for name, np in self.plan.nodes.items()
                   if np.kind == "switch" and np.netns and os.path.exists(f"/run/netns/{np.netns}")}

        def down(ns: str) -> None:
            try:
                apply_ops([LinkDown(bridges[ns])], f"teardown of {ns}")
            except LabError as exc:
                log.debug("%s", exc)
        try:
            in_each_namespace(list(bridges), down, "netns-quiet")
        except OSError as exc:  # a namespace already gone
            log.debug("quieting bridges: %s", exc)

    def _install_signal_handlers(self) -> None:
        """SIGTERM and SIGHUP (a closed terminal) tear the lab down like Ctrl-C:
        they raise KeyboardInterrupt in the main thread, so ``with Lab(...)`` exits
        through teardown. Handlers someone else installed are left alone."""
        self._old_handlers = {}
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                self._old_handlers[sig] = signal.signal(sig, _raise_interrupt)

    def _restore_signal_handlers(self) -> None:
        for sig, old in getattr(self, "_old_handlers", {}).items():
            signal.signal(sig, old)
        self._old_handlers = {}

    # -- build --------------------------------------------------------------------
    def _build(self, p: BuildPlan) -> None:
        self._t_build = time.monotonic()
        for name, np in p.nodes.items():
            node = LabNode(self, name, np.kind, np.netns)
            node.intfs, node.addrs = list(np.intfs), {k: str(v) for k, v in np.addrs.items()}
            self.nodes[name] = node
        self.inventory.namespaces = list(p.namespaces)
        self.inventory.interfaces = list(p.root_interfaces)
        t = self._t_build
        # namespaces in CONFIG_WORKERS batches at once: the kernel creates them
        # in parallel (1000 took 0.40 s in two batches, 0.60-0.72 s in one)
        ip_batches([p.netns_lines[i::CONFIG_WORKERS] for i in range(CONFIG_WORKERS)],
                   where="creating namespaces")
        t = self._timed("namespaces", t)
        # per-namespace steps go from threads that enter each namespace (setns):
        # sysctls are written to its /proc/sys, links, addresses and routes
        # are netlink requests on a socket opened there; no process
        if p.sysctls:
            in_each_namespace(list(p.sysctls), lambda ns: write_sysctls(
                [SysctlSet(k, v) for k, v in p.sysctls[ns].items()], f"sysctls in {ns}"),
                "netns-sysctls", workers=CONFIG_WORKERS)
            t = self._timed("sysctls", t)
        ip_batch(p.link_lines, where="creating links")
        t = self._timed("links", t)
        # switches last: a host's interfaces come up without carrier, so the
        # kernel's IPv6 start-up (DAD, MLD, router solicitations) waits until
        # the bridge ports come up, and does not hold the namespaces still
        # being configured back
        switch_ns = {np.netns for np in p.nodes.values() if np.kind == "switch"}
        switches_last = sorted(p.ns_ops, key=lambda ns: ns in switch_ns)
        in_each_namespace(switches_last, lambda ns: apply_ops(
            p.ns_ops[ns], f"configuring {ns.split('-', 1)[1]}"),
            "netns-config", workers=1)
        ethtool_each(p.gso_off, ["tso", "off", "gso", "off"])
        for ns, lines in p.tc_lines.items():
            if lines and ns is None:
                run(["tc", "-batch", "-"], input=text(lines), where="shaping in root")
        run_in_namespaces([NetnsJob(ns, ["tc", "-batch", "-"], text(lines), f"shaping in {ns}")
                           for ns, lines in p.tc_lines.items() if lines and ns is not None],
                          run_id=self.run_id)
        t = self._timed("configure", t)
        self._wait_links(p)
        self._timed("links up", t)
        for ext in self.extensions.values():
            t = time.monotonic()
            ext.build(self, p)
            self.timings[ext.name] = time.monotonic() - t
        self._wait_stp()

    def _timed(self, stage: str, since: float) -> float:
        """Record a build stage that began at ``since``; returns now."""
        now = time.monotonic()
        self.timings[stage] = now - since
        return now

    def _wait_links(self, p: BuildPlan, timeout: float = 5.0) -> None:
        """Wait until every link end is operationally up. A veth's carrier, and
        the queue that carries its frames, come from the kernel's link watcher
        shortly after both ends are up; a frame sent before is dropped (a CI
        run's first ping lost its ARP request that way right after a fast build).
        Read with one netlink dump per namespace, no process.

        Namespaces with many link ends (switches) are waited for first, with
        one dump each: one carrier event brings up both ends of a veth, so
        once a switch's ports are up its hosts' ends are nearly all up too,
        and a thousand hosts are then read once rather than every round."""
        only: Dict[Optional[str], Sequence[str]] = {np.netns: np.intfs for np in p.nodes.values()
                                                    if np.netns}
        deadline = time.monotonic() + timeout
        many = [ns for ns, intfs in only.items() if len(intfs) >= 8]
        rest = [ns for ns in only if ns not in set(many)]
        group: Sequence[Optional[str]]
        for group in (many, rest):
            while group:
                late = links_not_flowing(group, only)
                if not late:
                    break
                if time.monotonic() > deadline:
                    log.warning("%d link ends still not up after %.0f s (e.g. %s in %s)",
                                len(late), timeout, late[0][1], late[0][0])
                    return
                group = sorted({ns for ns, _ in late if ns})
                time.sleep(0.01)

    def _wait_stp(self) -> None:
        """With STP on Linux bridges (a topology with loops), wait until every
        port has settled (forwarding or blocking), every bridge agrees on the
        root and the forwarding links make a tree (:func:`stp_loops`), for a
        hello time: before that, frames are dropped or loop."""
        stp = [n for n, node in self.topology.nodes.items()
               if node.is_switch and node.stp and self.topology.switch_type_of(n) == "bridge"
               and self.is_local(n)]

        on = set(stp)
        between: List[Tuple[str, str, str, str]] = []
        open_to: Set[str] = set()
        for link, a, ia, b, ib in self.topology.interfaces():
            if a in on and b in on and not link.loss:
                between.append((a, ia, b, ib))
            elif a in on or b in on:
                # a lossy link may drop BPDUs, and STP may choose a path
                # through a bridge not checked here: neither settles a tree
                if link.loss or self.topology.nodes[b if a in on else a].is_switch:
                    open_to.update(x for x in (a, b) if x in on)

        def unsettled() -> List[str]:
            out: List[str] = []
            roots: Dict[str, str] = {}
            states: Dict[Tuple[str, str], str] = {}
            for sw in stp:
                node = self.nodes[sw]
                ports = json.loads(node.run(["bridge", "-j", "link", "show"]).stdout or "[]")
                states.update({(sw, str(p.get("ifname"))): str(p.get("state")) for p in ports
                               if p.get("master") == sw})
                out += [f"{sw}:{p.get('ifname')} {p.get('state')}" for p in ports
                        if p.get("master") == sw and p.get("state") in STP_TRANSIENT]
                # sysfs, not `ip -d link`: iproute2 6.1 shows a stale root_id
                roots[sw] = node.run(["cat", f"/sys/class/net/{sw}/bridge/root_id"]).stdout.strip()
            # every port forwarding or blocking is not enough: until every bridge
            # agrees on the root, a late BPDU can still move ports
            if len(set(roots.values())) > 1:
                out += [f"{sw} root {r}" for sw, r in roots.items()]
            # nor is that: until the forwarding links make one tree, a port is
            # yet to block (or to forward)
            return out or stp_loops(stp, between, states, open_to)
        if stp:
            wait_stp_settled(f"STP on {len(stp)} Linux bridges", unsettled, timeout=60.0)

    # -- helpers -----------------------------------------------------------------
    def static_arp(self) -> int:
        """Permanent neighbour entries between every pair of addresses that share a
        subnet (Mininet's ``autoStaticArp``): no ARP at the start of a trial.
        Returns the number of entries added."""

        ends = []  # (node, intf, interface address, mac)
        for node in self.nodes.values():
            for intf, cidr in node.addrs.items():
                if intf == "lo" or node.netns is None:
                    continue
                mac = node.run(["cat", f"/sys/class/net/{intf}/address"]).stdout.strip()
                if not MAC_RE.fullmatch(mac):
                    raise LabError(f"{node.name}: {intf} reports MAC {mac!r}")
                ends.append((node, intf, ipaddress.ip_interface(cidr), mac))
        added = 0
        for node, intf, iface, _ in ends:
            lines = [line("neigh", "replace", peer.ip, "lladdr", mac, "dev", intf, "nud",
                          "permanent")
                     for other, _, peer, mac in ends
                     if other is not node and peer.ip in iface.network]
            if lines:
                ip_batch(lines, netns=node.netns, where=f"static ARP on {node.name}")
                added += len(lines)
        return added

    def describe(self, max_intfs: Optional[int] = None) -> List[Tuple[str, str, str, str]]:
        """Rows ``(node, kind, interfaces/addresses, how to enter)``; with
        ``max_intfs``, a node with more interfaces lists that many and a count."""
        rows = []
        for node in self.nodes.values():
            kind = node.kind
            if kind == "switch":
                kind += f" ({self.topology.switch_type_of(node.name)}, {self.datapath})" \
                    if node.netns is None else " (bridge)"
            rows.append((node.name, kind, node.interfaces_cell(max_intfs), node.enter_hint()))
        return rows



def _raise_interrupt(signum: int, frame: Optional[FrameType]) -> NoReturn:
    raise KeyboardInterrupt(f"signal {signum}")


def ethtool_each(where: List[Tuple[Optional[str], str]], features: List[str]) -> None:
    """``ethtool -K dev ...`` for every ``(netns, dev)``, a few at once."""
    run_in_namespaces([NetnsJob(ns, ["ethtool", "-K", dev] + features,
                                where=f"ethtool -K {dev} {' '.join(features)}")
                       for ns, dev in where])


def ip_batches(batches: List[List[str]], where: str = "") -> None:
    """Run several ``ip -batch -`` processes at once (root namespace); raise
    the first one's failure after all have ended."""
    from concurrent.futures import ThreadPoolExecutor
    batches = [b for b in batches if b]
    if len(batches) <= 1:
        for b in batches:
            ip_batch(b, where=where)
        return
    with ThreadPoolExecutor(len(batches)) as pool:
        futures = [pool.submit(ip_batch, b, None, where) for b in batches]
    for f in futures:
        f.result()


def ip_batch(lines: List[str], netns: Optional[str] = None, where: str = "") -> None:
    """Run rendered lines through ``ip [-n NS] -batch -``."""
    if not lines:
        return
    argv = ["ip"] + (["-n", netns] if netns else []) + ["-batch", "-"]
    run(argv, input=text(lines), where=where)
