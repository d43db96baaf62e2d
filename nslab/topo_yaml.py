"""YAML topologies, validated by the :class:`~nslab.topo.Topology` model; every
error is one line naming the file, the line and the field.

Format (``nslab topo schema`` prints its JSON Schema)::

    name: demo
    switch: bridge          # default type of switches: bridge | ovs
    nodes:
      h1: {ip: 10.0.0.1/24}          # kind defaults to host
      h2: {}
      r1: {kind: router, routes: ["10.9.0.0/16 via 10.0.0.254"]}
      s1: {kind: switch, type: ovs}
    links:
      - [h1, s1]                      # short form
      - {a: h2, b: s1, bw: 1000, delay: 1ms, params1: {ip: 10.0.0.2/24}}

A file is data from anyone: it is parsed with a safe loader, duplicate keys
are refused, YAML aliases may not expand beyond a fixed budget (no "billion
laughs"), and the file may not exceed 16 MiB.
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

import yaml
from pydantic import ValidationError

from .errors import InputError, TopologyError

MAX_BYTES = 16 * 1024 * 1024
#: YAML nodes after alias expansion; a 1000-host topology is about 20,000.
MAX_NODES = 500_000


class LineDict(dict):
    """A mapping that remembers its own line and the line of each key."""

    line = 0

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.lines: Dict[Any, int] = {}


class LineList(list):
    """A sequence that remembers its own line and the line of each item."""

    line = 0

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.lines: List[int] = []


class LineLoader(yaml.SafeLoader):
    """A SafeLoader that records lines, refuses duplicate keys and bounds aliases."""

    def compose_document(self) -> Any:
        node = super().compose_document()
        _expanded_size(node, {}, set())
        return node


def _expanded_size(node: yaml.Node, memo: Dict[int, int], stack: set) -> int:
    key = id(node)
    if key in memo:
        return memo[key]
    if key in stack:
        raise yaml.constructor.ConstructorError(
            None, None, "a YAML alias refers to itself (recursive structure)", node.start_mark)
    stack.add(key)
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(c, memo, stack) for c in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(k, memo, stack) + _expanded_size(v, memo, stack)
                    for k, v in node.value)
    stack.discard(key)
    if size > MAX_NODES:
        raise yaml.constructor.ConstructorError(
            None, None, f"the document expands to more than {MAX_NODES:,} YAML nodes "
                        "(aliases used as a 'billion laughs'?)", node.start_mark)
    memo[key] = size
    return size


def _construct_mapping(loader: LineLoader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    data = LineDict()
    data.line = node.start_mark.line + 1
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark,
                "a key must be a plain value", key_node.start_mark) from None
        if key in data:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark,
                f"duplicate key {key!r}", key_node.start_mark)
        data[key] = loader.construct_object(value_node, deep=True)
        data.lines[key] = key_node.start_mark.line + 1
    return data


def _construct_sequence(loader: LineLoader, node: yaml.SequenceNode) -> LineList:
    data = LineList(loader.construct_object(c, deep=True) for c in node.value)
    data.line = node.start_mark.line + 1
    data.lines = [c.start_mark.line + 1 for c in node.value]
    return data


LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


def read_yaml(path: str) -> Any:
    """Parse ``path`` with line information; raise ``InputError`` as ``file:line: ...``."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    if len(raw) > MAX_BYTES:
        raise InputError(f"{path}: larger than {MAX_BYTES // (1024 * 1024)} MiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    try:
        return yaml.load(text, Loader=LineLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else path
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"{where}: malformed YAML: {problem}") from None


def line_of(doc: Any, loc: Tuple[Any, ...]) -> int:
    """The line of the deepest element of ``loc`` found in ``doc``."""
    line = getattr(doc, "line", 1) or 1
    cur = doc
    for part in loc:
        if isinstance(cur, LineDict) and part in cur:
            line = cur.lines.get(part, line)
            cur = cur[part]
        elif isinstance(cur, LineList) and isinstance(part, int) and 0 <= part < len(cur):
            line = cur.lines[part]
            cur = cur[part]
        else:
            break
    return line


def load_yaml_topology(path: str) -> "Any":
    """Read and validate ``path``; raise :class:`TopologyError` with ``file:line: field: problem``."""
    from .topo import Topology, explain, loc_path
    doc = read_yaml(path)
    if not isinstance(doc, dict):
        raise TopologyError(f"{path}:1: a topology must be a mapping with 'nodes' and 'links'")
    if not doc.get("nodes"):
        raise TopologyError(f"{path}:{doc.line}: 'nodes' must be a non-empty mapping of "
                            "name: options")
    data = dict(doc)
    data.setdefault("name", path[-120:])
    try:
        topo = Topology.model_validate(data)
    except ValidationError as exc:
        loc = loc_path(tuple(exc.errors(include_url=False)[0].get("loc", ())))
        raise TopologyError(f"{path}:{line_of(doc, loc)}: {explain(exc, (), Topology)}",
                            loc) from None
    except TopologyError as exc:
        raise TopologyError(f"{path}:{line_of(doc, exc.loc)}: {exc}") from None
    topo._source = (path, doc)
    return topo


__all__ = ["load_yaml_topology", "read_yaml", "line_of", "LineLoader", "MAX_BYTES", "MAX_NODES"]
