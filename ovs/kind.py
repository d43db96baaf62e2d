"""The ``ovs`` kind: what Open vSwitch adds to the topology format.

A switch of ``type: ovs`` is an OVS bridge in the root namespace (so it has no
namespace of its own and no port limit of the Linux bridge), takes a
``dpid``, a ``controller`` and a physical NIC as its ``uplink``, and is drawn
as a hexagon. Built by :class:`nslab.ovs.extension.OvsExtension` for the
feature ``switch:ovs``. Registered under the entry point group
``nslab.kinds`` (see :mod:`nslab.model.kinds`); imports only the model."""
from __future__ import annotations

from nslab.model.kinds import Kind, SwitchType, Tool

KIND = Kind(
    name="ovs",
    description="Open vSwitch bridges (kernel or userspace datapath), OpenFlow controllers, "
                "physical uplinks",
    switch_types=(SwitchType(
        "ovs", "OVS", namespace=False, max_ports=None, capability="ovs",
        takes=("dpid", "controller", "uplink"),
        draw={"shape": "hexagon", "style": "filled", "fillcolor": "#fdf1dc"}),),
    tools=(Tool("openvswitch", ("ovs-vsctl", "--version"), programs=("ovs-vsctl", "ovs-ofctl"),
                package="openvswitch-switch", label="Open vSwitch", capability=False),),
    probes="nslab.ovs.probes:capabilities",
)
