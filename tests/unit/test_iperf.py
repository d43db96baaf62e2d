"""Parsers on output captured from iperf 2.1.8 (Debian 12) and 2.2.1 (Debian 13),
in tests/data/iperf/<version>/ (see its README for how each was made)."""
import math
import os
import re

import pytest

from nslab.errors import InputError
from nslab.traffic.iperf import (client_argv, parse, parse_csv, parse_text, parse_version, server_argv,
                         version_of)
from tests.conftest import data

VERSIONS = ("2.1.8", "2.2.1")


def read(name, version="2.1.8"):
    with open(data("iperf", version, name)) as f:
        return f.read()


def test_plain_tcp_client():
    rep = parse(read("tcp_client.txt"))
    assert not rep.udp and rep.sum is None
    (s,) = rep.streams
    assert s.mbps == 949 and s.end == pytest.approx(2.0272)
    assert (s.local, s.local_port, s.remote, s.remote_port) == ("10.0.0.1", 33762, "10.0.0.2", 5001)
    assert s.bytes == 229 * 1024 ** 2
    assert rep.total_bps == 949e6


def test_parallel_client_has_three_streams_and_a_sum():
    rep = parse(read("tcp_client_P3.txt"))
    assert [s.id for s in rep.streams] == ["1", "2", "3"]
    assert [s.mbps for s in rep.streams] == [332, 309, 311]
    assert rep.sum.mbps == 966 and rep.total_bps == 966e6
    assert {s.local_port for s in rep.streams} == {45298, 45286, 45284}


def test_enhanced_client_keeps_intervals_apart_from_the_final():
    rep = parse(read("tcp_client_enhanced.txt"))
    (s,) = rep.streams
    assert s.mbps == 956 and s.end == pytest.approx(2.0146)
    assert [i.mbps for i in rep.intervals] == [968, 957]
    assert s.local == "10.0.0.1"  # the %h1-eth0 device suffix is dropped


def test_kbits_format_as_in_the_alias_posts():
    rep = parse(read("tcp_client_kbits.txt"))
    assert rep.streams[0].bps == 955892e3
    assert rep.streams[0].bytes == 235136 * 1024


def test_csv_tcp():
    rep = parse(read("tcp_client_P3_csv.txt"))
    assert [s.bps for s in rep.streams] == [320295663, 309029420, 322977676]
    assert rep.streams[0].bytes == 81920060
    assert rep.total_bps == 320295663 + 309029420 + 322977676


def test_udp_enhanced_client_keeps_the_server_report_with_latency():
    rep = parse(read("udp_client_enhanced.txt"))
    assert rep.udp
    assert rep.streams[0].mbps == pytest.approx(52.4)
    (srv,) = rep.server_reports
    assert (srv.lost, srv.total) == (0, 8920)
    assert srv.latency_ms == {"avg": 0.004, "min": 0.002, "max": 0.137, "stdev": 0.002}


def test_udp_server_log():
    rep = parse_text(read("udp_server_enhanced.txt"))
    assert rep.udp and rep.streams[0].total == 8920 and rep.streams[0].remote_port == 51749


def test_udp_csv():
    rep = parse_csv(read("udp_client_csv.txt"))
    assert rep.udp and rep.streams[0].lost == 0 and rep.streams[0].bps == 52437558


def test_tcp_server_log_with_many_connections():
    rep = parse(read("tcp_server_enhanced.txt"))
    assert len(rep.streams) == 10
    assert rep.sum is not None and rep.sum.mbps == 957


def test_argv_builders():
    assert client_argv("10.0.0.2", time=5, parallel=3, mss=1448, nodelay=True, cc="bbr",
                       txstart=1700000000.0) == [
        "iperf", "-c", "10.0.0.2", "-p", "5001", "-t", "5", "-P", "3", "-M", "1448", "-N",
        "-Z", "bbr", "--txstart-time", "1700000000.000000"]
    assert client_argv("h", udp=True, rate="10M", csv=True)[-5:] == ["-u", "-b", "10M", "-y", "C"]
    assert server_argv(bind="192.168.2.7", udp=True) == ["iperf", "-s", "-p", "5001", "-u",
                                                          "-B", "192.168.2.7", "-e"]
    with pytest.raises(InputError):
        client_argv("h", time=0)
    with pytest.raises(InputError):
        client_argv("h", parallel=0)


# -- iperf 2.2.1 (Debian 13), and what both versions share ---------------------------

def _captures(version):
    folder = data("iperf", version)
    return sorted(f for f in os.listdir(folder) if f.endswith(".txt") and f != "version.txt")


#: a report line of the text format: "[  3] 0.0000-2.0130 sec ... Bytes", "[SUM-3] ..."
_LINE = re.compile(r"^\[\s*(\d+|SUM(-\d+)?)\]\s+[\d.]+\s*-\s*[\d.]+\s+sec\s+[\d.]+\s+[KMGT]?Bytes")


@pytest.mark.parametrize("version", VERSIONS)
def test_both_versions_captured_every_form(version):
    assert _captures(version) == _captures("2.1.8")
    assert len(_captures(version)) == 15


@pytest.mark.parametrize("version,name", [(v, n) for v in VERSIONS for n in _captures(v)])
def test_no_report_line_of_either_version_is_dropped(version, name):
    """Every interval, final, sum and server report line lands somewhere in the report."""
    text = read(name, version)
    rep = parse(text, version)
    assert rep.version == version and rep.to_dict()["version"] == version
    assert rep.streams
    if name.endswith("_csv.txt"):
        assert len(rep.streams) + (rep.sum is not None) + len(rep.intervals) == len(text.splitlines())
        return
    lines = [l for l in text.splitlines() if _LINE.match(l)]
    assert len(rep.intervals) + len(rep.streams) + (rep.sum is not None) + \
        len(rep.server_reports) == len(lines)
    assert rep.udp == name.startswith("udp")


def test_version_of_the_binary_not_of_the_output():
    assert parse_version(read("version.txt", "2.1.8")) == "2.1.8"
    assert parse_version(read("version.txt", "2.2.1")) == "2.2.1"
    assert parse_version("iperf: command not found") is None
    assert parse(read("tcp_client.txt")).version is None  # never guessed from the text


def test_version_of_a_node_runs_iperf_there():
    class Node:
        def run(self, argv, check, timeout):
            assert argv == ["iperf", "-v"] and not check
            # iperf prints its version on stderr
            return type("R", (), {"stdout": "", "stderr": read("version.txt", "2.2.1")})()
    assert version_of(Node()) == "2.2.1"


def test_221_plain_tcp_client():
    rep = parse(read("tcp_client.txt", "2.2.1"))
    (s,) = rep.streams
    assert s.bps == 23.5e9 and s.end == pytest.approx(2.0024)
    assert (s.local, s.local_port, s.remote, s.remote_port) == ("127.0.0.1", 35498, "127.0.0.1", 5811)
    assert s.bytes == int(5.49 * 1024 ** 3)


def test_221_enhanced_client_and_kbits():
    rep = parse(read("tcp_client_enhanced.txt", "2.2.1"))
    assert rep.streams[0].mbps == 28000 and rep.streams[0].local == "127.0.0.1"  # %lo dropped
    assert [i.mbps for i in rep.intervals] == [29400, 27100]
    # --txstart-time turns 2.2.1's output enhanced; -f k still parses
    rep = parse(read("tcp_client_kbits.txt", "2.2.1"))
    assert rep.streams[0].bps == 23952046e3 and rep.streams[0].bytes == 5869184 * 1024


@pytest.mark.parametrize("version,stream_ends,sum_end,sum_mbps", [
    ("2.1.8", [2.0298, 2.046, 2.0292], 2.0037, 966),
    ("2.2.1", [2.0127, 2.0105, 2.013], 2.0131, 40100),
])
def test_parallel_client_sum_interval_by_version(version, stream_ends, sum_end, sum_mbps):
    """The client's own -P SUM divides by its own interval: 2.1.8's here ends 42 ms
    before its slowest stream (so it reads above the bytes over the whole span)."""
    rep = parse(read("tcp_client_P3.txt", version), version)
    assert [s.end for s in rep.streams] == stream_ends
    assert rep.sum.end == sum_end and rep.sum.mbps == sum_mbps
    span = max(stream_ends)
    assert rep.span_bps == pytest.approx(sum(s.bytes for s in rep.streams) * 8 / span)
    if version == "2.1.8":
        assert rep.total_bps > rep.span_bps * 1.02
    else:
        assert rep.total_bps == pytest.approx(rep.span_bps, rel=0.005)


def test_csv_sum_row_only_in_221():
    old, new = parse(read("tcp_client_P3_csv.txt")), parse(read("tcp_client_P3_csv.txt", "2.2.1"))
    assert old.sum is None and len(old.streams) == 3
    assert new.sum.bps == 47202391983 and new.sum.bytes == 11877089472
    assert [s.id for s in new.streams] == ["1", "2", "3"] and new.total_bps == new.sum.bps


def test_221_udp_csv_jitter_nan():
    rep = parse_csv(read("udp_client_csv.txt", "2.2.1"))
    (s,) = rep.streams
    assert rep.udp and s.lost == 0 and s.bps == 52430263 and math.isnan(s.jitter_ms)


def test_221_udp_enhanced_client_server_report():
    rep = parse(read("udp_client_enhanced.txt", "2.2.1"))
    assert rep.streams[0].mbps == pytest.approx(52.4)
    (srv,) = rep.server_reports
    assert (srv.lost, srv.total) == (0, 8918)
    assert srv.latency_ms == {"avg": 0.003, "min": 0.001, "max": 0.034, "stdev": 0.001}


def test_221_enhanced_servers_sum_with_a_count():
    """2.2's -e server writes [SUM-3] (after a [SUM-cnt] header) where 2.1.8 wrote [SUM]."""
    rep = parse(read("tcp_server_enhanced.txt", "2.2.1"))
    assert [s.id for s in rep.streams] == [str(i) for i in range(1, 15)]
    assert rep.sum.id == "SUM" and rep.sum.mbps == 48800 and rep.sum.end == 5.0001
    assert sorted(s.mbps for s in rep.intervals if s.id == "SUM") == [40400, 47500]
    udp = parse(read("udp_server_enhanced.txt", "2.2.1"))
    assert udp.udp and (udp.sum.lost, udp.sum.total) == (0, 17836) and udp.sum.jitter_ms is None
    assert [(s.lost, s.total, s.remote_port) for s in udp.streams] == [(0, 8918, 35092),
                                                                        (0, 8918, 45647)]


@pytest.mark.parametrize("version,tcp_sums,udp_sums", [
    ("2.1.8", [2150, 2150, 2140], [(0, 3571), (0, 3566), (0, 3566)]),
    ("2.2.1", [37300, 47200, 53400], [(1, 3569), (0, 3566), (0, 3566)]),
])
def test_study_receivers_per_second_sums(version, tcp_sums, udp_sums):
    """Plain servers with -i 1 (the study files' receivers): one SUM a second."""
    tcp = parse_text(read("tcp_server_i1.txt", version))
    per_second = sorted((s for s in tcp.intervals if s.id == "SUM" and s.end - s.start < 1.5),
                        key=lambda s: s.start)
    assert [s.mbps for s in per_second] == pytest.approx(tcp_sums)
    udp = parse_text(read("udp_server_i1.txt", version))
    per_second = sorted((s for s in udp.intervals if s.id == "SUM"), key=lambda s: s.start)
    assert [(s.lost, s.total) for s in per_second] == udp_sums
    assert udp.sum.total == sum(s.total for s in udp.streams)
