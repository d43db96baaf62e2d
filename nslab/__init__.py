"""nslab: a network-namespace lab for reproducing Linux networking studies.

Public API::

    from nslab import Lab, Topology
    from nslab.topologies import single
"""
from ._compat import install as _install_old_paths
from .errors import CapabilityError, CommandError, InputError, LabError, TopologyError
from .runtime.lab import Lab
from .model.topo import Topology

_install_old_paths()  # ``nslab.lab``, ``nslab.topo``, ...: see nslab._compat

__version__ = "0.2.0"
__all__ = ["Lab", "Topology", "LabError", "InputError", "TopologyError", "CapabilityError",
           "CommandError", "__version__"]
