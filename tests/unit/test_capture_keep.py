"""What `nslab capture` keeps by default (a snap length and a size cap it
says in its first line), and `--as-wire`: the offloads turned off on both ends
of a captured link, recorded so that `nslab clean` puts them back after a
crash. No root: ethtool is replaced, nothing is built or captured."""
import os
import subprocess
import sys

import pytest

from nslab.errors import InputError
from nslab.runtime import clean, offloads, restore
from nslab.runtime.proc import Result, process_start_time
from nslab.traffic.capture import Keep, dumpcap_argv, keep_of, resolve, parse_target, wire_ends
from tests.conftest import data
from tests.unit.test_capture import fake_lab

NSLAB = os.path.join(os.path.dirname(sys.executable), "nslab")


# -- what a capture keeps ---------------------------------------------------------------------
def test_by_default_a_capture_keeps_every_header_and_stops_at_100_mib():
    keep = keep_of()
    assert keep == Keep(256, 100 * 1024 ** 2)
    assert keep.describe() == "256 bytes of each packet, at most 100.0 MiB"
    argv = dumpcap_argv(["h1-eth0"], "-", snaplen=keep.snaplen, max_bytes=keep.max_bytes)
    assert argv[argv.index("-s") + 1] == "256"
    assert argv[-4:] == ["-a", "filesize:104857", "-w", "-"]


@pytest.mark.parametrize("args,keep,says", [
    ({"full": True}, Keep(None, 100 * 1024 ** 2), "whole packets, at most 100.0 MiB"),
    ({"snaplen": 96}, Keep(96, 100 * 1024 ** 2), "96 bytes of each packet, at most 100.0 MiB"),
    ({"max_size": "2G"}, Keep(256, 2 * 1024 ** 3), "256 bytes of each packet, at most 2.0 GiB"),
    ({"max_size": "none", "full": True}, Keep(None, None), "whole packets, no size cap"),
    ({"max_size": "1500"}, Keep(256, 1500), "256 bytes of each packet, at most 1.5 KiB"),
])
def test_the_user_raises_or_lowers_what_is_kept(args, keep, says):
    got = keep_of(**args)
    assert got == keep and got.describe() == says
    argv = dumpcap_argv(["h1-eth0"], "-", snaplen=got.snaplen, max_bytes=got.max_bytes)
    assert ("-s" in argv) == (keep.snaplen is not None)
    assert any(a.startswith("filesize:") for a in argv) == (keep.max_bytes is not None)


@pytest.mark.parametrize("args,says", [
    ({"full": True, "snaplen": 128}, "--full keeps whole packets, --snaplen N the first"),
    ({"max_size": "lots"}, "--max-size lots: a size in bytes"),
    ({"max_size": "0"}, "--max-size 0: a size in bytes"),
    ({"max_size": "-5M"}, "--max-size -5M: a size in bytes"),
])
def test_a_contradiction_or_a_bad_size_is_one_line(args, says):
    with pytest.raises(InputError, match="^" + says.replace("(", "\\(")):
        keep_of(**args)


def test_one_file_stops_at_dumpcaps_2_gib_and_a_ring_keeps_within_the_cap():
    with pytest.raises(InputError, match="dumpcap stops a file at 2.0 GiB at most; use a ring"):
        keep_of(max_size="3G")
    assert keep_of(max_size="3G", ring=True).max_bytes == 3 * 1024 ** 3
    # a study's capture past it (--limit capture=3G) asks dumpcap for its most
    assert dumpcap_argv(["x"], "-", max_bytes=3 * 1024 ** 3)[-3] == "filesize:2147483"
    # a ring bounded by -c or --duration only: stopped after as many files as fit
    argv = dumpcap_argv(["x"], "/root/c/x.pcapng", ring_mb=10, duration=60,
                        max_bytes=100 * 1024 ** 2)
    assert argv[-6:] == ["-b", "filesize:10000", "-a", "files:10", "-w", "/root/c/x.pcapng"]
    assert not any(a.startswith("filesize:") for a in argv[:argv.index("-b")])
    # -W files that fit: the ring as asked; more than fit, or one file too big: one line
    ring = dumpcap_argv(["x"], "/root/c/x.pcapng", ring_mb=10, ring_files=5,
                        max_bytes=100 * 1024 ** 2)
    assert "-a" not in ring and ring[-6:-2] == ["-b", "filesize:10000", "-b", "files:5"]
    with pytest.raises(InputError, match="-C 10 -W 20: the ring keeps up to 190.7 MiB, over "
                                         "--max-size 100.0 MiB"):
        dumpcap_argv(["x"], "/root/c/x.pcapng", ring_mb=10, ring_files=20,
                     max_bytes=100 * 1024 ** 2)
    with pytest.raises(InputError, match="-C 200: one file of the ring"):
        dumpcap_argv(["x"], "/root/c/x.pcapng", ring_mb=200, count=5, max_bytes=100 * 1024 ** 2)
    # a ring of 3 GiB in all is fine: each file is far below dumpcap's 2 GiB
    dumpcap_argv(["x"], "/root/c/x.pcapng", ring_mb=100, ring_files=30, max_bytes=3 * 1024 ** 3)


@pytest.mark.parametrize("args,says", [
    (["h1", "-w", "x", "--full", "-s", "100"], "--full keeps whole packets"),
    (["h1", "-w", "x", "--max-size", "5G"], "dumpcap stops a file at 2.0 GiB at most"),
    (["h1", "-w", "x", "--max-size", "huge"], "--max-size huge: a size in bytes"),
    (["h1", "-w", "/root/c/x", "-C", "10", "-W", "20"], "the ring keeps up to 190.7 MiB"),
])
def test_bad_sizes_on_the_command_line_are_one_line_before_anything_starts(tmp_path, args,
                                                                             says):
    res = subprocess.run([NSLAB, "capture", *args], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nslab: error: ") and says in lines[0], lines
    assert not os.listdir(tmp_path)


def test_the_help_says_what_is_kept_and_how_to_change_it():
    out = subprocess.run([NSLAB, "capture", "--help"], capture_output=True, text=True,
                         timeout=60).stdout
    for word in ("--snaplen", "--full", "--max-size", "--as-wire", "first 256 bytes",
                 "stops at 100 MiB"):
        assert word in out, word


# -- --as-wire: both ends of the link --------------------------------------------------------
def test_as_wire_changes_both_ends_of_each_captured_link():
    m = fake_lab()  # h1, h2 in namespaces; s1 an OVS switch in the root namespace
    ends, away = wire_ends(resolve(parse_target("h1:h1-eth0"), m), m)
    assert ends == [("h1:h1-eth0", "nl0a0b-h1", "h1-eth0"), ("s1:s1-eth1", None, "nl0a0b-p1")]
    assert away == []
    ends, _ = wire_ends(resolve(parse_target("s1"), m), m)
    assert [e[0] for e in ends] == ["s1:s1-eth1", "s1:s1-eth2", "h1:h1-eth0", "h2:h2-eth0"]
    # a device that is no link's end (lo) is changed alone
    ends, away = wire_ends(resolve(parse_target("h1:lo"), m), m)
    assert ends == [("h1:lo", "nl0a0b-h1", "lo")] and away == []


def test_an_end_on_another_host_is_named_not_changed():
    m = fake_lab(host="boxA")
    del m.netns["s1"]
    m.ports.pop("s1")  # s1 is on another host of a lab across machines
    ends, away = wire_ends(resolve(parse_target("h1:h1-eth0"), m), m)
    assert ends == [("h1:h1-eth0", "nl0a0b-h1", "h1-eth0")] and away == ["s1:s1-eth1"]


@pytest.mark.parametrize("name", ["features-lo.txt", "features-virtio.txt"])
def test_ethtool_features_are_read_and_only_those_on_are_turned_off(name):
    found = offloads.parse_features(open(data(f"ethtool/{name}")).read())
    assert found["tcp-segmentation-offload"] == (True, False)
    assert found["large-receive-offload"] == (False, True)
    assert "tx-tcp-segmentation" not in found  # a sub-feature: ethtool -K tso sets them
    assert offloads.to_turn_off(found) == ["tso", "gso", "gro"]
    fixed = offloads.parse_features("tcp-segmentation-offload: on [fixed]\n"
                                    "generic-segmentation-offload: off\n"
                                    "generic-receive-offload: on [requested off]\n")
    assert offloads.to_turn_off(fixed) == ["gro"]


class FakeEthtool:
    """Stands for `ethtool` (and `ip netns exec`): every interface starts
    with tso, gso and gro on; -K changes them; every command is kept."""

    def __init__(self, monkeypatch):
        self.calls = []
        self.state = {}
        for mod in (offloads, clean, restore):
            monkeypatch.setattr(mod, "run", self)

    def __call__(self, argv, check=True, **kw):
        self.calls.append(list(argv))
        words = argv[4:] if argv[:3] == ["ip", "netns", "exec"] else argv
        ns = argv[3] if words is not argv else None
        dev = words[2]
        feats = self.state.setdefault((ns, dev), {"tso": True, "gso": True, "gro": True})
        if words[1] == "-k":
            shown = {"tso": "tcp-segmentation-offload", "gso": "generic-segmentation-offload",
                     "gro": "generic-receive-offload"}
            return Result(argv, 0, "".join(f"{shown[k]}: {'on' if v else 'off'}\n"
                                           for k, v in feats.items()), "")
        for f, v in zip(words[3::2], words[4::2]):
            feats[f] = v == "on"
        return Result(argv, 0, "", "")


@pytest.fixture
def lab_dir(tmp_path, monkeypatch):
    """A lab's state: the journal directory and its work directory."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    monkeypatch.setattr(clean, "STATE_DIR", str(state))
    os.makedirs(clean.workdir("nl0a0b"))
    return clean.workdir("nl0a0b")


ENDS = [offloads.End("h1:h1-eth0", "nl0a0b-h1", "h1-eth0"),
        offloads.End("s1:s1-eth1", None, "nl0a0b-p1")]


def test_offloads_go_off_while_capturing_and_come_back_after(lab_dir, monkeypatch):
    eth = FakeEthtool(monkeypatch)
    eth.state[(None, "nl0a0b-p1")] = {"tso": False, "gso": True, "gro": False}  # lab's own choice
    with offloads.OffloadsOff("nl0a0b", ENDS, lab_dir) as wire:
        assert all(not v for f in eth.state.values() for v in f.values())
        (path, record), = offloads.records(lab_dir)
        assert path == offloads.record_path(lab_dir) and record["pid"] == os.getpid()
        assert [r["argv"] for r in record["restore"]] == [
            [["ip", "netns", "exec", "nl0a0b-h1", "ethtool", "-K", "h1-eth0", "tso", "on", "gso",
              "on", "gro", "on"]],
            [["ethtool", "-K", "nl0a0b-p1", "gso", "on"]]]  # only what was on goes back on
        assert [e.label for e, _ in wire.changed] == ["h1:h1-eth0", "s1:s1-eth1"]
        # every command a record holds passes the check nslab clean makes
        for item in record["restore"]:
            for argv in item["argv"]:
                assert restore.restore_problem(argv, "nl0a0b") is None
        # a second capture --as-wire of the same interface is refused in one line
        with pytest.raises(InputError, match=f"held by process {os.getpid()}"):
            offloads.OffloadsOff("nl0a0b", ENDS[:1], lab_dir).__enter__()
    assert eth.state[("nl0a0b-h1", "h1-eth0")] == {"tso": True, "gso": True, "gro": True}
    assert eth.state[(None, "nl0a0b-p1")] == {"tso": False, "gso": True, "gro": False}
    assert offloads.records(lab_dir) == []


def test_nothing_on_means_nothing_recorded(lab_dir, monkeypatch):
    eth = FakeEthtool(monkeypatch)
    eth.state[("nl0a0b-h1", "h1-eth0")] = {"tso": False, "gso": False, "gro": False}
    with offloads.OffloadsOff("nl0a0b", ENDS[:1], lab_dir):
        assert offloads.records(lab_dir) == []
    assert [c[-2] for c in eth.calls] == ["-k"]  # read, never changed


def dead_capture(lab_dir):
    """The record a capture --as-wire killed with SIGKILL leaves."""
    from nslab.runtime import statefile
    statefile.write(offloads.record_path(lab_dir, 4242), {
        "run": "nl0a0b", "pid": 4242, "pid_start": -1.0,
        "ends": [{"label": "h1:h1-eth0", "netns": "nl0a0b-h1", "dev": "h1-eth0"}],
        "restore": [{"what": "segmentation offloads of h1:h1-eth0 (tso, gso on)",
                     "argv": [["ip", "netns", "exec", "nl0a0b-h1", "ethtool", "-K", "h1-eth0",
                               "tso", "on", "gso", "on"]]}]})


def test_nslab_clean_puts_back_what_a_killed_capture_left_off_on_a_live_lab(lab_dir,
                                                                            monkeypatch):
    eth = FakeEthtool(monkeypatch)
    monkeypatch.setattr(clean, "discover", lambda run_id=None, tagged=None: {
        "nl0a0b": clean.Inventory("nl0a0b", namespaces=["nl0a0b-h1"], journal=live())})
    dead_capture(lab_dir)
    assert clean.clean(dry_run=True)["nl0a0b"] == [
        f"skipped: run is live (pid {os.getpid()}); use --force",
        "would restore segmentation offloads of h1:h1-eth0 (tso, gso on) (process 4242 is gone)"]
    assert eth.calls == [] and len(offloads.records(lab_dir)) == 1
    assert clean.clean()["nl0a0b"][1] == ("restored segmentation offloads of h1:h1-eth0 "
                                          "(tso, gso on) (process 4242 is gone)")
    assert eth.calls == [["ip", "netns", "exec", "nl0a0b-h1", "ethtool", "-K", "h1-eth0", "tso",
                          "on", "gso", "on"]]
    assert offloads.records(lab_dir) == []


def live():
    return {"run": "nl0a0b", "pid": os.getpid(), "pid_start": process_start_time(os.getpid())}


def test_a_live_captures_record_is_left_to_it(lab_dir, monkeypatch):
    eth = FakeEthtool(monkeypatch)
    with offloads.OffloadsOff("nl0a0b", ENDS[:1], lab_dir):
        assert offloads.stale(lab_dir) == []
        assert clean.restore_stale_offloads("nl0a0b") == []
        assert len(offloads.records(lab_dir)) == 1
    assert eth.state[("nl0a0b-h1", "h1-eth0")]["tso"]


def test_a_forged_record_runs_nothing(lab_dir, monkeypatch):
    from nslab.runtime import statefile
    eth = FakeEthtool(monkeypatch)
    statefile.write(offloads.record_path(lab_dir, 4243), {
        "run": "nl0a0b", "pid": 4243, "pid_start": -1.0, "restore": [
            {"what": "x", "argv": [["ip", "netns", "exec", "nl9999-h1", "ethtool", "-K", "h1-eth0",
                                    "tso", "on"]]},
            {"what": "y", "argv": [["ip", "netns", "exec", "nl0a0b-h1", "sh", "-c", "reboot"]]},
            {"what": "z", "argv": [["ethtool", "-K", "eth0", "tso", "on", "tso", "off"]]},
            "not a record"]})
    lines = clean.restore_stale_offloads("nl0a0b")
    assert len(lines) == 4 and all(line.startswith("problem: restore ") for line in lines)
    assert "not a namespace of run nl0a0b" in lines[0]
    assert eth.calls == [] and offloads.records(lab_dir) == []


@pytest.mark.parametrize("argv,ok", [
    (["ethtool", "-K", "eth1", "tso", "on"], True),
    (["ethtool", "-K", "eth1", "tso", "on", "gso", "on", "gro", "off"], True),
    (["ethtool", "-K", "eth1", "lro", "on"], False),
    (["ethtool", "-K", "eth1", "tso", "on", "gso"], False),
    (["ethtool", "-K", "eth1", "tso", "maybe"], False),
    (["ip", "netns", "exec", "nl0a0b-s1", "ethtool", "-K", "s1-eth1", "gro", "on"], True),
    (["ip", "netns", "exec", "nl0a0b-s1", "ip", "link", "set", "dev", "x", "up"], False),
    (["ip", "netns", "exec", "other", "ethtool", "-K", "s1-eth1", "gro", "on"], False),
])
def test_the_restore_commands_clean_may_run(argv, ok):
    assert (restore.restore_problem(argv, "nl0a0b") is None) == ok
