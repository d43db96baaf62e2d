"""Two boxes with real NIC drivers: QEMU guests on Debian's stock kernel, box A
with a Realtek NIC (driver 8139cp), box B with an Intel one (e1000), joined
by a QEMU stream socket (a lossless wire). Box B runs the posts' server side; box A runs the alias
sweep across its lab's OVS uplink, `nslab ethtool`, an RFC 2544 trial at 1518
bytes across the wire, and a crash followed by `nslab clean`. Each NIC's state
afterwards must equal its state before. What each box runs is tests/vm/box.py,
in the pair of guests that test_multihost_guests.py shares (conftest.py).
Run by `make test-kernel`."""
import pytest

#: The guests' own timeout (conftest.PAIR_TIMEOUT) bounds the pair; pytest's
#: guards a hang beyond it (its default, 600 s, is less: a CI run on a slower
#: machine took 360 s for this part's pair alone, 261 s here).
pytestmark = [pytest.mark.vm, pytest.mark.root, pytest.mark.timeout(3000)]


def _same_state(before: dict, after: dict) -> None:
    for key in ("mtu", "up", "addrs", "routes", "offloads", "link", "driver"):
        assert after[key] == before[key], (key, before[key], after[key])


@pytest.fixture(scope="module")
def boxes(pair_part):
    """What box A (client) and box B (server) saw: the first part of the pair's run."""
    return pair_part("client", "server")


def test_each_box_has_its_real_driver(boxes):
    a, b = boxes
    assert a["before"]["driver"] == "8139cp" and a["before"]["link"]["Speed"] == "100Mb/s"
    assert b["before"]["driver"] == "e1000" and b["before"]["link"]["Speed"] == "1000Mb/s"


def test_alias_sweep_runs_across_the_uplink(boxes):
    a, _ = boxes
    assert a["alias"]["rc"] == 0, a["alias"]["stderr"]
    recs = a["alias"]["records"]
    assert sorted(r["params"]["n"] for r in recs) == [1, 16]
    for r in recs:
        m = r["measurements"]
        assert m["receiver_measured_at"].startswith("sender")
        assert m["sockets_at_window_start"] == r["params"]["n"], m
        assert not m["late_start"] and m["sockets_closed_in_window"] == 0, m
        # The window's payload agrees with what the client itself reports (the
        # window is inside its run). QEMU's emulated Realtek NIC does not hold
        # traffic to its nominal 100 Mbit/s (measured: 141 Mbit/s), so no cap.
        assert 1e6 < m["receiver_bps"] and 0.6 < m["receiver_bps"] / m["clients_sum_bps"] < 1.6, m


def test_ethtool_reports_what_the_link_really_negotiated(boxes):
    a, _ = boxes
    forced, back = a["ethtool_forced"], a["ethtool_back"]
    # Advertising only 10 Mb/s half duplex, the Realtek PHY renegotiates to it;
    # the tool shows what the link says after renegotiation (and would fail,
    # naming both, if it differed from what was asked).
    assert forced["rc"] == 0 and "10Mb/s" in forced["out"] and "Half" in forced["out"], forced
    assert back["rc"] == 0 and "100Mb/s" in back["out"] and "Full" in back["out"], back
    _same_state(a["before"], a["after_ethtool"])


def test_rfc2544_trial_at_1518_bytes_crosses_the_wire(boxes):
    a, b = boxes
    t = a["rfc2544"]
    sent, got = t["gen"]["sent"], b["sink"]["received"]
    assert sent >= 0.9 * t["target_fps"] * t["seconds"], t
    assert t["nic_tx"] >= sent  # every frame went out on the Realtek NIC
    # Box B's Intel NIC delivered at least what its sink counted, in order.
    assert b["rx_after"] - b["rx_before"] >= got and b["sink"]["reordered"] == 0, (b, got)
    # The wire is a QEMU stream socket: when box B's vCPU falls behind, QEMU
    # stops reading it and the sender is held back, so no frame is lost between
    # the two QEMUs (over the UDP socket used before, 0.02-1.16 % were, in the
    # host's UDP receive buffer: its RcvbufErrors rose 3,251 in one run). What
    # QEMU's e1000 still drops when B's receive ring is full it counts (MPC,
    # rx_missed_errors), as B's kernel counts its own drops: every frame lost
    # must be one of those, counted during the trial.
    w = b["trial_window"]
    print("rfc2544 across the wire: sent", sent, "received", got, "; box B during the trial:", w)
    assert w["found"] and w["udp_in"] >= got, w
    assert sent - got <= sum(w["drops"].values()), (got, sent, w)
    # One-way latency across two boxes needs their clocks synchronised (PTP):
    # the guests' clocks differ, so it is not asserted here.


def test_nics_are_restored_after_teardown_and_after_a_crash_and_clean(boxes):
    a, b = boxes
    for key in ("after_alias", "after_rfc2544", "after_clean"):
        _same_state(a["before"], a[key])
    assert a["crash_in_ovs"] and a["clean"] == 0
    assert b["serve_rc"] == 0 and b["clean"] == 0 and b["with_crashed_aliases"] == 5
    for key in ("after_teardown", "after_clean"):
        _same_state(b["before"], b[key])
