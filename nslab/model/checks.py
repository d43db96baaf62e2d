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
:data:`MAX_STAGES`, :data:`~nslab.model.checkbase.MAX_WITHIN_S`, :data:`~nslab.model.checkbase.MAX_EXPECT_NODES`); loading a
file with line numbers is :mod:`nslab.model.checkfile`. Pure: no I/O.
"""
from __future__ import annotations

import importlib
import ipaddress
import re
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple, Type, Union

from pydantic import BeforeValidator, ConfigDict, Field, StrictBool, StrictInt, WithJsonSchema, model_validator
from typing_extensions import Annotated, Literal

from ..errors import LabError
from .checkbase import CheckBase, _json_value
from .kinds import KindError, registered as registered_kinds
from .fields import (NAME_RE, Address, Delay, IfName, Label, Mtu, NodeName, Rate,
                     StrictModel, parse_address)

#: Checks in one stage (or in ``checks:``), and stages in a file.
MAX_CHECKS = 500
MAX_STAGES = 50
#: Link changes one stage makes.
MAX_LINK_CHANGES = 64

#: A link as ``nslab link set`` and a stage name it: two node names.
LINK_RE = re.compile(r"^([A-Za-z][A-Za-z0-9_]{0,8})-([A-Za-z][A-Za-z0-9_]{0,8})$")


class CannotRun(LabError):
    """A check could not be run (as opposed to run and not hold): an unknown
    node, a tool or daemon that does not answer, output that is not JSON."""


# -- values ---------------------------------------------------------------------------
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
class Ping(CheckBase):
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


class Route(CheckBase):
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


class Interface(CheckBase):
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


class Throughput(CheckBase):
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


def _kind_checks() -> Tuple[Type[CheckBase], ...]:
    """The check models the registered kinds name (:attr:`nslab.model.kinds.Kind.checks`)."""
    out = []
    for kind in registered_kinds().values():
        for where in kind.checks:
            module, _, name = where.partition(":")
            try:
                model = getattr(importlib.import_module(module), name)
            except (ImportError, AttributeError) as exc:
                raise KindError(f"kind {kind.name}: its check {where} failed to load: "
                                f"{type(exc).__name__}: {exc}") from exc
            if not (isinstance(model, type) and issubclass(model, CheckBase)):
                raise KindError(f"kind {kind.name}: its check {where} is not a CheckBase")
            out.append(model)
    return tuple(out)


#: Every kind of check: the core's, with the registered kinds' (FRR's bgp and
#: bfd) before throughput, in the order the reference lists them.
CHECK_MODELS: Tuple[Type[CheckBase], ...] = (Ping, Route, Interface) + _kind_checks() + (Throughput,)
if TYPE_CHECKING:
    Check = CheckBase
else:
    Check = Annotated[Union[CHECK_MODELS], Field(discriminator="check")]
#: The kinds, in the order the reference lists them.
KINDS = tuple(typing.get_args(m.model_fields["check"].annotation)[0] for m in CHECK_MODELS)


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
