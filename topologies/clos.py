"""A BGP clos (seed 002): spines and servers (or leaves with hosts), eBGP
unnumbered over IPv6 link-local on every fabric link, ECMP in the kernel.

* ``clos(spines=2, servers=2)``: the post's fabric. Server N has loopback
  ``10.0.200.N/32`` and a link to every spine.
* ``clos(spines=2, leaves=4, hosts_per_leaf=2)``: leaves with hosts behind
  them on a rack switch ``torL`` (Linux bridge); leaf L serves ``10.1.L.0/24``
  (gateway ``.254``), host H is ``10.1.L.H``.

Spines share AS 65000; leaf/server N is AS 65000+N. Timers are fast
(keepalive 1 s, hold 3 s, advertisement interval 0, coalesce 100 ms) so the
fabric converges in about a second.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from nslab.frr.options import bgp_of
from nslab.errors import InputError
from nslab.model.limits import topology_size
from nslab.model.topo import Topology


SPINE_ASN = 65000
MAX_SPINES = 16
MAX_LEAVES = 200
MAX_HOSTS = 200
#: Sysctls every fabric node gets: forwarding, and no IPv6 DAD delay on link-locals.
FABRIC_SYSCTLS = {"net.ipv4.ip_forward": 1, "net.ipv6.conf.all.forwarding": 1,
                  "net.ipv6.conf.default.accept_dad": 0, "net.ipv6.conf.all.accept_dad": 0}


def clos(spines: int = 2, servers: Optional[int] = None, leaves: Optional[int] = None,
         hosts_per_leaf: int = 0, link_rate: Any = "1Gbit", framing: bool = False,
         bfd: bool = False, bfd_interval: int = 100, bfd_multiplier: int = 3,
         keepalive: int = 1, holdtime: int = 3, passive_spines: Any = "auto",
         update_delay: int = 10) -> Topology:
    """Spines x servers (or leaves with hosts), each server or leaf linked to
    every spine, eBGP unnumbered on every link (FRR).

    When both ends of a session open it at once, FRR tears one down (a
    collision), and each teardown clears and frees the session's buffers: at
    16 x 64 on 2 cores that took a quarter of bgpd's CPU. A small fabric in
    passive mode can wait a connect-retry second longer (4x8: once 2.7 s
    instead of 1.7 s), hence ``passive_spines="auto"``. With ``update_delay``
    a bgpd computes best paths and sends updates only once every peer is up
    and has sent its routes or a keepalive, so a server installs each prefix
    once with all its paths, not once per arriving path (16 x 64: 11.3-11.7 s
    to converge with both, 17.1-19.4 s with neither).

    Args:
        spines: how many spines.
        servers: how many servers (routers with a loopback address each; 2
            unless leaves are given).
        leaves: how many leaves instead of servers, each with a rack switch
            and its hosts behind it.
        hosts_per_leaf: hosts on each leaf's rack switch.
        link_rate: the rate of every spine link (``1Gbit``; ``none``: unshaped).
        framing: count Ethernet's 24 bytes of preamble, gap and FCS per frame
            in the shaped rate, as a real link does.
        bfd: run FRR's bfdd on every node, a session per BGP neighbour.
        bfd_interval: BFD's transmit and receive interval, in ms.
        bfd_multiplier: BFD packets missed before a session is down.
        keepalive: BGP's keepalive timer, in seconds.
        holdtime: BGP's hold timer, in seconds.
        passive_spines: only the servers or leaves open sessions: true, false,
            or auto (when the fabric has 256 sessions or more).
        update_delay: seconds each bgpd may stay read-only after it starts
            (FRR's ``update-delay``; 0: off).
    """
    spines = int(spines)
    if servers is not None and leaves is not None:
        raise InputError("clos: give either --servers or --leaves, not both")
    n = int(servers if servers is not None else (leaves if leaves is not None else 2))
    hosts_per_leaf = int(hosts_per_leaf)
    if not 1 <= spines <= MAX_SPINES:
        raise InputError(f"clos: --spines {spines} is out of range 1..{MAX_SPINES}")
    if not 1 <= n <= MAX_LEAVES:
        raise InputError(f"clos: {n} servers/leaves is out of range 1..{MAX_LEAVES} "
                         "(the address plan gives 10.0.200.N and 10.1.N.0/24)")
    if not 0 <= hosts_per_leaf <= MAX_HOSTS:
        raise InputError(f"clos: --hosts-per-leaf {hosts_per_leaf} is out of range 0..{MAX_HOSTS}")
    update_delay = int(update_delay)
    if not 0 <= update_delay <= 3600:
        raise InputError(f"clos: --update-delay {update_delay} is out of range 0..3600")
    # counted before anything is built: spines, servers/leaves, and behind each
    # leaf a rack switch (a Linux bridge) with its hosts
    racks = n * (1 + hosts_per_leaf) if hosts_per_leaf else 0
    topology_size(spines + n + racks, spines * n + racks, spines + n + racks,
                  f"clos: {spines} spines x {n}" + (f" x {hosts_per_leaf}" if hosts_per_leaf else ""))
    passive = resolve_passive_spines(passive_spines, spines * n)
    prefix = "server" if servers is not None or leaves is None else "leaf"
    shaping: Dict[str, Any] = {}
    if str(link_rate).lower() != "none":
        shaping = {"bw": link_rate, "framing": framing}
    timers: Dict[str, Any] = {"keepalive": keepalive, "holdtime": holdtime,
                              "update_delay": update_delay}
    if bfd:
        timers["bfd"] = {"detect_multiplier": bfd_multiplier, "receive_interval": bfd_interval,
                         "transmit_interval": bfd_interval}
    t = Topology(name=f"clos-{spines}x{n}" + (f"x{hosts_per_leaf}" if hosts_per_leaf else ""),
                 auto_ip=False)
    spine_names = [f"spine{s}" for s in range(1, spines + 1)]
    for s, name in enumerate(spine_names, 1):
        t.add_router(name, sysctls=dict(FABRIC_SYSCTLS),
                     bgp={"asn": SPINE_ASN, "router_id": f"10.0.100.{s}",
                          "unnumbered": [f"{name}-eth{i}" for i in range(n)], "networks": [],
                          "passive": passive, **timers})
    for i in range(1, n + 1):
        name = f"{prefix}{i}"
        lo = f"10.0.200.{i}/32"
        nets = [lo] + ([f"10.1.{i}.0/24"] if hosts_per_leaf else [])
        t.add_router(name, sysctls=dict(FABRIC_SYSCTLS), loopback=lo,
                     bgp={"asn": SPINE_ASN + i, "router_id": f"10.0.200.{i}",
                          "unnumbered": [f"{name}-eth{s}" for s in range(spines)],
                          "networks": nets, **timers})
    for s, spine in enumerate(spine_names):
        for i in range(1, n + 1):
            leaf = f"{prefix}{i}"
            t.add_link(leaf, spine, {"intf": f"{leaf}-eth{s}"}, {"intf": f"{spine}-eth{i - 1}"},
                       **shaping)
    for i in range(1, n + 1):
        if not hosts_per_leaf:
            continue
        leaf, tor = f"{prefix}{i}", f"tor{i}"
        t.add_switch(tor, type="bridge")
        t.add_link(leaf, tor, {"ip": f"10.1.{i}.254/24", "intf": f"{leaf}-h"}, None)
        for h in range(1, hosts_per_leaf + 1):
            host = f"h{i}x{h}"
            t.add_host(host, routes=[f"default via 10.1.{i}.254"])
            t.add_link(host, tor, {"ip": f"10.1.{i}.{h}/24"}, None)
    return t.validate()


#: Passive spines from this many sessions on (``passive_spines="auto"``).
PASSIVE_FROM_SESSIONS = 256


def resolve_passive_spines(value: Any, sessions: int) -> bool:
    """``passive_spines`` as given (a bool, or true/false/auto from the command line)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    if text == "auto":
        return sessions >= PASSIVE_FROM_SESSIONS
    raise InputError(f"clos: --passive-spines {value!r}: use true, false or auto")


def expected_routes(t: Topology) -> Dict[str, Dict[str, int]]:
    """What converged means: every server/leaf reaches every other's networks over
    all spines."""
    spines = [n for n in t.nodes if n.startswith("spine")]
    bgps = {n: bgp_of(node) for n, node in t.nodes.items() if n not in spines}
    nets = {n: [str(p) for p in bgp.networks] for n, bgp in bgps.items() if bgp}
    leaves = list(nets)
    return {n: {p: len(spines) for m in leaves if m != n for p in nets[m]} for n in leaves}
