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


@pytest.fixture
def mark(tmp_path, monkeypatch):
    """The OVS start mark in a scratch dir, and a stand-in vswitchd pidfile."""
    import os
    from nslab.ovs import daemon
    monkeypatch.setattr(daemon, "_MARK", str(tmp_path / "ovs-started"))
    monkeypatch.setattr(daemon, "STATE_DIR", str(tmp_path))
    pidfile = tmp_path / "ovs-vswitchd.pid"
    monkeypatch.setattr(daemon, "VSWITCHD_PIDFILE", str(pidfile))
    pidfile.write_text(f"{os.getpid()}\n")  # this process plays ovs-vswitchd
    return daemon, pidfile


def _write_mark(daemon, vswitchd):
    import json
    with open(daemon._MARK, "w") as f:
        json.dump({"started_at": 0, "vswitchd": vswitchd}, f)


def test_the_start_mark_is_believed_only_for_the_daemon_it_names(mark):
    import os
    from nslab.clean import process_start_time
    daemon, pidfile = mark
    me = [os.getpid(), process_start_time(os.getpid())]
    assert not daemon.started_by_nslab()  # no mark
    _write_mark(daemon, me)
    assert daemon.started_by_nslab()
    _write_mark(daemon, [me[0], me[1] + 1])  # same pid, another process: restarted by someone
    assert not daemon.started_by_nslab()
    _write_mark(daemon, me)
    pidfile.unlink()  # daemons gone
    assert not daemon.started_by_nslab()


def test_ours_with_a_foreign_bridge_stay_up_and_stay_marked(mark, monkeypatch):
    import os
    from nslab.clean import process_start_time
    from nslab.ovs import bridge
    daemon, _ = mark
    calls = []
    monkeypatch.setattr(daemon, "run", lambda argv, **kw: calls.append(argv))
    _write_mark(daemon, [os.getpid(), process_start_time(os.getpid())])
    monkeypatch.setattr(bridge, "foreign_bridges", lambda: ["users-br"])
    assert daemon.release([]) is False and calls == []
    assert daemon.started_by_nslab()  # still ours: stopped once the user's bridge is gone
    monkeypatch.setattr(bridge, "foreign_bridges", lambda: [])
    assert daemon.release(["nl0001"]) is False and calls == []  # a live run still uses them
    assert daemon.release([]) is True and calls == [[daemon.OVS_CTL, "stop"]]
    assert not os.path.exists(daemon._MARK)


def test_a_stale_mark_stops_nothing_and_goes(mark, monkeypatch):
    import os
    daemon, _ = mark
    calls = []
    monkeypatch.setattr(daemon, "run", lambda argv, **kw: calls.append(argv))
    _write_mark(daemon, [1, 1])
    assert daemon.stop_if_ours() is False and calls == []
    assert not os.path.exists(daemon._MARK)
