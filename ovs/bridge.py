"""OVS bridges the lab creates: one ``ovs-vsctl`` transaction per bridge, tagged
with ``external_ids:nslab-run``."""
from __future__ import annotations

import json
import logging
from typing import Dict, List, Optional, Sequence, TypedDict

from nslab.runtime.proc import run

log = logging.getLogger(__name__)

TAG_KEY = "nslab-run"
#: OVS's minimum STP forward delay, seconds.
STP_FORWARD_DELAY_S = 4


def stp_unsettled(bridges: Sequence[str]) -> List[str]:
    """Ports of ``bridges`` whose STP state is still listening or learning."""
    res = run(["ovs-vsctl", "--timeout=5", "--format=json", "--", "--columns=name,status",
               "list", "Port"], check=False, timeout=10)
    if not res.ok:
        return ["(ovs-vsctl failed)"]
    mine = set()
    for br in bridges:
        ports = run(["ovs-vsctl", "--timeout=5", "list-ports", br], check=False, timeout=10)
        mine |= set(ports.stdout.split())
    out = []
    for name, status in json.loads(res.stdout).get("data", []):
        st = dict(status[1]) if isinstance(status, list) and status[0] == "map" else {}
        if name in mine and st.get("stp_state") in ("listening", "learning", None):
            out.append(f"{name} {st.get('stp_state', 'no state yet')}")
    return out


def add_bridge(name: str, run_id: str, node: str, ports: Sequence[str], datapath: str,
               stp: bool = False, dpid: Optional[int] = None,
               controller: Optional[str] = None) -> None:
    """Create bridge ``name`` with ``ports`` in one transaction.

    Without a controller the bridge runs in ``standalone`` fail mode: a
    learning switch (OpenFlow NORMAL), like Mininet's ``--controller none``
    with OVS in standalone mode.
    """
    argv = ["ovs-vsctl", "--timeout=20", "--", "add-br", name,
            "--", "set", "Bridge", name, f"datapath_type={datapath}",
            f"external_ids:{TAG_KEY}={run_id}", f"external_ids:nslab-node={node}",
            "fail_mode=standalone", f"stp_enable={'true' if stp else 'false'}"]
    if stp:
        # OVS's shortest forward delay: a lab with loops settles in seconds
        argv += [f"other_config:stp-forward-delay={STP_FORWARD_DELAY_S}"]
    if dpid is not None:
        argv += [f"other_config:datapath-id={dpid:016x}"]
    for port in ports:
        argv += ["--", "add-port", name, port]
    if controller:
        argv += ["--", "set-controller", name, controller]
    run(argv, timeout=30, where=f"ovs bridge {node}")


def del_bridge(name: str) -> None:
    # --no-wait: the database drops the bridge at once; ovs-vswitchd closes its
    # ports in the background (waiting for it cost ~0.9 s for 64 netdev ports)
    run(["ovs-vsctl", "--timeout=20", "--no-wait", "--if-exists", "del-br", name], check=False,
        timeout=30)


class BridgeInfo(TypedDict):
    """One OVS bridge as :func:`list_bridges` reads it."""

    name: str
    external_ids: Dict[str, str]


def list_bridges() -> List[BridgeInfo]:
    """Every OVS bridge as ``{"name", "external_ids"}`` (empty if ovs-vsctl
    cannot reach the database)."""
    res = run(["ovs-vsctl", "--timeout=5", "--format=json", "--", "--columns=name,external_ids",
               "list", "Bridge"], check=False, timeout=10)
    if not res.ok:
        return []
    data = json.loads(res.stdout)
    out: List[BridgeInfo] = []
    for name, ext in data.get("data", []):
        ids = dict(ext[1]) if isinstance(ext, list) and ext[0] == "map" else {}
        out.append({"name": name, "external_ids": ids})
    return out


def tagged_bridges(run_id: Optional[str] = None) -> Dict[str, str]:
    """OVS bridges carrying ``external_ids:nslab-run`` (of any run, or of ``run_id``)."""
    found = {}
    for br in list_bridges():
        rid = br["external_ids"].get(TAG_KEY)
        if rid and (run_id is None or rid == run_id):
            found[str(br["name"])] = rid
    return found


def foreign_bridges() -> List[str]:
    """Bridges nslab did not create."""
    return [str(b["name"]) for b in list_bridges() if TAG_KEY not in b["external_ids"]]
