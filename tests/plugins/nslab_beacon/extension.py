"""The beacon kind's extension: builds each node's beacon."""
from __future__ import annotations

from typing import List

from nslab.runtime.extension import Extension


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
