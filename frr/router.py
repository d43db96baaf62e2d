"""FRR on the nodes of a lab: directories, daemons in order, readiness.

A node takes part when its topology options carry ``bgp`` (a typed
:class:`~nslab.fields.BgpOptions`)::

    bgp: {asn: 65001, router_id: 10.0.200.1, unnumbered: [server1-eth0, ...],
          networks: [10.0.200.1/32]}

The lab extension (:class:`FrrExtension`) starts the daemons after the core
has built the namespaces and stops them, by pid file, before the namespaces go.
"""
from __future__ import annotations

import json
import logging
import os
import time
from typing import TYPE_CHECKING, Dict, List, Optional

from nslab.errors import ReadinessError
from nslab.extension import Extension
from nslab.proc import wait_path

from .daemon import Bfdd, Bgpd, Daemon, Zebra, _chown_frr

if TYPE_CHECKING:  # pragma: no cover
    from nslab.fields import BgpOptions
    from nslab.lab import Lab
    from nslab.node import LabNode
    from nslab.plan import BuildPlan

log = logging.getLogger(__name__)


def node_dir(lab: "Lab", node: str) -> str:
    return os.path.join(lab.workdir, "frr", node)


class FrrRouter:
    """The FRR daemons of one node."""

    DAEMONS = (Zebra, Bgpd)

    def __init__(self, lab: "Lab", node: "LabNode", bgp: "BgpOptions") -> None:
        self.lab = lab
        self.node = node
        self.dir = node_dir(lab, node.name)
        ctx = {"node": node.name, "run_id": lab.run_id, "interfaces": list(node.intfs),
               "bgp": bgp}
        kinds = list(self.DAEMONS) + ([Bfdd] if bgp.bfd else [])
        self.daemons: List[Daemon] = [cls(node, self.dir, ctx) for cls in
                                      sorted(kinds, key=lambda c: c.ORDER)]

    def daemon(self, name: str) -> Daemon:
        """The daemon called ``name`` (``zebra``, ``bgpd``, ``bfdd``)."""
        for d in self.daemons:
            if d.NAME == name:
                return d
        raise KeyError(f"{self.node.name} runs no {name} (it runs "
                       f"{', '.join(d.NAME for d in self.daemons)})")

    def prepare(self) -> None:
        os.makedirs(self.dir, exist_ok=True)
        os.chmod(self.dir, 0o770)
        _chown_frr(self.dir)
        for d in self.daemons:
            d.write_config()
        for d in self.daemons:
            d.check()

    def start(self) -> None:
        for d in self.daemons:
            d.start()
            if d.NAME == "zebra":
                wait_path(d.zserv_path, 10, f"{self.node.name}: zebra socket")

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

    def __init__(self) -> None:
        self.routers: Dict[str, FrrRouter] = {}
        self.started_at: Optional[float] = None

    def needs(self, topo) -> List[str]:
        return ["frr"]

    def build(self, lab: "Lab", plan: "BuildPlan") -> None:
        topo = lab.topology
        self.routers = {n: FrrRouter(lab, lab[n], topo.nodes[n].bgp)  # type: ignore[arg-type]
                        for n, node in topo.nodes.items() if node.bgp}
        for r in self.routers.values():
            r.prepare()
        self.started_at = time.monotonic()
        for r in self.routers.values():
            r.start()

    def teardown(self, lab: "Lab") -> List[str]:
        for r in self.routers.values():
            r.stop()
        return []


def frr_of(lab: "Lab") -> FrrExtension:
    """The FRR extension of a running lab."""
    return lab.extension("frr")  # type: ignore[return-value]


def routes(node: "LabNode", prefix: Optional[str] = None) -> List[Dict]:
    """The node's IPv4 routes as ``ip -j route`` gives them."""
    argv = ["ip", "-j", "route", "show"] + ([prefix] if prefix else [])
    return json.loads(node.run(argv).stdout or "[]")


def _prefix(dst: str) -> str:
    """``ip -j route`` prints host routes without their /32."""
    return dst if "/" in dst or dst == "default" else f"{dst}/32"


def nexthop_count(route: Dict) -> int:
    return len(route.get("nexthops", [])) or (1 if route.get("gateway") or route.get("via") else 0)


def wait_for_ecmp(lab: "Lab", expect: Dict[str, Dict[str, int]], timeout: float = 30.0) -> float:
    """Poll until every ``node: {prefix: nexthops}`` holds; return the seconds it took
    from FRR start. On timeout raise with the BGP summary and the routes seen."""
    frr = frr_of(lab)
    t0 = frr.started_at if frr.started_at is not None else time.monotonic()
    deadline = time.monotonic() + timeout
    while True:
        missing = []
        for node, prefixes in expect.items():
            table = {_prefix(r["dst"]): nexthop_count(r) for r in routes(lab[node])}
            for prefix, n in prefixes.items():
                if table.get(prefix, 0) < n:
                    missing.append((node, prefix, n, table.get(prefix, 0)))
        if not missing:
            return time.monotonic() - t0
        if time.monotonic() > deadline:
            node, prefix, want, got = missing[0]
            summary = frr.routers[node].vtysh("show bgp summary")
            seen = lab[node].run(["ip", "route"]).stdout
            raise ReadinessError(
                f"{node}: route {prefix} has {got} of {want} nexthops after {timeout:.0f} s "
                f"({len(missing)} routes missing)\n--- bgp summary\n{summary}\n--- routes\n{seen}")
        time.sleep(0.05)
