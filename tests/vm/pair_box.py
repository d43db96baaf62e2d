"""Box A and box B of the two-box tier, booted once for both of its modules
(the ``pair`` fixture of tests/vm/conftest.py). Each box has two NICs: one
for the two-box flows (A: Realtek, driver 8139cp; B: Intel, e1000), joined
to each other, and one for the lab across machines (Intel on both: the
underlay, with an sshd on each box).

    pair_box.py b   box B: its sshd; the posts' server side (box.server) until
                    A says its part is done; then its crash and clean; then
                    the host of the lab across machines, until told on stdin
                    to stop
    pair_box.py a   box A: its sshd; the two-box client part (box.client);
                    then, once B's server part has ended, the controller of
                    the lab across both (multihost_box.controller)

The two parts run one after the other on both boxes, and neither touches the
other's NIC: what the tests read of a NIC (its state before and after each
step, its driver) is what a pair of boxes for each part gave. A tells B over
the underlay (ssh) once nothing more of its part crosses the wire (B's
crash and clean then run beside A's), and reads there when B's has ended.
What each part saw goes to ``BOX_OUT/{client,server}.json`` (two-box) and
``MH_OUT/controller.json`` (across machines).
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import box
import multihost_box

TWO_OUT, MH_OUT = os.environ["BOX_OUT"], os.environ["MH_OUT"]
#: B's flags, in its own /tmp: A's two-box part is done; B's server part has ended.
CLIENT_DONE, SERVER_DONE = "/tmp/nslab-pair-client-done", "/tmp/nslab-pair-server-done"
B = multihost_box.HOSTS.split(",")[1]
#: In BOX_OUT once nothing more of the two-box part crosses the wire.
WIRE_QUIET = "wire-quiet"


def _write(out: str, name: str, result: dict) -> None:
    with open(os.path.join(out, f"{name}.json"), "w") as f:
        json.dump(result, f, indent=1, default=str)


def _until(pred: Callable[[], bool], timeout: float, what: str) -> None:
    if not box.wait_for(pred, timeout, step=2):
        raise SystemExit(f"box A: {what} after {timeout:.0f} s")


def _on_b(command: str) -> bool:
    return multihost_box.ssh(MH_OUT, B, command, timeout=20).returncode == 0


def a() -> None:
    sshd = multihost_box.setup(MH_OUT, "controller", os.environ["MH_MAC"])
    try:
        nic = box.nic_by_mac(os.environ["NIC_MAC"])
        box.say(f"box client: NIC {nic}")
        def tell_b() -> None:  # B's part ends beside A's crash and clean
            box.say("box client: nothing more crosses the wire; telling B")
            _until(lambda: _on_b(f"touch {CLIENT_DONE}"), 300, f"no ssh to {B}")
            # and the host's CI (scripts/ci.py, wire_done): what runs beside the
            # boxes from here measures no rate in them
            open(os.path.join(TWO_OUT, WIRE_QUIET), "w").close()
        _write(TWO_OUT, "client", box.client(TWO_OUT, nic, after_wire=tell_b))
        box.say("box client: done")
        _until(lambda: _on_b(f"test -e {SERVER_DONE}"), 600, "B's server part has not ended")
        box.say("B's server part has ended: the lab across both boxes")
        _write(MH_OUT, "controller", multihost_box.controller(MH_OUT))
    finally:
        multihost_box.close_mux(MH_OUT)
        sshd.terminate()
        sshd.wait(timeout=10)


def b() -> None:
    sshd = multihost_box.setup(MH_OUT, "host", os.environ["MH_MAC"])
    try:
        nic = box.nic_by_mac(os.environ["NIC_MAC"])
        box.say(f"box server: NIC {nic}")
        told = lambda: "A's part is done" if box.wait_for(  # noqa: E731
            lambda: os.path.exists(CLIENT_DONE), 1800, step=1) else "no word from A in 1800 s"
        _write(TWO_OUT, "server", box.server(TWO_OUT, nic, until=told))
        open(SERVER_DONE, "w").close()
        box.say("box server: done; the host of the lab across both boxes until told to stop")
        line = sys.stdin.readline()
        box.say(f"host says: {line.strip()!r}")
    finally:
        sshd.terminate()
        sshd.wait(timeout=10)


def main() -> int:
    from nslab.runtime.testing import hold_rx_timestamps
    held = hold_rx_timestamps()  # a guest under TCG: see its docstring  # noqa: F841
    t0 = time.monotonic()
    {"a": a, "b": b}[sys.argv[1]]()
    box.say(f"box {sys.argv[1]}: done after {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
