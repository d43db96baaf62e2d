"""Pictures of the ready topologies: every node and every link is drawn, with
its kind and interface names. No root."""
import pytest

from nslab.store.draw import available, draw, end_label, links, natural_key, node_kind, to_graph
from nslab.run.registry import topologies
from nslab.topologies.clos import clos
from nslab.topologies.basic import single

pytestmark = pytest.mark.skipif(not available(), reason="Graphviz (dot) is not installed")


@pytest.mark.parametrize("name", sorted(topologies()))
def test_every_ready_topology_is_drawn_whole(name, tmp_path):
    topo = topologies()[name]()
    svg = open(draw(topo, str(tmp_path / f"{name}.svg"))).read()
    assert svg.count('class="node"') == len(topo.nodes)
    assert svg.count('class="edge link"') == len(topo.links)
    # each link's edge has the id `nslab watch --web` colours
    for l in links(topo):
        assert f'id="{l["id"]}" class="edge link"' in svg
    for _, a, ia, b, ib in topo.interfaces():
        for node, intf in ((a, ia), (b, ib)):  # Graphviz escapes '-' as &#45; in SVG text
            assert ">" + end_label(node, intf).replace("-", "&#45;") + "<" in svg


def test_kinds_and_tiers():
    t = clos(spines=2, servers=3)
    assert {node_kind(t, n) for n in t.nodes} == {"bgp"}
    src = to_graph(t).source
    assert "rank=same" in src and src.count("doubleoctagon") == 5
    s = single(k=2, switch="ovs", bw="1Gbit")
    src = to_graph(s).source
    assert "hexagon" in src and "1 Gbit/s" in src


def test_a_bad_picture_name_is_refused(tmp_path):
    from nslab.errors import InputError
    with pytest.raises(InputError, match="must end in .svg"):
        draw(single(k=2), str(tmp_path / "x.gif"))


# -- user strings are text, never markup (issue 31) ------------------------------------------
HOSTILE = '<<TABLE HREF="javascript:alert(1)"><TR><TD>x</TD></TR></TABLE>>'


def _pair(name):
    from nslab.model.topo import Topology
    t = Topology(name=name)
    t.add_host("h1")
    t.add_host("h2")
    t.add_link("h1", "h2", delay="1ms")
    return t


def _svg_tree(topo, **kw):
    import xml.etree.ElementTree as ET
    svg = to_graph(topo, **kw).pipe(format="svg").decode()
    return svg, ET.fromstring(svg[svg.index("<svg"):])


@pytest.mark.parametrize("name", [HOSTILE, "<b>bold</b>", "x\\", 'a"b\\"c\\\\',
                                  '<x> [URL="javascript:alert(1)"] \\N \\l'])
def test_a_name_that_looks_like_html_or_dot_is_drawn_as_its_text(name, tmp_path):
    """An HTML-like label from a topology name would make Graphviz write
    <a xlink:href="javascript:..."> into the SVG; a final backslash would end
    DOT's quoted string early. Both are drawn as the name's text: the SVG has
    the same elements as a plainly named topology, no link, no javascript:
    target, and the title reads exactly the name."""
    svg, root = _svg_tree(_pair(name))
    _, plain = _svg_tree(_pair("plain"))
    assert [e.tag for e in root.iter()] == [e.tag for e in plain.iter()]
    assert not any("javascript" in v.lower() for e in root.iter() for v in e.attrib.values())
    assert not any(e.tag.endswith("}a") for e in root.iter())
    graph_label = root.find("{http://www.w3.org/2000/svg}g/{http://www.w3.org/2000/svg}text")
    assert graph_label.text == name
    # the file nslab topo draw writes says the same
    written = open(draw(_pair(name), str(tmp_path / "t.svg"))).read()
    assert "xlink:href" not in written and "<a " not in written


def test_live_rates_and_colours_are_text_too():
    t = _pair("p")
    (l0,) = links(t)
    rates = {(l0["a"], l0["ia"]): '<<B>1 Gbit/s</B>>', (l0["b"], l0["ib"]): "2\\"}
    _, root = _svg_tree(t, rates=rates, colors={"link0": "<red>"})
    texts = [e.text for e in root.iter() if e.tag.endswith("}text")]
    assert "<<B>1 Gbit/s</B>>" in texts and "2\\" in texts
    assert not any(e.tag.endswith(("}a", "}B")) for e in root.iter())


def test_a_node_id_must_be_a_node_name():
    """Node names are DOT identifiers: one that is not a valid node name (a
    ``:`` would be read as a port, ``<...>`` as HTML) is refused, not drawn."""
    from nslab.errors import TopologyError
    t = _pair("p")
    t.nodes["<x>:<y>"] = t.nodes.pop("h2")  # past validation, as only code could
    with pytest.raises(TopologyError, match="not a safe interface name"):
        to_graph(t)


def test_a_tier_is_drawn_in_its_natural_order():
    """server1, server2 ... server10 left to right (dot's crossing minimisation
    drew clos 2x4's servers 3, 2, 1, 4)."""
    import re
    assert sorted(["server10", "server2", "server1"], key=natural_key) == \
        ["server1", "server2", "server10"]
    t = clos(spines=2, servers=10)
    svg = to_graph(t).pipe(format="svg").decode()
    xs = {}
    for m in re.finditer(r'<title>(\w+)</title>\s*<polygon[^>]* points="([-0-9.]+),', svg):
        xs[m.group(1)] = float(m.group(2))
    servers = [f"server{i}" for i in range(1, 11)]
    assert [xs[s] for s in servers] == sorted(xs[s] for s in servers)
    assert xs["spine1"] < xs["spine2"]


def test_end_labels_are_short_and_a_rate_every_link_has_is_said_once():
    assert end_label("spine1", "spine1-eth0") == "eth0"
    assert end_label("h1", "eth1") == "eth1" and end_label("h1", "h1-") == "h1-"
    assert end_label("s1", "s10-eth1") == "s10-eth1"
    src = to_graph(clos(spines=2, servers=4)).source
    assert "every link: 1 Gbit/s" in src and 'label="1 Gbit/s"' not in src
    src = to_graph(single(k=2, bw="1Gbit")).source
    assert "every link: 1 Gbit/s" in src
