"""Link and qdisc counters of lab namespaces, read from the lab's own process.

:func:`nslab.traffic.counters.node_link_stats` and
:func:`~nslab.traffic.counters.qdisc_drops` spawn ``ip -s -j link`` and ``tc -s
-j qdisc`` inside a node: tens of milliseconds of CPU each inside an emulated
guest, spent during an RFC 2544 trial's measurement window. :class:`NetnsCounters`
reads the same numbers over one ``NETLINK_ROUTE`` socket per namespace, opened
once inside it (a netlink socket stays bound to the namespace it was created
in): a read is a request and its answer, tens of microseconds.

The messages are parsed with :func:`nslab.runtime.netlink.attrs`; the parsers
(:func:`parse_link_message`, :func:`parse_qdisc_message`) are pure functions of
a message's bytes, tested on hand-built messages in the unit tier.
"""
from __future__ import annotations

import os
import socket
import struct
import threading
import time
from typing import (Any, Dict, Generic, Hashable, Iterable, List, Mapping, Optional, Sequence,
                    Tuple, TypeVar)

from ..errors import LabError
from ..runtime.netlink import (IFLA_IFNAME, IFNAMSIZ, NLM_F_DUMP, NLM_F_REQUEST, NLMSG_DONE,
                               NLMSG_ERROR, WINDOW, attr, attrs, message)
from ..runtime.proc import _enter, _nl_dump, _thread_namespace_restored, in_each_namespace

# <linux/rtnetlink.h>, <linux/if_link.h>, <linux/pkt_sched.h>, <linux/gen_stats.h>
RTM_GETLINK, RTM_GETQDISC = 18, 38
IFLA_STATS, IFLA_STATS64 = 7, 23
TCA_STATS, TCA_STATS2, TCA_STATS_QUEUE = 3, 7, 3
TC_H_ROOT = 0xFFFFFFFF
_IFINFOMSG = struct.Struct("=BxHiII")
_TCMSG = struct.Struct("=BxxxiIII")
#: The first eight counters of ``struct rtnl_link_stats64`` (u64 each) and of
#: the older ``struct rtnl_link_stats`` (u32 each), in their order.
LINK_FIELDS = ("rx_packets", "tx_packets", "rx_bytes", "tx_bytes", "rx_errors", "tx_errors",
               "rx_dropped", "tx_dropped")
_STATS64, _STATS32 = struct.Struct("=8Q"), struct.Struct("=8I")
#: What :meth:`NetnsCounters.links` returns per interface, as
#: :func:`nslab.traffic.counters.node_link_stats` does.
LINK_COUNTERS = ("rx_packets", "rx_dropped", "tx_packets", "tx_dropped")
#: Offset of ``drops`` (u32) in ``struct gnet_stats_queue`` (qlen, backlog,
#: drops, requeues, overlimits) and in ``struct tc_stats`` (bytes u64, packets, drops, ...).
_QUEUE_DROPS_AT, _TC_STATS_DROPS_AT = 8, 12
#: Bytes one ``recv`` takes: a dump's batch is at most 32 KiB, a link's answer a few KiB.
_RECV = 1 << 16

K = TypeVar("K", bound=Hashable)


def _padded(raw: bytes, size: int) -> bytes:
    """``raw`` cut or zero-filled to ``size`` bytes, as ip and tc copy a kernel
    struct (``memcpy`` of at most its size into a zeroed one)."""
    return raw[:size] + bytes(max(0, size - len(raw)))


def parse_link_message(body: bytes) -> Tuple[int, Optional[Dict[str, int]]]:
    """``(ifindex, counters)`` of one ``RTM_NEWLINK`` message (its bytes after
    the netlink header): the :data:`LINK_FIELDS` from ``IFLA_STATS64``, or from
    the 32-bit ``IFLA_STATS`` when the kernel sent no 64-bit ones, as ``ip -s
    link`` reads them; None when it sent neither."""
    index = _IFINFOMSG.unpack_from(_padded(body, _IFINFOMSG.size))[2]
    old: Optional[bytes] = None
    for atype, val in attrs(body, _IFINFOMSG.size):
        if atype == IFLA_STATS64:
            return index, dict(zip(LINK_FIELDS, _STATS64.unpack(_padded(val, _STATS64.size))))
        if atype == IFLA_STATS:
            old = val
    if old is None:
        return index, None
    return index, dict(zip(LINK_FIELDS, _STATS32.unpack(_padded(old, _STATS32.size))))


def parse_link_dump(messages: Iterable[bytes]) -> Dict[str, Dict[str, int]]:
    """``{ifname: counters}`` (:data:`LINK_FIELDS`, as :func:`parse_link_message`
    reads them) of the ``RTM_NEWLINK`` messages of one dump; a link without a
    name or without counters is left out."""
    out: Dict[str, Dict[str, int]] = {}
    for body in messages:
        _, counters = parse_link_message(body)
        name = next((val.split(b"\0", 1)[0].decode(errors="replace")
                     for atype, val in attrs(body, _IFINFOMSG.size) if atype == IFLA_IFNAME), "")
        if name and counters is not None:
            out[name] = counters
    return out


def parse_qdisc_message(body: bytes) -> Tuple[int, int, int]:
    """``(ifindex, parent, drops)`` of one ``RTM_NEWQDISC`` message (its bytes
    after the netlink header), drops read as ``tc -s qdisc`` reads them: from
    ``TCA_STATS2``'s ``TCA_STATS_QUEUE`` when the kernel sent ``TCA_STATS2``
    (none there: 0), else from the older ``TCA_STATS``; 0 with neither."""
    _family, index, _handle, parent, _info = _TCMSG.unpack_from(_padded(body, _TCMSG.size))
    old: Optional[bytes] = None
    for atype, val in attrs(body, _TCMSG.size):
        if atype == TCA_STATS2:
            for stype, sval in attrs(val, 0):
                if stype == TCA_STATS_QUEUE:
                    return index, parent, struct.unpack_from(
                        "=I", _padded(sval, _QUEUE_DROPS_AT + 4), _QUEUE_DROPS_AT)[0]
            return index, parent, 0
        if atype == TCA_STATS:
            old = val
    if old is None:
        return index, parent, 0
    return index, parent, struct.unpack_from("=I", _padded(old, _TC_STATS_DROPS_AT + 4),
                                             _TC_STATS_DROPS_AT)[0]


def _netns_inode(netns: str) -> int:
    """The inode of the namespace ``/run/netns/<netns>`` names now."""
    return os.stat(f"/run/netns/{netns}").st_ino


def _route_socket() -> socket.socket:
    """A ``NETLINK_ROUTE`` socket, bound for good to the calling thread's namespace."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                         socket.NETLINK_ROUTE)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    except OSError:  # pragma: no cover - the kernel caps it at rmem_max instead
        pass
    return sock


class _Space:
    """One namespace's ``NETLINK_ROUTE`` socket: requests sent together,
    answers matched to them by sequence number (an answer left over from an
    interrupted read is skipped), one exchange at a time."""

    def __init__(self, netns: Optional[str], sock: socket.socket, inode: Optional[int],
                 timeout: float) -> None:
        self.netns = netns
        self.sock = sock
        self.inode = inode
        self.timeout = timeout
        sock.settimeout(timeout)
        self.label = f"netns {netns}" if netns is not None else "this namespace"
        self.lock = threading.Lock()
        self.seq = 0
        self.buf = bytearray(_RECV)

    def check(self, ifname: str) -> None:
        """Raise if ``/run/netns/<netns>`` is gone or names another namespace
        (the socket keeps the old one alive, with counters no longer moving)."""
        if self.netns is None:
            return
        try:
            now: Optional[int] = _netns_inode(self.netns)
        except OSError:
            now = None
        if now != self.inode:
            raise LabError(f"{self.label}: cannot read {ifname}: the namespace is gone")

    def exchange(self, requests: List[Tuple[int, int, bytes]], what: str,
                 dump: bool = False) -> List[Tuple[int, List[bytes]]]:
        """Send ``(type, flags, body)`` requests in one ``send``; per request,
        in order, ``(errno, answers)`` (errno 0: answered; answers are the
        messages' bytes after their netlink header, one for a plain request,
        all of a dump's)."""
        with self.lock:
            out, order = [], []
            for kind, flags, body in requests:
                self.seq = self.seq % 0x7FFFFFFF + 1
                order.append(self.seq)
                out.append(message(kind, NLM_F_REQUEST | flags, body, self.seq))
            got: Dict[int, Tuple[int, List[bytes]]] = {seq: (0, []) for seq in order}
            waiting = set(order)
            try:
                self.sock.send(b"".join(out))
                while waiting:
                    n, _, flags, _ = self.sock.recvmsg_into([self.buf])
                    if flags & socket.MSG_TRUNC:
                        raise LabError(f"{self.label}: {what}: an answer over {_RECV} bytes")
                    self._sort(memoryview(self.buf)[:n], got, waiting, dump)
            except socket.timeout:
                raise LabError(f"{self.label}: {what}: no answer from the kernel within "
                               f"{self.timeout} s") from None
            except OSError as exc:
                raise LabError(f"{self.label}: {what}: {exc.strerror or exc}") from None
            return [got[seq] for seq in order]

    @staticmethod
    def _sort(data: memoryview, got: Dict[int, Tuple[int, List[bytes]]], waiting: "set[int]",
              dump: bool) -> None:
        off = 0
        while off + 16 <= len(data):
            length, kind, _flags, seq = struct.unpack_from("=IHHI", data, off)
            if length < 16:
                return
            if seq in waiting:
                if kind in (NLMSG_ERROR, NLMSG_DONE):
                    err = -struct.unpack_from("=i", data, off + 16)[0] if length >= 20 else 0
                    got[seq] = (max(err, 0), got[seq][1])
                    waiting.discard(seq)
                else:
                    got[seq][1].append(bytes(data[off + 16:off + length]))
                    if not dump:
                        waiting.discard(seq)
            off += (length + 3) & ~3


class NetnsCounters(Generic[K]):
    """Link and root-qdisc counters of interfaces in lab namespaces, read from
    the calling process with no process spawned: the numbers
    :func:`nslab.traffic.counters.node_link_stats` and
    :func:`~nslab.traffic.counters.qdisc_drops` read by running ``ip -s -j
    link`` and ``tc -s -j qdisc`` in the node.

    At construction one short-lived thread enters each named namespace in
    turn and opens a ``NETLINK_ROUTE`` socket there; a netlink socket stays
    bound to the namespace it was created in, so every later read, from any
    thread, reads that namespace. Each interface's name is resolved to its
    index once, in its namespace. Reads may come from any thread; one
    namespace's reads take turns.

    Args:
        interfaces: ``{key: (netns, ifname)}``; netns None is the calling
            thread's namespace. Interfaces of one namespace share its socket.
        timeout: seconds to wait for the kernel's answer to one read.

    Raises:
        LabError: a namespace that cannot be entered (gone, or no privilege),
            or an interface that is not in its namespace.

    Usable as a context manager; :meth:`close` closes the sockets.
    """

    def __init__(self, interfaces: Mapping[K, Tuple[Optional[str], str]],
                 timeout: float = 5.0) -> None:
        self._spaces: Dict[Optional[str], _Space] = {}
        self._where: Dict[K, Tuple[_Space, str, int]] = {}
        try:
            wanted: Dict[Optional[str], List[str]] = {}
            for ns, ifname in interfaces.values():
                wanted.setdefault(ns, []).append(ifname)
            self._open(wanted, timeout)
            for key, (ns, ifname) in interfaces.items():
                space = self._spaces[ns]
                self._where[key] = (space, ifname, self._resolve(space, ifname))
        except BaseException:
            self.close()
            raise

    def _open(self, wanted: Mapping[Optional[str], List[str]], timeout: float) -> None:
        """One socket per namespace in ``wanted`` (``{netns: its ifnames}``):
        the calling thread's made here, the named ones by a thread that enters each."""
        if None in wanted:
            self._spaces[None] = _Space(None, _route_socket(), None, timeout)
        named = [ns for ns in wanted if ns is not None]
        opened: Dict[str, Tuple[socket.socket, int]] = {}
        failed: List[BaseException] = []

        def work() -> None:
            # the first failure is the one raised: moving back home after a
            # refused entry fails too without privilege (and the thread ends)
            try:
                with _thread_namespace_restored():
                    for ns in named:
                        try:
                            _enter(ns)
                        except OSError as exc:
                            failed.append(LabError(
                                f"netns {ns}: cannot enter it to read {', '.join(wanted[ns])}: "
                                f"{exc.strerror or exc}"))
                            return
                        opened[ns] = (_route_socket(),
                                      os.stat("/proc/thread-self/ns/net").st_ino)
            except BaseException as exc:  # noqa: BLE001 - raised again by the caller
                failed.append(exc)

        if named:
            thread = threading.Thread(target=work, name="netns-counters", daemon=True)
            thread.start()
            thread.join()
        for ns, (sock, inode) in opened.items():
            self._spaces[ns] = _Space(ns, sock, inode, timeout)
        if failed:
            raise failed[0]

    @staticmethod
    def _resolve(space: _Space, ifname: str) -> int:
        raw = ifname.encode()
        if not raw or len(raw) >= IFNAMSIZ or "/" in ifname or "\0" in ifname:
            raise LabError(f"{space.label}: {ifname!r} is not an interface name")
        body = _IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0) + attr(IFLA_IFNAME, raw + b"\0")
        (err, answers), = space.exchange([(RTM_GETLINK, 0, body)], f"looking up {ifname}")
        if err or not answers:
            why = os.strerror(err) if err else "no answer"
            raise LabError(f"{space.label}: no interface {ifname} ({why})")
        return _IFINFOMSG.unpack_from(answers[0])[2]

    def ifindex(self, key: K) -> int:
        """The index ``key``'s interface had in its namespace at construction."""
        return self._where[key][2]

    def links(self) -> Dict[K, Dict[str, int]]:
        """Every interface's :data:`LINK_COUNTERS` (``rx_packets``,
        ``rx_dropped``, ``tx_packets``, ``tx_dropped``), from the
        ``IFLA_STATS64`` of one ``RTM_GETLINK`` request by index per interface,
        a namespace's requests sent together. The numbers ``ip -s -j link``
        prints as ``stats64``'s ``packets`` and ``dropped``.

        Raises:
            LabError: an interface or a namespace that is gone.
        """
        groups: Dict[_Space, List[K]] = {}
        for key, (space, _, _) in self._where.items():
            groups.setdefault(space, []).append(key)
        got: Dict[K, Dict[str, int]] = {}
        for space, keys in groups.items():
            for i in range(0, len(keys), WINDOW):
                got.update(self._read(space, keys[i:i + WINDOW]))
        return {key: got[key] for key in self._where}

    def _read(self, space: _Space, keys: List[K]) -> Dict[K, Dict[str, int]]:
        names = ", ".join(self._where[k][1] for k in keys)
        space.check(names)
        answers = space.exchange(
            [(RTM_GETLINK, 0, _IFINFOMSG.pack(socket.AF_UNSPEC, 0, self._where[k][2], 0, 0))
             for k in keys], f"reading {names}")
        out: Dict[K, Dict[str, int]] = {}
        for key, (err, msgs) in zip(keys, answers):
            _, ifname, index = self._where[key]
            if err or not msgs:
                why = os.strerror(err) if err else "no answer"
                raise LabError(f"{space.label}: interface {ifname} (index {index}) is gone ({why})")
            got_index, stats = parse_link_message(msgs[0])
            if got_index != index or stats is None:
                raise LabError(f"{space.label}: interface {ifname} (index {index}): "
                               "the kernel sent no counters")
            out[key] = {name: stats[name] for name in LINK_COUNTERS}
        return out

    def qdisc_drops(self, key: K) -> int:
        """Drops of the root qdisc(s) of ``key``'s interface (``parent`` is
        ``TC_H_ROOT``; the sum when several), from one ``RTM_GETQDISC`` dump
        of its namespace: what ``tc -s -j qdisc show dev IF`` prints as
        ``drops`` of the qdiscs marked ``root``. 0 for an interface with no
        root qdisc in the dump (a down one's built-in ``noop``).

        Raises:
            LabError: the interface or its namespace is gone.
        """
        space, ifname, index = self._where[key]
        space.check(ifname)
        (err, msgs), = space.exchange(
            [(RTM_GETQDISC, NLM_F_DUMP, _TCMSG.pack(socket.AF_UNSPEC, index, 0, 0, 0))],
            f"reading the qdiscs of {ifname}", dump=True)
        if err:
            raise LabError(f"{space.label}: reading the qdiscs of {ifname}: {os.strerror(err)}")
        roots = [drops for i, parent, drops in map(parse_qdisc_message, msgs)
                 if i == index and parent == TC_H_ROOT]
        if not roots:
            self._read(space, [key])  # raises if the interface is gone
        return sum(roots)

    def close(self) -> None:
        """Close every namespace's socket (again: nothing)."""
        for space in self._spaces.values():
            space.sock.close()
        self._spaces.clear()

    def __enter__(self) -> "NetnsCounters[K]":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


#: A namespace's counters read whose own time is spread over more than this
#: (seconds: the thread was kept off the CPU mid-read) is read again, at most
#: :data:`SWEEP_TRIES` times; the tightest read is kept.
SWEEP_SPREAD = 0.005
SWEEP_TRIES = 3

#: One namespace's read: ``(when, spread, {ifname: counters})``.
TimedCounters = Tuple[float, float, Dict[str, Dict[str, int]]]


def _timed_dump(netns: str) -> Optional[TimedCounters]:
    """:func:`sweep`'s read of one namespace, from a thread that enters it."""
    try:
        _enter(netns)
    except OSError:
        return None
    best: Optional[TimedCounters] = None
    for _ in range(SWEEP_TRIES):
        before = time.monotonic()
        got = parse_link_dump(_nl_dump(RTM_GETLINK, _IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)))
        after = time.monotonic()
        if best is None or after - before < 2 * best[1]:
            best = ((before + after) / 2, (after - before) / 2, got)
        if after - before <= SWEEP_SPREAD:
            break
    return best


def sweep(namespaces: Sequence[str]) -> List[Optional[TimedCounters]]:
    """Every interface's counters in each namespace, with the time they were
    read: ``(when, spread, {ifname: counters})`` per namespace (the
    :data:`LINK_FIELDS`; ``when`` in ``time.monotonic()`` seconds, within
    ``± spread`` of the kernel's read), or None for a namespace that is gone.

    One thread enters each namespace in turn and reads one ``RTM_GETLINK``
    dump there: no process and no socket kept (a socket would keep a deleted
    namespace alive), so a value's time is known to tens of microseconds.
    Timed around an ``ip -s -j link`` call instead, a value could carry a time
    half a second off on a busy machine (a CI run here: a rate over 5 s read
    11 % low, twice).
    """
    return in_each_namespace(namespaces, _timed_dump, "netns-sweep", netns_of=lambda ns: None)
