import pytest

from nslab.errors import InputError
from nslab.ovs.toolbelt import ETHTOOL_HELP, check_bridge, parse_dpid
from nslab.ovs.uplink import parse_ethtool, restore_argv
from tests.conftest import data


@pytest.mark.parametrize("text, value", [("1", 1), ("0x10", 16), ("0000000000000001", 1),
                                         ('"00000000000000ff"', 255)])
def test_dpid_forms(text, value):
    assert parse_dpid(text) == value


@pytest.mark.parametrize("text", ["x", "-1", str(2 ** 64)])
def test_bad_dpid(text):
    with pytest.raises(InputError, match="bad dpid"):
        parse_dpid(text)


def test_bridge_names_are_checked():
    assert check_bridge("br0") == "br0"
    with pytest.raises(InputError):
        check_bridge("br0;rm -rf")


def test_ethtool_help_has_the_advertise_table():
    assert "0x020   1000 Full" in ETHTOOL_HELP and "0x03F   Auto" in ETHTOOL_HELP


def test_parse_ethtool_on_captured_veth_output():
    st = parse_ethtool(open(data("ethtool", "veth.txt")).read())
    assert st["speed"] == "10000Mb/s" and st["duplex"] == "Full"


def test_restore_commands_undo_the_attachment_first():
    snap = {"iface": "eth1", "mtu": 1400, "up": True, "addrs": ["192.168.77.1/24"],
            "routes": [{"dst": "198.51.100.0/24", "gateway": "192.168.77.254"}],
            "offloads": {"tx-checksumming": "on"}}
    argv = restore_argv(snap, "nl0001-b1")
    assert argv[0] == ["ovs-vsctl", "--timeout=10", "--if-exists", "del-port", "nl0001-b1", "eth1"]
    assert ["ip", "addr", "replace", "192.168.77.1/24", "dev", "eth1"] in argv
    assert ["ip", "route", "replace", "198.51.100.0/24", "via", "192.168.77.254", "dev", "eth1"] in argv
    assert argv[-1] == ["ethtool", "-K", "eth1", "tx", "on"]


@pytest.mark.parametrize("argv", [
    ["add-br", "br0", "--", "set", "Bridge", "br0", "stp_enable=true"],
    ["--", "--if-exists", "del-br", "br0"],
    ["--version"],
])
def test_vsctl_and_ofctl_pass_every_argument_through(monkeypatch, argv):
    from click.testing import CliRunner

    from nslab.ovs import cli as ovs_cli
    calls = []
    monkeypatch.setattr(ovs_cli, "_need_ovs", lambda: None)
    monkeypatch.setattr(ovs_cli.subprocess, "call", lambda a: calls.append(a) or 0)
    for name, tool in (("vsctl", "ovs-vsctl"), ("ofctl", "ovs-ofctl")):
        res = CliRunner().invoke(ovs_cli.ovs_group, [name, *argv])
        assert res.exit_code == 0, res.output
        assert calls.pop() == [tool, *argv]  # "--" included, nothing consumed by click
