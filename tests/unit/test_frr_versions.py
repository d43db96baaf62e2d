"""One FRR layer for FRR 8.4 (Debian 12) and 10.x (Debian 13): the configuration
rendered for each from the same topology, checked against that version's own
dry-run verdicts, captured by scripts/capture-frr-dryruns.py (8.4.4 on a
Debian 12 host, 10.3 in a Debian 13 root) under tests/data/frr/<version>/."""
import json
import os
import re

import pytest

from nslab.frr.daemon import DaemonCheckError, check_result, daemon_kinds, node_configs
from nslab.frr.rundir import NodeDir
from nslab.frr.version import FrrVersion, parse_version
from nslab.topologies.clos import clos
from tests.conftest import data

VERSIONS = ["8.4.4", "10.3"]
#: As in scripts/capture-frr-dryruns.py: a 2x2 clos with BFD, update-delay, passive spines.
TOPOLOGY = dict(spines=2, servers=2, bfd=True, passive_spines=True, update_delay=10)
NODES = ("spine1", "server1")


def captured(version):
    with open(data("frr", version, "checks.json")) as f:
        return json.load(f)


def version_of(version):
    with open(data("frr", version, "version.txt")) as f:
        return parse_version(f.read())


def context(topo, node):
    return {"node": node, "run_id": "nl0000", "interfaces": topo.node_interfaces()[node],
            "bgp": topo.nodes[node].bgp}


class _Node:
    def __init__(self, name):
        self.name = name


def test_versions_and_directories_are_read_from_zebra_version_output():
    old, new = version_of("8.4.4"), version_of("10.3")
    assert (old.text, old.major, old.minor, old.mgmtd, old.bfdctl) == ("8.4.4", 8, 4, False, True)
    assert (new.text, new.major, new.minor, new.mgmtd, new.bfdctl) == ("10.3", 10, 3, True, False)
    # Debian 13 configures --sysconfdir=/etc --localstatedir=/var --runstatedir=/run
    assert (new.sysconfdir, new.runstatedir, new.libstatedir) == ("/etc/frr", "/run/frr",
                                                                  "/var/lib/frr")
    # Debian 12 passes FRR-specific paths (--localstatedir=/var/run/frr --sysconfdir=/etc/frr)
    assert (old.sysconfdir, old.runstatedir) == ("/etc/frr", "/var/run/frr")
    assert parse_version("zebra version 10.4-dev\n").text == "10.4-dev"
    assert parse_version("zebra version 10.1.2\n").bfdctl is True
    with pytest.raises(Exception, match="cannot read FRR's version"):
        parse_version("zebra: command not found")


@pytest.mark.parametrize("version", VERSIONS)
def test_the_configuration_rendered_for_each_version_is_the_one_it_accepted(version):
    """The files FRR's dry run was captured on are exactly what nslab renders
    today for that version, and each was accepted (exit 0, no rejected line)."""
    v = version_of(version)
    topo = clos(**TOPOLOGY)
    cap = captured(version)
    assert cap["frr"] == v.text
    accepted = [c for c in cap["checks"] if c["case"] == "accepted"]
    for node in NODES:
        files = node_configs(context(topo, node), v)
        assert sorted(files) == sorted(os.listdir(data("frr", version, node)))
        for name, text in files.items():
            with open(data("frr", version, node, name)) as f:
                assert text == f.read(), f"{version} {node}/{name} differs from the capture"
        checked = {c["daemon"] for c in accepted if c["node"] == node}
        assert checked == {k.NAME for k in daemon_kinds(True, v)}
    for c in accepted:
        assert c["returncode"] == 0
        check_result(c["node"], c["daemon"], c["file"], c["returncode"], c["stdout"], c["stderr"])


@pytest.mark.parametrize("version", VERSIONS)
def test_the_captured_dry_runs_are_the_command_lines_nslab_runs(version):
    v = version_of(version)
    topo = clos(**TOPOLOGY)
    for c in captured(version)["checks"]:
        kind = next(k for k in daemon_kinds(True, v) if k.NAME == c["daemon"])
        d = kind(_Node(c["node"]), NodeDir(f"/{{run}}/{c['node']}"),
                 NodeDir(f"/{{conf}}/{c['node']}"), context(topo, c["node"]), v)
        argv = [a.replace("/{run}", "{run}").replace("/{conf}", "{conf}")
                for a in d.argv(dry_run=True)]
        if v.mgmtd:  # the prologue's uid and gid are this machine's frr
            argv[10:12] = ["{uid}", "{gid}"]
        assert argv == c["argv"]


def test_zebra_of_frr_10_rejects_the_per_daemon_file_of_8_4_naming_node_daemon_and_file():
    """Issue 32's failure, as FRR 10.3 reports it: interface configuration
    belongs to mgmtd."""
    c = next(c for c in captured("10.3")["checks"] if c["case"] == "zebra-conf-of-frr-8.4")
    assert "interface spine1-eth0" in c["config"]
    with pytest.raises(DaemonCheckError, match=r"^spine1: zebra rejected /x/zebra.conf: No such "
                       r"command on config line 9: interface spine1-eth0$"):
        check_result("spine1", "zebra", "/x/zebra.conf", c["returncode"], c["stdout"], c["stderr"])
    assert c["returncode"] == 0  # -C exits 0 all the same: the log line is what counts


@pytest.mark.parametrize("version", VERSIONS)
def test_a_rejected_bgpd_config_raises_naming_node_daemon_file_and_line(version):
    c = next(c for c in captured(version)["checks"] if c["case"] == "bgpd-network-not-a-prefix")
    with pytest.raises(DaemonCheckError, match=r"^server1: bgpd rejected /c/bgpd.conf: No such "
                       r"command on config line 23:\s+network not-a-prefix$"):
        check_result("server1", "bgpd", "/c/bgpd.conf", c["returncode"], c["stdout"], c["stderr"])


def test_mgmtd_config_is_checked_by_vtysh_and_a_bad_line_is_named():
    c = next(c for c in captured("10.3")["checks"] if c["case"] == "mgmtd-ra-interval-out-of-range")
    assert c["argv"][-4:] == ["vtysh", "--dryrun", "-f", "{conf}/spine1/mgmtd.conf"]
    assert c["returncode"] != 0
    with pytest.raises(DaemonCheckError, match=r"^spine1: mgmtd rejected /c/mgmtd.conf: Unknown "
                       r"command: ipv6 nd ra-interval 99999 on config line 15$"):
        check_result("spine1", "mgmtd", "/c/mgmtd.conf", c["returncode"], c["stdout"], c["stderr"])


def test_a_check_that_fails_without_a_config_line_says_what_frr_said():
    with pytest.raises(DaemonCheckError, match=r"n1: bfdd rejected f: .*unrecognized option"):
        check_result("n1", "bfdd", "f", 1, "", "/usr/lib/frr/bfdd: unrecognized option '--x'\n")
    with pytest.raises(DaemonCheckError, match=r"n1: bfdd rejected f: exit 139"):
        check_result("n1", "bfdd", "f", 139, "", "")
    check_result("n1", "zebra", "f", 0, "", "ZEBRA: Disabling MPLS support (no kernel support)\n")


def test_same_topology_same_routing_on_both_versions_only_interfaces_move_to_mgmtd():
    topo = clos(**TOPOLOGY)
    old, new = version_of("8.4.4"), version_of("10.3")
    for node in NODES:
        a, b = node_configs(context(topo, node), old), node_configs(context(topo, node), new)
        assert a["bgpd.conf"] == b["bgpd.conf"] and a["bfdd.conf"] == b["bfdd.conf"]
        blocks = re.findall(r"^interface \S+\n(?: .*\n)+!\n", a["zebra.conf"], re.M)
        assert len(blocks) == len(topo.node_interfaces()[node]) == 2
        assert not re.search(r"^interface", b["zebra.conf"], re.M)
        assert all(block in b["mgmtd.conf"] for block in blocks)
        assert "mgmtd.conf" not in a and "vtysh.conf" in b
    # what the spines and servers each keep: passive sessions, BFD profile, update-delay
    spine = node_configs(context(topo, "spine1"), new)["bgpd.conf"]
    assert " neighbor fabric passive" in spine and " update-delay 10" in spine
    assert " neighbor fabric bfd profile nslab" in spine
    assert " neighbor fabric passive" not in node_configs(context(topo, "server1"), new)["bgpd.conf"]


@pytest.mark.parametrize("version,names", [
    ("8.4.4", ["zebra", "bfdd", "bgpd"]), ("10.3", ["mgmtd", "zebra", "bfdd", "bgpd"])])
def test_start_order_per_version(version, names):
    assert [k.NAME for k in daemon_kinds(True, version_of(version))] == names
    assert "bfdd" not in [k.NAME for k in daemon_kinds(False, version_of(version))]


def test_mgmtd_gets_no_f_and_no_C_and_every_daemon_sees_its_node_as_frr_s_directories():  # noqa: N802
    v = FrrVersion("10.3", 10, 3, "/etc/frr", "/run/frr", "/var/lib/frr")
    topo = clos(**TOPOLOGY)
    kinds = {k.NAME: k for k in daemon_kinds(True, v)}
    m = kinds["mgmtd"](_Node("spine1"), NodeDir("/r/spine1"), NodeDir("/c/spine1"),
                       context(topo, "spine1"), v)
    argv = m.argv()
    assert argv[4:10] == ["mgmtd", "/r/spine1", "/run/frr", "/c/spine1", "/etc/frr", "/var/lib/frr"]
    daemon = argv[12:]
    assert daemon[0] == "/usr/lib/frr/mgmtd" and "-f" not in daemon and "-C" not in daemon
    assert ["--vty_socket", "/r/spine1"] == daemon[daemon.index("--vty_socket"):][:2]
    b = kinds["bfdd"](_Node("spine1"), NodeDir("/r/spine1"), NodeDir("/c/spine1"),
                      context(topo, "spine1"), v)
    assert "--bfdctl" not in b.argv() and "--bfdctl" not in b.argv(dry_run=True)
    old = FrrVersion("10.1", 10, 1)
    b = kinds["bfdd"](_Node("spine1"), NodeDir("/r/spine1"), NodeDir("/c/spine1"),
                      context(topo, "spine1"), old)
    assert b.argv()[-2:] == ["--bfdctl", "/r/spine1/bfdd.sock"]
