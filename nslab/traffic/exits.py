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

The messages are netlink datagrams of the ``TASKSTATS`` generic family,
decoded by pyroute2 (:func:`parse`).
"""
from __future__ import annotations

import errno
import logging
import select
import socket
from dataclasses import dataclass
from typing import Any, List, Optional

log = logging.getLogger(__name__)

#: The listener's receive buffer: about 40,000 exits of ~400 bytes between
#: two reads (a point of 254 iperf clients ends some 1,000 threads).
RCVBUF = 16 << 20
SO_RCVBUFFORCE = 33


@dataclass(frozen=True)
class Ended:
    """One thread that exited: its id, its process's parent, its scheduling
    policy, how long it waited for a CPU over its life, and its name."""

    tid: int
    ppid: int
    policy: int
    wait_ns: int
    name: str


def parse(data: bytes) -> List[Ended]:
    """The threads one taskstats datagram reports (a datagram may hold several
    netlink messages; a thread group's last exit also carries the group's
    totals, which are left out: its threads are reported one by one)."""
    from pyroute2.netlink.taskstats import taskstatsmsg
    out: List[Ended] = []
    off = 0
    while off + 16 <= len(data):
        length = int.from_bytes(data[off:off + 4], "little")
        if length < 16 or off + length > len(data):
            break
        msg = taskstatsmsg(data[off:off + length])
        msg.decode()
        agg = msg.get_attr("TASKSTATS_TYPE_AGGR_PID")
        if agg is not None:
            st = agg.get_attr("TASKSTATS_TYPE_STATS")
            tid = agg.get_attr("TASKSTATS_TYPE_PID")
            if st is not None and tid is not None:
                name = bytes(st["ac_comm"]).split(b"\0", 1)[0].decode("ascii", "replace")
                out.append(Ended(int(tid), int(st["ac_ppid"]), int(st["ac_sched"]),
                                 int(st["cpu_delay_total"]), name))
        off += (length + 3) & ~3
    return out


def online_cpus(path: str = "/sys/devices/system/cpu/online") -> str:
    """The online CPUs as the kernel lists them (``0-1``)."""
    try:
        with open(path) as f:
            return f.read().strip() or "0"
    except OSError:
        import os
        return f"0-{(os.cpu_count() or 1) - 1}"


class Exits:
    """A taskstats exit listener on every online CPU, for one window:

        with Exits() as exits:
            ...                      # the window
            ended = exits.drain()    # None: not available, or some were lost
    """

    def __init__(self) -> None:
        self._ts: Any = None
        self._sock: Optional[socket.socket] = None
        self._mask = online_cpus()
        self._ended: List[Ended] = []
        #: some exits were not received (the buffer overflowed)
        self.lost = False
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
            ts.register_mask(self._mask)
            self._sock = socket.fromfd(ts.fileno(), socket.AF_NETLINK, socket.SOCK_RAW)
            self._sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
        except (OSError, NetlinkError) as exc:  # no taskstats family, not root
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
                if not self.why:  # registered
                    self._ts.deregister_mask(self._mask)
            except (OSError, NetlinkError):  # closing anyway
                pass
            self._ts.close()
            self._ts = None

    def drain(self) -> Optional[List[Ended]]:
        """Every thread reported ended since the listener opened, or None when
        there is no listener or some exits were lost."""
        if self._sock is None:
            return None
        while select.select([self._sock], [], [], 0)[0]:
            try:
                data = self._sock.recv(1 << 16)
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:  # the kernel dropped some: not a bound
                    self.lost = True
                    continue
                raise
            self._ended.extend(parse(data))
        return None if self.lost else list(self._ended)
