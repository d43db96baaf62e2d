"""nslab-pktgen's send paths across a real veth: every frame of a burst arrives
once, in order, whatever the path; a shaped link stays shaped."""
import json

import pytest

from nslab.pktgen import pktgen_path
from nslab.topologies import pair

pytestmark = pytest.mark.root


def mac(node, intf):
    return node.run(["cat", f"/sys/class/net/{intf}/address"]).stdout.strip()


def send_and_count(lab, *send_args, sink_seconds=10.0):
    pg = pktgen_path()
    h1, h2 = lab["h1"], lab["h2"]
    sink = h2.popen([pg, "recv", "--port", "9", "--duration", str(sink_seconds)], name="sink")
    assert "ready" in sink.popen.stdout.readline()
    g = h1.run([pg, "send", "--dst", h2.ip, "--port", "9", *send_args,
                "--iface", "h1-eth0", "--dst-mac", mac(h2, "h2-eth0")], timeout=60)
    sink.stop()
    return json.loads(g.stdout), json.loads(sink.wait(timeout=10).stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["udp", "packet", "xdp"])
def test_every_path_delivers_an_exact_burst_in_order(make_lab, mode):
    lab = make_lab(pair())
    lab.static_arp()
    lab["h1"].run(["ethtool", "-K", "h1-eth0", "tso", "off", "gso", "off"], check=False)
    g, s = send_and_count(lab, "--size", "128", "--rate", "20000", "--count", "5000",
                          "--duration", "10", "--mode", mode)
    assert g["path"] == mode and g["sent"] == 5000 and g["errors"] == 0
    assert s["received"] == 5000 and s["max_seq"] == 4999 and s["reordered"] == 0
    # Paced: 5,000 frames at 20 kfps take 0.25 s, not a burst at the path's ceiling.
    assert 0.24 <= g["elapsed"] <= 0.3, g
    # The sink sees the pacing in the frames' send times: 50 us per batch of one.
    assert s["send_gap_us"]["n"] > 0
    assert 45 <= s["send_gap_us"]["avg"] <= 55, s["send_gap_us"]


@pytest.mark.parametrize("mode", ["auto", "packet"])
def test_the_shaper_of_a_shaped_link_is_kept(make_lab, mode):
    """On a 10 Mbit/s link a 64-byte frame takes 67.2 us with framing: 14,881 fps.
    Offered 40,000 fps with the qdisc kept, the shaper holds the rate."""
    lab = make_lab(pair(bw="10Mbit", framing=True))
    lab.static_arp()
    g, s = send_and_count(lab, "--size", "64", "--rate", "40000", "--duration", "2",
                          "--mode", mode, "--qdisc", "keep", sink_seconds=4)
    assert g["path"] == ("udp" if mode == "auto" else "packet")
    if mode == "auto":
        assert g["why"] == "auto: the qdisc is kept, so udp"
    assert s["received"] <= 14_881 * 2 * 1.05 + 200, s
    assert s["received"] >= 14_881 * 2 * 0.8, s
