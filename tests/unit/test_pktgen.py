"""nslab-pktgen's frames and options, without root: the frame the raw send paths
(AF_PACKET, AF_XDP) put in their rings, checked field by field, and the
options that must be refused before anything is sent."""
import ipaddress
import struct
import subprocess

import pytest

from nslab.errors import CapabilityError
from nslab.traffic.pktgen import pktgen_path
from tests.conftest import data


@pytest.fixture(scope="module")
def pg():
    try:
        return pktgen_path()
    except CapabilityError:
        pytest.skip("nslab-pktgen not built (make setup)")


def frame(pg, size, seq=0, ts=0, port=9):
    out = subprocess.run([pg, "frame", "--size", str(size), "--src", "192.168.1.10",
                          "--dst", "192.168.1.20", "--port", str(port),
                          "--src-mac", "02:00:00:00:00:0a", "--dst-mac", "02:00:00:00:00:14",
                          "--seq", str(seq), "--ts", str(ts)],
                         capture_output=True, text=True, check=True).stdout.strip()
    return bytes.fromhex(out)


def ones_complement_sum(data: bytes) -> int:
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


@pytest.mark.parametrize("size", [64, 65, 128, 512, 1518])
def test_frame_is_a_valid_ethernet_ipv4_udp_frame_of_the_asked_size(pg, size):
    f = frame(pg, size, seq=123456, ts=1_700_000_000_123_456_789, port=7000)
    # The kernel (or NIC) adds no FCS on veth: the bytes written are FRAME - 4.
    assert len(f) == size - 4
    assert f[0:6] == bytes.fromhex("020000000014")
    assert f[6:12] == bytes.fromhex("02000000000a")
    assert f[12:14] == b"\x08\x00"
    ip = f[14:34]
    assert ip[0] == 0x45 and ip[9] == 17 and ip[8] == 64
    assert struct.unpack("!H", ip[2:4])[0] == size - 4 - 14
    assert struct.unpack("!H", ip[6:8])[0] & 0x4000  # DF
    assert ones_complement_sum(ip) == 0xFFFF  # the header checksum is right
    assert ipaddress.ip_address(ip[12:16]) == ipaddress.ip_address("192.168.1.10")
    assert ipaddress.ip_address(ip[16:20]) == ipaddress.ip_address("192.168.1.20")
    sport, dport, ulen, csum = struct.unpack("!HHHH", f[34:42])
    assert dport == 7000 and ulen == size - 4 - 34 and csum == 0  # 0: no checksum (IPv4)
    # The payload the sink reads: sequence number and send time, host order.
    seq, ts = struct.unpack("=QQ", f[42:58])
    assert (seq, ts) == (123456, 1_700_000_000_123_456_789)
    assert set(f[58:]) <= {0}


def test_frames_differ_only_in_sequence_and_time(pg):
    a, b = frame(pg, 64, seq=1, ts=10), frame(pg, 64, seq=2, ts=20)
    diff = [i for i in range(len(a)) if a[i] != b[i]]
    assert diff and all(42 <= i < 58 for i in diff)


@pytest.mark.parametrize("argv, why", [
    (["--mode", "xdp", "--qdisc", "keep", "--iface", "lo", "--dst-mac", "02:00:00:00:00:01"],
     "bypasses the qdisc"),
    (["--mode", "live", "--qdisc", "keep", "--iface", "lo", "--dst-mac", "02:00:00:00:00:01"],
     "--mode live bypasses the qdisc"),
    (["--mode", "live"], "--mode live: no --iface"),
    (["--mode", "packet"], "--mode packet: no --iface"),
    (["--mode", "fast"], "bad --mode"),
    (["--qdisc", "maybe"], "bad --qdisc"),
    (["--spacing", "frames"], "--spacing frames is for --mode live only"),
    (["--spacing", "even"], "bad --spacing"),
])
def test_send_refuses_what_it_cannot_do(pg, argv, why):
    res = subprocess.run([pg, "send", "--dst", "127.0.0.1", "--size", "64", "--rate", "1",
                          "--duration", "0.1", *argv], capture_output=True, text=True, timeout=10)
    assert res.returncode == 2 and why in res.stderr, res.stderr
    assert res.stdout == ""  # nothing sent, no report


@pytest.mark.parametrize("every", ["3", "0", "131072", "x"])
def test_the_sink_takes_a_latency_sample_of_a_power_of_two_only(pg, every):
    res = subprocess.run([pg, "recv", "--port", "9", "--duration", "0.1", "--mode", "xdp",
                          "--iface", "lo", "--latency-every", every],
                         capture_output=True, text=True, timeout=10)
    assert res.returncode == 2 and "latency-every" in res.stderr, res.stderr
    assert res.stdout == ""


def test_auto_without_an_interface_falls_back_to_udp_and_says_why(pg):
    import json
    res = subprocess.run([pg, "send", "--dst", "127.0.0.1", "--port", "9", "--size", "64",
                          "--rate", "1000", "--count", "10", "--duration", "1", "--mode", "auto"],
                         capture_output=True, text=True, timeout=10)
    out = json.loads(res.stdout)
    assert out["path"] == "udp" and out["why"] == "auto: no --iface, so udp"
    assert out["sent"] + out["errors"] == 10  # nothing listens: some sends see the ICMP refusal


# -- the kernel's pktgen (the anchor), on output captured in the stock-kernel guest --
def test_kernel_pktgen_result_is_read_from_a_real_run():
    from nslab.traffic.pktgen import parse_kernel_pktgen
    got = parse_kernel_pktgen(open(data("pktgen/kernel-pktgen-veth.txt")).read())
    assert got == {"usec": 2221860, "sent": 100000, "pkt_size": 60, "pps": 45007.0,
                   "bps": 21603360.0, "errors": 0}
    # the pps pktgen prints is its count over its time
    assert got["pps"] == pytest.approx(got["sent"] / (got["usec"] / 1e6), rel=1e-4)


def test_kernel_pktgen_without_a_result_is_an_error():
    from nslab.traffic.pktgen import parse_kernel_pktgen
    with pytest.raises(ValueError, match="Result: Idle"):
        parse_kernel_pktgen("Params: count 0\nResult: Idle\n")


def test_kernel_pktgen_commands_count_the_fcs_and_refuse_odd_values():
    from nslab.traffic.pktgen import kernel_pktgen_commands
    cmds = dict((line.split()[0], line) for _, line in
                kernel_pktgen_commands("h1-eth0", "10.0.0.2", "aa:bb:cc:dd:ee:ff", 64, 0))
    assert cmds["pkt_size"] == "pkt_size 60" and cmds["clone_skb"] == "clone_skb 0"
    for bad in (("h1-eth0\nstart", "10.0.0.2", "aa:bb:cc:dd:ee:ff"),
                ("h1-eth0", "10.0.0.2 x", "aa:bb:cc:dd:ee:ff"),
                ("h1-eth0", "10.0.0.2", "aa:bb:cc:dd:ee:ff\nstop")):
        with pytest.raises(ValueError):
            kernel_pktgen_commands(*bad, 64, 0)
