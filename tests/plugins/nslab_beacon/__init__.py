"""A throwaway kind for the tests, outside the core: a ``beacon:`` node option
(an address the node answers on, put on its loopback), its tool, its drawing
and the extension that builds it. Registered by a dist-info with two entry
point lines (``nslab.kinds`` and ``nslab.extensions``); no file under nslab/
names it. This module is the kind (it imports only the model: it is read
while the topology model is built); :mod:`.extension` builds it."""
from __future__ import annotations

import sys
from nslab.model.fields import Interface, StrictModel
from nslab.model.kinds import Kind, NodeOption, Tool


class Beacon(StrictModel):
    """An address the node answers on (put on its loopback)."""

    address: Interface
    label: str = "beacon"


def _lo_only(value, node, interfaces):
    return None if "lo" in interfaces else (("address",), f"{node} has no loopback")


KIND = Kind(
    name="beacon",
    description="a test kind: an address on the node's loopback",
    node_options=(NodeOption(key="beacon", annotation=Beacon, on=("host", "router"),
                             feature="beacon", description="an address the node answers on",
                             draw={"shape": "star", "style": "filled", "fillcolor": "#ffee88"},
                             check=_lo_only),),
    tools=(Tool("beacontool", (sys.executable, "--version"), programs=(sys.executable,),
                package="python3"),),
    probes="nslab_beacon.extension:capabilities",
)
