"""The two-box tier's pair of guests, booted once for both of its modules
(test_two_boxes.py and test_multihost_guests.py): QEMU guests on Debian's
stock kernel, each with two emulated NICs. What each box runs is
tests/vm/pair_box.py: the two-box flows first, then the lab across both
machines (one boot instead of a pair for each: about a minute less under TCG,
with each part's NICs its own)."""
import json
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from guest_hold import TIER_HOLD

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAIR = os.path.join(ROOT, "tests", "vm", "pair_box.py")
PY = sys.executable  # the venv running pytest (make VENV=...)
#: Seconds the pair may run (both parts); the tests' pytest timeout is above it.
PAIR_TIMEOUT = 2700


def _load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


@pytest.fixture(scope="session")
def pair(tmp_path_factory):
    """Both boxes' parts, run to the end: each part's JSON (None if that part
    wrote none) and the guests' results."""
    from nslab.hosts import vm
    from tests.integration.pseudohosts import SSHD, write_keys, write_sshd_config
    try:
        vm.require()
    except Exception as exc:  # noqa: BLE001 - reported as the skip reason
        pytest.skip(f"no stock-kernel guests here: {exc}")
    if not os.access(SSHD, os.X_OK):
        pytest.skip(f"no OpenSSH server unpacked at {SSHD} (scripts/setup-sshd.sh)")
    base = os.environ.get("NSLAB_VM_OUT") or str(tmp_path_factory.mktemp("boxes"))
    two, mh = os.path.join(base, "two-boxes"), os.path.join(base, "multi-host")
    os.makedirs(os.path.join(two, "results"), exist_ok=True)
    os.makedirs(mh, exist_ok=True)
    write_keys(mh, "10.77.1")
    for addr in ("10.77.1.1", "10.77.1.2"):
        write_sshd_config(mh, addr, f"sshd_config-{addr}")
    nic_a, nic_b = vm.nic_pair("rtl8139", "e1000")
    ul_a, ul_b = vm.nic_pair("e1000", "e1000", tag=2)
    # One vCPU each: two guests of two vCPUs are four TCG threads on this 2-core
    # machine, and the tier took 772 s; with one each, 617 s (same host, same day).
    common = dict(out_dir=base, cwd=ROOT, timeout=PAIR_TIMEOUT, cpus=1, memory="2G",
                  hold=[*TIER_HOLD, PY], cached=vm.code_dirs(PY))
    env = {"BOX_OUT": two, "MH_OUT": mh, "PYTHONDONTWRITEBYTECODE": "1", **vm.TIER_ENV}
    b = vm.Guest("box-b", f"{PY} {PAIR} b", nics=[nic_b, ul_b],
                 env={**env, "NIC_MAC": nic_b.mac, "MH_MAC": ul_b.mac}, **common)
    a = vm.Guest("box-a", f"{PY} {PAIR} a", nics=[nic_a, ul_a],
                 env={**env, "NIC_MAC": nic_a.mac, "MH_MAC": ul_a.mac}, **common)
    t0 = time.monotonic()
    with vm.start(b, stdin=True) as gb, vm.start(a) as ga:
        ra = ga.wait()
        gb.send("stop")
        rb = gb.wait(timeout=300)
    print(f"two boxes, both parts: {time.monotonic() - t0:.0f} s; box A exit {ra.returncode}, "
          f"box B exit {rb.returncode}; consoles in {base}")
    return {"a": ra, "b": rb,
            "client": _load(os.path.join(two, "client.json")),
            "server": _load(os.path.join(two, "server.json")),
            "controller": _load(os.path.join(mh, "controller.json"))}


@pytest.fixture(scope="session")
def pair_part(pair):
    """``pair_part(name, ...)``: the JSON of each named part of the pair's run."""
    return lambda *names: _part(pair, *names)


def _part(pair, *names):
    """The JSON of each named part, or the test fails with both guests' last words."""
    got = [pair[n] for n in names]
    if any(g is None for g in got) or not (pair["a"].ok and pair["b"].ok):
        ra, rb = pair["a"], pair["b"]
        pytest.fail(f"the pair did not end well (box A exit {ra.returncode}, box B exit "
                    f"{rb.returncode}; wrote {[n for n in names if pair[n] is not None]} of "
                    f"{list(names)}):\n--- A\n{ra.stdout[-3000:]}{ra.console[-2000:]}\n"
                    f"--- B\n{rb.stdout[-3000:]}{rb.console[-2000:]}")
    return got
