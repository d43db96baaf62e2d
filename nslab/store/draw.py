"""Pictures of topologies: Graphviz lays them out, nothing here does layout.

Nodes by kind (host, Linux bridge, OVS switch, router, FRR/BGP router), links
labelled with their interface names and shaping; nodes that share a name stem
(``spine1``, ``spine2``) are kept on one rank, so a clos is drawn in tiers.
Live rates (``nslab watch --web``) are drawn by passing ``rates``. No root.
"""
from __future__ import annotations

import importlib.util
import logging
import os
import re
import shutil
from typing import Any, Dict, List, Optional, Tuple

from ..model.fields import check_name
from ..model.kinds import node_options, switch_types
from ..model.topo import Topology
from ..errors import InputError
from ..safeio import write_atomic

log = logging.getLogger(__name__)


def _text(value: Any) -> str:
    """``value`` as plain text for a Graphviz label or name: never an
    HTML-like label (``<...>``), backslashes literal (no ``\\N``/``\\l``
    escapes, and no odd final backslash that would end DOT's quoted string
    early and let the rest of the name be read as DOT), ``&`` literal
    (Graphviz decodes ``&lt;`` and ``&#65;`` in any label)."""
    import graphviz
    return graphviz.escape(str(value).replace("&", "&amp;"))


def _node_id(name: str) -> str:
    """A node's DOT identifier: its name, which must be a valid node name
    (letters, digits, ``_``: no ``:`` port syntax, nothing to quote)."""
    import graphviz
    return graphviz.nohtml(check_name(name))


#: Graphviz node attributes of the core's kinds of node.
STYLE = {
    "host": {"shape": "box", "style": "rounded,filled", "fillcolor": "#e8f1fb"},
    "router": {"shape": "octagon", "style": "filled", "fillcolor": "#f4e8f8"},
}


def styles() -> Dict[str, Dict[str, str]]:
    """Graphviz node attributes by what :func:`node_kind` answers: the core's,
    each switch type's and each registered node option's that has a drawing
    (:mod:`nslab.model.kinds`)."""
    out = {k: dict(v) for k, v in STYLE.items()}
    out.update({t.name: dict(t.draw) for t in switch_types().values()})
    out.update({o.key: dict(o.draw) for o in node_options().values() if o.draw})
    return out


def node_kind(topo: Topology, name: str) -> str:
    """``host``, ``router``, a switch type (``bridge``, ``ovs``), or for a
    router, a registered option with a drawing that it has (``bgp``: an FRR
    router)."""
    node = topo.nodes[name]
    if node.is_switch:
        return topo.switch_type_of(name)
    if node.kind != "router":
        return "host"
    return next((key for key, opt in node_options().items()
                 if opt.draw and getattr(node, key) is not None), "router")


def _stem(name: str) -> str:
    return re.sub(r"\d+$", "", name)


def natural_key(name: str) -> Tuple[Any, ...]:
    """Sort ``server2`` before ``server10``: digits compare as numbers."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def end_label(node: str, intf: str) -> str:
    """What is written at ``node``'s end of a link: its interface's name
    without the node's name before it (``eth0`` at spine1 for
    ``spine1-eth0``), which the node beside it says already; shorter labels
    overlap less where many links meet."""
    return intf[len(node) + 1:] if intf.startswith(f"{node}-") and len(intf) > len(node) + 1 \
        else intf


def link_label(link: Any) -> str:
    """Rate, delay, loss and MTU of a link, as a short label."""
    parts = []
    sh = link.shaping
    if sh is not None and sh.rate:
        rate = sh.rate
        parts.append(f"{rate / 1e9:g} Gbit/s" if rate >= 1e9 else f"{rate / 1e6:g} Mbit/s")
    if link.delay:
        parts.append(f"delay {link.delay}")
    if link.loss:
        parts.append(f"loss {link.loss} %")
    if link.framing:
        parts.append("framing")
    if link.mtu:
        parts.append(f"mtu {link.mtu}")
    return ", ".join(str(p) for p in parts)


def links(topo: Topology) -> List[Dict[str, Any]]:
    """Every link as drawn: ``{id, name, a, ia, b, ib, rate}``, the
    better-connected end (spine, switch) as ``a``; ``id`` is the SVG element
    of its edge, ``name`` the link's as ``nslab link set`` takes it (its
    nodes in the topology's order) and ``rate`` its shaped rate in bit/s
    (None if unshaped)."""
    degree: Dict[str, int] = {n: 0 for n in topo.nodes}
    for link in topo.links:
        degree[link.a] += 1
        degree[link.b] += 1
    out = []
    for i, (link, a, ia, b, ib) in enumerate(topo.interfaces()):
        name = f"{a}-{b}"
        if degree[b] > degree[a]:
            a, ia, b, ib = b, ib, a, ia
        sh = link.shaping
        out.append({"id": f"link{i}", "name": name, "a": a, "ia": ia, "b": b, "ib": ib,
                    "rate": sh.rate if sh is not None and sh.rate else None})
    return out


def to_graph(topo: Topology, rates: Optional[Dict[Tuple[str, str], str]] = None,
             colors: Optional[Dict[str, str]] = None, spacious: bool = False) -> Any:
    """A ``graphviz.Graph`` of ``topo``; ``rates`` maps (node, interface) to a
    text drawn on that end of its link; ``colors`` maps a link's id (see
    :func:`links`) to the colour of its edge, drawn thicker; ``spacious``
    leaves room beside each link for live rates (``nslab watch --web``)."""
    import graphviz
    # every user string (topology, node and interface names, link labels,
    # rates) reaches Graphviz as plain text: see _text and _node_id
    # the graph's own name is a constant: Graphviz writes it into the SVG's
    # <title> and a comment, and versions differ on names it treats as
    # anonymous ("%..."); the topology's name is the label, drawn as text
    labels = {link_label(link) for link in topo.links}
    shared = labels.pop() if len(labels) == 1 and len(topo.links) > 1 else None
    title = topo.name + (f"\nevery link: {shared}" if shared else "")
    # the more links meet at a node, the further apart the tiers, so that the
    # interface names at its end of them stand apart (labeldistance: farther
    # from the node, where the links have spread)
    ends: Dict[str, int] = {}
    for link in topo.links:
        ends[link.a] = ends.get(link.a, 0) + 1
        ends[link.b] = ends.get(link.b, 0) + 1
    fan = max(ends.values(), default=1)
    g = graphviz.Graph(name="topology", graph_attr={"rankdir": "TB", "splines": "true",
                                                          "fontname": "Helvetica",
                                                          "label": _text(title),
                                                          "labelloc": "t",
                                                          "nodesep": "1.8" if spacious else "0.5",
                                                          "ranksep": "1.4" if spacious else
                                                          f"{min(3.0, 0.5 + 0.15 * fan):.2f}"},
                       node_attr={"fontname": "Helvetica", "fontsize": "11"},
                       edge_attr={"fontname": "Helvetica", "fontsize": "8", "color": "#555555",
                                  "labeldistance": "1.6"})
    tiers: Dict[str, list] = {}
    style = styles()
    for name in topo.nodes:
        kind = node_kind(topo, name)
        g.node(_node_id(name), label=_text(f"{name}\n({kind})" if kind != "host" else name),
               **style[kind])
        tiers.setdefault(_stem(name), []).append(name)
    for stem, names in tiers.items():
        if len(names) > 1:
            names = sorted(names, key=natural_key)
            with g.subgraph(name=_text(f"tier_{stem}")) as sub:
                sub.attr(rank="same")
                for n in names:
                    sub.node(_node_id(n))
                # invisible edges left to right hold the tier in its order
                # (server1, server2 ... server10), whatever dot's crossing
                # minimisation would have chosen
                for left, right in zip(names, names[1:]):
                    sub.edge(_node_id(left), _node_id(right), style="invis")
    for l, (link, *_) in zip(links(topo), topo.interfaces()):
        lid, a, ia, b, ib = l["id"], l["a"], l["ia"], l["b"], l["ib"]
        ta, tb = end_label(a, ia), end_label(b, ib)
        if rates:
            ta = f"{ta}\n{rates.get((a, ia), '')}".strip()
            tb = f"{tb}\n{rates.get((b, ib), '')}".strip()
        attrs = {"id": lid, "class": "link"}
        if colors and lid in colors:
            attrs.update(color=_text(colors[lid]), penwidth="3")
        label = "" if shared else link_label(link)
        g.edge(_node_id(a), _node_id(b), label=_text(label), taillabel=_text(ta),
               headlabel=_text(tb), **attrs)
    return g


def available() -> bool:
    """Is Graphviz's ``dot`` installed (and the Python package)?"""
    return importlib.util.find_spec("graphviz") is not None and shutil.which("dot") is not None


def draw(topo: Topology, path: str, **kw: Any) -> str:
    """Write ``topo`` as a picture to ``path`` (``.svg``, ``.png``, ``.pdf`` or
    ``.dot``); ``kw`` goes to :func:`to_graph` (``rates``, ``colors``)."""
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    if ext not in ("svg", "png", "dot", "pdf"):
        raise InputError(f"{path}: the picture must end in .svg, .png, .pdf or .dot")
    g = to_graph(topo, **kw)
    # written by rename, never through a link at ``path`` (nslab runs as root)
    if ext == "dot":
        return write_atomic(path, g.source)
    if not available():
        raise InputError("drawing needs Graphviz: apt install graphviz (make setup installs it)")
    return write_atomic(path, g.pipe(format=ext))
