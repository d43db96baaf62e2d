"""nslab: a network-namespace lab for reproducing Linux networking studies.

Public API::

    from nslab import Lab, Topology
    from nslab.topologies import single
"""
from .errors import CapabilityError, CommandError, InputError, LabError, TopologyError
from .runtime.lab import Lab
from .model.topo import Topology

__version__ = "0.3.6"
__all__ = ["Lab", "Topology", "LabError", "InputError", "TopologyError", "CapabilityError",
           "CommandError", "__version__"]
