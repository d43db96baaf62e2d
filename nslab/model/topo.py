"""Topologies as data: nodes, links, shaping and addresses, validated without root.

A :class:`Topology` is a pydantic model: every field is parsed into a typed
value (:mod:`nslab.model.fields`) when it is set, and unknown keys are refused. It can
be written directly with Mininet-style builder calls, converted from a Mininet
``Topo`` (:meth:`Topology.from_mininet`) or loaded from YAML
(:meth:`Topology.from_yaml`); ``nslab topo schema`` prints the JSON Schema of
the YAML format. Nothing here touches the system. Its parts (nodes, links) are
:mod:`nslab.model.topo_parts`; the one-line messages about a field are
:mod:`nslab.model.topo_errors`.
"""
from __future__ import annotations

import ipaddress
from typing import Any, Dict, Iterator, List, Optional, Tuple

from pydantic import (BaseModel, ConfigDict, Field, PrivateAttr, StrictBool, StringConstraints,
                      ValidationError, field_validator, model_validator)
from typing_extensions import Annotated

from ..errors import TopologyError
from .fields import NAME_RE, SYSCTL_KEY_RE, Label, NodeName, check_name
from .limits import active, topology_size
from .topo_errors import explain, fail, field_path, loc_path
from .kinds import BRIDGE, TYPED_SWITCH_OPTIONS, KindError, switch_types
from .kinds import switch_type as switch_type_named
from .topo_parts import (HOST_ONLY, KINDS, NO_IPV6, OPTIONS, SWITCH_ONLY, SWITCH_TYPES, Link,
                         LinkEnd, Node, SwitchTypeName)
from .topo_yaml import LineDict, line_of, read_yaml

__all__ = ["Topology", "Node", "Link", "LinkEnd", "check_name", "KINDS", "SWITCH_TYPES",
           "NO_IPV6", "explain", "field_path", "loc_path", "raw_size", "schema"]


class Topology(BaseModel):
    """A whole topology: data only.

    Attributes:
        name: a label.
        nodes: nodes by name, in insertion order.
        links: links in insertion order.
        switch_type: default type of ``switch`` nodes (``bridge``, or a type a
            registered kind adds, such as ``ovs``; the YAML key is ``switch``).
        auto_ip: give hosts without an address ``ip_base`` + N in insertion
            order, like Mininet.
        ip_base: the network auto addresses come from.
        placement: for a lab across machines, nodes pinned to a host (the YAML
            key is ``hosts``: ``{node: ssh destination}``); the others are
            placed automatically (see :mod:`nslab.model.multihost`).
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True, validate_assignment=True,
                              defer_build=True)

    name: Label = "custom"
    switch_type: SwitchTypeName = Field(BRIDGE.name, alias="switch")
    auto_ip: StrictBool = True
    ipv6: StrictBool = Field(True, description="false: no IPv6 on host and switch links (no "
                             "link-local addresses, so no DAD, MLD or router solicitations)")
    ip_base: Annotated[ipaddress.IPv4Network, Field(description="IPv4 network/prefix")] = \
        ipaddress.IPv4Network("10.0.0.0/8")
    nodes: Dict[NodeName, Node] = Field(default_factory=dict)
    links: List[Link] = Field(default_factory=list)
    placement: Dict[NodeName, Annotated[str, StringConstraints(
        pattern=r"^(?:[a-z_][a-z0-9_-]{0,31}@)?[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")]] = Field(
        default_factory=dict, alias="hosts")
    #: The file this topology came from and its parsed document, so that a
    #: problem found later (e.g. against the running kernel) names the line.
    _source: Optional[Tuple[str, Any]] = PrivateAttr(default=None)

    @field_validator("ip_base", mode="before")
    @classmethod
    def _ip_base(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return ipaddress.IPv4Network(value, strict=True)
            except ValueError as exc:
                raise ValueError(f"{value!r} is not an IPv4 network ({exc})") from None
        if not isinstance(value, ipaddress.IPv4Network):
            # a bool or a number would be taken as an address (false: 0.0.0.0/32)
            raise ValueError(f"must be an IPv4 network such as '10.0.0.0/8', not "
                             f"{type(value).__name__} {value!r}")
        return value

    @field_validator("nodes", mode="before")
    @classmethod
    def _nodes(cls, value: Any) -> Any:
        if isinstance(value, dict):  # YAML writes an empty node as `h1:` (None)
            return {k: ({} if v is None else v) for k, v in value.items()}
        return value

    @model_validator(mode="after")
    def _whole(self) -> "Topology":
        self._check()
        return self

    # -- building -----------------------------------------------------------------
    def add_node(self, name: str, kind: str = "host", **params: Any) -> str:
        """Add a node; ``params`` are its options (see :class:`Node`)."""
        check_name(name)
        if name in self.nodes:
            raise TopologyError(f"duplicate node name {name!r}")
        try:
            node = Node.model_validate({"kind": kind, **params})
        except ValidationError as exc:
            raise TopologyError(explain(exc, ("nodes", name), Node)) from None
        self.nodes[name] = node
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
        unknown = sorted(set(opts) - set(Link.model_fields))
        if unknown:
            raise TopologyError(f"links.{len(self.links)}: link {a}-{b}: unknown option(s) "
                                f"{', '.join(unknown)} "
                                f"(allowed: {', '.join(k for k in Link.model_fields if k not in ('a', 'b'))})")
        data = {"a": a, "b": b, "params1": params1 or {}, "params2": params2 or {},
                **{k: v for k, v in opts.items() if v is not None}}
        try:
            link = Link.model_validate(data)
        except ValidationError as exc:
            raise TopologyError(explain(exc, ("links", len(self.links)), Link,
                                        f"link {a}-{b}")) from None
        self.links.append(link)
        return link

    # Mininet spellings, so one build function serves a Mininet Topo and a Topology.
    def addHost(self, name: str, **params: Any) -> str:  # noqa: N802
        return self.add_host(name, **params)

    def addSwitch(self, name: str, **params: Any) -> str:  # noqa: N802
        return self.add_switch(name, **params)

    def addLink(self, node1: str, node2: str, **opts: Any) -> Link:  # noqa: N802
        return self.add_link(node1, node2, opts.pop("params1", None), opts.pop("params2", None),
                             **opts)

    def without_ipv6(self) -> "Topology":
        """A copy with :attr:`ipv6` off: the kernel generates no IPv6
        link-local address on any host or switch link (``addrgenmode
        none``), so those send no DAD, MLD or router solicitations. On one
        bridge every host's are flooded to every port: a thousand hosts kept
        two CPUs 60 % busy for seconds after the build, and slowed its
        teardown 3x. Routers keep IPv6 (BGP unnumbered needs it). A host or
        switch with an IPv6 address or route is refused."""
        return self.model_copy(update={"ipv6": False}, deep=True).validate()

    def with_switch_type(self, switch_type: str) -> "Topology":
        """A copy whose default switch type is ``switch_type`` (this one is
        unchanged); :class:`TopologyError` for a type no installed kind has."""
        try:
            switch_type_named(switch_type)
        except KindError as exc:
            raise TopologyError(str(exc)) from None
        return self.model_copy(update={"switch_type": switch_type}, deep=True).validate()

    # -- queries ------------------------------------------------------------------
    def hosts(self) -> List[str]:
        return [n for n, node in self.nodes.items() if node.kind != "switch"]

    def switches(self) -> List[str]:
        return [n for n, node in self.nodes.items() if node.kind == "switch"]

    def switch_type_of(self, name: str) -> str:
        return self.nodes[name].type or self.switch_type

    def needs(self) -> List[str]:
        """Capabilities this topology needs (names as in :mod:`nslab.runtime.caps`)."""
        need = {"netns", "veth"}
        for name in self.switches():
            need.add(switch_type_named(self.switch_type_of(name)).capability)
        for link in self.links:
            s = link.shaping
            if s and s.rate is not None:
                need.add(s.qdisc)
            if s and s.needs_netem:
                need.add("netem")
        return sorted(need)

    def features(self) -> set:
        """What this topology needs beyond the core (namespaces, veths, Linux
        bridges, addresses, routes, shaping): ``switch:<type>`` for other switch
        types (``switch:ovs``) and the features of the registered node options
        its nodes use (``bgp``). Extensions provide them."""
        out = {f"switch:{self.switch_type_of(s)}" for s in self.switches()
               if self.switch_type_of(s) != BRIDGE.name}
        for key, opt in OPTIONS.items():
            if opt.feature and any(getattr(n, key) is not None for n in self.nodes.values()):
                out.add(opt.feature)
        return out

    def sysctls(self) -> Dict[str, Dict[str, str]]:
        """Every node's sysctls, with the forwarding a router implies."""
        out: Dict[str, Dict[str, str]] = {}
        for name, node in self.nodes.items():
            values = dict(node.sysctls)
            if node.kind == "router":
                values.setdefault("net.ipv4.ip_forward", "1")
                values.setdefault("net.ipv6.conf.all.forwarding", "1")
            if values:
                out[name] = values
        return out

    def interfaces(self) -> Iterator[Tuple[Link, str, str, str, str]]:
        """Yield ``(link, node_a, intf_a, node_b, intf_b)`` with Mininet-style names.

        Hosts/routers number from ``eth0``, switches from ``eth1``, as in Mininet.
        """
        count: Dict[str, int] = {}
        for link in self.links:
            names = []
            for node, end in ((link.a, link.params1), (link.b, link.params2)):
                first = 1 if self.nodes[node].is_switch else 0
                n = count.get(node, first)
                count[node] = n + 1
                names.append(end.intf or f"{node}-eth{n}")
            yield link, link.a, names[0], link.b, names[1]

    def node_interfaces(self) -> Dict[str, List[str]]:
        """Each node's interface names, in link order."""
        out: Dict[str, List[str]] = {n: [] for n in self.nodes}
        for _, na, ia, nb, ib in self.interfaces():
            out[na].append(ia)
            out[nb].append(ib)
        return out

    def addresses(self) -> Dict[Tuple[str, str], Any]:
        """Map ``(node, interface)`` to its address (an ``ipaddress`` interface)
        after auto-addressing."""
        out: Dict[Tuple[str, str], Any] = {}
        first_intf: Dict[str, str] = {}
        for link, na, ia, nb, ib in self.interfaces():
            for end_node, intf, end in ((na, ia, link.params1), (nb, ib, link.params2)):
                first_intf.setdefault(end_node, intf)
                if end.ip is not None:
                    out[(end_node, intf)] = end.ip
        used = {v.ip for v in out.values()} | {n.ip.ip for n in self.nodes.values() if n.ip}
        nxt = 1
        for name in self.hosts():
            node = self.nodes[name]
            first = first_intf.get(name)
            if first is None or (name, first) in out:
                continue
            intf = first
            if node.ip is not None:
                out[(name, intf)] = node.ip
            elif self.auto_ip and node.kind == "host":
                while True:
                    if nxt >= self.ip_base.num_addresses - 1:
                        raise TopologyError(
                            f"auto addresses: {self.ip_base} has no room for host {name} "
                            f"({self.ip_base.num_addresses - 2} host addresses)")
                    ip = self.ip_base.network_address + nxt
                    nxt += 1
                    if ip not in used:
                        break
                out[(name, intf)] = ipaddress.IPv4Interface(f"{ip}/{self.ip_base.prefixlen}")
        return out

    def macs(self) -> Dict[Tuple[str, str], str]:
        """Map ``(node, interface)`` to a MAC given in the topology."""
        out: Dict[Tuple[str, str], str] = {}
        first: Dict[str, str] = {}
        for link, na, ia, nb, ib in self.interfaces():
            for node, intf, end in ((na, ia, link.params1), (nb, ib, link.params2)):
                first.setdefault(node, intf)
                if end.mac:
                    out[(node, intf)] = end.mac
        for name, intf in first.items():
            mac = self.nodes[name].mac
            if mac and (name, intf) not in out:
                out[(name, intf)] = mac
        return out

    def size(self) -> Tuple[int, int, int]:
        """(nodes, links, namespaces): a Linux bridge has a namespace of its own,
        a switch built in the root namespace (OVS) none."""
        ns = sum(1 for n in self.nodes if not self.nodes[n].is_switch
                 or switch_type_named(self.switch_type_of(n)).namespace)
        return len(self.nodes), len(self.links), ns

    # -- validation ---------------------------------------------------------------
    def validate(self) -> "Topology":  # type: ignore[override]
        """Check the whole topology; raise :class:`TopologyError` naming the first
        problem, or :class:`~nslab.model.limits.LimitError` if it is larger than the
        active limits allow (ready topologies and files are counted before they
        are built; this catches any other way of making one)."""
        topology_size(*self.size(), where=f"topology {self.name!r}")
        self._check()
        if not self.nodes:
            raise TopologyError(f"topology {self.name!r} has no nodes")
        return self

    def _check_ipv4_only(self) -> None:
        """With ``ipv6: false``: no IPv6 address or route on a host or switch."""
        v6: Dict[str, str] = {}
        for (n, _), a in self.addresses().items():
            if a.version == 6:
                v6.setdefault(n, str(a))
        for name, node in self.nodes.items():
            if node.kind == "router":
                continue
            bad = v6.get(name) or next((str(r.dst) for r in node.routes if r.family == 6), None)
            if bad:
                raise fail(("nodes", name), f"{bad} is IPv6, and the topology has ipv6: false "
                                             "(--no-ipv6)")

    def _check(self) -> None:
        """Cross-field checks (each field was already checked when it was set).

        Errors start with the field they are about (``nodes.h1.routes.0: ...``)."""
        for i, link in enumerate(self.links):
            for key, end in (("a", link.a), ("b", link.b)):
                if end not in self.nodes:
                    raise fail(("links", i, key), f"link {link.a}-{link.b}: unknown node {end!r}")
        for i, link in enumerate(self.links):
            for key, at, port in (("params1", link.a, link.params1), ("params2", link.b, link.params2)):
                if port.ip is not None and self.nodes[at].is_switch:
                    raise fail(("links", i, key, "ip"),
                                f"link {link.a}-{link.b}: {port.ip} is on a port of switch {at}, "
                                "which is layer 2 and never uses it: put the address on the "
                                "other end")
        for placed in self.placement:
            if placed not in self.nodes:
                raise fail(("hosts", placed), f"hosts: unknown node {placed!r}")
        if not self.ipv6:
            self._check_ipv4_only()
        intfs = self.node_interfaces()
        for owner, names in intfs.items():
            if len(set(names)) != len(names):
                dup = next(n for n in names if names.count(n) > 1)
                raise fail(("nodes", owner), f"node {owner}: duplicate interface {dup!r}")
        for name, node in self.nodes.items():
            where = ("nodes", name)
            if node.is_switch:
                self._check_switch(name, node, len(intfs[name]))
                continue
            mine = set(intfs[name]) | {"lo"}
            for r, route in enumerate(node.routes):
                if route.dev is not None and route.dev not in mine:
                    raise fail(where + ("routes", r), f"route to {route.dst} uses dev {route.dev}, "
                                f"which {name} does not have (it has {', '.join(sorted(mine))})")
            for key, opt in OPTIONS.items():
                value = getattr(node, key)
                problem = opt.check(value, name, sorted(mine)) \
                    if value is not None and opt.check else None
                if problem:
                    raise fail(where + (key,) + problem[0], problem[1])
            if (node.ip or node.mac) and not intfs[name]:
                raise fail(where + ("ip" if node.ip else "mac",),
                            f"{name} has no link to put its address on")
        ips: Dict[Any, str] = {}
        for (owner, _intf), iface in self.addresses().items():
            if iface.ip in ips:
                raise fail(("nodes", owner), f"address {iface.ip} is used twice "
                                              f"({ips[iface.ip]} and {owner})")
            ips[iface.ip] = owner
        macs: Dict[str, str] = {}
        for (owner, _intf), mac in self.macs().items():
            if mac in macs:
                raise fail(("nodes", owner), f"MAC {mac} is used twice ({macs[mac]} and {owner})")
            macs[mac] = owner

    def _check_switch(self, name: str, node: Node, ports: int) -> None:
        """A switch's port count and options against what its type takes."""
        types = switch_types()
        kind = switch_type_named(node.type or self.switch_type)
        where = ("nodes", name)
        if kind.max_ports is not None and ports > kind.max_ports:
            roomier = [t.name for t in types.values()
                       if t.max_ports is None or t.max_ports > ports]
            why = " (the kernel's BR_MAX_PORTS)" if kind is BRIDGE else ""
            raise fail(where, f"switch {name} has {ports} links; a {kind.label} holds at most "
                              f"{kind.max_ports} ports{why}: use "
                              + "".join(f"type: {t}, or " for t in roomier[:1]) + "more switches")
        bad = [k for k in TYPED_SWITCH_OPTIONS if getattr(node, k) and k not in kind.takes]
        if bad:
            takers = [t for t in types.values() if bad[0] in t.takes]
            raise fail(where + (bad[0],), f"{', '.join(bad)} apply to "
                       + (" or ".join(t.label for t in takers) or "no installed") + " switches "
                       + "only" + (f" (type: {' or '.join(t.name for t in takers)})"
                                   if takers else ""))
        for key, opt in OPTIONS.items():
            if getattr(node, key) is not None and opt.switch_types \
                    and kind.name not in opt.switch_types:
                raise fail(where + (key,), f"{key} applies to {' or '.join(opt.switch_types)} "
                                           f"switches only (type: {kind.name})")

    def locate(self, exc: TopologyError) -> TopologyError:
        """``exc`` with the file and line it is about, when this topology came
        from a file and ``exc`` carries a location."""
        if self._source is None or not exc.loc:
            return exc
        path, doc = self._source
        return TopologyError(f"{path}:{line_of(doc, exc.loc)}: {exc}", exc.loc)

    # -- conversions --------------------------------------------------------------
    @classmethod
    def from_mininet(cls, topo: Any, name: str = "", switch_type: str = "bridge") -> "Topology":
        """Convert a Mininet ``Topo`` (nodes, node info, links with info).

        Mininet's own options are mapped (``ip``, ``mac``, ``defaultRoute``,
        ``dpid``, ``stp``; on links ``bw``, ``delay``..., ``intfName1/2``,
        ``addr1/2``, ``params1/2``); Mininet classes (``cls``) and the options
        that only a Mininet class uses are refused with the option's name,
        never silently dropped, except ``cls`` itself: nslab builds every host
        the same way.
        """
        t = cls(name=name or type(topo).__name__, switch_type=switch_type)
        for n in topo.nodes(sort=False):
            info = dict(topo.nodeInfo(n))
            kind = "switch" if info.pop("isSwitch", False) else info.pop("kind", "host")
            info.pop("cls", None)
            route = info.pop("defaultRoute", None)
            if route is not None:
                info["routes"] = list(info.get("routes", [])) + [f"default {route}"]
            t.add_node(n, kind, **info)
        for a, b, info in topo.links(sort=False, withKeys=False, withInfo=True):
            info = dict(info)
            n1, n2 = info.pop("node1", a), info.pop("node2", b)
            p1 = dict(info.pop("params1", {}) or {})
            p2 = dict(info.pop("params2", {}) or {})
            for key in ("port1", "port2", "key", "cls"):
                info.pop(key, None)
            for src, end, dst in (("intfName1", p1, "intf"), ("intfName2", p2, "intf"),
                                  ("addr1", p1, "mac"), ("addr2", p2, "mac")):
                val = info.pop(src, None)
                if val:
                    end[dst] = val
            use_htb = info.pop("use_htb", None)
            if use_htb is not None and "qdisc" not in info:
                info["qdisc"] = "htb" if use_htb else "tbf"
            t.add_link(n1, n2, p1, p2, **info)
        return t.validate()

    def to_dict(self) -> Dict[str, Any]:
        """The topology as plain data that :meth:`from_dict` reads back (rates
        with their unit; defaults left out)."""
        return self.model_dump(mode="json", exclude_defaults=True)

    @classmethod
    def from_dict(cls, data: Any) -> "Topology":
        """Validate a topology given as plain data (as a YAML file would hold it);
        raise :class:`TopologyError` naming the field."""
        topology_size(*raw_size(data), where="topology")  # before anything is built
        try:
            return cls.model_validate(data).validate()
        except ValidationError as exc:
            loc = loc_path(tuple(exc.errors(include_url=False)[0].get("loc", ())))
            raise TopologyError(explain(exc, (), cls), loc) from None

    @classmethod
    def from_yaml(cls, path: str) -> "Topology":
        """Load a topology from a YAML file; errors name the file, line and field."""
        doc = read_yaml(path)
        if not isinstance(doc, LineDict):  # every mapping read_yaml returns is one
            raise TopologyError(f"{path}:1: a topology must be a mapping with 'nodes' and 'links'")
        if not doc.get("nodes"):
            raise TopologyError(f"{path}:{doc.line}: 'nodes' must be a non-empty mapping of "
                                "name: options")
        nodes, links, namespaces = raw_size(doc)
        limits = active()  # counted right after parsing, before anything is built
        for key, value, field in (("nodes", nodes, "nodes"), ("namespaces", namespaces, "nodes"),
                                  ("links", links, "links")):
            limits.check(key, value, f"{path}:{line_of(doc, (field,))}: {field}")
        data = dict(doc)
        data.setdefault("name", path[-120:])
        try:
            topo = cls.model_validate(data)
        except ValidationError as exc:
            loc = loc_path(tuple(exc.errors(include_url=False)[0].get("loc", ())))
            raise TopologyError(f"{path}:{line_of(doc, loc)}: {explain(exc, (), cls)}",
                                loc) from None
        except TopologyError as exc:
            raise TopologyError(f"{path}:{line_of(doc, exc.loc)}: {exc}") from None
        topo._source = (path, doc)
        return topo

    def summary(self) -> List[Tuple[str, str, str]]:
        """Rows ``(node, kind, addresses)`` for display."""
        addrs = self.addresses()
        rows = []
        for name, node in self.nodes.items():
            kind = node.kind if not node.is_switch else f"switch ({self.switch_type_of(name)})"
            ips = ", ".join(f"{intf} {ip}" for (n, intf), ip in addrs.items() if n == name)
            rows.append((name, kind, ips))
        return rows


def raw_size(data: Any) -> Tuple[int, int, int]:
    """(nodes, links, namespaces) of a topology given as plain data (a parsed
    file), counted before it is validated or built; the kinds and types given
    are read as written (an unknown one is refused later, by validation)."""
    if not isinstance(data, dict):
        return 0, 0, 0
    nodes = data.get("nodes")
    nodes = nodes if isinstance(nodes, dict) else {}
    links = data.get("links")
    links = links if isinstance(links, list) else []
    default = data.get("switch", BRIDGE.name)
    types = switch_types()
    ns = 0
    for opts in nodes.values():
        opts = opts if isinstance(opts, dict) else {}
        wanted = opts.get("type", default)
        kind = types.get(wanted) if opts.get("kind") == "switch" and isinstance(wanted, str) \
            else None
        if kind is None or kind.namespace:  # an unknown type counts as a namespace
            ns += 1
    return len(nodes), len(links), ns


def schema() -> Dict[str, Any]:
    """The JSON Schema of the YAML topology format (``nslab topo schema``)."""
    sch = Topology.model_json_schema(by_alias=True, mode="validation")
    sch["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    sch["title"] = "nslab topology"
    defs = sch.get("$defs", {})
    name = {"type": "string", "pattern": defs.get("Link", {}).get("properties", {})
            .get("a", {}).get("pattern", "")}
    sch["properties"]["links"]["items"] = {"anyOf": [
        {"$ref": "#/$defs/Link"},
        {"type": "array", "items": name, "minItems": 2, "maxItems": 2,
         "description": "short form: [node_a, node_b]"}]}
    node = sch["properties"]["nodes"]
    node["additionalProperties"] = {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]}
    node["propertyNames"] = {"pattern": NAME_RE.pattern}
    defs["Node"]["properties"]["sysctls"]["propertyNames"] = {"pattern": SYSCTL_KEY_RE.pattern}
    # Options that fit one kind of node only.
    defs["Node"]["allOf"] = [{
        "if": {"properties": {"kind": {"const": "switch"}}, "required": ["kind"]},
        "then": {"not": {"anyOf": [{"required": [k]} for k in HOST_ONLY]}},
        "else": {"not": {"anyOf": [{"required": [k]} for k in SWITCH_ONLY]}}}]
    routes = defs["Node"]["properties"]["routes"]
    routes["items"] = {"anyOf": [{"$ref": "#/$defs/Route"},
                                 {"type": "string",
                                  "description": "DST [via ADDR] [dev IF] [metric N] [src ADDR]"}]}
    return sch
