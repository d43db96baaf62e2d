"""A lab across two machines with real kernels and NIC drivers: two QEMU guests
on Debian's stock kernel, each with an Intel NIC (e1000) joined by a QEMU
socket (the underlay) and an sshd. Guest A drives the lab across A and B over
SSH: a 2x2 clos split over both converges over VXLAN, and a crash of every
agent and of the controller is cleaned by `nslab clean --hosts`. (The ECMP
study across two hosts runs in the host tier, between pseudo-hosts: under
TCG its trials take minutes.) Run by `make test-kernel`."""
import json
import os
import sys
import time

import pytest

from nslab.hosts import vm
from tests.integration.pseudohosts import SSHD, write_keys, write_sshd_config

pytestmark = [pytest.mark.vm, pytest.mark.root, pytest.mark.timeout(2400)]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BOX = os.path.join(ROOT, "tests", "vm", "multihost_box.py")
PY = sys.executable  # the venv running pytest (make VENV=...)


@pytest.fixture(scope="module")
def across(tmp_path_factory):
    try:
        vm.require()
    except Exception as exc:  # noqa: BLE001 - reported as the skip reason
        pytest.skip(f"no stock-kernel guests here: {exc}")
    if not os.access(SSHD, os.X_OK):
        pytest.skip(f"no OpenSSH server unpacked at {SSHD} (scripts/setup-sshd.sh)")
    out = os.environ.get("NSLAB_VM_OUT") or str(tmp_path_factory.mktemp("across"))
    out = os.path.join(out, "multi-host")
    os.makedirs(out, exist_ok=True)
    write_keys(out, "10.77.1")
    for addr in ("10.77.1.1", "10.77.1.2"):
        write_sshd_config(out, addr, f"sshd_config-{addr}")
    nic_a, nic_b = vm.nic_pair("e1000", "e1000", tag=2)
    # One vCPU each: two guests of two vCPUs are four TCG threads on this 2-core
    # machine, and the tier took 772 s; with one each, 617 s (same host, same day).
    common = dict(out_dir=out, cwd=ROOT, timeout=2400, cpus=1, memory="2G")
    env = {"BOX_OUT": out, "PYTHONDONTWRITEBYTECODE": "1", **vm.TIER_ENV}
    b = vm.Guest("mh-b", f"{PY} {BOX} host", nics=[nic_b], env={**env, "NIC_MAC": nic_b.mac},
                 **common)
    a = vm.Guest("mh-a", f"{PY} {BOX} controller", nics=[nic_a],
                 env={**env, "NIC_MAC": nic_a.mac}, **common)
    t0 = time.monotonic()
    with vm.start(b, stdin=True) as gb, vm.start(a) as ga:
        ra = ga.wait()
        gb.send("stop")
        rb = gb.wait(timeout=300)
    print(f"multi-host guests: {time.monotonic() - t0:.0f} s; A exit {ra.returncode}, "
          f"B exit {rb.returncode}; consoles in {out}")
    assert ra.ok, ra.stdout[-4000:] + ra.console[-3000:]
    assert rb.ok, rb.stdout[-4000:] + rb.console[-3000:]
    with open(os.path.join(out, "controller.json")) as f:
        return json.load(f)


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
