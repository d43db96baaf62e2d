"""Alias study logic, and its report redrawn from a captured real run (no root)."""
import os
import re
import shutil

import pytest

from nslab.errors import InputError
from nslab.experiments.alias.config import AliasConfig
from nslab.experiments.alias.model import alias_addresses, alias_batch, rise, window_payload
from nslab.experiments.alias.records import SCHEMA
from nslab.experiments.alias.report import summarize, write_report
from nslab.experiments.alias.study import AliasStudy
from nslab.store.published import load_published
from nslab.model.shaping import goodput_ceiling
from tests.conftest import data


def test_alias_addresses_and_batch_lines_follow_the_posts():
    addrs = alias_addresses("192.168.2.%d", 254)
    assert addrs[0] == "192.168.2.1" and addrs[-1] == "192.168.2.254"
    assert alias_batch("eth1", addrs[:2]) == [
        "addr add 192.168.2.1/16 dev eth1 label eth1:1",
        "addr add 192.168.2.2/16 dev eth1 label eth1:2"]


@pytest.mark.parametrize("template, n, message", [
    ("192.168.2.1", 3, "exactly one %d"),
    ("192.168.%d.%d", 3, "exactly one %d"),
    ("192.168.2.%d", 255, "not a usable host address"),
    ("10.%d.0.1", 300, "not an IPv4 address"),
])
def test_bad_templates_and_counts(template, n, message):
    with pytest.raises(InputError, match=message):
        alias_addresses(template, n)


@pytest.mark.parametrize("kwargs, message", [
    ({"aliases": [1, 2, 2]}, "aliases: 2 is listed twice"),
    ({"aliases": [0, 1]}, "aliases.0: Input should be greater than or equal to 1"),
    ({"aliases": [1, 255]}, "not a usable host"),
    ({"duration": 0}, "duration: Input should be greater than or equal to 2"),
    ({"modes": ["alias", "magic"]}, "modes.1: 'magic' is not one of"),
    ({"addr_template": "192.168.2.x"}, "exactly one %d"),
    ({"switch": "hub"}, "switch: 'hub' is not one of"),
    ({"repeat": 0}, "repeat: Input should be greater than or equal to 1"),
    ({"cc": "bbr; x"}, "not a congestion control name"),
    ({"uplink": "eth0\nx"}, "not a valid interface name"),
    ({"colour": "red"}, "unknown key 'colour'"),
])
def test_config_validation(kwargs, message):
    with pytest.raises(InputError, match=message):
        AliasConfig.parse(kwargs)


def test_presets_are_defined_once_and_options_override_them():
    quick = AliasConfig.preset("quick")
    assert quick.aliases == [1, 254] and quick.repeat == 3 and quick.modes == ["alias", "parallel"]
    assert AliasConfig.preset("default").modes == ["alias"]  # `nslab run alias` as documented
    assert AliasConfig.preset("full").modes == ["alias", "parallel"]  # reproduce --full
    assert AliasConfig.preset("quick", duration=5).duration == 5
    with pytest.raises(InputError, match="unknown preset 'fast'"):
        AliasConfig.preset("fast")


def test_points_cover_the_grid_with_repeats_shuffled_but_reproducible():
    cfg = AliasConfig(aliases=[1, 16, 254], repeat=3, modes=["alias", "parallel"])
    points = AliasStudy().points
    pts = points(cfg)
    # -P 1 is the same test as one alias: the control skips N=1
    assert len(pts) == 5 * 3
    assert pts[:5] == [{"mode": m, "n": n, "repeat": 0} for m, n in
                       [("alias", 1), ("alias", 16), ("alias", 254), ("parallel", 16),
                        ("parallel", 254)]]
    assert {(p["mode"], p["n"]) for p in pts[5:10]} == {(p["mode"], p["n"]) for p in pts[:5]}
    assert points(cfg) == pts  # a resumed run sees the same order


def test_window_payload_counts_socket_by_socket_and_never_goes_negative():
    before = {("10.0.0.2:5001", "10.0.0.1:53934"): 1543000156,
              ("10.0.0.2:5001", "10.0.0.1:53932"): 1384272172}
    # The busiest socket closed before the second sample (a client that ended
    # early): a difference of sums goes negative, the per-socket count does not.
    after = {("10.0.0.2:5001", "10.0.0.1:53932"): 1384272172 + 1000,
             ("10.0.0.2:5001", "10.0.0.1:53940"): 500}  # opened in between: counted from 0
    assert sum(after.values()) - sum(before.values()) < 0
    assert window_payload(before, after) == (1500, 1)


def test_counters_read_tcp_payload_by_netlink():
    import socket
    import time

    from nslab.traffic.counters import tcp_bytes
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    cli = socket.create_connection(("127.0.0.1", port))
    conn, _ = srv.accept()
    try:
        cli.sendall(b"x" * 50000)
        got = 0
        while got < 50000:
            got += len(conn.recv(65536))
        time.sleep(0.05)
        key = (f"127.0.0.1:{port}", f"127.0.0.1:{cli.getsockname()[1]}")
        assert tcp_bytes(port, sender=False) == {key: 50000}
        # the sender's view: the peer acknowledged it all
        assert list(tcp_bytes(port, sender=True).values()) == [50000]
    finally:
        for s in (cli, conn, srv):
            s.close()


def test_goodput_ceiling():
    assert goodput_ceiling(1e9) == pytest.approx(956.4e6, rel=1e-3)
    assert goodput_ceiling(1e9, framing=True) == pytest.approx(941.5e6, rel=1e-3)


def test_rise_compares_the_small_n_plateau_with_the_largest_n():
    assert rise({1: 100.0, 8: 102.0, 16: 98.0, 254: 110.0}) == pytest.approx(0.10)
    assert rise({1: 1.0, 16: 1.0}) is None  # no N above the plateau


def test_report_redraws_from_a_stored_run_in_the_posts_format(tmp_path):
    run = tmp_path / "alias" / "nlc945"
    shutil.copytree(data("alias_run"), run)
    rep = write_report(str(run))
    for key in ("md", "html", "plot_png", "plot_svg"):
        assert os.path.getsize(rep.files[key]) > 0
    text = open(rep.files["md"]).read()
    lines = text.splitlines()
    header = next(l for l in lines if l.startswith("| # of alias |"))
    assert header == "| # of alias | 1 | 2 | 4 | 8 | 16 | 32 | 64 | 96 | 128 | 160 | 192 | 224 | 254 |"
    post1 = next(l for l in lines if "published: post 1" in l)
    first = load_published("alias")["series"][0]["points"]["1"]
    assert post1.split("|")[2].strip() == f"{first:,.0f}"  # the published value, in Kbits/sec
    ours = next(l for l in lines if "alias: receiver window" in l)
    recs = SCHEMA.load(str(run))
    n1 = next(r for r in recs if r.params.n == 1 and r.params.mode == "alias")
    assert ours.split("|")[2].strip() == f"{n1.measurements.receiver_bps / 1e3:,.0f}"
    assert "from N<=16 to N=254" in text
    # v1 records (before the fidelity checks) load, and say they were not checked
    assert all(r.measurements.invalid is None for r in recs) and "not checked" in text
    summary = summarize(recs)
    assert summary[("alias", "clients_sum_bps")][254]["median"] > \
        summary[("alias", "receiver_bps")][254]["median"]
    assert {c.claim for c in rep.claims} >= {"Linux IP aliasing adds no measurable overhead"}
    # the iperf that measured it (2.1.8, as its provenance recorded), whatever this machine has
    assert "Tools: iperf 2.1.8," in text


def test_a_redrawn_run_names_the_iperf_that_measured_it_not_this_machines(tmp_path):
    import json
    run = tmp_path / "alias" / "nlc946"
    shutil.copytree(data("alias_run"), run)
    prov = json.loads((run / "provenance.json").read_text())
    prov["versions"]["iperf2"] = "2.2.1"  # as if measured on Debian 13
    (run / "provenance.json").write_text(json.dumps(prov))
    rep = write_report(str(run))
    text = open(rep.files["md"]).read()
    assert "Tools: iperf 2.2.1," in text and "Tools: iperf 2.1.8" not in text
    rows = [c.measured for c in rep.claims if "iperf" in c.measured]
    assert rows and all("iperf 2.2.1" in m for m in rows)


def test_the_raw_sock_diag_reader_agrees_with_pyroute2():
    import socket

    from pyroute2 import DiagSocket
    from pyroute2.netlink.diag import SS_ESTABLISHED

    from nslab.traffic.counters import tcp_bytes
    srv = socket.socket(socket.AF_INET6)
    srv.bind(("::1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    pairs = []
    try:
        for i in range(5):
            cli = socket.create_connection(("::1", port))
            conn, _ = srv.accept()
            cli.sendall(b"y" * (1000 * (i + 1)))
            got = 0
            while got < 1000 * (i + 1):
                got += len(conn.recv(65536))
            pairs.append((cli, conn))
        ours = tcp_bytes(port, sender=False)
        with DiagSocket() as ds:
            ds.bind()
            theirs = {(f"[{m['idiag_src']}]:{m['idiag_sport']}", f"[{m['idiag_dst']}]:{m['idiag_dport']}"):
                      m.get_attr("INET_DIAG_INFO").get("tcpi_bytes_received")
                      for m in ds.get_sock_stats(family=socket.AF_INET6, states=1 << SS_ESTABLISHED,
                                                 extensions=2) if m["idiag_sport"] == port}
        assert ours == theirs and sorted(ours.values()) == [1000, 2000, 3000, 4000, 5000]
    finally:
        for c, d in pairs:
            c.close()
            d.close()
        srv.close()


def test_tcp_limits_agree_with_pyroute2_and_count_a_small_send_buffer():
    """A busy sender: our raw reader and pyroute2 read the same tcp_info
    chronographs (busy, rwnd-limited, sndbuf-limited)."""
    import socket
    import threading
    import time

    from pyroute2 import DiagSocket
    from pyroute2.netlink.diag import SS_ESTABLISHED

    from nslab.traffic.counters import limited_share, tcp_limits
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    cli = socket.socket()
    cli.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    cli.connect(("127.0.0.1", port))
    conn, _ = srv.accept()
    done = threading.Event()

    def drain():
        while not done.is_set():
            if not conn.recv(1 << 16):
                break

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        before = tcp_limits(port)
        # the kernel times each stint of a chronograph in whole jiffies
        # (tcp_jiffies32: multiples of 4,000 us at HZ=250, read here), so a
        # sender mostly send-buffer limited can end 2,000 sends of 8 KiB with
        # no busy stint that crossed a jiffy (CI 81 read a busy time of 0):
        # it sends until the busy chronograph has moved, for up to 10 s
        deadline = time.monotonic() + 10
        while True:
            for _ in range(500):
                cli.sendall(b"z" * 8192)
            after = tcp_limits(port)
            if any(v[0] for v in after.values()) or time.monotonic() > deadline:
                break
        with DiagSocket() as ds:
            ds.bind()
            theirs = {(f"{m['idiag_src']}:{m['idiag_sport']}", f"{m['idiag_dst']}:{m['idiag_dport']}"):
                      m.get_attr("INET_DIAG_INFO") for m in
                      ds.get_sock_stats(family=socket.AF_INET, states=1 << SS_ESTABLISHED,
                                        extensions=2) if m["idiag_dport"] == port}
        key = (f"127.0.0.1:{cli.getsockname()[1]}", f"127.0.0.1:{port}")
        assert list(after) == [key] == list(theirs)
        busy, rwnd, sndbuf = after[key]
        info = theirs[key]
        # read at two instants: the counters only grow between them
        assert busy <= info.get("tcpi_busy_time") and sndbuf <= info.get("tcpi_sndbuf_limited")
        assert rwnd <= info.get("tcpi_rwnd_limited")
        assert busy > 0
        share = limited_share(before, after)
        assert 0 <= share["sndbuf_limited"] <= 1 and 0 <= share["rwnd_limited"] <= 1
    finally:
        done.set()
        cli.close()
        reader.join(timeout=5)
        conn.close()
        srv.close()


def test_limited_share_counts_only_connections_in_both_samples():
    from nslab.traffic.counters import limited_share
    a, b, c = ("a", "x"), ("b", "x"), ("c", "x")
    before = {a: (1000, 0, 100), b: (5000, 0, 0)}
    after = {a: (3000, 500, 1100), c: (9000, 0, 9000)}  # b closed, c opened in between
    assert limited_share(before, after) == {"rwnd_limited": 0.25, "sndbuf_limited": 0.5}
    assert limited_share({}, after) == {"rwnd_limited": None, "sndbuf_limited": None}


@pytest.mark.parametrize("stalled, rate, expect", [
    (80.0, 700e6, True),    # stalled on send buffers and the link below its ceiling
    (80.0, 950e6, False),   # stalled, but the link ran at its ceiling: the link set the rate
    (10.0, 700e6, False),   # the link below its ceiling, but not for want of send buffer
    (None, 700e6, False),   # not measured (a record from before the check)
])
def test_the_send_buffer_guard_blames_the_senders_only_when_the_link_was_not_full(stalled, rate, expect):
    from nslab.experiments.alias.model import invalid_reasons
    m = {"late_start": False, "start_margin_s": 0.5, "sockets_at_window_start": 4,
         "sockets_at_window_end": 4, "sockets_closed_in_window": 0, "sample_s": 0.01,
         "receiver_bps": rate, "sndbuf_limited_pct": stalled, "link_ceiling_bps": 956e6}
    reasons = invalid_reasons(m, 4, 5.0)
    assert bool(reasons) is expect
    if expect:
        assert reasons == ["the senders were send-buffer limited 80 % of their busy time while "
                           "the link carried 73 % of its ceiling"]


def test_a_sample_is_read_as_the_sampler_writes_it():
    """Socket keys ``local|remote`` become (local, remote); a sender's limits
    become its three counters (busy, rwnd-limited, sndbuf-limited)."""
    from nslab.experiments.alias.runner import Sample, from_sampler
    raw = {"t": 10.5, "t_start": 10.25, "t_end": 10.75, "counter": 1000, "cpu": [7, 40],
           "sockets": {"192.168.2.1:5001|192.168.2.9:40000": 600,
                       "192.168.2.2:5001|192.168.2.9:40002": "400"},
           "limits": {"192.168.2.1:5001|192.168.2.9:40000": [900, 50, "0"]}}
    assert from_sampler(raw) == Sample(
        10.5, {("192.168.2.1:5001", "192.168.2.9:40000"): 600,
               ("192.168.2.2:5001", "192.168.2.9:40002"): 400},
        2, 1000, 7, 40, 0.5, {("192.168.2.1:5001", "192.168.2.9:40000"): (900, 50, 0)})
    assert from_sampler({**raw, "limits": {}}).limits == {}
    del raw["limits"]
    assert from_sampler(raw).limits == {}
    # 0.3.5's sampler times each read: the link's counter has its own time,
    # and the sample's uncertainty is the longer read
    both = from_sampler({**raw, "t": 10.3, "t_start": 10.25, "t_end": 10.35,
                         "t_counter": 10.5, "counter_s": 0.25})
    assert (both.t, both.t_counter, both.duration) == (10.3, 10.5, 0.25)


def test_a_later_round_measures_only_the_ends_of_the_range_for_undecided_claims(tmp_path):
    """Each alias claim names the points it is judged on: the small-N plateau
    and the largest N of the alias sweep, and N=254 of both modes for the -P
    control. A later round of the default sweep (13 N, two modes) measures only
    those of the claims still undecided, not the N in between."""
    import dataclasses

    from nslab.store.reporting import Claim
    run = tmp_path / "alias" / "nlc947"
    shutil.copytree(data("alias_run"), run)
    found = {c.claim: c for c in write_report(str(run)).claims}
    assert len(found) == 4 and all(c.reads for c in found.values()), found
    cfg = AliasConfig.preset("full")
    study = AliasStudy()
    pts = study.points(cfg)
    assert len({(p["mode"], p["n"]) for p in pts}) == 25

    def open_(title: str) -> Claim:
        return dataclasses.replace(found[title], verdict="undecided")
    rises = open_("Throughput rises with the number of aliases (posts: +7.6 %, +7.8 %)")
    summed = open_("The posts' rise comes from how iperf's reports were summed")
    control = open_("The rise comes from more TCP connections, not from the aliases")
    got = {(p["mode"], p["n"]) for p in study.needed(cfg, pts, [rises, summed])}
    assert got == {("alias", n) for n in (1, 2, 4, 8, 16, 254)}
    assert {(p["mode"], p["n"]) for p in study.needed(cfg, pts, [control])} == {
        ("alias", 254), ("parallel", 254)}
    assert len(study.needed(cfg, pts, [rises])) == 6 * cfg.repeat
    unsaid = Claim("a claim that does not say what it reads", "", "undecided", "")
    assert study.needed(cfg, pts, [rises, unsaid]) == pts


def test_the_control_claim_stays_when_every_parallel_point_was_left_out(tmp_path):
    """With no valid -P point, the control claim is not dropped: it is made,
    undecided, and reads the top of the range of both modes again."""
    import json
    run = tmp_path / "alias" / "nlc948"
    shutil.copytree(data("alias_run"), run)
    lines = []
    for line in (run / "records.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["params"]["mode"] == "parallel":
            rec["measurements"]["invalid"] = ["the receiver's window closed early"]
        lines.append(json.dumps(rec))
    (run / "records.jsonl").write_text("\n".join(lines) + "\n")
    found = {c.claim: c for c in write_report(str(run)).claims}
    control = found["The rise comes from more TCP connections, not from the aliases"]
    assert control.verdict == "undecided" and "left out" in control.why
    assert control.reads == [{"mode": "parallel", "n": 254}, {"mode": "alias", "n": 254}]


def test_every_claim_stays_when_every_point_was_left_out(tmp_path):
    """A run whose every point was left out (a noisy neighbour on the bed's CPU
    the whole time) makes all four claims, undecided, saying why: none drops
    out of the table (two did: a bench run under a CPU hog showed 17 claims
    where an idle one shows 19)."""
    import json
    run = tmp_path / "alias" / "nlc949"
    shutil.copytree(data("alias_run"), run)
    lines = []
    for line in (run / "records.jsonl").read_text().splitlines():
        rec = json.loads(line)
        rec["measurements"]["invalid"] = ["host interference: other tasks took 25 % of the CPUs"]
        lines.append(json.dumps(rec))
    (run / "records.jsonl").write_text("\n".join(lines) + "\n")
    found = {c.claim: c for c in write_report(str(run)).claims}
    assert len(found) == 4, found
    ends = "no valid point at N<=16 or at the largest N"
    assert [c.why for c in found.values()] == [ends] * 3 + [
        "every point of one mode at every N was left out"], found
    assert all(c.verdict == "undecided" for c in found.values())
    summed = found["The posts' rise comes from how iperf's reports were summed"]
    assert summed.measured == "nothing to compare" and summed.reads is None


def test_points_left_out_by_host_interference_say_so_in_every_claim(tmp_path):
    """The same, with the points left out for host interference (``host.disturbed``,
    as a CPU hog on the bed leaves them): each claim's reason names it."""
    import json
    run = tmp_path / "alias" / "nlc94a"
    shutil.copytree(data("alias_run"), run)
    lines = []
    for line in (run / "records.jsonl").read_text().splitlines():
        rec = json.loads(line)
        rec["host"] = {"disturbed": True, "other_pct": {"0": 24.6, "1": 25.1}, "reruns": 1,
                       "source": "task scan: share of all CPUs", "threshold_pct": 10.0,
                       "top": [["python3", 2458.0]], "worst_cpu": 1, "worst_pct": 25.1}
        lines.append(json.dumps(rec))
    (run / "records.jsonl").write_text("\n".join(lines) + "\n")
    found = write_report(str(run)).claims
    assert len(found) == 4 and all(c.verdict == "undecided" for c in found), found
    for c in found:
        assert c.why.endswith("host interference: other tasks took up to 25 % of the CPUs during "
                              f"{len(lines)} of {len(lines)} points (measured again, then left "
                              "out; at worst most to python3 (2458 ms))"), c.why


class _HereNode:
    """A node whose processes run in this namespace (the sampler on ``lo``)."""

    name = "here"

    def popen(self, argv, *, name="", stdin=None, **_):
        import subprocess

        from nslab.runtime.proc import Process
        return Process(argv, name=name, stdin=subprocess.DEVNULL if stdin is None else stdin)


def test_one_sampler_serves_point_after_point_and_ends_with_its_input():
    """The run's sampler is started once: each line of instants gets one line
    of samples, taken no sooner than asked, and the end of its input ends it."""
    import time

    from nslab.experiments.alias.runner import start_samplers
    (s,) = start_samplers((_HereNode(), "lo", False), timeout=600)
    try:
        for _ in range(3):
            t = time.time()
            s.ask([t + 0.05, t + 0.1])
            got = s.read(timeout=600)  # a start starved of CPU is slow, not wrong
            assert len(got) == 2
            assert got[0].t >= t + 0.05 and got[1].t >= t + 0.1
            # the link's counter is read after the sockets, each read timed
            assert all(g.t <= g.t_counter and 0 <= g.duration < 60 for g in got)
            assert got[0].rx_bytes <= got[1].rx_bytes  # lo's counter, read twice
    finally:
        s.close()
    assert s.proc.popen.returncode == 0


def test_a_sampler_that_ended_says_so_instead_of_waiting():
    import pytest

    from nslab.errors import LabError
    from nslab.experiments.alias.runner import start_samplers
    (s,) = start_samplers((_HereNode(), "lo", True), timeout=600)
    s.close()
    with pytest.raises(LabError, match="the counter sampler in here ended"):
        s.read(timeout=600)


@pytest.mark.timed
def test_a_sampler_asked_and_not_read_is_stopped_at_once():
    """Ended mid-point (Ctrl-C, a failed spawn), a sampler waiting for its
    last instant (here an hour away) is stopped, not waited for."""
    import time

    from nslab.experiments.alias.runner import start_samplers
    (s,) = start_samplers((_HereNode(), "lo", False), timeout=600)
    s.ask([time.time() + 3600])
    t0 = time.monotonic()
    s.close()
    assert time.monotonic() - t0 < 4.0 and s.proc.popen.returncode is not None


class _SilentNode(_HereNode):
    """A node whose sampler never says it is ready (it sleeps)."""

    def popen(self, argv, **kw):
        return super().popen(["sleep", "60"], **kw)


def test_a_sampler_that_never_says_ready_is_stopped_and_named():
    from nslab.errors import LabError
    from nslab.experiments.alias.runner import start_samplers
    with pytest.raises(LabError, match="the counter sampler in here did not say it was ready "
                                       "within 0 s"):
        start_samplers((_SilentNode(), "lo", False), timeout=0.2)
    import psutil
    assert not [p for p in psutil.process_iter(["cmdline", "ppid"])
                if p.info["cmdline"] == ["sleep", "60"] and p.info["ppid"] == os.getpid()]


def test_the_alias_study_is_refused_across_hosts_before_anything_is_built():
    with pytest.raises(InputError, match="the alias study runs on one machine .* --uplink"):
        AliasStudy().check_hosts(AliasConfig.preset("quick"))


def _noisy(tmp_path, change=None):
    """The claims of a quick run measured beside a roaming noisy neighbour
    (``nslab bench verdicts --noise roaming --only alias``, this VM,
    2026-12-01, two rounds): every point at N=254 disturbed (its 254 senders
    wait for a CPU among themselves, so the lab's own wait does not clear
    it), those at N=1 not; ``change(record)`` edits each record first."""
    import json

    from nslab.experiments.alias.report import claims
    from nslab.store.records import disturbed
    from nslab.store.reporting import load_run
    run = tmp_path / "alias" / "nl59e4"
    shutil.copytree(data("alias_noisy_run"), run)
    recs = [json.loads(x) for x in (run / "records.jsonl").read_text().splitlines()]
    for rec in recs:
        if change:
            change(rec)
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    stored = load_run(str(run), SCHEMA, "alias")
    hit = {(r.params.mode, r.params.n) for r in stored.records if disturbed(r)}
    assert hit == {("alias", 254), ("parallel", 254)}
    found = claims(stored.records, summarize(stored.records), "2.1.8", stored.published)
    return {c.claim.split(" (")[0]: c for c in found}


def test_disturbed_points_at_the_top_decide_between_what_they_read_and_the_ceiling(tmp_path):
    """A busy host only lowers a figure the shaped link sets, and no figure
    passes the link's ceiling: judged on the rank interval over both bounds,
    the claims on the receiver's figure decide as a quiet host's run does
    (no overhead, no rise, -P N alike), saying how; the clients' sum, which a
    busy host can move either way, stays undecided and says why."""
    found = _noisy(tmp_path)
    overhead = found["Linux IP aliasing adds no measurable overhead"]
    rises = found["Throughput rises with the number of aliases"]
    control = found["The rise comes from more TCP connections, not from the aliases"]
    assert (overhead.verdict, rises.verdict, control.verdict) == ("agrees", "disagrees", "agrees")
    for c in (overhead, rises, control):
        assert c.why.startswith("the rank interval over their bounds lies "), c.why
        assert "with the 12 point(s) at N=254 the host disturbed, each anywhere between the " \
            "lowest rate its bytes allow" in c.why, c.why
        assert "Hodges-Lehmann, Mann-Whitney)" in c.measured, c.measured
    # the aliases' points at N=254 are all disturbed: the ends name both bounds
    assert "(0 undisturbed, 6 disturbed): shift " in overhead.measured, overhead.measured
    assert "with the disturbed points at their lower bounds, " in overhead.measured
    assert "0 undisturbed and 6 disturbed of -P N" in control.measured, control.measured
    summed = found["The posts' rise comes from how iperf's reports were summed"]
    assert summed.verdict == "undecided" and "host interference" in summed.why
    assert "the lab's own tasks waited for a CPU up to" in summed.why


def _lower_disturbed(count):
    """A change for :func:`_noisy`: the first ``count`` disturbed points of
    the aliases read half the link."""
    state = {"left": count}

    def halve(rec):
        if rec["host"]["disturbed"] and rec["params"]["mode"] == "alias" and state["left"]:
            rec["measurements"]["receiver_bps"] /= 2
            state["left"] -= 1
    return halve


def test_a_disturbed_point_read_far_lower_leaves_no_overhead_undecided(tmp_path):
    """One of the aliases' six disturbed points at N=254 read half the link:
    at its lower bound its six ratios to the plateau's six values are the
    lowest of the 36, and a 95 % rank interval of six against six leaves out
    only five at each end, so the interval reaches below -2 % there (at the
    ceiling it does not): no overhead is not decided from the disturbed
    points, and the row gives the interval; the rise, whose interval lies
    under +2 % at both ends, still disagrees."""
    found = _noisy(tmp_path, _lower_disturbed(1))
    overhead = found["Linux IP aliasing adds no measurable overhead"]
    assert overhead.verdict == "undecided", overhead
    assert "host interference" in overhead.why
    assert ("with the 12 point(s) at N=254 the host disturbed, each anywhere between the "
            "lowest rate its bytes allow") in overhead.why, overhead.why
    assert re.search(r"the rank interval over their bounds, \[-\d+\.\d, [-\d.]+\] %, "
                     r"straddles -2\.0 %", overhead.why), overhead.why
    assert found["Throughput rises with the number of aliases"].verdict == "disagrees"


def test_without_the_link_s_ceiling_disturbed_points_stay_out(tmp_path):
    """A record with no ceiling (before it was measured) gives no upper bound:
    its disturbed points stay out, and the claims on the top N stay undecided."""
    def drop(rec):
        rec["measurements"]["link_ceiling_bps"] = None
    found = _noisy(tmp_path, drop)
    assert all(c.verdict == "undecided" for c in found.values()), found


def test_a_disturbed_point_at_the_plateau_stays_out_and_a_decided_claim_stays(tmp_path):
    """A disturbed point at N <= 16 is not bracketed (a busy host's lowering
    it would raise the rise): with every N=1 point disturbed too, no
    overhead and the rise have nothing to compare (the control, both of
    whose sides are at N=254, still brackets). And a claim the undisturbed points decide keeps their
    verdict: with every point undisturbed, the claims read as they do
    without any disturbance, no bounds in their rows."""
    def plateau(rec):
        rec["host"]["disturbed"] = True
    found = _noisy_all(tmp_path / "a", plateau)
    for name in ("Linux IP aliasing adds no measurable overhead",
                 "Throughput rises with the number of aliases"):
        assert found[name].verdict == "undecided" and found[name].measured == \
            "nothing to compare", found[name]

    def quiet(rec):
        rec["host"]["disturbed"] = False
    found = _noisy_all(tmp_path / "b", quiet)
    for name in ("Linux IP aliasing adds no measurable overhead",
                 "The rise comes from more TCP connections, not from the aliases"):
        assert found[name].verdict == "agrees" and "bounds" not in found[name].measured


def _noisy_all(tmp_path, change, src=None):
    """As :func:`_noisy` (or on the run at ``src``), with no check of which
    points were disturbed."""
    import json

    from nslab.experiments.alias.report import claims
    from nslab.store.reporting import load_run
    run = tmp_path / "alias" / "nl59e4"
    shutil.copytree(src or data("alias_noisy_run"), run)
    recs = [json.loads(x) for x in (run / "records.jsonl").read_text().splitlines()]
    for rec in recs:
        change(rec)
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    stored = load_run(str(run), SCHEMA, "alias")
    found = claims(stored.records, summarize(stored.records), "2.1.8", stored.published)
    return {c.claim.split(" (")[0]: c for c in found}


def test_every_disturbed_point_at_the_top_is_taken_in_and_counted(tmp_path):
    """However many points the host disturbed at the top N, each is taken in
    between its bounds (judging them is two rank intervals, not a choice
    per point; the t interval's corners took the first 12): 20 more of the
    aliases, measured last and each reading half the link, are counted and
    move the interval (no overhead, which agreed, is left undecided)."""
    import json
    src = tmp_path / "src"
    shutil.copytree(data("alias_noisy_run"), src)
    recs = [json.loads(x) for x in (src / "records.jsonl").read_text().splitlines()]
    last = max((r for r in recs if r["host"]["disturbed"] and r["params"]["mode"] == "alias"),
               key=lambda r: r["time"])
    end = max(r["time"] for r in recs)
    extra = []
    for i in range(20):
        e = json.loads(json.dumps(last))
        e["time"] = end + 10 + i
        e["params"]["repeat"] += 100 + i
        e["measurements"]["receiver_bps"] /= 2
        extra.append(e)
    (src / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs + extra))
    found = _noisy_all(tmp_path / "b", lambda rec: None, src)
    overhead = found["Linux IP aliasing adds no measurable overhead"]
    assert overhead.verdict == "undecided", overhead
    assert "with the 32 point(s) at N=254 the host disturbed" in overhead.why, overhead.why
    assert "(0 undisturbed, 26 disturbed)" in overhead.measured, overhead.measured


def test_a_disturbed_point_that_read_nothing_is_not_bracketed(tmp_path):
    """A disturbed point whose receiver read 0 has a lower bound of 0, which
    no ratio compares: the claims its undisturbed points leave undecided
    stay so, and the report is still written."""
    state = {"done": False}

    def nothing(rec):
        if rec["host"]["disturbed"] and rec["params"]["mode"] == "alias" and not state["done"]:
            rec["measurements"]["receiver_bps"] = 0.0
            state["done"] = True
    found = _noisy_all(tmp_path, nothing)
    for name in ("Linux IP aliasing adds no measurable overhead",
                 "Throughput rises with the number of aliases",
                 "The rise comes from more TCP connections, not from the aliases"):
        assert found[name].verdict == "undecided", found[name]
        assert "rank interval" not in found[name].why, found[name].why


class _Proc:
    def __init__(self, argv, returncode=None):
        self.argv, self.popen = argv, type("P", (), {"returncode": returncode})()

    def alive(self):
        return self.popen.returncode is None


class _Node:
    name = "srv"

    def __init__(self):
        self.started = []

    def popen(self, argv, **kw):
        self.started.append((argv, kw))
        return _Proc(argv)


def test_every_server_that_ended_is_started_again_and_said(tmp_path, monkeypatch, caplog):
    """Every alias's server that ended starts again (not only the next
    point's: set-up's wait counts them all), each said in one warning
    naming the servers' output and named in that output; the rest are
    left be."""
    import logging

    from nslab.experiments.alias import runner as mod
    from nslab.store.results import ResultStore
    waits = []
    monkeypatch.setattr(mod, "wait_listening", lambda node, port, timeout, count: waits.append(count))
    r = mod.AliasRunner.__new__(mod.AliasRunner)
    r.server, r.store = _Node(), ResultStore(path=str(tmp_path))
    r.addresses = ["192.168.2.1", "192.168.2.2", "192.168.2.3"]
    r.servers = {a: _Proc([a]) for a in r.addresses}
    with open(tmp_path / "log", "a") as r.server_log:
        assert r.mend_servers() == [] and waits == [] and r.server.started == []
        r.servers["192.168.2.2"].popen.returncode = 1
        r.servers["192.168.2.3"].popen.returncode = -11
        old = dict(r.servers)
        with caplog.at_level(logging.WARNING):
            assert r.mend_servers() == ["192.168.2.2", "192.168.2.3"]
    assert r.servers["192.168.2.1"] is old["192.168.2.1"]
    assert [argv[argv.index("-B") + 1] for argv, _ in r.server.started] == \
        ["192.168.2.2", "192.168.2.3"]
    assert all(kw["stdout"] is r.server_log for _, kw in r.server.started)
    assert waits == [3]  # every alias listens again before the point
    assert ("the iperf server on 192.168.2.2 ended (exit status 1); starting it again "
            "(its output: raw/servers.txt)") in caplog.text
    assert "ended (exit status -11)" in caplog.text
    written = (tmp_path / "log").read_text().splitlines()
    assert len(written) == 2 and all("iperf -s" in w for w in written), written
    assert "-B 192.168.2.3" in written[1]
    r.server = None  # two-box mode: the other machine's servers are not ours to start
    assert r.mend_servers() == []


def test_the_report_lists_the_points_before_which_servers_were_started_again(tmp_path):
    """A record keeps the servers started again before its point
    (``servers_restarted``, schema version 4), and the report lists each
    such point with its addresses; a run without any says nothing."""
    import json
    import shutil

    from nslab.experiments.alias.report import write_report
    from tests.conftest import data
    run = tmp_path / "nl0001"
    shutil.copytree(data("alias_run"), run)
    write_report(str(run))
    assert "started again" not in (run / "report.md").read_text()
    lines = (run / "records.jsonl").read_text().splitlines()
    r = json.loads(lines[0])
    r["measurements"]["servers_restarted"] = ["192.168.2.1", "192.168.2.7"]
    lines[0] = json.dumps(r)
    (run / "records.jsonl").write_text("\n".join(lines) + "\n")
    write_report(str(run))
    md = (run / "report.md").read_text()
    p = r["params"]
    assert "**iperf server(s) started again before 1 point(s)**" in md, md
    assert (f"- {p['mode']} N={p['n']} repeat {p['repeat']}: 192.168.2.1, 192.168.2.7"
            in md), md
