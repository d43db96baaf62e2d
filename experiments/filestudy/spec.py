"""Loading a study file and checking every name in it.

Loading does all the checking, before anything is built and without root:
the YAML is parsed into the typed :class:`~.model.StudyFile`, then every name
is resolved against the topology it will run on (nodes, links, flows,
metrics, sweep keys, event times). Each error is one line,
``FILE:LINE: field: problem``.

Sweep keys:

* ``duration``: the traffic's length (s);
* ``topology.OPTION``: an option of the ready topology (a lab per value);
* ``sysctl.NODE.KEY``: a per-namespace sysctl of a node, set before each trial;
* ``events.ID.at``: the time of the event with that ``id``;
* ``vars.NAME``: a name of your own that events and claims select on (``when``).
"""
from __future__ import annotations

import inspect
import ipaddress
import itertools
import os
import re
import typing
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Type

from pydantic import BaseModel, ValidationError

from nslab.frr.options import bgp_of
from nslab.errors import InputError, TopologyError
from nslab.model import checkfile
from nslab.model.checks import Suite
from nslab.model.limits import active, product
from nslab.model.topo import Topology, explain, field_path, loc_path

from .captures import check as check_captures
from .model import (ID_RE, METRIC_VALUES, Convergence, DaemonEvent, Goodput, IperfTcp, IperfUdp,
                    LinkEvent, Ping, Pktgen, Probe, StudyFile)
from nslab.model.topo_yaml import line_of, parse_yaml, read_text


#: the copy of the study file kept in every run directory (reports read it)
STORED_NAME = "study.yaml"
_UNION_LISTS = ("traffic", "events", "metrics", "plots")
#: seconds a trial costs beyond its traffic (servers, undo, reconvergence), for the plan
TRIAL_OVERHEAD_S = 4.0
#: seconds to build a lab and converge, for the plan
LAB_OVERHEAD_S = 8.0


class Loaded:
    """A checked study file: the model, where it came from, and what it resolved."""

    def __init__(self, spec: StudyFile, path: str, text: str, doc: Any,
                 origin: Optional[StudyFile] = None, checks: Optional[Suite] = None) -> None:
        self.spec, self.path, self.text, self.doc = spec, path, text, doc
        # the values a `when` may name: the file's own sweep and its presets'
        src = origin or spec
        self.when_values: Dict[str, List[Any]] = {k: list(v) for k, v in src.sweep.items()}
        for p in src.presets.values():
            for k, v in p.sweep.items():
                self.when_values.setdefault(k, []).extend(v)
        self.flows = {f.id: f for f in spec.traffic}
        self.metric_names: Dict[str, Any] = {}
        for m in spec.metrics:
            self.metric_names[metric_name(m)] = m
        self.topologies: Dict[str, Topology] = {}
        #: its ``checks:`` and ``stages:`` (None: it has none). ``checks:`` run
        #: on each lab before its first trial (:meth:`.runner.FileRunner.setup`);
        #: ``stages:`` are a classroom's, for ``nslab check --stage``. A file
        #: resolved for a configuration keeps its original's.
        self.checks: Optional[Suite] = checks

    def fail(self, loc: Tuple[Any, ...], message: str) -> InputError:
        return InputError(f"{self.path}:{line_of(self.doc, loc)}: {field_path(loc)}: {message}")


def metric_name(m: Any) -> str:
    return m.name or f"{m.metric}-{getattr(m, 'flow', None) or getattr(m, 'node')}"


def value_names(loaded: Loaded) -> List[str]:
    """Every value the study records (``NAME`` or ``NAME.VALUE``)."""
    out = []
    for name, m in loaded.metric_names.items():
        for v in METRIC_VALUES[m.metric]:
            out.append(f"{name}.{v}" if v else name)
    return out


def _clean_loc(loc: Tuple[Any, ...]) -> Tuple[Any, ...]:
    """Drop the union tags pydantic puts in locations (``traffic.0.probe.rate``)."""
    loc = loc_path(loc)
    return tuple(p for i, p in enumerate(loc)
                 if not (i >= 2 and isinstance(loc[i - 1], int) and loc[i - 2] in _UNION_LISTS
                         and p in _tags(loc[i - 2])))


def _tags(section: str) -> Tuple[str, ...]:
    from . import model as mdl
    union = {"traffic": mdl.Flow, "events": mdl.Event, "metrics": mdl.Metric,
             "plots": mdl.Plot}[section]
    members = typing.get_args(typing.get_args(union)[0])
    key = {"traffic": "kind", "events": "do", "metrics": "metric", "plots": "kind"}[section]
    return tuple(typing.get_args(m.model_fields[key].annotation)[0] for m in members)


def load(path: str) -> Loaded:
    """Read, validate and resolve a study file; one line per error (file, line, field)."""
    text = read_text(path)  # read once, bounded: the same text is parsed and kept
    doc = parse_yaml(text, path)
    if not isinstance(doc, dict):
        raise InputError(f"{path}:1: a study file is a mapping (name, title, topology, "
                         "traffic, metrics, ...)")
    # its checks (checks:, stages:) are read as any checks file's (nslab check)
    data = {k: v for k, v in doc.items() if k not in checkfile.CHECK_KEYS}
    try:
        spec = StudyFile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        loc = _clean_loc(tuple(err.get("loc", ())))
        msg = explain(exc, (), StudyFile)
        # explain names the field from pydantic's location: say it from ours
        from nslab.model.topo import field_path, loc_path
        ploc = loc_path(tuple(err.get("loc", ())))
        said = field_path(ploc[:-1] if err.get("type") == "extra_forbidden" else ploc)
        msg = msg[len(said) + 2:] if said and msg.startswith(said + ": ") else msg
        field = field_path(loc)
        raise InputError(f"{path}:{line_of(doc, loc)}: {field + ': ' if field else ''}{msg}"
                         ) from None
    loaded = Loaded(spec, path, text, doc)
    if any(k in doc for k in checkfile.CHECK_KEYS):
        loaded.checks = checkfile.from_document(doc, path)
    check(loaded)
    return loaded


# -- resolving names --------------------------------------------------------------------
def _topology_options(loaded: Loaded) -> List[Dict[str, Any]]:
    """Every combination of ready-topology options the sweep asks for."""
    spec = loaded.spec
    keys = [k for k in spec.sweep if k.startswith("topology.")]
    combos = itertools.product(*[spec.sweep[k] for k in keys]) if keys else [()]
    return [{**spec.topology.options, **{k.split(".", 1)[1]: v for k, v in zip(keys, c)}}
            for c in combos]


def build_topology(loaded: Loaded, options: Dict[str, Any]) -> Topology:
    """The topology for these options (pure: nothing is built on the host)."""
    spec = loaded.spec.topology
    path = topology_file(loaded) if spec.file else ""  # its own one-line refusal
    try:
        if spec.ready:
            from nslab.run.registry import topology
            from nslab.run.topoload import coerce
            fn = topology(spec.ready)
            return fn(**coerce(fn, dict(options)))
        if spec.file:
            return checkfile.topology_file(path)  # it may carry checks (nslab check)
        data = dict(spec.inline or {})
        data.setdefault("name", loaded.spec.name)
        return Topology.from_dict(data)
    except TopologyError as exc:
        if spec.inline and exc.loc:  # the line of the inline topology's own field
            loc = ("topology", "inline") + exc.loc
            raise InputError(f"{loaded.path}:{line_of(loaded.doc, loc)}: topology.inline."
                             f"{str(exc).splitlines()[0]}") from None
        raise loaded.fail(("topology",), str(exc).splitlines()[0]) from None
    except (InputError, ValueError, TypeError) as exc:
        raise loaded.fail(("topology",), str(exc).splitlines()[0] if str(exc) else
                          type(exc).__name__) from None


def topology_file(loaded: Loaded) -> str:
    """The real path of ``topology.file``: a regular file inside the study file's
    own folder, reached without leaving it (a link out of the folder is
    refused). The refusal is the same whatever lies outside, so a study file
    learns nothing about files beyond its folder."""
    name = loaded.spec.topology.file or ""
    base = os.path.realpath(os.path.dirname(os.path.abspath(loaded.path)))
    real = os.path.realpath(os.path.join(base, name))
    if os.path.commonpath([base, real]) != base or not os.path.isfile(real):
        raise loaded.fail(("topology", "file"), f"{name!r} is not a YAML file in the study "
                                                "file's folder")
    return real


def lab_key(options: Dict[str, Any], swept: Sequence[str]) -> str:
    """A file-name-safe key for the lab of these options (``lab`` when none is swept)."""
    if not swept:
        return "lab"
    text = "-".join(f"{k}={options[k]}" for k in swept)
    return re.sub(r"[^A-Za-z0-9_.=-]", "_", text)[:100]


@dataclass(frozen=True)
class PlanSize:
    """What a run of a study file plans, counted from the lengths of its sweep's
    axes, never by listing the points.

    Attributes:
        labs: combinations of swept topology options (a lab each).
        points: sweep combinations left after ``exclude``; exact when every
            exclusion names one key (its values are taken off that axis), else
            an upper bound (``exact`` is False): exclusions of several keys
            are not subtracted.
        trials: ``points`` x ``repeat``.
        seconds: the planned time (traffic, settle and overheads, as the plan
            estimates it).
        axes: ``{key: number of values}`` after single-key exclusions.
    """

    labs: int
    points: int
    trials: int
    seconds: float
    exact: bool
    axes: Dict[str, int]

    def detail(self) -> str:
        """``vars.a 1000 x vars.b 1000`` (and a note if it is an upper bound)."""
        text = " x ".join(f"{k} {n:,}" for k, n in self.axes.items()) or "no sweep"
        return text + ("" if self.exact else "; exclusions of several keys not subtracted")


#: the most combinations counted exactly (a count past it is "more than")
_COUNT_CAP = 10**15


def plan_size(spec: StudyFile) -> PlanSize:
    """Count what ``spec`` plans without expanding its sweep (see :class:`PlanSize`)."""
    axes: Dict[str, List[Any]] = {k: list(v) for k, v in spec.sweep.items()}
    exact = True
    for ex in spec.exclude:
        if len(ex) == 1 and next(iter(ex)) in axes:
            (key, value), = ex.items()
            axes[key] = [v for v in axes[key] if v != value]
        elif any(k not in axes for k in ex) and "repeat" not in ex:
            continue  # names a key no point has: it excludes nothing
        else:
            exact = False
    lengths = {k: len(v) for k, v in axes.items()}
    points = product(lengths.values(), _COUNT_CAP)
    trials = product([points, spec.repeat], _COUNT_CAP)
    labs = product([len(spec.sweep[k]) for k in spec.sweep if k.startswith("topology.")],
                   _COUNT_CAP)
    if "duration" in axes and lengths["duration"]:
        others = product([n for k, n in lengths.items() if k != "duration"], _COUNT_CAP)
        traffic = float(others) * spec.repeat * sum(float(v) for v in axes["duration"])
    else:
        traffic = float(trials) * spec.duration
    seconds = labs * LAB_OVERHEAD_S + trials * (spec.settle + TRIAL_OVERHEAD_S) + traffic
    return PlanSize(labs, points, trials, seconds, exact, lengths)


def check_size(loaded: Loaded) -> PlanSize:
    """The plan's size against the active limits (:mod:`nslab.model.limits`), before
    anything is built or listed; one line naming the file, line and field."""
    size = plan_size(loaded.spec)
    limits = active()

    def where(loc: Tuple[Any, ...]) -> str:
        return f"{loaded.path}:{line_of(loaded.doc, loc)}: {field_path(loc)}"

    sweep = ("sweep",) if loaded.spec.sweep else ()
    rep = ("repeat",) if "repeat" in loaded.doc else sweep
    bound = "" if size.exact else "at most "
    limits.check("labs", size.labs, where(sweep), "one per combination of topology options")
    limits.check("points", size.points, where(sweep), bound + size.detail())
    limits.check("trials", size.trials, where(rep),
                 f"{bound}{size.points:,} points x repeat {loaded.spec.repeat}")
    limits.check("duration", size.seconds, where(("duration",) if "duration" in loaded.doc
                                                  else rep),
                 f"{bound}{size.trials:,} trials of {loaded.spec.duration:g} s"
                 + (" (swept)" if "duration" in size.axes else ""))
    return size


def check(loaded: Loaded) -> None:
    """Every name in the file against the topology (each lab's), the sweep and
    the metrics; raise one line at the first problem. The plan's size is
    counted and checked first, before any lab's topology is made."""
    spec = loaded.spec
    swept_opts = [k.split(".", 1)[1] for k in spec.sweep if k.startswith("topology.")]
    for key in spec.sweep:
        _check_sweep_key(loaded, key)
    check_size(loaded)
    for opts in _topology_options(loaded):
        topo = build_topology(loaded, opts)
        loaded.topologies[lab_key(opts, swept_opts)] = topo
    for topo in loaded.topologies.values():
        _check_names(loaded, topo)
    _check_times(loaded)
    _check_metrics(loaded)
    _check_selections(loaded)
    check_captures(loaded)


def _check_sweep_key(loaded: Loaded, key: str) -> None:
    spec = loaded.spec
    loc = ("sweep", key)
    kind, _, rest = key.partition(".")
    values = spec.sweep[key]
    if key == "duration":
        for v in values:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 3600:
                raise loaded.fail(loc, f"{v!r} is not a duration in s (0 < d <= 3600)")
    elif kind == "topology":
        if not spec.topology.ready:
            raise loaded.fail(loc, "only a ready topology has options to sweep "
                                   "(topology: {ready: NAME})")
        from nslab.run.registry import topology
        params = inspect.signature(topology(spec.topology.ready)).parameters
        if rest not in params:
            raise loaded.fail(loc, f"{spec.topology.ready} has no option {rest!r} (options: "
                                   f"{', '.join(p for p in params)})")
        if rest in spec.topology.options:
            raise loaded.fail(loc, f"{rest} is both swept and set in topology.options")
    elif kind == "sysctl":
        node, _, skey = rest.partition(".")
        from pydantic import TypeAdapter

        from nslab.model.fields import NodeName, SysctlKey, SysctlValue
        try:
            TypeAdapter(NodeName).validate_python(node)
            TypeAdapter(SysctlKey).validate_python(skey)
            for v in values:
                TypeAdapter(SysctlValue).validate_python(v)
        except (ValidationError, TopologyError) as exc:
            detail = (exc.errors(include_url=False)[0]["msg"] if isinstance(exc, ValidationError)
                      else str(exc))
            raise loaded.fail(loc, f"use sysctl.NODE.KEY with per-namespace KEY: "
                                   f"{detail.removeprefix('Value error, ')}") from None
    elif kind == "events":
        ident, _, field = rest.partition(".")
        if field != "at" or ident not in {e.id for e in spec.events if e.id}:
            raise loaded.fail(loc, f"use events.ID.at with ID an event's id (ids: "
                                   f"{', '.join(e.id for e in spec.events if e.id) or 'none'})")
        for v in values:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise loaded.fail(loc, f"{v!r} is not a time in s")
    elif kind == "vars":
        if not ID_RE.fullmatch(rest):
            raise loaded.fail(loc, f"vars.{rest}: not a name")
        used = any(key in e.when for e in spec.events)
        if not used:
            raise loaded.fail(loc, f"{key} selects nothing: no event has it in its when")
    else:
        raise loaded.fail(loc, f"unknown sweep key {key!r}: use duration, topology.OPTION, "
                               "sysctl.NODE.KEY, events.ID.at or vars.NAME")


def _check_names(loaded: Loaded, topo: Topology) -> None:
    spec = loaded.spec
    nodes = topo.nodes
    ids = set()
    for i, f in enumerate(spec.traffic):
        if f.id in ids:
            raise loaded.fail(("traffic", i, "id"), f"flow id {f.id!r} is used twice")
        ids.add(f.id)
        for end in ("src", "dst"):
            name = getattr(f, end)
            if name not in nodes:
                raise loaded.fail(("traffic", i, end), f"unknown node {name!r} (nodes: "
                                                       f"{', '.join(sorted(nodes))})")
            if nodes[name].is_switch:
                raise loaded.fail(("traffic", i, end), f"{name} is a switch: traffic runs "
                                                       "between hosts and routers")
        if f.address is None and address_of(topo, f.dst) is None:
            raise loaded.fail(("traffic", i, "dst"), f"{f.dst} has no address: give address:")
    event_ids = set()
    for i, e in enumerate(spec.events):
        if e.id:
            if e.id in event_ids:
                raise loaded.fail(("events", i, "id"), f"event id {e.id!r} is used twice")
            event_ids.add(e.id)
        for k, v in e.when.items():
            if k not in loaded.when_values:
                raise loaded.fail(("events", i, "when", k), f"{k} is not a sweep key (sweep: "
                                                            f"{', '.join(spec.sweep) or 'none'})")
            if v not in loaded.when_values[k]:
                raise loaded.fail(("events", i, "when", k), f"{v!r} is not among the swept "
                                                            f"values {spec.sweep[k]}")
        path_of = getattr(e, "path_of", None)
        if path_of is not None:
            if path_of not in loaded.flows or not isinstance(loaded.flows[path_of], Probe):
                raise loaded.fail(("events", i, "path_of"), f"{path_of!r} is not a probe flow "
                                  f"(probes: {', '.join(f.id for f in spec.traffic if isinstance(f, Probe)) or 'none'})")
        if isinstance(e, LinkEvent) and e.link is not None:
            a, b = e.link
            if link_ends(topo, a, b) is None:
                raise loaded.fail(("events", i, "link"), f"no link between {a} and {b}")
        node = getattr(e, "node", None)
        if node is not None:
            if node not in nodes:
                raise loaded.fail(("events", i, "node"), f"unknown node {node!r}")
            if nodes[node].is_switch:
                raise loaded.fail(("events", i, "node"), f"{node} is a switch")
        if isinstance(e, DaemonEvent):
            if e.node is not None:
                targets = [e.node]
            else:  # the model gives exactly one of node and path_of
                assert e.path_of is not None
                targets = neighbours(topo, loaded.flows[e.path_of].src)
            for t in targets:
                bgp = bgp_of(nodes[t])
                if bgp is None:
                    raise loaded.fail(("events", i, "node" if node else "path_of"),
                                      f"{t} runs no FRR (no bgp)")
                if e.daemon == "bfdd" and bgp.bfd is None:
                    raise loaded.fail(("events", i, "daemon"), f"{t} runs no bfdd (BFD off)")
    for key in spec.sweep:
        if key.startswith("sysctl."):
            node = key.split(".")[1]
            if node not in nodes or nodes[node].is_switch:
                raise loaded.fail(("sweep", key), f"no host or router {node!r}")
    for i, m in enumerate(spec.metrics):
        node = getattr(m, "node", None)
        if node is not None and (node not in nodes or nodes[node].is_switch):
            raise loaded.fail(("metrics", i, "node"), f"no host or router {node!r}")
        if isinstance(m, Convergence):
            if bgp_of(nodes[m.node]) is None:
                raise loaded.fail(("metrics", i, "node"), f"{m.node} runs no routing daemon")
            announced = sorted({str(n) for other, nd in nodes.items() if other != m.node
                                for n in getattr(bgp_of(nd), "networks", None) or []})
            if str(ipaddress.IPv4Network(m.prefix)) not in announced:
                raise loaded.fail(("metrics", i, "prefix"), (
                    f"no other routing node announces {m.prefix}, so {m.node} has no BGP "
                    "route of its own to it, whose nexthops a convergence metric counts "
                    f"(announced: {', '.join(announced[:8]) or 'none'}"
                    f"{f' and {len(announced) - 8} more' if len(announced) > 8 else ''})"))


def address_of(topo: Topology, node: str) -> Optional[str]:
    """Where traffic to ``node`` goes: its loopback, else its first address."""
    n = topo.nodes[node]
    if getattr(n, "loopback", None) is not None:
        return str(n.loopback).split("/")[0]
    for (name, _), addr in topo.addresses().items():
        if name == node:
            return str(addr).split("/")[0]
    return None


def neighbours(topo: Topology, node: str) -> List[str]:
    """The nodes linked to ``node``."""
    return sorted({nb if na == node else na for _, na, _, nb, _ in topo.interfaces()
                   if node in (na, nb)})


def link_ends(topo: Topology, a: str, b: str) -> Optional[Tuple[Tuple[str, str], Tuple[str, str]]]:
    """``((a, intf), (b, intf))`` of the first link between ``a`` and ``b``."""
    for _, na, ia, nb, ib in topo.interfaces():
        if (na, nb) == (a, b):
            return (na, ia), (nb, ib)
        if (na, nb) == (b, a):
            return (nb, ib), (na, ia)
    return None


def durations(spec: StudyFile) -> List[float]:
    """Every traffic length a run of this file may use (sweep and presets)."""
    out = [spec.duration] + [float(v) for v in spec.sweep.get("duration", [])]
    for p in spec.presets.values():
        if p.duration is not None:
            out.append(p.duration)
        out += [float(v) for v in p.sweep.get("duration", [])]
    return out


def _check_times(loaded: Loaded) -> None:
    spec = loaded.spec
    shortest = min(durations(spec))
    for i, e in enumerate(spec.events):
        times = [e.at]
        if e.id and f"events.{e.id}.at" in spec.sweep:
            times += [float(v) for v in spec.sweep[f"events.{e.id}.at"]]
        for t in times:
            if t >= shortest:
                raise loaded.fail(("events", i, "at"), f"at {t:g} s is after the traffic ends "
                                                       f"({shortest:g} s)")
    for i, m in enumerate(spec.metrics):
        if isinstance(m, Goodput) and m.window is not None:
            lo, hi = m.window
            if not lo < hi or hi > shortest:
                raise loaded.fail(("metrics", i, "window"),
                                  f"window {list(m.window)} must be increasing and end by "
                                  f"{shortest:g} s (the traffic's length)")


def _check_metrics(loaded: Loaded) -> None:
    spec = loaded.spec
    seen: Dict[str, int] = {}
    want = {"goodput": (IperfTcp, IperfUdp), "outage": (Probe,), "latency": (Ping,),
            "delivery": (Pktgen,)}
    for i, m in enumerate(spec.metrics):
        name = metric_name(m)
        if name in seen:
            raise loaded.fail(("metrics", i), f"two metrics are called {name!r}: give name:")
        seen[name] = i
        flow = getattr(m, "flow", None)
        if flow is not None:
            if flow not in loaded.flows:
                raise loaded.fail(("metrics", i, "flow"), f"unknown flow {flow!r} (flows: "
                                                          f"{', '.join(loaded.flows)})")
            if not isinstance(loaded.flows[flow], want[m.metric]):
                raise loaded.fail(("metrics", i, "flow"),
                                  f"{m.metric} measures {' or '.join(_kind(k) for k in want[m.metric])} "
                                  f"flows; {flow} is {loaded.flows[flow].kind}")


def _kind(flow: Type[BaseModel]) -> str:
    """What a flow model's ``kind: Literal[...]`` holds (``iperf-tcp``)."""
    return str(typing.get_args(flow.model_fields["kind"].annotation)[0])


def _sweep_or_repeat(loaded: Loaded, key: str, loc: Tuple[Any, ...]) -> None:
    if key != "repeat" and key not in loaded.spec.sweep:
        raise loaded.fail(loc, f"{key!r} is not a sweep key (sweep: "
                               f"{', '.join(loaded.spec.sweep) or 'none'})")


def _check_selections(loaded: Loaded) -> None:
    spec = loaded.spec
    values = set(value_names(loaded))
    for i, c in enumerate(spec.claims):
        if c.value not in values:
            raise loaded.fail(("claims", i, "value"), f"unknown value {c.value!r} (values: "
                                                      f"{', '.join(sorted(values))})")
        for k in list(c.where) + list(c.versus.where if c.versus else {}):
            _sweep_or_repeat(loaded, k, ("claims", i, "where"))
    for i, p in enumerate(spec.plots):
        for k in p.where:
            _sweep_or_repeat(loaded, k, ("plots", i, "where"))
        for attr in ("x", "series"):
            key = getattr(p, attr, None)
            if key is not None:
                _sweep_or_repeat(loaded, key, ("plots", i, attr))
        y = getattr(p, "y", None)
        if y is not None and y not in values:
            raise loaded.fail(("plots", i, "y"), f"unknown value {y!r}")
        metric = getattr(p, "metric", None)
        if metric is not None:
            want = "goodput" if p.kind == "timeseries" else "links"
            m = loaded.metric_names.get(metric)
            if m is None or m.metric != want:
                raise loaded.fail(("plots", i, "metric"),
                                  f"{metric!r} is not a {want} metric of this study")
    for i, ex in enumerate(spec.exclude):
        if not ex:
            raise loaded.fail(("exclude", i), "an empty exclusion would exclude everything")
        for k, v in ex.items():
            if k not in loaded.when_values:
                raise loaded.fail(("exclude", i, k), f"{k} is not a sweep key")
    for name, preset in spec.presets.items():
        for k in preset.sweep:
            if k not in spec.sweep:
                raise loaded.fail(("presets", name, "sweep", k), f"{k} is not a sweep key")


def field_of(key: str) -> str:
    """The configuration field (and ``--option``) of a sweep key."""
    return re.sub(r"[^A-Za-z0-9_]", "_", key)
