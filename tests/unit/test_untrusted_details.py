"""Smaller holes of issue 31, each closed with a test (no root): a study's
`file:` stays in its folder, a rate under 1 bit/s never reaches tc,
nslab-pktgen refuses values it cannot honour, NSLAB_STATE_DIR must be root's
own and a journal's restore commands are data, and JSON from a folder is
read with bounds."""
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from nslab.model import bounded, naming
from nslab.runtime import clean, restore
from nslab.errors import CapabilityError, InputError

STUDY = """\
name: filed
title: a topology from a file
topology: {file: FILE}
duration: 2
traffic:
  - {id: p, kind: ping, src: h1, dst: h2}
metrics:
  - {metric: latency, flow: p}
"""
TOPO = "nodes: {h1: {}, h2: {}}\nlinks: [[h1, h2]]\n"


def _study(folder, file_value):
    from nslab.experiments.filestudy.spec import load
    p = folder / "study.yaml"
    p.write_text(STUDY.replace("FILE", json.dumps(file_value)))
    try:
        load(str(p))
    except InputError as exc:
        assert "\n" not in str(exc)
        return str(exc)
    return None


# -- `file:` in a study ------------------------------------------------------------------------
def test_a_topology_file_beside_the_study_or_below_it_loads(tmp_path):
    (tmp_path / "t.yaml").write_text(TOPO)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "t.yaml").write_text(TOPO)
    assert _study(tmp_path, "t.yaml") is None
    assert _study(tmp_path, "sub/t.yaml") is None


@pytest.mark.parametrize("value", ["/etc/passwd.yaml", "../t.yaml", "sub/../../t.yaml",
                                   "./t.yaml", "sub//t.yaml", ".t.yaml", "sub\\..\\t.yaml"])
def test_absolute_and_dotted_paths_are_refused_by_the_model(tmp_path, value):
    msg = _study(tmp_path, value)
    assert msg.startswith(f"{tmp_path}/study.yaml:3: topology.file: ")
    assert "a file in the study file's own folder" in msg


def test_a_link_out_of_the_folder_says_nothing_about_what_is_outside(tmp_path):
    folder = tmp_path / "lab"
    folder.mkdir()
    outside = tmp_path / "secret.yaml"
    outside.write_text("nodes: {h1: {}}\nlinks: [[h1, nowhere]]\n")  # invalid: would be echoed
    (folder / "exists.yaml").symlink_to(outside)
    (folder / "missing.yaml").symlink_to(tmp_path / "nothing-here.yaml")
    (folder / "dir").symlink_to(tmp_path)
    msgs = {v: _study(folder, v) for v in ("exists.yaml", "missing.yaml", "dir/secret.yaml",
                                           "absent.yaml")}
    for value, msg in msgs.items():
        assert msg == (f"{folder}/study.yaml:3: topology.file: {value!r} is not a YAML file in "
                       "the study file's folder"), msg
        assert "secret" not in msg.replace("dir/secret.yaml", "") and "nowhere" not in msg


def test_a_link_inside_the_folder_is_followed(tmp_path):
    (tmp_path / "real.yaml").write_text(TOPO)
    (tmp_path / "alias.yaml").symlink_to(tmp_path / "real.yaml")
    assert _study(tmp_path, "alias.yaml") is None


# -- rates under 1 bit/s ---------------------------------------------------------------------
@pytest.mark.parametrize("bw, message", [("0.5bit", "below 1 bit/s"), ("1.0e-7", "below 1 bit/s"),
                                         (".nan", "not a finite number"),
                                         ("0bit", "must be positive")])
def test_a_rate_under_one_bit_is_refused_with_its_line(tmp_path, bw, message):
    from nslab.model.topo import Topology
    p = tmp_path / "t.yaml"
    p.write_text(f"nodes: {{h1: {{}}, h2: {{}}}}\nlinks:\n  - {{a: h1, b: h2,\n     bw: {bw}}}\n")
    with pytest.raises(InputError) as info:
        Topology.from_yaml(str(p))
    assert str(info.value).startswith(f"{p}:4: links.0.bw: bad rate ")
    assert message in str(info.value)


def test_one_bit_per_second_is_the_least_rate_and_reaches_tc_as_such():
    from nslab.model.shaping import Shaping, parse_rate
    assert parse_rate("1bit") == 1 and parse_rate("1.9bit") == 1
    assert any(" rate 1bit " in line for line in Shaping(rate=1).tc_batch("eth0"))


def test_a_study_event_with_a_rate_under_one_bit_names_its_line(tmp_path):
    from nslab.experiments.filestudy.spec import load
    p = tmp_path / "s.yaml"
    p.write_text(STUDY.replace("{file: FILE}", "{ready: pair}") +
                 "events:\n  - {at: 1, do: link-rate, link: [h1, h2],\n     rate: 0.2bit}\n")
    with pytest.raises(InputError, match=r"s.yaml:11: events.0.rate: bad rate '0.2bit': "
                                         r"below 1 bit/s"):
        load(str(p))


# -- nslab-pktgen ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pg():
    from nslab.traffic.pktgen import pktgen_path
    try:
        return pktgen_path()
    except CapabilityError:
        pytest.skip("nslab-pktgen not built (make setup)")


@pytest.mark.parametrize("rate", ["1e-300", "0.0001", "-1", "nan", "inf", "1e10", "5x", ""])
def test_pktgen_refuses_a_rate_it_cannot_pace_in_one_line(pg, rate):
    res = subprocess.run([pg, "send", "--dst", "127.0.0.1", "--rate", rate, "--duration", "0.2"],
                         capture_output=True, text=True, timeout=10)
    assert res.returncode == 2 and res.stdout == ""  # refused before a socket is opened
    assert res.stderr == (f"nslab-pktgen: bad --rate '{rate}': 0 (as fast as it can) or "
                          "frames/s from 0.001 to 1e+09\n")


@pytest.mark.parametrize("args, message", [
    (["--size", "64.5"], "bad --size '64.5': a whole number from 64 to 1518"),
    (["--port", "0"], "bad --port '0': a whole number from 1 to 65535"),
    (["--count", "2.5"], "bad --count '2.5': a whole number from 0 to 1e+12"),
    (["--duration", "1e9"], "bad --duration '1e9': a number from 0.001 to 86400"),
])
def test_pktgen_refuses_other_values_out_of_range(pg, args, message):
    res = subprocess.run([pg, "send", "--dst", "127.0.0.1", "--rate", "1", *args],
                         capture_output=True, text=True, timeout=10)
    assert res.returncode == 2 and res.stderr == f"nslab-pktgen: {message}\n"


@pytest.mark.timed
def test_a_slow_rate_ends_with_its_trial_not_after_its_next_frame(pg):
    # one frame, then the next is due in 1000 s: the sender still stops at 0.3 s
    t0 = time.monotonic()
    res = subprocess.run([pg, "send", "--dst", "127.0.0.1", "--port", "9", "--rate", "0.001",
                          "--duration", "0.3"], capture_output=True, text=True, timeout=10)
    took = time.monotonic() - t0
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["sent"] + out["errors"] == 1 and 0.3 <= out["elapsed"] < 0.35 and took < 2


@pytest.mark.parametrize("kwargs, message", [
    (dict(rate=1e-300), "rate 1e-300: 0 (as fast as it can) or frames/s from 0.001 to 1e+09"),
    (dict(rate=float("nan")), "rate nan: not a finite number"),
    (dict(rate=100, duration=0), "duration 0: 0.001 to 86400 s"),
    (dict(rate=100, size=40), "size 40: a whole number of bytes from 64 to 1518"),
    (dict(rate=100, count=-1), "count -1: a whole number from 0 to 1000000000000"),
])
def test_the_python_side_refuses_the_same_values(kwargs, message):
    from nslab.traffic.pktgen import send_argv
    args = dict(dst="10.0.0.2", port=9, size=64, duration=1.0)
    args.update(kwargs)
    with pytest.raises(InputError) as info:
        send_argv(**args)
    assert str(info.value) == f"nslab-pktgen: {message}"


def test_send_argv_is_what_the_binary_takes(pg):
    from nslab.traffic.pktgen import send_argv
    argv = send_argv("127.0.0.1", 9, 64, 0.001, 0.1, count=1)
    assert argv[1:] == ["send", "--dst", "127.0.0.1", "--port", "9", "--size", "64", "--rate",
                        "0.001", "--duration", "0.1", "--count", "1", "--mode", "udp"]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    assert res.returncode == 0, res.stderr


def test_a_study_pktgen_flow_below_the_least_rate_is_refused(tmp_path):
    from nslab.experiments.filestudy.spec import load
    p = tmp_path / "s.yaml"
    p.write_text(STUDY.replace("{file: FILE}", "{ready: pair}").replace(
        "{id: p, kind: ping, src: h1, dst: h2}", "{id: p, kind: pktgen, src: h1, dst: h2,\n"
        "     rate: 1.0e-300}").replace("latency", "delivery"))
    with pytest.raises(InputError, match=r"s.yaml:7: traffic.0.rate: .*greater than or equal "
                                         r"to 0.001"):
        load(str(p))


# -- NSLAB_STATE_DIR ------------------------------------------------------------------------
def _other_owned(path):
    """Make ``path`` another user's (as root), or return the euid that makes it
    someone else's (as a user)."""
    if os.geteuid() == 0:
        os.chown(path, 12345, -1)
        return None
    return os.geteuid() + 1


def test_a_state_directory_of_roots_own_is_accepted(tmp_path):
    d = tmp_path / "state"
    d.mkdir(mode=0o755)
    assert naming.state_dir_problem(str(d)) is None
    assert naming.state_dir_problem(str(d / "not" / "yet")) is None  # nslab creates the rest
    assert naming.check_state_dir(str(d)) == str(d)


def test_state_directories_root_cannot_trust_are_refused(tmp_path):
    d = tmp_path / "state"
    d.mkdir(mode=0o755)
    assert naming.state_dir_problem("run/nslab") == "not an absolute path without '..'"
    assert naming.state_dir_problem(f"{d}/../state") == "not an absolute path without '..'"
    link = tmp_path / "link"
    link.symlink_to(d)
    assert naming.state_dir_problem(str(link)) == f"{link} is a symbolic link"
    assert naming.state_dir_problem(str(link / "below")) == f"{link} is a symbolic link"
    os.chmod(d, 0o775)
    assert naming.state_dir_problem(str(d)) == \
        f"{d} is writable by group or others (drwxrwxr-x)"
    os.chmod(d, 0o1777)  # root's sticky directory is fine above the state directory (/tmp)
    assert "writable by group or others" in naming.state_dir_problem(str(d))
    below = naming.state_dir_problem(str(d / "below"))
    if os.geteuid() == 0:
        assert below is None
    else:  # a user's sticky directory is not root's
        assert below == f"{d} is writable by group or others (drwxrwxrwt)"
    os.chmod(d, 0o755)
    euid = _other_owned(d)
    assert "belongs to uid" in naming.state_dir_problem(str(d), euid)
    f = tmp_path / "file"
    f.write_text("")
    assert naming.state_dir_problem(str(f)) == f"{f} is not a directory"


def test_nslab_clean_refuses_an_unsafe_state_directory_in_one_line(tmp_path, monkeypatch):
    d = tmp_path / "state"
    d.mkdir(mode=0o777)
    os.chmod(d, 0o777)
    journal = {"run": "nl1234", "pid": 1, "restore": [{"what": "x", "argv": [["true"]]}]}
    (d / "nl1234.json").write_text(json.dumps(journal))
    monkeypatch.setenv("NSLAB_STATE_DIR", str(d))
    monkeypatch.setattr(clean, "STATE_DIR", str(d))
    monkeypatch.setattr(clean, "run", lambda *a, **kw: pytest.fail("ran a command"))
    with pytest.raises(InputError) as info:
        clean.discover()
    assert str(info.value).startswith(f"NSLAB_STATE_DIR={d}: {d} is writable by group or "
                                      "others (drwxrwxrwx); the state directory holds root's")
    with pytest.raises(InputError):
        clean.read_journal("nl1234")
    with pytest.raises(InputError):
        clean.write_journal("nl1234", journal)


def test_the_nslab_command_refuses_it_too(tmp_path):
    d = tmp_path / "state"
    d.mkdir()
    os.chmod(d, 0o777)
    code = ("import sys; from nslab.runtime import clean; from nslab.cmdline import cli; "
            "clean.run = lambda *a, **k: sys.exit('ran a command'); "
            "clean.registered = lambda: {}; "
            "from nslab.runtime import caps; caps.require_root = lambda *a: None; "
            "sys.exit(cli.main(['clean', '--dry-run']))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, timeout=60, env=dict(os.environ, NSLAB_STATE_DIR=str(d)))
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1 and f"NSLAB_STATE_DIR={d}: " in res.stderr


# -- a journal's restore commands are data ---------------------------------------------------
def test_the_uplink_restore_commands_nslab_writes_pass_the_check():
    from nslab.ovs.uplink import restore_argv
    snap = {"iface": "eth1", "mtu": 1500, "up": False, "addrs": ["192.168.5.2/24"],
            "routes": [{"dst": "default", "gateway": "192.168.5.1", "metric": 100},
                       {"dst": "10.9.0.0/16"}, {"dst": "10.1.2.3"}],
            "offloads": {"tx-checksumming": "on", "generic-segmentation-offload": "off",
                         "tcp-segmentation-offload": "on"}}
    argvs = restore_argv(snap, "nl12ab-b1")
    assert len(argvs) == 10
    assert [restore.restore_problem(a, "nl12ab") for a in argvs] == [None] * 10


def test_the_alias_removals_of_alias_serve_pass_the_check():
    # experiments/alias/twobox.py journals one `ip addr del` per alias it adds
    argvs = [["ip", "addr", "del", f"10.0.1.{i}/8", "dev", "h2-eth0"] for i in range(1, 5)]
    assert [restore.restore_problem(a, "nl12ab") for a in argvs] == [None] * 4
    assert restore.restore_problem(["ip", "addr", "del", "10.0.1.1/8", "dev", "h2-eth0",
                                  "label", "x"], "nl12ab")


@pytest.mark.parametrize("argv", [
    ["sh", "-c", "touch /tmp/x"], ["true"], "ip link set dev eth1 up", [],
    ["ip", "link", "set", "dev", "eth1", "up", "&&", "id"],
    ["ip", "-batch", "/etc/shadow"],
    ["ip", "link", "set", "dev", "eth1", "mtu", "9"],
    ["ip", "addr", "replace", "10.0.0.1/24", "dev", "eth1;id"],
    ["ip", "route", "replace", "default", "dev", "eth1", "table", "5"],
    ["ip", "route", "replace", "default", "via", "x", "dev", "eth1"],
    ["ovs-vsctl", "--timeout=10", "--if-exists", "del-port", "br-int", "eth1"],
    ["ovs-vsctl", "--timeout=10", "--if-exists", "del-port", "nl9999-b1", "eth1"],
    ["ethtool", "-K", "eth1", "rx", "off"],
    ["ip", "link", "set", "dev", "eth1", 5],
])
def test_anything_else_is_refused(argv):
    assert restore.restore_problem(argv, "nl12ab")


def test_a_forged_restore_item_runs_nothing_at_all(monkeypatch):
    ran = []
    monkeypatch.setattr(restore, "run", lambda argv, **kw: ran.append(argv))
    item = {"what": "uplink eth1", "argv": [["ip", "link", "set", "dev", "eth1", "up"],
                                            ["sh", "-c", "id"]]}
    with pytest.raises(RuntimeError, match="refused: not a restore command nslab writes"):
        restore.run_restore(item, "nl12ab")
    two = {"what": "x", "argv": [["ip", "link", "set", "dev", "eth1", "up"],
                                 ["ip", "link", "set", "dev", "eth0", "down"]]}
    with pytest.raises(RuntimeError, match="one item restores one interface"):
        restore.run_restore(two, "nl12ab")
    assert ran == []
    restore.run_restore({"what": "ok", "argv": [["ip", "link", "set", "dev", "eth1", "up"]]}, "nl12ab")
    assert ran == [["ip", "link", "set", "dev", "eth1", "up"]]


def test_a_journal_is_read_as_data(tmp_path, monkeypatch):
    monkeypatch.setattr(clean, "STATE_DIR", str(tmp_path))
    (tmp_path / "nl1234.json").write_text(json.dumps(
        {"run": "nl1234", "pid": "1; reboot", "restore": "rm -rf /"}))
    j = clean.read_journal("nl1234")
    assert j["restore"] == [] and clean.run_is_live(j) is False
    (tmp_path / "nl1234.json").write_text("[" * 100000)
    assert clean.read_journal("nl1234") is None
    inv = clean.Inventory("nl1234", journal={"run": "nl1234",
                                             "restore": [{"what": "\x1b]0;pwned\x07eth1"}]})
    assert all("\x1b" not in line and "\x07" not in line for line in inv.describe())


# -- JSON from a folder ---------------------------------------------------------------------
def test_deep_json_is_a_value_error_not_a_recursion_error():
    for text in ("[" * 100000, "[" * 65 + "]" * 65, '{"a":' * 70 + "1" + "}" * 70):
        with pytest.raises(ValueError, match="nested more than 64 levels deep"):
            bounded.loads(text)
    assert bounded.loads("[" * 64 + "]" * 64) is not None


def test_a_huge_json_file_is_not_read_whole(tmp_path):
    p = tmp_path / "big.json"
    p.write_text("[" + "1," * 1000 + "1]")
    with pytest.raises(bounded.BadJson, match="larger than 100 bytes"):
        bounded.load(str(p), max_bytes=100)


def test_stored_results_with_deep_or_odd_json_are_one_line_or_skipped(tmp_path):
    from nslab.experiments.filestudy.records import SCHEMA
    from nslab.store.results import ResultStore, iter_records
    run = tmp_path / "run"
    run.mkdir()
    (run / "provenance.json").write_text("[" * 100000)
    (run / "records.jsonl").write_text("[" * 100000 + "\n" + "[1, 2]\n" + "{}\n")
    store = ResultStore.open(str(run))  # no RecursionError, no AttributeError
    assert store.provenance() == {} and store.experiment == ""
    assert list(iter_records(str(run / "records.jsonl"))) == [{}]
    with pytest.raises(InputError) as info:
        SCHEMA.load(str(run))
    assert str(info.value) == f"{run}/records.jsonl:1: not a JSON record (nested too deeply)"
    (run / "records.jsonl").write_text("[1, 2]\n{}\n")
    with pytest.raises(InputError, match=r"records.jsonl:1: not a JSON record \(a list\)"):
        SCHEMA.load(str(run))
    (run / "provenance.json").write_text(textwrap.dedent('["a list"]'))
    assert ResultStore.open(str(run)).provenance() == {}
