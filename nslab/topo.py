"""Topologies as data: nodes, links, shaping and addresses, validated without root.

A :class:`Topology` can be written directly, converted from a Mininet ``Topo``
(:meth:`Topology.from_mininet`) or loaded from YAML (:meth:`Topology.from_yaml`).
Nothing here touches the system.
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Tuple

from .errors import TopologyError
from .shaping import Shaping

#: Node names become interface names (``<node>-eth<N>``, 15 characters at most).
NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,8}$")
KINDS = ("host", "switch", "router")
SWITCH_TYPES = ("bridge", "ovs")
#: Keys of a link's options that describe shaping (Mininet TCLink names).
SHAPING_KEYS = ("bw", "delay", "jitter", "loss", "max_queue_size", "qdisc", "burst",
                "overhead", "framing")


def check_name(name: Any, what: str = "node name") -> str:
    """Return ``name`` if it is safe as a namespace and interface name, else raise."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise TopologyError(
            f"{what} {name!r} is not a safe interface name: use 1-9 letters, digits or _, "
            "starting with a letter")
    return name


@dataclass
class Node:
    """A node of the topology.

    Attributes:
        name: the node's name (also its namespace suffix and interface prefix).
        kind: ``host``, ``switch`` or ``router`` (a host with IP forwarding).
        params: free options: ``ip`` (host default address, CIDR), ``type`` for
            switches (``bridge``/``ovs``), ``stp``, ``dpid``, ``sysctls``, ``routes``,
            ``cpu`` and anything a topology-specific builder reads (e.g. ``frr``).
    """

    name: str
    kind: str = "host"
    params: Dict[str, Any] = field(default_factory=dict)

    @property
    def is_switch(self) -> bool:
        return self.kind == "switch"


@dataclass
class Link:
    """A point-to-point link between two nodes (a veth pair when built).

    Attributes:
        a, b: node names.
        params1, params2: per-end options, e.g. ``{"ip": "10.0.0.1/24"}``; an
            ``intf`` key names the interface.
        shaping: applied to both directions unless ``shaping2`` differs.
        shaping2: the b→a direction, if different.
    """

    a: str
    b: str
    params1: Dict[str, Any] = field(default_factory=dict)
    params2: Dict[str, Any] = field(default_factory=dict)
    shaping: Optional[Shaping] = None
    shaping2: Optional[Shaping] = None


@dataclass
class Topology:
    """A whole topology: data only.

    Attributes:
        name: a label.
        nodes: nodes by name, in insertion order.
        links: links in insertion order.
        switch_type: default type of ``switch`` nodes (``bridge`` or ``ovs``).
        auto_ip: give hosts without an address ``10.0.0.N/8`` in insertion order,
            like Mininet.
    """

    name: str = "custom"
    nodes: Dict[str, Node] = field(default_factory=dict)
    links: List[Link] = field(default_factory=list)
    switch_type: str = "bridge"
    auto_ip: bool = True
    ip_base: str = "10.0.0.0/8"

    # -- building -----------------------------------------------------------------
    def add_node(self, name: str, kind: str = "host", **params: Any) -> str:
        check_name(name)
        if kind not in KINDS:
            raise TopologyError(f"node {name}: unknown kind {kind!r} (use {', '.join(KINDS)})")
        if name in self.nodes:
            raise TopologyError(f"duplicate node name {name!r}")
        self.nodes[name] = Node(name, kind, dict(params))
        return name

    def add_host(self, name: str, **params: Any) -> str:
        return self.add_node(name, "host", **params)

    def add_switch(self, name: str, **params: Any) -> str:
        return self.add_node(name, "switch", **params)

    def add_router(self, name: str, **params: Any) -> str:
        return self.add_node(name, "router", **params)

    def add_link(self, a: str, b: str, params1: Optional[Dict[str, Any]] = None,
                 params2: Optional[Dict[str, Any]] = None, **opts: Any) -> Link:
        """Add a link; ``opts`` takes TCLink names (``bw`` Mbit/s, ``delay``, ``loss``...)."""
        shaping_opts = {k: opts.pop(k) for k in list(opts) if k in SHAPING_KEYS}
        if opts:
            raise TopologyError(f"link {a}-{b}: unknown option(s) {', '.join(sorted(opts))}")
        shaping = Shaping.from_params(**shaping_opts) if shaping_opts else None
        link = Link(a, b, dict(params1 or {}), dict(params2 or {}),
                    None if shaping is None or shaping.empty else shaping)
        self.links.append(link)
        return link

    # Mininet spellings, so one build function serves a Mininet Topo and a Topology.
    def addHost(self, name: str, **params: Any) -> str:  # noqa: N802
        return self.add_host(name, **params)

    def addSwitch(self, name: str, **params: Any) -> str:  # noqa: N802
        return self.add_switch(name, **params)

    def addLink(self, node1: str, node2: str, **opts: Any) -> Link:  # noqa: N802
        return self.add_link(node1, node2, opts.pop("params1", None), opts.pop("params2", None), **opts)

    # -- queries ------------------------------------------------------------------
    def hosts(self) -> List[str]:
        return [n for n, node in self.nodes.items() if node.kind != "switch"]

    def switches(self) -> List[str]:
        return [n for n, node in self.nodes.items() if node.kind == "switch"]

    def switch_type_of(self, name: str) -> str:
        return self.nodes[name].params.get("type", self.switch_type)

    def needs(self) -> List[str]:
        """Capabilities this topology needs (names as in :mod:`nslab.caps`)."""
        need = {"netns", "veth"}
        for name in self.switches():
            need.add("ovs" if self.switch_type_of(name) == "ovs" else "bridge")
        for link in self.links:
            for s in (link.shaping, link.shaping2):
                if s and s.rate is not None:
                    need.add(s.qdisc)
                if s and s.needs_netem:
                    need.add("netem")
        return sorted(need)

    def interfaces(self) -> Iterator[Tuple[Link, str, str, str, str]]:
        """Yield ``(link, node_a, intf_a, node_b, intf_b)`` with Mininet-style names.

        Hosts/routers number from ``eth0``, switches from ``eth1``, as in Mininet.
        """
        count: Dict[str, int] = {}
        for link in self.links:
            names = []
            for node, params in ((link.a, link.params1), (link.b, link.params2)):
                first = 1 if self.nodes[node].is_switch else 0
                n = count.get(node, first)
                count[node] = n + 1
                names.append(params.get("intf") or f"{node}-eth{n}")
            yield link, link.a, names[0], link.b, names[1]

    def addresses(self) -> Dict[Tuple[str, str], str]:
        """Map ``(node, interface)`` to CIDR address after auto-addressing."""
        out: Dict[Tuple[str, str], str] = {}
        first_intf: Dict[str, str] = {}
        for link, na, ia, nb, ib in self.interfaces():
            for node, intf, params in ((na, ia, link.params1), (nb, ib, link.params2)):
                first_intf.setdefault(node, intf)
                if params.get("ip"):
                    out[(node, intf)] = params["ip"]
        net = ipaddress.ip_network(self.ip_base, strict=False)
        used = {ipaddress.ip_interface(v).ip for v in out.values()}
        nxt = 1
        for name in self.hosts():
            node = self.nodes[name]
            intf = first_intf.get(name)
            if intf is None or (name, intf) in out:
                continue
            if node.params.get("ip"):
                out[(name, intf)] = node.params["ip"]
            elif self.auto_ip and node.kind == "host":
                while True:
                    ip = net.network_address + nxt
                    nxt += 1
                    if ip not in used:
                        break
                out[(name, intf)] = f"{ip}/{net.prefixlen}"
        return out

    # -- validation ---------------------------------------------------------------
    def validate(self) -> "Topology":
        """Check the topology; raise :class:`TopologyError` naming the first problem."""
        if not self.nodes:
            raise TopologyError(f"topology {self.name!r} has no nodes")
        if self.switch_type not in SWITCH_TYPES:
            raise TopologyError(f"unknown switch type {self.switch_type!r} "
                                f"(use {' or '.join(SWITCH_TYPES)})")
        for name, node in self.nodes.items():
            check_name(name)
            if node.kind not in KINDS:
                raise TopologyError(f"node {name}: unknown kind {node.kind!r}")
            if node.is_switch and self.switch_type_of(name) not in SWITCH_TYPES:
                raise TopologyError(f"switch {name}: unknown type {self.switch_type_of(name)!r} "
                                    f"(use {' or '.join(SWITCH_TYPES)})")
        seen_pairs = set()
        for link in self.links:
            for end in (link.a, link.b):
                if end not in self.nodes:
                    raise TopologyError(f"link {link.a}-{link.b}: unknown node {end!r}")
            if link.a == link.b:
                raise TopologyError(f"link {link.a}-{link.b}: a node cannot link to itself")
            seen_pairs.add((link.a, link.b))
        intf_seen = set()
        for link, na, ia, nb, ib in self.interfaces():
            for node, intf in ((na, ia), (nb, ib)):
                if len(intf) > 15:
                    raise TopologyError(f"node {node}: interface name {intf!r} is longer than 15")
                if (node, intf) in intf_seen:
                    raise TopologyError(f"node {node}: duplicate interface {intf!r}")
                intf_seen.add((node, intf))
        ips: Dict[str, Tuple[str, str]] = {}
        for (node, intf), cidr in self.addresses().items():
            try:
                iface = ipaddress.ip_interface(cidr)
            except ValueError:
                raise TopologyError(f"node {node}: bad address {cidr!r}") from None
            if "/" not in str(cidr):
                raise TopologyError(f"node {node}: address {cidr!r} needs a prefix length, "
                                    "e.g. 10.0.0.1/24")
            key = str(iface.ip)
            if key in ips:
                raise TopologyError(f"address {key} is used twice ({ips[key][0]} and {node})")
            ips[key] = (node, intf)
        return self

    # -- conversions --------------------------------------------------------------
    @classmethod
    def from_mininet(cls, topo: Any, name: str = "", switch_type: str = "bridge") -> "Topology":
        """Convert a Mininet ``Topo`` (nodes, node info, links with info)."""
        t = cls(name=name or type(topo).__name__, switch_type=switch_type)
        for n in topo.nodes(sort=False):
            info = dict(topo.nodeInfo(n))
            is_switch = info.pop("isSwitch", False)
            info.pop("cls", None)
            kind = "switch" if is_switch else info.pop("kind", "host")
            t.add_node(n, kind, **info)
        for a, b, info in topo.links(sort=False, withKeys=False, withInfo=True):
            info = dict(info)
            # Mininet orders ends as node1/node2 in the info dict.
            n1, n2 = info.pop("node1", a), info.pop("node2", b)
            p1, p2 = info.pop("params1", {}), info.pop("params2", {})
            for key in ("port1", "port2", "key", "cls", "intfName1", "intfName2"):
                val = info.pop(key, None)
                if key == "intfName1" and val:
                    p1["intf"] = val
                if key == "intfName2" and val:
                    p2["intf"] = val
            t.add_link(n1, n2, p1, p2, **info)
        return t.validate()

    @classmethod
    def from_yaml(cls, path: str) -> "Topology":
        """Load a topology from a YAML file; errors name the file and line."""
        from .topo_yaml import load_yaml_topology
        return load_yaml_topology(path)

    def summary(self) -> List[Tuple[str, str, str]]:
        """Rows ``(node, kind, addresses)`` for display."""
        addrs = self.addresses()
        rows = []
        for name, node in self.nodes.items():
            kind = node.kind if not node.is_switch else f"switch ({self.switch_type_of(name)})"
            ips = ", ".join(f"{intf} {ip}" for (n, intf), ip in addrs.items() if n == name)
            rows.append((name, kind, ips))
        return rows
