"""The OVS toolbelt of seed 003 as functions: dpid, STP, controller, ethtool help."""
from __future__ import annotations

import re
from typing import List

from nslab.errors import InputError
from nslab.runtime.proc import run

TARGET_RE = re.compile(r"^(tcp|ssl|unix|ptcp|pssl|punix):[A-Za-z0-9_.:/\[\]-]+$")

ETHTOOL_HELP = """\
ethtool eth0                                      # show settings and what was negotiated
ethtool -s eth0 speed 10 duplex full autoneg off  # force 10 Mbit/s full duplex
ethtool -s eth0 autoneg on                        # back to autonegotiation
ethtool -s eth0 autoneg on advertise 0x001        # advertise only what the mask says:
    0x001     10 Half
    0x002     10 Full
    0x004    100 Half
    0x008    100 Full
    0x010   1000 Half   (not supported by IEEE standards)
    0x020   1000 Full
    0x8000  2500 Full   (not supported by IEEE standards)
    0x1000 10000 Full
    0x03F   Auto
ethtool -k eth0                                   # offloads (tx checksumming, TSO, GSO, GRO)
ethtool -K eth0 tx off                            # e.g. for OVS's userspace datapath on veths
ethtool -S eth0                                   # NIC statistics (drops, errors)
"""


def check_bridge(name: str) -> str:
    """A bridge name is an interface name (and never reads as an option)."""
    from nslab.model.fields import check_ifname
    return check_ifname(name, "bridge")


def vsctl(args: List[str]) -> str:
    return run(["ovs-vsctl", "--timeout=10"] + list(args), where="ovs-vsctl").stdout.strip()


def get_dpid(bridge: str) -> str:
    return vsctl(["get", "Bridge", check_bridge(bridge), "datapath_id"])


def parse_dpid(value: str) -> int:
    """A datapath id given as decimal, 0x-hex or 16 hex digits."""
    v = value.strip().strip('"')
    try:
        n = int(v, 16) if v.lower().startswith("0x") or len(v) == 16 else int(v)
    except ValueError:
        raise InputError(f"bad dpid {value!r}: use a number, 0x-hex or 16 hex digits") from None
    if not 0 <= n < 2 ** 64:
        raise InputError(f"bad dpid {value!r}: must fit in 64 bits")
    return n


def set_dpid(bridge: str, value: str) -> str:
    n = parse_dpid(value)
    vsctl(["set", "Bridge", check_bridge(bridge), f"other-config:datapath-id={n:016x}"])
    return f"{n:016x}"


def get_stp(bridge: str) -> str:
    return vsctl(["get", "Bridge", check_bridge(bridge), "stp_enable"])


def set_stp(bridge: str, on: bool) -> None:
    vsctl(["set", "Bridge", check_bridge(bridge), f"stp_enable={'true' if on else 'false'}"])


def get_controller(bridge: str) -> str:
    return vsctl(["get-controller", check_bridge(bridge)])


def set_controller(bridge: str, target: str) -> None:
    if not TARGET_RE.fullmatch(target):
        raise InputError(f"bad controller target {target!r}: use e.g. tcp:127.0.0.1:6653")
    vsctl(["set-controller", check_bridge(bridge), target])


def del_controller(bridge: str) -> None:
    vsctl(["del-controller", check_bridge(bridge)])
