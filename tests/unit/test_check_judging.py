"""Judging a check from what a tool printed, polling it until a deadline, and
the results' forms: the exit codes, the table, JSON, JUnit and CSV. Pure
functions of captured output and stored results; no root, no lab."""
import csv
import io
import json
import os
import xml.etree.ElementTree as ET

import pytest
from pydantic import TypeAdapter

from nslab.errors import LabError
from nslab.frr import checks as frr_checks
from nslab.model.checks import CannotRun, Check, Outcome, StagePlan
from nslab.store import checkreport as report
from nslab.store.checkreport import CheckResult
from nslab.traffic import checkeval, checkrun

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
CHECK = TypeAdapter(Check)


def check(**fields):
    return CHECK.validate_python(fields)


def text(*parts):
    with open(os.path.join(DATA, *parts), encoding="utf-8") as f:
        return f.read()


# -- ping -------------------------------------------------------------------------------
def test_ping_holds_with_no_loss_and_says_what_it_saw():
    c = check(check="ping", **{"from": "server1"}, to="server2", source="10.0.200.1")
    assert checkeval.ping_argv(c, "10.0.200.2") == [
        "ping", "-n", "-c", "3", "-i", "0.2", "-W", "1", "-I", "10.0.200.1", "10.0.200.2"]
    out = checkeval.judge_ping(c, "10.0.200.2", text("checks", "ping-ok.txt"))
    assert out.ok and out.expected == "loss <= 0%"
    assert out.seen == "3/3 answered (0% lost), rtt 0.061 ms" and out.diff == []


def test_ping_loss_and_round_trip_bounds_fail_with_the_difference():
    c = check(check="ping", **{"from": "h1"}, to="10.0.0.2", count=4, loss="25%",
              rtt={"at_most": "10ms"})
    out = checkeval.judge_ping(c, "10.0.0.2", text("checks", "ping-lossy.txt"))
    assert not out.ok
    assert out.diff == ["loss: expected <= 25%, saw 50% (2 of 4 to 10.0.0.2)",
                        "rtt: expected <= 10 ms, saw 50.2 ms (average)"]
    # the captured loopback run: 18 of 18, 0.033 ms
    stats = checkeval.parse_ping(text("ping", "ping-D-loopback.txt"))
    assert (stats.sent, stats.received, stats.rtt_avg) == (18, 18, 0.033)


def test_a_ping_that_sent_nothing_lost_everything_and_says_why():
    c = check(check="ping", **{"from": "h1"}, to="h2")
    out = checkeval.judge_ping(c, "10.0.0.2", "", text("checks", "ping-unreachable.txt"))
    assert not out.ok and out.seen == "100% lost (ping: connect: Network is unreachable)"


# -- routes -----------------------------------------------------------------------------
ROUTES = json.loads(json.load(open(os.path.join(DATA, "route_dump.json")))["ip_json"])


def test_a_route_s_nexthops_count_ecmp_paths_and_a_host_route_is_found_by_its_prefix():
    out = checkeval.judge_route(check(check="route", node="r", dst="10.9.0.0/24", nexthops=3),
                                ROUTES)
    assert out.ok and out.seen == "3 nexthops via va, va, vb"  # sorted: the kernel lists paths as they came
    out = checkeval.judge_route(check(check="route", node="r", dst="10.8.0.0/16", nexthops=1),
                                ROUTES)
    assert not out.ok and out.diff == ["nexthops: expected 1, saw 2"]
    # `ip` prints a host route without its /32
    out = checkeval.judge_route(check(check="route", node="r", dst="10.0.200.7/32", nexthops=1),
                                ROUTES)
    assert out.ok and out.seen == "1 nexthop via vb"
    assert checkeval.judge_route(check(check="route", node="r", dst="default"), ROUTES).ok


def test_a_route_present_absent_and_its_fields():
    out = checkeval.judge_route(check(check="route", node="r", dst="10.1.0.0/16"), ROUTES)
    assert not out.ok and (out.seen, out.diff) == ("absent", ["10.1.0.0/16: missing"])
    out = checkeval.judge_route(check(check="route", node="r", dst="10.1.0.0/16",
                                      present=False), ROUTES)
    assert out.ok and out.expected == "absent"
    out = checkeval.judge_route(check(check="route", node="r", dst="10.5.0.0/24",
                                      present=False), ROUTES)
    assert not out.ok and out.diff == ["10.5.0.0/24: expected absent, saw 1 nexthop via va "
                                       "(kernel)"]
    out = checkeval.judge_route(check(check="route", node="r", dst="10.5.0.0/24",
                                      expect={"protocol": "bgp", "scope": "link"}), ROUTES)
    assert out.diff == ['protocol: expected "bgp", saw "kernel"']
    assert checkeval.route_argv(check(check="route", node="r", dst="2001:db8::/64"))[2] == "-6"
    with pytest.raises(CannotRun):
        checkeval.judge_route(check(check="route", node="r", dst="default"), {"not": "a list"})


# -- interfaces -------------------------------------------------------------------------
LINKS = json.loads(text("ip", "link-stats.json"))


def test_an_interface_s_state_mtu_and_counters():
    eth0 = [LINKS[1]]
    c = check(check="interface", node="h1", interface="eth0", state="up", mtu=1400,
              counters={"rx_errors": {"at_most": 0}, "tx_packets": {"at_least": 10}})
    out = checkeval.judge_interface(c, eth0)
    assert out.ok and out.seen == "up (UP), mtu 1400, rx_errors 0, tx_packets 18936"
    c = check(check="interface", node="h1", interface="eth0", state="down", mtu=1500,
              counters={"tx_packets": {"at_least": 10**9}}, expect={"qdisc": "noqueue"})
    out = checkeval.judge_interface(c, eth0)
    assert out.diff == ["state: expected down, saw UP", "mtu: expected 1500, saw 1400",
                        "tx_packets: expected >= 1e+09, saw 18936",
                        'qdisc: expected "noqueue", saw "pfifo_fast"']
    # lo is UNKNOWN with a carrier: up
    assert checkeval.judge_interface(check(check="interface", node="h1", interface="lo",
                                           state="up"), [LINKS[0]]).ok
    out = checkeval.judge_interface(c, None, 'Device "eth9" does not exist.')
    assert not out.ok and out.seen == "absent"


def test_throughput_is_judged_against_its_floor():
    c = check(check="throughput", **{"from": "h1"}, to="h2", at_least="100Mbit")
    assert checkeval.judge_throughput(c, 941e6).ok
    out = checkeval.judge_throughput(c, 9.5e6)
    assert not out.ok and out.diff == ["throughput: expected >= 100.0 Mbit/s, saw 9.5 Mbit/s"]
    out = checkeval.judge_throughput(c, None, "connect failed: No route to host")
    assert out.seen == "no transfer (connect failed: No route to host)"


# -- FRR: bgp and bfd -------------------------------------------------------------------
SUMMARY = json.loads(text("checks", "frr-bgp-summary.json"))
BFD = json.loads(text("checks", "frr-bfd-peers.json"))


def test_bgp_peers_established_or_down_from_the_summary():
    c = check(check="bgp", node="spine2", peers={"spine2-eth0": "established",
                                                 "spine2-eth1": "established"})
    out = frr_checks.judge_bgp(c, SUMMARY)
    assert not out.ok
    assert out.diff == ["peers.spine2-eth0.state: expected Established, saw Idle"]
    assert out.seen == "spine2-eth0 Idle, spine2-eth1 Established"
    c = check(check="bgp", node="spine2", peers={"spine2-eth0": "down", "spine9-eth9": "down"})
    assert frr_checks.judge_bgp(c, SUMMARY).ok   # not configured counts as down
    c = check(check="bgp", node="spine2", peers={"spine9-eth9": "established"})
    assert frr_checks.judge_bgp(c, SUMMARY).diff == [
        "peers.spine9-eth9.state: expected Established, saw no such peer"]


def test_bgp_expect_is_a_subset_of_the_show():
    c = check(check="bgp", node="spine2", expect={"ipv4Unicast": {
        "as": 65000, "peers": {"spine2-eth1": {"pfxRcd": 2}}}})
    out = frr_checks.judge_bgp(c, SUMMARY)
    assert out.diff == ["ipv4Unicast.peers.spine2-eth1.pfxRcd: expected 2, saw 1"]
    assert out.seen == "summary: differs"


def test_bfd_peers_by_interface_or_address():
    c = check(check="bfd", node="server1", peers={"server1-eth0": "up", "server1-eth1": "up"})
    out = frr_checks.judge_bfd(c, BFD)
    assert out.diff == ["peers.server1-eth1.status: expected up, saw down"]
    c = check(check="bfd", node="server1", peers={"fe80::a8c1:abff:fe12:3401": "up",
                                                 "server1-eth1": "down"})
    assert frr_checks.judge_bfd(c, BFD).ok
    c = check(check="bfd", node="server1", expect=[{"interface": "server1-eth1",
                                                   "status": "up"}])
    assert frr_checks.judge_bfd(c, BFD).diff == ['[1].status: expected "up", saw "down"']


class FakeNode:
    def __init__(self, workdir, stdout, rc=0, stderr=""):
        self.run_id, self.name, self.netns, self.workdir = "nl1234", "spine2", "nl1234-spine2", \
            workdir
        self.out = (stdout, rc, stderr)
        self.argv = None

    def run(self, argv, timeout):
        from nslab.runtime.proc import Result
        self.argv = argv
        return Result(argv, self.out[1], self.out[0], self.out[2])


def test_vtysh_runs_one_allowed_show_against_the_node_s_own_daemons(tmp_path):
    node = FakeNode(str(tmp_path), json.dumps(SUMMARY))
    with pytest.raises(CannotRun, match="runs no FRR daemons"):
        frr_checks.show_json(node, "show bgp summary json")
    (tmp_path / "frr" / "spine2").mkdir(parents=True)
    assert frr_checks.show_json(node, "show bgp summary json") == SUMMARY
    assert node.argv == ["vtysh", "--vty_socket", str(tmp_path / "frr" / "spine2"), "-c",
                         "show bgp summary json"]
    with pytest.raises(CannotRun, match="not a show command a check may run"):
        frr_checks.show_json(node, "write memory")
    node.out = ("Exiting: failed to connect to any daemons.", 1, "")
    with pytest.raises(CannotRun, match="failed to connect to any daemons"):
        frr_checks.show_json(node, "show bgp summary json")


def test_a_link_where_the_node_s_frr_directory_should_be_is_not_followed(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "frr").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "frr" / "spine2")
    with pytest.raises(CannotRun, match="runs no FRR daemons"):
        frr_checks.show_json(FakeNode(str(tmp_path), "{}"), "show bgp summary json")


# -- polling ----------------------------------------------------------------------------
class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now

    def sleep(self, s):
        self.now += s


def test_poll_tries_until_it_holds_then_stops():
    clock, tries = Clock(), []

    def attempt():
        tries.append(clock.now)
        return Outcome(len(tries) >= 3, "2 nexthops", f"{len(tries)}")
    polled = checkrun.poll(attempt, within=10, every=0.5, clock=clock, sleep=clock.sleep)
    assert polled.outcome.ok and polled.tries == 3 and polled.seconds == 1.0


def test_poll_gives_up_at_the_deadline_with_the_last_difference():
    clock = Clock()
    polled = checkrun.poll(lambda: Outcome(False, "x", "y", ["nexthops: expected 2, saw 1"]),
                           within=3, every=1, clock=clock, sleep=clock.sleep)
    assert not polled.outcome.ok and polled.tries == 4 and polled.seconds == 3.0
    once = checkrun.poll(lambda: Outcome(False, "x", "y"), within=0, every=1, clock=clock,
                         sleep=clock.sleep)
    assert once.tries == 1


def test_poll_tries_again_after_an_error_but_not_after_a_missing_node():
    clock, n = Clock(), []

    def starting():
        n.append(1)
        if len(n) < 3:
            raise CannotRun("vtysh: failed to connect to any daemons")
        return Outcome(True, "x", "y")
    assert checkrun.poll(starting, 10, 0.5, clock, clock.sleep).outcome.ok

    def gone():
        n.append(1)
        raise checkrun.NoSuchNode("no node 'h9'")
    n.clear()
    polled = checkrun.poll(gone, 10, 0.5, clock, clock.sleep)
    assert polled.outcome is None and polled.error == "no node 'h9'" and len(n) == 1
    polled = checkrun.poll(lambda: (_ for _ in ()).throw(LabError("boom")), 1, 0.5, clock,
                           clock.sleep)
    assert polled.outcome is None and polled.error == "boom" and polled.tries == 3


def test_a_result_records_status_and_the_deadline_it_missed():
    stage = StagePlan(2, "down")
    c = check(check="route", node="server2", dst="10.0.200.1/32", nexthops=2, within=3)
    r = checkrun.result_of(c, checkrun.Polled(Outcome(False, "present, 2 nexthops",
                                                      "1 nexthop via server2-eth0",
                                                      ["nexthops: expected 2, saw 1"]),
                                              None, 7, 3.02), stage, 4, 1)
    assert (r.stage, r.stage_title, r.number, r.origin, r.status) == (2, "down", 4, 1, "fail")
    assert r.diff == ["nexthops: expected 2, saw 1",
                      "still so after 7 tries in 3.0 s (within: 3)"]
    r = checkrun.result_of(c, checkrun.Polled(None, "no node 'server2'", 1, 0.0), stage, 1, 2)
    assert r.status == "error" and r.seen == "could not run: no node 'server2'"


def test_a_kind_the_core_does_not_judge_goes_to_the_extension_that_does(monkeypatch):
    from nslab.runtime import extension

    class Judge(extension.Extension):
        name, check_kinds = "frr", ("bgp",)

        def judge(self, node, c):
            return Outcome(True, "e", f"judged on {node.netns}")
    view = checkrun.LabView("nl1234", None, {"spine1": "nl1234-spine1"})
    c = check(check="bgp", node="spine1", peers={"spine1-eth0": "established"})
    monkeypatch.setattr(extension, "registered", lambda: {"frr": Judge()})
    assert checkrun.try_once(view, c).seen == "judged on nl1234-spine1"
    monkeypatch.setattr(extension, "registered", lambda: {})
    with pytest.raises(checkrun.NoSuchNode, match="no installed nslab extension judges bgp"):
        checkrun.try_once(view, c)
    with pytest.raises(checkrun.NoSuchNode, match="no node 'spine9'"):
        checkrun.try_once(view, check(check="route", node="spine9", dst="default"))


def test_a_node_s_address_is_its_loopback_else_its_first():
    from nslab.model.checkfile import topology_file
    topo = topology_file(os.path.join(DATA, "..", "..", "examples", "clos-lab", "lab.yaml"))
    view = checkrun.LabView("nl1234", topo, {n: f"nl1234-{n}" for n in topo.nodes})
    assert view.address("server2") == "10.0.200.2"
    assert view.address("2001:db8::1") == "2001:db8::1"
    with pytest.raises(checkrun.NoSuchNode, match="spine1 has no address"):
        view.address("spine1")


# -- results: exit codes and forms ------------------------------------------------------
def results():
    mk = CheckResult.made
    return [
        mk(stage=1, stage_title="up", number=1, label="bgp spine1-eth0", kind="bgp",
           node="spine1", expected="spine1-eth0 established", seen="spine1-eth0 Established",
           status="pass", seconds=1.2, tries=3),
        mk(stage=1, stage_title="up", number=2, label="=HYPERLINK(\"http://x\")", kind="route",
           node="server1", expected="present, 2 nexthops", seen="1 nexthop via server1-eth0",
           status="fail", seconds=3.0, tries=7, diff=["nexthops: expected 2, saw 1"]),
        mk(stage=2, stage_title="down", number=1, label="ping a -> b\x1b[2J", kind="ping",
           node="a", status="error", seen="could not run: no node 'a'"),
    ]


def test_exit_codes_all_pass_a_failure_an_error():
    rs = results()
    assert report.exit_code(rs[:1]) == 0
    assert report.exit_code(rs[:2]) == 1
    assert report.exit_code(rs) == 2 and report.exit_code(rs[2:]) == 2
    assert report.exit_code([]) == 0
    assert report.counts(rs) == {"pass": 1, "fail": 1, "error": 1}


def test_the_table_and_the_lines_under_it():
    rows = report.table_rows(results())
    assert rows[0] == ("1", "bgp spine1-eth0", "spine1", "spine1-eth0 established",
                       "spine1-eth0 Established", "pass", "1.2 s")
    assert report.table_rows(results()[:2])[0][0] == ""   # one stage: no stage column
    assert report.failures(results())[:1] == [
        '=HYPERLINK("http://x") (server1): nexthops: expected 2, saw 1']


def test_json_is_the_results_and_their_summary():
    doc = json.loads(report.to_json(results(), {"lab": "nl1234"}))
    assert doc["lab"] == "nl1234" and doc["exit"] == 2
    assert doc["summary"] == {"pass": 1, "fail": 1, "error": 1}
    assert [CheckResult.model_validate(r) for r in doc["results"]] == results()


def test_junit_has_a_suite_per_stage_and_is_valid_xml_whatever_the_text():
    xml = report.to_junit(results(), "nslab check lab.yaml")
    top = ET.fromstring(xml.split("\n", 1)[1])
    assert (top.get("tests"), top.get("failures"), top.get("errors")) == ("3", "1", "1")
    suites = top.findall("testsuite")
    assert [s.get("name") for s in suites] == ["stage 1: up", "stage 2: down"]
    cases = suites[0].findall("testcase")
    assert cases[1].find("failure").get("message") == "nexthops: expected 2, saw 1"
    err = suites[1].find("testcase")
    assert err.get("name") == "1. ping a -> b\\x1b[2J (a)" and err.find("error") is not None


def test_csv_keeps_a_spreadsheet_from_reading_a_cell_as_a_formula():
    rows = list(csv.reader(io.StringIO(report.to_csv(results()))))
    assert rows[0] == list(report.CSV_COLUMNS)
    assert rows[2][3] == "'=HYPERLINK(\"http://x\")"
    assert rows[2][8] == "fail" and rows[2][11] == "nexthops: expected 2, saw 1"


def test_a_result_keeps_bounded_text():
    r = CheckResult.made(label="x" * 5000, kind="ping", status="fail", diff=["d"] * 80)
    assert len(r.label) == report.MAX_TEXT and len(r.diff) == report.MAX_DIFF
