"""YAML topologies, validated; every error names the file and the line.

Format::

    name: demo
    switch: bridge          # default type of switches: bridge | ovs
    nodes:
      h1: {ip: 10.0.0.1/24}          # kind defaults to host
      h2: {}
      r1: {kind: router}
      s1: {kind: switch, type: ovs}
    links:
      - [h1, s1]                      # short form
      - {a: h2, b: s1, bw: 1000, delay: 1ms, params1: {ip: 10.0.0.2/24}}
"""
from __future__ import annotations

from typing import Any, Dict

import yaml

from .errors import InputError, LabError
from .topo import Topology


class _LineLoader(yaml.SafeLoader):
    """A SafeLoader that remembers the line of every mapping and sequence."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> Dict[str, Any]:
    data = _LineDict(loader.construct_mapping(node, deep=True))
    data.line = node.start_mark.line + 1
    return data


def _construct_sequence(loader: _LineLoader, node: yaml.SequenceNode):
    data = _LineList(loader.construct_sequence(node, deep=True))
    data.line = node.start_mark.line + 1
    return data


class _LineDict(dict):
    line = 0


class _LineList(list):
    line = 0


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)

_TOP_KEYS = {"name", "switch", "nodes", "links", "auto_ip", "ip_base"}
_LINK_KEYS = {"a", "b", "params1", "params2"}


def load_yaml_topology(path: str) -> Topology:
    """Read and validate ``path``; raise :class:`InputError` with ``file:line: problem``."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        doc = yaml.load(text, Loader=_LineLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else path
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"{where}: malformed YAML: {problem}") from None
    if not isinstance(doc, dict):
        raise InputError(f"{path}:1: a topology must be a mapping with 'nodes' and 'links'")

    def err(line: int, msg: str) -> InputError:
        return InputError(f"{path}:{line}: {msg}")

    unknown = set(doc) - _TOP_KEYS
    if unknown:
        raise err(doc.line, f"unknown key(s) {', '.join(sorted(unknown))} "
                            f"(allowed: {', '.join(sorted(_TOP_KEYS))})")
    nodes = doc.get("nodes")
    if not isinstance(nodes, dict) or not nodes:
        raise err(doc.line, "'nodes' must be a non-empty mapping of name: options")
    topo = Topology(name=str(doc.get("name", path)), switch_type=str(doc.get("switch", "bridge")),
                    auto_ip=bool(doc.get("auto_ip", True)),
                    ip_base=str(doc.get("ip_base", "10.0.0.0/8")))
    for name, opts in nodes.items():
        line = getattr(opts, "line", nodes.line)
        if opts is None:
            opts = {}
        if not isinstance(opts, dict):
            raise err(line, f"node {name!r}: options must be a mapping")
        opts = dict(opts)
        kind = opts.pop("kind", "host")
        try:
            topo.add_node(str(name) if isinstance(name, str) else name, kind, **opts)
        except LabError as exc:
            raise err(line, str(exc)) from None
    links = doc.get("links", []) or []
    if not isinstance(links, list):
        raise err(doc.line, "'links' must be a list")
    for item in links:
        line = getattr(item, "line", links.line)
        try:
            if isinstance(item, list):
                if len(item) != 2:
                    raise InputError(f"link {item!r}: the short form is [node_a, node_b]")
                topo.add_link(item[0], item[1])
            elif isinstance(item, dict):
                opts = dict(item)
                if "a" not in opts or "b" not in opts:
                    raise InputError("a link needs 'a' and 'b'")
                a, b = opts.pop("a"), opts.pop("b")
                p1, p2 = opts.pop("params1", {}) or {}, opts.pop("params2", {}) or {}
                topo.add_link(a, b, dict(p1), dict(p2), **opts)
            else:
                raise InputError(f"link {item!r}: use [a, b] or {{a: .., b: ..}}")
        except LabError as exc:
            raise err(line, str(exc)) from None
    try:
        topo.validate()
    except LabError as exc:
        raise err(doc.line, str(exc)) from None
    return topo
