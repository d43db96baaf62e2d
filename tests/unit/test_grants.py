"""A file may ask for a change to this machine's network (an uplink, force, a
controller off the loopback); only the command line applies it. Checked
before anything is built, so no root is needed here."""
import pytest

from nslab.cmdline.cli import main
from nslab.errors import TopologyError
from nslab.runtime.grants import HostGrants, check, loopback_controller, requests
from nslab.runtime.lab import Lab
from nslab.model.topo import Topology
from nslab.run.topoload import grants_from_options

EVIL = """name: evil
switch: ovs
nodes:
  h1: {ip: 10.0.0.1/24}
  s1:
    kind: switch
    uplink: eth9
    force: true
    controller: tcp:203.0.113.9:6653
links:
  - [h1, s1]
"""


@pytest.fixture
def evil(tmp_path):
    path = tmp_path / "evil.yaml"
    path.write_text(EVIL)
    return str(path)


def test_every_request_of_a_file_is_found(evil):
    kinds = {(loc, kind, value) for loc, kind, value in requests(Topology.from_yaml(evil))}
    assert kinds == {(("nodes", "s1", "uplink"), "uplink", "eth9"),
                     (("nodes", "s1", "force"), "force", True),
                     (("nodes", "s1", "controller"), "controller", "tcp:203.0.113.9:6653")}


@pytest.mark.parametrize("target,local", [
    ("tcp:127.0.0.1:6653", True), ("ptcp:127.0.0.1", True), ("tcp:[::1]:6653", True),
    ("tcp:203.0.113.9:6653", False), ("ptcp:0.0.0.0:6653", False), ("ssl:[2001:db8::1]", False),
])
def test_loopback_controllers_need_no_grant(target, local):
    assert loopback_controller(target) is local


def test_a_file_alone_changes_nothing_and_the_error_names_file_line_field_and_flag(evil):
    lab = Lab(Topology.from_yaml(evil), run_id="nl0001", host_grants=HostGrants())
    with pytest.raises(TopologyError) as exc:
        lab.start()  # refused before root is even checked: nothing was built
    msg = str(exc.value)
    assert msg.startswith(f"{evil}:7: nodes.s1.uplink:") and "--uplink eth9" in msg
    assert "\n" not in msg
    assert not lab._started


def test_each_grant_opens_only_what_it_names(evil):
    topo = Topology.from_yaml(evil)
    with pytest.raises(TopologyError, match=r":8: nodes.s1.force: .*--force"):
        check(topo, HostGrants.of(["eth9"]))
    with pytest.raises(TopologyError, match=r":9: nodes.s1.controller: .*--allow-controller "
                                            r"tcp:203.0.113.9:6653"):
        check(topo, HostGrants.of(["eth9"], force=True))
    with pytest.raises(TopologyError, match="--uplink eth9"):
        check(topo, HostGrants.of(["eth1"], ["tcp:203.0.113.9:6653"], True))
    check(topo, HostGrants.of(["eth9"], ["tcp:203.0.113.9:6653"], True))  # all named: allowed


def test_python_code_that_builds_its_own_topology_is_trusted():
    t = Topology(name="mine", switch_type="ovs")
    t.add_host("h1")
    t.add_switch("s1", uplink="eth9")
    t.add_link("h1", "s1")
    check(t.validate(), None)
    with pytest.raises(TopologyError, match="nodes.s1.uplink"):
        check(t.validate(), HostGrants())


def test_topo_up_options_grant_for_a_file_and_stay_options_for_a_ready_topology():
    opts = {"uplink": "eth9", "force": True, "allow_controller": "tcp:192.0.2.1:6653"}
    g = grants_from_options("x.yaml", opts)
    assert g == HostGrants.of(["eth9"], ["tcp:192.0.2.1:6653"], True) and opts == {}
    opts = {"k": "1", "switch": "ovs", "uplink": "eth9"}
    g = grants_from_options("single", opts)
    assert g.uplinks == {"eth9"} and not g.force and opts["uplink"] == "eth9"


def test_the_cli_refuses_a_files_uplink_in_one_line(evil, tmp_path, capsys):
    rc = main(["--results", str(tmp_path), "topo", "up", evil])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "nodes.s1.uplink" in lines[0] and "--uplink eth9" in lines[0], err
