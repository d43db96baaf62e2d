#!/usr/bin/env python3
"""`make test`: every tier, ordered and overlapped so the whole suite stays
within CI's time. Run by the Makefile after `make setup` (this machine's
packages and venv).

The order, and what runs beside what:

1. the host's unit tier, on every CPU (pytest-xdist);
2. the host's tests marked ``quiet`` (the real RFC 2544 bed reads a CPU's
   idle time as the DUT's occupancy: nothing else may run, not even at idle
   priority);
3. the host's other integration and smoke tests; beside them, at the
   SCHED_IDLE policy (they take only CPU time the tests leave, and the
   interference accounting counts no such task): Debian 12's kernel is
   unpacked, then the virtual RFC 2544 bed's tests run (its guest's clock
   counts instructions: the host's load cannot move its answers) while the
   Debian 13 root and its kernel are made, then Debian 13's unit tier runs
   in a network namespace of its own (in a CI run here the labs went on 4
   minutes after the root was made), all but its tests marked ``timed``
   (they assert a wall-clock time, and a task of the idle policy can wait
   seconds for a CPU here);
4. the stock-kernel guests, one per kernel, side by side, then the FRR
   flows' guest alone;
5. the two boxes with real NIC drivers, at the SCHED_IDLE policy; once the
   boxes' flows across the wire have ended (they measure rates in the
   guests), the rest of the Debian 13 tier (its timed unit tests, then its
   integration and smoke tests) runs beside what the pair runs last (each
   box's crash and clean, the lab across both boxes, which asserts no
   rate): wire_done.

Each part records its time and JUnit XML (scripts/tiers.py); the last lines
are one table of every part and the ten slowest tests. Exit status: non-zero
if any part failed (every part runs even after one fails, so one run says
everything that is wrong).
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from typing import List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import tiers  # noqa: E402 - scripts/tiers.py

VENV = os.environ.get("VENV", ".venv")
PY = os.path.join(ROOT, VENV, "bin", "python")
CI_DIR = os.path.join(ROOT, "results", "ci")
PYTEST_ARGS = os.environ.get("PYTEST_ARGS", "--durations=20").split()
#: the virtual RFC 2544 bed's guest tests (run in the background of step 3)
VBED = "tests/vm/test_virtual_bed.py"


def say(line: str) -> None:
    print(f"== ci {time.strftime('%H:%M:%S')}: {line}", flush=True)


def idle() -> None:
    """In a child, before its program: the SCHED_IDLE policy (inherited)."""
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def part(name: str, argv: List[str], junit: Optional[str] = None,
         background: bool = False) -> int:
    """Run one part, record its time and exit status."""
    say(f"{name}: {' '.join(argv)}" + (" (in the background, at idle priority)"
                                       if background else ""))
    t0, started = time.monotonic(), time.time()
    if junit and os.path.exists(junit):
        os.unlink(junit)
    rc = subprocess.call(argv, cwd=ROOT, preexec_fn=idle if background else None)
    tiers.record(name, time.monotonic() - t0, rc, junit, started)
    say(f"{name}: exit {rc} after {time.monotonic() - t0:.0f} s")
    return rc


def pytest(name: str, *args: str, background: bool = False) -> int:
    junit = os.path.join(CI_DIR, name.replace(" ", "-").replace(":", "") + ".xml")
    return part(name, [PY, "-m", "pytest", *PYTEST_ARGS, f"--junitxml={junit}", *args],
                junit, background)


def wire_done(out: str, since: float, boxes: subprocess.Popen) -> None:
    """Return once nothing more crosses the wire between the two boxes (the RFC
    2544 trial and the alias sweep measure rates in the guests): box A says so
    (tests/vm/pair_box.py, ``wire-quiet``) before both boxes crash and clean
    their labs, or both have written their part; or the two-box tier has
    ended. What the pair runs after that (the crash and clean, the lab across
    both boxes) asserts no rate, so the Debian 13 labs can run beside it: its
    guests run at the SCHED_IDLE policy and take only the CPU time those labs
    leave."""
    two = os.path.join(out, "two-boxes")
    parts = [os.path.join(two, f"{p}.json") for p in ("client", "server")]
    quiet = os.path.join(two, "wire-quiet")
    while boxes.poll() is None:
        if (os.path.exists(quiet) and os.path.getmtime(quiet) >= since) or \
                all(os.path.exists(p) and os.path.getmtime(p) >= since for p in parts):
            say("the two boxes' flows across the wire have ended")
            return
        time.sleep(2)


def main() -> int:
    os.makedirs(CI_DIR, exist_ok=True)
    tiers.reset()
    cpu = tiers.CpuLog()
    cpu.start()
    rc = 0
    rc |= pytest("host: unit", "tests/unit", "-n", "auto")
    rc |= pytest("host: quiet", "-m", "quiet", "tests/integration", "tests/smoke")

    behind: dict = {}

    def rest_of_setup() -> None:
        behind["setup"] = part("setup: Debian 13 and kernels",
                               ["make", "--no-print-directory", "debian13-setup",
                                "kernel-setup", "debian13-project"], background=True)
        if behind["setup"] == 0:
            # in a network namespace of its own: the host's labs make and remove
            # interfaces in this one, which tests reading this namespace's links
            # would see come and go between two reads
            behind["d13 unit"] = part("debian13, unit half", [
                "unshare", "--net", "sh", "-c",
                "ip link set lo up && exec make --no-print-directory test-debian13-unit "
                "TIMED=skip"],
                background=True)

    def background() -> None:
        # the virtual bed needs only Debian 12's kernel: its tests start once that
        # is unpacked, while the Debian 13 root and its kernel are made beside them
        # (after it: both unpack Debian 12's kernel, the second finds it there)
        got = part("setup: the virtual bed's kernel", ["make", "--no-print-directory",
                                                       "bed-kernel"], background=True)
        rest = threading.Thread(target=rest_of_setup, name="ci-setup")
        rest.start()
        behind["vbed"] = (pytest("virtual bed", "-m", "vm", VBED, background=True)
                          if got == 0 else got)
        rest.join()
    job = threading.Thread(target=background, name="ci-background")
    job.start()
    rc |= pytest("host: labs", "-m", "not quiet", "tests/integration", "tests/smoke")
    if job.is_alive():
        say("waiting for the background work (virtual bed, Debian 13 root, kernels, Debian 13 unit tier)")
    job.join()
    rc |= behind.get("setup", 1) | behind.get("vbed", 1)
    if behind.get("setup") == 0:
        rc |= behind.get("d13 unit", 1)
        # the stock-kernel tier records its own parts (each guest, the two boxes)
        out = os.path.join(ROOT, "results", "kernel-tier", "ci")

        def tier(only: str) -> List[str]:
            return [PY, "scripts/kernel-tier.py", "--only", only, "--out", out, "--skip", VBED,
                    "--", *PYTEST_ARGS]
        say("stock-kernel tier, guest")
        rc |= subprocess.call(tier("guest"), cwd=ROOT)
        say("stock-kernel tier, vm (at idle priority), and the Debian 13 labs once its "
            "flows across the wire have ended")
        t0 = time.time()
        boxes = subprocess.Popen(tier("vm"), cwd=ROOT, preexec_fn=idle)
        wire_done(out, t0, boxes)
        # the unit tests that assert a wall-clock time, at normal priority (the
        # unit half ran at the idle policy, where a process waits for a CPU)
        rc |= part("debian13, timed unit tests", [
            "unshare", "--net", "sh", "-c",
            "ip link set lo up && exec make --no-print-directory test-debian13-unit TIMED=only"])
        rc |= part("debian13, labs half", ["make", "--no-print-directory", "test-debian13-labs"])
        rc |= boxes.wait()
    cpu.stop()
    print("\n".join(tiers.summary()), flush=True)
    return 1 if rc else 0


if __name__ == "__main__":
    sys.exit(main())
