"""Pictures of the ready topologies: every node and every link is drawn, with
its kind and interface names. No root."""
import pytest

from nslab.draw import available, draw, links, node_kind, to_graph
from nslab.registry import topologies
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
        for intf in (ia, ib):  # Graphviz escapes '-' as &#45; in SVG text
            assert ">" + intf.replace("-", "&#45;") + "<" in svg


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
