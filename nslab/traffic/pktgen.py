"""The packet generator and sink (``nslab-pktgen``, C, built by ``make setup``)."""
from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from ipaddress import IPv4Address
from typing import TYPE_CHECKING, List, Optional, Sequence

from ..errors import CapabilityError, InputError

if TYPE_CHECKING:
    from ..runtime.node import LabNode

#: Frames per second nslab-pktgen takes: 0 (as fast as it can) or MIN_RATE to
#: MAX_RATE; its C argument parsing refuses anything else the same way.
MIN_RATE = 0.001
MAX_RATE = 1e9
#: Frame sizes (bytes, FCS included) and trial lengths (s) it takes.
MIN_FRAME, MAX_FRAME = 64, 1518
MAX_DURATION = 86400.0
MAX_COUNT = 10**12


def check_send(rate: float, duration: float, size: int = 64,
               count: Optional[int] = None) -> None:
    """Refuse values ``nslab-pktgen send`` would refuse, in one line, before it
    is started (a rate like 1e-300 once made it sleep past its trial)."""
    for name, value in (("rate", rate), ("duration", duration)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value):
            raise InputError(f"nslab-pktgen: {name} {value!r}: not a finite number")
    if not (rate == 0 or MIN_RATE <= rate <= MAX_RATE):
        raise InputError(f"nslab-pktgen: rate {rate!r}: 0 (as fast as it can) or frames/s "
                         f"from {MIN_RATE:g} to {MAX_RATE:g}")
    if not 0.001 <= duration <= MAX_DURATION:
        raise InputError(f"nslab-pktgen: duration {duration!r}: 0.001 to {MAX_DURATION:g} s")
    if isinstance(size, bool) or not isinstance(size, int) or not MIN_FRAME <= size <= MAX_FRAME:
        raise InputError(f"nslab-pktgen: size {size!r}: a whole number of bytes from "
                         f"{MIN_FRAME} to {MAX_FRAME}")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int)
                              or not 0 <= count <= MAX_COUNT):
        raise InputError(f"nslab-pktgen: count {count!r}: a whole number from 0 to {MAX_COUNT}")


def send_argv(dst: str, port: int, size: int, rate: float, duration: float,
              count: Optional[int] = None, mode: str = "udp",
              extra: Sequence[str] = ()) -> List[str]:
    """The ``nslab-pktgen send`` command line, its values checked first
    (:func:`check_send`)."""
    check_send(rate, duration, size, count)
    argv = [pktgen_path(), "send", "--dst", dst, "--port", str(int(port)), "--size", str(size),
            "--rate", repr(float(rate)), "--duration", repr(float(duration))]
    if count is not None:
        argv += ["--count", str(count)]
    return argv + ["--mode", mode, *extra]


#: Names another copy of nslab-pktgen (the virtual RFC 2544 bed's guest runs one
#: copied into its RAM).
PKTGEN_ENV = "NSLAB_PKTGEN"


def pktgen_path() -> str:
    """The generator built by setup, next to this Python (or on PATH), or the
    copy :data:`PKTGEN_ENV` names."""
    named = os.environ.get(PKTGEN_ENV)
    if named:
        if not os.path.isfile(named):
            raise CapabilityError(f"{PKTGEN_ENV}={named}: no such file")
        return named
    cand = os.path.join(os.path.dirname(sys.executable), "nslab-pktgen")
    if os.path.exists(cand):
        return cand
    found = shutil.which("nslab-pktgen")
    if found:
        return found
    raise CapabilityError("the packet generator nslab-pktgen is not built: run `make setup` "
                          "(needs gcc)")


# -- the kernel's own pktgen: the anchor nslab-pktgen is compared with ------------------
#: Where the kernel's pktgen is driven (per network namespace).
KPKTGEN = "/proc/net/pktgen"


def kernel_pktgen_present() -> bool:
    """Is the kernel's ``pktgen`` loaded (``/proc/net/pktgen``)?"""
    return os.path.exists(os.path.join(KPKTGEN, "pgctrl"))


def load_kernel_pktgen() -> bool:
    """Load the ``pktgen`` module if the kernel has it and it is not loaded.
    True if this call loaded it (the caller unloads it: :func:`unload_kernel_pktgen`)."""
    if kernel_pktgen_present() or shutil.which("modprobe") is None:
        return False
    ok = subprocess.run(["modprobe", "pktgen"], capture_output=True).returncode == 0
    return ok and kernel_pktgen_present()


def unload_kernel_pktgen() -> None:
    """Unload the module :func:`load_kernel_pktgen` loaded."""
    subprocess.run(["modprobe", "-r", "pktgen"], capture_output=True)


def parse_kernel_pktgen(text: str) -> dict:
    """A device's ``/proc/net/pktgen/<dev>`` after a run: ``{sent, usec, pps,
    errors}`` from its ``Result:`` lines (a run that did not finish: ValueError)."""
    m = re.search(r"Result: OK: (\d+)\(c\d+\+d\d+\) usec, (\d+) \((\d+)byte", text)
    p = re.search(r"(\d+)pps \d+Mb/sec \((\d+)bps\) errors: (\d+)", text)
    if not m or not p:
        line = next((l for l in text.splitlines() if l.startswith("Result:")), "no Result line")
        raise ValueError(f"kernel pktgen did not report a run: {line.strip()}")
    return {"usec": int(m.group(1)), "sent": int(m.group(2)), "pkt_size": int(m.group(3)),
            "pps": float(p.group(1)), "bps": float(p.group(2)), "errors": int(p.group(3))}


def kernel_pktgen_commands(iface: str, dst: str, dst_mac: str, size: int, count: int) -> list:
    """The commands (file, line) that set up one device on one pktgen thread:
    UDP to port 9 of ``dst``, ``size``-byte frames (FCS included, as the study
    counts them), one new skb per frame (``clone_skb 0``: a veth cannot share
    them), as fast as it can (``delay 0``)."""
    IPv4Address(dst)
    if not re.fullmatch(r"[0-9a-f]{2}(:[0-9a-f]{2}){5}", dst_mac):
        raise ValueError(f"not a MAC address: {dst_mac!r}")
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,15}", iface):
        raise ValueError(f"not an interface name: {iface!r}")
    dev = f"{KPKTGEN}/{iface}"
    return [(dev, f"count {int(count)}"), (dev, "clone_skb 0"), (dev, f"pkt_size {int(size) - 4}"),
            (dev, "delay 0"), (dev, f"dst {dst}"), (dev, f"dst_mac {dst_mac}"),
            (dev, "udp_src_min 9"), (dev, "udp_src_max 9"), (dev, "udp_dst_min 9"),
            (dev, "udp_dst_max 9")]


def run_kernel_pktgen(node: LabNode, iface: str, dst: str, dst_mac: str, size: int, seconds: float,
                      cpu: int) -> dict:
    """Send from ``iface`` of ``node`` with the kernel's pktgen thread of ``cpu``
    for ``seconds`` (started, then stopped), and read its result."""

    def put(path: str, line: str) -> None:
        node.run(["tee", path], input=line + "\n")

    thread = f"{KPKTGEN}/kpktgend_{int(cpu)}"
    put(thread, "rem_device_all")
    put(thread, f"add_device {iface}")
    for path, line in kernel_pktgen_commands(iface, dst, dst_mac, size, 0):
        put(path, line)
    with tempfile.TemporaryFile("w+") as start:
        start.write("start\n")
        start.flush()
        start.seek(0)
        # writing "start" returns when the run ends: here, when "stop" is written
        run = node.popen(["tee", f"{KPKTGEN}/pgctrl"], name="kernel-pktgen", stdin=start,
                         stdout=subprocess.DEVNULL)
        time.sleep(seconds)
        put(f"{KPKTGEN}/pgctrl", "stop")
        run.wait(timeout=30)
    try:
        return parse_kernel_pktgen(node.run(["cat", f"{KPKTGEN}/{iface}"]).stdout)
    finally:
        put(thread, "rem_device_all")
