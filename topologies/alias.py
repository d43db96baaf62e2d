"""The alias study's two boxes: a client and a server joined by one link
(directly, or through a Linux bridge or OVS), the server's interface named
``eth1`` as in the posts, so aliases show as ``eth1:N``."""
from __future__ import annotations

from typing import Any

from nslab.errors import InputError
from nslab.model.topo import Topology


SERVER_IP = "192.168.1.1/16"
CLIENT_IP = "192.168.1.2/16"


def alias_pair(switch: str = "none", bw: Any = "1Gbit", framing: bool = False) -> Topology:
    """Client ``cl`` and server ``srv`` (eth1 192.168.1.1/16) of the alias study.

    Args:
        switch: how they are joined: ``none`` (one veth), or through a switch
            s1, ``bridge`` or ``ovs``.
        bw: the client link's rate (``1Gbit``; ``none``: unshaped).
        framing: count Ethernet's 24 bytes of preamble, gap and FCS per frame
            in the shaped rate, as a real link does.
    """
    if switch not in ("none", "bridge", "ovs"):
        raise InputError(f"unknown switch {switch!r} for the alias study (use none, bridge or ovs)")
    t = Topology(name=f"alias-{switch}", switch_type="bridge" if switch == "none" else switch,
                 auto_ip=False)
    t.add_host("cl")
    t.add_host("srv")
    shaping = {} if str(bw).lower() == "none" else {"bw": bw, "framing": framing}
    if switch == "none":
        t.add_link("cl", "srv", {"ip": CLIENT_IP, "intf": "eth1"}, {"ip": SERVER_IP, "intf": "eth1"},
                   **shaping)
    else:
        t.add_switch("s1")
        t.add_link("cl", "s1", {"ip": CLIENT_IP, "intf": "eth1"}, None, **shaping)
        t.add_link("srv", "s1", {"ip": SERVER_IP, "intf": "eth1"}, None)
    return t.validate()


def alias_client_uplink(uplink: str, force: bool = False, bw: Any = "1Gbit",
                        framing: bool = False) -> Topology:
    """Two-box mode: only the client box (``cl``, eth1 192.168.1.2/16) on an OVS
    bridge whose uplink is a physical NIC; the server box is the other machine,
    running ``nslab alias serve``."""
    t = Topology(name="alias-uplink", switch_type="ovs", auto_ip=False)
    t.add_host("cl")
    t.add_switch("s1", uplink=uplink, force=bool(force))
    shaping = {} if str(bw).lower() == "none" else {"bw": bw, "framing": framing}
    t.add_link("cl", "s1", {"ip": CLIENT_IP, "intf": "eth1"}, None, **shaping)
    return t.validate()
