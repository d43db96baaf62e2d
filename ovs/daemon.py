"""Start ovsdb-server/ovs-vswitchd when they are not running; stop only what we started.

The lab records that it started the daemons in ``<state>/ovs-started`` (with
ovs-vswitchd's pid and start time, so a mark is only believed while those very
daemons run) and, when the last run that used OVS ends, stops them again, so a
machine is left as it was found. Daemons that were already running (the
system's service) are never stopped; neither are ours while they carry a bridge
nslab did not create: they stay marked, and the next run to end, or
``nslab ovs stop``, stops them once that bridge is gone.
"""
from __future__ import annotations

import json
import logging
import os
import time
from typing import List, Optional, Tuple

from nslab import caps
from nslab.errors import CapabilityError
from nslab.naming import STATE_DIR
from nslab.proc import run

log = logging.getLogger(__name__)

OVS_CTL = "/usr/share/openvswitch/scripts/ovs-ctl"
_MARK = os.path.join(STATE_DIR, "ovs-started")
VSWITCHD_PIDFILE = "/var/run/openvswitch/ovs-vswitchd.pid"


def _vswitchd() -> Optional[Tuple[int, int]]:
    """(pid, start time) of the running ovs-vswitchd, or None."""
    from nslab.clean import process_start_time
    try:
        with open(VSWITCHD_PIDFILE) as f:
            pid = int(f.read().strip())
    except (OSError, ValueError):
        return None
    start = process_start_time(pid)
    return (pid, start) if start is not None else None


def datapath_type() -> str:
    """``system`` (kernel) when the openvswitch module is present, else ``netdev`` (userspace)."""
    return "system" if caps.ovs_kernel_module() else "netdev"


def ensure_running() -> bool:
    """Make sure the OVS daemons answer. Returns True if this call started them."""
    if not os.path.exists("/usr/bin/ovs-vsctl"):
        raise CapabilityError("Open vSwitch is not installed (apt install openvswitch-switch)")
    if caps.ovs_running():
        return False
    if not os.path.exists(OVS_CTL):
        raise CapabilityError(f"{OVS_CTL} is missing (apt install openvswitch-switch)")
    log.info("starting ovsdb-server and ovs-vswitchd (ovs-ctl --no-monitor start)")
    run([OVS_CTL, "--no-monitor", "--system-id=random", "--no-record-hostname",
         "--no-mlockall", "start"], timeout=60, where="ovs-ctl")
    deadline = time.monotonic() + 10
    while not caps.ovs_running():
        if time.monotonic() > deadline:
            raise CapabilityError("ovs-vswitchd did not come up within 10 s "
                                  "(see /var/log/openvswitch/ovs-vswitchd.log)")
        time.sleep(0.1)
    os.makedirs(STATE_DIR, exist_ok=True)
    vswitchd = _vswitchd()
    with open(_MARK, "w") as f:
        json.dump({"started_at": time.time(), "vswitchd": list(vswitchd) if vswitchd else None}, f)
    return True


def started_by_nslab() -> bool:
    """True if the ovs-vswitchd running now is the one nslab started."""
    try:
        with open(_MARK) as f:
            mark = json.load(f)
    except (OSError, ValueError):
        return False
    current = _vswitchd()
    return current is not None and mark.get("vswitchd") == list(current)


def _drop_mark() -> None:
    try:
        os.unlink(_MARK)
    except FileNotFoundError:
        pass


def release(active_users: List[str]) -> bool:
    """Called when a run that used OVS ends: stop the daemons if nslab started
    them and no other live run (``active_users``) still uses them."""
    if active_users or not started_by_nslab():
        return False
    return stop_if_ours()


def stop_if_ours() -> bool:
    """Stop the OVS daemons only if nslab started them and no bridge nslab did not
    create is on them. Returns True if stopped."""
    if not started_by_nslab():
        _drop_mark()  # stale: those daemons are gone or were restarted by someone else
        return False
    from .bridge import foreign_bridges
    if foreign_bridges():
        log.info("leaving OVS running for now: it has bridges nslab did not create")
        return False
    log.info("stopping the OVS daemons nslab started")
    run([OVS_CTL, "stop"], check=False, timeout=60, where="ovs-ctl")
    _drop_mark()
    return True
