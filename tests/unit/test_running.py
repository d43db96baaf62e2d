"""`nslab topo ps` and the names every command gives a running lab, from fake
journals in a private state directory (no root, no lab): which labs count as
running, the table and its JSON, the one line that lists them when a command
must be told which, and `topo up` refusing a name that is up already."""
import json
import os
import time

import pytest

from nslab.cmdline import topocli
from nslab.cmdline.cli import main
from nslab.errors import InputError
from nslab.runtime import clean, running
from nslab.runtime.proc import process_start_time
from nslab.traffic.watch import find_run

NOW = 1_800_000_000.0


@pytest.fixture
def state(tmp_path, monkeypatch):
    d = tmp_path / "state"
    d.mkdir(mode=0o700)
    monkeypatch.setattr(clean, "STATE_DIR", str(d))
    return d


def me():
    """The owner fields of a live lab: this process."""
    return {"pid": os.getpid(), "pid_start": process_start_time(os.getpid())}


def journal(state, run, topology, created, live=True, **more):
    data = {"run": run, **me(), "created": created, "topology": topology, "restore": [], **more}
    if not live:
        data["pid_start"] = -1.0  # its process is gone
    clean.write_journal(run, data)


def three_labs(state, now):
    """pair (2 nodes, up 3 min), a clos lab started by an older nslab (no node
    count in its journal: its topology file says 6), a lab across two hosts
    controlled from here (up 40 s), and a dead lab that must not show."""
    journal(state, "nl2d9c", "pair", now - 180, nodes=2)
    journal(state, "nl9c4a", "clos-2x4", now - 7300)
    os.makedirs(state / "nl9c4a")
    (state / "nl9c4a" / "topology.json").write_text(json.dumps(
        {"name": "clos-2x4", "nodes": {f"n{i}": {} for i in range(6)}, "links": []}))
    journal(state, "nl0dea", "pair", now - 60, live=False, nodes=2)
    clean.write_controller("nl7e57", {"run": "nl7e57", **me(), "created": now - 40,
                                      "topology": "clos-2x2", "hosts": {"box1": "10.0.0.1",
                                                                        "box2": "10.0.0.2"},
                                      "placement": {"spine1": "box1", "spine2": "box2",
                                                    "server1": "box1", "server2": "box2"}})


def test_running_labs_are_the_live_ones_oldest_first(state):
    three_labs(state, NOW)
    labs = running.running_labs()
    assert [lab.run for lab in labs] == ["nl9c4a", "nl2d9c", "nl7e57"]
    clos, pair, multi = labs
    assert (pair.topology, pair.nodes, pair.pid, pair.role) == ("pair", 2, os.getpid(), "local")
    assert clos.nodes == 6  # counted in the topology file it left
    assert (multi.role, multi.hosts, multi.nodes) == ("controller", ("box1", "box2"), 4)
    assert pair.label(NOW) == "nl2d9c (pair, 2 nodes, up 3 min)"
    assert clos.label(NOW) == "nl9c4a (clos-2x4, 6 nodes, up 2 h 1 min)"
    assert multi.label(NOW) == "nl7e57 (clos-2x2, 4 nodes, across box1, box2, up 40 s)"
    assert [lab.run for lab in running.local_labs()] == ["nl9c4a", "nl2d9c"]


def test_a_journal_is_data_and_a_bad_field_shows_as_unknown():
    lab = running.from_journal({"run": "nl1234", "pid": 42, "nodes": "many", "created": "x",
                                "topology": "\x1b]0;owned\x07" + "t" * 200, "host": 5})
    assert (lab.nodes, lab.created, lab.role) == (None, None, "local")
    assert len(lab.topology) <= running.MAX_NAME + 3
    assert lab.label(NOW) == f"nl1234 ({lab.topology})"
    assert running.from_journal({"run": "nl1234", "pid": True}) is None
    assert running.from_journal({"run": "../x", "pid": 42}) is None
    part = running.from_journal({"run": "nl1234", "pid": 42, "host": "box2", "nodes": 3})
    assert (part.role, part.where()) == ("part", "box2 (a part; controlled elsewhere)")


@pytest.mark.parametrize("seconds, text", [(0, "0 s"), (59.9, "59 s"), (60, "1 min"),
                                           (3599, "59 min"), (3600, "1 h"), (7260, "2 h 1 min"),
                                           (86400, "1 d"), (90000, "1 d 1 h"), (-5, "0 s")])
def test_ages_read_as_ps_says_them(seconds, text):
    assert running.age_text(seconds) == text


def test_the_table_has_a_row_per_lab_with_its_host(state):
    three_labs(state, NOW)
    t = topocli.ps_table(running.running_labs(), NOW)
    assert t.row_count == 3
    cells = {c.header: [str(x) for x in c._cells] for c in t.columns}
    assert cells["run"] == ["nl9c4a", "nl2d9c", "nl7e57"]
    assert cells["nodes"] == ["6", "2", "4"]
    assert cells["up"] == ["2 h 1 min", "3 min", "40 s"]
    assert cells["pid"] == [str(os.getpid())] * 3
    assert cells["host(s)"] == ["this host", "this host", "box1, box2"]


def test_ps_and_topo_ps_print_the_table_or_json(state, capsys):
    three_labs(state, time.time())
    assert main(["ps", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["run"] for r in rows] == ["nl9c4a", "nl2d9c", "nl7e57"]
    assert set(rows[0]) == {"run", "topology", "nodes", "created_unix_s", "age_s", "pid",
                            "hosts", "role"}
    assert rows[2]["hosts"] == ["box1", "box2"] and rows[2]["role"] == "controller"
    assert main(["topo", "ps"]) == 0
    out = capsys.readouterr().out
    assert "3 labs running" in out and "nl2d9c" in out and "clos-2x4" in out


def test_ps_with_nothing_running_says_so(state, capsys):
    assert main(["ps"]) == 0
    assert "no lab is running on this host" in capsys.readouterr().out
    assert main(["ps", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_a_name_from_a_journal_cannot_drive_the_terminal(state, capsys):
    journal(state, "nl2d9c", "pair\x1b[2J", time.time(), nodes=2)
    assert main(["ps"]) == 0
    out = capsys.readouterr().out
    assert "\x1b[2J" not in out and "pair\\x1b[2J" in out


def test_watch_with_two_labs_names_each_one(state):
    three_labs(state, time.time() - 1)
    with pytest.raises(InputError) as exc:
        find_run(None)
    msg = str(exc.value)
    # the controller's lab has no nodes here: watch lists what it could watch
    assert msg.startswith("2 labs are running: nl9c4a (clos-2x4, 6 nodes, up 2 h 1 min), "
                          "nl2d9c (pair, 2 nodes, up 3 min); name the one to watch "
                          "(nslab watch RUN)"), msg
    assert find_run("nl2d9c") == "nl2d9c"
    with pytest.raises(InputError, match="no lab 'nl0dea' is running on this host .*nslab topo ps"):
        find_run("nl0dea")


def test_watch_and_capture_with_nothing_running(state):
    from nslab.cmdline.capturecli import find_lab
    with pytest.raises(InputError, match="no lab is running on this host"):
        find_run(None)
    with pytest.raises(InputError, match="captured from the machine that controls it"):
        find_lab(None)
    journal(state, "nl2d9c", "pair", time.time(), nodes=2)
    assert find_lab(None) == "nl2d9c"


class NoLab:
    """Stands for Lab in `topo up`: a test must never build one."""

    def __init__(self, *a, **kw):
        raise AssertionError("a lab would have been built")


@pytest.fixture
def no_lab(monkeypatch):
    monkeypatch.setattr(topocli, "Lab", NoLab)


def _one_line(capsys):
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


def test_topo_up_of_a_name_that_is_up_is_refused_in_one_line(state, tmp_path, capsys, no_lab):
    journal(state, "nl2d9c", "pair", time.time() - 180, nodes=2)
    rc = main(["--results", str(tmp_path / "r"), "topo", "up", "pair", "--bw", "1Gbit"])
    err = _one_line(capsys)
    assert rc == 2
    assert "topology 'pair' is already up: nl2d9c (pair, 2 nodes, up 3 min), pid" in err
    assert "--name NAME" in err and "--again" in err and "nslab topo ps" in err
    # a name that is up too
    journal(state, "nl5e55", "mine", time.time(), nodes=2)
    assert main(["--results", str(tmp_path / "r"), "topo", "up", "pair", "--name", "mine"]) == 2
    assert "a lab named 'mine' is already up: nl5e55" in _one_line(capsys)
    assert not os.path.exists(tmp_path / "r" / "logs"), "refused before any log is made"


def test_topo_up_with_another_name_or_again_goes_on_to_build(state, tmp_path, capsys, no_lab):
    journal(state, "nl2d9c", "pair", time.time(), nodes=2)
    for extra in (["--name", "second-pair"], ["--again"]):
        with pytest.raises(AssertionError, match="would have been built"):
            main(["--results", str(tmp_path / "r"), "topo", "up", "pair", *extra])


def test_a_bad_name_is_one_line(state, tmp_path, capsys, no_lab):
    assert main(["--results", str(tmp_path / "r"), "topo", "up", "pair", "--name", "x\ty"]) == 2
    assert "--name 'x\\ty': use 1-120 printable ASCII characters" in _one_line(capsys)
