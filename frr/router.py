"""FRR on the nodes of a lab: directories, daemons in order, readiness.

A node takes part when its topology params carry ``bgp``::

    {"asn": 65001, "router_id": "10.0.200.1", "unnumbered": ["server1-eth0", ...],
     "networks": ["10.0.200.1/32"], "loopback": "10.0.200.1/32"}
"""
from __future__ import annotations

import json
import logging
import os
import time
from typing import TYPE_CHECKING, Dict, List, Optional

from nslab import caps
from nslab.errors import CapabilityError, ReadinessError

from .daemon import Bgpd, Daemon, Zebra, _chown_frr

if TYPE_CHECKING:  # pragma: no cover
    from nslab.lab import Lab
    from nslab.node import LabNode

log = logging.getLogger(__name__)

DEFAULTS = {"keepalive": 1, "holdtime": 3, "coalesce_time": 100, "maximum_paths": 64}


def node_dir(lab: "Lab", node: str) -> str:
    return os.path.join(lab.workdir, "frr", node)


class FrrRouter:
    """The FRR daemons of one node."""

    DAEMONS = (Zebra, Bgpd)

    def __init__(self, lab: "Lab", node: "LabNode", bgp: Dict) -> None:
        self.lab = lab
        self.node = node
        self.dir = node_dir(lab, node.name)
        ctx = {"node": node.name, "run_id": lab.run_id, "interfaces": list(node.intfs),
               "bgp": {**DEFAULTS, "networks": [], "unnumbered": [], **bgp}}
        self.daemons: List[Daemon] = [cls(node, self.dir, ctx) for cls in
                                      sorted(self.DAEMONS, key=lambda c: c.ORDER)]

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
                _wait_path(d.zserv_path, 10, f"{self.node.name}: zebra socket")

    def stop(self) -> None:
        for d in reversed(self.daemons):
            try:
                d.stop()
            except Exception as exc:  # noqa: BLE001 - teardown goes on
                log.warning("%s: stopping %s: %s", self.node.name, d.NAME, exc)

    def vtysh(self, command: str) -> str:
        return self.node.run(["vtysh", "--vty_socket", self.dir, "-c", command], check=False,
                             timeout=20).stdout


def _wait_path(path: str, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise ReadinessError(f"{what} did not appear within {timeout} s ({path})")
        time.sleep(0.02)


def start_frr(lab: "Lab") -> Dict[str, FrrRouter]:
    """Start FRR on every node whose params carry ``bgp``; stop them at teardown."""
    nodes = [n for n in lab.nodes.values() if lab.topology.nodes[n.name].params.get("bgp")]
    if not nodes:
        return {}
    found = caps.probe()
    if not found["frr"].ok:
        raise CapabilityError("this topology runs BGP, but FRR is not installed (apt install frr)")
    routers = {n.name: FrrRouter(lab, n, lab.topology.nodes[n.name].params["bgp"]) for n in nodes}
    lab.on_teardown(lambda: [r.stop() for r in routers.values()])
    for r in routers.values():
        r.prepare()
    t0 = time.monotonic()
    for r in routers.values():
        r.start()
    lab.frr_started_at = t0  # type: ignore[attr-defined]
    lab.frr = routers  # type: ignore[attr-defined]
    return routers


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
    t0 = getattr(lab, "frr_started_at", time.monotonic())
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
            summary = lab.frr[node].vtysh("show bgp summary")  # type: ignore[attr-defined]
            seen = lab[node].run(["ip", "route"]).stdout
            raise ReadinessError(
                f"{node}: route {prefix} has {got} of {want} nexthops after {timeout:.0f} s "
                f"({len(missing)} routes missing)\n--- bgp summary\n{summary}\n--- routes\n{seen}")
        time.sleep(0.05)
