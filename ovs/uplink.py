"""Physical NICs as uplinks of a lab's OVS bridge.

Safety first: the interface must exist, must not be a loopback, must not already
be enslaved to a bridge or bond or be an OVS port, and must not carry the
default route or the current SSH session unless forced. Its state (addresses,
routes, up/down, MTU, offloads, negotiated speed/duplex) is snapshotted and the
commands that restore it are journalled *before* anything changes, so teardown
and ``nslab clean`` after a crash put the NIC back exactly.
"""
from __future__ import annotations

import json
import os
import re
from typing import Any, Dict, List, Optional

from nslab.errors import InputError
from nslab.model.fields import check_ifname
from nslab.runtime.proc import run

#: Offload features the lab may change on an uplink (userspace datapath: tx off).
OFFLOADS = ("tx-checksumming", "generic-segmentation-offload", "tcp-segmentation-offload")
_ETHTOOL_K = {"tx-checksumming": "tx", "generic-segmentation-offload": "gso",
              "tcp-segmentation-offload": "tso"}


def _json(argv: List[str]) -> Any:
    res = run(argv, check=False)
    try:
        return json.loads(res.stdout or "[]")
    except ValueError:
        return []


def check_uplink(iface: str, force: bool = False) -> None:
    """Raise :class:`InputError` naming why ``iface`` cannot be an uplink."""
    check_ifname(iface, "uplink")
    if not os.path.isdir(f"/sys/class/net/{iface}"):
        raise InputError(f"no interface {iface!r} on this machine")
    if iface == "lo" or (_json(["ip", "-j", "link", "show", "dev", iface]) or [{}])[0].get(
            "link_type") == "loopback":
        raise InputError(f"{iface} is a loopback interface: it cannot be an uplink")
    if os.path.exists(f"/sys/class/net/{iface}/master"):
        master = os.path.basename(os.readlink(f"/sys/class/net/{iface}/master"))
        raise InputError(f"{iface} is already in {master}: detach it first")
    if os.path.exists("/usr/bin/ovs-vsctl"):
        res = run(["ovs-vsctl", "--timeout=5", "port-to-br", iface], check=False)
        if res.ok:
            raise InputError(f"{iface} is already a port of OVS bridge {res.stdout.strip()}")
    if force:
        return
    for route in _json(["ip", "-j", "route", "show", "default"]):
        if route.get("dev") == iface:
            raise InputError(f"{iface} carries the default route: attaching it would cut this "
                             "machine off (use --force if you mean it)")
    ssh = os.environ.get("SSH_CONNECTION", "").split()
    if len(ssh) >= 3:
        local_ip = ssh[2]
        for link in _json(["ip", "-j", "addr", "show", "dev", iface]):
            for a in link.get("addr_info", []):
                if a.get("local") == local_ip:
                    raise InputError(f"{iface} carries this SSH session ({local_ip}): attaching "
                                     "it would cut you off (use --force if you mean it)")


def snapshot(iface: str) -> Dict[str, Any]:
    """The NIC's state: addresses, routes, flags, MTU, offloads, speed/duplex."""
    link = (_json(["ip", "-j", "addr", "show", "dev", iface]) or [{}])[0]
    routes = [r for r in _json(["ip", "-j", "route", "show", "dev", iface])
              if r.get("protocol") not in ("kernel",)]
    offloads = {}
    out = run(["ethtool", "-k", iface], check=False).stdout
    for line in out.splitlines():
        k, _, v = line.partition(":")
        if k.strip() in OFFLOADS:
            offloads[k.strip()] = v.strip().split()[0] if v.strip() else ""
    return {"iface": iface, "mtu": link.get("mtu"), "up": "UP" in link.get("flags", []),
            "addrs": [f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", [])
                      if a.get("family") == "inet"],
            "routes": routes, "offloads": offloads,
            "ethtool": parse_ethtool(run(["ethtool", iface], check=False).stdout)}


def restore_argv(snap: Dict[str, Any], bridge: str) -> List[List[str]]:
    """Commands that undo the attachment and put the NIC back as snapshotted."""
    i = snap["iface"]
    argv: List[List[str]] = [["ovs-vsctl", "--timeout=10", "--if-exists", "del-port", bridge, i]]
    if snap.get("mtu"):
        argv.append(["ip", "link", "set", "dev", i, "mtu", str(snap["mtu"])])
    argv.append(["ip", "link", "set", "dev", i, "up" if snap.get("up") else "down"])
    for a in snap.get("addrs", []):
        argv.append(["ip", "addr", "replace", a, "dev", i])
    for r in snap.get("routes", []):
        cmd = ["ip", "route", "replace", r["dst"]]
        if r.get("gateway"):
            cmd += ["via", r["gateway"]]
        cmd += ["dev", i]
        if r.get("metric") is not None:
            cmd += ["metric", str(r["metric"])]
        argv.append(cmd)
    for feature, state in snap.get("offloads", {}).items():
        if state in ("on", "off") and feature in _ETHTOOL_K:
            argv.append(["ethtool", "-K", i, _ETHTOOL_K[feature], state])
    return argv


def attach(iface: str, bridge: str, datapath: str) -> None:
    """Move the NIC into ``bridge``: its IPv4 addresses go (a bridge port does not
    use them; they come back on teardown), it joins the bridge and comes up."""
    for a in snapshot(iface)["addrs"]:
        run(["ip", "addr", "del", a, "dev", iface], check=False)
    run(["ovs-vsctl", "--timeout=10", "add-port", bridge, iface], where=f"uplink {iface}")
    run(["ip", "link", "set", "dev", iface, "up"])
    if datapath == "netdev":
        run(["ethtool", "-K", iface, "tx", "off"], check=False)


_ETH_RE = {
    "speed": re.compile(r"^\s*Speed:\s*(\S+)", re.M),
    "duplex": re.compile(r"^\s*Duplex:\s*(\S+)", re.M),
    "autoneg": re.compile(r"^\s*Auto-negotiation:\s*(\S+)", re.M),
    "link": re.compile(r"^\s*Link detected:\s*(\S+)", re.M),
    "port": re.compile(r"^\s*Port:\s*(.+)$", re.M),
}


def parse_ethtool(text: str) -> Dict[str, Optional[str]]:
    """Speed, duplex, autoneg, link and port from ``ethtool IFACE`` output."""
    out: Dict[str, Optional[str]] = {}
    for key, rx in _ETH_RE.items():
        m = rx.search(text)
        out[key] = m.group(1).strip() if m else None
    return out
