"""ECMP study logic, FRR config rendering, and the report from a captured run."""
import json
import os
import shutil
from collections import Counter

import pytest

from nslab.errors import InputError
from nslab.frr.rundir import NodeDir
from nslab.frr.version import FrrVersion
from nslab.experiments.ecmp.config import EcmpConfig
from nslab.experiments.ecmp.model import assign_links, chance, parse_tcpdump_ports, split_label
from nslab.experiments.ecmp.records import SCHEMA
from nslab.experiments.ecmp.report import distribution, post_format, write_report
from nslab.experiments.ecmp.study import EcmpStudy
from nslab.topologies.clos import clos, expected_routes
from tests.conftest import data

FRR_8_4 = FrrVersion("8.4.4", 8, 4)


def _frr_dirs(tmp_path):
    """A node's FRR run and config directories, both ``tmp_path`` (nothing is written)."""
    return NodeDir(str(tmp_path)), NodeDir(str(tmp_path))


def test_chance_of_splits():
    assert chance(3, 2) == {"2+1": 0.75, "3+0": 0.25}
    c = chance(4, 2)
    assert c["4+0"] == pytest.approx(2 / 16) and c["3+1"] == pytest.approx(8 / 16)
    assert sum(chance(3, 3).values()) == pytest.approx(1.0)


def test_split_labels():
    assert split_label([1, 2]) == "2+1" and split_label([0, 3]) == "3+0"


def test_tcpdump_parser_and_link_assignment_on_captured_output():
    text = open(data("ecmp_run", "raw", "p1-t0-captures.txt")).read()
    parts = text.split("### capture on ")[1:]
    caps = {p.splitlines()[0].strip(): parse_tcpdump_ports(p) for p in parts}
    assert set(caps) == {"server2-eth0", "server2-eth1"}
    links = assign_links(caps)
    assert len(links) == 3
    assert sorted(Counter(links.values()).values()) == [1, 2]  # that trial was a 2+1 split


def test_link_assignment_takes_the_majority():
    assert assign_links({"a": Counter({1: 50, 2: 1}), "b": Counter({2: 40})}) == {1: "a", 2: "b"}


def test_points_interleave_policies():
    assert EcmpStudy().points(EcmpConfig(trials=2)) == [{"policy": 0, "trial": 0}, {"policy": 1, "trial": 0},
                                             {"policy": 0, "trial": 1}, {"policy": 1, "trial": 1}]


@pytest.mark.parametrize("kwargs, message", [
    ({"policies": [0, 7]}, "policies.1: Input should be less than or equal to 3"),
    ({"policies": [1, 1]}, "policies: 1 is listed twice"),
    ({"trials": 0}, "trials: Input should be greater than or equal to 1"),
    ({"streams": 0}, "streams: Input should be greater than or equal to 1"),
    ({"spines": 0}, "spines: Input should be greater than or equal to 1"),
    ({"link_rate": "10 parsecs"}, "link_rate: bad rate"),
    ({"duration": 1}, "duration: Input should be greater than or equal to 2"),
])
def test_config_validation(kwargs, message):
    with pytest.raises(InputError, match=message):
        EcmpConfig.parse(kwargs)


@pytest.mark.parametrize("kwargs, message", [
    ({"spines": 0}, "--spines 0"), ({"servers": 0}, "out of range"), ({"servers": 300}, "address plan"),
    ({"servers": 2, "leaves": 2}, "not both"), ({"link_rate": "fast"}, "bad rate"),
])
def test_clos_bad_input(kwargs, message):
    with pytest.raises(InputError, match=message):
        clos(**kwargs)


def test_clos_shape_addresses_and_expected_routes():
    t = clos(spines=2, servers=2)
    assert sorted(t.nodes) == ["server1", "server2", "spine1", "spine2"]
    assert str(t.nodes["server1"].loopback) == "10.0.200.1/32"
    assert t.nodes["server2"].bgp.unnumbered == ["server2-eth0", "server2-eth1"]
    assert t.nodes["spine1"].bgp.asn == 65000
    assert expected_routes(t) == {"server1": {"10.0.200.2/32": 2}, "server2": {"10.0.200.1/32": 2}}
    big = clos(spines=4, leaves=3, hosts_per_leaf=2)
    assert "h3x2" in big.nodes and "tor1" in big.nodes
    assert expected_routes(big)["leaf1"]["10.1.3.0/24"] == 4


def test_bgp_config_renders_unnumbered_peers_ecmp_and_fast_timers(tmp_path):
    from nslab.frr.daemon import Bgpd, Zebra, private_tmp

    class FakeNode:
        name = "server1"
    bgp = clos().nodes["server1"].bgp
    ctx = {"node": "server1", "run_id": "nl0000", "interfaces": ["server1-eth0"], "bgp": bgp}
    text = Bgpd(FakeNode(), *_frr_dirs(tmp_path), ctx, FRR_8_4).render()
    assert "router bgp 65001" in text and "bgp router-id 10.0.200.1" in text
    assert " neighbor server1-eth0 interface peer-group fabric" in text
    assert " neighbor fabric remote-as external" in text
    assert "timers bgp 1 3" in text and "advertisement-interval 0" in text
    assert "coalesce-time 100" in text and "maximum-paths 64" in text
    assert "  network 10.0.200.1/32" in text
    z = Zebra(FakeNode(), *_frr_dirs(tmp_path), ctx, FRR_8_4)
    assert "interface server1-eth0" in z.render()
    wrapper = private_tmp([])
    argv = z.argv()
    assert argv[:len(wrapper)] == wrapper  # FRR's scratch dir kept off the host
    argv = argv[len(wrapper):]
    assert argv[:2] == ["/usr/lib/frr/zebra", "-f"] and "-P" in argv and "0" in argv
    assert ["--vty_socket", str(tmp_path)] == argv[argv.index("--vty_socket"):argv.index("--vty_socket") + 2]
    assert z.argv(dry_run=True)[-1] == "-C"


def test_passive_spines_render_passive_sessions_and_servers_stay_active(tmp_path):
    from nslab.frr.daemon import Bgpd

    class FakeNode:
        name = "n"
    t = clos(spines=2, servers=2, passive_spines=True)
    for node, passive in (("spine1", True), ("server1", False)):
        ctx = {"node": node, "run_id": "nl0000", "interfaces": [], "bgp": t.nodes[node].bgp}
        assert (" neighbor fabric passive" in Bgpd(FakeNode(), *_frr_dirs(tmp_path), ctx, FRR_8_4).render()) is passive
    ctx = {"node": "spine1", "run_id": "nl0000", "interfaces": [], "bgp": clos().nodes["spine1"].bgp}
    assert "passive" not in Bgpd(FakeNode(), *_frr_dirs(tmp_path), ctx, FRR_8_4).render()  # auto: off at 2x2
    for spines, servers, passive in ((8, 31, False), (8, 32, True), (16, 64, True)):
        assert clos(spines=spines, servers=servers).nodes["spine1"].bgp.passive is passive
    assert clos(spines=16, servers=64, passive_spines="false").nodes["spine1"].bgp.passive is False
    assert clos(spines=2, servers=2, passive_spines="true").nodes["spine1"].bgp.passive is True


@pytest.mark.parametrize("value", ["maybe", ""])
def test_passive_spines_other_than_true_false_auto_are_refused(value):
    with pytest.raises(InputError, match="--passive-spines"):
        clos(spines=2, servers=2, passive_spines=value)


def test_the_clos_update_delay_renders_and_zero_turns_it_off(tmp_path):
    from nslab.frr.daemon import Bgpd

    class FakeNode:
        name = "n"

    def render(t, node):
        ctx = {"node": node, "run_id": "nl0000", "interfaces": [], "bgp": t.nodes[node].bgp}
        return Bgpd(FakeNode(), *_frr_dirs(tmp_path), ctx, FRR_8_4).render()
    t = clos(spines=2, servers=2)
    assert " update-delay 10\n" in render(t, "spine1") and " update-delay 10\n" in render(t, "server2")
    assert "update-delay" not in render(clos(spines=2, servers=2, update_delay=0), "spine1")
    assert " update-delay 3\n" in render(clos(update_delay="3"), "server1")
    with pytest.raises(InputError, match="--update-delay"):
        clos(update_delay=3601)


def test_unnumbered_pairs_give_each_session_end_its_peer():
    from nslab.frr.router import unnumbered_pairs
    t = clos(spines=2, servers=3)
    pairs = unnumbered_pairs(t)
    assert len(pairs) == 2 * 2 * 3  # both ends of every fabric link
    assert ("server3", "server3-eth1", "spine2", "spine2-eth2") in pairs
    assert ("spine2", "spine2-eth2", "server3", "server3-eth1") in pairs
    # a leaf's link to its rack switch carries no session
    assert not any("tor" in p[2] or p[1].endswith("-h")
                   for p in unnumbered_pairs(clos(spines=2, leaves=2, hosts_per_leaf=1)))


def test_link_locals_on_captured_ip_json():
    from nslab.frr.router import link_locals
    with open(data("ip", "addr-linklocal.json")) as f:
        got = link_locals(f.read())
    # lo has no link-local address; the veth's comes with its MAC
    assert got == {"r1-eth0": ("1e:af:e9:24:43:ac", "fe80::1caf:e9ff:fe24:43ac")}
    # what the kernel prints is checked before it reaches an ip -batch line
    bad = '[{"ifname": "x", "address": "1e:af:e9:24:43:ac\\nneigh flush all", "addr_info": ' \
          '[{"family": "inet6", "local": "fe80::1"}]}, {"ifname": "y", "address": ' \
          '"1e:af:e9:24:43:ad", "addr_info": [{"family": "inet6", "local": "2001:db8::1"}]}]'
    assert link_locals(bad) == {}
    assert link_locals("") == {}


def test_report_redraws_from_a_captured_run(tmp_path):
    run = tmp_path / "ecmp" / "nle9b7"
    shutil.copytree(data("ecmp_run"), run)
    rep = write_report(str(run))
    text = open(rep.files["md"]).read()
    assert "| 0 | 3+0 | 3 | 100 % | 25 % |" in text
    prov = json.load(open(run / "provenance.json"))  # a run from before the Study API:
    assert f"BGP converged {prov['convergence_s']:.2f} s" in text  # kept at its top level
    assert "published" in text and os.path.getsize(rep.files["plot_png"]) > 0
    recs = SCHEMA.load(str(run))
    assert distribution(recs)[0] == Counter({"3+0": 3})
    assert "[SUM]" in post_format(recs[0]) and "via server2-eth" in post_format(recs[0])
