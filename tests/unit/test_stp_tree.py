"""When STP on Linux bridges has settled (nslab.runtime.lab.stp_loops): the
forwarding links close no loop and join every group of connected switches
(unless it reaches a bridge the check does not see), on the
states of a 3x3 torus captured here (`bridge -j link show`) the moment every
port was forwarding or blocking and every bridge agreed on the root, and 0.4 s
later, after three ports blocked."""
from nslab.run.registry import topology
from nslab.runtime.lab import stp_loops

# s<row>x<col> port -> state; every other port of the torus forwards
EARLY = {"s3x1-eth1": "forwarding", "s3x1-eth5": "blocking", "s3x2-eth1": "forwarding",
         "s3x2-eth3": "forwarding", "s3x2-eth5": "blocking", "s1x1-eth2": "forwarding",
         "s1x1-eth4": "blocking", "s1x2-eth3": "blocking", "s1x3-eth5": "blocking",
         "s2x1-eth3": "blocking"}
LATER = dict(EARLY, **{"s3x1-eth1": "blocking", "s3x2-eth1": "blocking",
                       "s3x2-eth3": "blocking", "s1x1-eth2": "blocking"})


def torus():
    topo = topology("torus")(x=3, y=3)
    switches = topo.switches()
    links = [(a, ia, b, ib) for _, a, ia, b, ib in topo.interfaces()
             if a in switches and b in switches]
    ports = {p for a, ia, b, ib in links for p in (ia, ib)}
    return switches, links, ports


def states(ports, seen):
    """By (switch, port), as the lab reads them (port names are per switch)."""
    return {(p.split("-")[0], p): seen.get(p, "forwarding") for p in ports}


def test_a_loop_left_forwarding_is_not_settled_and_the_tree_is():
    switches, links, ports = torus()
    assert len(switches) == 9 and len(links) == 18  # a 3x3 torus: 2 links per switch
    early = stp_loops(switches, links, states(ports, EARLY))
    assert early and "close a loop" in early[0]
    assert stp_loops(switches, links, states(ports, LATER)) == []


def test_a_switch_cut_off_is_not_settled():
    switches, links, ports = torus()
    cut = {p: "blocking" for a, ia, b, ib in links if "s2x2" in (a, b) for p in (ia, ib)}
    got = stp_loops(switches, links, states(ports, dict(LATER, **cut)))
    assert got and "parts by the links that forward" in got[0]


def test_a_group_open_to_a_bridge_not_seen_may_be_joined_through_it():
    # one host's five switches of a torus split over two hosts: STP's tree may
    # join them through the other host's switches, so only loops count
    switches, links, ports = torus()
    mine = ["s1x1", "s1x2", "s1x3", "s2x1", "s2x2"]
    local = [(a, ia, b, ib) for a, ia, b, ib in links if a in mine and b in mine]
    cut = {p: "blocking" for a, ia, b, ib in local if "s2x2" in (a, b) for p in (ia, ib)}
    seen = states(ports, dict(LATER, **cut))
    assert "parts" in stp_loops(mine, local, seen)[0]
    assert stp_loops(mine, local, seen, open_to=["s2x2"]) == []
    loop = {p: "forwarding" for a, ia, b, ib in local for p in (ia, ib)}
    assert "close a loop" in stp_loops(mine, local, states(ports, loop), open_to=mine)[0]


def test_ports_of_one_name_on_two_switches_are_told_apart():
    # a YAML topology may name every switch's port eth1
    ring = [("a", "eth1", "b", "eth2"), ("b", "eth1", "c", "eth2"), ("c", "eth1", "a", "eth2")]
    on = {(sw, p): "forwarding" for a, pa, b, pb in ring for sw, p in ((a, pa), (b, pb))}
    assert "close a loop" in stp_loops(["a", "b", "c"], ring, on)[0]
    assert stp_loops(["a", "b", "c"], ring, {**on, ("a", "eth2"): "blocking"}) == []
    assert "parts" in stp_loops(["a", "b", "c"], ring, {**on, ("a", "eth2"): "blocking",
                                                        ("a", "eth1"): "blocking"})[0]


def test_separate_groups_each_need_their_own_tree():
    # two rings of three, not wired to each other: 2 forwarding links each
    ring = [("a", "a-1", "b", "b-1"), ("b", "b-2", "c", "c-1"), ("c", "c-2", "a", "a-2"),
            ("x", "x-1", "y", "y-1"), ("y", "y-2", "z", "z-1"), ("z", "z-2", "x", "x-2")]
    on = {(p[0], p): "forwarding" for _, pa, _, pb in ring for p in (pa, pb)}
    sw = ["a", "b", "c", "x", "y", "z"]
    assert "close a loop" in stp_loops(sw, ring, on)[0]
    one = {**on, ("a", "a-2"): "blocking"}  # x, y, z still loop: z-x closes it
    assert "through z and x:" in stp_loops(sw, ring, one)[0]
    assert stp_loops(sw, ring, {**one, ("x", "x-2"): "blocking"}) == []
