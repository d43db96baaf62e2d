"""The beacon kind's extension: builds each node's beacon."""
from __future__ import annotations

from typing import List

from nslab.runtime.caps import Capability
from nslab.runtime.extension import Extension


def capabilities(found):
    """The kind's own probe: a beacon needs the loopback's ``ip`` (a core tool)."""
    ip = found.get("tool:ip")
    return {"beacon": Capability("beacon", ip is None or ip.ok, "loopback addresses", False,
                                 "apt install iproute2")}


class BeaconExtension(Extension):
    """Builds each node's beacon: its address on ``lo``, in the node's namespace."""

    provides = ("beacon",)

    def build(self, lab, plan) -> None:
        for name, node in lab.topology.nodes.items():
            beacon = node.option("beacon")
            if beacon is not None and lab.is_local(name):
                lab[name].run(["ip", "addr", "add", str(beacon.address), "dev", "lo"])

    def teardown(self, lab) -> List[str]:
        return []  # the address goes with the node's namespace
