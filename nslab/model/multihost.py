"""Labs that span machines: the pure part (issue 17, in progress).

A topology is split across hosts; every link whose two ends land on
different hosts becomes a VXLAN tunnel with a VNI of its own, and its MTU is
lowered by the tunnel's overhead. This module decides, without root and
without touching any host:

* :func:`place`: which host builds each node, explicit (a ``hosts`` map) or
  automatic (parts of equal size that cut few links: reverse Cuthill-McKee
  order cut into runs, refined by Kernighan-Lin; both from networkx);
* :func:`tunnels`: the cross-host links, each with its VNI (deterministic:
  the same topology and placement give the same VNIs on every host) and the
  MTU its two ends get;
* :func:`vxlan_overhead`: the bytes VXLAN adds (outer Ethernet, IP, UDP and
  VXLAN headers).

Building it (one agent per host over OpenSSH with ControlMaster, kernel VXLAN
or OVS ``type=vxlan``) is described in ``docs/multi-host.md``.
"""
from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import InputError

#: VXLAN network identifiers are 24 bits; 0 is avoided and the lab's range
#: starts high so it never meets a VNI an operator picked by hand (1, 10, 100).
VNI_BASE = 0x4E5300  # "NS" in the high bytes
VNI_MAX = (1 << 24) - 1
#: UDP port of VXLAN (IANA)
VXLAN_PORT = 4789
ETHERNET = 14
IPV4, IPV6, UDP, VXLAN = 20, 40, 8, 8


def vxlan_overhead(underlay: str = "ipv4") -> int:
    """Bytes a VXLAN tunnel adds to each inner frame's IP packet size: the
    inner Ethernet header plus the outer IP, UDP and VXLAN headers
    (50 over IPv4, 70 over IPv6)."""
    if underlay not in ("ipv4", "ipv6"):
        raise InputError(f"underlay {underlay!r}: ipv4 or ipv6")
    return ETHERNET + (IPV4 if underlay == "ipv4" else IPV6) + UDP + VXLAN


def tunnel_mtu(underlay_mtu: int = 1500, underlay: str = "ipv4") -> int:
    """The largest MTU an inner interface can have without the outer packet
    exceeding the underlay's MTU."""
    mtu = underlay_mtu - vxlan_overhead(underlay)
    if mtu < 68:
        raise InputError(f"an underlay MTU of {underlay_mtu} leaves {mtu} bytes inside a VXLAN "
                         "tunnel: below IPv4's minimum of 68")
    return mtu


def place(topo: Any, hosts: Sequence[str], explicit: Optional[Mapping[str, str]] = None,
          seed: int = 0) -> Dict[str, str]:
    """Node -> host. Nodes in ``explicit`` go where it says; the others are
    spread over ``hosts`` in balanced parts that cut as few links as possible
    (deterministic for a given ``seed``)."""
    hosts = list(hosts)
    if not hosts:
        raise InputError("no hosts to place the lab on")
    if len(set(hosts)) != len(hosts):
        raise InputError(f"a host is named twice in {', '.join(hosts)}")
    explicit = dict(explicit or {})
    for node, host in explicit.items():
        if node not in topo.nodes:
            raise InputError(f"hosts: unknown node {node!r}")
        if host not in hosts:
            raise InputError(f"hosts: {node} is placed on {host!r}, which is not one of "
                             f"{', '.join(hosts)}")
    free = [n for n in topo.nodes if n not in explicit]
    if len(hosts) == 1:
        return {**{n: hosts[0] for n in free}, **explicit}
    import networkx as nx
    g = nx.Graph()
    g.add_nodes_from(free)
    for link in topo.links:
        if link.a in g and link.b in g:
            w = g.get_edge_data(link.a, link.b, {"weight": 0})["weight"]
            g.add_edge(link.a, link.b, weight=w + 1)
    parts = _split(g, len(hosts), seed)
    out = {n: hosts[i] for i, part in enumerate(parts) for n in part}
    out.update(explicit)
    return out


def _split(g: Any, k: int, seed: int) -> List[List[str]]:
    """``k`` parts of ``g`` whose sizes differ by at most one: the nodes in
    reverse Cuthill-McKee order (neighbours end up close together), cut into
    contiguous runs; an even two-way split is then refined by Kernighan-Lin
    (which swaps pairs, so it keeps the sizes)."""
    from networkx.algorithms.community import kernighan_lin_bisection
    from networkx.utils import reverse_cuthill_mckee_ordering
    order: List[str] = []
    for comp in sorted((sorted(c) for c in _components(g)), key=lambda c: c[0]):
        sub = g.subgraph(comp)
        order += list(reverse_cuthill_mckee_ordering(sub)) if len(comp) > 1 else comp
    n = len(order)
    bounds = [round(i * n / k) for i in range(k + 1)]
    parts = [order[bounds[i]:bounds[i + 1]] for i in range(k)]
    if k == 2 and len(parts[0]) == len(parts[1]) and n > 2:
        a, b = kernighan_lin_bisection(g, partition=(set(parts[0]), set(parts[1])),
                                       weight="weight", seed=seed)
        if _cut(g, a) <= _cut(g, set(parts[0])):
            parts = [sorted(a), sorted(b)]
    return parts


def _components(g: Any) -> List[Any]:
    import networkx as nx
    return list(nx.connected_components(g))


def _cut(g: Any, part: Any) -> int:
    return sum(d.get("weight", 1) for u, v, d in g.edges(data=True) if (u in part) != (v in part))


@dataclass(frozen=True)
class Tunnel:
    """A link whose ends are on different hosts: carried by VXLAN with ``vni``."""

    vni: int
    a: str
    intf_a: str
    host_a: str
    b: str
    intf_b: str
    host_b: str
    mtu: int


def tunnels(topo: Any, placement: Mapping[str, str], underlay_mtu: int = 1500,
            underlay: str = "ipv4") -> List[Tunnel]:
    """Every cross-host link, in the topology's link order, numbered from
    :data:`VNI_BASE`. A link asking for an MTU above what the tunnel carries
    is refused, naming it."""
    inner = tunnel_mtu(underlay_mtu, underlay)
    out: List[Tunnel] = []
    for link, na, ia, nb, ib in topo.interfaces():
        ha, hb = placement[na], placement[nb]
        if ha == hb:
            continue
        if link.mtu and link.mtu > inner:
            raise InputError(f"link {na}-{nb}: MTU {link.mtu} does not fit a VXLAN tunnel over an "
                             f"underlay of {underlay_mtu} ({inner} at most)")
        vni = VNI_BASE + len(out)
        if vni > VNI_MAX:
            raise InputError(f"more than {VNI_MAX - VNI_BASE + 1} cross-host links")
        out.append(Tunnel(vni, na, ia, ha, nb, ib, hb, link.mtu or inner))
    return out


def cut_size(topo: Any, placement: Mapping[str, str]) -> int:
    """How many links cross hosts."""
    return sum(1 for l in topo.links if placement[l.a] != placement[l.b])


@dataclass(frozen=True)
class Part:
    """What one host builds of a lab that spans hosts.

    Attributes:
        host: this host's name (as in ``placement``).
        placement: every node -> its host.
        underlay: every host -> its underlay address (the VXLAN tunnels' ``local``
            and ``remote``).
        tunnels: every cross-host link (see :func:`tunnels`).
    """

    host: str
    placement: Mapping[str, str]
    underlay: Mapping[str, str]
    tunnels: Sequence[Tunnel]

    def is_local(self, node: str) -> bool:
        return self.placement[node] == self.host

    def tunnel_end(self, node: str, intf: str) -> Optional[Tuple[Tunnel, str, str]]:
        """``(tunnel, local address, remote address)`` when ``node:intf`` (a local
        end) is carried by a tunnel, else None."""
        for t in self.tunnels:
            for n, i, peer_host in ((t.a, t.intf_a, t.host_b), (t.b, t.intf_b, t.host_a)):
                if n == node and i == intf and self.is_local(n):
                    return t, self.underlay[self.host], self.underlay[peer_host]
        return None


def parse_hosts(spec: str) -> Dict[str, str]:
    """``a,b`` or ``a=10.0.0.1,b=10.0.0.2`` -> ``{ssh destination: underlay address}``.

    A destination is what ``ssh`` is given (``[user@]name``, resolved by the
    user's own SSH configuration); its underlay address is the IPv4 address the
    other hosts reach it at (given after ``=``, else the name resolved here)."""
    out: Dict[str, str] = {}
    items = [s.strip() for s in spec.split(",")]
    if not all(items):
        raise InputError(f"--hosts {spec!r}: an empty host name")
    for item in items:
        dest, _, addr = item.partition("=")
        if not HOST_RE.fullmatch(dest):
            raise InputError(f"--hosts: {dest!r} is not an SSH destination ([user@]host, "
                             "letters, digits, '.', '-', '_')")
        if dest in out:
            raise InputError(f"--hosts: {dest} is named twice")
        out[dest] = _underlay_address(dest, addr)
    if len(set(out.values())) != len(out):
        raise InputError(f"--hosts: two hosts have the same address ({spec})")
    return out


HOST_RE = re.compile(r"(?:[a-z_][a-z0-9_-]{0,31}@)?[A-Za-z0-9][A-Za-z0-9._-]{0,252}")


def _underlay_address(dest: str, addr: str) -> str:
    if addr:
        try:
            return str(ipaddress.IPv4Address(addr))
        except ValueError:
            raise InputError(f"--hosts: {dest}={addr}: not an IPv4 address") from None
    name = dest.split("@", 1)[-1]
    try:
        return str(ipaddress.IPv4Address(name))
    except ValueError:
        pass
    try:
        return str(socket.getaddrinfo(name, None, socket.AF_INET)[0][4][0])  # AF_INET: a str
    except OSError as exc:
        raise InputError(f"--hosts: cannot resolve {name} ({exc}); give its address as "
                         f"{dest}=ADDRESS") from None
