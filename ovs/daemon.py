"""Start ovsdb-server/ovs-vswitchd when they are not running; stop only what we started.

Who owns daemons nslab started is in the mark: ``user`` (``nslab ovs start``,
or a benchmark holding them for its run) keeps them up until ``nslab ovs
stop``; ``lab`` (a lab that found OVS down) has them stopped when the last lab
using them ends. ``nslab ovs start`` on daemons a lab started takes them over.

The lab records that it started the daemons in ``<state>/ovs-started`` (with
their pids and start times, so a mark is only believed while those very
daemons run) and, when the last run that used OVS ends, stops them again, so a
machine is left as it was found. Daemons that were already running (the
system's service) are never stopped; neither are ours while they carry a bridge
nslab did not create: they stay marked, and the next run to end, or
``nslab ovs stop``, stops them once that bridge is gone.
"""
from __future__ import annotations

import logging
import os
import time
import subprocess
import tempfile
from typing import Dict, List, Optional, Tuple

from nslab.runtime import statefile

from . import probes
from nslab.errors import CapabilityError
from nslab.model.naming import STATE_DIR
from nslab.runtime.proc import TAG_ENV, pid_running, run

log = logging.getLogger(__name__)

OVS_CTL = "/usr/share/openvswitch/scripts/ovs-ctl"
_MARK = os.path.join(STATE_DIR, "ovs-started")
#: the clock of the start mark's process start times: seconds since boot
#: (:func:`nslab.runtime.proc.process_start_time`). A mark on another clock
#: (``psutil-create-time``, seconds since the epoch, which a step of the wall
#: clock moves) is not read: daemons it names are not provably ours.
CLOCK = "boot-time"
PIDFILES = {"ovsdb-server": "/var/run/openvswitch/ovsdb-server.pid",
            "ovs-vswitchd": "/var/run/openvswitch/ovs-vswitchd.pid"}


def _daemon(name: str) -> Optional[Tuple[int, float]]:
    """(pid, start time) of a running OVS daemon, or None."""
    from nslab.runtime.proc import process_start_time
    try:
        with open(PIDFILES[name]) as f:
            pid = int(f.read().strip())
    except (OSError, ValueError):
        return None
    start = process_start_time(pid)
    return (pid, start) if start is not None else None


def _running() -> Dict[str, Tuple[int, float]]:
    return {n: d for n in PIDFILES if (d := _daemon(n)) is not None}


def datapath_type() -> str:
    """``system`` (kernel) when the openvswitch module is present, else ``netdev`` (userspace)."""
    return "system" if probes.ovs_kernel_module() else "netdev"


#: Owners of daemons nslab started.
USER, LAB = "user", "lab"


def owner() -> Optional[str]:
    """``user`` or ``lab`` for daemons nslab started (marks of older nslabs: ``lab``),
    None for daemons it did not start (or none running)."""
    if not started_by_nslab():
        return None
    mark = statefile.read(_MARK) or {}
    return USER if mark.get("owner") == USER else LAB


def ensure_running(owner_: str = LAB) -> bool:
    """Make sure the OVS daemons answer. Returns True if this call started them.
    ``owner_``: who the daemons belong to if this call starts them (``user``
    also takes over daemons a lab started).

    The start mark is written in two steps so that a lab killed at any moment
    still owns what it started: first an intent (the clock before ``ovs-ctl``
    runs, and ``ovs-ctl``'s pid), then the daemons' pids and start times. Under
    an intent alone, daemons started after that clock are ours.
    """
    if not os.path.exists("/usr/bin/ovs-vsctl"):
        raise CapabilityError("Open vSwitch is not installed (apt install openvswitch-switch)")
    if probes.ovs_running():
        if owner_ == USER and owner() == LAB:
            prev = statefile.read(_MARK) or {}
            statefile.write(_MARK, {**prev, "owner": USER})
            log.info("OVS daemons a lab started now stay up until nslab ovs stop")
        return False
    if not os.path.exists(OVS_CTL):
        raise CapabilityError(f"{OVS_CTL} is missing (apt install openvswitch-switch)")
    from nslab.runtime.proc import boot_clock, process_start_time
    log.info("starting ovsdb-server and ovs-vswitchd (ovs-ctl --no-monitor start)")
    before = _running()  # a half-up set (ovsdb-server alone), e.g. after a crash
    owned = not before or started_by_nslab()
    # "since": daemons started after this instant are ours (a hair early, for the
    # 10 ms resolution of process start times).
    mark: dict = {"clock": CLOCK, "started_at": time.time(), "owner": owner_,
                  "since": min(d[1] for d in before.values()) if before else boot_clock() - 0.02}
    if owned:
        statefile.write(_MARK, mark)
    else:
        log.warning("ovsdb-server was running without ovs-vswitchd and not started by nslab: "
                    "starting ovs-vswitchd, and leaving both running afterwards")
    argv = [OVS_CTL, "--no-monitor", "--system-id=random", "--no-record-hostname",
            "--no-mlockall", "start"]
    # Output to an unnamed file, not a pipe: if the lab is killed, ovs-ctl still
    # finishes (no SIGPIPE half way) and leaves the daemons whole, for clean to stop.
    with tempfile.TemporaryFile(mode="w+") as out:
        env = {k: v for k, v in os.environ.items() if k != TAG_ENV}  # shared: no run owns them
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env)
        if owned:
            mark["ctl"] = [proc.pid, process_start_time(proc.pid)]
            statefile.write(_MARK, mark)
        try:
            rc = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise CapabilityError("ovs-ctl start did not finish within 60 s") from None
        out.seek(0)
        text = out.read()
    if rc != 0:
        tail = text.strip().splitlines()[-1] if text.strip() else f"exit {rc}"
        raise CapabilityError(f"ovs-ctl could not start Open vSwitch: {tail}")
    deadline = time.monotonic() + 10
    while not probes.ovs_running():
        if time.monotonic() > deadline:
            raise CapabilityError("ovs-vswitchd did not come up within 10 s "
                                  "(see /var/log/openvswitch/ovs-vswitchd.log)")
        time.sleep(0.1)
    if owned:
        mark["daemons"] = {n: list(d) for n, d in _running().items()}
        statefile.write(_MARK, mark)
    return True


def started_by_nslab(wait: float = 0.0) -> bool:
    """True if the OVS daemons running now are ones nslab started.

    ``wait``: seconds to let an ``ovs-ctl start`` of ours (from a lab that was
    killed) finish first, so that what it starts is judged whole.
    """
    from nslab.runtime.proc import same_process
    mark = statefile.read(_MARK)
    if mark is None or mark.get("clock") != CLOCK:
        return False  # none, or written by an older nslab on another clock: not provably ours
    ctl = mark.get("ctl")
    deadline = time.monotonic() + wait
    while (ctl and pid_running(ctl[0]) and same_process(ctl[0], ctl[1])
           and time.monotonic() < deadline):
        time.sleep(0.1)
    running = _running()
    if not running:
        return False
    if mark.get("daemons"):
        return all(mark["daemons"].get(n) == list(d) for n, d in running.items())
    since = mark.get("since")
    return isinstance(since, (int, float)) and all(d[1] >= since for d in running.values())


def release(active_users: List[str]) -> bool:
    """Called when a run that used OVS ends: stop the daemons if nslab started
    them and no other live run (``active_users``) still uses them."""
    if active_users:
        return False
    if owner() == USER:
        log.info("leaving OVS running: started by nslab ovs start (nslab ovs stop stops it)")
        return False
    return stop_if_ours()


def stop_if_ours() -> bool:
    """Stop the OVS daemons only if nslab started them and no bridge nslab did not
    create is on them. Returns True if stopped."""
    if not started_by_nslab(wait=30.0):
        statefile.remove(_MARK)  # stale: those daemons are gone or were restarted by someone else
        return False
    from .bridge import foreign_bridges
    if foreign_bridges():
        log.info("leaving OVS running for now: it has bridges nslab did not create")
        return False
    log.info("stopping the OVS daemons nslab started")
    run([OVS_CTL, "stop"], check=False, timeout=60, where="ovs-ctl")
    statefile.remove(_MARK)
    return True
