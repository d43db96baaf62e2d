"""FRR's node options: ``bgp:`` (and BFD under it), as a topology writes them.

Registered as a node option of the ``frr`` kind (:mod:`nslab.frr.kind`), so the
core reads them as a kind's option and names none of them. Rendered into FRR's
configuration by :mod:`nslab.frr.router`'s templates."""
from __future__ import annotations

import ipaddress
from typing import Any, List, Optional, cast

from pydantic import BeforeValidator, Field, StrictBool, StrictInt, WithJsonSchema, model_validator
from typing_extensions import Annotated

from nslab.model.fields import AS_STR, IfName, Network, StrictModel, parse_address


Asn = Annotated[StrictInt, Field(ge=1, le=4_294_967_295)]


class BfdOptions(StrictModel):
    """BFD (FRR ``bfdd``) on every BGP session of a node: a failure is detected
    after ``detect_multiplier`` missed packets at the negotiated interval."""

    detect_multiplier: Annotated[StrictInt, Field(ge=2, le=255)] = 3
    receive_interval: Annotated[StrictInt, Field(ge=10, le=60000,
                                                 description="ms")] = 100
    transmit_interval: Annotated[StrictInt, Field(ge=10, le=60000,
                                                  description="ms")] = 100


class BgpOptions(StrictModel):
    """BGP on a node (FRR): eBGP unnumbered over the listed interfaces."""

    asn: Asn
    router_id: Annotated[ipaddress.IPv4Address, BeforeValidator(parse_address), AS_STR,
                         WithJsonSchema({"type": "string", "description": "IPv4 router id"})]
    unnumbered: List[IfName] = Field(default_factory=list,
                                     description="interfaces with an unnumbered eBGP session")
    networks: List[Network] = Field(default_factory=list,
                                    description="IPv4 prefixes to announce")
    keepalive: Annotated[StrictInt, Field(ge=1, le=3600)] = 1
    holdtime: Annotated[StrictInt, Field(ge=3, le=65535)] = 3
    coalesce_time: Annotated[StrictInt, Field(ge=0, le=4_294_967_295)] = 100
    maximum_paths: Annotated[StrictInt, Field(ge=1, le=128)] = 64
    bfd: Optional[BfdOptions] = Field(None, description="BFD on every session (FRR bfdd)")
    passive: StrictBool = Field(False, description="wait for the peers to open the TCP "
                                "connections (never open one): no connection collisions "
                                "when both ends start at once")
    update_delay: Annotated[StrictInt, Field(
        ge=0, le=3600, description="seconds bgpd may stay read-only after it starts (FRR "
        "update-delay): no best path and no update until every configured peer is up and "
        "has sent its routes (or a keepalive), so routes are installed once, not once per "
        "path; 0 = off")] = 0

    @model_validator(mode="after")
    def _timers(self) -> "BgpOptions":
        for net in self.networks:
            if net.version != 4:
                raise ValueError(f"networks: {net} is IPv6; the lab announces IPv4 unicast "
                                 "prefixes (over IPv6 link-local sessions)")
        if self.holdtime < 3 * self.keepalive:
            raise ValueError(f"holdtime {self.holdtime} must be at least 3 x keepalive "
                             f"({self.keepalive})")
        return self


def bgp_of(node: Any) -> Optional[BgpOptions]:
    """A topology node's ``bgp:`` option (None when it has none): the ``frr``
    kind's node option, typed (the core's node model holds it by key)."""
    return cast(Optional[BgpOptions], node.option("bgp"))
