"""A lab across two machines with real kernels and NIC drivers: two QEMU guests
on Debian's stock kernel, each with an Intel NIC (e1000) joined by a QEMU
socket (the underlay) and an sshd. Guest A drives the lab across A and B over
SSH: a 2x2 clos split over both converges over VXLAN, and a crash of every
agent and of the controller is cleaned by `nslab clean --hosts`. (The ECMP
study across two hosts runs in the host tier, between pseudo-hosts: under
TCG its trials take minutes.) What box A runs is tests/vm/multihost_box.py,
in the pair of guests that test_two_boxes.py shares (conftest.py), once the
two-box flows there have ended. Run by `make test-kernel`."""
import json

import pytest

pytestmark = [pytest.mark.vm, pytest.mark.root, pytest.mark.timeout(3000)]  # the pair's, conftest.PAIR_TIMEOUT


@pytest.fixture(scope="module")
def across(pair_part):
    """What box A saw as the controller: the second part of the pair's run."""
    (controller,) = pair_part("controller")
    return controller


def _clean(left):
    return all(v == [0, 0, 0, 0] for v in left.values())


def test_the_underlay_is_a_real_nic_driver_on_each_box(across):
    assert across["underlay_driver"] == {"10.77.1.1": "e1000", "10.77.1.2": "e1000"}


def test_a_clos_split_over_two_guests_converges_over_vxlan(across):
    assert across["run_id"], across
    assert set(across["placement"].values()) == {"10.77.1.1", "10.77.1.2"}
    assert across["nexthops"] == {"server1": 2, "server2": 2}, across["nexthops"]
    assert across["ping"] == 0
    vx = {h: [l for line in out.splitlines() if line.strip() for l in json.loads(line)]
          for h, out in across["vxlan"].items()}
    vnis = {h: sorted(l["linkinfo"]["info_data"]["id"] for l in links) for h, links in vx.items()}
    assert vnis["10.77.1.1"] == vnis["10.77.1.2"] and len(vnis["10.77.1.1"]) == 2, vnis
    for h, links in vx.items():
        assert all(l["linkinfo"]["info_data"]["local"] == h and l["mtu"] == 1450 for l in links)
    print(f"clos 2x2 across two TCG guests: up after {across['up_s']:.0f} s (boot of both "
          f"guests' agents included), ECMP {across['ecmp_s']:.0f} s later")


def test_a_crash_on_both_guests_is_cleaned_by_clean_hosts(across):
    before, left = across["crash_before"], across["crash_left"]
    assert all(v[0] >= 2 and v[1] >= 1 for v in before.values()), before  # namespaces, VXLAN
    assert all(v[0] >= 2 for v in left.values()), left  # the killed agents left their parts
    assert across["clean"]["rc"] == 0, across["clean"]["out"]
    assert _clean(across["after_clean"]), across["after_clean"]
