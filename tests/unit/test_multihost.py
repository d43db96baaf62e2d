"""Labs across machines, the pure part: placement, VNIs and MTU arithmetic."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nslab.errors import InputError
from nslab.multihost import (VNI_BASE, cut_size, place, tunnel_mtu, tunnels, vxlan_overhead)
from nslab.topologies.clos import clos
from nslab.topologies.mininet import linear, torus


def test_vxlan_overhead_and_the_mtu_left_inside():
    assert vxlan_overhead("ipv4") == 50 and vxlan_overhead("ipv6") == 70
    assert tunnel_mtu(1500) == 1450 and tunnel_mtu(1500, "ipv6") == 1430
    assert tunnel_mtu(9000) == 8950
    with pytest.raises(InputError, match="below IPv4's minimum"):
        tunnel_mtu(100)


def test_a_clos_over_two_hosts_is_balanced_and_cut_into_vxlan_links():
    t = clos(spines=2, servers=2)
    p = place(t, ["a", "b"])
    assert sorted(p.values()) == ["a", "a", "b", "b"]
    tun = tunnels(t, p)
    assert len(tun) == cut_size(t, p) >= 1
    assert [x.vni for x in tun] == list(range(VNI_BASE, VNI_BASE + len(tun)))
    assert all(x.host_a != x.host_b and x.mtu == 1450 for x in tun)
    assert tunnels(t, p) == tun  # the same on every host


def test_explicit_placement_wins_and_is_checked():
    t = clos(spines=2, servers=2)
    p = place(t, ["a", "b"], explicit={"spine1": "b", "spine2": "b"})
    assert p["spine1"] == p["spine2"] == "b"
    with pytest.raises(InputError, match="unknown node 'spine9'"):
        place(t, ["a", "b"], explicit={"spine9": "a"})
    with pytest.raises(InputError, match="not one of a, b"):
        place(t, ["a", "b"], explicit={"spine1": "c"})
    with pytest.raises(InputError, match="named twice"):
        place(t, ["a", "a"])


def test_one_host_cuts_nothing():
    t = torus(x=3, y=3)
    p = place(t, ["only"])
    assert set(p.values()) == {"only"} and tunnels(t, p) == []


def test_a_link_mtu_that_does_not_fit_the_tunnel_is_refused():
    t = linear(k=2)
    t.links[0] = t.links[0].model_copy(update={"mtu": 1500})
    first = t.links[0]
    p = {n: "a" for n in t.nodes}
    p[first.b] = "b"  # the first link crosses hosts
    with pytest.raises(InputError, match="MTU 1500 does not fit a VXLAN tunnel"):
        tunnels(t, p)
    assert tunnels(t, p, underlay_mtu=9000)[0].mtu == 1500


@settings(max_examples=25, deadline=None)
@given(k=st.integers(2, 24), hosts=st.integers(1, 4))
def test_every_node_is_placed_once_and_the_parts_differ_by_at_most_one(k, hosts):
    t = linear(k=k)
    names = [f"m{i}" for i in range(hosts)]
    p = place(t, names)
    assert set(p) == set(t.nodes)
    sizes = [list(p.values()).count(h) for h in names]
    assert max(sizes) - min(sizes) <= 1
    # a path cut into runs: never worse than cutting every link
    assert cut_size(t, p) <= len(t.links)
