"""The Mininet CLI's `iperf` on a lab: the server's rate is read from the
server's own output, the client's from the client's, each printed as iperf
prints it (captured iperf2 output, no root)."""
import os

import pytest

from nslab.cmdline.mncli import iperf_rate, iperf_results
from nslab.traffic.iperf import parse_text
from tests.conftest import data


def text(version, name):
    return open(data(os.path.join("iperf", version, name))).read()


@pytest.mark.parametrize("version", ["2.1.8", "2.2.1"])
def test_tcp_gives_the_servers_own_rate_and_the_clients(version):
    server_all = text(version, "tcp_server_enhanced.txt").splitlines()
    # the server's output of its first connection (a server the CLI starts serves one)
    first = next(i for i, l in enumerate(server_all) if "connected with" in l)
    end = next((i for i, l in enumerate(server_all) if i > first + 1 and "connected with" in l),
               len(server_all))
    server = "\n".join(server_all[:end])
    client = parse_text(text(version, "tcp_client.txt"))
    assert not client.server_reports  # a TCP client gets none: the old code used its own rate
    got = iperf_results(server, client)
    assert got == [iperf_rate(parse_text(server).total_bps), iperf_rate(client.total_bps)]
    assert got[0] != got[1]


def test_udp_falls_back_on_the_server_report_the_client_got():
    client = parse_text(text("2.1.8", "udp_client_enhanced.txt"))
    assert iperf_results("", client)[0] == "52.4 Mbits/sec"
    assert iperf_results("", parse_text(text("2.1.8", "tcp_client.txt")))[0] == \
        "no server report"


@pytest.mark.parametrize("bps, said", [(13.1e9, "13.1 Gbits/sec"), (954e6, "954 Mbits/sec"),
                                       (1.05e9, "1.05 Gbits/sec"), (52.4e6, "52.4 Mbits/sec"),
                                       (800e3, "800 Kbits/sec"), (12, "12 bits/sec")])
def test_rates_read_as_iperf_prints_them(bps, said):
    assert iperf_rate(bps) == said
