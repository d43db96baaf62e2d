"""The ``frr`` kind: what FRRouting adds to the topology format.

A host or router with ``bgp:`` runs FRR (zebra, bgpd, bfdd with ``bfd:``), built
by :class:`nslab.frr.router.FrrExtension` for the feature ``bgp``; drawn as a
double octagon; exported to containerlab in FRR's own image. Registered under
the entry point group ``nslab.kinds`` (see :mod:`nslab.model.kinds`). Imports
only the model (it is read while the topology model is built)."""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, Tuple

from nslab.model.kinds import Image, Kind, NodeOption, Tool

from .options import BgpOptions
from .version import FRR_DIR

#: The image ``nslab topo export`` runs a BGP node in: FRR's own, the release
#: the configurations are rendered for (its tag's version).
FRR_IMAGE = "quay.io/frrouting/frr:10.3.1"


def _unnumbered(bgp: Any, node: str, interfaces: Sequence[str]) -> Optional[Tuple[Tuple[Any, ...], str]]:
    """Each ``unnumbered`` interface must be one of the node's."""
    for j, intf in enumerate(bgp.unnumbered):
        if intf not in interfaces:
            return ("unnumbered", j), f"{intf} is not an interface of {node}"
    return None


def _rename(bgp: Any, new: Callable[[str], str]) -> Any:
    """``bgp`` (plain data) with its unnumbered interfaces renamed."""
    return {**bgp, "unnumbered": [new(i) for i in bgp.get("unnumbered", [])]}


KIND = Kind(
    name="frr",
    description="FRRouting: eBGP unnumbered, ECMP and BFD on hosts and routers",
    node_options=(NodeOption(
        key="bgp", annotation=BgpOptions, on=("host", "router"), feature="bgp",
        description="BGP on this node (FRR): eBGP unnumbered over the listed interfaces",
        draw={"shape": "doubleoctagon", "style": "filled", "fillcolor": "#f4e8f8"},
        check=_unnumbered, rename=_rename),),
    tools=(Tool("frr", (f"{FRR_DIR}/zebra", "--version"),
                programs=(f"{FRR_DIR}/zebra", f"{FRR_DIR}/bgpd"), package="frr", label="FRR",
                oldest="8.4", too_old="nslab is tested with FRR 8.4 and 10.x; older releases "
                "may refuse the configuration it renders"),),
    image=Image(FRR_IMAGE, "--frr-image", ("bgp",)),
    checks=("nslab.frr.checkspec:Bgp", "nslab.frr.checkspec:Bfd"),
)
