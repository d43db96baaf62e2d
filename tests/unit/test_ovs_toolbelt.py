import os

import pytest

from nslab.runtime import statefile
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


def test_the_advertise_table_matches_the_kernels_link_mode_bits():
    """Every mask of `nslab ovs ethtool-help` is the kernel's own bit for that mode
    (read from linux/ethtool.h), and Auto is the union of the 10/100/1000 modes."""
    import re
    header = "/usr/include/linux/ethtool.h"
    if not os.path.exists(header):
        pytest.skip("no kernel headers (linux-libc-dev) here")
    found = re.findall(r"ETHTOOL_LINK_MODE_(\d+)base(T|X)_(Half|Full)_BIT\s*=\s*(\d+)",
                       open(header).read())
    bits = {}
    for sp, _, du, b in found:  # the legacy 32-bit mask holds the lowest bit of each mode
        bits[(sp, du)] = min(int(b), bits.get((sp, du), 99))
    rows = re.findall(r"^\s+0x([0-9A-Fa-f]+)\s+(\d+|Auto)\s*(Half|Full)?", ETHTOOL_HELP, re.M)
    assert len(rows) == 9
    for mask, speed, duplex in rows:
        if speed == "Auto":
            assert int(mask, 16) == sum(1 << bits[(s, d)] for s in ("10", "100", "1000")
                                        for d in ("Half", "Full"))
        else:
            assert int(mask, 16) == 1 << bits[(speed, duplex)], (mask, speed, duplex)


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
    """The OVS start mark in a scratch dir; this test process plays ovs-vswitchd
    (its pidfile is written), ovsdb-server is not running."""
    import os
    from nslab.runtime.proc import process_start_time
    from nslab.ovs import daemon
    monkeypatch.setattr(daemon, "_MARK", str(tmp_path / "ovs-started"))
    pidfiles = {"ovsdb-server": str(tmp_path / "ovsdb-server.pid"),
                "ovs-vswitchd": str(tmp_path / "ovs-vswitchd.pid")}
    monkeypatch.setattr(daemon, "PIDFILES", pidfiles)
    with open(pidfiles["ovs-vswitchd"], "w") as f:
        f.write(f"{os.getpid()}\n")
    me = [os.getpid(), process_start_time(os.getpid())]
    return daemon, pidfiles, me


def test_a_complete_mark_is_believed_only_for_the_daemons_it_names(mark):
    import os
    daemon, pidfiles, me = mark
    assert not daemon.started_by_nslab()  # no mark
    statefile.write(daemon._MARK, {"clock": daemon.CLOCK, "since": 0, "daemons": {"ovs-vswitchd": me}})
    assert daemon.started_by_nslab()
    # same pid, another process (restarted by someone else): not ours any more
    statefile.write(daemon._MARK, {"clock": daemon.CLOCK, "since": 0, "daemons": {"ovs-vswitchd": [me[0], me[1] + 1]}})
    assert not daemon.started_by_nslab()
    statefile.write(daemon._MARK, {"clock": daemon.CLOCK, "since": 0, "daemons": {"ovs-vswitchd": me}})
    os.unlink(pidfiles["ovs-vswitchd"])  # daemons gone
    assert not daemon.started_by_nslab()


def test_an_intent_mark_owns_the_daemons_started_after_it(mark):
    # A lab killed between starting ovs-ctl and recording the daemons left only
    # its intent: daemons that started at or after its clock are its own.
    daemon, _, me = mark
    statefile.write(daemon._MARK, {"clock": daemon.CLOCK, "since": me[1]})
    assert daemon.started_by_nslab()
    statefile.write(daemon._MARK, {"clock": daemon.CLOCK, "since": me[1] + 1})
    assert not daemon.started_by_nslab()


def test_a_mark_from_another_clock_is_not_believed(mark):
    # Marks written before start times came from psutil held clock ticks since
    # boot: compared with today's clock they would claim any daemon. Not ours.
    daemon, _, me = mark
    statefile.write(daemon._MARK, {"since": 0, "daemons": {"ovs-vswitchd": me}})
    assert not daemon.started_by_nslab()
    statefile.write(daemon._MARK, {"clock": daemon.CLOCK, "since": 0,
                                   "daemons": {"ovs-vswitchd": me}})
    assert daemon.started_by_nslab()


def test_the_intent_clock_and_process_start_times_compare_like_with_like():
    import subprocess
    from nslab.runtime.proc import boot_clock, process_start_time
    for _ in range(5):
        before = boot_clock()
        child = subprocess.Popen(["sleep", "5"])
        try:
            start = process_start_time(child.pid)
            after = boot_clock()
            # start times have a 10 ms resolution (clock ticks): the child started
            # between the two readings, give or take one tick.
            assert before - 0.011 <= start <= after + 0.011, (before, start, after)
        finally:
            child.kill()
            child.wait()


def test_a_running_ovs_ctl_of_ours_is_waited_for_before_judging(mark):
    import subprocess
    from nslab.runtime.proc import pid_running, process_start_time
    daemon, _, me = mark
    ctl = subprocess.Popen(["sleep", "0.5"])
    statefile.write(daemon._MARK, {"clock": daemon.CLOCK, "since": me[1], "ctl": [ctl.pid, process_start_time(ctl.pid)]})
    try:
        assert daemon.started_by_nslab(wait=30)
        assert not pid_running(ctl.pid)  # it finished first (a zombie until reaped)
    finally:
        ctl.wait()


def test_a_mark_left_half_renamed_is_read_and_dropped_whole(mark):
    import json
    import os
    daemon, _, me = mark
    statefile.write(daemon._MARK, {"clock": daemon.CLOCK, "since": 0, "daemons": {"ovs-vswitchd": [me[0], me[1] + 1]}})
    with open(daemon._MARK + ".tmp", "w") as f:
        json.dump({"clock": daemon.CLOCK, "since": 0, "daemons": {"ovs-vswitchd": me}}, f)
    assert daemon.started_by_nslab()  # the newer, complete .tmp wins
    statefile.remove(daemon._MARK)
    assert not os.path.exists(daemon._MARK) and not os.path.exists(daemon._MARK + ".tmp")


def test_ours_with_a_foreign_bridge_stay_up_and_stay_marked(mark, monkeypatch):
    import os
    from nslab.ovs import bridge
    daemon, _, me = mark
    calls = []
    monkeypatch.setattr(daemon, "run", lambda argv, **kw: calls.append(argv))
    statefile.write(daemon._MARK, {"clock": daemon.CLOCK, "since": 0, "daemons": {"ovs-vswitchd": me}})
    monkeypatch.setattr(bridge, "foreign_bridges", lambda: ["users-br"])
    assert daemon.release([]) is False and calls == []
    assert daemon.started_by_nslab()  # still ours: stopped once the user's bridge is gone
    monkeypatch.setattr(bridge, "foreign_bridges", lambda: [])
    assert daemon.release(["nl0001"]) is False and calls == []  # a live run still uses them
    assert daemon.release([]) is True and calls == [[daemon.OVS_CTL, "stop"]]
    assert not os.path.exists(daemon._MARK)


def test_a_stale_mark_stops_nothing_and_goes(mark, monkeypatch):
    import os
    daemon, _, _ = mark
    calls = []
    monkeypatch.setattr(daemon, "run", lambda argv, **kw: calls.append(argv))
    statefile.write(daemon._MARK, {"clock": daemon.CLOCK, "since": 0, "daemons": {"ovs-vswitchd": [1, 1]}})
    assert daemon.stop_if_ours() is False and calls == []
    assert not os.path.exists(daemon._MARK)


def test_daemons_the_user_started_outlive_every_lab(mark, monkeypatch):
    """`nslab ovs start` owns the daemons: a lab ending (or `nslab clean`) leaves
    them up; `nslab ovs stop` stops them. A lab's own are stopped by the last lab."""
    import os
    from nslab.ovs import bridge
    daemon, _, me = mark
    calls = []
    monkeypatch.setattr(daemon, "run", lambda argv, **kw: calls.append(argv))
    monkeypatch.setattr(bridge, "foreign_bridges", lambda: [])
    statefile.write(daemon._MARK, {"clock": daemon.CLOCK, "since": 0, "owner": daemon.USER,
                                   "daemons": {"ovs-vswitchd": me}})
    assert daemon.owner() == daemon.USER
    assert daemon.release([]) is False and calls == []
    assert daemon.stop_if_ours() is True and calls == [[daemon.OVS_CTL, "stop"]]
    assert not os.path.exists(daemon._MARK)
    calls.clear()
    # a lab's (a mark of an older nslab, with no owner, counts as a lab's)
    statefile.write(daemon._MARK, {"clock": daemon.CLOCK, "since": 0,
                                   "daemons": {"ovs-vswitchd": me}})
    assert daemon.owner() == daemon.LAB
    assert daemon.release([]) is True and calls == [[daemon.OVS_CTL, "stop"]]


def test_ovs_start_takes_over_daemons_a_lab_started(mark, monkeypatch):
    daemon, _, me = mark
    monkeypatch.setattr("nslab.ovs.probes.ovs_running", lambda: True)
    monkeypatch.setattr(daemon.os.path, "exists", lambda p: True)
    statefile.write(daemon._MARK, {"clock": daemon.CLOCK, "since": 0, "owner": daemon.LAB,
                                   "daemons": {"ovs-vswitchd": me}})
    assert daemon.ensure_running(daemon.LAB) is False and daemon.owner() == daemon.LAB
    assert daemon.ensure_running(daemon.USER) is False and daemon.owner() == daemon.USER
    # daemons nslab did not start are nobody's to take over
    statefile.remove(daemon._MARK)
    assert daemon.ensure_running(daemon.USER) is False and daemon.owner() is None
