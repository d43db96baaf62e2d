"""nslab-pktgen's send paths across a real veth: every frame of a burst arrives
once, in order, whatever the path; a shaped link stays shaped; the XDP sink
counts what the socket sink counts, lets other traffic through and goes with
its process; live frames need NAPI at the far end and auto says so."""
import json
import os
import signal
import subprocess
import time

import pytest

from nslab.errors import CapabilityError, CommandError

from nslab.traffic.pktgen import pktgen_path
from nslab.topologies import pair

# quiet: pacing and rates to the frame (make test runs these with nothing else)
pytestmark = [pytest.mark.root, pytest.mark.quiet]


def mac(node, intf):
    return node.run(["cat", f"/sys/class/net/{intf}/address"]).stdout.strip()


def send_and_count(lab, *send_args, sink_seconds=10.0, sink="udp", sink_args=()):
    pg = pktgen_path()
    h1, h2 = lab["h1"], lab["h2"]
    sink = h2.popen([pg, "recv", "--port", "9", "--duration", str(sink_seconds), "--mode", sink,
                     "--iface", "h2-eth0", *sink_args], name="sink")
    assert "ready" in sink.popen.stdout.readline()
    g = h1.run([pg, "send", "--dst", h2.ip, "--port", "9", *send_args,
                "--iface", "h1-eth0", "--dst-mac", mac(h2, "h2-eth0")], timeout=60)
    sink.stop()
    return json.loads(g.stdout), json.loads(sink.wait(timeout=10).stdout.strip().splitlines()[-1])


@pytest.mark.versioned  # nslab-pktgen built by gcc against linux-libc-dev
@pytest.mark.parametrize("mode, sink", [("udp", "udp"), ("packet", "udp"), ("xdp", "udp"),
                                        ("udp", "xdp"), ("live", "xdp")])
def test_every_path_delivers_an_exact_burst_in_order(make_lab, mode, sink):
    lab = make_lab(pair())
    lab.static_arp()
    lab["h1"].run(["ethtool", "-K", "h1-eth0", "tso", "off", "gso", "off"], check=False)
    g, s = send_and_count(lab, "--size", "128", "--rate", "20000", "--count", "5000",
                          "--duration", "10", "--mode", mode, sink=sink)
    assert s["path"] == ("udp" if sink == "udp" else "xdp-native")
    assert g["path"] == mode and g["sent"] == 5000 and g["errors"] == 0
    assert s["received"] == 5000 and s["max_seq"] == 4999 and s["reordered"] == 0
    # Paced: 5,000 frames at 20 kfps take 0.25 s, not a burst at the path's ceiling.
    assert 0.24 <= g["elapsed"] <= 0.3, g
    # The sink sees the pacing in the frames' send times: 50 us per batch of one.
    assert s["send_gap_us"]["n"] > 0
    assert 45 <= s["send_gap_us"]["avg"] <= 55, s["send_gap_us"]
    # Gaps of 100 us or more (the sender's wake-ups the host delayed: 80 of
    # 4,999 for udp here while the machine unpacked a Debian root) fit in the
    # stream's span; their count is exercised in the spaced-frames test.
    gap = s["send_gap_us"]
    assert 0 <= gap["long"] <= gap["n"] and gap["long"] * 100 <= gap["n"] * gap["avg"], gap


def test_spaced_live_frames_leave_evenly_each_one_accounted_for_and_the_sink_samples_latency(make_lab):
    """--spacing frames: the XDP program holds each frame until it is due, so
    the sink sees 5 us between send times (200 kfps) instead of a batch of 100
    every 500 us; every frame arrives once, in order, or is counted by the
    kernel as refused. --latency-every 16 times the frames whose sequence
    number is a multiple of 16, and still counts the gaps of every frame."""
    from experiments.rfc2544.bed import napi_on
    lab = make_lab(pair())
    lab.static_arp()
    assert napi_on(lab["h2"], "h2-eth0", 1, fifo=50)
    # Each mode twice, interleaved. A run's largest gap is whatever stall the
    # host's scheduler gave the generator's CPU then (measured here: a 662-1061
    # us stall in 3 of 7 spaced runs, on either userland; one CI run had one in
    # both spaced runs, 1,062 us against the batches' 602), not the pacing, so
    # the test counts the long gaps (100 us or more) instead: a batch of 100
    # leaves one per batch, 199 in 20,000 frames; spaced frames leave one per
    # stall. The spread carries a stall too:
    # among 19,999 gaps of 5 us, one stall of d us adds ~d^2/20,000 us^2 to the
    # variance: one of 3 ms alone gives a 21 us standard deviation (one CI run's
    # spaced frames: 21.4 us, against 48.3 us for batches, on a host slower
    # than usual), so each mode's spread is the smaller of its two runs'.
    # A stall of the receiving CPU instead loses frames, and the kernel counts
    # each: the veth refuses a frame while its far end's 256-frame ring is full
    # (1.28 ms of frames at 200 kfps), and the sender reports the refusals it
    # counted. Measured here: 1 run of 32 idle (104 refused, 19,896 received),
    # none of 8 with a busy loop on each CPU (the NAPI thread runs at FIFO 50,
    # so only what no guest priority holds off, such as the VM's vCPU being
    # descheduled, stops it that long); one CI run lost 91 of 20,000 the same
    # way, and in another every spaced run of four lost frames (2,100 in the
    # last). So every run must account for every frame, and the sink counts a
    # send gap only between frames n and n + 1: the hole refused frames leave
    # is the receiver's stall, not the sender's pacing.
    runs = {"frames": [], "slots": []}
    for _ in range(2):
        for spacing in ("frames", "slots"):
            runs[spacing].append(send_and_count(
                lab, "--size", "64", "--rate", "200000", "--count", "20000", "--duration", "10",
                "--mode", "live", "--spacing", spacing, sink="xdp",
                sink_args=("--latency-every", "16")))
    for g, s in runs["frames"] + runs["slots"]:
        assert g["sent"] == 20000 and g["refused"] is not None and 0 <= g["refused"] < 20000, g
        assert s["received"] == g["sent"] - g["refused"] and s["reordered"] == 0, (g, s)
        assert s["max_seq"] == 19999 or g["refused"] > 0, (g, s)
    long_gaps = {m: min(s["send_gap_us"]["long"] for _, s in runs[m]) for m in runs}
    spread = {m: min(s["send_gap_us"]["stdev"] for _, s in runs[m]) for m in runs}
    for g, s in runs["frames"]:
        assert g["path"] == "live-spaced", g
        # One gap per frame after the first, less one per hole of refused
        # frames inside the stream (each frame leaves at its own time).
        holes = s["received"] - 1 - s["send_gap_us"]["n"]
        assert 0 <= holes <= g["refused"], (g, s)
        # The latency sample: seq 0, 16, 32, ... of the frames that arrived; a
        # run of k refused frames held k/16 of them, give or take one (the
        # holes inside, and one at either end).
        assert abs(s["in_window"] - s["received"] / 16) <= (holes + 2 if g["refused"] else 0), (g, s)
        # 200 kfps: 5 us a frame from the window's first send time to its last,
        # over every frame sent between, refused ones included. The mean of the
        # successive gaps alone is that only in a run that lost nothing: after a
        # stall the program sends the backlog 2.5 us apart, and a receiver that
        # refuses those leaves the stall's gap counted and its catch-up not (one
        # CI run: 9,705 gaps averaging 7.5 us, the largest 4.9 ms).
        assert 4.5 <= s["send_gap_us"]["per_frame"] <= 5.5, s["send_gap_us"]
    for g, s in runs["slots"]:
        assert 4.5 <= s["send_gap_us"]["per_frame"] <= 5.5, s["send_gap_us"]  # 100 per 500 us
    whole = [(g, s) for g, s in runs["frames"] if g["refused"] == 0]
    for g, s in whole:
        assert 4.5 <= s["send_gap_us"]["avg"] <= 5.5, s["send_gap_us"]
        assert s["received"] == 20000 and s["in_window"] == 20000 // 16, s
        assert s["send_gap_us"]["n"] == 19999, s  # gaps: every frame
    gs, ss = runs["slots"][0]
    assert gs["path"] == "live" and gs["batch"] == 100, gs
    # Batches of 100 leave ~0.1 us apart with ~495 us between batches (sd ~50 us).
    assert spread["frames"] < 0.4 * spread["slots"], (spread, runs)
    # A batch that leaves late is followed at once by the next (the slots catch
    # up), so not every boundary shows: 159 of 199 here while the machine
    # unpacked a Debian root beside the test.
    batches = 20000 // gs["batch"]
    assert long_gaps["slots"] >= (batches - 1) // 2, (long_gaps, ss)
    assert long_gaps["frames"] < 0.1 * long_gaps["slots"], (long_gaps, runs)


@pytest.mark.parametrize("mode", [pytest.param("auto", marks=pytest.mark.versioned),  # tc, pktgen
                                  "packet"])
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


def xdp_attached(node, intf):
    return "xdp" in node.run(["ip", "-d", "link", "show", "dev", intf]).stdout


def test_the_xdp_sink_passes_other_traffic_and_goes_with_its_process(make_lab):
    lab = make_lab(pair())
    h1, h2 = lab["h1"], lab["h2"]
    sink = h2.popen([pktgen_path(), "recv", "--port", "9", "--duration", "60", "--mode", "xdp",
                     "--iface", "h2-eth0"], name="sink")
    assert "xdp-native" in sink.popen.stdout.readline()
    assert xdp_attached(h2, "h2-eth0")
    # ARP, ICMP and other UDP ports pass to the stack
    assert h1.run(["ping", "-c", "2", "-i", "0.2", "-W", "2", h2.ip], check=False).ok
    sink.popen.send_signal(signal.SIGKILL)
    sink.popen.wait(timeout=10)
    # a bpf_link: the program is gone with the process, however it ended
    deadline = time.monotonic() + 5
    while xdp_attached(h2, "h2-eth0") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not xdp_attached(h2, "h2-eth0")


def test_live_frames_fail_in_one_line_where_the_far_end_runs_no_napi_and_auto_falls_back(make_lab):
    """A veth without GRO or an XDP program takes no XDP frames: the kernel would
    drop them silently. The generator sees it in the counters and says so; auto
    then takes AF_XDP, and the socket sink gets every frame."""
    lab = make_lab(pair())
    lab.static_arp()
    pg, h1, h2 = pktgen_path(), lab["h1"], lab["h2"]
    h2.run(["ethtool", "-K", "h2-eth0", "gro", "off"], check=False)
    args = ["send", "--dst", h2.ip, "--port", "9", "--size", "64", "--rate", "1000",
            "--duration", "1", "--count", "200", "--iface", "h1-eth0", "--dst-mac", mac(h2, "h2-eth0")]
    res = h1.run([pg, *args, "--mode", "live"], check=False)
    line = ("nslab-pktgen: --mode live: h1-eth0 handed on none of the first 1 frames (the "
            "receiving end runs no NAPI: GRO off and no XDP program)")
    if res.returncode == 0:
        # Debian's 6.1 kernel hands live frames on to a veth even with GRO off
        # (seen in the stock-kernel guest), and a CI run here once saw one such
        # run too: then a counted run must deliver every frame, or fail in the
        # one line; never lose frames silently.
        try:
            g, s = send_and_count(lab, *args[1:], "--mode", "live")
        except CommandError as exc:
            assert line in str(exc)
        else:
            assert g["path"] == "live" and s["received"] == g["sent"] == 200
        return
    assert res.returncode == 1
    assert res.stderr.strip().splitlines() == [line]
    g, s = send_and_count(lab, *args[1:], "--mode", "auto")
    assert g["path"] == "xdp" and g["why"].startswith("auto: XDP live frames failed (h1-eth0 handed on")
    assert g["sent"] == 200 and s["received"] == 200 and s["reordered"] == 0


@pytest.mark.versioned  # nslab-pktgen as this userland's gcc and libc build it
def test_generator_and_sink_on_loopback_without_root():
    """The generator paces 5 kfps one frame per send on loopback, the sink gets
    every frame with a sane latency. Here rather than in the unit tier (it needs
    no root): its pacing needs the CPU the unit tier's parallel workers take
    (under load it sent 2,270 of 5,000 frames in its second)."""
    try:
        pg = pktgen_path()
    except CapabilityError:
        pytest.skip("nslab-pktgen not built (make setup)")
    port = 20000 + os.getpid() % 20000
    sink = subprocess.Popen([pg, "recv", "--port", str(port), "--duration", "2.5", "--warmup", "0.2"],
                            stdout=subprocess.PIPE, text=True)
    assert "ready" in sink.stdout.readline()
    gen = subprocess.run([pg, "send", "--dst", "127.0.0.1", "--port", str(port), "--size", "64",
                          "--rate", "5000", "--duration", "1"], capture_output=True, text=True,
                         timeout=10)
    g = json.loads(gen.stdout)
    s = json.loads(sink.communicate(timeout=10)[0].strip().splitlines()[-1])
    assert 4500 <= g["sent"] <= 5100 and g["batch"] == 1  # paced, one frame per send at 5 kfps
    assert s["received"] == g["sent"]
    lat = s["latency_us"]
    assert 0 < lat["min"] <= lat["avg"] < 10_000
    # the histogram's quantiles lie within what was seen, to its 0.1-us bins
    assert lat["min"] - 0.1 <= lat["p50"] <= lat["p99"] <= lat["max"] + 0.1
