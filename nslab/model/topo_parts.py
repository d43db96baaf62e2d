"""A topology's parts: its nodes, the ends of its links and its links, each a
typed model checked on its own as it is read (a switch takes no address, a
host no switch option; a link's shaping must make sense). What holds across
parts (a link's nodes exist, an address is used once) is the whole
:class:`~nslab.model.topo.Topology`'s to check."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional

from pydantic import (Field, StrictBool, StrictInt, ValidationInfo, create_model, field_validator,
                      model_validator)
from typing_extensions import Annotated, Literal

from ..errors import InputError
from .fields import (Bytes, ControllerTarget, Delay, Dpid, IfName, Interface, Mac,
                     Mtu, NodeName, Percent, QueueLimit, Rate, Route, StrictModel, SysctlKey,
                     SysctlValue)
from .kinds import BRIDGE, NODE_KINDS, KindError, node_options, switch_types
from .shaping import ETHERNET_OVERHEAD, Shaping

KINDS = NODE_KINDS
#: Switch types: the core's Linux bridge and those the registered kinds add.
SWITCH_TYPES = tuple(switch_types())
#: The most ports a Linux bridge takes (the kernel's BR_MAX_PORTS is 1024, port 0 unused).
BRIDGE_MAX_PORTS = BRIDGE.max_ports
#: The registered kinds' node options, by key.
OPTIONS = node_options()
_CORE_SWITCH_ONLY = ("type", "stp", "dpid", "controller", "uplink", "force")
_CORE_HOST_ONLY = ("ip", "loopback", "routes", "mac")
#: Options that only a switch takes.
SWITCH_ONLY = _CORE_SWITCH_ONLY + tuple(k for k, o in OPTIONS.items() if o.on == ("switch",))
#: Options that only a host or router takes (a switch has no address of its own).
HOST_ONLY = _CORE_HOST_ONLY + tuple(k for k, o in OPTIONS.items() if "switch" not in o.on)

if TYPE_CHECKING:
    SwitchTypeName = str
else:  # a Literal of the installed switch types: the schema lists them, errors name them
    SwitchTypeName = Literal[SWITCH_TYPES]


#: The sysctls of a namespace with IPv6 disabled (set before its links exist).
NO_IPV6 = {"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1"}


def _switch_only(value: Any, info: ValidationInfo) -> Any:
    kind = info.data.get("kind", "host")
    if kind != "switch":
        raise ValueError(f"{info.field_name} applies to switches only, not to a {kind}")
    return value


def _host_only(value: Any, info: ValidationInfo) -> Any:
    if info.data.get("kind") == "switch":
        raise ValueError(f"a switch takes no {info.field_name} (it has no address of its own)")
    return value


def _on_kinds(value: Any, info: ValidationInfo) -> Any:
    """A registered option given on a kind of node it does not fit."""
    kind = info.data.get("kind", "host")
    on = OPTIONS[str(info.field_name)].on
    if kind in on:
        return value
    if kind == "switch":
        return _host_only(value, info)
    if on == ("switch",):
        return _switch_only(value, info)
    raise ValueError(f"{info.field_name} applies to a {' or '.join(on)} only, not to a {kind}")


class NodeBase(StrictModel):
    """A node of the topology (its name is its key in :attr:`Topology.nodes`).

    A ``host`` is a namespace with addresses and routes, a ``router`` a host
    that forwards, a ``switch`` a Linux bridge (in its own namespace) or a
    switch of a type a registered kind adds. Besides the options below, a node
    takes those of the registered kinds (:mod:`nslab.model.kinds`), read with
    :meth:`option`.
    """

    kind: Literal["host", "switch", "router"] = "host"
    ip: Optional[Interface] = Field(None, description="address of the node's first interface")
    mac: Optional[Mac] = Field(None, description="MAC of the node's first interface")
    loopback: Optional[Interface] = Field(None, description="an address on lo")
    routes: List[Route] = Field(default_factory=list)
    sysctls: Dict[SysctlKey, SysctlValue] = Field(
        default_factory=dict, description="per-namespace net.* sysctls only")
    type: Optional[SwitchTypeName] = Field(
        None, description=f"switches: {' or '.join(SWITCH_TYPES)}")
    stp: StrictBool = False
    dpid: Optional[Dpid] = None
    controller: Optional[ControllerTarget] = None
    uplink: Optional[IfName] = Field(None, description="a physical NIC to attach (a switch "
                                     "type that takes one)")
    force: StrictBool = Field(False, description="allow an uplink that carries the default "
                                                 "route or the SSH session")

    _switch_only = field_validator(*_CORE_SWITCH_ONLY)(_switch_only)
    _host_only = field_validator(*_CORE_HOST_ONLY)(_host_only)

    @property
    def is_switch(self) -> bool:
        return self.kind == "switch"

    def option(self, key: str) -> Any:
        """The value of a registered kind's option (``node.option("bgp")``), None
        when not given; :class:`~nslab.model.kinds.KindError` for a key no
        installed kind registers (nslab's own kinds are registered when it is
        installed: ``pip install -e .`` again after an upgrade)."""
        if key not in OPTIONS:
            raise KindError(f"no installed kind has the node option {key!r} (installed: "
                            f"{', '.join(OPTIONS) or 'none'}; reinstall nslab if it is one "
                            "of its own)")
        return getattr(self, key)

    def options(self) -> Dict[str, Any]:
        """The options given for this node (as they would be written in YAML)."""
        return self.model_dump(mode="json", exclude_unset=True, exclude={"kind"})


def _node_model() -> Any:
    """:class:`NodeBase` with a field for each registered kind's option."""
    fields: Dict[str, Any] = {o.key: (Optional[o.annotation], Field(None, description=o.description))
                              for o in OPTIONS.values()}
    validators: Dict[str, Any] = {}
    if OPTIONS:
        validators["_kinds_on"] = field_validator(*OPTIONS)(_on_kinds)
    return create_model("Node", __base__=NodeBase, __module__=__name__, __doc__=NodeBase.__doc__,
                        __validators__=validators, **fields)


if TYPE_CHECKING:
    Node = NodeBase
else:
    Node = _node_model()


class LinkEnd(StrictModel):
    """One end of a link: interface name, address, MAC (all optional). An address
    goes on a host's or router's end: a switch's port is layer 2 and takes none."""

    intf: Optional[IfName] = None
    ip: Optional[Interface] = None
    mac: Optional[Mac] = None


class Link(StrictModel):
    """A point-to-point link between two nodes (a veth pair when built).

    Shaping options follow Mininet's ``TCLink``: ``bw`` (Mbit/s or with a
    unit), ``delay``, ``jitter``, ``loss`` (%), ``max_queue_size`` (packets),
    plus ``qdisc`` (htb/tbf), ``burst`` (bytes), ``overhead`` (bytes per
    frame) and ``framing`` (count Ethernet's 24 bytes of preamble, gap and FCS).
    Shaping applies to both directions.
    """

    a: NodeName
    b: NodeName
    params1: LinkEnd = Field(default_factory=LinkEnd)
    params2: LinkEnd = Field(default_factory=LinkEnd)
    bw: Optional[Rate] = None
    delay: Optional[Delay] = None
    jitter: Optional[Delay] = None
    loss: Optional[Percent] = None
    max_queue_size: Optional[QueueLimit] = None
    qdisc: Optional[Literal["htb", "tbf"]] = None
    burst: Optional[Bytes] = None
    overhead: Optional[Annotated[StrictInt, Field(ge=0, le=255)]] = None
    framing: StrictBool = False
    mtu: Optional[Mtu] = None

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, data: Any) -> Any:
        if isinstance(data, (list, tuple)):
            if len(data) != 2:
                raise ValueError(f"the short form of a link is [node_a, node_b], got {len(data)} "
                                 "items")
            return {"a": data[0], "b": data[1]}
        return data

    @model_validator(mode="after")
    def _shaping_ok(self) -> "Link":
        if self.a == self.b:
            raise ValueError(f"link {self.a}-{self.b}: a node cannot link to itself")
        try:
            self.shaping  # noqa: B018 - builds and checks the shaping spec
        except InputError as exc:
            raise ValueError(str(exc)) from None
        return self

    @property
    def shaping(self) -> Optional[Shaping]:
        """The shaping of each direction, or None for an unshaped link.

        With framing overhead the default qdisc is tbf: measured on Linux 6.18,
        tbf charges the rate-spec overhead per packet (TCP at 1 Gbit/s + 24 B:
        936 Mbit/s, theory 941) while htb ignored it (953, as without overhead).
        """
        overhead = ETHERNET_OVERHEAD if self.framing else int(self.overhead or 0)
        s = Shaping(rate=self.bw, qdisc=self.qdisc or ("tbf" if overhead else "htb"),
                    burst=self.burst, overhead=overhead, delay_ms=self.delay or 0.0,
                    jitter_ms=self.jitter or 0.0, loss_pct=self.loss or 0.0,
                    limit=self.max_queue_size)
        return None if s.empty else s

    def end(self, node: str) -> LinkEnd:
        return self.params1 if node == self.a else self.params2
