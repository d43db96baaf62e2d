"""``single`` (k hosts on one switch) and ``pair`` (two hosts, one link).

Mininet-compatible: ``mn --custom topologies/basic.py --topo nslab_single,4``.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Dict, Optional

# Plain `mn --custom` runs this file under the system Python, where nslab may
# not be installed: nothing from nslab is imported at module level.
if TYPE_CHECKING:  # pragma: no cover
    from nslab.model.topo import Topology


def _link_opts(bw: Any = None, delay: Any = None, jitter: Any = None, loss: Any = None,
               framing: bool = False) -> Dict[str, Any]:
    opts: Dict[str, Any] = {"bw": bw, "delay": delay, "jitter": jitter, "loss": loss}
    opts = {k: v for k, v in opts.items() if v is not None}
    if framing:
        opts["framing"] = True
    return opts


def build_single(t: Any, k: int = 2, switch_opts: Optional[Dict[str, Any]] = None,
                 **link: Any) -> None:
    """Add k hosts on one switch to ``t`` (a Mininet ``Topo`` or a :class:`Topology`)."""
    switch = t.addSwitch("s1", **(switch_opts or {}))
    for h in range(1, int(k) + 1):
        t.addLink(t.addHost(f"h{h}"), switch, **_link_opts(**link))


def build_pair(t: Any, **link: Any) -> None:
    """Two hosts joined by one link."""
    t.addLink(t.addHost("h1"), t.addHost("h2"), **_link_opts(**link))


def single(k: int = 2, switch: str = "bridge", bw: Any = None, delay: Any = None,
           jitter: Any = None, loss: Any = None, framing: bool = False,
           uplink: Optional[str] = None, force: bool = False) -> Topology:
    """k hosts (10.0.0.1..k/8) on one switch s1.

    Args:
        k: how many hosts.
        switch: what s1 is: ``bridge`` (a Linux bridge) or ``ovs`` (Open vSwitch).
        bw: the links' rate (``100Mbit``, ``1Gbit``; a bare number is Mbit/s);
            unshaped when not given.
        delay: one-way delay added on each link (``10ms``, ``200us``; needs netem).
        jitter: variation of that delay (``2ms``; needs a delay).
        loss: frames dropped at random on each link, in percent (``0.5``).
        framing: count Ethernet's 24 bytes of preamble, gap and FCS per frame
            in the shaped rate, as a real link does.
        uplink: a physical NIC of this machine to attach to s1 (OVS only).
        force: allow an uplink that carries the default route or this SSH session.
    """
    from nslab.errors import InputError
    from nslab.model.limits import topology_size
    from nslab.model.topo import Topology
    if int(k) < 1:
        raise InputError(f"single: k={k}: at least one host")
    # counted before anything is built: k hosts, a switch (a namespace of its
    # own unless it is OVS), k links
    topology_size(int(k) + 1, int(k), int(k) + (switch != "ovs"), f"single: k={k}")
    # no ceiling of our own: a Linux bridge's port count and the address plan
    # (10.0.0.0/8) are checked with the whole topology
    if uplink and switch != "ovs":
        raise InputError("an uplink attaches to an OVS bridge: add --switch ovs")
    t = Topology(name=f"single-{k}", switch_type=switch)
    build_single(t, k, switch_opts={"uplink": uplink, "force": bool(force)} if uplink else None,
                 bw=bw, delay=delay, jitter=jitter, loss=loss, framing=framing)
    return t.validate()


def pair(bw: Any = None, delay: Any = None, jitter: Any = None, loss: Any = None,
         framing: bool = False) -> Topology:
    """h1 (10.0.0.1/8) and h2 (10.0.0.2/8) on one veth.

    Args:
        bw: the links' rate (``100Mbit``, ``1Gbit``; a bare number is Mbit/s);
            unshaped when not given.
        delay: one-way delay added on each link (``10ms``, ``200us``; needs netem).
        jitter: variation of that delay (``2ms``; needs a delay).
        loss: frames dropped at random on each link, in percent (``0.5``).
        framing: count Ethernet's 24 bytes of preamble, gap and FCS per frame
            in the shaped rate, as a real link does.
    """
    from nslab.model.topo import Topology
    t = Topology(name="pair")
    build_pair(t, bw=bw, delay=delay, jitter=jitter, loss=loss, framing=framing)
    return t.validate()


# Importing mininet.log makes every logger created afterwards a MininetLogger
# at level 25 with a handler of its own (nslab's INFO lines hidden, its
# warnings printed twice): the logger class is restored after the import.
_LOGGER_CLASS = logging.getLoggerClass()
try:  # Mininet is optional for the lab itself, needed only for `mn --custom`.
    from mininet.topo import Topo

    class SingleTopo(Topo):
        """k hosts on one switch (Mininet form of :func:`single`)."""

        def build(self, k: int = 2, bw: Optional[float] = None) -> None:
            build_single(self, k, bw=bw)

    class PairTopo(Topo):
        """Two hosts, one link (Mininet form of :func:`pair`)."""

        def build(self, bw: Optional[float] = None) -> None:
            build_pair(self, bw=bw)

    topos = {"nslab_single": SingleTopo, "nslab_pair": PairTopo}
except ImportError:  # pragma: no cover
    topos = {}
finally:
    logging.setLoggerClass(_LOGGER_CLASS)
