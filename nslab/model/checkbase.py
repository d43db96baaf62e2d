"""What every check of a checks file shares, and the values checks are made of:
the base a kind's own checks build on (:attr:`nslab.model.kinds.Kind.checks`:
FRR's ``bgp`` and ``bfd``, :mod:`nslab.frr.checkspec`) without importing
:mod:`nslab.model.checks`, which reads the kinds' checks while it is built."""
from __future__ import annotations

import ipaddress
from typing import Any, List, Mapping, Optional, Tuple

from pydantic import BeforeValidator, Field, WithJsonSchema
from typing_extensions import Annotated

from .fields import IFNAME_RE, Label, StrictModel, parse_address

#: The longest ``within`` (s): a check polls at most this long.
MAX_WITHIN_S = 600.0
#: JSON values (mappings, lists, scalars) an ``expect`` may hold.
MAX_EXPECT_NODES = 2000
#: How deep an ``expect`` may nest.
MAX_EXPECT_DEPTH = 16

#: seconds a check may keep trying, and between tries
Within = Annotated[float, Field(ge=0, le=MAX_WITHIN_S, allow_inf_nan=False)]
Every = Annotated[float, Field(ge=0.1, le=60, allow_inf_nan=False)]

def _peer(value: Any) -> str:
    """A BGP or BFD peer: an interface (unnumbered sessions) or an address."""
    if not isinstance(value, str):
        raise ValueError(f"a peer is an interface name or an address, not {type(value).__name__}")
    if IFNAME_RE.fullmatch(value) and not _is_address(value):
        return value
    try:
        return str(parse_address(value))
    except ValueError:
        raise ValueError(f"{value!r} is neither an interface name nor an IP address") from None


def _is_address(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


Peer = Annotated[str, BeforeValidator(_peer),
                 WithJsonSchema({"type": "string", "description": "an interface or an address"})]



def _json_value(value: Any) -> Any:
    """``value`` if it is JSON data (mappings with string keys, lists, text,
    numbers, booleans, null) of bounded size and depth; YAML's other types
    (a timestamp, a set, bytes) are refused."""
    count = 0
    stack: List[Tuple[Any, int]] = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        count += 1
        if count > MAX_EXPECT_NODES:
            raise ValueError(f"more than {MAX_EXPECT_NODES} values")
        if depth > MAX_EXPECT_DEPTH:
            raise ValueError(f"nested more than {MAX_EXPECT_DEPTH} deep")
        if isinstance(v, dict):
            for k, item in v.items():
                if not isinstance(k, str):
                    raise ValueError(f"key {k!r}: a JSON key is text (quote it)")
                stack.append((item, depth + 1))
        elif isinstance(v, list):
            stack.extend((item, depth + 1) for item in v)
        elif isinstance(v, float) and v != v:
            raise ValueError("NaN is not a JSON value")
        elif v is not None and not isinstance(v, (str, int, float, bool)):
            raise ValueError(f"a {type(v).__name__} is not a JSON value (quote it)")
    return value


Json = Annotated[Any, BeforeValidator(_json_value),
                 WithJsonSchema({"description": "JSON data: the part of the output expected"})]



class CheckBase(StrictModel):
    """A check: a ``name`` for the table, and how long to keep trying. Each
    kind of check adds ``check: Literal["<kind>"]`` (the discriminator), the
    fields it reads and :meth:`describe`."""


    name: Optional[Label] = Field(None, description="what the table calls it (default: "
                                                    "made from the check)")
    within: Within = Field(0.0, description="seconds to keep trying until it holds (0: once)")
    every: Every = Field(0.5, description="seconds between tries")

    def label(self) -> str:
        """What a table calls it: its ``name``, or one made from the check."""
        return self.name or self.describe()

    def describe(self) -> str:
        raise NotImplementedError


def peers_text(peers: Mapping[str, str]) -> str:
    """``spine1-eth0, spine1-eth1``; more than two: ``4 peers``."""
    return ", ".join(peers) if len(peers) <= 2 else f"{len(peers)} peers"
