"""Ready topologies. Each is a function returning a :class:`~nslab.model.topo.Topology`,
registered by name under the ``nslab.topologies`` entry point group
(``nslab topo list``, ``nslab topo up NAME``)."""
from .basic import pair, single

__all__ = ["single", "pair"]
