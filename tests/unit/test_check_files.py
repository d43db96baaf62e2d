"""Checks files are data from anyone: every field of every check kind parsed into
a typed value, a mistake one line naming the file, the line and the field, and
no file (Hypothesis over broken ones) makes the loader fail any other way. A
topology file carries its checks beside its nodes. No root."""
import copy
import os
import re

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nslab.errors import InputError, LabError, TopologyError
from nslab.model import checkfile
from nslab.model.checks import LinkChange

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "clos-lab")

#: A valid file with every kind of check and every field.
BASE = {
    "title": "every kind",
    "topology": "lab.yaml",
    "stages": [
        {"title": "up", "checks": [
            {"check": "ping", "from": "h1", "to": "h2", "source": "10.0.0.1", "count": 5,
             "interval": 0.1, "wait": 2, "loss": "20%", "rtt": {"at_most": "5ms"},
             "within": 10, "every": 1, "name": "h1 reaches h2"},
            {"check": "route", "node": "r1", "dst": "10.0.200.2/32", "nexthops": 2,
             "expect": {"protocol": "bgp"}, "within": 30},
            {"check": "route", "node": "r1", "dst": "default", "present": False},
            {"check": "interface", "node": "r1", "interface": "r1-eth0", "state": "up",
             "mtu": 1500, "counters": {"rx_errors": {"at_most": 0}},
             "expect": {"qdisc": "noqueue"}},
            {"check": "bgp", "node": "r1", "peers": {"r1-eth0": "established",
                                                     "10.0.0.2": "down"}},
            {"check": "bgp", "node": "r1", "show": "ipv4",
             "expect": {"routes": {"10.0.200.2/32": [{"valid": True}]}}},
            {"check": "bfd", "node": "r1", "peers": {"r1-eth0": "up"}},
            {"check": "throughput", "from": "h1", "to": "h2", "at_least": "100Mbit", "time": 2,
             "streams": 2},
        ]},
        {"title": "down", "include_previous": True,
         "links": [{"link": "r1-h2", "state": "down"}, {"link": "h1-r1", "rate": "10Mbit"},
                   {"link": "h1-r1", "delay": "50ms", "jitter": "5ms", "loss": "1%"},
                   {"link": "h1-r1", "reset": True}],
         "checks": [{"check": "ping", "from": "h1", "to": "h2", "loss": 100}]},
    ],
}

#: (path into BASE, hostile value, what the one line must say). Never a shell.
HOSTILE = [
    (("stages", 0, "checks", 0, "to"), "h2; reboot", "neither a node name nor an IP address"),
    (("stages", 0, "checks", 0, "to"), "10.0.0.2\nnetns add x", "neither a node name"),
    (("stages", 0, "checks", 0, "from"), "h1 h2", "not a valid node name"),
    (("stages", 0, "checks", 0, "source"), "fe80::1%eth0", "zone ids"),
    (("stages", 0, "checks", 0, "count"), 10**9, "less than or equal to 100"),
    (("stages", 0, "checks", 0, "count"), "3", "valid integer"),
    (("stages", 0, "checks", 0, "loss"), "lots", "not a percentage"),
    (("stages", 0, "checks", 0, "loss"), -1, "greater than or equal to 0"),
    (("stages", 0, "checks", 0, "within"), 10**9, "less than or equal to 600"),
    (("stages", 0, "checks", 0, "within"), float("nan"), "finite number"),
    (("stages", 0, "checks", 0, "every"), 0, "greater than or equal to 0.1"),
    (("stages", 0, "checks", 0, "rtt"), {}, "give at_least, at_most or both"),
    (("stages", 0, "checks", 0, "rtt"), {"at_least": 9, "at_most": 1}, "is above at_most"),
    (("stages", 0, "checks", 0, "name"), "x\x1b[2J", "not a valid label"),
    (("stages", 0, "checks", 0, "exec"), "rm -rf /", "unknown key 'exec'"),
    (("stages", 0, "checks", 0, "check"), "shell", "'shell' is not one of ping, route"),
    (("stages", 0, "checks", 1, "dst"), "10.0.200.1/24", "not a prefix"),
    (("stages", 0, "checks", 1, "nexthops"), 0, "greater than or equal to 1"),
    (("stages", 0, "checks", 1, "expect"), {1: "x"}, "a JSON key is text"),
    (("stages", 0, "checks", 2, "nexthops"), 2, "an absent route has no nexthops"),
    (("stages", 0, "checks", 3, "interface"), "eth0;x", "not a valid interface name"),
    (("stages", 0, "checks", 3, "state"), "sideways", "is not one of"),
    (("stages", 0, "checks", 3, "counters"), {"rx_everything": {"at_most": 0}}, "rx_everything"),
    (("stages", 0, "checks", 4, "peers"), {"r1 eth0": "established"}, "neither an interface"),
    (("stages", 0, "checks", 4, "peers"), {"r1-eth0": "open"}, "is not one of"),
    (("stages", 0, "checks", 4, "show"), "running-config", "is not one of"),
    (("stages", 0, "checks", 5, "show"), "summary; write", "is not one of"),
    (("stages", 0, "checks", 6, "peers"), {}, "give peers, expect or both"),
    (("stages", 0, "checks", 7, "at_least"), "fast", "bad rate"),
    (("stages", 0, "checks", 7, "time"), 3600, "less than or equal to 60"),
    (("stages", 0, "checks", 7, "to"), "10.0.0.2", "not a valid node name"),
    (("stages", 1, "links", 0, "link"), "r1", "is not a link"),
    (("stages", 1, "links", 0, "link"), "r1-r1", "a link joins two different nodes"),
    (("stages", 1, "links", 0, "state"), "flapping", "is not one of"),
    (("stages", 1, "links", 1, "rate"), "0bit", "bad rate"),
    (("stages", 1, "links", 2, "delay"), "2h", "bad delay"),
    (("stages", 1, "links", 3, "rate"), "1Gbit", "reset takes nothing else"),
    (("stages", 1, "links"), [{"link": "a-b"}], "give rate, delay, jitter, loss, state or reset"),
    (("stages", 1, "title"), "", "not a valid label"),
    (("stages",), [], "at least one"),
    (("topology",), "../../etc/passwd.yaml", "a YAML file name in the folder"),
    (("topology",), "lab.py", "a YAML file name in the folder"),
]


def _write(tmp_path, doc, name="checks.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    return str(path)


def _set(doc, path, value):
    cur = doc
    for p in path[:-1]:
        cur = cur[p]
    cur[path[-1]] = value


def test_the_base_file_loads_with_every_kind_and_stages_resolved(tmp_path):
    suite = checkfile.load(_write(tmp_path, BASE))
    assert suite.staged and suite.title == "every kind" and suite.topology == "lab.yaml"
    one, two = suite.stages
    assert [c.check for _, c in one.checks] == ["ping", "route", "route", "interface", "bgp",
                                              "bgp", "bfd", "throughput"]
    # include_previous: stage 1's checks first (their origin kept), then its own
    assert [o for o, _ in two.checks] == [1] * 8 + [2]
    assert [c.describe() for c in two.links] == [
        "r1-h2 down", "h1-r1 rate 10.0 Mbit/s", "h1-r1 delay 50ms jitter 5ms loss 1%",
        "h1-r1 reset"]
    ping = one.checks[0][1]
    assert (ping.src, ping.to, ping.loss, ping.rtt.at_most) == ("h1", "h2", 20.0, 5.0)
    assert one.checks[4][1].command == "show bgp summary json"
    assert one.checks[7][1].at_least == 100_000_000


@pytest.mark.parametrize("path,value,says", HOSTILE, ids=[
    f"{'.'.join(map(str, p))}={str(v)[:20]!r}" for p, v, _ in HOSTILE])
def test_a_hostile_value_is_one_line_naming_file_line_and_field(tmp_path, path, value, says):
    doc = copy.deepcopy(BASE)
    _set(doc, path, value)
    f = _write(tmp_path, doc)
    with pytest.raises(InputError) as err:
        checkfile.load(f)
    msg = str(err.value)
    assert "\n" not in msg
    assert re.match(rf"{re.escape(f)}:\d+: ", msg), msg
    field = ".".join(str(p) for p in path[:-1] if not isinstance(p, str) or p != "peers")
    assert field.split(".")[0] in msg, msg
    if says:
        assert says in msg, msg


def test_the_line_is_the_field_s_own(tmp_path):
    f = tmp_path / "checks.yaml"
    f.write_text("checks:\n  - check: ping\n    from: h1\n    to: h2\n    loss: 300\n")
    with pytest.raises(InputError, match=r"checks\.yaml:5: checks\.0\.loss: "):
        checkfile.load(str(f))
    f.write_text("checks:\n  - {check: ping, from: h1, to: h2}\n  - {check: ping, frm: h1}\n")
    with pytest.raises(InputError, match=r"checks\.yaml:3: checks\.1: unknown key 'frm' "
                                         r"\(allowed: name, within, every, check, from"):
        checkfile.load(str(f))


def test_a_file_gives_checks_or_stages(tmp_path):
    for doc, says in (({"title": "x"}, "give checks or stages"),
                      ({"checks": [], "stages": [{"title": "a"}]}, "not both"),
                      (["checks"], "a mapping"),
                      ({"checks": [{"check": "ping"}]}, "'from' is required")):
        with pytest.raises(InputError, match=re.escape(says)):
            checkfile.load(_write(tmp_path, doc))
    suite = checkfile.load(_write(tmp_path, {"checks": [{"check": "route", "node": "h1",
                                                         "dst": "default"}]}))
    assert not suite.staged and len(suite.stages) == 1 and suite.stages[0].number == 1


def test_sizes_are_bounded(tmp_path):
    many = {"checks": [{"check": "ping", "from": "h1", "to": "h2"}] * 501}
    with pytest.raises(InputError, match="at most 500"):
        checkfile.load(_write(tmp_path, many))
    deep = {"checks": [{"check": "bgp", "node": "r1", "expect": {}}]}
    cur = deep["checks"][0]["expect"]
    for _ in range(20):
        cur["a"] = {}
        cur = cur["a"]
    with pytest.raises(InputError, match="nested more than 16 deep"):
        checkfile.load(_write(tmp_path, deep))


def test_a_yaml_value_that_is_not_json_is_refused(tmp_path):
    f = tmp_path / "checks.yaml"
    f.write_text("checks:\n  - check: bgp\n    node: r1\n    expect: {when: 2001-12-14}\n")
    with pytest.raises(InputError, match="a date is not a JSON value"):
        checkfile.load(str(f))


def test_a_link_or_a_fifo_is_refused_unread(tmp_path):
    real = _write(tmp_path, BASE, "real.yaml")
    os.symlink(real, tmp_path / "link.yaml")
    with pytest.raises(LabError):
        checkfile.load(str(tmp_path / "link.yaml"))
    os.mkfifo(tmp_path / "fifo.yaml")
    with pytest.raises(LabError):
        checkfile.load(str(tmp_path / "fifo.yaml"))   # returns at once: never waited on


# -- a topology file with checks ---------------------------------------------------------
TOPO = {"nodes": {"h1": {"ip": "10.0.0.1/24"}, "h2": {"ip": "10.0.0.2/24"}},
        "links": [["h1", "h2"]]}


def test_a_topology_file_carries_its_checks_beside_its_nodes(tmp_path):
    doc = dict(TOPO, checks=[{"check": "ping", "from": "h1", "to": "h2"}])
    f = _write(tmp_path, doc, "lab.yaml")
    topo = checkfile.topology_file(f)
    assert sorted(topo.nodes) == ["h1", "h2"] and topo.name.endswith("lab.yaml")
    suite = checkfile.load(f)
    assert [c.describe() for _, c in suite.stages[0].checks] == ["ping h1 -> h2"]
    # and one without checks is read as any topology file
    assert sorted(checkfile.topology_file(_write(tmp_path, TOPO, "plain.yaml")).nodes) == \
        ["h1", "h2"]
    with pytest.raises(InputError, match="this topology file has no checks"):
        checkfile.load(_write(tmp_path, TOPO, "plain.yaml"))


def test_a_topology_file_s_checks_name_only_its_nodes(tmp_path):
    doc = dict(TOPO, stages=[{"title": "a", "links": [{"link": "h1-h9", "state": "down"}]}])
    with pytest.raises(InputError, match=r"lab\.yaml:\d+: stages\.0\.links\.0: no node 'h9'"):
        checkfile.load(_write(tmp_path, doc, "lab.yaml"))
    doc = dict(TOPO, checks=[{"check": "ping", "from": "h1", "to": "h3"}])
    with pytest.raises(InputError, match="no node 'h3' in this topology"):
        checkfile.topology_file(_write(tmp_path, doc, "lab.yaml"))


def test_a_topology_error_still_names_its_line_when_the_file_has_checks(tmp_path):
    f = tmp_path / "lab.yaml"
    f.write_text("nodes:\n  h1: {}\n  h2: {ip: 10.0.0.300/24}\nlinks: [[h1, h2]]\n"
                 "checks:\n  - {check: ping, from: h1, to: h2}\n")
    with pytest.raises(TopologyError, match=r"lab\.yaml:3: nodes\.h2\.ip"):
        checkfile.topology_file(str(f))


def test_the_example_lab_and_its_checks_load():
    suite = checkfile.load(os.path.join(EXAMPLE, "checks.yaml"))
    assert [p.title for p in suite.stages] == ["The fabric is up",
                                              "Spine 2 loses its link to server 1",
                                              "The link comes back"]
    assert suite.stages[1].links == (LinkChange(link="spine2-server1", state="down"),)
    assert [c.describe() for _, c in suite.stages[2].checks] == \
        [c.describe() for _, c in suite.stages[0].checks]       # the YAML anchor, reused
    topo = checkfile.topology_file(os.path.join(EXAMPLE, suite.topology))
    for plan in suite.stages:
        for _, c in plan.checks:
            assert c.node in topo.nodes


# -- no broken file makes the loader fail any other way ---------------------------------
def _leaves(doc, at=()):
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _leaves(v, at + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _leaves(v, at + (i,))
    yield at


junk = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True),
                 st.text(max_size=30), st.lists(st.integers(), max_size=3),
                 st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_any_broken_file_is_loaded_or_refused_in_one_line(tmp_path, data):
    doc = copy.deepcopy(BASE)
    for _ in range(data.draw(st.integers(1, 3))):
        places = [p for p in _leaves(doc) if p]
        _set(doc, data.draw(st.sampled_from(places)), data.draw(junk))
    f = tmp_path / "checks.yaml"
    f.write_text(yaml.safe_dump(doc, sort_keys=False))
    try:
        checkfile.load(str(f))
    except InputError as exc:
        assert str(exc).startswith(f"{f}:") and "\n" not in str(exc), str(exc)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=300))
def test_any_text_is_loaded_or_refused_in_one_line(tmp_path, text):
    f = tmp_path / "checks.yaml"
    f.write_text(text)
    try:
        checkfile.load(str(f))
    except InputError as exc:
        assert str(exc).startswith(str(f)) and "\n" not in str(exc)


def test_a_lab_built_from_a_topology_file_with_checks_remembers_it(tmp_path, monkeypatch):
    """`nslab topo up lab.yaml` notes the file (if it has checks) in the lab's
    work directory; `nslab check` with no checks named runs them, unless the
    file changed since (then one line says to name it)."""
    from nslab.cmdline import checkcli
    from nslab.runtime import clean
    monkeypatch.setattr(clean, "workdir", lambda run: str(tmp_path / "work" / run))
    lab = tmp_path / "lab.yaml"
    lab.write_text(open(os.path.join(EXAMPLE, "lab.yaml")).read()
                   + "checks:\n  - {check: ping, from: server1, to: server2}\n")
    plain = tmp_path / "plain.yaml"
    plain.write_text(open(os.path.join(EXAMPLE, "lab.yaml")).read())
    with pytest.raises(InputError, match=r"lab nl0001 was not built from a topology file with "
                                         r"checks: name the checks with --checks FILE"):
        checkcli.remembered_checks("nl0001")
    assert checkcli.remember_checks("nl0001", str(plain)) is None
    assert checkcli.remember_checks("nl0001", "clos,2") is None   # a registered topology
    with pytest.raises(InputError):
        checkcli.remembered_checks("nl0001")
    assert checkcli.remember_checks("nl0001", str(lab)) == str(lab)
    assert checkcli.remembered_checks("nl0001") == str(lab)
    assert checkfile.load(str(lab)).stages[0].checks[0][1].check == "ping"
    lab.write_text(lab.read_text() + "  - {check: ping, from: server2, to: server1}\n")
    with pytest.raises(InputError, match=r"lab.yaml: changed \(or gone\) since lab nl0001 was "
                                         r"built from it: name the checks with --checks FILE"):
        checkcli.remembered_checks("nl0001")
    lab.unlink()
    with pytest.raises(InputError, match=r"changed \(or gone\)"):
        checkcli.remembered_checks("nl0001")
