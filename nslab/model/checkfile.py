"""Reading checks from a file anyone may have written: a checks file
(``checks:`` or ``stages:``, a ``title``, the ``topology`` file each folder of
a class holds), or the ``checks:``/``stages:`` section of a topology file or
a study file. Every field is parsed into the typed values of
:mod:`nslab.model.checks`; a mistake is one line naming the file, the line and
the field (``lab.yaml:31: stages.1.checks.0.loss: ...``). Pure: reads the
file (bounded, no link followed: :func:`nslab.model.topo_yaml.read_yaml`),
touches nothing else.

A topology file may carry checks beside its ``nodes`` and ``links``:
:func:`topology_file` reads it as a topology with those keys set aside.
"""
from __future__ import annotations

import typing
from typing import Any, Dict, List, Optional, Tuple

from pydantic import BaseModel, ValidationError

from ..errors import InputError, TopologyError
from .checks import (KINDS, Bound, CheckFile, DelayBound, LinkChange, Stage, Suite, resolve)
from .topo import Topology
from .topo_yaml import LineDict, line_of, read_yaml

__all__ = ["load", "from_document", "topology_file", "CHECK_KEYS", "file_kind"]

#: The keys of a topology or study file that hold its checks.
CHECK_KEYS = ("checks", "stages")
#: Keys that say a mapping is a study file (a topology file has ``nodes``).
_STUDY_KEYS = ("traffic", "metrics", "duration")


def file_kind(doc: Any) -> str:
    """``topology``, ``study`` or ``checks``: what a parsed file is."""
    if isinstance(doc, dict) and "nodes" in doc:
        return "topology"
    if isinstance(doc, dict) and (any(k in doc for k in _STUDY_KEYS)
                                  or isinstance(doc.get("topology"), dict)):
        return "study"
    return "checks"


def load(path: str) -> Suite:
    """The checks of ``path`` (a checks, topology or study file), resolved
    into stages; one line naming the file, line and field on any mistake."""
    return from_document(read_yaml(path), path)


def from_document(doc: Any, path: str) -> Suite:
    """The checks of a parsed file (``doc``, read from ``path``)."""
    if not isinstance(doc, dict):
        raise InputError(f"{path}:1: a checks file is a mapping with checks: or stages:")
    kind = file_kind(doc)
    data: Dict[str, Any] = dict(doc)
    if kind != "checks":
        data = {k: doc[k] for k in CHECK_KEYS if k in doc}
        if not data:
            raise InputError(f"{path}:{getattr(doc, 'line', 1)}: this {kind} file has no "
                             "checks: or stages: section")
    try:
        spec = CheckFile.model_validate(data)
    except ValidationError as exc:
        raise InputError(_located(exc, doc, path)) from None
    title = doc.get("name") if kind != "checks" and isinstance(doc.get("name"), str) else ""
    suite = resolve(spec, path, title=str(title)[:120])
    if kind == "topology":
        _check_nodes(spec, doc, path)
    return suite


def _check_nodes(spec: CheckFile, doc: Any, path: str) -> None:
    """In a topology file, every node a check or a link change names is one of its own."""
    nodes = doc.get("nodes")
    if not isinstance(nodes, dict):
        return
    places: List[Tuple[Tuple[Any, ...], Any]] = []
    if spec.checks is not None:
        places += [(("checks", i), c) for i, c in enumerate(spec.checks)]
    for s, stage in enumerate(spec.stages or ()):
        places += [(("stages", s, "checks", i), c) for i, c in enumerate(stage.checks)]
        places += [(("stages", s, "links", i), c) for i, c in enumerate(stage.links)]
    for loc, item in places:
        names = list(item.ends) if isinstance(item, LinkChange) else _names(item)
        for name in names:
            if name not in nodes:
                raise InputError(f"{path}:{line_of(doc, loc)}: {_field(loc)}: no node "
                                 f"{name!r} in this topology")


def _names(check: Any) -> List[str]:
    """The nodes a check names (its node, and a node it pings or sends to)."""
    out = [check.node]
    to = getattr(check, "to", None)
    if isinstance(to, str) and to[:1].isalpha() and ":" not in to:
        out.append(to)
    return out


# -- error lines ------------------------------------------------------------------------
def _clean_loc(loc: Tuple[Any, ...]) -> Tuple[Any, ...]:
    """A pydantic location without its markers and the union tags it puts
    after a check's index (``checks.0.ping.loss`` -> ``checks.0.loss``)."""
    parts = [p for p in loc if isinstance(p, int) or (isinstance(p, str) and "[" not in p)]
    out: List[Any] = []
    for i, p in enumerate(parts):
        if (i >= 2 and isinstance(parts[i - 1], int) and parts[i - 2] == "checks"
                and p in KINDS):
            continue
        out.append(p)
    return tuple(out)


def _field(loc: Tuple[Any, ...]) -> str:
    out = ""
    for p in loc:
        out += f"[{p!r}]" if isinstance(p, str) and ("." in p or ":" in p) else \
            ("." if out else "") + str(p)
    return out


def _at(doc: Any, loc: Tuple[Any, ...]) -> Any:
    cur = doc
    for p in loc:
        if isinstance(cur, dict) and p in cur:
            cur = cur[p]
        elif isinstance(cur, list) and isinstance(p, int) and 0 <= p < len(cur):
            cur = cur[p]
        else:
            return None
    return cur


def _model_at(doc: Any, loc: Tuple[Any, ...]) -> Optional[type]:
    """The model of the mapping at ``loc`` (for the keys it allows)."""
    if not loc:
        return CheckFile
    last = loc[-1]
    if isinstance(last, int) and len(loc) >= 2 and loc[-2] == "checks":
        value = _at(doc, loc)
        kind = value.get("check") if isinstance(value, dict) else None
        return _kind_model(kind)
    if isinstance(last, int) and loc[-2:-1] == ("stages",):
        return Stage
    if isinstance(last, int) and loc[-2:-1] == ("links",):
        return LinkChange
    if last == "rtt":
        return DelayBound
    if len(loc) >= 2 and loc[-2] == "counters":
        return Bound
    return None


def _kind_model(kind: Any) -> Optional[type]:
    from . import checks
    union = typing.get_args(typing.get_args(checks.Check)[0])
    for model in union:
        if typing.get_args(model.model_fields["check"].annotation) == (kind,):
            return typing.cast(type, model)
    return None


def _keys(model: type) -> str:
    fields = typing.cast(BaseModel, model).model_fields
    return ", ".join(f.alias or k for k, f in fields.items())


def _located(exc: ValidationError, doc: Any, path: str) -> str:
    """One line for the first error: ``FILE:LINE: field: problem``."""
    errors = exc.errors(include_url=False)
    # a misspelt key explains the key it should have been: say it first
    err = next((e for e in errors if e.get("type") == "extra_forbidden"), errors[0])
    loc = _clean_loc(tuple(err.get("loc", ())))
    msg = str(err.get("msg", "invalid"))
    for noise in ("Value error, ", "Assertion failed, "):
        if msg.startswith(noise):
            msg = msg[len(noise):]
    kind = err.get("type")
    if kind == "extra_forbidden" and loc:
        model = _model_at(doc, loc[:-1])
        msg = f"unknown key {loc[-1]!r}" + (f" (allowed: {_keys(model)})" if model else "")
        loc = loc[:-1]
    elif kind == "missing" and loc:
        msg = f"{loc[-1]!r} is required"
        loc = loc[:-1] if isinstance(_at(doc, loc[:-1]), dict) else loc
    elif kind == "union_tag_invalid":
        msg = f"check: {err.get('ctx', {}).get('tag')!r} is not one of {', '.join(KINDS)}"
    elif kind == "union_tag_not_found":
        msg = f"a check names its kind (check: {' | '.join(KINDS)})"
    elif kind == "literal_error":
        msg = f"{err.get('input')!r} is not one of {err.get('ctx', {}).get('expected', '')}"
    field = _field(loc)
    line = line_of(doc, loc) if isinstance(doc, LineDict) else 1
    return f"{path}:{line}: " + (f"{field}: " if field else "") + msg


# -- a topology file with checks --------------------------------------------------------
def topology_file(path: str) -> Topology:
    """The topology of the YAML file ``path``, whose ``checks:`` and
    ``stages:`` (if any) are set aside: checked here, run by ``nslab check``.
    Errors name the file, the line and the field, as
    :meth:`Topology.from_yaml <nslab.model.topo.Topology.from_yaml>`'s do."""
    doc = read_yaml(path)
    if not isinstance(doc, LineDict) or not any(k in doc for k in CHECK_KEYS):
        return Topology.from_yaml(path)
    from_document(doc, path)  # its checks are checked too, before anything is built
    if not doc.get("nodes"):
        raise TopologyError(f"{path}:{doc.line}: 'nodes' must be a non-empty mapping of "
                            "name: options")
    rest = LineDict({k: v for k, v in doc.items() if k not in CHECK_KEYS})
    rest.line, rest.lines = doc.line, {k: v for k, v in doc.lines.items() if k not in CHECK_KEYS}
    rest.setdefault("name", path[-120:])
    try:
        topo = Topology.from_dict(dict(rest))
    except TopologyError as exc:
        raise TopologyError(f"{path}:{line_of(rest, exc.loc)}: {exc}", exc.loc) from None
    topo._source = (path, rest)  # a problem found later (the kernel's) names the line
    return topo
