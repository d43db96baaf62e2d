"""Mininet's own ready topologies by name, built from Mininet's classes so the
names and links are exactly Mininet's: ``linear`` (``LinearTopo``), ``tree``
(``TreeTopo``) and ``torus`` (``TorusTopo``), as ``nslab topo up linear --k 4``
or, like ``mn --topo``, ``nslab topo up linear,4`` / ``tree,2,3`` /
``torus,3,3``.

A torus has loops: its switches run the spanning tree protocol (Linux bridge
``stp_state 1``, OVS ``stp_enable``), and the lab waits until STP has settled
before it says it is up.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from nslab.model.topo import Topology

SWITCHES = ("bridge", "ovs")


def _mininet(cls: Any, name: str, switch: str, stp: bool, **params: Any) -> "Topology":
    """Build Mininet's ``cls(**params)`` and convert it."""
    from nslab.errors import InputError
    from nslab.model.topo import Topology
    if switch not in SWITCHES:
        raise InputError(f"--switch {switch!r}: one of {', '.join(SWITCHES)}")
    try:
        topo = cls(**params)
    except Exception as exc:  # noqa: BLE001 - Mininet's own checks, e.g. torus sizes
        raise InputError(f"{name}: {exc}") from None
    for node in topo.switches():
        info = topo.nodeInfo(node)
        if switch != "ovs":
            info.pop("dpid", None)  # a datapath id is OVS's; a Linux bridge has none
        if stp:
            info["stp"] = True
    return Topology.from_mininet(topo, name=name, switch_type=switch)


def _check_size(name: str, switches: int, hosts: int, links: int, switch: str) -> None:
    """The size of the topology, counted from its parameters before Mininet
    builds anything (``tree --depth 20 --fanout 20`` is refused at once)."""
    from nslab.model.limits import topology_size
    topology_size(switches + hosts, links, hosts + (switches if switch != "ovs" else 0), name)


def _classes() -> Any:

    from nslab.errors import InputError
    keep = logging.getLoggerClass()  # mininet.log replaces it (see basic.py)
    try:
        from mininet.topo import LinearTopo
        from mininet.topolib import TorusTopo, TreeTopo
    except ImportError:
        raise InputError("Mininet's topologies need Mininet's Python package (apt install "
                         "mininet; make setup installs it)") from None
    finally:
        logging.setLoggerClass(keep)
    return LinearTopo, TreeTopo, TorusTopo


def linear(k: int = 2, n: int = 1, switch: str = "bridge") -> "Topology":
    """Mininet's ``LinearTopo``: k switches in a chain, n hosts on each.

    Args:
        k: how many switches.
        n: hosts on each switch.
        switch: what each switch is: ``bridge`` (a Linux bridge) or ``ovs``.
    """
    from nslab.errors import InputError
    if int(k) < 1 or int(n) < 1:
        raise InputError(f"linear: k={k} and n={n} must be at least 1")
    k, n = int(k), int(n)
    _check_size(f"linear: k={k}, n={n}", k, k * n, k - 1 + k * n, switch)
    return _mininet(_classes()[0], f"linear-{k}x{n}", switch, False, k=int(k), n=int(n))


def tree(depth: int = 1, fanout: int = 2, switch: str = "bridge") -> "Topology":
    """Mininet's ``TreeTopo``: a tree of switches, hosts at its leaves.

    Args:
        depth: levels of switches.
        fanout: children of each switch (the last level's are hosts).
        switch: what each switch is: ``bridge`` (a Linux bridge) or ``ovs``.
    """
    from nslab.errors import InputError
    if int(depth) < 1 or int(fanout) < 1:
        raise InputError(f"tree: depth={depth} and fanout={fanout} must be at least 1")
    depth, fanout = int(depth), int(fanout)
    # fanout**i switches at level i < depth, fanout**depth hosts, a tree's links;
    # counting stops past 10**12 (far over any ceiling)
    switches, hosts = (depth, 1) if fanout == 1 else (0, 1)
    for _ in range(depth if fanout > 1 else 0):
        switches += hosts
        hosts *= fanout
        if switches > 10**12:
            break
    _check_size(f"tree: depth={depth}, fanout={fanout}", switches, hosts,
                switches + hosts - 1, switch)
    return _mininet(_classes()[1], f"tree-{depth}x{fanout}", switch, False, depth=int(depth),
                    fanout=int(fanout))


def torus(x: int = 3, y: int = 3, n: int = 1, switch: str = "bridge") -> "Topology":
    """Mininet's ``TorusTopo``: a grid of switches wrapped at its edges, with
    STP on every switch (the torus has loops).

    Args:
        x: switches across (at least 3).
        y: switches down (at least 3).
        n: hosts on each switch.
        switch: what each switch is: ``bridge`` (a Linux bridge) or ``ovs``.
    """
    from nslab.errors import InputError
    if int(x) < 3 or int(y) < 3 or int(n) < 1:
        raise InputError(f"torus: x={x} and y={y} must be at least 3 (a smaller torus has "
                         f"parallel links), n={n} at least 1")
    x, y, n = int(x), int(y), int(n)
    # two links per switch (right and down, wrapped) and one per host
    _check_size(f"torus: x={x}, y={y}, n={n}", x * y, x * y * n, 2 * x * y + x * y * n, switch)
    return _mininet(_classes()[2], f"torus-{x}x{y}", switch, True, x=int(x), y=int(y), n=int(n))
