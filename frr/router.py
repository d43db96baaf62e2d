"""FRR on the nodes of a lab: directories, daemons in order, readiness.

A node takes part when its topology options carry ``bgp`` (a typed
:class:`~nslab.frr.options.BgpOptions`)::

    bgp: {asn: 65001, router_id: 10.0.200.1, unnumbered: [server1-eth0, ...],
          networks: [10.0.200.1/32]}

The lab extension (:class:`FrrExtension`) starts the daemons after the core
has built the namespaces and stops them (the processes it started, never a pid
read from a file) before the namespaces go. What each daemon gets depends on
the FRR release (see :mod:`frr.version`): from FRR 10 every node also runs
``mgmtd``, which holds the interface configuration.
"""
from __future__ import annotations

import ipaddress
import json
import logging
import os
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from .options import BgpOptions, bgp_of
from nslab.errors import LabError, ReadinessError
from nslab.runtime.extension import ExtendedLab, Extension

from .daemon import Daemon, container_configs, daemon_kinds, node_configs
from .rundir import NodeDir, frr_ids
from .version import FrrVersion, detect, parse_version

if TYPE_CHECKING:  # pragma: no cover
    from nslab.runtime.node import LabLike, LabNode
    from nslab.runtime.plan import BuildPlan
    from nslab.model.topo import Topology

log = logging.getLogger(__name__)

#: The FRR release an export is written for when the image's tag names none.
EXPORT_RELEASE = "10.3"


def node_dir(lab: ExtendedLab, node: str) -> str:
    """The node's FRR run directory (``frr``'s: sockets, pid files, logs)."""
    return os.path.join(lab.workdir, "frr", node)


def conf_dir(lab: ExtendedLab, node: str) -> str:
    """The node's FRR configuration directory (root's, readable by group ``frr``)."""
    return os.path.join(lab.workdir, "frr-conf", node)


class FrrRouter:
    """The FRR daemons of one node.

    Args:
        lab: the lab.
        node: the node.
        bgp: its BGP options.
        version: the FRR it runs (default: this machine's, see :func:`frr.version.detect`).
    """

    def __init__(self, lab: ExtendedLab, node: "LabNode", bgp: "BgpOptions",
                 version: Optional[FrrVersion] = None) -> None:
        self.lab = lab
        self.node = node
        self.version = version or detect()
        self.run_dir = NodeDir(node_dir(lab, node.name), "frr")
        self.conf_dir = NodeDir(conf_dir(lab, node.name), "root")
        self.dir = self.run_dir.path
        self.context = {"node": node.name, "run_id": lab.run_id, "interfaces": list(node.intfs),
                        "bgp": bgp}
        self.daemons: List[Daemon] = [cls(node, self.run_dir, self.conf_dir, self.context,
                                          self.version)
                                      for cls in daemon_kinds(bool(bgp.bfd), self.version)]

    def daemon(self, name: str) -> Daemon:
        """The daemon called ``name`` (``zebra``, ``bgpd``, ``bfdd``)."""
        for d in self.daemons:
            if d.NAME == name:
                return d
        raise KeyError(f"{self.node.name} runs no {name} (it runs "
                       f"{', '.join(d.NAME for d in self.daemons)})")

    def write(self) -> None:
        """The node's two directories (made fresh) and every daemon's config file."""
        self.run_dir.create()
        self.conf_dir.create()
        for name, text in node_configs(self.context, self.version).items():
            self.conf_dir.write(name, text)

    def prepare(self) -> None:
        """Write the configs, then dry-run each (``-C``)."""
        self.write()
        for d in self.daemons:
            d.check()

    def start(self) -> None:
        for d in self.daemons:
            d.start()
            if d.READY:
                wait_ready([d], 10)

    def stop(self) -> None:
        for d in reversed(self.daemons):
            try:
                d.stop()
            except Exception as exc:  # noqa: BLE001 - teardown goes on
                log.warning("%s: stopping %s: %s", self.node.name, d.NAME, exc)

    def vtysh(self, command: str) -> str:
        return self.node.run(["vtysh", "--vty_socket", self.dir, "-c", command], check=False,
                             timeout=20).stdout


class FrrExtension(Extension):
    """FRR daemons on every node whose options carry ``bgp``."""

    name = "frr"
    provides = ("bgp",)
    #: ``nslab check`` hands these to :meth:`judge` (:mod:`frr.checks`)
    check_kinds = ("bgp", "bfd")

    def __init__(self) -> None:
        self.routers: Dict[str, FrrRouter] = {}
        self.started_at: Optional[float] = None
        self.version: Optional[FrrVersion] = None

    def agent_facts(self, lab: ExtendedLab) -> Dict[str, Any]:
        """When the daemons started (as an age) and each router's run directory."""
        if self.started_at is None:
            return {}
        return {"started_ago": time.monotonic() - self.started_at,
                "dirs": {n: r.dir for n, r in self.routers.items()}}

    def remote(self, lab: Any, facts: List[Tuple[Dict[str, Any], float]]) -> Any:
        """The controller's :class:`~nslab.frr.remote.RemoteFrr`: the earliest
        start among the hosts, on the controller's clock, and every router."""
        from .remote import RemoteFrr, RemoteRouter
        started = [got - float(told["started_ago"]) for told, got in facts
                   if told.get("started_ago") is not None]
        routers = {n: RemoteRouter(lab.nodes[n], d) for told, _ in facts
                   for n, d in (told.get("dirs") or {}).items()}
        return RemoteFrr(min(started) if started else None, routers)

    def needs(self, topo) -> List[str]:
        return ["frr"]

    def build(self, lab: ExtendedLab, plan: "BuildPlan") -> None:
        topo = lab.topology
        version = self.version = detect()
        log.info("%s", version.label)
        if version.mgmtd and any(bgp_of(node) and lab.is_local(n) for n, node in topo.nodes.items()):
            frr_host_dirs(version)
        self.routers = {n: FrrRouter(lab, lab[n], bgp_of(topo.nodes[n]), version)  # type: ignore[arg-type]
                        for n, node in topo.nodes.items() if bgp_of(node) and lab.is_local(n)}
        pin_peer_neighbours(lab)
        routers = list(self.routers.values())
        for r in routers:
            r.write()
        # Dry runs, then starts, one daemon kind at a time across all routers:
        # started router by router (zebra, wait for its socket, bgpd), 80 routers
        # took 15.5 s to come up, longer than the fabric then took to converge.
        _each([d.check for r in routers for d in r.daemons])
        self.started_at = time.monotonic()
        for kind in sorted({type(d) for r in routers for d in r.daemons}, key=lambda c: c.ORDER):
            started = [d for r in routers for d in r.daemons if type(d) is kind]
            for d in started:
                d.start()
            if kind.READY:  # mgmtd before zebra (its back end), zebra before the rest
                wait_ready(started, 30)

    def teardown(self, lab: ExtendedLab) -> List[str]:
        for r in self.routers.values():
            r.stop()
        return []

    def judge(self, node, check):
        """One try of an ``nslab check`` bgp or bfd check (:func:`frr.checks.judge`)."""
        from .checks import judge
        return judge(node, check)

    def export_files(self, topo: "Topology", node: str,
                     release: Optional[str] = None) -> Dict[str, str]:
        """FRR's configuration of ``node`` for FRR's container image (``nslab
        topo export``): the files the lab renders for it, as one ``frr.conf``,
        with ``daemons`` and ``vtysh.conf``, at their paths in the image.
        ``release``: the image's FRR version (``10.3.1``); unknown, the
        current layout (10.x, with ``mgmtd``) is assumed."""
        bgp = bgp_of(topo.nodes[node])
        if not bgp:
            return {}
        version = parse_version(f"version {release or EXPORT_RELEASE}")
        context = {"node": node, "run_id": "export", "interfaces": topo.node_interfaces()[node],
                   "bgp": bgp}
        return {os.path.join(version.sysconfdir, name): text
                for name, text in container_configs(context, version).items()}


def wait_ready(daemons: List[Daemon], timeout: float) -> None:
    """Wait until each daemon's :attr:`~frr.daemon.Daemon.READY` socket is in
    its run directory; a daemon that exits first is an error with its output."""
    deadline = time.monotonic() + timeout
    pending = [d for d in daemons if d.READY]
    while pending:
        for d in pending:
            if d.pid() is None:
                raise ReadinessError(f"{d.node.name}: {d.NAME} exited before it served "
                                     f"({d.version.label}): {d.exit_detail()}")
        pending = [d for d in pending if not d.run_dir.has_socket(d.READY)]  # type: ignore[arg-type]
        if not pending:
            return
        if time.monotonic() > deadline:
            d = pending[0]
            raise ReadinessError(f"{d.node.name}: {d.NAME} socket {d.READY} did not appear "
                                 f"within {timeout:.0f} s in {d.dir} ({len(pending)} daemons "
                                 f"waiting)")
        time.sleep(0.02)


def frr_host_dirs(version: FrrVersion) -> None:
    """Make sure the directories each daemon's mount prologue mounts over exist
    (FRR 10): FRR's config directory comes with the package; its run-state and
    lib-state directories are made here when missing, as the package's
    tmpfiles rule (``d /run/frr 0755 frr frr``) and FRR itself would. Nothing
    is written into them: each daemon sees its node's own in their place."""
    if not os.path.isdir(version.sysconfdir):
        raise LabError(f"{version.label}: its config directory {version.sysconfdir} is missing "
                       f"(is the frr package installed?)")
    uid, gid = frr_ids()
    for path in (version.runstatedir, version.libstatedir):
        if os.path.isdir(path):
            continue
        log.info("creating %s (owner frr, 0755), as FRR's package would", path)
        os.makedirs(path, 0o755, exist_ok=True)
        if uid >= 0:
            os.chown(path, uid, gid)


def unnumbered_pairs(topo) -> List[Tuple[str, str, str, str]]:
    """``(node, intf, peer, peer_intf)`` for each end of a link whose both ends
    run an unnumbered BGP session on it."""
    out = []
    for _, na, ia, nb, ib in topo.interfaces():
        a, b = bgp_of(topo.nodes[na]), bgp_of(topo.nodes[nb])
        if a and b and ia in a.unnumbered and ib in b.unnumbered:
            out += [(na, ia, nb, ib), (nb, ib, na, ia)]
    return out


def link_locals(ip_j_addr: str) -> Dict[str, Tuple[str, str]]:
    """``{interface: (MAC, IPv6 link-local)}`` from ``ip -j addr show`` output;
    values are checked (a MAC, an fe80::/10 address) before anyone uses them."""

    from nslab.model.fields import MAC_RE
    out: Dict[str, Tuple[str, str]] = {}
    for link in json.loads(ip_j_addr or "[]"):
        mac = str(link.get("address", ""))
        if not MAC_RE.fullmatch(mac):
            continue
        for a in link.get("addr_info", []):
            if a.get("family") != "inet6":
                continue
            try:
                addr = ipaddress.IPv6Address(str(a.get("local", "")))
            except ValueError:
                continue
            if addr.is_link_local:
                out[str(link.get("ifname"))] = (mac, str(addr))
                break
    return out


def pin_peer_neighbours(lab: ExtendedLab) -> int:
    """Give every unnumbered BGP session's peer a permanent IPv6 neighbour entry
    (its link-local address and MAC, read from the kernel). Returns how many.

    Why: the kernel's IPv6 neighbour table is one table for every namespace,
    and ``net.ipv6.neigh.default.gc_thresh3`` (1024, a host-global sysctl the
    lab must not change) caps its entries. Each session end keeps its peer's
    entry fresh (keepalives every second), so garbage collection cannot free
    it: at 8 spines x 64 servers the 1024 session ends fill the table, every
    router advertisement then fails to send (``sendmsg`` EINVAL, counted as
    ``Ip6OutNoRoutes``; dmesg: "ndisc_cache: neighbor table overflow!"), and
    the servers that came last never learn their peers. Permanent entries do
    not count against the cap, and the multicast entries left are freed as
    soon as the table fills."""
    from nslab.runtime.proc import NetnsJob, run_in_namespaces
    from nslab.model.render import line, text
    # a peer on another host (a lab that spans hosts) is learnt as usual
    pairs = [p for p in unnumbered_pairs(lab.topology) if lab.is_local(p[0]) and lab.is_local(p[2])]
    nodes = sorted({n for n, _, _, _ in pairs})
    if not nodes:
        return 0
    need: Dict[str, set] = {}
    for _, _, peer, peer_intf in pairs:
        need.setdefault(peer, set()).add(peer_intf)
    # A veth's link-local address comes when the kernel's link watcher sees the
    # carrier, up to a second after both ends are up: wait for them (bounded).
    ll: Dict[str, Dict[str, Tuple[str, str]]] = {}
    deadline = time.monotonic() + 10
    while True:
        todo = [n for n in nodes if not need.get(n, set()) <= set(ll.get(n, {}))]
        if not todo or time.monotonic() > deadline:
            break
        res = run_in_namespaces([NetnsJob(lab[n].netns, ["ip", "-j", "addr", "show"],
                                          where=f"{n}: link-local addresses")
                                 for n in todo], run_id=lab.run_id)
        ll.update({n: link_locals(r.stdout) for n, r in zip(todo, res)})
        if any(not need.get(n, set()) <= set(ll[n]) for n in todo):
            time.sleep(0.1)
    lines: Dict[str, List[str]] = {}
    for node, intf, peer, peer_intf in pairs:
        if peer_intf not in ll.get(peer, {}):
            log.warning("%s: no link-local address on %s after 10 s; its neighbour is not "
                        "pinned", peer, peer_intf)
            continue
        mac, addr = ll[peer][peer_intf]
        lines.setdefault(node, []).append(
            line("neigh", "replace", addr, "dev", intf, "lladdr", mac, "nud", "permanent"))
    run_in_namespaces([NetnsJob(lab[n].netns, ["ip", "-batch", "-"], text(ls),
                                f"{n}: pinning BGP peers' neighbours")
                       for n, ls in lines.items()], run_id=lab.run_id)
    return sum(len(v) for v in lines.values())


def _each(calls: List, workers: Optional[int] = None) -> None:
    """Call each function, a few at once (they wait on child processes);
    re-raise the first failure in call order."""
    from concurrent.futures import ThreadPoolExecutor
    if not calls:
        return
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        futures = [pool.submit(c) for c in calls]
    for f in futures:
        f.result()


def frr_of(lab: "LabLike") -> FrrExtension:
    """The FRR extension of a running lab."""
    return lab.extension("frr")  # MultiLab answers with a stand-in (its routers, start time)


def wait_for_ecmp(lab: "LabLike", expect: Dict[str, Dict[str, int]],
                  timeout: float = 30.0) -> float:
    """Poll until every ``node: {prefix: nexthops}`` holds; return the seconds it took
    from FRR start. On timeout raise with the BGP summary and the routes seen."""
    frr = frr_of(lab)
    t0 = frr.started_at if frr.started_at is not None else time.monotonic()
    deadline = time.monotonic() + timeout
    names = list(expect)

    def check(nodes: List[str]) -> List[tuple]:
        out = []
        for node, table in zip(nodes, lab.route_tables(nodes)):
            out += [(node, p, n, table.get(p, 0)) for p, n in expect[node].items()
                    if table.get(p, 0) < n]
        return out

    # Poll only the nodes still missing routes (on a loaded 80-router fabric a
    # full round took seconds and so delayed the answer); when none is left,
    # the time is taken and every node is checked once more before it counts.
    pending = list(names)
    while True:
        missing = check(pending)
        done_at = time.monotonic()
        pending = sorted({m[0] for m in missing}, key=names.index)
        if not pending:
            missing = check(names)
            if not missing:
                return done_at - t0
            pending = sorted({m[0] for m in missing}, key=names.index)
        if time.monotonic() > deadline:
            node, prefix, want, got = missing[0]
            summary = frr.routers[node].vtysh("show bgp summary")
            seen = lab[node].run(["ip", "route"]).stdout
            raise ReadinessError(
                f"{node}: route {prefix} has {got} of {want} nexthops after {timeout:.0f} s "
                f"({len(missing)} routes missing)\n--- bgp summary\n{summary}\n--- routes\n{seen}")
        time.sleep(0.05 if len(pending) < 16 else 0.1)
