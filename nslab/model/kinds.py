"""Kinds: what a lab extension adds to the topology format, as data the core reads.

The core knows hosts, routers, Linux bridges and their options. Everything
else (a switch type such as OVS, a node option such as FRR's ``bgp``, the
tools behind them, how they are drawn and exported) is a :class:`Kind` that
an extension registers under the entry point group ``nslab.kinds``, in its own
folder, as containerlab keeps a kind in ``nodes/<kind>/`` and netlab keeps a
feature's schema beside it. The core reads the registry and names none of
them:

* a :class:`NodeOption` becomes a field of every node
  (:class:`~nslab.model.topo_parts.Node`), validated with the same
  ``file:line: field`` errors and bounds as the core's own, refused on the
  kind of node it does not fit and listed in the JSON Schema;
* a :class:`SwitchType` becomes a value of ``switch:`` and a node's ``type:``;
* its :class:`Tool` entries are probed by ``nslab doctor`` and recorded in a
  run's provenance;
* its :class:`Image` is what ``nslab topo export`` runs a node that uses it in.

The entry point names a module attribute holding a :class:`Kind`. It is read
when the topology model is first imported, so a kind's module imports only
:mod:`nslab.model` (its option models), never the runtime. A kind that fails to
load, or claims a name the core or another kind has, is :func:`broken`:
logged, and a failing row of ``nslab doctor``, never skipped in silence; the
commands that need no kind (``nslab clean``) still run.
"""
from __future__ import annotations

import functools
import logging
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import LabError

log = logging.getLogger(__name__)

GROUP = "nslab.kinds"

#: A node option's own check against the node's interfaces: given the option's
#: value, the node's name and the names of its interfaces, ``(path under the
#: option, message)`` for the first problem, or None.
InterfaceCheck = Callable[[Any, str, Sequence[str]], Optional[Tuple[Tuple[Any, ...], str]]]


@dataclass(frozen=True)
class NodeOption:
    """A key a node may carry in a topology (``bgp:``).

    Attributes:
        key: the key, as written in YAML and given to ``add_host(key=...)``.
        annotation: its type (a pydantic model, or any type pydantic
            validates); the node's field is ``Optional[annotation]``, None
            when not given.
        description: one line, for the JSON Schema and the docs.
        on: the kinds of node that take it (``host``, ``router``, ``switch``).
        switch_types: for a switch option, the switch types that take it
            (empty: all).
        feature: the topology feature a node with this option asks for (see
            :meth:`Topology.features <nslab.model.topo.Topology.features>`);
            an extension that ``provides`` it builds it. Empty: none.
        draw: Graphviz attributes of a router that has the option (None:
            drawn as a router; a host is drawn as a host).
        check: the option's own check against the node's interfaces.
        rename: how the option, as plain data, follows renamed interfaces
            (``nslab topo export --interface-names eth``): given its data and
            a function from an old interface name to the new one.
    """

    key: str
    annotation: Any
    description: str = ""
    on: Tuple[str, ...] = ("host", "router")
    switch_types: Tuple[str, ...] = ()
    feature: str = ""
    draw: Optional[Mapping[str, str]] = None
    check: Optional[InterfaceCheck] = None
    rename: Optional[Callable[[Any, Callable[[str], str]], Any]] = None


@dataclass(frozen=True)
class SwitchType:
    """A value of ``switch:`` / a switch's ``type:``.

    Attributes:
        name: the value (``ovs``).
        label: how messages name it (``OVS``).
        namespace: True when each switch is built in a namespace of its own
            (a Linux bridge), False when in the root namespace (counted for
            the size limits before anything is built).
        max_ports: the most links one switch takes (None: no limit of its own).
        capability: the capability it needs (:mod:`nslab.runtime.caps`).
        takes: the core's switch options that only some switch types take
            (:data:`TYPED_SWITCH_OPTIONS`) that this one does.
        draw: Graphviz attributes of such a switch.
    """

    name: str
    label: str
    namespace: bool = False
    max_ports: Optional[int] = None
    capability: str = ""
    takes: Tuple[str, ...] = ()
    draw: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Tool:
    """A tool behind a kind, probed by ``nslab doctor`` and recorded in a run's
    provenance: ``version`` is the command that prints its version (the first
    ``N.N[.N]`` it prints is taken); ``programs`` the files it needs, each
    found on ``PATH`` or at the absolute path given; ``package`` what installs it."""

    name: str
    version: Tuple[str, ...]
    programs: Tuple[str, ...] = ()
    package: str = ""
    label: str = ""
    #: The oldest release nslab is tested with (``8.4``), and what a machine
    #: with an older one is told (``nslab doctor``'s known problems).
    oldest: str = ""
    too_old: str = ""
    #: False when the kind's own probes (:attr:`Kind.probes`) say whether it is
    #: usable: then only its programs are capabilities (``tool:<program>``).
    capability: bool = True


@dataclass(frozen=True)
class Image:
    """The container image ``nslab topo export`` runs a node with one of the
    kind's options in (containerlab ``kind: linux``): ``flag`` is the export
    command's option that overrides it (``--frr-image``)."""

    default: str
    flag: str
    options: Tuple[str, ...]


@dataclass(frozen=True)
class Kind:
    """What one extension adds to the topology format (see the module's text)."""

    name: str
    description: str = ""
    node_options: Tuple[NodeOption, ...] = ()
    switch_types: Tuple[SwitchType, ...] = ()
    tools: Tuple[Tool, ...] = ()
    image: Optional[Image] = None
    #: ``module:function`` run by the capability probe
    #: (:func:`nslab.runtime.caps.probe`): given the capabilities found so far,
    #: the kind's own (``ovs_kernel``, ``ovs_running``). Named, not imported:
    #: a probe needs the runtime, which this module may not import.
    probes: str = ""
    #: ``module:Class`` of each kind of ``nslab check`` check it adds (a
    #: :class:`nslab.model.checkbase.CheckBase` with ``check: Literal[...]``),
    #: judged by its extension (``check_kinds``, ``judge``). Named, not
    #: imported: read while :mod:`nslab.model.checks` is built.
    checks: Tuple[str, ...] = ()


#: The core's own switch: a Linux bridge in a namespace of its own.
BRIDGE = SwitchType("bridge", "Linux bridge", namespace=True, max_ports=1023,
                    capability="bridge",
                    draw={"shape": "ellipse", "style": "filled", "fillcolor": "#eaf6e9"})
#: Keys of a node the core owns (a kind may not claim them).
CORE_KEYS = ("kind", "ip", "mac", "loopback", "routes", "sysctls", "type", "stp", "dpid",
             "controller", "uplink", "force")
NODE_KINDS = ("host", "switch", "router")
#: The core's switch options that only the switch types that say so take.
TYPED_SWITCH_OPTIONS = ("dpid", "controller", "uplink")


class KindError(LabError):
    """A kind could not be loaded, or claims what is already taken."""


def _problem(kind: Kind, keys: Dict[str, str], types: Dict[str, str]) -> Optional[str]:
    """Why ``kind`` cannot be added beside what ``keys`` and ``types`` hold, or None."""
    for opt in kind.node_options:
        if opt.key in keys:
            return (f"kind {kind.name!r}: node option {opt.key!r} is already "
                    f"{keys[opt.key]}'s")
        bad = [o for o in opt.on if o not in NODE_KINDS]
        if bad or not opt.on:
            return (f"kind {kind.name!r}: node option {opt.key!r} is on "
                    f"{bad or 'no kind of node'}; choose of {', '.join(NODE_KINDS)}")
    for st in kind.switch_types:
        if st.name in types:
            return f"kind {kind.name!r}: switch type {st.name!r} is already {types[st.name]}'s"
    return None


def _check(kinds: Sequence[Tuple[str, Kind]]) -> Dict[str, Kind]:
    """The kinds that fit beside the core and the kinds before them; each one
    that does not is :func:`broken`."""
    out: Dict[str, Kind] = {}
    keys: Dict[str, str] = {k: "the core" for k in CORE_KEYS}
    types: Dict[str, str] = {BRIDGE.name: "the core"}
    for name, kind in kinds:
        problem = (f"kind {kind.name!r} is registered twice" if kind.name in out
                   else _problem(kind, keys, types))
        if problem:
            _broke(name, problem)
            continue
        keys.update({o.key: f"kind {kind.name!r}" for o in kind.node_options})
        types.update({t.name: f"kind {kind.name!r}" for t in kind.switch_types})
        out[kind.name] = kind
    return out


#: Kinds that are registered but could not be added, by entry point name: why.
_BROKEN: Dict[str, str] = {}


def _broke(name: str, why: str) -> None:
    _BROKEN[name] = why
    log.error("%s: its node options, switch types and checks are unknown until it is "
              "fixed or uninstalled (nslab doctor lists it)", why)


def broken() -> Dict[str, str]:
    """Registered kinds that could not be loaded or added, and why. Reported
    (a log line when read, a row of ``nslab doctor``), never skipped in
    silence; but they do not stop the commands that need no kind, such as
    ``nslab clean``."""
    registered()
    return dict(_BROKEN)


@functools.lru_cache(maxsize=1)
def registered() -> Dict[str, Kind]:
    """Every kind registered under ``nslab.kinds``, by name (in the order of their names).

    Read when the topology model is first imported, which is before the
    ``nslab`` command drops the current directory from ``sys.path``: so the
    kinds are found, and their modules imported, with only the absolute
    entries of ``sys.path`` (never ``""``, ``.`` or another relative one,
    which a caller's ``PYTHONPATH`` may put there). The current directory may
    be a lab folder from anyone, and nslab runs as root."""
    from importlib.metadata import entry_points
    saved = list(sys.path)
    sys.path[:] = [p for p in saved if p and os.path.isabs(p)]
    try:
        found: List[Tuple[str, Kind]] = []
        for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
            try:
                kind = ep.load()
            except Exception as exc:  # noqa: BLE001 - any error of a kind is reported (log, doctor)
                _broke(ep.name, f"kind {ep.name} ({ep.value}) failed to load: "
                                f"{type(exc).__name__}: {exc}")
                continue
            if not isinstance(kind, Kind):
                _broke(ep.name, f"kind {ep.name} ({ep.value}) is a {type(kind).__name__}, "
                                "not an nslab.model.kinds.Kind")
                continue
            found.append((ep.name, kind))
    finally:
        sys.path[:] = saved
    return _check(found)


def node_options() -> Dict[str, NodeOption]:
    """Every registered node option, by key."""
    return {o.key: o for k in registered().values() for o in k.node_options}


def switch_types() -> Dict[str, SwitchType]:
    """Every switch type: the core's Linux bridge first, then the kinds'."""
    out = {BRIDGE.name: BRIDGE}
    out.update({t.name: t for k in registered().values() for t in k.switch_types})
    return out


def switch_type(name: str) -> SwitchType:
    """The switch type ``name``; :class:`KindError` naming those installed."""
    types = switch_types()
    if name not in types:
        raise KindError(f"switch type {name!r} is not one of {', '.join(types)} (the core's "
                        "and the installed kinds')")
    return types[name]


def tools() -> List[Tool]:
    """Every registered kind's tools."""
    return [t for k in registered().values() for t in k.tools]
