"""The process-free reader of link and qdisc counters (nslab.traffic.nlstats):
against `ip -s -j link` and `tc -s -j qdisc` on this machine's own namespace,
its parsers on hand-built netlink messages, and its errors. No root: named
namespaces are faked (entering one is replaced by a record of it)."""
import base64
import contextlib
import json
import os
import shutil
import socket
import struct
import subprocess
import threading
import time

import pytest

from nslab.errors import LabError
from nslab.runtime.netlink import attr
from nslab.traffic import nlstats
from nslab.traffic.nlstats import (IFLA_STATS, IFLA_STATS64, LINK_COUNTERS, LINK_FIELDS,
                                   TC_H_ROOT, TCA_STATS, TCA_STATS2, TCA_STATS_QUEUE,
                                   NetnsCounters, parse_link_message, parse_qdisc_message)

IFLA_PAD, TCA_KIND, TCA_STATS_BASIC = 21, 1, 1
needs_ip = pytest.mark.skipif(not shutil.which("ip"), reason="needs iproute2 (ip)")
needs_tc = pytest.mark.skipif(not shutil.which("tc"), reason="needs iproute2 (tc)")


def _json(*argv):
    return json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout
                      or "[]")


def _ip_links():
    """``{ifname: (ifindex, {counter: value})}`` as ``ip -s -j link`` prints them."""
    out = {}
    for link in _json("ip", "-s", "-j", "link", "show"):
        st = link["stats64"]
        out[link["ifname"]] = (link["ifindex"], {
            "rx_packets": st["rx"]["packets"], "rx_dropped": st["rx"]["dropped"],
            "tx_packets": st["tx"]["packets"], "tx_dropped": st["tx"]["dropped"]})
    return out


def _tc_root_drops():
    """``{ifname: drops of its root qdiscs}`` as ``tc -s -j qdisc show`` prints them."""
    out = {}
    for q in _json("tc", "-s", "-j", "qdisc", "show"):
        if q.get("root"):
            out[q["dev"]] = out.get(q["dev"], 0) + q.get("drops", 0)
    return out


def _udp_over_lo(count):
    """Send ``count`` datagrams to 127.0.0.1 and receive them: lo counts each
    once as sent and once as received."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
        rx.bind(("127.0.0.1", 0))
        rx.settimeout(5)
        for _ in range(count):
            tx.sendto(b"x", rx.getsockname())
        for _ in range(count):
            rx.recv(16)


# -- against ip and tc, on this namespace --------------------------------------------------

@needs_ip
def test_link_counters_fall_between_ip_link_reads_around_them():
    ip0 = _ip_links()
    with NetnsCounters({name: (None, name) for name in ip0}) as c:
        ours1 = c.links()
        _udp_over_lo(50)
        ip2 = _ip_links()
        ours3 = c.links()
        ip4 = _ip_links()
        assert {name: c.ifindex(name) for name in ip0} == {n: i for n, (i, _) in ip0.items()}
    assert list(ours1) == list(ip0) and all(set(v) == set(LINK_COUNTERS) for v in ours1.values())
    for name in ip0:
        for k in LINK_COUNTERS:
            # counters only grow: every read lies between the reads around it
            assert (ip0[name][1][k] <= ours1[name][k] <= ip2[name][1][k] <= ours3[name][k]
                    <= ip4[name][1][k]), (name, k)
    for k in ("rx_packets", "tx_packets"):
        assert ours3["lo"][k] - ours1["lo"][k] >= 50


@needs_tc
def test_root_qdisc_drops_fall_between_tc_reads_around_them():
    names = [name for _, name in socket.if_nameindex()]
    with NetnsCounters({name: (None, name) for name in names}) as c:
        tc0 = _tc_root_drops()
        ours = {name: c.qdisc_drops(name) for name in names}
        tc1 = _tc_root_drops()
    for name in names:
        assert tc0.get(name, 0) <= ours[name] <= tc1.get(name, 0), name


def test_reads_from_many_threads_at_once_each_get_whole_answers():
    with NetnsCounters({"lo": (None, "lo")}) as c:
        got, errors = [], []

        def read():
            try:
                for _ in range(50):
                    got.append((c.links()["lo"], c.qdisc_drops("lo")))
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
        threads = [threading.Thread(target=read) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors and len(got) == 200
    assert all(set(links) == set(LINK_COUNTERS) for links, _ in got)


# -- errors ------------------------------------------------------------------------------

def test_an_interface_not_in_the_namespace_is_named():
    with pytest.raises(LabError, match=r"^this namespace: no interface nslab-nope0 \(No such device\)$"):
        NetnsCounters({"x": (None, "nslab-nope0")})
    with pytest.raises(LabError, match="is not an interface name"):
        NetnsCounters({"x": (None, "a" * 16)})


def test_a_namespace_that_does_not_exist_is_named_with_its_interfaces():
    ns = f"nslab-test-absent-{os.getpid()}"
    assert not os.path.exists(f"/run/netns/{ns}")
    with pytest.raises(LabError, match=rf"^netns {ns}: cannot enter it to read eth0, eth1: "):
        NetnsCounters({"a": (ns, "eth0"), "b": (ns, "eth1")})


def test_an_interface_gone_after_construction_is_named():
    c = NetnsCounters({"lo": (None, "lo")})
    try:
        space, name, _ = c._where["lo"]
        c._where["lo"] = (space, name, 0x7FFFFFF0)  # what an index no device has answers
        with pytest.raises(LabError, match=r"^this namespace: interface lo \(index 2147483632\) "
                                           r"is gone \(No such device\)$"):
            c.links()
        with pytest.raises(LabError, match=r"interface lo \(index 2147483632\) is gone"):
            c.qdisc_drops("lo")
        c._where["lo"] = (space, name, 1)
        assert c.links()["lo"]["rx_packets"] >= 0  # the socket still answers in turn
    finally:
        c.close()


@pytest.fixture
def fake_netns(monkeypatch):
    """Named namespaces that are this one: entering records the thread and the
    name, ``alive`` holds the names ``/run/netns`` still has."""
    entered, alive, sockets = [], set(), []
    here = os.stat("/proc/self/ns/net").st_ino

    @contextlib.contextmanager
    def restored():
        yield 0

    def enter(netns):
        if netns not in alive:
            raise FileNotFoundError(2, "No such file or directory")
        entered.append((threading.current_thread().name, netns))

    def inode(netns):
        if netns not in alive:
            raise FileNotFoundError(2, "No such file or directory")
        return here

    real_socket = nlstats._route_socket

    def route_socket():
        sockets.append(real_socket())
        return sockets[-1]
    monkeypatch.setattr(nlstats, "_thread_namespace_restored", restored)
    monkeypatch.setattr(nlstats, "_enter", enter)
    monkeypatch.setattr(nlstats, "_netns_inode", inode)
    monkeypatch.setattr(nlstats, "_route_socket", route_socket)
    return entered, alive, sockets


def test_one_socket_per_namespace_opened_by_a_thread_that_enters_it(fake_netns):
    entered, alive, sockets = fake_netns
    alive.update({"ns-a", "ns-b"})
    keys = {"a1": ("ns-a", "lo"), "b": ("ns-b", "lo"), "a2": ("ns-a", "lo"), "here": (None, "lo")}
    with NetnsCounters(keys) as c:
        assert entered == [("netns-counters", "ns-a"), ("netns-counters", "ns-b")]
        assert len(sockets) == 3
        assert list(c.links()) == ["a1", "b", "a2", "here"]
        alive.discard("ns-b")
        with pytest.raises(LabError, match="^netns ns-b: cannot read lo: the namespace is gone$"):
            c.links()
        with pytest.raises(LabError, match="^netns ns-b: cannot read lo: the namespace is gone$"):
            c.qdisc_drops("b")
        assert c.qdisc_drops("a1") >= 0
    assert all(s.fileno() == -1 for s in sockets)
    c.close()  # again: nothing


def test_a_failure_half_way_closes_the_sockets_already_opened(fake_netns):
    entered, alive, sockets = fake_netns
    alive.add("ns-a")
    with pytest.raises(LabError, match="^netns ns-gone: cannot enter it to read eth0: "):
        NetnsCounters({"here": (None, "lo"), "a": ("ns-a", "lo"), "x": ("ns-gone", "eth0")})
    assert len(sockets) == 2 and all(s.fileno() == -1 for s in sockets)
    with pytest.raises(LabError, match="^netns ns-a: no interface nslab-nope0 "):
        NetnsCounters({"a": ("ns-a", "nslab-nope0")})
    assert all(s.fileno() == -1 for s in sockets)


# -- parsers, on hand-built messages --------------------------------------------------------

def _tcmsg(ifindex, parent, *attrs):
    return struct.pack("=BxxxiIII", 0, ifindex, 0x10000, parent, 1) + b"".join(attrs)


def _queue(drops):
    """struct gnet_stats_queue: qlen, backlog, drops, requeues, overlimits."""
    return struct.pack("=5I", 3, 1500, drops, 7, 9)


def _tc_stats(drops):
    """struct tc_stats: bytes (u64), packets, drops, overlimits, bps, pps, qlen, backlog."""
    return struct.pack("=Q7I", 123456, 1000, drops, 5, 0, 0, 2, 3000)


def test_qdisc_drops_from_tca_stats2():
    msg = _tcmsg(5, TC_H_ROOT, attr(TCA_KIND, b"fq_codel\0"),
                 attr(TCA_STATS2 | 0x8000, attr(TCA_STATS_BASIC, struct.pack("=QI", 10, 2))
                      + attr(TCA_STATS_QUEUE, _queue(42))),
                 attr(TCA_STATS, _tc_stats(41)))
    assert parse_qdisc_message(msg) == (5, TC_H_ROOT, 42)  # TCA_STATS2 wins, as in tc


def test_qdisc_drops_from_the_old_tca_stats():
    msg = _tcmsg(3, 0x10001, attr(TCA_KIND, b"pfifo\0"), attr(TCA_STATS, _tc_stats(17)))
    assert parse_qdisc_message(msg) == (3, 0x10001, 17)


def test_qdisc_with_no_stats_or_short_ones_counts_no_drops():
    assert parse_qdisc_message(_tcmsg(2, TC_H_ROOT, attr(TCA_KIND, b"noqueue\0"))) == (2, TC_H_ROOT, 0)
    # TCA_STATS2 without its queue: tc prints no drops (and does not fall back)
    assert parse_qdisc_message(_tcmsg(2, TC_H_ROOT, attr(TCA_STATS2, b""),
                                      attr(TCA_STATS, _tc_stats(5))))[2] == 0
    # a struct shorter than ours is zero-filled, as tc copies it
    assert parse_qdisc_message(_tcmsg(2, TC_H_ROOT, attr(TCA_STATS, _tc_stats(9)[:16])))[2] == 9
    assert parse_qdisc_message(_tcmsg(2, TC_H_ROOT, attr(TCA_STATS, _tc_stats(9)[:12])))[2] == 0


def _ifinfomsg(index, *attrs):
    return struct.pack("=BxHiII", 0, 1, index, 0x10043, 0) + b"".join(attrs)


def test_link_counters_from_ifla_stats64_after_padding():
    values = [11, 22, 33, 44, 0, 1, 5, 6] + [99] * 16  # the struct goes on past the eight
    msg = _ifinfomsg(7, attr(3, b"gen-eth0\0"), attr(IFLA_STATS, struct.pack("=24I", *([1] * 24))),
                     attr(IFLA_PAD, b""), attr(IFLA_STATS64, struct.pack("=24Q", *values)))
    assert parse_link_message(msg) == (7, dict(zip(LINK_FIELDS, values)))
    assert parse_link_message(msg)[1]["tx_dropped"] == 6


def test_link_counters_from_the_32_bit_ifla_stats_or_none():
    values = list(range(1, 24))
    msg = _ifinfomsg(4, attr(IFLA_STATS, struct.pack("=23I", *values)))
    assert parse_link_message(msg) == (4, dict(zip(LINK_FIELDS, values)))
    assert parse_link_message(_ifinfomsg(4, attr(3, b"eth0\0"))) == (4, None)


def test_answers_are_matched_by_sequence_and_stale_ones_skipped():
    def nl(kind, seq, body):
        raw = struct.pack("=IHHII", 16 + len(body), kind, 0, seq, 0) + body
        return raw + b"\0" * (-len(raw) % 4)
    data = (nl(16, 3, b"stale") + nl(16, 8, b"first") + nl(2, 9, struct.pack("=i", -19))
            + nl(36, 10, b"q1") + nl(36, 10, b"q2"))
    got = {8: (0, []), 9: (0, [])}
    waiting = {8, 9}
    nlstats._Space._sort(memoryview(data), got, waiting, dump=False)
    assert got == {8: (0, [b"first"]), 9: (19, [])} and not waiting  # 3 and 10: not asked
    got10 = {10: (0, [])}
    waiting = {10}
    nlstats._Space._sort(memoryview(nl(36, 10, b"q1") + nl(36, 10, b"q2") + nl(3, 10, bytes(4))),
                         got10, waiting, dump=True)
    assert got10[10] == (0, [b"q1", b"q2"]) and not waiting


# -- a whole namespace's counters, for watch's sampler -------------------------------------

def _captured_dump():
    d = json.load(open(os.path.join(os.path.dirname(__file__), "..", "data", "ip",
                                    "link-dump.json")))
    return [base64.b64decode(m) for m in d["messages"]], d["ip_json"]


def test_a_captured_dump_reads_as_ip_s_j_link_printed_it():
    msgs, ip_json = _captured_dump()
    got = nlstats.parse_link_dump(msgs)
    assert set(got) == {link["ifname"] for link in ip_json} == {"lo", "va"}
    for link in ip_json:
        st = link["stats64"]
        want = {f"{d}_{k}": st[d][k] for d in ("rx", "tx")
                for k in ("bytes", "packets", "errors", "dropped")}
        assert got[link["ifname"]] == want, link["ifname"]
    assert got["va"]["tx_dropped"] > 0 and got["va"]["rx_bytes"] > 0  # the capture has both


def test_a_dump_without_names_or_counters_leaves_those_links_out():
    msgs, _ = _captured_dump()
    no_name = _ifinfomsg(9, attr(IFLA_STATS64, struct.pack("=8Q", *range(8))))
    no_stats = _ifinfomsg(10, attr(3, b"eth9\0"))
    got = nlstats.parse_link_dump([no_name, no_stats, *msgs, b"\x01"])
    assert set(got) == {"lo", "va"}


@needs_ip
def test_a_sweep_reads_every_link_between_ip_reads_around_it(monkeypatch):
    """The sweep's read of one namespace (here, this one: entering it is
    mocked, so no root), against `ip -s -j link` before and after it."""
    monkeypatch.setattr(nlstats, "_enter", lambda netns: None)

    def full():
        return {l["ifname"]: {f"{d}_{k}": l["stats64"][d][k] for d in ("rx", "tx")
                              for k in ("bytes", "packets")}
                for l in _json("ip", "-s", "-j", "link", "show")}
    before = full()
    _udp_over_lo(20)
    t0 = time.monotonic()
    when, spread, got = nlstats._timed_dump("this")
    t1 = time.monotonic()
    after = full()
    assert t0 <= when - spread <= when + spread <= t1
    assert set(got) == set(before)
    for name in before:
        for k, v in before[name].items():
            assert v <= got[name][k] <= after[name][k], (name, k)
    assert got["lo"]["tx_packets"] - before["lo"]["tx_packets"] >= 20


def test_a_slow_read_is_read_again_and_the_tightest_kept(monkeypatch):
    """A read the thread was kept off the CPU in is read again: its time was
    not known to within the bound."""
    monkeypatch.setattr(nlstats, "_enter", lambda netns: None)
    ticks = iter([0.0, 0.5, 1.0, 1.004, 2.0, 2.1])  # 0.5 s, then 4 ms: stop there
    monkeypatch.setattr(nlstats.time, "monotonic", lambda: next(ticks))
    reads = []
    monkeypatch.setattr(nlstats, "_nl_dump", lambda *a: reads.append(1) or iter(()))
    when, spread, got = nlstats._timed_dump("ns")
    assert len(reads) == 2 and when == pytest.approx(1.002) and spread == pytest.approx(0.002)
    ticks2 = iter([0.0, 0.5, 1.0, 1.7, 2.0, 2.3])  # never tight: the tightest of three
    monkeypatch.setattr(nlstats.time, "monotonic", lambda: next(ticks2))
    when, spread, _ = nlstats._timed_dump("ns")
    assert len(reads) == 5 and when == pytest.approx(2.15) and spread == pytest.approx(0.15)


def test_a_namespace_gone_before_its_read_is_none_and_the_others_read(monkeypatch):
    seen = []

    def enter(netns):
        seen.append(netns)
        if netns == "gone":
            raise FileNotFoundError(2, "No such file or directory")
    monkeypatch.setattr(nlstats, "_enter", enter)
    monkeypatch.setattr(nlstats, "in_each_namespace",
                        lambda items, fn, name, netns_of: [fn(i) for i in items])
    got = nlstats.sweep(["a", "gone", "b"])
    assert seen == ["a", "gone", "b"]
    assert got[1] is None and got[0] is not None and got[2] is not None
    assert "lo" in got[0][2]
