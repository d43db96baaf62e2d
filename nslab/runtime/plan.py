"""The build plan: what a lab will create, computed from a topology without root.

:func:`plan` turns a validated :class:`~nslab.model.topo.Topology` and a run id into
the exact ``ip -batch`` and ``tc -batch`` lines, the netlink requests each
namespace sends itself (:mod:`nslab.runtime.netlink`, each shown as its ``ip`` line),
sysctls and offload changes the core will apply, in order. It is a pure
function: tests check it on any topology, and no value reaches a batch line
or a request except through :func:`nslab.model.render.line` and
:func:`nslab.model.render.token`.

Order of application (see :class:`nslab.runtime.lab.Lab`):

1. ``netns add`` for every node with a namespace (root ``ip -batch``);
2. sysctls in each namespace (before links: e.g. no IPv6 DAD on link-locals),
   written to ``/proc/sys`` from a thread inside it;
3. veth pairs created directly in their namespaces, root-namespace ports
   tagged with ``ifalias`` (root ``ip -batch``);
4. in each namespace: ``lo`` up, loopback address, Linux bridge and its ports,
   interfaces up, MTUs, addresses, routes (netlink requests from a thread
   inside it, no process);
5. GSO/TSO off where framing is counted, then ``tc -batch`` per namespace;
6. extensions (OVS bridges over the root-namespace ports, FRR daemons).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Collection, Dict, List, Optional, Tuple

from ..model.multihost import VXLAN_PORT, Part
from ..model.naming import ALIAS_PREFIX, ns_name, root_intf
from .netlink import AddrAdd, BridgeAdd, LinkMaster, LinkMtu, LinkUp, NoLinkLocal, Op, RouteAdd
from ..model.render import line
from ..model.topo import Topology


@dataclass
class NodePlan:
    """One node as it will be built.

    Attributes:
        name, kind: from the topology.
        netns: its namespace, or None for a switch built in the root
            namespace by an extension (OVS).
        intfs: its interfaces (the names inside its namespace; for a root
            namespace switch, the root names ``<run>-p<N>``), in link order.
        topo_intfs: the topology's names of those interfaces.
        addrs: ``{interface: address}`` (``ipaddress`` interfaces).
    """

    name: str
    kind: str
    netns: Optional[str]
    intfs: List[str] = field(default_factory=list)
    topo_intfs: List[str] = field(default_factory=list)
    addrs: Dict[str, Any] = field(default_factory=dict)


@dataclass
class BuildPlan:
    """Everything the core creates for a topology, as rendered batch lines."""

    run_id: str
    nodes: Dict[str, NodePlan]
    netns_lines: List[str]
    link_lines: List[str]
    #: What each namespace configures in itself, in order (sent over netlink
    #: from inside it: :mod:`nslab.runtime.netlink`).
    ns_ops: Dict[str, List[Op]]
    tc_lines: Dict[Optional[str], List[str]]
    sysctls: Dict[str, Dict[str, str]]
    gso_off: List[Tuple[Optional[str], str]]
    #: Ports of switches built in the root namespace by an extension: ``{switch: [root port]}``.
    root_ports: Dict[str, List[str]]
    #: ``(netns, dev)`` of every end of a link to a root-namespace switch.
    root_switch_links: List[Tuple[Optional[str], str]]

    @property
    def ns_lines(self) -> Dict[str, List[str]]:
        """:attr:`ns_ops` as the ``ip -batch`` lines they stand for."""
        return {ns: [op.line() for op in ops] for ns, ops in self.ns_ops.items()}

    @property
    def namespaces(self) -> List[str]:
        return [n.netns for n in self.nodes.values() if n.netns]

    @property
    def root_interfaces(self) -> List[str]:
        return [p for ports in self.root_ports.values() for p in ports]


#: A Linux bridge's STP forward delay in centiseconds: the kernel's minimum (2 s),
#: so a lab with loops settles in seconds, not the standard's 30 s.
STP_FORWARD_DELAY_CS = 200

def plan(topo: Topology, run_id: str, root_switch_types: Collection[str] = (),
         part: Optional[Part] = None) -> BuildPlan:
    """The build plan of ``topo`` for run ``run_id``.

    ``root_switch_types``: switch types an extension builds in the root
    namespace (``ovs``); their ports are created there.

    ``part``: for a lab that spans hosts, this host's part: only its nodes are
    built, and a link with one end here is a VXLAN device (created in the root
    namespace, whose address it uses, and moved into the node's namespace
    under the link's interface name).
    """
    in_root = {s for s in topo.switches() if topo.switch_type_of(s) in root_switch_types}
    nodes = {name: NodePlan(name, node.kind, None if name in in_root else ns_name(run_id, name))
             for name, node in topo.nodes.items() if part is None or part.is_local(name)}
    netns_lines = [line("netns", "add", n.netns) for n in nodes.values() if n.netns]
    sysctls = {ns: v for n, v in topo.sysctls().items() if n in nodes and (ns := nodes[n].netns)}
    w = _Wiring(topo, run_id, nodes, part)
    for link, na, ia, nb, ib in topo.interfaces():
        ends = w.ends(((na, ia), (nb, ib)))
        if not ends:
            continue  # both ends built by other hosts
        w.create(ends)
        w.configure(link, ends)
        if na in in_root or nb in in_root:
            w.root_switch_links.extend((ns, dev) for ns, dev, _, _ in ends)
    return BuildPlan(run_id=run_id, nodes=nodes, netns_lines=netns_lines,
                     link_lines=w.link_lines + w.alias_lines, ns_ops=_namespace_ops(topo, nodes, w),
                     tc_lines=dict(w.tc_lines), sysctls=sysctls, gso_off=w.gso_off,
                     root_ports=dict(w.root_ports), root_switch_links=w.root_switch_links)


#: One end of a link built on this host: ``(netns, device, node, topology interface)``.
_End = Tuple[Optional[str], str, str, str]


@dataclass
class _Wiring:
    """What :func:`plan` gathers link by link: the lines that create each
    link, what each namespace does to its ends, and the shaping."""

    topo: Topology
    run_id: str
    nodes: Dict[str, NodePlan]
    part: Optional[Part]
    addrs: Dict[Tuple[str, str], Any] = field(init=False)
    macs: Dict[Tuple[str, str], str] = field(init=False)
    link_lines: List[str] = field(default_factory=list)
    #: root-namespace ports: ``ifalias`` tags, up, MTUs (after every link is made)
    alias_lines: List[str] = field(default_factory=list)
    #: per namespace: its ports up, MTUs, addresses (a switch port's address is
    #: refused when the topology is validated, so none is ever for the root namespace)
    ns_intf_ops: Dict[str, List[Op]] = field(default_factory=lambda: defaultdict(list))
    tc_lines: Dict[Optional[str], List[str]] = field(default_factory=lambda: defaultdict(list))
    gso_off: List[Tuple[Optional[str], str]] = field(default_factory=list)
    root_ports: Dict[str, List[str]] = field(default_factory=lambda: defaultdict(list))
    root_switch_links: List[Tuple[Optional[str], str]] = field(default_factory=list)
    bridge_ports: Dict[str, List[str]] = field(default_factory=lambda: defaultdict(list))
    #: root-namespace ports numbered so far
    counter: int = 0
    next_index: Dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.addrs = self.topo.addresses()
        self.macs = self.topo.macs()

    def ends(self, pairs: Tuple[Tuple[str, str], ...]) -> List[_End]:
        """The link's ends built here, each named and added to its node: a
        root-namespace switch's port gets the next ``<run>-p<N>`` name, tagged
        with its node and interface."""
        ends: List[_End] = []
        for node, intf in pairs:
            if node not in self.nodes:
                continue  # built by another host
            np = self.nodes[node]
            if np.netns is None:
                self.counter += 1
                dev = root_intf(self.run_id, self.counter)
                self.root_ports[node].append(dev)
                self.alias_lines.append(line("link", "set", "dev", dev, "alias",
                                             f"{ALIAS_PREFIX}{self.run_id}:{node}:{intf}"))
                self.alias_lines.append(line("link", "set", "dev", dev, "up"))
            else:
                dev = intf
            np.intfs.append(dev)
            np.topo_intfs.append(intf)
            ends.append((np.netns, dev, node, intf))
        return ends

    def create(self, ends: List[_End]) -> None:
        """The line that creates the link: a veth pair with each end in its
        namespace, or a VXLAN device when the other end is on another host."""
        if len(ends) == 1:
            ns, dev, node, intf = ends[0]
            assert self.part is not None
            self.link_lines.append(line(*_vxlan_create(self.part, ns, dev, node, intf, self.macs)))
            return
        create: List[Any] = ["link", "add", "name"]
        for i, ((ns, dev, node, intf), index) in enumerate(zip(ends, _veth_indexes(
                self.next_index, [e[0] for e in ends], self.part is None))):
            if i:
                create += ["type", "veth", "peer", "name"]
            create.append(dev)
            if index is not None:
                create += ["index", index]
            if (node, intf) in self.macs:
                create += ["address", self.macs[(node, intf)]]
            if ns:
                create += ["netns", ns]
        self.link_lines.append(line(*create))

    def configure(self, link: Any, ends: List[_End]) -> None:
        """Each end's setup: up (a switch's port joins its bridge), MTU,
        address, shaping."""
        topo, shaping = self.topo, link.shaping
        for ns, dev, node, intf in ends:
            if ns is not None:
                # a Linux bridge's ports are layer 2 and never get an IPv6
                # address (their link-locals' DAD, MLD and solicitations were
                # half the IPv6 start-up work of a big build); hosts' links
                # only with ipv6: false
                if topo.nodes[node].is_switch or (not topo.ipv6 and topo.nodes[node].kind != "router"):
                    self.ns_intf_ops[ns].append(NoLinkLocal(dev))
                self.ns_intf_ops[ns].append(LinkUp(dev))
                if link.mtu:
                    self.ns_intf_ops[ns].append(LinkMtu(dev, link.mtu))
                if topo.nodes[node].is_switch:
                    self.bridge_ports[node].append(dev)
                if (node, intf) in self.addrs:
                    self.ns_intf_ops[ns].append(AddrAdd(self.addrs[(node, intf)], dev))
                    self.nodes[node].addrs[dev] = self.addrs[(node, intf)]
            elif link.mtu:
                self.alias_lines.append(line("link", "set", "dev", dev, "mtu", link.mtu))
            if shaping is not None:
                self.tc_lines[ns].extend(shaping.tc_batch(dev))
                if shaping.overhead:
                    # A per-frame overhead is charged per packet: with GSO a 64 KB
                    # super-packet would count it once for ~45 frames.
                    self.gso_off.append((ns, dev))


def _namespace_ops(topo: Topology, nodes: Dict[str, NodePlan], w: _Wiring) -> Dict[str, List[Op]]:
    """What each namespace configures in itself, in order: ``lo`` and its
    address, a switch's bridge and its ports, its link ends, its routes."""
    ns_ops: Dict[str, List[Op]] = {}
    for name, np in nodes.items():
        if np.netns is None:
            continue
        node = topo.nodes[name]
        ops: List[Op] = [LinkUp("lo")]
        if node.loopback is not None:
            ops.append(AddrAdd(node.loopback, "lo"))
            np.addrs["lo"] = node.loopback
        if node.is_switch:
            # STP with the kernel's shortest forward delay (2 s)
            ops.append(BridgeAdd(name, bool(node.stp), STP_FORWARD_DELAY_CS if node.stp else 0))
            ops += [LinkMaster(p, name) for p in w.bridge_ports[name]]
            if not topo.ipv6:
                ops.append(NoLinkLocal(name))
            ops.append(LinkUp(name))
        ops += w.ns_intf_ops.get(np.netns, [])
        ops += [RouteAdd(route) for route in node.routes]
        ns_ops[np.netns] = ops
    return ns_ops


def _veth_indexes(next_index: Dict[str, int], namespaces: List[Optional[str]],
                  explicit: bool) -> List[Optional[int]]:
    """The interface indexes of a veth's two ends, chosen so that they differ.

    The kernel's link watcher treats a veth whose index equals its peer's as
    an ordinary device, not an urgent one (``linkwatch_urgent_event``: a
    device whose ``iflink`` is its own index), and delays its carrier by up to
    a second after a recent run. In fresh namespaces both ends of the first
    link of two nodes get index 2, so in a big build one link came up ~0.5 s
    after all the others. Each lab namespace numbers its interfaces from 2
    (``lo`` is 1), skipping one where the two ends would be equal. A link with
    an end in the root namespace, and every link of a lab spread over hosts (a
    tunnel moved into a namespace keeps its index), is left to the kernel
    (None)."""
    if not explicit or None in namespaces:
        # with an end in the root namespace, neither: a 6.1 kernel gives the
        # peer the index asked for the first end (an ip(8) request carries it
        # in both), and the root namespace had it already (EEXIST)
        return [None for _ in namespaces]
    out: List[Optional[int]] = []
    for ns in [n for n in namespaces if n is not None]:
        index = next_index.get(ns, 2)
        if index in out:
            index += 1
        next_index[ns] = index + 1
        out.append(index)
    return out


def _vxlan_create(part: Part, ns: Optional[str], dev: str, node: str, intf: str,
                  macs: Dict[Tuple[str, str], Any]) -> List[Any]:
    """The ``link add`` tokens of a tunnel's local end: created by the root
    namespace's ``ip`` (so its UDP socket lives there, on the underlay) and, for
    a node with a namespace, created straight into it under ``dev``."""
    end = part.tunnel_end(node, intf)
    if end is None:  # pragma: no cover - tunnels() covers every cross-host link
        raise ValueError(f"{node}:{intf} crosses hosts but has no tunnel")
    tunnel, local, remote = end
    create: List[Any] = ["link", "add", "name", dev]
    if (node, intf) in macs:
        create += ["address", macs[(node, intf)]]
    create += ["mtu", str(tunnel.mtu)]
    if ns:
        create += ["netns", ns]
    return create + ["type", "vxlan", "id", str(tunnel.vni), "local", local, "remote", remote,
                     "dstport", str(VXLAN_PORT)]
