"""RFC 2544 test bed (seed 004): generator -- DUT -- sink, each a namespace.

The DUT is a Linux bridge (``dut`` bridges ``dut-eth1``/``dut-eth2``; all in
192.168.1.0/24, as the paper's Figure 3), a Linux router (``dut-eth0``
192.168.1.1/24, ``dut-eth1`` 192.168.2.1/24, as Figure 12) or an OVS bridge.
Both links are shaped to ``link_rate`` with Ethernet framing counted, so the
theoretical frame rates are real (148,810 fps for 64-byte frames at 100 Mbit/s).
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

from nslab.errors import InputError
from nslab.model.topo import NO_IPV6, Topology


DUTS = ("bridge", "router", "ovs")
# An IPv4-only test bed (NO_IPV6): IPv6 neighbour discovery and MLD frames would
# be counted as offered frames that a router never forwards (measured: 3 of 703
# frames at 1000 fps showed up as "loss").


def dut_chain(dut: str = "bridge", link_rate: Any = "100Mbit", framing: bool = True) -> Topology:
    """gen -- dut -- sink: RFC 2544's tester and device under test.

    Args:
        dut: what the DUT is: ``bridge`` (a Linux bridge), ``router`` (Linux
            forwarding) or ``ovs``.
        link_rate: the rate of both links (``100Mbit``; ``none``: unshaped).
        framing: count Ethernet's 24 bytes of preamble, gap and FCS per frame
            in the shaped rate, as a real link does.
    """
    if dut not in DUTS:
        raise InputError(f"unknown DUT {dut!r} (use {', '.join(DUTS)})")
    shaping: Dict[str, Any] = {}
    if str(link_rate).lower() != "none":
        shaping = {"bw": link_rate, "framing": framing}
    t = Topology(name=f"rfc2544-{dut}", auto_ip=False)
    if dut == "router":
        t.add_host("gen", routes=["default via 192.168.1.1"], sysctls=dict(NO_IPV6))
        t.add_host("sink", routes=["default via 192.168.2.1"], sysctls=dict(NO_IPV6))
        t.add_router("dut", sysctls=dict(NO_IPV6))
        t.add_link("gen", "dut", {"ip": "192.168.1.10/24"}, {"ip": "192.168.1.1/24"}, **shaping)
        t.add_link("dut", "sink", {"ip": "192.168.2.1/24"}, {"ip": "192.168.2.10/24"}, **shaping)
    else:
        t.add_host("gen", sysctls=dict(NO_IPV6))
        t.add_host("sink", sysctls=dict(NO_IPV6))
        t.add_switch("dut", type=dut, sysctls=dict(NO_IPV6))
        t.add_link("gen", "dut", {"ip": "192.168.1.10/24"}, None, **shaping)
        t.add_link("dut", "sink", None, {"ip": "192.168.1.20/24"}, **shaping)
    return t.validate()


def roles(dut: str) -> Tuple[str, str]:
    """(sink address, the DUT's ingress interface name inside its namespace)."""
    if dut == "router":
        return "192.168.2.10", "dut-eth0"
    return "192.168.1.20", "dut-eth1"
