"""Parsers on output captured from iperf 2.1.8 on Debian 12 (tests/data/iperf)."""
import pytest

from nslab.errors import InputError
from nslab.iperf import client_argv, parse, parse_csv, parse_text, server_argv
from tests.conftest import data


def read(name):
    with open(data("iperf", name)) as f:
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
