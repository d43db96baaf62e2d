"""The study file: a typed model of every field, its JSON Schema, and loading
with one line of error naming the file, the line and the field.

A study file is data from anyone and runs as root, so every value is parsed
into a typed one here, before any lab is built: node names, interfaces,
rates, sysctl keys (only those the kernel isolates per namespace), event
times (inside the traffic), metrics and plots from a fixed set, and sweep keys
that name something real. A topology may be a registered one with options,
an inline YAML topology, or a YAML file beside the study; never Python (a
study file runs no code of its own).

See ``docs/study-files.md`` for the format with examples, and
``docs/study.schema.json`` (``nslab study schema``) for the schema.
"""
from __future__ import annotations

import ipaddress
import math
import re
from typing import Any, Dict, List, Optional, Tuple, Union

from pydantic import (BeforeValidator, Field, StrictBool, StrictInt, WithJsonSchema,
                      field_validator, model_validator)
from typing_extensions import Annotated, Literal

from nslab.errors import InputError
from nslab.model.fields import (NAME_RE, Address, Delay, Label, NodeName, Percent, Rate, StrictModel,
                          SysctlKey, SysctlValue)
from nslab.traffic.pktgen import MIN_RATE as PKTGEN_MIN_RATE

#: traffic runs at most this long per trial (s)
MAX_DURATION = 3600.0

Seconds = Annotated[float, Field(ge=0, le=MAX_DURATION, allow_inf_nan=False)]
#: a name for a flow, an event, a metric or a study: a plain token
ID_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


def _ident(value: Any) -> str:
    if not isinstance(value, str) or not ID_RE.fullmatch(value):
        raise ValueError(f"{value!r} is not a name: 1-32 lower-case letters, digits, '_' or "
                         "'-', starting with a letter")
    return value


Ident = Annotated[str, BeforeValidator(_ident),
                  Field(json_schema_extra={"pattern": ID_RE.pattern})]
#: a scalar a sweep or a `where` filter can hold
Scalar = Union[StrictBool, StrictInt, float, str]


#: a relative path of plain names, each starting with a letter, digit or ``_``
#: (so no empty, ``.`` or ``..`` component, no leading ``/``, no ``\``)
_REL_PATH_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*(?:/[A-Za-z0-9_][A-Za-z0-9_.+-]*)*$")


def _yaml_path(value: Any) -> str:
    if not isinstance(value, str) or "\x00" in value or not value.endswith((".yaml", ".yml")):
        raise ValueError(f"{value!r}: a topology file here must be YAML (.yaml/.yml); a study "
                         "file runs no code of its own, so no Python topologies")
    if not _REL_PATH_RE.fullmatch(value):
        raise ValueError(f"{value!r}: a file in the study file's own folder, as a relative path "
                         "of plain names (no leading /, no '..', no '.')")
    return value


# -- topology ---------------------------------------------------------------------------
class TopologySpec(StrictModel):
    """Exactly one of ``ready`` (a registered topology, with ``options``),
    ``file`` (a YAML topology, relative to the study file) or ``inline`` (a
    YAML topology written in place)."""

    ready: Optional[Ident] = Field(None, description="a registered topology (nslab topo list)")
    options: Dict[Ident, Scalar] = Field(default_factory=dict,
                                         description="its options, as on `nslab topo up`")
    file: Optional[Annotated[str, BeforeValidator(_yaml_path),
                             Field(min_length=1, max_length=4096,
                                   json_schema_extra={"pattern": _REL_PATH_RE.pattern[:-1]
                                                      + r"\.ya?ml$"})]] = None
    inline: Optional[Dict[str, Any]] = None

    @model_validator(mode="after")
    def _one(self) -> "TopologySpec":
        given = [k for k in ("ready", "file", "inline") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of ready, file or inline"
                             + (f" (got {', '.join(given)})" if given else ""))
        if self.options and not self.ready:
            raise ValueError("options go with a ready topology")
        return self


# -- traffic ----------------------------------------------------------------------------
class _Flow(StrictModel):
    id: Ident
    src: NodeName = Field(description="the sending node")
    dst: NodeName = Field(description="the receiving node")
    address: Optional[Address] = Field(
        None, description="the address to send to (default: dst's loopback, else its first)")


class IperfTcp(_Flow):
    """iperf2 TCP for the whole trial, with a report every second."""

    kind: Literal["iperf-tcp"]
    streams: Annotated[StrictInt, Field(ge=1, le=64)] = 1
    cc: Optional[Annotated[str, Field(pattern=r"^[a-z0-9_]{1,16}$")]] = None
    mss: Optional[Annotated[StrictInt, Field(ge=88, le=9000)]] = None
    rate: Optional[Rate] = Field(None, description="cap per stream (iperf -b)")


class IperfUdp(_Flow):
    """iperf2 UDP at a fixed rate for the whole trial."""

    kind: Literal["iperf-udp"]
    rate: Rate = Field(description="offered rate, e.g. 100M")
    length: Annotated[StrictInt, Field(ge=16, le=65507)] = 1470
    streams: Annotated[StrictInt, Field(ge=1, le=64)] = 1


class Probe(_Flow):
    """One-way UDP probes with sequence numbers at a fixed rate: loss and the
    longest gap between arrivals (the outage a flow saw)."""

    kind: Literal["probe"]
    rate: Annotated[float, Field(ge=1, le=10000, description="probes per second")] = 200


class Ping(_Flow):
    """ICMP echo at a fixed interval: round-trip latency percentiles and loss."""

    kind: Literal["ping"]
    interval: Annotated[float, Field(ge=0.002, le=60, description="s")] = 0.05


class Pktgen(_Flow):
    """nslab's packet generator (UDP sockets, sequence numbers and timestamps)
    at a fixed frame rate and size; its sink counts what arrived."""

    kind: Literal["pktgen"]
    rate: Annotated[float, Field(ge=PKTGEN_MIN_RATE, le=10_000_000,
                                 description="frames per second")]
    size: Annotated[StrictInt, Field(ge=64, le=1518, description="Ethernet frame bytes")] = 64
    count: Optional[Annotated[StrictInt, Field(ge=1, le=10**10)]] = Field(
        None, description="frames to send (default: rate x duration)")


Flow = Annotated[Union[IperfTcp, IperfUdp, Probe, Ping, Pktgen], Field(discriminator="kind")]


# -- events -----------------------------------------------------------------------------
class _Event(StrictModel):
    id: Optional[Ident] = Field(None, description="a name, to sweep its time (events.ID.at)")
    at: Seconds = Field(description="seconds after the traffic starts")
    when: Dict[str, Scalar] = Field(default_factory=dict,
                                    description="run only at points with these sweep values")


class LinkEvent(_Event):
    """On ``link`` (its two nodes), or on the first link of the path a probe
    flow takes at that moment (``path_of: FLOW``, found with ``ip route get``
    for the probe's addresses and ports under the sender's hash policy)."""

    link: Optional[Tuple[NodeName, NodeName]] = Field(None, description="the link's two nodes")
    path_of: Optional[Ident] = Field(None, description="a probe flow: its first link")

    @model_validator(mode="after")
    def _target(self) -> "LinkEvent":
        if (self.link is None) == (self.path_of is None):
            raise ValueError("give exactly one of link or path_of")
        return self


class LinkDown(LinkEvent):
    """Set the link's end at the first node administratively down (the peer
    sees its carrier go)."""

    do: Literal["link-down"]


class LinkUp(LinkEvent):
    do: Literal["link-up"]


class LinkBlackhole(LinkEvent):
    """A silent failure: both ends stay up, every frame either way is dropped
    (a queue of length 0 at each end)."""

    do: Literal["link-blackhole"]


class LinkRestore(LinkEvent):
    """Back to the topology's own shaping (after a blackhole, rate or netem)."""

    do: Literal["link-restore"]


class LinkRate(LinkEvent):
    """Shape both directions to ``rate``."""

    do: Literal["link-rate"]
    rate: Rate


class LinkNetem(LinkEvent):
    """Delay, jitter and loss on both directions (needs netem in the kernel)."""

    do: Literal["link-netem"]
    delay: Optional[Delay] = None
    jitter: Optional[Delay] = None
    loss: Optional[Percent] = None


class DaemonEvent(_Event):
    """On ``node``, or on the next hop of a probe flow at that moment (``path_of``)."""

    node: Optional[NodeName] = None
    path_of: Optional[Ident] = Field(None, description="a probe flow: the node after its sender")
    daemon: Literal["zebra", "bgpd", "bfdd"]

    @model_validator(mode="after")
    def _target(self) -> "DaemonEvent":
        if (self.node is None) == (self.path_of is None):
            raise ValueError("give exactly one of node or path_of")
        return self


class DaemonKill(DaemonEvent):
    """SIGKILL: a crash (the kernel still closes the daemon's sockets)."""

    do: Literal["daemon-kill"]


class DaemonStop(DaemonEvent):
    """SIGSTOP: a hung daemon (its sockets stay open, it sends nothing)."""

    do: Literal["daemon-stop"]


class DaemonCont(DaemonEvent):
    do: Literal["daemon-cont"]


class DaemonStart(DaemonEvent):
    """Start a daemon killed earlier in the trial."""

    do: Literal["daemon-start"]


class SetSysctl(_Event):
    """Sysctls in a node's namespace (per-namespace keys only)."""

    do: Literal["sysctl"]
    node: NodeName
    set: Dict[SysctlKey, SysctlValue] = Field(min_length=1)


Event = Annotated[Union[LinkDown, LinkUp, LinkBlackhole, LinkRestore, LinkRate, LinkNetem,
                        DaemonKill, DaemonStop, DaemonCont, DaemonStart, SetSysctl],
                  Field(discriminator="do")]


# -- metrics ----------------------------------------------------------------------------
class _Metric(StrictModel):
    name: Optional[Ident] = Field(None, description="default: METRIC-FLOW or METRIC-NODE")


class Goodput(_Metric):
    """An iperf flow's goodput (Mbit/s, as the receiver reports it each
    second) over ``window`` (s after the start; default the whole trial), and
    its per-second series."""

    metric: Literal["goodput"]
    flow: Ident
    window: Optional[Tuple[Seconds, Seconds]] = None


class Outage(_Metric):
    """A probe flow: ``gap_ms`` (longest time between two arrivals, by the
    kernel's receive times: a busy host can only make it longer, unless a
    protocol timer ends the outage, which a late peer can make fire sooner),
    ``lost`` and ``loss_pct``."""

    metric: Literal["outage"]
    flow: Ident


class Latency(_Metric):
    """A ping flow: round-trip ``p50_ms``, ``p90_ms``, ``p99_ms``, ``max_ms``
    and ``loss_pct``."""

    metric: Literal["latency"]
    flow: Ident


class Delivery(_Metric):
    """A pktgen flow: ``sent``, ``received``, ``loss_pct``, ``pps`` (received
    per second of traffic) and ``latency_avg_us`` (one-way, same clock)."""

    metric: Literal["delivery"]
    flow: Ident


class Convergence(_Metric):
    """Route convergence at ``node`` for ``prefix`` (a network another
    routing node announces: ``node``'s BGP route to it is the one watched):
    ``withdrawn_ms`` (from just before the first event is applied until a
    read of the routing table, timed when it returns, finds a nexthop gone)
    and ``restored_ms`` (until all the nexthops it had before the trial are
    back); polled every 20 ms. A busy host can only make either longer,
    unless a protocol timer decides it (a silent failure's detection, a
    session's retries), which a late peer can make fire sooner."""

    metric: Literal["convergence"]
    node: NodeName
    prefix: Annotated[str, Field(pattern=r"^[0-9.]{7,15}/[0-9]{1,2}$")]

    @field_validator("prefix", mode="after")
    @classmethod
    def _prefix(cls, v: str) -> str:
        """A network, written as the kernel's routing table writes it
        (``10.0.0.0/08`` becomes ``10.0.0.0/8``)."""
        return str(ipaddress.IPv4Network(v))


class Cpu(_Metric):
    """CPU used by the node's processes (FRR daemons, traffic tools) over the
    trial, in % of one CPU."""

    metric: Literal["cpu"]
    node: NodeName


class Links(_Metric):
    """Bytes sent on each of the node's interfaces during the trial."""

    metric: Literal["links"]
    node: NodeName


Metric = Annotated[Union[Goodput, Outage, Latency, Delivery, Convergence, Cpu, Links],
                   Field(discriminator="metric")]

#: the values each metric kind records (``NAME.VALUE``; goodput records ``NAME``)
METRIC_VALUES: Dict[str, Tuple[str, ...]] = {
    "goodput": ("",), "outage": ("gap_ms", "lost", "loss_pct"),
    "latency": ("p50_ms", "p90_ms", "p99_ms", "max_ms", "loss_pct"),
    "delivery": ("sent", "received", "loss_pct", "pps", "latency_avg_us"),
    "convergence": ("withdrawn_ms", "restored_ms"), "cpu": ("cpu_pct",), "links": ()}


# -- plots and claims -------------------------------------------------------------------
class _Plot(StrictModel):
    title: Optional[Label] = None
    where: Dict[str, Scalar] = Field(default_factory=dict)


class PlotVs(_Plot):
    """A value against a sweep key (mean and 95 % interval), one line per ``series``."""

    kind: Literal["vs"]
    x: str
    y: str
    series: Optional[str] = None


class PlotTimeseries(_Plot):
    """A goodput metric's per-second series (mean over repeats), one line per
    ``series`` value, with the events marked."""

    kind: Literal["timeseries"]
    metric: Ident
    series: Optional[str] = None


class PlotLinks(_Plot):
    """A links metric: bytes per interface, stacked, one bar per ``x`` value."""

    kind: Literal["links"]
    metric: Ident
    x: str


Plot = Annotated[Union[PlotVs, PlotTimeseries, PlotLinks], Field(discriminator="kind")]


class Versus(StrictModel):
    """The other side of a comparison: points matching ``where``."""

    where: Dict[str, Scalar] = Field(min_length=1)


class ClaimSpec(StrictModel):
    """A statement about one value over the points matching ``where``, judged on
    the 95 % interval of its mean: exactly one of ``below``, ``above``,
    ``within``; or, with ``versus``, ``same_within`` (two one-sided tests, a
    relative margin), ``higher`` or ``lower`` (Welch interval of the difference)."""

    claim: Label = Field(description="the statement, as the report shows it")
    value: str = Field(description="a metric value, e.g. outage-probe.gap_ms")
    where: Dict[str, Scalar] = Field(default_factory=dict)
    below: Optional[float] = None
    above: Optional[float] = None
    within: Optional[Tuple[float, float]] = None
    versus: Optional[Versus] = None
    same_within: Optional[Annotated[float, Field(gt=0, le=10)]] = None
    higher: Optional[Literal[True]] = None
    lower: Optional[Literal[True]] = None
    source: Optional[Label] = Field(None, description="where the expectation comes from")

    @model_validator(mode="after")
    def _one_test(self) -> "ClaimSpec":
        alone = [k for k in ("below", "above", "within") if getattr(self, k) is not None]
        pair = [k for k in ("same_within", "higher", "lower") if getattr(self, k) is not None]
        if self.versus is None:
            if pair:
                raise ValueError(f"{pair[0]} compares two groups: give versus: {{where: ...}}")
            if len(alone) != 1:
                raise ValueError("give exactly one of below, above or within (or versus with "
                                 "same_within, higher or lower)")
        else:
            if alone or len(pair) != 1:
                raise ValueError("with versus give exactly one of same_within, higher or lower")
        if self.within is not None and not self.within[0] < self.within[1]:
            raise ValueError(f"within {list(self.within)}: the low end must be below the high")
        for x in (self.below, self.above, *(self.within or ())):
            if x is not None and not math.isfinite(x):
                raise ValueError("bounds must be finite numbers")
        return self


# -- packet captures --------------------------------------------------------------------
def _capture_link(value: Any) -> str:
    """``[A, B]`` (as events name a link) becomes ``A-B``; a string is
    ``NODE:IFACE``, ``A-B`` or ``NODE``, as ``nslab capture`` takes it."""
    from nslab.traffic.capture import parse_target
    if isinstance(value, (list, tuple)):
        if len(value) != 2 or not all(isinstance(v, str) for v in value):
            raise ValueError("[A, B] names a link by its two nodes")
        value = f"{value[0]}-{value[1]}"
    if not isinstance(value, str):
        raise ValueError("NODE:IFACE, A-B or [A, B] (a link, captured at A's end), or NODE")
    try:
        parse_target(value)
    except InputError as exc:
        raise ValueError(str(exc)) from None
    return value


CaptureLink = Annotated[str, BeforeValidator(_capture_link), WithJsonSchema({
    "anyOf": [{"type": "string", "pattern": r"^[A-Za-z0-9_:.-]{1,64}$"},
              {"type": "array", "items": {"type": "string", "pattern": NAME_RE.pattern},
               "minItems": 2, "maxItems": 2}]})]


def _capture_filter(value: Any) -> str:
    from nslab.traffic.capture import check_filter
    if not isinstance(value, str):
        raise ValueError("a capture filter is text, e.g. 'icmp or arp'")
    try:
        return check_filter(value)
    except InputError as exc:
        raise ValueError(str(exc)) from None


class CaptureSpec(StrictModel):
    """A packet capture (pcapng, by dumpcap) during chosen trials, kept beside
    their raw output (``raw/<trial>-capture-<name>.pcapng``) and named in the
    report. Its size is bounded by ``max_packets`` x ``snaplen``; the
    captures of a run are counted against ``--limit capture``/``captures``
    before anything is built."""

    link: CaptureLink = Field(description="[A, B] or A-B: the link, captured at A's end; "
                                          "NODE:IFACE: one interface; NODE: all its links' "
                                          "interfaces, one file")
    name: Optional[Ident] = Field(None, description="the file's name (default: from link)")
    where: Dict[str, Scalar] = Field(default_factory=dict,
                                     description="only at points with these sweep values")
    trials: Literal["first", "all"] = Field(
        "first", description="first: the first trial of each point; all: every trial")
    snaplen: Annotated[StrictInt, Field(ge=64, le=65535)] = Field(
        128, description="bytes kept of each packet")
    max_packets: Annotated[StrictInt, Field(ge=1, le=10_000_000)] = Field(
        10_000, description="the capture stops after this many packets")
    filter: Optional[Annotated[str, BeforeValidator(_capture_filter),
                               Field(max_length=1024)]] = Field(
        None, description="a capture (BPF) filter, e.g. 'icmp or arp'")

    @property
    def file_name(self) -> str:
        """The stem of its files: ``name``, else the link (``h1_h1-eth0``)."""
        return self.name or re.sub(r"[^A-Za-z0-9_.-]", "_", self.link)


# -- the whole file ---------------------------------------------------------------------
class PresetSpec(StrictModel):
    """Overrides of ``repeat``, ``duration``, sampling (``rounds``, ``budget_s``)
    and sweep values."""

    repeat: Optional[Annotated[StrictInt, Field(ge=1, le=1000)]] = None
    duration: Optional[Annotated[float, Field(gt=0, le=MAX_DURATION)]] = None
    rounds: Optional[Annotated[StrictInt, Field(ge=1, le=10)]] = Field(
        None, description="sample to a decision: up to this many rounds of every point")
    budget_s: Optional[Annotated[float, Field(gt=0, le=86400)]] = Field(
        None, description="no further round starts after this many seconds of measuring "
        "(what a busy host took is given back, up to half)")
    sweep: Dict[str, List[Scalar]] = Field(default_factory=dict)


class StudyFile(StrictModel):
    """A study written as a file (``nslab run FILE``)."""

    name: Ident = Field(description="the study's name: results go to RESULTS/NAME/RUN")
    title: Label
    source: Label = Field("a study file", description="what it reproduces or asks")
    order: Annotated[StrictInt, Field(ge=1, le=1000)] = Field(
        100, description="where it comes in `nslab reproduce` and its report")
    topology: TopologySpec
    duration: Annotated[float, Field(gt=0, le=MAX_DURATION, description="s of traffic per trial")]
    settle: Annotated[float, Field(ge=0, le=600)] = Field(
        1.0, description="s to wait after the lab is back to its state before the next trial")
    traffic: List[Flow] = Field(min_length=1, max_length=64)
    events: List[Event] = Field(default_factory=list, max_length=256)
    sweep: Dict[str, Annotated[List[Scalar], Field(min_length=1, max_length=1000)]] = \
        Field(default_factory=dict, description="key: values (see the docs for the keys)")
    exclude: List[Dict[str, Scalar]] = Field(
        default_factory=list, max_length=256,
        description="combinations not to run: each a {KEY: value} a point must not match")
    repeat: Annotated[StrictInt, Field(ge=1, le=1000)] = 3
    metrics: List[Metric] = Field(min_length=1, max_length=128)
    plots: List[Plot] = Field(default_factory=list, max_length=32)
    claims: List[ClaimSpec] = Field(default_factory=list, max_length=128)
    captures: List[CaptureSpec] = Field(default_factory=list, max_length=32)
    presets: Dict[Literal["quick", "full"], PresetSpec] = Field(default_factory=dict)
