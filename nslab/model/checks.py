"""Checks of a running lab, as data: the typed vocabulary of ``checks:`` and
``stages:`` (in a checks file, a topology file or a study file), and the
changes a stage makes to a lab's links (the same as ``nslab link set``).

A check is one of a small set of kinds, each parsed into typed values before
anything runs, never a shell command:

* ``ping``: from a node to a node (its loopback, else its first address) or
  an address; at most ``loss`` % lost, the average round trip in ``rtt``;
* ``route``: a prefix in a node's main table (``ip -j route``), present or
  absent, with ``nexthops`` paths (ECMP) and an ``expect`` subset of the
  route's JSON;
* ``interface``: an interface's operational ``state``, ``mtu`` and
  ``counters`` (bounds), and an ``expect`` subset of ``ip -s -j link``;
* ``bgp`` and ``bfd``: sessions by peer (FRR: ``vtysh -c 'show ... json'``,
  one of a fixed set of show commands) and an ``expect`` subset of its JSON;
* ``throughput``: iperf2 from a node to another, at least ``at_least``.

Every check takes ``within: T``: poll (every ``every`` seconds) until it
holds or ``T`` seconds have passed, then fail with the last difference, as
FRR's topotests do. Sizes are bounded here (:data:`MAX_CHECKS`,
:data:`MAX_STAGES`, :data:`MAX_WITHIN_S`, :data:`MAX_EXPECT_NODES`); loading a
file with line numbers is :mod:`nslab.model.checkfile`. Pure: no I/O.
"""
from __future__ import annotations

import ipaddress
import re
import typing
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple, Union

from pydantic import BeforeValidator, ConfigDict, Field, StrictBool, StrictInt, WithJsonSchema, model_validator
from typing_extensions import Annotated, Literal

from ..errors import LabError
from .fields import (IFNAME_RE, NAME_RE, Address, Delay, IfName, Label, Mtu, NodeName, Rate,
                     StrictModel, parse_address)

#: Checks in one stage (or in ``checks:``), and stages in a file.
MAX_CHECKS = 500
MAX_STAGES = 50
#: Link changes one stage makes.
MAX_LINK_CHANGES = 64
#: The longest ``within`` (s): a check polls at most this long.
MAX_WITHIN_S = 600.0
#: JSON values (mappings, lists, scalars) an ``expect`` may hold.
MAX_EXPECT_NODES = 2000
#: How deep an ``expect`` may nest.
MAX_EXPECT_DEPTH = 16

#: What ``show`` names for a ``bgp`` or ``bfd`` check: the FRR command it runs.
BGP_SHOW = {"summary": "show bgp summary json", "neighbors": "show bgp neighbors json",
            "ipv4": "show bgp ipv4 unicast json", "ipv6": "show bgp ipv6 unicast json"}
BFD_SHOW = {"peers": "show bfd peers json", "counters": "show bfd peers counters json"}
#: A link as ``nslab link set`` and a stage name it: two node names.
LINK_RE = re.compile(r"^([A-Za-z][A-Za-z0-9_]{0,8})-([A-Za-z][A-Za-z0-9_]{0,8})$")


class CannotRun(LabError):
    """A check could not be run (as opposed to run and not hold): an unknown
    node, a tool or daemon that does not answer, output that is not JSON."""


# -- values ---------------------------------------------------------------------------
#: seconds a check may keep trying, and between tries
Within = Annotated[float, Field(ge=0, le=MAX_WITHIN_S, allow_inf_nan=False)]
Every = Annotated[float, Field(ge=0.1, le=60, allow_inf_nan=False)]
Counter = Literal["rx_bytes", "rx_packets", "rx_errors", "rx_dropped",
                  "tx_bytes", "tx_packets", "tx_errors", "tx_dropped"]


def _loss(value: Any) -> float:
    """A percentage: a number, or text such as ``1%`` or ``0.5``."""
    if isinstance(value, str):
        text = value.strip()
        text = text[:-1].strip() if text.endswith("%") else text
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"{value!r} is not a percentage (e.g. 1% or 0.5)") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"a percentage must be a number, not {type(value).__name__}")
    return float(value)


Loss = Annotated[float, BeforeValidator(_loss), Field(ge=0, le=100),
                 WithJsonSchema({"anyOf": [{"type": "number", "minimum": 0, "maximum": 100},
                                           {"type": "string"}],
                                 "description": "%, e.g. 1 or 1%"})]


def _target(value: Any) -> str:
    """A node name or an IP address (kept as text)."""
    if not isinstance(value, str):
        raise ValueError(f"a node name or an address, not {type(value).__name__}")
    if NAME_RE.fullmatch(value):
        return value
    try:
        return str(parse_address(value))
    except ValueError:
        raise ValueError(f"{value!r} is neither a node name nor an IP address") from None


Target = Annotated[str, BeforeValidator(_target),
                   WithJsonSchema({"type": "string", "description": "a node, or an address"})]


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


def _prefix(value: Any) -> str:
    """``default`` or a prefix (host bits zero), kept as its canonical text."""
    if not isinstance(value, str):
        raise ValueError(f"a prefix must be a string, not {type(value).__name__}")
    if value == "default":
        return value
    try:
        return str(ipaddress.ip_network(value, strict=True))
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a prefix ({exc})") from None


Prefix = Annotated[str, BeforeValidator(_prefix),
                   WithJsonSchema({"type": "string", "description": "a prefix, or default"})]


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


def _json_map(value: Any) -> Dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"a mapping of fields, not {type(value).__name__}")
    return typing.cast(Dict[str, Any], _json_value(value))


#: JSON data that is a mapping (the fields of one route, one interface).
JsonMap = Annotated[Dict[str, Any], BeforeValidator(_json_map),
                    WithJsonSchema({"type": "object", "description": "the fields expected"})]


class Bound(StrictModel):
    """A number's bounds: ``at_least``, ``at_most`` or both."""

    at_least: Optional[float] = Field(None, allow_inf_nan=False)
    at_most: Optional[float] = Field(None, allow_inf_nan=False)

    @model_validator(mode="after")
    def _some(self) -> "Bound":
        if self.at_least is None and self.at_most is None:
            raise ValueError("give at_least, at_most or both")
        if self.at_least is not None and self.at_most is not None \
                and self.at_least > self.at_most:
            raise ValueError(f"at_least {self.at_least:g} is above at_most {self.at_most:g}")
        return self

    def holds(self, value: float) -> bool:
        return ((self.at_least is None or value >= self.at_least)
                and (self.at_most is None or value <= self.at_most))

    def text(self, unit: str = "") -> str:
        """``>= 10 ms``, ``<= 0``, ``10..20 ms``."""
        u = f" {unit}" if unit else ""
        if self.at_least is not None and self.at_most is not None:
            return f"{self.at_least:g}..{self.at_most:g}{u}"
        if self.at_least is not None:
            return f">= {self.at_least:g}{u}"
        return f"<= {self.at_most:g}{u}"


class DelayBound(Bound):
    """Bounds of a time in ms (``5ms``, ``200us`` or a number of ms)."""

    at_least: Optional[Delay] = None
    at_most: Optional[Delay] = None


# -- checks -----------------------------------------------------------------------------
class _Check(StrictModel):
    name: Optional[Label] = Field(None, description="what the table calls it (default: "
                                                    "made from the check)")
    within: Within = Field(0.0, description="seconds to keep trying until it holds (0: once)")
    every: Every = Field(0.5, description="seconds between tries")

    def label(self) -> str:
        """What a table calls it: its ``name``, or one made from the check."""
        return self.name or self.describe()

    def describe(self) -> str:
        raise NotImplementedError


class Ping(_Check):
    """ICMP echo from ``from`` to ``to``: at most ``loss`` % of ``count``
    lost (default 0), the average round trip within ``rtt`` if given."""

    model_config = ConfigDict(**{**StrictModel.model_config, "populate_by_name": True})

    check: Literal["ping"]
    src: NodeName = Field(alias="from", description="the node that pings")
    to: Target = Field(description="a node (its loopback, else its first address) or an address")
    source: Optional[Address] = Field(None, description="the source address (ping -I)")
    count: Annotated[StrictInt, Field(ge=1, le=100)] = 3
    interval: Annotated[float, Field(ge=0.01, le=10, allow_inf_nan=False)] = Field(
        0.2, description="s between echoes")
    wait: Annotated[StrictInt, Field(ge=1, le=30)] = Field(
        1, description="s to wait for each reply (ping -W)")
    loss: Loss = Field(0.0, description="the most loss allowed, %")
    rtt: Optional[DelayBound] = Field(None, description="the average round trip, ms")

    @property
    def node(self) -> str:
        return self.src

    def describe(self) -> str:
        return f"ping {self.src} -> {self.to}"


class Route(_Check):
    """A prefix in ``node``'s main routing table (``ip -j route``)."""

    check: Literal["route"]
    node: NodeName
    dst: Prefix
    present: StrictBool = Field(True, description="false: the route must be absent")
    nexthops: Optional[Annotated[StrictInt, Field(ge=1, le=256)]] = Field(
        None, description="paths it must have (ECMP); a route without a nexthop list has one")
    expect: Optional[JsonMap] = Field(
        None, description="a subset of the route's `ip -j route` object, e.g. {protocol: bgp}")

    @model_validator(mode="after")
    def _absent(self) -> "Route":
        if not self.present and (self.nexthops is not None or self.expect is not None):
            raise ValueError("an absent route has no nexthops or expect")
        return self

    def describe(self) -> str:
        return f"route {self.dst}" + ("" if self.present else " absent")


class Interface(_Check):
    """An interface of ``node``: its operational ``state``, ``mtu``,
    ``counters`` (bounds) and an ``expect`` subset of ``ip -s -j link``."""

    check: Literal["interface"]
    node: NodeName
    interface: IfName
    state: Optional[Literal["up", "down"]] = Field(None, description="operational state")
    mtu: Optional[Mtu] = None
    counters: Dict[Counter, Bound] = Field(
        default_factory=dict, description="bounds of counters, e.g. {rx_errors: {at_most: 0}}")
    expect: Optional[JsonMap] = Field(None, description="a subset of `ip -s -j link`'s object")

    @model_validator(mode="after")
    def _something(self) -> "Interface":
        if self.state is None and self.mtu is None and not self.counters and self.expect is None:
            raise ValueError("give state, mtu, counters or expect")
        return self

    def describe(self) -> str:
        return f"interface {self.interface}"


class Bgp(_Check):
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
        return "bgp " + (_peers_text(self.peers) or self.show)


class Bfd(_Check):
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
        return "bfd " + (_peers_text(self.peers) or self.show)


class Throughput(_Check):
    """iperf2 (TCP) from ``from`` to ``to`` (its ``address``, else its
    loopback, else its first address) for ``time`` seconds: at least
    ``at_least``. Throughput checks run one at a time, after the others."""

    model_config = ConfigDict(**{**StrictModel.model_config, "populate_by_name": True})

    check: Literal["throughput"]
    src: NodeName = Field(alias="from")
    to: NodeName = Field(description="the node that receives (runs the iperf server)")
    address: Optional[Address] = Field(None, description="the address to send to")
    at_least: Rate
    time: Annotated[float, Field(ge=1, le=60, allow_inf_nan=False)] = Field(
        3.0, description="s of traffic")
    streams: Annotated[StrictInt, Field(ge=1, le=16)] = 1

    @property
    def node(self) -> str:
        return self.src

    def describe(self) -> str:
        return f"throughput {self.src} -> {self.to}"


def _peers_text(peers: typing.Mapping[str, str]) -> str:
    """``spine1-eth0, spine1-eth1``; more than two: ``4 peers``."""
    return ", ".join(peers) if len(peers) <= 2 else f"{len(peers)} peers"


Check = Annotated[Union[Ping, Route, Interface, Bgp, Bfd, Throughput],
                  Field(discriminator="check")]
#: The kinds, in the order the reference lists them.
KINDS = ("ping", "route", "interface", "bgp", "bfd", "throughput")


# -- link changes -----------------------------------------------------------------------
def _link(value: Any) -> str:
    if not isinstance(value, str) or not LINK_RE.fullmatch(value):
        raise ValueError(f"{value!r} is not a link: two node names joined by '-' (spine1-leaf2)")
    a, b = LINK_RE.fullmatch(value).groups()  # type: ignore[union-attr]
    if a == b:
        raise ValueError(f"{value!r}: a link joins two different nodes")
    return value


LinkName = Annotated[str, BeforeValidator(_link),
                     WithJsonSchema({"type": "string", "pattern": LINK_RE.pattern})]


class LinkChange(StrictModel):
    """A change to a running lab's link (``nslab link set``, a stage's
    ``links:``): rate, delay, jitter and loss on both directions (delay,
    jitter and loss need netem in the kernel), ``state: down`` (the first
    node's end, so the second sees its carrier go) or ``up`` (both ends),
    or ``reset`` (back to the topology's own shaping, both ends up)."""

    link: LinkName
    rate: Optional[Rate] = None
    delay: Optional[Delay] = None
    jitter: Optional[Delay] = None
    loss: Optional[Loss] = None
    state: Optional[Literal["up", "down"]] = None
    reset: StrictBool = False

    @model_validator(mode="after")
    def _something(self) -> "LinkChange":
        given = [k for k in ("rate", "delay", "jitter", "loss", "state")
                 if getattr(self, k) is not None]
        if self.reset and given:
            raise ValueError(f"reset takes nothing else (got {', '.join(given)})")
        if not self.reset and not given:
            raise ValueError("give rate, delay, jitter, loss, state or reset")
        return self

    @property
    def ends(self) -> Tuple[str, str]:
        a, b = self.link.split("-", 1)
        return a, b

    @property
    def needs_netem(self) -> bool:
        return bool(self.delay or self.jitter or self.loss)

    def describe(self) -> str:
        """``spine2-server1 down``, ``h1-s1 delay 50ms loss 1%``."""
        from .shaping import format_rate
        if self.reset:
            return f"{self.link} reset"
        words = [self.link]
        if self.rate is not None:
            words.append(f"rate {format_rate(self.rate)}")
        for key in ("delay", "jitter"):
            if getattr(self, key) is not None:
                words.append(f"{key} {getattr(self, key):g}ms")
        if self.loss is not None:
            words.append(f"loss {self.loss:g}%")
        if self.state is not None:
            words.append(self.state)
        return " ".join(words)


# -- files ------------------------------------------------------------------------------
def _file_name(value: Any) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,99}", value) \
            or not value.endswith((".yaml", ".yml")):
        raise ValueError(f"{value!r}: a YAML file name in the folder (lab.yaml), no path")
    return value


FileName = Annotated[str, BeforeValidator(_file_name),
                     WithJsonSchema({"type": "string", "description": "a YAML file name"})]


class Stage(StrictModel):
    """A stage of an exercise: a title, the link changes it makes, then its
    checks; with ``include_previous``, the previous stage's changes and
    checks come first (and theirs, if it includes its own)."""

    title: Label
    include_previous: StrictBool = False
    links: List[LinkChange] = Field(default_factory=list, max_length=MAX_LINK_CHANGES)
    checks: List[Check] = Field(default_factory=list, max_length=MAX_CHECKS)


class CheckFile(StrictModel):
    """A checks file: ``checks`` (one stage) or ``stages``, and the topology
    file a folder holds (what ``nslab grade`` builds in each)."""

    title: Optional[Label] = None
    topology: Optional[FileName] = Field(
        None, description="the topology file of each folder `nslab grade` builds (lab.yaml)")
    checks: Optional[List[Check]] = Field(None, max_length=MAX_CHECKS)
    stages: Optional[List[Stage]] = Field(None, max_length=MAX_STAGES)

    @model_validator(mode="after")
    def _one(self) -> "CheckFile":
        if (self.checks is None) == (self.stages is None):
            raise ValueError("give checks (one stage) or stages, not both"
                             if self.checks is not None else "give checks or stages")
        if self.stages is not None and not self.stages:
            raise ValueError("stages: at least one")
        return self


# -- resolved ---------------------------------------------------------------------------
@dataclass(frozen=True)
class StagePlan:
    """A stage as it runs: its own and included link changes and checks, in
    order. ``checks`` pairs each with the stage that wrote it (1-based)."""

    number: int
    title: str
    links: Tuple[LinkChange, ...] = ()
    checks: Tuple[Tuple[int, Any], ...] = ()


@dataclass(frozen=True)
class Suite:
    """Every stage of a checks file, resolved (``include_previous`` expanded)."""

    path: str
    title: str
    stages: Tuple[StagePlan, ...]
    staged: bool = False
    topology: Optional[str] = None
    notes: Tuple[str, ...] = field(default=())

    def stage(self, number: int) -> StagePlan:
        if not 1 <= number <= len(self.stages):
            raise IndexError(number)
        return self.stages[number - 1]


def resolve(spec: CheckFile, path: str, title: str = "") -> Suite:
    """The stages of ``spec`` with ``include_previous`` expanded."""
    if spec.stages is None:
        one = StagePlan(1, "checks", (), tuple((1, c) for c in spec.checks or ()))
        return Suite(path, spec.title or title, (one,), False, spec.topology)
    plans: List[StagePlan] = []
    for n, st in enumerate(spec.stages, 1):
        links: Tuple[LinkChange, ...] = tuple(st.links)
        checks: Tuple[Tuple[int, Any], ...] = tuple((n, c) for c in st.checks)
        if st.include_previous and plans:
            links = plans[-1].links + links
            checks = plans[-1].checks + checks
        plans.append(StagePlan(n, st.title, links, checks))
    return Suite(path, spec.title or title, tuple(plans), True, spec.topology)


@dataclass
class Outcome:
    """One try of a check: did it hold, what was expected and seen (one line
    each, for a table), and the differences (one per line)."""

    ok: bool
    expected: str
    seen: str
    diff: List[str] = field(default_factory=list)
