import pytest

from nslab.errors import InputError, TopologyError
from nslab.model.topo import Topology
from nslab.run.registry import topology as get
from nslab.topologies import pair, single
from nslab.topologies.basic import build_single


def test_single_addresses_and_interface_names_follow_mininet():
    t = single(k=3)
    assert t.switches() == ["s1"]
    assert t.hosts() == ["h1", "h2", "h3"]
    names = [(a, ia, b, ib) for _, a, ia, b, ib in t.interfaces()]
    assert names[0] == ("h1", "h1-eth0", "s1", "s1-eth1")
    assert names[2] == ("h3", "h3-eth0", "s1", "s1-eth3")
    assert str(t.addresses()[("h2", "h2-eth0")]) == "10.0.0.2/8"


def test_pair_has_one_link_and_shaping_from_tclink_options():
    t = pair(bw=1000, framing=True)
    assert len(t.links) == 1
    s = t.links[0].shaping
    assert s.rate == 1_000_000_000 and s.overhead == 24 and s.qdisc == "tbf"
    assert t.needs() == ["netns", "tbf", "veth"]
    assert pair(bw=1000).links[0].shaping.qdisc == "htb"


def test_netem_options_are_recorded_as_a_need():
    t = pair(delay="5ms", loss=1)
    assert "netem" in t.needs()


@pytest.mark.parametrize("name", ["bad name", "1host", "h-1", "waytoolongname", "", "h;rm"])
def test_unsafe_node_names_are_refused(name):
    t = Topology()
    with pytest.raises(TopologyError, match="not a safe interface name"):
        t.add_host(name)


@pytest.mark.parametrize("build, message", [
    (lambda t: (t.add_host("h1"), t.add_host("h1")), "duplicate node"),
    (lambda t: (t.add_host("h1"), t.add_link("h1", "h9")), "unknown node 'h9'"),
    (lambda t: (t.add_host("h1"), t.add_link("h1", "h1")), "itself"),
    (lambda t: (t.add_host("h1", ip="10.0.0.1/24"), t.add_host("h2", ip="10.0.0.1/24"),
                t.add_link("h1", "h2")), "used twice"),
    (lambda t: (t.add_host("h1", ip="10.0.0.300/24"), t.add_host("h2"),
                t.add_link("h1", "h2")), "nodes.h1.ip: '10.0.0.300/24' is not an IP address"),
    (lambda t: (t.add_host("h1", ip="10.0.0.3"), t.add_host("h2"),
                t.add_link("h1", "h2")), "prefix length"),
    (lambda t: (t.add_host("h1"), t.add_node("x1", "router9")),
     "nodes.x1.kind: 'router9' is not one of 'host', 'switch' or 'router'"),
    (lambda t: (t.add_host("h1"), t.add_switch("s1", type="hub")),
     "nodes.s1.type: 'hub' is not one of 'bridge' or 'ovs'"),
])
def test_validation_names_the_problem(build, message):
    t = Topology()
    with pytest.raises(TopologyError, match=message):
        build(t)
        t.validate()


def test_unknown_link_option_is_refused():
    t = Topology()
    t.add_host("h1"), t.add_host("h2")
    with pytest.raises(TopologyError, match="unknown option"):
        t.add_link("h1", "h2", colour="red")


def test_bad_rate_is_refused():
    with pytest.raises(InputError, match="bad rate '10 parsecs'"):
        pair(bw="10 parsecs")


def test_unknown_topology_name():
    with pytest.raises(InputError, match="unknown topology 'nosuch'"):
        get("nosuch")


def test_mininet_topo_converts_to_the_same_topology():
    mininet_topo = pytest.importorskip("mininet.topo")

    class T(mininet_topo.Topo):
        def build(self):
            build_single(self, 3, bw=100)

    ours = Topology.from_mininet(T(), name="t")
    ref = single(k=3, bw=100)
    assert [(a, ia, b, ib) for _, a, ia, b, ib in ours.interfaces()] == \
           [(a, ia, b, ib) for _, a, ia, b, ib in ref.interfaces()]
    assert ours.links[0].shaping == ref.links[0].shaping
    assert ours.addresses() == ref.addresses()


def test_ready_topologies_take_jitter_and_swallow_no_option():
    import inspect

    from nslab.run.registry import topologies
    assert pair(delay="20ms", jitter="5ms").links[0].shaping.jitter_ms == 5.0
    assert single(k=2, delay="1ms", jitter="0.5ms").links[1].shaping.jitter_ms == 0.5
    for name, fn in topologies().items():
        kinds = {p.kind for p in inspect.signature(fn).parameters.values()}
        assert inspect.Parameter.VAR_KEYWORD not in kinds, f"{name} would ignore options silently"


def test_without_ipv6_plans_no_link_locals_on_hosts_and_switches_but_on_routers():
    from nslab.runtime.plan import plan
    t = Topology(name="v4")
    t.add_host("h1")
    t.add_switch("s1")
    t.add_router("r1")
    t.add_link("h1", "s1")
    t.add_link("r1", "s1")
    lines = plan(t.without_ipv6(), "nl0abc").ns_lines
    h1, s1, r1 = lines["nl0abc-h1"], lines["nl0abc-s1"], lines["nl0abc-r1"]
    # before each link comes up, so the kernel never makes one
    assert h1.index("link set dev h1-eth0 addrgenmode none") < h1.index("link set dev h1-eth0 up")
    for dev in ("s1-eth1", "s1-eth2", "s1"):
        assert s1.index(f"link set dev {dev} addrgenmode none") < s1.index(f"link set dev {dev} up")
    assert not any("addrgenmode" in ln for ln in r1)  # BGP unnumbered needs IPv6
    default = plan(t, "nl0abc").ns_lines                # the default keeps IPv6 on hosts,
    assert not any("addrgenmode" in ln for ln in default["nl0abc-h1"] + default["nl0abc-r1"])
    assert [ln for ln in default["nl0abc-s1"] if "addrgenmode" in ln] == [  # not on bridge ports
        "link set dev s1-eth1 addrgenmode none", "link set dev s1-eth2 addrgenmode none"]
    assert t.ipv6 and not t.without_ipv6().ipv6      # a copy


def test_without_ipv6_refuses_an_ipv6_address_naming_the_node():
    t = Topology(name="v6", auto_ip=False)
    t.add_host("h1")
    t.add_host("h2", routes=["2001:db8:1::/48 via 2001:db8::1"])
    t.add_link("h1", "h2", {"ip": "2001:db8::2/64"}, {"ip": "2001:db8::1/64"})
    with pytest.raises(TopologyError, match=r"^nodes.h1: 2001:db8::2/64 is IPv6, and the "
                                            r"topology has ipv6: false"):
        t.without_ipv6()


def test_the_two_ends_of_a_veth_get_different_interface_indexes():
    """A veth whose index equals its peer's is not urgent to the kernel's link
    watcher (its carrier can wait up to a second): fresh namespaces would give
    both ends of a first link index 2."""
    import re

    from nslab.runtime.plan import plan

    def indexes(topo):
        return [tuple(int(i) for i in re.findall(r" index (\d+)", ln))
                for ln in plan(topo, "nl0abc", ["ovs"]).link_lines if ln.startswith("link add")]
    assert indexes(pair()) == [(2, 3)]
    assert indexes(single(k=3)) == [(2, 3), (2, 4), (2, 5)]  # s1 skips 2, then counts on
    t = Topology(name="tri")
    for n in ("a", "b", "c"):
        t.add_host(n)
    t.add_link("a", "b")
    t.add_link("b", "c")
    t.add_link("c", "a")
    assert indexes(t) == [(2, 3), (4, 2), (3, 4)]            # per namespace: a 2,4; b 3,4; c 2,3
    assert all(a != b for a, b in indexes(t) + indexes(single(k=3)))
    # an end in the root namespace (an OVS port): left to the kernel
    assert indexes(single(k=2, switch="ovs")) == [(), ()]
