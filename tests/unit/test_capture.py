"""`nslab capture` and study files' `captures:` without root: targets parsed
and resolved against a lab's map (namespaces, root-namespace OVS ports, a
part of a lab across hosts), dumpcap's command line (the filter can never be
an option; ring flags), the limits, and the files a trial's captures leave."""
import json
import os
import subprocess
import sys
import tempfile
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nslab.traffic import capture
from nslab.model import limits
from nslab.traffic.capture import (LabMap, Target, bound_bytes, check_filter, dumpcap_argv,
                           parse_target, resolve)
from nslab.traffic.capturerun import root_ports
from nslab.cmdline.capturecli import split_rest
from nslab.errors import InputError
from nslab.topologies import single

NSLAB = os.path.join(os.path.dirname(sys.executable), "nslab")


def fake_lab(run="nl0a0b", host=None):
    """single(k=2) with an OVS switch: h1, h2 in namespaces, s1's ports in the
    root namespace under the run's names; h1 also has lo and a VLAN device."""
    m = LabMap.of_topology(single(k=2, switch="ovs"), run)
    m.netns["s1"] = None
    m.ports["s1"] = {"s1-eth1": f"{run}-p1", "s1-eth2": f"{run}-p2"}
    m.extra["h1"] = ["lo", "h1-eth0.10"]
    m.host = host
    return m


def one_line(exc_info):
    msg = str(exc_info.value)
    assert "\n" not in msg
    return msg


# -- targets -----------------------------------------------------------------------------
@pytest.mark.parametrize("text,want", [
    ("h1:h1-eth0", Target("intf", "h1", intf="h1-eth0")),
    ("s1:s1-eth2", Target("intf", "s1", intf="s1-eth2")),
    ("h1-s1", Target("link", "h1", peer="s1")),
    ("s1-h1", Target("link", "s1", peer="h1")),
    ("r1", Target("node", "r1")),
])
def test_the_three_forms_of_a_target(text, want):
    assert parse_target(text) == want
    assert str(want) == text


@pytest.mark.parametrize("text,says", [
    ("", "use NODE:IFACE"),
    ("h1:", "NODE:IFACE takes"),
    (":h1-eth0", "NODE:IFACE takes"),
    ("h1:-eth0", "not starting with -"),
    ("h1:h1 eth0", "NODE:IFACE takes"),
    ("h1:2", "interface number"),
    ("h1-s1-s2", "a link is A-B"),
    ("h1;reboot", "use NODE:IFACE"),
    ("a" * 65, "use NODE:IFACE"),
    ("h1:eth0\n", "NODE:IFACE takes"),
])
def test_a_bad_target_is_one_line(text, says):
    with pytest.raises(InputError) as exc:
        parse_target(text)
    assert says in one_line(exc)


def test_an_interface_resolves_in_its_namespace():
    w = resolve(parse_target("h1:h1-eth0"), fake_lab())
    assert (w.node, w.netns, w.devs, w.intfs) == ("h1", "nl0a0b-h1", ("h1-eth0",), ("h1-eth0",))
    assert w.label == "h1:h1-eth0"
    # any interface the namespace has, not only the links' ends
    assert resolve(parse_target("h1:lo"), fake_lab()).devs == ("lo",)


def test_an_ovs_port_resolves_to_its_device_in_the_root_namespace():
    w = resolve(parse_target("s1:s1-eth2"), fake_lab())
    assert (w.netns, w.devs, w.intfs) == (None, ("nl0a0b-p2",), ("s1-eth2",))
    assert "nl0a0b-p2 in the root namespace" in w.label


def test_a_link_is_captured_at_the_end_named_first():
    m = fake_lab()
    at_h1 = resolve(parse_target("h1-s1"), m)
    at_s1 = resolve(parse_target("s1-h1"), m)
    assert (at_h1.netns, at_h1.devs) == ("nl0a0b-h1", ("h1-eth0",))
    assert (at_s1.netns, at_s1.devs, at_s1.intfs) == (None, ("nl0a0b-p1",), ("s1-eth1",))


def test_a_node_is_every_interface_of_its_links_in_one_capture():
    w = resolve(parse_target("s1"), fake_lab())
    assert w.devs == ("nl0a0b-p1", "nl0a0b-p2") and w.netns is None
    w = resolve(parse_target("h1"), fake_lab())
    assert w.devs == ("h1-eth0",)  # not lo, not the VLAN device


@pytest.mark.parametrize("text,says", [
    ("h9:h9-eth0", "no node 'h9' in lab nl0a0b (nodes: s1, h1, h2)"),
    ("h1:h1-eth7", "h1 has no interface 'h1-eth7' (it has: h1-eth0, lo, h1-eth0.10)"),
    ("h1-h2", "no link between h1 and h2 (h1 is linked to: s1)"),
    ("h1-eth0", "no node 'eth0' in lab nl0a0b; the interface is h1:h1-eth0"),
    ("h3", "no node 'h3'"),
])
def test_what_the_lab_does_not_have_is_one_line(text, says):
    with pytest.raises(InputError) as exc:
        resolve(parse_target(text), fake_lab())
    assert says in one_line(exc)


def test_parallel_links_ask_for_one_end():
    m = fake_lab()
    m.links.append(("h1", "h1-eth1", "s1", "s1-eth3"))
    m.ports["h1"]["h1-eth1"] = "h1-eth1"
    with pytest.raises(InputError) as exc:
        resolve(parse_target("h1-s1"), m)
    assert "2 links join h1 and s1; name one end: h1:h1-eth0 or h1:h1-eth1" in one_line(exc)


def test_a_node_on_another_host_is_refused_in_one_line_saying_where_to_run_it():
    m = fake_lab(host="boxA")
    del m.netns["h2"], m.ports["h2"]  # built by the other host
    with pytest.raises(InputError) as exc:
        resolve(parse_target("h2:h2-eth0"), m)
    msg = one_line(exc)
    assert "h2 is not on this host" in msg and "boxA" in msg
    assert "on the machine that controls the lab" in msg
    assert "ssh HOST nslab capture h2:h2-eth0 -w -" in msg


def test_a_study_check_resolves_against_the_topology_alone():
    m = LabMap.of_topology(single(k=3))
    assert resolve(parse_target("s1-h3"), m).intfs == ("s1-eth3",)
    with pytest.raises(InputError, match="in the topology"):
        resolve(parse_target("h4"), m)


def test_root_ports_are_found_by_the_runs_alias_only():
    links = [
        {"ifname": "nl0a0b-p1", "ifalias": "nslab:nl0a0b:s1:s1-eth1"},
        {"ifname": "nl0a0b-p2", "ifalias": "nslab:nl0a0b:s1:s1-eth2"},
        {"ifname": "nl9999-p1", "ifalias": "nslab:nl9999:s1:s1-eth1"},   # another run
        {"ifname": "eth0"},                                                # the host's
        {"ifname": "nl0a0b-p3", "ifalias": "nslab:nl0a0b:s1:s1-eth3:x"},  # not one we write
        {"ifname": "-x", "ifalias": "nslab:nl0a0b:s2:s2-eth1"},            # not a name
        {"ifname": "nl0a0b-p4", "ifalias": "nslab:nl0a0b:bad node:e"},
    ]
    assert root_ports("nl0a0b", links) == {"s1": {"s1-eth1": "nl0a0b-p1",
                                                  "s1-eth2": "nl0a0b-p2"}}


# -- dumpcap's command line --------------------------------------------------------------
def test_the_command_line_of_a_capture_to_stdout():
    argv = dumpcap_argv(["h1-eth0"], "-", count=10, duration=2.5, filt="icmp", snaplen=128)
    assert argv == ["dumpcap", "-q", "-n", "-p", "-f", "icmp", "-s", "128", "-i", "h1-eth0",
                    "-c", "10", "-a", "duration:2.5", "-w", "-"]


def test_the_filter_and_snap_length_come_before_every_interface():
    argv = dumpcap_argv(["a", "b", "c"], "-", filt="arp", snaplen=96)
    first_i = argv.index("-i")
    assert argv.index("-f") < first_i and argv.index("-s") < first_i
    assert [argv[i + 1] for i, x in enumerate(argv) if x == "-i"] == ["a", "b", "c"]


def test_a_ring_buffer_as_tcpdump_takes_it():
    argv = dumpcap_argv(["h1-eth0"], "/root/caps/h1.pcapng", ring_mb=10, ring_files=5)
    assert argv[-6:] == ["-b", "filesize:10000", "-b", "files:5", "-w", "/root/caps/h1.pcapng"]
    with pytest.raises(InputError, match="needs -C"):
        dumpcap_argv(["h1-eth0"], "/root/x", ring_files=5)
    with pytest.raises(InputError, match="needs -w FILE"):
        dumpcap_argv(["h1-eth0"], "-", ring_mb=1)
    # -C alone would keep every file as root: bounded by -W, -c or --duration
    with pytest.raises(InputError, match="without bound"):
        dumpcap_argv(["h1-eth0"], "/root/caps/h1.pcapng", ring_mb=10)
    assert "-b" in dumpcap_argv(["h1-eth0"], "/root/caps/h1.pcapng", ring_mb=10, count=1000)
    assert "-b" in dumpcap_argv(["h1-eth0"], "/root/caps/h1.pcapng", ring_mb=10, duration=60)


def test_a_size_cap_stops_the_file():
    assert dumpcap_argv(["x"], "-", max_bytes=2_500_000)[-4:] == ["-a", "filesize:2500", "-w",
                                                                   "-"]
    assert bound_bytes(128, 10_000) == capture.FILE_OVERHEAD + 10_000 * (128 + 36)


@pytest.mark.parametrize("filt,says", [
    ("-x", "may not start with '-'"),
    ("  --version", "may not start with '-'"),
    ("icmp\nor arp", "only printable"),
    ("icmp\x1b[2J", "only printable"),
    ("", "empty"),
    ("a" * 1025, "longer than"),
])
def test_a_filter_that_could_be_an_option_or_hide_a_line_is_refused(filt, says):
    with pytest.raises(InputError) as exc:
        dumpcap_argv(["h1-eth0"], "-", filt=filt)
    assert says in one_line(exc)


@pytest.mark.parametrize("dev", ["5", "-i", "a b", "rpcap://x/y", "TCP@h:1", ""])
def test_an_interface_dumpcap_would_read_otherwise_is_refused(dev):
    with pytest.raises(InputError):
        dumpcap_argv([dev], "-")


@pytest.mark.parametrize("out", ["-x", "--help", ""])
def test_an_output_that_reads_as_an_option_is_refused(out):
    with pytest.raises(InputError):
        dumpcap_argv(["h1-eth0"], out)


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=200))
def test_an_accepted_filter_is_exactly_one_element_after_f(text):
    try:
        check_filter(text)
    except InputError:
        assert not text.strip() or not text.isprintable() or text.lstrip().startswith("-")
        return
    argv = dumpcap_argv(["h1-eth0", "h1-eth1"], "-", filt=text, count=5)
    plain = dumpcap_argv(["h1-eth0", "h1-eth1"], "-", count=5)
    assert argv[argv.index("-f") + 1] == text
    assert len(argv) == len(plain) + 2
    assert [a for i, a in enumerate(argv) if i not in (argv.index("-f"), argv.index("-f") + 1)] \
        == plain


def test_words_after_the_target_are_a_run_then_the_filter():
    assert split_rest(("nl3f2a", "icmp", "or", "arp"), None) == ("nl3f2a", "icmp or arp")
    assert split_rest(("icmp",), None) == (None, "icmp")
    assert split_rest(("nl3f2a",), "tcp port 80") == ("nl3f2a", "tcp port 80")
    assert split_rest((), None) == (None, None)
    with pytest.raises(InputError, match="once"):
        split_rest(("icmp",), "arp")
    with pytest.raises(InputError, match="may not start"):
        split_rest(("nl3f2a", "-x"), None)


def test_a_ring_needs_a_directory_only_root_can_write(tmp_path):
    private = tmp_path / "caps"
    private.mkdir(mode=0o700)
    assert capture.ring_dir_problem(str(private / "x.pcapng")) is None
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    assert "writable by group or others" in capture.ring_dir_problem(str(shared / "x.pcapng"))
    link = tmp_path / "link"
    link.symlink_to(private)
    assert "symbolic link" in capture.ring_dir_problem(str(link / "x.pcapng"))


def test_dumpcap_packet_count_is_read_from_its_last_line():
    lines = ["Capturing on 'h1-eth0'", "File: -", "Packets captured: 10",
             "Packets received/dropped on interface 'h1-eth0': 10/0 (pcap:0/dumpcap:0)"]
    assert capture.packets_of(lines) == 10
    assert capture.packets_of(["Capturing on 'x'"]) is None


@pytest.mark.parametrize("args,says", [
    (["h1:h1-eth0", "-w", "x.pcapng", "-f", "-x"], "may not start with '-'"),
    (["h1:", "-w", "x.pcapng"], "NODE:IFACE takes"),
    (["h1", "-w", "x", "-W", "4"], "needs -C"),
    (["h1", "-w", "-", "-C", "4"], "needs -w FILE"),
    (["h1", "-w", "x", "icmp", "-f", "arp"], "once"),
])
def test_bad_capture_options_are_one_line_before_anything_starts(tmp_path, args, says):
    res = subprocess.run([NSLAB, "capture", *args], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nslab: error: ") and says in lines[0], lines
    assert not os.listdir(tmp_path)


# -- limits ------------------------------------------------------------------------------
@pytest.mark.parametrize("item,parsed", [
    ("captures=4G", ("captures", 4 * 1024 ** 3)), ("capture=500M", ("capture", 500 * 1024 ** 2)),
    ("capture=1000", ("capture", 1000)), ("captures=1.5GiB", ("captures", int(1.5 * 1024 ** 3))),
])
def test_capture_limits_take_sizes(item, parsed):
    assert limits.parse_limit(item) == parsed


@pytest.mark.parametrize("item", ["captures=x", "capture=0", "captures=2P", "captures=-1G"])
def test_a_bad_capture_limit_is_one_line(item):
    with pytest.raises(InputError, match="a size in bytes"):
        limits.parse_limit(item)


def test_capture_limits_show_in_bytes():
    lim = limits.machine()
    assert lim.capture == limits.CAPTURE_BYTES and lim.captures == limits.CAPTURES_BYTES
    assert "capture 256.0 MiB, captures 2.0 GiB" in lim.describe()
    assert limits.fmt("captures", 3 * 1024 ** 3) == "3.0 GiB"
    raised = lim.with_values({"captures": 10 * 1024 ** 3})
    assert raised.captures == 10 * 1024 ** 3 and "captures 10.0 GiB (--limit)" in raised.describe()


# -- study files ------------------------------------------------------------------------
STUDY = """\
name: captured
title: ping across a switch, captured
topology:
  ready: single
  options: {k: 2}
duration: 3
settle: 0
traffic:
  - {id: ping, kind: ping, src: h1, dst: h2, interval: 0.2}
metrics:
  - {metric: latency, flow: ping}
sweep:
  vars.x: [a, b]
events:
  - {at: 1, do: link-down, link: [h2, s1], when: {vars.x: b}}
repeat: 3
captures:
  - {link: "h1:h1-eth0", snaplen: 96, max_packets: 1000}
  - {link: [s1, h2], trials: all, where: {vars.x: a}, filter: icmp}
"""


def study(tmp_path, extra="", text=STUDY):
    p = tmp_path / "s.yaml"
    p.write_text(textwrap.dedent(text) + extra)
    return str(p)


def load_error(tmp_path, extra, **limit_values):
    from nslab.experiments.filestudy.spec import load
    with limits.use(limits.machine().with_values(limit_values)):
        with pytest.raises(InputError) as exc:
            load(study(tmp_path, extra))
    return one_line(exc)


def test_captures_of_a_study_file_load_and_count_their_trials(tmp_path):
    from nslab.experiments.filestudy.captures import planned, trials_of
    from nslab.experiments.filestudy.spec import load
    spec = load(study(tmp_path)).spec
    first, every = spec.captures
    assert (first.link, first.file_name, first.trials) == ("h1:h1-eth0", "h1_h1-eth0", "first")
    assert (every.link, every.file_name, every.filter) == ("s1-h2", "s1-h2", "icmp")
    assert trials_of(spec, first) == 2      # the first trial of both points
    assert trials_of(spec, every) == 3      # every trial of vars.x=a
    assert planned(spec) == (5, 2 * bound_bytes(96, 1000) + 3 * bound_bytes(128, 10_000))


def test_check_prints_the_captures_and_needs_dumpcap(tmp_path):
    from nslab.experiments.filestudy.study import study_class
    cls = study_class(study(tmp_path))
    assert "tool:dumpcap" in cls().needs(cls.Config.preset())
    res = subprocess.run([NSLAB, "study", "check", study(tmp_path)], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "captures: 2 asked, in 5 trials, at most" in res.stdout


@pytest.mark.parametrize("extra,line,field,says", [
    ("  - {link: h1:h1-eth7}\n", 20, "captures.2.link", "h1 has no interface 'h1-eth7'"),
    ("  - {link: [h1, h2]}\n", 20, "captures.2.link", "no link between h1 and h2"),
    ("  - {link: h1-eth0}\n", 20, "captures.2.link", "the interface is h1:h1-eth0"),
    ("  - {link: 'h1:'}\n", 20, "captures.2.link", "NODE:IFACE takes"),
    ("  - {link: h1, filter: '-w /etc/x'}\n", 20, "captures.2.filter", "may not start with"),
    ("  - {link: h1, where: {vars.y: 1}}\n", 20, "captures.2.where['vars.y']",
     "vars.y is not a sweep key"),
    ("  - {link: h1, where: {vars.x: c}}\n", 20, "captures.2.where['vars.x']",
     "'c' is not among the swept values"),
    ("  - {link: h1, trials: last}\n", 20, "captures.2.trials", "'first' or 'all'"),
    ("  - {link: h1, snaplen: 10}\n", 20, "captures.2.snaplen", "greater than or equal to 64"),
    ("  - {link: h1, max_packets: 0}\n", 20, "captures.2.max_packets", "greater than or equal"),
    ("  - {link: h1, colour: red}\n", 20, "captures.2.colour", "unknown key"),
    ("  - {link: h1-s1, name: h1_h1-eth0}\n", 20, "captures.2.name", "two captures are called"),
])
def test_a_bad_capture_is_one_line_naming_file_line_and_field(tmp_path, extra, line, field, says):
    msg = load_error(tmp_path, extra)
    assert msg.startswith(f"{tmp_path / 's.yaml'}:{line}: {field}: "), msg
    assert says in msg, msg


def test_one_capture_over_its_limit_is_one_line(tmp_path):
    msg = load_error(tmp_path, "  - {link: h1, snaplen: 65535, max_packets: 10000}\n")
    assert f"{tmp_path / 's.yaml'}:20: captures.2: " in msg
    assert "in one capture (10,000 packets of up to 65535 bytes), over the limit of 256.0 MiB" \
        in msg and "--limit capture=N" in msg


def test_a_sweep_of_captures_over_the_runs_limit_is_one_line(tmp_path):
    msg = load_error(tmp_path, "", captures=4 * 1024 ** 2)
    assert msg.startswith(f"{tmp_path / 's.yaml'}:17: captures: ")
    assert "of captures (h1_h1-eth0 2 trials, s1-h2 3 trials), over the limit of 4.0 MiB " \
           "(--limit)" in msg


def test_the_shipped_schema_describes_captures():
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs",
                           "study.schema.json")) as f:
        schema = json.load(f)
    props = schema["$defs"]["CaptureSpec"]["properties"]
    assert {"link", "where", "trials", "snaplen", "max_packets", "filter", "name"} <= set(props)


# -- a trial's captures (dumpcap replaced by a fake: no root) -----------------------------
class FakeCapture:
    """Writes a pcapng magic and "packets" to the file it is given, as dumpcap would."""

    started = []

    def __init__(self, where, argv, run_id, stdout=None):
        self.where, self.argv, self.run_id = where, argv, run_id
        stdout.write(bytes.fromhex("0a0d0d0a") + b"x" * 60)
        FakeCapture.started.append(self)
        self.proc = type("P", (), {"popen": type("Po", (), {"returncode": 0})()})()
        self.packets, self.stopped = 3, False

    def wait_ready(self, timeout=10):
        pass

    def stop(self):
        self.stopped = True

    def message(self):
        return ""


@pytest.fixture
def trial(tmp_path, monkeypatch):
    from nslab.experiments.filestudy import trialcap
    from nslab.experiments.filestudy.spec import load
    from nslab.store.results import ResultStore
    FakeCapture.started = []
    monkeypatch.setattr(trialcap, "Capture", FakeCapture)
    monkeypatch.setattr(trialcap, "wait_started", lambda caps: None)
    monkeypatch.setattr("nslab.traffic.capture.require_tool", lambda: "/usr/bin/dumpcap")
    run = "nl0a0b"
    monkeypatch.setattr(trialcap, "lab_map", lambda r, nodes: fake_lab(r))
    spec = load(study(tmp_path)).spec
    store = ResultStore(str(tmp_path / "results"), "captured", run)
    lab = type("Lab", (), {"run_id": run, "remote": False})()
    return trialcap.TrialCaptures(lab, spec, store), store


def test_a_trial_keeps_its_captures_beside_its_raw_output(trial):
    caps, store = trial
    running = caps.start({"vars.x": "a", "repeat": 0}, "p123456-x=a-repeat=0")
    assert len(FakeCapture.started) == 2
    at_h1, at_s1 = FakeCapture.started
    assert at_h1.where.netns == "nl0a0b-h1" and at_s1.where.devs == ("nl0a0b-p2",)
    assert at_h1.run_id == "nl0a0b"  # tagged with the lab's run
    assert at_h1.argv[at_h1.argv.index("-c") + 1] == "1000"
    assert at_h1.argv[at_h1.argv.index("-a") + 1] == f"filesize:{bound_bytes(96, 1000) // 1000}"
    raw, done = running.stop()
    assert running.stop() == (raw, done)  # once
    assert all(c.stopped for c in FakeCapture.started)
    names = sorted(os.path.basename(p) for p in raw)
    assert names == ["p123456-x=a-repeat=0-capture-h1_h1-eth0.pcapng",
                     "p123456-x=a-repeat=0-capture-s1-h2.pcapng"]
    assert sorted(os.listdir(store.raw_dir)) == names  # no .part left
    assert done["h1_h1-eth0"] == {"link": "h1:h1-eth0", "file": "raw/" + names[0], "packets": 3,
                                  "bytes": 64, "error": None}
    with open(raw[0], "rb") as f:
        assert f.read(4) == bytes.fromhex("0a0d0d0a")


def test_only_the_trials_a_capture_asks_for_are_captured(trial):
    caps, _ = trial
    caps.start({"vars.x": "b", "repeat": 0}, "t1").stop()
    assert [c.where.node for c in FakeCapture.started] == ["h1"]  # s1-h2 is for vars.x=a
    FakeCapture.started.clear()
    caps.start({"vars.x": "b", "repeat": 1}, "t2").stop()
    assert FakeCapture.started == []  # h1:h1-eth0 takes the first trial only


def test_a_trial_measured_again_replaces_its_capture_and_a_link_there_is_not_followed(trial,
                                                                                         tmp_path):
    caps, store = trial
    point = {"vars.x": "b", "repeat": 0}
    raw, _ = caps.start(point, "t1").stop()
    os.unlink(raw[0])
    victim = tmp_path / "victim"
    victim.write_text("keep")
    os.symlink(victim, raw[0])
    raw2, done = caps.start(point, "t1").stop()
    assert raw2 == raw and not os.path.islink(raw[0]) and victim.read_text() == "keep"
    assert done["h1_h1-eth0"]["bytes"] == 64


def test_a_crashed_trials_unfinished_capture_counts_until_it_is_measured_again(trial):
    from nslab.experiments.filestudy.trialcap import TrialCaptures
    caps, store = trial
    os.makedirs(store.raw_dir, exist_ok=True)
    part = os.path.join(store.raw_dir, "t1-capture-h1_h1-eth0.pcapng.part")
    with open(part, "wb") as f:  # left by a trial that crashed
        f.write(b"x" * 5000)
    resumed = TrialCaptures(caps.lab, type("S", (), {"captures": caps.specs})(), store)
    assert resumed.used == 5000
    # the same trial measured again replaces it: only the new file counts
    raw, done = resumed.start({"vars.x": "b", "repeat": 0}, "t1").stop()
    assert not os.path.exists(part) and done["h1_h1-eth0"]["bytes"] == 64
    assert resumed.used == 64
    # one that is not measured again keeps counting against the limit
    with open(part, "wb") as f:
        f.write(b"x" * 5000)
    again = TrialCaptures(caps.lab, type("S", (), {"captures": caps.specs})(), store)
    assert again.used == 5064
    again.limit = 5064 + bound_bytes(96, 1000) - 1
    _, done = again.start({"vars.x": "b", "repeat": 0}, "t2").stop()
    assert done["h1_h1-eth0"]["file"] is None and "skipped" in done["h1_h1-eth0"]["error"]


def test_a_capture_past_the_runs_limit_is_skipped_and_said(trial):
    caps, _ = trial
    caps.limit = bound_bytes(96, 1000) + 10  # room for the first capture only
    raw, done = caps.start({"vars.x": "a", "repeat": 0}, "t1").stop()
    assert len(FakeCapture.started) == 1 and len(raw) == 1
    assert done["s1-h2"]["file"] is None and "skipped" in done["s1-h2"]["error"]
    assert "--limit captures=N" in done["s1-h2"]["error"]


def test_a_study_across_hosts_refuses_captures_in_one_line(tmp_path):
    from nslab.errors import LabError
    from nslab.experiments.filestudy.spec import load
    from nslab.experiments.filestudy.trialcap import TrialCaptures
    spec = load(study(tmp_path)).spec
    lab = type("MultiLab", (), {"run_id": "nl0a0b", "remote": True})()
    with pytest.raises(LabError, match="not built yet"):
        TrialCaptures(lab, spec, None)


def test_the_report_names_each_capture(tmp_path):
    from nslab.experiments.filestudy.captures import report_rows
    from nslab.experiments.filestudy.records import FileRecord
    from nslab.store.reporting import render
    rec = FileRecord.model_validate({
        "schema_version": 1, "experiment": "captured", "run_id": "nl0a0b", "kind": "point",
        "time": 0, "params": {"vars.x": "a", "repeat": 1},
        "measurements": {"values": {}, "captures": {"s1-h2": {
            "link": "s1-h2", "file": "raw/t-capture-s1-h2.pcapng", "packets": 10, "bytes": 900}}},
        "raw": []})
    rows = report_rows([rec])
    assert rows == [{"point": "x=a", "trial": 1, "link": "s1-h2",
                     "file": "raw/t-capture-s1-h2.pcapng", "packets": 10, "note": ""}]
    from types import SimpleNamespace
    templates = os.path.join(os.path.dirname(__file__), "..", "..", "experiments", "filestudy",
                             "templates")
    md = render(templates, "report.md.j2", spec=SimpleNamespace(title="t", source="s"),
                prov={}, cfg={}, keys=[], values=[], rows=[], claims=[], topologies=[],
                events=[], n=1, plots=False, captures=rows, captures_cut=200)
    assert "## Packet captures" in md
    assert "raw/t-capture-s1-h2.pcapng" in md.replace("\\", "")


# -- a running capture (a stand-in for dumpcap, in this namespace: no root) ---------------
FAKE_DUMPCAP = """\
import os, signal, sys, time
def done(*_):  # as dumpcap: the count on SIGINT (written as a signal handler may)
    os.write(2, b"Packets captured: 7\\n")
    os._exit(0)
signal.signal(signal.SIGINT, done)
print("Capturing on 'h1-eth0'", file=sys.stderr, flush=True)
if sys.argv[1] == "ok":
    time.sleep(0.3)  # opening the interface: "File:" says it is open
    print("File: -", file=sys.stderr, flush=True)
    time.sleep(60)
print(sys.argv[2], file=sys.stderr)
sys.exit(2)
"""


def fake_dumpcap(tmp_path, how, message=""):
    from nslab.traffic.capture import Where
    from nslab.traffic.capturerun import Capture
    script = tmp_path / "dumpcap.py"
    script.write_text(FAKE_DUMPCAP)
    where = Where("h1", None, ("h1-eth0",), ("h1-eth0",))
    cap = Capture(where, [sys.executable, "-I", str(script), how, message], "",
                  stdout=subprocess.DEVNULL)
    # Debian 13's unit tier runs at the idle policy beside the host's labs, where
    # a process can wait seconds for a CPU: the default grace (2 s from SIGINT to
    # SIGTERM) could end the fake before its handler wrote the count (exit -15)
    cap.STOP_GRACE = 60.0
    return cap


def test_a_capture_is_ready_once_its_file_is_begun_and_stops_with_its_count(tmp_path):
    cap = fake_dumpcap(tmp_path, "ok")
    cap.wait_ready(120)
    # ready at "File:", not at "Capturing on" (0.3 s before it)
    assert cap.lines == ["Capturing on 'h1-eth0'", "File: -"]
    assert cap.alive()
    assert cap.stop() == 0 and cap.packets == 7  # SIGINT, and the count it writes then


def test_a_filter_dumpcap_refuses_is_the_callers_input_error(tmp_path):
    cap = fake_dumpcap(tmp_path, "bad", "dumpcap: Invalid capture filter \"icmp and\" for "
                                        "interface 'h1-eth0'.")
    with pytest.raises(InputError) as exc:
        cap.wait_ready(120)
    assert one_line(exc) == ("capture filter refused by dumpcap on h1:h1-eth0: Invalid capture "
                             "filter \"icmp and\" for interface 'h1-eth0'.")


def test_an_interface_dumpcap_cannot_open_is_one_line(tmp_path):
    from nslab.errors import LabError
    cap = fake_dumpcap(tmp_path, "bad", "dumpcap: There is no device named \"h1-eth0\".")
    with pytest.raises(LabError) as exc:
        cap.wait_ready(120)
    assert not isinstance(exc.value, InputError)
    assert one_line(exc) == "dumpcap on h1:h1-eth0 failed: There is no device named \"h1-eth0\"."


def test_a_capture_follows_its_lab_and_stops_when_it_goes(tmp_path, monkeypatch):
    from nslab.traffic import capturerun
    alive = iter([True, True, False])
    monkeypatch.setattr(capturerun, "run_alive", lambda run: next(alive, False))
    cap = fake_dumpcap(tmp_path, "ok")
    cap.wait_ready(120)
    assert capturerun.follow(cap, "nl0a0b", poll=0.05) == "lab gone"
    assert not cap.alive() and cap.packets == 7


def test_the_live_map_of_a_lab_reads_its_namespaces_and_root_ports(monkeypatch):
    from nslab.traffic import capturerun, watch
    from nslab.runtime import clean
    run = "nl0a0b"
    links = {None: [{"ifname": "lo"}, {"ifname": "eth0"},
                    {"ifname": f"{run}-p1", "ifalias": f"nslab:{run}:s1:s1-eth1"},
                    {"ifname": f"{run}-p2", "ifalias": f"nslab:{run}:s1:s1-eth2"}],
             f"{run}-h1": [{"ifname": "lo"}, {"ifname": "h1-eth0"}, {"ifname": "h1-eth0.10"}],
             f"{run}-h2": [{"ifname": "lo"}]}   # h2-eth0 gone (the lab going down)
    asked = []
    monkeypatch.setattr(capturerun, "_ip_links", lambda ns: asked.append(ns) or links[ns])
    monkeypatch.setattr(capturerun, "load_topology", lambda r: single(k=2, switch="ovs"))
    monkeypatch.setattr(watch, "namespaces", lambda r: {"h1": f"{run}-h1", "h2": f"{run}-h2"})
    monkeypatch.setattr(clean, "read_journal", lambda r: {"run": r, "host": "boxA"})
    m = capturerun.lab_map(run, ["h1", "s1"])
    assert asked == [None, f"{run}-h1"]  # only the namespaces of the nodes asked about
    assert m.netns == {"s1": None, "h1": f"{run}-h1", "h2": f"{run}-h2"}
    assert m.ports["s1"] == {"s1-eth1": f"{run}-p1", "s1-eth2": f"{run}-p2"}
    assert m.ports["h1"] == {"h1-eth0": "h1-eth0"} and m.extra["h1"] == ["lo", "h1-eth0.10"]
    assert m.host == "boxA"
    assert resolve(parse_target("s1-h2"), m).devs == (f"{run}-p2",)
    m = capturerun.lab_map(run, ["h2"])
    with pytest.raises(InputError, match="h2:h2-eth0 is not there now"):
        resolve(parse_target("h2-s1"), m)


# -- a node on another host of a lab across machines ---------------------------------------
HOSTILE = "icmp and host 10.0.0.1 ; touch PWNED $(touch PWNED) `touch PWNED` 'q' \"d\" \\ | & > PWNED"


def remote_host(**kw):
    from nslab.traffic.captureremote import RemoteHost
    base = dict(run="nl0a0b", node="h2", dest="root@box2", nslab="/opt/ns lab/bin/nslab",
                ssh_config="/etc/nslab/ssh_config", control_dir=None)
    return RemoteHost(**{**base, **kw})


def shell_words(tmp_path, line):
    """The words ``sh`` makes of ``line`` (as sshd's shell would), run in
    ``tmp_path``: printf prints them, nothing else runs."""
    res = subprocess.run(["sh", "-c", "printf '%s\\0' " + line], cwd=tmp_path,
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    return res.stdout.split("\0")[:-1]


def test_the_ssh_command_of_a_remote_capture_passes_each_argument_as_given(tmp_path):
    from nslab.traffic.captureremote import remote_argv
    from nslab.hosts.ssh import LIFELINE, Ssh
    host = remote_host()
    remote = remote_argv(host, parse_target("h2:h2-eth0"), count=10, duration=2.5,
                         filt=HOSTILE, keep=capture.Keep(128, 5_000_000), as_wire=True)
    assert remote == ["sh", "-c", LIFELINE, "nslab-capture", "5", "env",
                      f"{capture.HOP_ENV}=1", "/opt/ns lab/bin/nslab", "capture", "h2:h2-eth0",
                      "nl0a0b", "-w", "-", "-c", "10", "--duration", "2.5", "-s", "128",
                      "--max-size", "5000000", "--as-wire", "-f", HOSTILE]
    ssh = Ssh(host.dest, str(tmp_path), host.ssh_config).argv(remote)
    i = ssh.index("--")
    assert ssh[i - 1] == "root@box2" and len(ssh) == i + 2 and "-T" in ssh
    assert shell_words(tmp_path, ssh[-1]) == remote  # the remote shell sees exactly these
    assert not os.listdir(tmp_path)  # and ran nothing


@settings(max_examples=40, deadline=None)
@given(st.text(min_size=1, max_size=60))
def test_any_filter_accepted_reaches_the_remote_shell_as_one_word(text):
    import tempfile

    from nslab.traffic.captureremote import remote_argv
    from nslab.hosts.ssh import Ssh
    try:
        check_filter(text)
    except InputError:
        return
    remote = remote_argv(remote_host(), parse_target("h2"), filt=text)
    with tempfile.TemporaryDirectory() as d:
        assert shell_words(d, Ssh("box2", d).argv(remote)[-1]) == remote
        assert not os.listdir(d)


@pytest.mark.parametrize("target,kw,says", [
    (Target("intf", "h2", intf="h2-eth0;reboot"), {}, "capture target"),
    (Target("intf", "h2", intf="h2-eth0\nreboot"), {}, "capture target"),
    (Target("node", "h1"), {}, "not a target of node h2"),
    (Target("node", "h2"), {"filt": "icmp\nreboot"}, "only printable characters"),
    (Target("node", "h2"), {"filt": "-w /etc/passwd"}, "may not start with '-'"),
    (Target("node", "h2"), {"count": 0}, "-c 0"),
    (Target("node", "h2"), {"keep": capture.Keep(10)}, "-s 10"),
    (Target("node", "h2"), {"keep": capture.Keep(128, -1)}, "--max-size -1"),
    (Target("node", "h2"), {"duration": float("nan")}, "--duration nan"),
])
def test_what_could_reach_the_remote_shell_is_checked_first(target, kw, says):
    from nslab.traffic.captureremote import remote_argv
    with pytest.raises(InputError) as exc:
        remote_argv(remote_host(), target, **kw)
    assert says in one_line(exc)


def test_a_run_id_that_is_not_one_never_reaches_the_remote_shell():
    from nslab.traffic.captureremote import remote_argv
    with pytest.raises(InputError, match="bad run id"):
        remote_argv(remote_host(run="nl0a0b;reboot"), parse_target("h2"))


def controller_record(**kw):
    from nslab.hosts.remote import MultiLab
    lab = MultiLab(single(k=2), {"10.99.0.1": "10.99.0.1", "root@box2": "192.0.2.2"},
                   placement={"h1": "10.99.0.1", "s1": "10.99.0.1", "h2": "root@box2"},
                   run_id="nl0a0b", ssh_config="/etc/nslab/ssh_config",
                   remote_nslab="/opt/nslab/bin/nslab")
    return {**lab.controller_record(), **kw}


def test_the_host_of_a_node_comes_from_the_controllers_record():
    from nslab.traffic.captureremote import host_of
    h = host_of(controller_record(), "nl0a0b", "h2")
    assert (h.run, h.node, h.dest, h.nslab, h.ssh_config) == (
        "nl0a0b", "h2", "root@box2", "/opt/nslab/bin/nslab", "/etc/nslab/ssh_config")
    assert host_of(controller_record(), "nl0a0b", "s1").dest == "10.99.0.1"
    with pytest.raises(InputError) as exc:
        host_of(controller_record(), "nl0a0b", "h9")
    assert "no node 'h9' in lab nl0a0b (nodes: h1, h2, s1)" in one_line(exc)


@pytest.mark.parametrize("change,says", [
    ({"run": "nl9999"}, "not this lab's"),
    ({"placement": {"h2": "-oProxyCommand=touch PWNED"}}, "not one of the lab's SSH destinations"),
    ({"placement": {"h2": "box9"}}, "not one of the lab's SSH destinations"),
    ({"remote_nslab": "nslab\nreboot"}, "remote_nslab is not a path"),
    ({"remote_nslab": None}, "no remote_nslab"),
    ({"ssh_config": "-oProxyCommand=x"}, "ssh_config is not a path"),
    ({"ssh_config": "relative/cfg"}, "ssh_config is not an absolute path"),
    ({"hosts": None}, "no placement"),
])
def test_a_controller_record_that_nslab_did_not_write_is_refused(change, says):
    from nslab.traffic.captureremote import host_of
    from nslab.errors import LabError
    with pytest.raises(LabError) as exc:
        host_of(controller_record(**change), "nl0a0b", "h2")
    assert says in one_line(exc)


@pytest.fixture
def state(tmp_path, tmp_path_factory, monkeypatch):
    from nslab.runtime import clean, extension
    from nslab.runtime.proc import Result
    monkeypatch.setattr(clean, "STATE_DIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path_factory.mktemp("tmp")))
    monkeypatch.setattr(clean, "run", lambda argv, check=False, **kw: Result(argv, 0, "", ""))
    monkeypatch.setattr(clean, "pids_with_tag", lambda run_id=None, elsewhere=False: {})
    monkeypatch.setattr(clean, "tagged_pids", lambda run_id=None: ({}, {}))
    monkeypatch.setattr(extension, "registered", lambda: {})
    return tmp_path


def test_the_controllers_record_marks_its_lab_live_and_clean_removes_a_dead_ones(state):
    from nslab.runtime import clean
    from nslab.runtime.proc import process_start_time
    me = {"run": "nl0a0b", "pid": os.getpid(), "pid_start": process_start_time(os.getpid())}
    clean.write_controller("nl0a0b", me)
    assert os.listdir(state) == ["nl0a0b.controller.json"]
    assert clean.live_controllers() == ["nl0a0b"] and clean.read_controller("nl0a0b") == me
    assert clean.clean(dry_run=True) == {
        "nl0a0b": [f"skipped: run is live (pid {os.getpid()}); use --force"]}
    clean.write_controller("nl0a0b", dict(me, pid_start=-1.0))  # its controller died
    assert clean.live_controllers() == []
    assert clean.clean() == {"nl0a0b": [f"controller record {state}/nl0a0b.controller.json"]}
    assert os.listdir(state) == []


def test_a_dead_controllers_ssh_control_dir_is_cleaned_and_a_live_ones_kept(state, monkeypatch):
    """A controller killed leaves its SSH control directory (``$TMPDIR/nslab-<run>-
    XXXXXXXX``, its masters' sockets): `nslab clean` removes it by its name once
    the process recorded in it is gone, before and after the controller's record
    exists, even when its master does not answer. Left alone: a live one, one
    being made (no owner record yet), one of a controller in another PID
    namespace, one others can write to, a link in its place, other names."""
    import socket
    import time
    from nslab.errors import CommandError
    from nslab.runtime import clean, sshcontrol
    from nslab.runtime.proc import Result, process_start_time
    ran = []

    def fake_run(argv, check=False, **kw):
        if argv[0] != "ssh":
            return Result(argv, 0, "", "")
        ran.append(argv)
        raise CommandError(argv, None, "", "timed out after 10 s")  # a master that never answers
    monkeypatch.setattr(clean, "run", fake_run)
    monkeypatch.setattr(sshcontrol, "run", fake_run)
    monkeypatch.setattr(sshcontrol.shutil, "which", lambda name: f"/usr/bin/{name}")
    tmp = tempfile.gettempdir()
    old = time.time() - 2 * sshcontrol.CONTROL_GRACE_S

    def owned(run, **change):
        path = sshcontrol.make_control_dir(run)
        rec = json.load(open(os.path.join(path, sshcontrol.CONTROL_OWNER)))
        with open(os.path.join(path, sshcontrol.CONTROL_OWNER), "w") as f:
            json.dump(dict(rec, **change), f)
        return path
    live = sshcontrol.make_control_dir("nl0a0b")
    assert oct(os.stat(live).st_mode & 0o777) == "0o700" and os.listdir(live) == ["owner.json"]
    dead = owned("nl0c0d", pid_start=-1.0)  # its controller died
    with socket.socket(socket.AF_UNIX) as sock:  # a master's socket, left behind
        sock.bind(os.path.join(dead, "9136"))
    foreign = owned("nl0e1f", pid_start=-1.0, pid_ns="pid:[1]")
    young = tempfile.mkdtemp(prefix="nslab-nl0e2f-")  # mkdtemp'd, owner not written yet
    shared = tempfile.mkdtemp(prefix="nslab-nl0e3f-")
    os.chmod(shared, 0o770)
    os.utime(shared, (old, old))
    others = ["nslab-nl0e0f-capture-abcdefgh", "nslab-nl0e0f-abcdefghi", "nslab-export-abcdefgh",
              "nslab-NL0E0F-abcdefgh"]
    for name in others:
        os.mkdir(os.path.join(tmp, name))
    victim = tempfile.mkdtemp()
    os.utime(victim, (old, old))
    os.symlink(victim, os.path.join(tmp, "nslab-nl0e0f-abcdefgh"))  # a link in its place
    skipped = {"nl0a0b": [f"skipped: run is live (pid {os.getpid()}); use --force"]}
    assert clean.clean(dry_run=True) == dict(skipped, nl0c0d=[f"ssh control dir {dead}"])
    assert clean.clean() == dict(skipped, nl0c0d=[f"ssh control dir {dead}"])
    # its master was asked to exit over its own socket (not looked for by name),
    # and the directory went though it did not answer
    assert ran == [["ssh", "-o", "BatchMode=yes", "-o", f"ControlPath={dead}/9136", "-O", "exit",
                    "nslab-control"]]
    assert sorted(os.listdir(tmp)) == sorted(others + [os.path.basename(p) for p in (
        live, victim, foreign, young, shared)] + ["nslab-nl0e0f-abcdefgh"])
    assert clean.clean() == skipped
    # with the controller's record as well (the lab was up), and its owner file unreadable
    me = {"run": "nl0a0b", "pid": os.getpid(), "pid_start": process_start_time(os.getpid())}
    clean.write_controller("nl0a0b", dict(me, pid_start=-1.0))
    with open(os.path.join(live, sshcontrol.CONTROL_OWNER), "w") as f:
        f.write("{")
    assert clean.clean() == {"nl0a0b": [f"controller record {state}/nl0a0b.controller.json"]}
    assert os.path.isdir(live)  # no owner to read, made a moment ago: maybe a lab coming up
    os.utime(live, (old, old))
    assert clean.clean() == {"nl0a0b": [f"ssh control dir {live}"]}
    assert not os.path.exists(live) and os.listdir(state) == []


FAKE_SSH = """#!/bin/sh
# a stand-in for ssh: the remote command line, run here by sh as sshd's shell would
for a in "$@"; do [ "$a" = box9 ] && { echo "ssh: connect to host box9 port 22: Connection refused" >&2; exit 255; }; done
while [ "$1" != "--" ]; do shift; done
exec /bin/sh -c "$2"
"""
FAKE_NSLAB = """#!{python}
import json, os, signal, sys, time
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "args.json"), "w") as f:
    json.dump([os.environ.get("NSLAB_CAPTURE_HOP")] + sys.argv[1:], f)
if sys.argv[2] == "h2:h2-eth9":
    print("nslab: error: capture target h2:h2-eth9: h2 has no interface 'h2-eth9' (it has: "
          "h2-eth0, lo)", file=sys.stderr)
    sys.exit(2)
def done(*_):
    os.write(1, b" END")
    os.write(2, b"7 packets captured on h2:h2-eth0 (stopped)\\n")
    os._exit(0)
signal.signal(signal.SIGINT, done)
os.write(1, b"PCAPNG")
print("capturing h2:h2-eth0 of lab nl0a0b into stdout; Ctrl-C to stop", file=sys.stderr,
      flush=True)
time.sleep(60)
"""


@pytest.fixture
def fake_remote(tmp_path, monkeypatch):
    """``ssh`` that runs the remote command line here, and an ``nslab`` there
    that streams ``PCAPNG`` until SIGINT."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(FAKE_SSH)
    (bin_dir / "nslab").write_text(FAKE_NSLAB.replace("{python}", sys.executable))
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return bin_dir


def test_a_remote_capture_streams_into_its_file_and_stops_when_its_reader_goes(fake_remote,
                                                                               tmp_path):
    from nslab.traffic.capturerun import follow
    from nslab.traffic.captureremote import RemoteCapture, remote_argv
    host = remote_host(nslab=str(fake_remote / "nslab"))
    target = parse_target("h2:h2-eth0")
    out = tmp_path / "h2.pcapng"
    with open(out, "wb") as fh:
        cap = RemoteCapture(host, target, remote_argv(host, target, filt=HOSTILE, grace=60.0),
                            stdout=fh)
    cap.STOP_GRACE = 120.0  # as fake_dumpcap's: a CPU at the idle policy may come late
    cap.wait_ready(120)
    assert cap.alive()
    assert follow(cap, "nl0a0b", poll=0.05, alive=lambda: True,
                  reader_gone=lambda: True) == "reader gone"
    assert not cap.alive() and cap.proc.popen.returncode == 0
    assert (cap.packets, cap.ended) == (7, "stopped")  # SIGINT through the lifeline
    assert out.read_bytes() == b"PCAPNG END"  # it finished its stream
    assert json.load(open(fake_remote / "args.json")) == [
        "1", "capture", "h2:h2-eth0", "nl0a0b", "-w", "-", "-s", "256", "--max-size",
        str(100 * 1024 ** 2), "-f", HOSTILE]  # what is kept is said, not left to the host
    assert not (tmp_path / "PWNED").exists() and not os.path.exists("PWNED")


@pytest.mark.parametrize("kw,target,error,says", [
    ({}, "h2:h2-eth9", InputError,
     "capture on root@box2: capture target h2:h2-eth9: h2 has no interface 'h2-eth9'"),
    ({"dest": "box9"}, "h2:h2-eth0", None,
     "capture of h2:h2-eth0 on box9: no SSH session: ssh: connect to host box9 port 22"),
])
def test_a_remote_capture_that_cannot_start_is_its_one_line(fake_remote, kw, target, error,
                                                            says):
    from nslab.traffic.captureremote import RemoteCapture, remote_argv
    from nslab.errors import LabError
    host = remote_host(nslab=str(fake_remote / "nslab"), **kw)
    t = parse_target(target)
    cap = RemoteCapture(host, t, remote_argv(host, t), stdout=subprocess.DEVNULL)
    with pytest.raises(error or LabError) as exc:
        cap.wait_ready(120)
    assert says in one_line(exc)
    assert error is None or isinstance(exc.value, error)


def test_a_pipe_whose_reader_went_is_seen_and_a_file_never_is(tmp_path):
    from nslab.traffic.capturerun import pipe_closed
    r, w = os.pipe()
    try:
        assert not pipe_closed(w)
        os.close(r)
        assert pipe_closed(w)
    finally:
        os.close(w)
    with open(tmp_path / "f", "wb") as f:
        assert not pipe_closed(f.fileno())


def test_a_study_across_hosts_with_captures_is_refused_before_anything_is_built(tmp_path):
    import functools

    from nslab.experiments.filestudy.study import study_class
    from nslab.run.study import run_study
    path = study(tmp_path)
    cls = study_class(path)
    cfg = cls.Config.preset()
    built = []

    class Multi:
        remote = True

        def __init__(self, *a, **kw):
            built.append(a)

    with pytest.raises(InputError) as exc:
        run_study(cls(), cfg, str(tmp_path / "results"), lab_factory=functools.partial(Multi))
    assert f"{path}:17: captures: a study across hosts (--hosts) cannot take captures" \
        in one_line(exc)
    assert built == []
    # from the command line: before its run directory is made, without root
    res = subprocess.run([NSLAB, "--results", str(tmp_path / "cli"), "run", path, "--hosts",
                          "box1,box2"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert f"{path}:17: captures: a study across hosts" in res.stderr
    assert not os.path.exists(tmp_path / "cli")
    plain = study_class(study(tmp_path, text=STUDY.split("captures:")[0]))
    plain().check_hosts(plain.Config.preset())  # a file without captures runs across hosts


def test_a_study_file_that_reads_routes_or_cpu_on_this_machine_is_refused_across_hosts(tmp_path):
    # the failover study reads BGP routes every 20 ms by `ip -n` here, and its
    # convergence and CPU metrics from this machine's kernel: across hosts its
    # nodes on the other box would show no routes (the settle wait timed out)
    from nslab.experiments.filestudy.study import study_class
    shipped = os.path.join(os.path.dirname(__file__), "..", "..", "studies", "ecmp-failover.yaml")
    cls = study_class(os.path.abspath(shipped))
    with pytest.raises(InputError) as exc:
        cls().check_hosts(cls.Config.preset("quick"))
    msg = one_line(exc)
    assert "ecmp-failover.yaml:" in msg and "a study across hosts (--hosts) cannot " in msg
    assert "run it on one host" in msg
    # from the command line: one line, before anything is built, without root
    res = subprocess.run([NSLAB, "--results", str(tmp_path / "cli"), "run", "ecmp-failover",
                          "--quick", "--hosts", "box1,box2"], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "a study across hosts (--hosts) cannot" in res.stderr
    assert not os.path.exists(tmp_path / "cli")
