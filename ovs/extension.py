"""The lab extension for Open vSwitch switches (``type: ovs``) and their uplinks.

An OVS switch has no namespace: its ports are the root-namespace ends of its
links (``<run>-p<N>``, created by the core), and this extension puts them on an
OVS bridge ``<run>-b<N>`` tagged ``external_ids:nslab-run``. It starts the OVS
daemons when they are not running, picks the datapath (kernel where the
openvswitch module exists, else userspace with tx checksum offload off on every
attached veth), attaches physical NICs as uplinks with a journalled exact
restore, and, for ``nslab clean``, finds bridges by their tag.
"""
from __future__ import annotations

import logging
import shutil
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from nslab.errors import InputError
from nslab.runtime.extension import ExtendedLab, Extension
from nslab.model.naming import ovs_bridge

if TYPE_CHECKING:  # pragma: no cover
    from nslab.runtime.plan import BuildPlan

log = logging.getLogger(__name__)


class OvsExtension(Extension):
    """OVS bridges for a lab's ``type: ovs`` switches."""

    name = "ovs"
    provides = ("switch:ovs",)

    def __init__(self) -> None:
        self.datapath: Optional[str] = None
        #: switch node -> bridge name
        self.bridges: Dict[str, str] = {}
        #: uplink NIC -> its snapshot before the lab touched it
        self.uplinks: Dict[str, Dict[str, Any]] = {}

    def needs(self, topo) -> List[str]:
        return ["ovs"]

    def _switches(self, lab: ExtendedLab) -> List[str]:
        topo = lab.topology
        return sorted(s for s in topo.switches()
                      if topo.switch_type_of(s) == "ovs" and lab.is_local(s))

    def check(self, lab: ExtendedLab) -> None:
        """Refuse an unsafe uplink before anything is built."""
        from .uplink import check_uplink
        for sw in self._switches(lab):
            node = lab.topology.nodes[sw]
            if node.uplink:
                check_uplink(node.uplink, force=node.force)

    def journal(self, lab: ExtendedLab) -> Dict[str, Any]:
        return {"bridges": len(self._switches(lab))}

    def build(self, lab: ExtendedLab, plan: "BuildPlan") -> None:
        from nslab.runtime.lab import ethtool_each

        from .bridge import add_bridge
        from .daemon import datapath_type, ensure_running
        ensure_running()
        self.datapath = datapath_type()
        for i, sw in enumerate(self._switches(lab), 1):
            br = ovs_bridge(lab.run_id, i)
            node = lab.topology.nodes[sw]
            lab.inventory.extra.setdefault(self.name, []).append(br)
            self.bridges[sw] = br
            lab.nodes[sw].intfs.insert(0, br)
            add_bridge(br, lab.run_id, sw, plan.root_ports.get(sw, []), self.datapath,
                       stp=node.stp, dpid=node.dpid, controller=node.controller)
            if node.uplink:
                self._attach_uplink(lab, sw, br, node.uplink)
        stp = [self.bridges[sw] for sw in self.bridges if lab.topology.nodes[sw].stp]
        if stp:
            from nslab.runtime.lab import wait_stp_settled

            from .bridge import stp_unsettled
            wait_stp_settled(f"STP on {len(stp)} OVS bridges", lambda: stp_unsettled(stp),
                             timeout=90.0, poll=0.5)
        if self.datapath == "netdev":
            # The userspace datapath does not complete partial checksums: TCP
            # stalls unless the veths attached to it compute them in software.
            ethtool_each(plan.root_switch_links, ["tx", "off"])

    def _attach_uplink(self, lab: ExtendedLab, sw: str, br: str, iface: str) -> None:
        """Journal how to restore the NIC, then attach it (see :mod:`nslab.ovs.uplink`)."""
        from .uplink import attach, restore_argv, snapshot
        snap = snapshot(iface)
        lab.record_restore(f"uplink {iface} (from {br})", restore_argv(snap, br))
        self.uplinks[iface] = snap
        attach(iface, br, self.datapath or "netdev")
        lab.nodes[sw].intfs.append(iface)

    def facts(self, lab: ExtendedLab) -> Dict[str, Any]:
        """The physical uplinks, with their drivers and their state before the lab."""
        if not self.uplinks:
            return {}
        from nslab.runtime.provenance import interface_driver
        return {"uplinks": {i: {"driver": interface_driver(i), "ethtool": snap.get("ethtool")}
                            for i, snap in self.uplinks.items()}}

    def discover(self, run_id: Optional[str] = None) -> Dict[str, List[str]]:
        if not shutil.which("ovs-vsctl"):
            return {}
        from .bridge import tagged_bridges
        out: Dict[str, List[str]] = {}
        for br, rid in tagged_bridges(run_id).items():
            out.setdefault(rid, []).append(br)
        return out

    def describe(self, obj: str) -> str:
        return f"OVS bridge {obj}"

    def remove(self, run_id: str, objects: List[str]) -> None:
        from .bridge import del_bridge
        for br in objects:
            del_bridge(br)

    def release(self, journal: Dict[str, Any], live_runs: List[Dict[str, Any]]) -> None:
        """Stop the OVS daemons if nslab started them for labs and no live run uses them."""
        from .daemon import release
        release([j["run"] for j in live_runs if self.name in (j.get("extensions") or {})])


def bridge_of(lab: ExtendedLab, switch: str) -> str:
    """The OVS bridge of ``switch`` in ``lab``."""
    ext = lab.extension("ovs")
    try:
        return ext.bridges[switch]
    except KeyError:
        raise InputError(f"{switch} is not an OVS switch of this lab") from None
