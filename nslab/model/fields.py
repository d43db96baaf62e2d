"""Typed values of a topology: every field a file or a caller gives is parsed into
one of these before anything is built.

Each type says what is allowed (never what is forbidden): names by the lab's
name rule, interface names by a subset of the kernel's rule, addresses and
prefixes with :mod:`ipaddress`, routes as structured data, rates and delays as
numbers with units, sysctls restricted to an allow-list of keys each
namespace holds for itself and discards with it (:mod:`nslab.model.sysctls`).
Rendering into text formats (``ip -batch`` lines, FRR configs) happens later,
from these values only (see :mod:`nslab.model.render`).

Pure logic, no root, no system access.
"""
from __future__ import annotations

import ipaddress
import re
from typing import Any, List, Optional, TypeVar, Union

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field,
                      PlainSerializer, StrictInt, WithJsonSchema,
                      model_validator)
from typing_extensions import Annotated

from ..errors import InputError, TopologyError
from . import sysctls
from .shaping import parse_rate, parse_time_ms


class StrictModel(BaseModel):
    """A model that refuses unknown keys and does not coerce between kinds
    (a number where a string is expected is an error, not ``"10"``)."""

    model_config = ConfigDict(extra="forbid", strict=False, frozen=True,
                              arbitrary_types_allowed=False, defer_build=True)


def _need_str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, not {type(value).__name__}")
    return value


# -- names ---------------------------------------------------------------------------
#: Node names become namespace names and interface prefixes (``<node>-eth<N>``
#: must fit the kernel's 15 characters).
NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,8}$")
NAME_RULE = "1-9 letters, digits or _, starting with a letter"

#: Interface names: the kernel's rule (1-15 characters, no ``/``, ``:`` or
#: whitespace, not ``.`` or ``..``) narrowed to characters that are plain
#: tokens everywhere a name is written: ``ip``/``tc -batch`` give quotes, ``#``
#: and backslashes a meaning, and a leading ``-`` reads as an option to
#: ``ethtool`` or ``tc``.
IFNAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}$")
IFNAME_RULE = ("1-15 characters from letters, digits, '_', '.' and '-', starting with a "
               "letter, digit or '_'")


def check_name(name: Any, what: str = "node name") -> str:
    """Return ``name`` if it is safe as a namespace and interface prefix, else raise."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise TopologyError(f"{what} {name!r} is not a safe interface name: use {NAME_RULE}")
    return name


def _node_name(value: Any) -> str:
    value = _need_str(value, "a node name")
    if not NAME_RE.fullmatch(value):
        raise ValueError(f"{value!r} is not a valid node name: use {NAME_RULE}")
    return value


def _ifname(value: Any) -> str:
    value = _need_str(value, "an interface name")
    if not IFNAME_RE.fullmatch(value):
        raise ValueError(f"{value!r} is not a valid interface name: use {IFNAME_RULE}")
    return value


def check_ifname(value: Any, what: str = "interface") -> str:
    """Return ``value`` if it is a valid interface name, else raise InputError."""
    try:
        return _ifname(value)
    except ValueError as exc:
        raise InputError(f"{what}: {exc}") from None


NodeName = Annotated[str, BeforeValidator(_node_name),
                     WithJsonSchema({"type": "string", "pattern": NAME_RE.pattern})]
IfName = Annotated[str, BeforeValidator(_ifname),
                   WithJsonSchema({"type": "string", "pattern": IFNAME_RE.pattern})]

#: Free text that is shown to people but never reaches a command: printable,
#: one line.
LABEL_RE = re.compile(r"^[\x20-\x7e]{1,120}$")


def _label(value: Any) -> str:
    value = _need_str(value, "a label")
    if not LABEL_RE.fullmatch(value):
        raise ValueError(f"{value!r} is not a valid label: use 1-120 printable ASCII characters")
    return value


Label = Annotated[str, BeforeValidator(_label),
                  WithJsonSchema({"type": "string", "pattern": LABEL_RE.pattern})]


# -- addresses -----------------------------------------------------------------------
IPInterface = Union[ipaddress.IPv4Interface, ipaddress.IPv6Interface]
IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
IPNetwork = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]


def _no_scope(value: str) -> None:
    if "%" in value:
        raise ValueError(f"{value!r}: zone ids (%...) are not accepted; the interface is "
                         "given by the link")


def parse_interface(value: Any) -> IPInterface:
    """``10.0.0.1/24`` or ``2001:db8::1/64`` (a prefix length is required)."""
    if isinstance(value, (ipaddress.IPv4Interface, ipaddress.IPv6Interface)):
        return value
    value = _need_str(value, "an address")
    _no_scope(value)
    if "/" not in value:
        raise ValueError(f"address {value!r} needs a prefix length, e.g. 10.0.0.1/24")
    try:
        return ipaddress.ip_interface(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address with a prefix length") from None


def parse_address(value: Any) -> IPAddress:
    """A bare IPv4 or IPv6 address."""
    if isinstance(value, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        return value
    value = _need_str(value, "an address")
    _no_scope(value)
    try:
        return ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address") from None


def parse_network(value: Any) -> IPNetwork:
    """A prefix such as ``10.1.0.0/16`` (host bits must be zero)."""
    if isinstance(value, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
        return value
    value = _need_str(value, "a prefix")
    _no_scope(value)
    try:
        return ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a network prefix ({exc})") from None


#: Serialise a value as its text (an address as ``10.0.0.1``).
AS_STR = PlainSerializer(str, return_type=str)
_as_str = AS_STR
Interface = Annotated[IPInterface, BeforeValidator(parse_interface), _as_str,
                      WithJsonSchema({"type": "string", "description": "address/prefix"})]
Address = Annotated[IPAddress, BeforeValidator(parse_address), _as_str,
                    WithJsonSchema({"type": "string", "description": "IPv4 or IPv6 address"})]
Network = Annotated[IPNetwork, BeforeValidator(parse_network), _as_str,
                    WithJsonSchema({"type": "string", "description": "network/prefix"})]

MAC_RE = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")


def _mac(value: Any) -> str:
    value = _need_str(value, "a MAC address")
    if not MAC_RE.fullmatch(value):
        raise ValueError(f"{value!r} is not a MAC address (aa:bb:cc:dd:ee:ff)")
    if int(value[:2], 16) & 1:
        raise ValueError(f"{value!r} is a multicast MAC address")
    return value.lower()


Mac = Annotated[str, BeforeValidator(_mac),
                WithJsonSchema({"type": "string", "pattern": MAC_RE.pattern})]


# -- numbers with units --------------------------------------------------------------
def _rate(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"a rate must be a number (Mbit/s) or a string such as 100Mbit, "
                         f"not {type(value).__name__}")
    try:
        return parse_rate(value)
    except InputError as exc:
        raise ValueError(str(exc)) from None


def _delay(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"a delay must be a number (ms) or a string such as 5ms, "
                         f"not {type(value).__name__}")
    try:
        ms = parse_time_ms(value)
    except InputError as exc:
        raise ValueError(str(exc)) from None
    if ms > 60_000:
        raise ValueError(f"{value!r} is more than 60 s")
    return ms


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected a number, not {type(value).__name__}")
    return float(value)


#: bit/s: ``100Mbit``, ``1Gbit``, or a bare number in Mbit/s (Mininet's ``bw``).
Rate = Annotated[int, BeforeValidator(_rate),
                 PlainSerializer(lambda v: f"{v}bit", return_type=str, when_used="json"),
                 WithJsonSchema({"anyOf": [{"type": "number", "minimum": 0.000001},
                                           {"type": "string"}],
                                 "description": "Mbit/s, or a rate with a unit (100Mbit, "
                                                "1Gbit); at least 1 bit/s"})]
#: milliseconds: ``5ms``, ``200us``, ``1s`` or a bare number in ms.
Delay = Annotated[float, BeforeValidator(_delay),
                  WithJsonSchema({"anyOf": [{"type": "number", "minimum": 0},
                                            {"type": "string"}],
                                  "description": "ms, or a time with a unit (5ms, 200us)"})]
Percent = Annotated[float, BeforeValidator(_number), Field(ge=0, le=100)]


def _rate_text(value: str) -> str:
    if value.lower() != "none":
        _rate(value)
    return value


#: A rate kept as written (``1Gbit``), or ``none`` for unshaped: a study
#: configuration field, stored as the user gave it.
RateText = Annotated[str, AfterValidator(_rate_text)]


def _unique(value: List[Any]) -> List[Any]:
    if not value:
        raise ValueError("empty list")
    seen = set()
    for item in value:
        if item in seen:
            raise ValueError(f"{item!r} is listed twice")
        seen.add(item)
    return value


T = TypeVar("T")
#: A non-empty list without repeats (e.g. the points of a sweep).
UniqueList = Annotated[List[T], AfterValidator(_unique)]
Mtu = Annotated[StrictInt, Field(ge=68, le=65535)]
QueueLimit = Annotated[StrictInt, Field(ge=1, le=10_000_000)]
Bytes = Annotated[StrictInt, Field(ge=1, le=2 ** 31 - 1)]


def _dpid(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("a datapath id is a number, not a boolean")
    if isinstance(value, int):
        n = value
    elif isinstance(value, str) and re.fullmatch(r"(0x)?[0-9a-fA-F]{1,16}", value):
        # Mininet gives dpids as hex strings; so does ovs-vsctl.
        n = int(value, 16)
    else:
        raise ValueError(f"{value!r} is not a datapath id (an integer or up to 16 hex digits)")
    if not 0 <= n < 2 ** 64:
        raise ValueError(f"datapath id {value!r} does not fit in 64 bits")
    return n


Dpid = Annotated[int, BeforeValidator(_dpid),
                 WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 0},
                                           {"type": "string", "pattern": "^(0x)?[0-9a-fA-F]{1,16}$"}]})]

CONTROLLER_RE = re.compile(
    r"^(tcp|ssl|ptcp|pssl):(\d{1,3}(\.\d{1,3}){3}|\[[0-9a-fA-F:]+\])(:\d{1,5})?$")


def _controller(value: Any) -> str:
    value = _need_str(value, "a controller target")
    if not CONTROLLER_RE.fullmatch(value):
        raise ValueError(f"{value!r} is not an OpenFlow controller target "
                         "(tcp:IP[:PORT], ssl:..., ptcp:..., pssl:...)")
    return value


ControllerTarget = Annotated[str, BeforeValidator(_controller),
                             WithJsonSchema({"type": "string", "pattern": CONTROLLER_RE.pattern})]


# -- sysctls -------------------------------------------------------------------------
#: A key in the per-namespace ``net.`` tree: dotted segments of plain characters
#: (and then one of :mod:`nslab.model.sysctls`' allow-list).
SYSCTL_KEY_RE = re.compile(r"^net(\.[A-Za-z0-9_-]{1,64}){1,6}$")
SYSCTL_VALUE_RE = re.compile(r"^[A-Za-z0-9 _.,:+-]{1,256}$")


def _sysctl_key(value: Any) -> str:
    value = _need_str(value, "a sysctl key")
    if not value.startswith("net."):
        raise ValueError(f"sysctl {value!r} is not in the per-namespace net. tree: a network "
                         "namespace does not isolate it, so setting it in a node would change "
                         "the host")
    if not SYSCTL_KEY_RE.fullmatch(value):
        raise ValueError(f"{value!r} is not a sysctl key (dotted names of letters, digits, "
                         "'_' and '-')")
    if not sysctls.allowed(value):  # per namespace and undone with it: nothing else
        raise ValueError(sysctls.refusal(value))
    return value


def _sysctl_value(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        if abs(value) >= 2 ** 63:
            raise ValueError(f"{value} does not fit a sysctl")
        return str(value)
    value = _need_str(value, "a sysctl value")
    if not SYSCTL_VALUE_RE.fullmatch(value):
        raise ValueError(f"{value!r} is not a sysctl value (1-256 letters, digits, spaces "
                         "and _ . , : + -)")
    return value


SysctlKey = Annotated[str, BeforeValidator(_sysctl_key),
                      WithJsonSchema({"type": "string", "pattern": SYSCTL_KEY_RE.pattern})]
SysctlValue = Annotated[str, BeforeValidator(_sysctl_value),
                        WithJsonSchema({"anyOf": [{"type": "integer", "minimum": -2 ** 63,
                                                   "maximum": 2 ** 63 - 1},
                                                  {"type": "boolean"},
                                                  {"type": "string",
                                                   "pattern": SYSCTL_VALUE_RE.pattern}]})]


def sysctl_template(key: str) -> str:
    """The key a fresh namespace has for ``key``: per-interface keys
    (``net.ipv4.conf.eth0.rp_filter``) exist there as ``...conf.default...``."""
    parts = key.split(".")
    if len(parts) >= 5 and parts[1] in ("ipv4", "ipv6") and parts[2] in ("conf", "neigh") \
            and parts[3] not in ("all", "default"):
        parts[3] = "default"
    return ".".join(parts)


# -- routes --------------------------------------------------------------------------
_ROUTE_KEYS = ("via", "dev", "metric", "src")


def _default(value: str) -> str:
    if value != "default":
        raise ValueError(f"{value!r} is neither a prefix nor 'default'")
    return value


DefaultRoute = Annotated[str, AfterValidator(_default),
                         WithJsonSchema({"const": "default"})]


class Route(StrictModel):
    """A static route: ``{dst: 10.1.0.0/16, via: 10.0.0.254}`` or the string
    ``"10.1.0.0/16 via 10.0.0.254 dev eth0 metric 10 src 10.0.0.1"``.

    ``dst`` is a prefix or ``default``; at least one of ``via`` and ``dev``.
    """

    dst: Union[Network, DefaultRoute] = Field(description="a prefix, or default")
    via: Optional[Address] = None
    dev: Optional[IfName] = None
    metric: Optional[Annotated[StrictInt, Field(ge=0, le=2 ** 32 - 1)]] = None
    src: Optional[Address] = None

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, data: Any) -> Any:
        if isinstance(data, str):
            return parse_route(data)
        return data

    @model_validator(mode="after")
    def _consistent(self) -> "Route":
        if self.via is None and self.dev is None:
            raise ValueError("a route needs 'via' (a gateway) or 'dev' (an interface)")
        fam = None if isinstance(self.dst, str) else self.dst.version  # str: "default"
        for what, addr in (("via", self.via), ("src", self.src)):
            if addr is not None and fam is not None and addr.version != fam:
                raise ValueError(f"route to {self.dst}: {what} {addr} is not IPv{fam}")
        if self.dst == "default" and self.via is not None and self.src is not None \
                and self.via.version != self.src.version:
            raise ValueError("route: via and src are of different IP versions")
        return self

    @property
    def family(self) -> int:
        if not isinstance(self.dst, str):  # str: "default"
            return self.dst.version
        for addr in (self.via, self.src):
            if addr is not None:
                return addr.version
        return 4

    def tokens(self) -> List[str]:
        """The route as ``ip route add`` tokens (after ``route add``)."""
        out = [str(self.dst)]
        for key in _ROUTE_KEYS:
            val = getattr(self, key)
            if val is not None:
                out += [key, str(val)]
        return out




def parse_route(text: str) -> dict:
    """Parse ``"DST [via ADDR] [dev IF] [metric N] [src ADDR]"`` into fields;
    anything left over, repeated or unknown is refused."""
    words = text.split()
    if not words:
        raise ValueError("empty route")
    if any(ch in text for ch in "\r\n\t\x00"):
        raise ValueError(f"route {text!r} is not one line")
    out: dict = {"dst": words[0]}
    rest = words[1:]
    while rest:
        key = rest.pop(0)
        if key not in _ROUTE_KEYS:
            raise ValueError(f"route {text!r}: unexpected {key!r} (a route is DST [via ADDR] "
                             "[dev IF] [metric N] [src ADDR])")
        if key in out:
            raise ValueError(f"route {text!r}: {key!r} given twice")
        if not rest:
            raise ValueError(f"route {text!r}: {key!r} needs a value")
        val = rest.pop(0)
        if key == "metric":
            if not val.isdigit():
                raise ValueError(f"route {text!r}: metric {val!r} is not a number")
            out[key] = int(val)
        else:
            out[key] = val
    return out


