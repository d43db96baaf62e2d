"""Open vSwitch for the lab: daemons, datapath choice, bridges (and the toolbelt)."""
from .daemon import OVS_CTL, datapath_type, ensure_running, release, stop_if_ours
from .bridge import add_bridge, del_bridge, tagged_bridges

__all__ = ["OVS_CTL", "datapath_type", "ensure_running", "release", "stop_if_ours",
           "add_bridge", "del_bridge", "tagged_bridges"]
