"""Inside the virtual bed's guest (:mod:`.virtual`): the RFC 2544 study on the
run directory the host made, with the configuration the host saved there.

    python -I -m nslab.experiments.rfc2544.inguest --run-dir DIR --run-id ID

Progress lines go to stderr (the host relays them); the log is kept on the
guest's own tmpfs while trials run (no write to the host's files during a
trial: host-timed I/O would move the guest's clock) and copied into
``DIR/virtual-bed/guest.log`` at the end. Records are appended to ``DIR`` as
each point is measured, as in any run.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys

from .bed import GUEST_ENV

LOG = "/tmp/nslab-rfc2544-guest.log"
#: The harness's SCHED_FIFO priority in the guest (above the tester's, :data:`.bed.SHARED`).
HARNESS_FIFO = 60
#: The guest's own copies of the programs a trial starts (/run: a tmpfs there).
BIN = "/run/nslab-guest"


class HostClock:
    """Seconds on the host's clock since the guest started: the file the host
    rewrites twice a second (:data:`.virtual.WALL`). The guest's own clock
    counts instructions (and jumps while it waits for the host's files): the
    time budget between sampling rounds, and the minutes a run has left, are
    the user's. Read between points, never in a trial's window."""

    def __init__(self, path: str) -> None:
        self.path, self.last = path, 0.0

    def __call__(self) -> float:
        try:
            with open(self.path) as f:
                self.last = max(self.last, float(f.read(32).strip()))
        except (OSError, ValueError):
            pass
        return self.last


def main(argv: "list[str] | None" = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--run-id", required=True)
    args = ap.parse_args(argv)
    if os.environ.get(GUEST_ENV) != "1":
        sys.stderr.write("nslab: this runs inside the virtual bed's guest only "
                         "(nslab run rfc2544 --bed virtual starts it)\n")
        return 2
    logging.basicConfig(filename=LOG, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # what the study does between points, on the host's terminal too (relayed)
    say = logging.StreamHandler(sys.stderr)
    say.setLevel(logging.INFO)
    say.setFormatter(logging.Formatter("%(message)s"))
    for name in ("nslab.experiments.rfc2544", "nslab.run.study"):
        logging.getLogger(name).addHandler(say)
    sys.stderr.write(f"guest up (kernel {os.uname().release}, transparent huge pages "
                     f"{thp_mode()}); loading nslab\n")
    from nslab.errors import LabError
    from nslab.run.study import run_study
    from nslab.runtime.provenance import use_tool_facts
    from nslab.store.results import ResultStore

    from .config import Rfc2544Config
    from .study import Rfc2544Study
    from .virtual import GUEST_DIR, WALL, copy_guest_log
    warm_up()
    sys.stderr.write("nslab loaded and its tools read; building the labs\n")
    # The harness reads a trial's counters when the trial's window opens and
    # closes, on the one vCPU the tester holds at SCHED_FIFO 50: it runs above
    # it, or its readings would wait for the tester to sleep. Its children
    # (tools) start at the normal priority; nslab-pktgen sets its own.
    os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK,
                          os.sched_param(HARNESS_FIFO))
    try:
        store = ResultStore.open(args.run_dir)
        # the host asked its programs' versions (they are the guest's too):
        # asked here, through 9p, they took 10-14 s of each lab's set-up
        use_tool_facts((store.provenance().get("virtual_bed") or {}).get("host_tools"))
        cfg = Rfc2544Config.parse(store.provenance().get("config") or {},
                                  f"{args.run_dir}: saved configuration")
        run_study(Rfc2544Study(), cfg, store=store, run_id=args.run_id, progress=True,
                  clock=HostClock(os.path.join(args.run_dir, GUEST_DIR, WALL)))
    except LabError as exc:
        sys.stderr.write(f"nslab (virtual bed): {exc}\n")
        return 1
    finally:
        try:
            copy_guest_log(LOG, args.run_dir)
        except OSError as exc:
            sys.stderr.write(f"nslab (virtual bed): the guest's log was not kept: {exc}\n")
    return 0


#: The guest kernel's transparent huge pages (:data:`.virtual.KERNEL_ARGS`).
THP = "/sys/kernel/mm/transparent_hugepage/enabled"


def thp_mode(path: str = THP) -> str:
    """The mode in brackets in ``path`` ("always [madvise] never" -> "madvise"),
    or "unknown"."""
    try:
        with open(path) as f:
            text = f.read(200)
    except OSError:
        return "unknown"
    start, end = text.find("["), text.find("]")
    return text[start + 1:end] if 0 <= start < end else "unknown"


#: Tools the bed runs (each read from the host's files once here, before any
#: trial, so that no trial waits on such a read).
TOOLS = (["ip", "-V"], ["tc", "-V"], ["ethtool", "--version"], ["taskset", "-V"],
         ["chrt", "--version"], ["tee", "--version"], ["cat", "--version"])


def warm_up() -> None:
    """Read what the run will need from the host's files now: the modules it
    imports (claims are judged between sampling rounds) and each tool it runs.
    A read from the host's files lets the guest's clock jump ahead while the
    vCPU waits for it; done here, it never lands in a trial's window."""
    import shutil
    import subprocess

    import nslab.experiments.rfc2544.claims
    import nslab.experiments.rfc2544.runner
    import nslab.runtime.lab  # noqa: F401
    from nslab.traffic.pktgen import PKTGEN_ENV, pktgen_path
    # The one program a trial starts: copied into the guest's RAM (/run is its
    # tmpfs; nslab-pktgen is linked statically), so starting it reads nothing
    # from the host's files.
    os.makedirs(BIN, exist_ok=True)
    copy = os.path.join(BIN, "nslab-pktgen")
    shutil.copy2(pktgen_path(), copy)
    os.environ[PKTGEN_ENV] = copy
    for argv in TOOLS:
        try:
            subprocess.run(argv, capture_output=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired):
            pass


if __name__ == "__main__":
    sys.exit(main())
