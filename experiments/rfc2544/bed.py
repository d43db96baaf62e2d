"""The RFC 2544 bed's CPUs, held by one run at a time, and NAPI threads where
the bed needs them.

Two layouts (:class:`Layout`):

* the real bed (:data:`REAL`): the generator and the sink on CPU0, the DUT on
  CPU1 (Receive Packet Steering sends its receive work there), so CPU1's busy
  time is the DUT's occupancy;
* the virtual bed's guest (:data:`SHARED`, :mod:`.virtual`): one vCPU whose
  clock is the instruction count. The tester runs at real-time priorities,
  as a tester box of its own would run whenever it has work: the sink's
  process above the generator above the sink's NAPI thread (so the sink
  drains its socket before more frames arrive); the harness that reads the
  counters above them all (it mostly sleeps). The DUT's receive work runs in
  its ingress interface's NAPI thread at the normal priority, so the DUT gets
  the time the tester leaves. Its occupancy is its thread's run time over
  that time (its own run time plus the idle time).
"""
from __future__ import annotations

import fcntl
import glob
import os
from dataclasses import dataclass
from typing import List, Optional

from nslab.errors import CapabilityError

GEN_CPU, DUT_CPU = 0, 1
#: Set in the virtual bed's guest (:mod:`.virtual`): the runner there uses :data:`SHARED`.
GUEST_ENV = "NSLAB_RFC2544_GUEST"


@dataclass(frozen=True)
class Layout:
    """Where the bed's parts run.

    Attributes:
        gen_cpu: the generator's and the sink's CPU (and the harness's).
        dut_cpu: the CPU the DUT's receive work is steered to.
        tester_fifo: on a shared CPU, the SCHED_FIFO priority of the sink's
            NAPI thread; the generator runs one above it, the sink's process
            two above (None: the real bed's normal priorities).
    """

    gen_cpu: int = GEN_CPU
    dut_cpu: int = DUT_CPU
    tester_fifo: Optional[int] = None

    @property
    def shared(self) -> bool:
        """One CPU for the tester and the DUT (the virtual bed)."""
        return self.gen_cpu == self.dut_cpu

    @property
    def cpus(self) -> List[int]:
        return sorted({self.gen_cpu, self.dut_cpu})

    def tester_args(self, role: str) -> List[str]:
        """nslab-pktgen's options that put the tester's ``role`` (``send`` or
        ``recv``) on its CPU at its priority: the program does it itself, with
        no taskset or chrt to start first."""
        out = ["--cpu", str(self.gen_cpu)]
        if self.tester_fifo:
            out += ["--fifo", str(self.tester_fifo + (2 if role == "recv" else 1))]
        return out


REAL = Layout()
SHARED = Layout(0, 0, tester_fifo=50)


def layout_here() -> Layout:
    """:data:`SHARED` inside the virtual bed's guest, else :data:`REAL`."""
    return SHARED if os.environ.get(GUEST_ENV) == "1" else REAL


def napi_threads(intf: str) -> List[int]:
    """The pids of kernel threads named ``napi/<intf>-<id>`` (any namespace's ``intf``)."""
    out = []
    for comm in glob.glob("/proc/[0-9]*/comm"):
        try:
            name = open(comm).read().strip()
        except OSError:
            continue
        if name.startswith(f"napi/{intf}-"):
            out.append(int(comm.split("/")[2]))
    return out


def thread_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a thread so far, seconds (``/proc/PID/stat``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def napi_on(node, intf: str, cpu: int, fifo: Optional[int] = None) -> Optional[int]:
    """Receive ``intf``'s frames in a NAPI kernel thread pinned to ``cpu`` (GRO on
    makes a veth take frames through NAPI; threaded NAPI runs it in its own
    thread): the sender's CPU then pays only for sending, and XDP live frames
    (which need NAPI at the far end) get through. ``fifo``: run the thread at
    that SCHED_FIFO priority, so no ordinary task on its CPU delays it (on
    this VM other tasks held it off for over 1 ms, longer than the veth's
    256-frame ring lasts at gigabit rates). The thread belongs to the lab's
    interface and goes with it. Returns its pid, or None if it cannot be told
    apart from another namespace's thread of the same name (then nothing is
    changed on any thread)."""
    before = set(napi_threads(intf))
    node.run(["ethtool", "-K", intf, "gro", "on"], check=False)
    node.run(["tee", f"/sys/class/net/{intf}/threaded"], input="1\n", check=False)
    after = set(napi_threads(intf))
    new = after - before
    if len(new) == 1:
        pid = new.pop()
    elif not new and len(after) == 1:  # already threaded (an earlier call), and the only one
        pid = next(iter(after))
    else:
        return None
    node.run(["taskset", "-p", "-c", str(cpu), str(pid)], check=False)
    if fifo:
        node.run(["chrt", "-f", "-p", str(fifo), str(pid)], check=False)
    return pid


class CpuSplitLock:
    """One RFC 2544 run at a time owns the CPU split (generator CPU0, DUT CPU1)."""

    PATH = "/run/nslab/cpu-split.lock"

    def __enter__(self) -> "CpuSplitLock":
        os.makedirs(os.path.dirname(self.PATH), exist_ok=True)
        self.f = open(self.PATH, "a+")
        try:
            fcntl.flock(self.f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.f.seek(0)
            owner = self.f.read().strip() or "?"
            self.f.close()
            raise CapabilityError(f"another RFC 2544 run ({owner}) holds the CPU split "
                                  "(generator on CPU0, DUT on CPU1): run one at a time") from None
        self.f.seek(0)
        self.f.truncate()
        self.f.write(f"pid {os.getpid()}")
        self.f.flush()
        # The harness itself (its threads and every tool it runs) stays off the
        # DUT's CPU, whose busy time is the DUT's occupancy.
        self.affinity = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {GEN_CPU})
        return self

    def __exit__(self, *exc) -> None:
        os.sched_setaffinity(0, self.affinity)
        # Remove the file while still holding the lock: a run that opened it
        # before finds it locked and refuses; one that comes later makes a new one.
        try:
            os.unlink(self.PATH)
        except FileNotFoundError:
            pass
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()
