"""`nslab check`, `nslab link` and `nslab grade` on real labs (root, FRR): the
two-spine clos of examples/clos-lab passes its checks; a link set down makes
the BGP and ECMP checks fail at their deadline with the right difference, and
up heals them; a rate set at run time is seen, and removed by reset and by
`nslab clean` after a SIGKILL; a class of three folders (right, broken,
hostile) gives the right sheet and the hostile one harms nothing.

Kept short: one clos is shared by the tests that only check and change it
(each test puts its links back); the checks' deadlines are a few seconds."""
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from nslab import Lab
from nslab.model.checkfile import topology_file
from nslab.runtime import caps
from nslab.runtime.clean import discover, live_journals, read_journal
from nslab.runtime.testing import needs

# versioned: FRR's JSON (8.4 on Debian 12, 10.3 on Debian 13) and iproute2's
pytestmark = [pytest.mark.root, pytest.mark.versioned, needs("frr", "ping", "iperf")]
NSLAB = os.path.join(os.path.dirname(sys.executable), "nslab")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "clos-lab")


def nslab(*args, timeout=120, cwd=None):
    return subprocess.run([NSLAB, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd)


def checks_file(tmp_path, body, name="checks.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def results(res):
    doc = json.loads(res.stdout)
    return {r["label"]: r for r in doc["results"]}


@pytest.fixture(scope="module")
def clos():
    """The example's clos, built once for the module (this process owns it)."""
    lab = Lab(topology_file(os.path.join(EXAMPLE, "lab.yaml")))
    lab.start()
    try:
        yield lab
    finally:
        lab.stop()
        left = {r: i.describe() for r, i in discover(lab.run_id).items() if not i.empty}
        assert not left, f"lab objects left behind: {left}"


def test_every_check_of_the_fabric_holds_and_says_so_in_each_format(clos, tmp_path):
    res = nslab("check", clos.run_id, "--checks", os.path.join(EXAMPLE, "checks.yaml"),
                "--stage", "1", "--format", "json")
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert doc["summary"] == {"pass": 5, "fail": 0, "error": 0} and doc["exit"] == 0
    seen = results(res)
    assert seen["bgp spine1-eth0, spine1-eth1"]["seen"] == \
        "spine1-eth0 Established, spine1-eth1 Established"
    assert seen["route 10.0.200.2/32"]["seen"].startswith("2 nexthops via server1-eth0, "
                                                          "server1-eth1")
    more = checks_file(tmp_path, """\
        checks:
          - {check: interface, node: server1, interface: server1-eth0, state: up,
             counters: {rx_errors: {at_most: 0}}}
          - {check: route, node: server1, dst: 10.0.200.2/32, expect: {protocol: bgp}}
          - {check: bgp, node: server1, show: ipv4,
             expect: {routes: {10.0.200.2/32: [{valid: true}]}}}
          - {check: throughput, from: server1, to: server2, at_least: 10Mbit, time: 1}
    """)
    res = nslab("check", clos.run_id, "--checks", more, "--format", "junit")
    assert res.returncode == 0, res.stdout + res.stderr
    assert 'tests="4" failures="0" errors="0"' in res.stdout
    table = nslab("check", clos.run_id, "--checks", more)
    assert table.returncode == 0 and "4 passed, 0 failed, 0 could not run" in table.stdout


def test_a_link_down_fails_bgp_and_ecmp_at_their_deadline_and_up_heals_them(clos, tmp_path):
    f = checks_file(tmp_path, """\
        checks:
          - {check: bgp, node: spine2, peers: {spine2-eth0: established}, within: WITHIN}
          - {check: route, node: server2, dst: 10.0.200.1/32, nexthops: 2, within: WITHIN}
          - {check: ping, from: server1, to: server2, source: 10.0.200.1, within: WITHIN}
    """.replace("WITHIN", "3"))
    res = nslab("link", "set", "spine2-server1", clos.run_id, "--down")
    assert res.returncode == 0, res.stderr
    assert "spine2-server1" in res.stdout or "server1-spine2" in res.stdout
    try:
        t0 = time.monotonic()
        res = nslab("check", clos.run_id, "--checks", f, "--format", "json")
        took = time.monotonic() - t0
        assert res.returncode == 1, res.stdout + res.stderr
        seen = results(res)
        bgp, route = seen["bgp spine2-eth0"], seen["route 10.0.200.1/32"]
        assert bgp["status"] == route["status"] == "fail"
        assert bgp["diff"][0].startswith("peers.spine2-eth0.state: expected Established, saw ")
        assert route["diff"][0] == "nexthops: expected 2, saw 1"
        assert 3.0 <= route["seconds"] < 6 and route["tries"] > 1
        assert seen["ping server1 -> server2"]["status"] == "pass"   # the other spine carries it
        assert took < 20   # the checks ran at once, not one deadline after the other
        shown = nslab("link", "show", clos.run_id)
        assert shown.returncode == 0 and "down at spine2" in shown.stdout
    finally:
        res = nslab("link", "set", "spine2-server1", clos.run_id, "--up")
        assert res.returncode == 0, res.stderr
    healed = checks_file(tmp_path, open(f).read().replace("within: 3", "within: 30"), "h.yaml")
    res = nslab("check", clos.run_id, "--checks", healed)
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_stage_makes_its_link_change_before_its_checks(clos, tmp_path):
    try:
        res = nslab("check", clos.run_id, "--checks", os.path.join(EXAMPLE, "checks.yaml"),
                    "--stage", "2", "--format", "csv")
        assert res.returncode == 0, res.stdout + res.stderr
        assert "stage 2: link spine2-server1 down" in res.stderr
        assert res.stdout.count(",pass,") == 3
    finally:
        assert nslab("link", "reset", clos.run_id).returncode == 0


def test_a_rate_set_at_run_time_is_seen_and_removed_by_reset(clos):
    def qdisc():
        out = subprocess.run(["tc", "-j", "-n", f"{clos.run_id}-server1", "qdisc", "show", "dev",
                              "server1-eth0"], capture_output=True, text=True).stdout
        return {q["kind"] for q in json.loads(out or "[]")}
    res = nslab("link", "set", "server1-spine1", clos.run_id, "--rate", "10Mbit")
    assert res.returncode == 0, res.stderr
    try:
        assert "htb" in qdisc()
        restore = read_journal(clos.run_id)["restore"]
        assert [r["link"] for r in restore if "link" in r] == ["server1-spine1"]
        if caps.probe()["netem"].ok:
            assert nslab("link", "set", "server1-spine1", clos.run_id, "--delay", "50ms"
                         ).returncode == 0
            assert "netem" in qdisc()
        else:
            res = nslab("link", "set", "server1-spine1", clos.run_id, "--delay", "50ms")
            assert res.returncode != 0 and "needs netem" in res.stderr
            assert len(res.stderr.strip().splitlines()) == 1
            assert "htb" in qdisc()          # refused: the rate stays, nothing else changed
    finally:
        res = nslab("link", "reset", "server1-spine1", clos.run_id)
    assert res.returncode == 0 and "reset server1-spine1" in res.stdout
    assert "htb" not in qdisc() and "netem" not in qdisc()
    assert not [r for r in read_journal(clos.run_id)["restore"] if "link" in r]


def test_clean_after_a_sigkill_removes_a_lab_with_a_rate_set_at_run_time(tmp_path):
    before = {j["run"] for j in live_journals()}
    up = subprocess.Popen([NSLAB, "--results", str(tmp_path / "r"), "topo", "up", "pair",
                           "--for", "600"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          stdin=subprocess.DEVNULL)
    run = None
    try:
        lines = []
        threading.Thread(target=lambda: lines.extend(l.decode(errors="replace")
                                                     for l in up.stdout), daemon=True).start()
        deadline = time.monotonic() + 60
        while not any("built in" in l for l in lines):
            assert time.monotonic() < deadline and up.poll() is None, up.stderr.read()
            time.sleep(0.1)
        (run,) = {j["run"] for j in live_journals() if j.get("pid") == up.pid} - before
        res = nslab("link", "set", "h1-h2", run, "--rate", "5Mbit")
        assert res.returncode == 0, res.stderr
        up.send_signal(signal.SIGKILL)
        up.wait(10)
        dry = nslab("clean", "--run", run, "--dry-run")
        assert "restore link h1-h2 (rate 5.0 Mbit/s" in dry.stdout, dry.stdout
        res = nslab("clean", "--run", run)
        assert res.returncode == 0 and "problem" not in res.stdout, res.stdout + res.stderr
        assert all(inv.empty for inv in discover(run).values())
        assert not os.path.exists(f"/run/netns/{run}-h1")
    finally:
        if up.poll() is None:
            up.kill()
        if run is not None:
            nslab("clean", "--run", run)


def test_grade_three_folders_right_broken_hostile(tmp_path):
    cls = tmp_path / "class"
    right, broken, hostile = cls / "alice", cls / "bob", cls / "\x1b[31mmallory"
    for d in (right, broken, hostile):
        d.mkdir(parents=True)
    shutil.copy(os.path.join(EXAMPLE, "lab.yaml"), right / "lab.yaml")
    # bob gave server2 server1's AS: the sessions come up, each server drops the
    # other's route (its own AS is on the path)
    text = open(os.path.join(EXAMPLE, "lab.yaml")).read()
    assert "asn: 65002" in text
    (broken / "lab.yaml").write_text(text.replace("asn: 65002", "asn: 65001"))
    # mallory's lab.yaml is a link to a file outside the folder; her folder also
    # ships checks that would pass anything
    victim = tmp_path / "victim.yaml"
    victim.write_text(text)
    os.symlink(victim, hostile / "lab.yaml")
    (hostile / "checks.yaml").write_text("checks: []\n")
    f = checks_file(tmp_path, """\
        title: clos
        topology: lab.yaml
        stages:
          - title: up
            checks:
              - {check: bgp, node: spine1, peers: {spine1-eth0: established,
                 spine1-eth1: established}, within: 20}
              - {check: route, node: server1, dst: 10.0.200.2/32, nexthops: 2, within: 15}
              - {check: ping, from: server1, to: server2, source: 10.0.200.1, within: 2}
    """)
    namespaces = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    out = tmp_path / "sheet"
    res = nslab("--results", str(tmp_path / "r"), "grade", "--checks", f, "--out", str(out),
                str(right), str(broken), str(hostile), timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    book = json.loads((out / "grades.json").read_text())
    by = {s["student"]: s for s in book["students"]}
    assert set(by) == {"alice", "bob", "\\x1b[31mmallory"}
    assert [r["status"] for r in by["alice"]["results"]] == ["pass", "pass", "pass"]
    assert [r["status"] for r in by["bob"]["results"]] == ["pass", "fail", "fail"]
    assert by["bob"]["results"][1]["diff"][0] == "10.0.200.2/32: missing"
    mallory = by["\\x1b[31mmallory"]
    assert mallory["problem"] and "link" in mallory["problem"]
    assert {r["status"] for r in mallory["results"]} == {"error"}
    html = (out / "grades.html").read_text()
    assert "\x1b" not in html and "\x1b" not in (out / "grades.csv").read_text()
    # the hostile folder harmed nothing: no lab left, the file its link named unread and
    # unchanged, the folders as they were
    assert victim.read_text() == text
    now = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    assert now <= namespaces
    assert sorted(os.listdir(hostile)) == ["checks.yaml", "lab.yaml"]


@pytest.mark.parametrize("handout, topo, options", [
    ("01-ip-aliases", "alias_pair", {}),
    ("03-rfc2544-router", "rfc2544", {"dut": "router"}),
])
def test_a_handout_s_checks_file_holds_on_the_lab_its_handout_builds(handout, topo, options):
    """Each handout without a study file of its own has a checks file
    (examples/handouts/): on the lab the handout builds, every check holds."""
    from nslab.run.registry import topology
    path = os.path.join(ROOT, "examples", "handouts", f"{handout}.checks.yaml")
    with Lab(topology(topo)(**options)) as lab:
        res = nslab("check", lab.run_id, "--checks", path, "--format", "json", timeout=180)
        assert res.returncode == 0, res.stdout + res.stderr
        doc = json.loads(res.stdout)
        assert doc["summary"]["fail"] == doc["summary"]["error"] == 0
        assert doc["summary"]["pass"] == len(doc["results"]) >= 4


def test_nslab_check_runs_the_checks_of_the_file_the_lab_was_built_from(tmp_path):
    """`nslab topo up lab.yaml` (a file with checks), then `nslab check` from
    a folder with no checks.yaml: the lab's own file's checks run."""
    lab = tmp_path / "lab.yaml"
    lab.write_text(textwrap.dedent("""\
        name: remembered
        nodes: {h1: {ip: 10.9.0.1/24}, h2: {ip: 10.9.0.2/24}}
        links: [{a: h1, b: h2}]
        checks:
          - {check: ping, from: h1, to: 10.9.0.2, within: 10}
          - {check: interface, node: h2, interface: h2-eth0, state: up}
    """))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    before = {j["run"] for j in live_journals()}
    up = subprocess.Popen([NSLAB, "--results", str(tmp_path / "r"), "topo", "up", str(lab),
                           "--for", "120"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          stdin=subprocess.DEVNULL, text=True)
    try:
        err = []
        threading.Thread(target=lambda: err.extend(up.stderr), daemon=True).start()
        deadline = time.monotonic() + 60
        while not any("has checks: `nslab check" in line for line in err):
            assert time.monotonic() < deadline and up.poll() is None, "".join(err)
            time.sleep(0.1)
        (run,) = {j["run"] for j in live_journals() if j.get("pid") == up.pid} - before
        res = nslab("check", run, "--format", "json", cwd=str(elsewhere))
        assert res.returncode == 0, res.stdout + res.stderr
        assert f"checks: {lab} (the lab's topology file)" in res.stderr
        assert json.loads(res.stdout)["summary"] == {"pass": 2, "fail": 0, "error": 0}
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(30)
    assert not {j["run"] for j in live_journals()} - before
