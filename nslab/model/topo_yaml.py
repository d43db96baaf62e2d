"""Reading YAML files that anyone may have written, with the line of every
mapping key and sequence item kept, so that an error names the file, the line
and the field. A pure reader: topologies are validated by
:meth:`~nslab.model.topo.Topology.from_yaml`, study files by their study.

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
are refused, and every bound is checked while it is parsed, before anything
is built from it: at most :data:`MAX_BYTES` of file, :data:`MAX_NODES` YAML
nodes (counted as they are read, and again with aliases expanded: no
"billion laughs"), nested at most :data:`MAX_DEPTH` deep (20,000 ``[`` is one
line, not a ``RecursionError``). Study files are read by the same loader.
A topology's nodes and links are counted right after parsing, against the
active limits (:mod:`nslab.model.limits`), by ``Topology.from_yaml``.
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

import yaml

from ..errors import InputError
from ..safeio import read_bytes

#: The largest file read (a 1000-host topology written out in full is ~60 KiB;
#: PyYAML reads ~100 KiB/s, so 4 MiB is ~40 s at worst).
MAX_BYTES = 4 * 1024 * 1024
#: YAML nodes, as read and after alias expansion; a 1000-host topology is about 20,000.
MAX_NODES = 500_000
#: How deep collections may nest (a topology or study file needs about 6).
MAX_DEPTH = 64


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
    """A SafeLoader that records lines, refuses duplicate keys and bounds the
    document's size, depth and aliases while composing it."""

    _depth = 0
    _count = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._count += 1
        if self._count > MAX_NODES:
            raise yaml.composer.ComposerError(
                None, None, f"more than {MAX_NODES:,} YAML nodes", self.peek_event().start_mark)
        if self._depth >= MAX_DEPTH:
            raise yaml.composer.ComposerError(
                None, None, f"nested more than {MAX_DEPTH} levels deep",
                self.peek_event().start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self) -> Any:
        node = super().compose_document()
        _expanded_size(node)
        return node


def _expanded_size(root: yaml.Node) -> int:
    """The nodes of ``root`` with every alias expanded, without recursion; too
    many, too deep (aliases of aliases) or a cycle is a ``ConstructorError``."""
    memo: Dict[int, Tuple[int, int]] = {}  # id -> (size, depth)
    on_stack: set = set()
    stack: List[Tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        children: List[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [c for kv in node.value for c in kv]
        if not done:
            if key in memo:
                continue
            if key in on_stack:
                raise yaml.constructor.ConstructorError(
                    None, None, "a YAML alias refers to itself (recursive structure)",
                    node.start_mark)
            on_stack.add(key)
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in memo)
            continue
        on_stack.discard(key)
        size = 1 + sum(memo[id(c)][0] for c in children)
        depth = 1 + max((memo[id(c)][1] for c in children), default=0)
        if size > MAX_NODES:
            raise yaml.constructor.ConstructorError(
                None, None, f"the document expands to more than {MAX_NODES:,} YAML nodes "
                            "(aliases used as a 'billion laughs'?)", node.start_mark)
        if depth > MAX_DEPTH:
            raise yaml.constructor.ConstructorError(
                None, None, f"aliases nest the document more than {MAX_DEPTH} levels deep",
                node.start_mark)
        memo[key] = (size, depth)
    return memo[id(root)][0]


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


def read_text(path: str) -> str:
    """The UTF-8 text of ``path``, at most :data:`MAX_BYTES` (read no further),
    if it is a regular file: a link, a FIFO or a device is refused, never
    followed or opened (:func:`nslab.safeio.read_bytes`)."""
    try:
        raw = read_bytes(path, MAX_BYTES)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def parse_yaml(text: str, path: str) -> Any:
    """Parse ``text`` (read from ``path``) with line information and the bounds
    of :class:`LineLoader`; raise ``InputError`` as ``file:line: ...``."""
    if len(text) > MAX_BYTES:
        raise InputError(f"{path}: larger than {MAX_BYTES // (1024 * 1024)} MiB")
    try:
        return yaml.load(text, Loader=LineLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else path
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"{where}: malformed YAML: {problem}") from None
    except RecursionError:  # not reached within MAX_DEPTH; a last guard
        raise InputError(f"{path}: malformed YAML: nested too deeply") from None


def read_yaml(path: str) -> Any:
    """Parse ``path`` with line information; raise ``InputError`` as ``file:line: ...``."""
    return parse_yaml(read_text(path), path)


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



__all__ = ["read_yaml", "read_text", "parse_yaml", "line_of", "LineLoader",
           "MAX_BYTES", "MAX_NODES", "MAX_DEPTH"]
