"""FRR's checks for ``nslab check``: ``bgp`` and ``bfd``, as a checks file writes
them. Named by the ``frr`` kind (:mod:`nslab.frr.kind`, ``checks``), so the
core's check union (:data:`nslab.model.checks.Check`) holds them and names
neither; judged by :mod:`nslab.frr.checks`. Imports only the model's check
base (it is read while :mod:`nslab.model.checks` is built)."""
from __future__ import annotations

from typing import Dict, Optional

from pydantic import Field, model_validator
from typing_extensions import Literal

from nslab.model.checkbase import CheckBase, Json, Peer, peers_text
from nslab.model.fields import NodeName

#: What ``show`` names for a ``bgp`` or ``bfd`` check: the FRR command it runs.
BGP_SHOW = {"summary": "show bgp summary json", "neighbors": "show bgp neighbors json",
            "ipv4": "show bgp ipv4 unicast json", "ipv6": "show bgp ipv6 unicast json"}
BFD_SHOW = {"peers": "show bfd peers json", "counters": "show bfd peers counters json"}


class Bgp(CheckBase):
    """BGP sessions of ``node`` (FRR): each peer ``established`` or ``down``
    (anything else, or not configured), from ``show bgp summary json``; and
    an ``expect`` subset of the JSON of ``show`` (summary, neighbors, ipv4,
    ipv6: the routes of ``show bgp ipv4 unicast json``)."""

    check: Literal["bgp"]
    node: NodeName
    peers: Dict[Peer, Literal["established", "down"]] = Field(default_factory=dict)
    show: Literal["summary", "neighbors", "ipv4", "ipv6"] = "summary"
    expect: Optional[Json] = None

    @model_validator(mode="after")
    def _something(self) -> "Bgp":
        if not self.peers and self.expect is None:
            raise ValueError("give peers, expect or both")
        if self.peers and self.show != "summary":
            raise ValueError("peers are read from show: summary; check another show with expect")
        if len(self.peers) > 256:
            raise ValueError("at most 256 peers")
        return self

    @property
    def command(self) -> str:
        return BGP_SHOW[self.show]

    def describe(self) -> str:
        return "bgp " + (peers_text(self.peers) or self.show)


class Bfd(CheckBase):
    """BFD sessions of ``node`` (FRR ``show bfd peers json``): each peer, by
    its interface or address, ``up`` or ``down`` (anything else, or none);
    and an ``expect`` subset of the JSON of ``show``."""

    check: Literal["bfd"]
    node: NodeName
    peers: Dict[Peer, Literal["up", "down"]] = Field(default_factory=dict)
    show: Literal["peers", "counters"] = "peers"
    expect: Optional[Json] = None

    @model_validator(mode="after")
    def _something(self) -> "Bfd":
        if not self.peers and self.expect is None:
            raise ValueError("give peers, expect or both")
        if self.peers and self.show != "peers":
            raise ValueError("peers are read from show: peers; check another show with expect")
        if len(self.peers) > 256:
            raise ValueError("at most 256 peers")
        return self

    @property
    def command(self) -> str:
        return BFD_SHOW[self.show]

    def describe(self) -> str:
        return "bfd " + (peers_text(self.peers) or self.show)


