"""Threads that end inside a window, and how long each waited for a CPU, from
the kernel's taskstats: every thread that exits on a registered CPU is
reported to the listener, with its ``cpu_delay_total`` (the scheduler's
``run_delay``, the same count ``/proc/<pid>/task/<tid>/schedstat`` gives while
it lives) and its parent process.

:mod:`nslab.traffic.interference` reads a thread's wait from its schedstat at
both ends of a window, which misses a thread that ended before the second
read: a point's iperf clients, probes and short tools, started and reaped
inside it. This listener gives their waits. Opened before the window's first
read and drained after its last, it sees every thread that ended in between
(one that ended just after the last read is counted twice: an upper bound
stays one). Where the kernel has no taskstats, the caller is not root, or the
listener's buffer overflowed (``lost``), it says so, and the caller counts the
lab's wait as unknown.

The messages are netlink datagrams of the ``TASKSTATS`` generic family
(pyroute2 opens the socket and registers), read at ``struct taskstats``'
fixed offsets (:func:`parse`).
"""
from __future__ import annotations

import errno
import logging
import os
import select
import socket
import struct
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

log = logging.getLogger(__name__)

#: The listener's receive buffer (the kernel doubles it, and charges each
#: 596-byte message more than its size): some thousands of exits between
#: two reads, where a point of 254 iperf clients ends about 1,000 threads;
#: past it the kernel drops exits and says so (``lost``).
RCVBUF = 16 << 20
SO_RCVBUFFORCE = 33


@dataclass(frozen=True)
class Ended:
    """One thread that exited: its id, its process (thread group; None from a
    kernel before taskstats version 12), its process's parent, its
    scheduling policy, how long it waited for a CPU and ran over its life
    (ns), and its name."""

    tid: int
    ppid: int
    policy: int
    wait_ns: int
    name: str
    tgid: Optional[int] = None
    #: the scheduler's run time as the exit report gives it: up to its last
    #: tick or switch (the stint it exits in is not folded in yet)
    run_ns: int = 0
    #: wall time from its start to its exit (ns, to the microsecond)
    elapsed_ns: int = 0


#: How long :meth:`Exits.drain` waits for its canary's exit (s).
CANARY_S = 1.0

#: netlink and taskstats numbers (linux/netlink.h, linux/taskstats.h)
NLMSG_ERROR = 2
TASKSTATS_TYPE_PID = 1
TASKSTATS_TYPE_STATS = 3
TASKSTATS_TYPE_AGGR_PID = 4
#: offsets in ``struct taskstats`` (stable: fields are only ever appended)
OFF = {"version": 0, "cpu_delay_total": 24, "cpu_run_virtual_total": 72, "ac_comm": 80,
       "ac_sched": 112, "ac_ppid": 132, "ac_etime": 144, "ac_tgid": 368}


class Refused(ValueError):
    """A netlink error in answer to the listener's registration: the kernel
    refused it (in a user or PID namespace not its first)."""


def _attrs(data: bytes, off: int, end: int) -> Dict[int, Tuple[int, int]]:
    """Netlink attributes in ``data[off:end]``: type -> (payload start, end).
    Raises ValueError on an attribute that does not fit."""
    out: Dict[int, Tuple[int, int]] = {}
    while off + 4 <= end:
        length, kind = struct.unpack_from("<HH", data, off)
        if length < 4 or off + length > end:
            raise ValueError(f"a netlink attribute of {length} bytes at {off} of {end}")
        out[kind & 0x3FFF] = (off + 4, off + length)
        off += (length + 3) & ~3
    return out


def parse(data: bytes, family: Optional[int] = None) -> List[Ended]:
    """The threads one taskstats datagram reports (a datagram may hold several
    netlink messages; a thread group's last exit also carries the group's
    totals, which are left out: its threads are reported one by one). The
    record is read at its fixed offsets, whatever fields a newer kernel
    appends. ``family``: the TASKSTATS family's id, to skip other messages.
    Raises ValueError on a netlink error (a registration the kernel refused),
    a message or attribute that does not fit, an exit without its thread or
    record, or a record too short to read: the caller counts exits as lost."""
    out: List[Ended] = []
    off = 0
    while off < len(data):
        if off + 16 > len(data):
            raise ValueError(f"{len(data) - off} bytes after the last netlink message")
        length, kind = struct.unpack_from("<IH", data, off)
        if length < 16 or off + length > len(data):
            raise ValueError(f"a netlink message of {length} bytes at {off} of {len(data)}")
        if kind == NLMSG_ERROR:
            err = struct.unpack_from("<i", data, off + 16)[0] if length >= 20 else 0
            if err:
                raise Refused(f"netlink error {-err}")
        elif family is None or kind == family:
            top = _attrs(data, off + 20, off + length)  # after the genetlink header
            if TASKSTATS_TYPE_AGGR_PID in top:
                inner = _attrs(data, *top[TASKSTATS_TYPE_AGGR_PID])
                if TASKSTATS_TYPE_PID not in inner or TASKSTATS_TYPE_STATS not in inner:
                    raise ValueError("an exit without its thread id or its record")
                out.append(_record(data, inner[TASKSTATS_TYPE_PID][0],
                                   *inner[TASKSTATS_TYPE_STATS]))
        off += (length + 3) & ~3
    return out


def _record(data: bytes, pid_at: int, st: int, end: int) -> Ended:
    if end - st < OFF["ac_etime"] + 8:
        raise ValueError(f"a taskstats record of {end - st} bytes")
    version = struct.unpack_from("<H", data, st)[0]
    comm = data[st + OFF["ac_comm"]:st + OFF["ac_comm"] + 32].split(b"\0", 1)[0]
    tgid = (struct.unpack_from("<I", data, st + OFF["ac_tgid"])[0]
            if version >= 12 and end - st >= OFF["ac_tgid"] + 4 else None)
    return Ended(tid=struct.unpack_from("<I", data, pid_at)[0],
                 ppid=struct.unpack_from("<I", data, st + OFF["ac_ppid"])[0],
                 policy=data[st + OFF["ac_sched"]],
                 wait_ns=struct.unpack_from("<Q", data, st + OFF["cpu_delay_total"])[0],
                 name=comm.decode("ascii", "replace"), tgid=tgid,
                 # the scheduler's own run time (sum_exec_runtime), not the ticks'
                 run_ns=struct.unpack_from("<Q", data, st + OFF["cpu_run_virtual_total"])[0],
                 elapsed_ns=1000 * struct.unpack_from("<Q", data, st + OFF["ac_etime"])[0])


def online_cpus(path: str = "/sys/devices/system/cpu/online") -> str:
    """The online CPUs as the kernel lists them (``0-1``)."""
    try:
        with open(path) as f:
            return f.read().strip() or "0"
    except OSError:
        return f"0-{(os.cpu_count() or 1) - 1}"


class Exits:
    """A taskstats exit listener on every online CPU, for one window:

        with Exits() as exits:
            ...                      # the window
            ended = exits.drain()    # None: not available, or not a bound

    The kernel does not answer a registration (pyroute2 sends it without
    asking for one), and refuses it in some namespaces; so the listener
    starts and ends a thread of its own once registered (its canary), and
    counts only if that exit reached it."""

    def __init__(self) -> None:
        self._ts: Any = None
        self._sock: Optional[socket.socket] = None
        self._family: Optional[int] = None
        self._registered = False
        self._mask = online_cpus()
        self._ended: List[Ended] = []
        self._canary = 0
        #: this process: its canary's thread group
        self._me = os.getpid()
        #: some exits were not received, or a message could not be read
        self.lost = False
        #: the kernel refused the registration: there is no listener
        self.refused = False
        #: why there is no listener (empty: there is one)
        self.why = ""

    def __enter__(self) -> "Exits":
        try:
            from pyroute2 import TaskStats
            from pyroute2.netlink.exceptions import NetlinkError
        except ImportError as exc:
            self.why = f"no taskstats exit listener: {exc}"
            return self
        try:
            self._ts = ts = TaskStats()
            ts.bind()
            self._family = int(ts.prid)
            self._sock = socket.fromfd(ts.fileno(), socket.AF_NETLINK, socket.SOCK_RAW)
            self._sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
            ts.register_mask(self._mask)
            self._registered = True
            # it sleeps once, so that its report's run time holds the stint
            # before (a stint is folded in at a switch or a tick: one that
            # runs to its exit is not yet)
            canary = threading.Thread(target=time.sleep, args=(0.001,), name="nslab-exits")
            canary.start()
            canary.join()
            self._canary = canary.native_id or 0
        except (OSError, NetlinkError, ValueError) as exc:  # no taskstats family, not root
            self.why = f"no taskstats exit listener: {exc}"
            log.debug("%s", self.why)
            self._close()
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()

    def _close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._ts is not None:
            from pyroute2.netlink.exceptions import NetlinkError
            try:
                if self._registered:
                    self._ts.deregister_mask(self._mask)
            except (OSError, NetlinkError):  # closing anyway
                pass
            self._ts.close()
            self._ts = None
            self._registered = False

    def drain(self) -> Optional[List[Ended]]:
        """Every thread reported ended since the listener opened (its canary
        left out), or None when there is no listener, its canary's exit never
        came (the kernel refused the registration), or some exits were lost
        or could not be read."""
        if self._sock is None:
            return None
        # A thread's join returns before the kernel's exit of it: the canary's
        # exit may still be on its way; wait for it, a second at most.
        deadline = time.monotonic() + CANARY_S
        while True:
            try:
                data = self._sock.recv(1 << 16, socket.MSG_DONTWAIT)
            except BlockingIOError:
                if (any(e.tid == self._canary for e in self._ended)
                        or time.monotonic() >= deadline):
                    break
                select.select([self._sock], [], [], 0.01)
                continue
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:  # the kernel dropped some: not a bound
                    self.lost = True
                    self.why = "taskstats listener: the kernel dropped exits (ENOBUFS)"
                    continue
                self.lost = True
                self.why = f"taskstats listener: {exc}"
                break
            try:
                self._ended.extend(parse(data, self._family))
            except Refused as exc:  # no listener, not lost exits: others' share decides
                self.refused = True
                self.why = f"taskstats listener: the kernel refused its registration ({exc})"
            except (ValueError, struct.error) as exc:
                self.lost = True
                self.why = f"taskstats listener: {exc}"
        # the first report of its id is the canary's (an id is given again
        # only once its report is out)
        first = next((i for i, e in enumerate(self._ended) if e.tid == self._canary
                      and e.tgid in (None, self._me)), None)
        if self.lost or self.refused or first is None:
            if not self.lost and not self.refused:
                self.why = "taskstats listener: its own thread's exit never came"
            return None
        if not self._ended[first].run_ns:
            # a kernel whose exit reports carry no CPU times (without
            # CONFIG_TASK_DELAY_ACCT): every wait would read 0
            self.why = "taskstats listener: its own thread's exit came without its run time"
            return None
        return self._ended[:first] + self._ended[first + 1:]
