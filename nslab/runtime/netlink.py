"""A namespace's links, addresses and routes configured over rtnetlink, with no process.

The core used to fork one ``ip -batch`` per namespace for what every node
needs (``lo`` up, its interfaces up, their addresses, its routes): about 4 ms a
namespace on two cores, 2.9 s of a 1000-host build. The same requests sent on
a netlink socket opened inside the namespace cost tens of microseconds each.

Each request is a typed operation (:class:`LinkUp`, :class:`AddrAdd`, ...)
that both encodes itself as the ``RTM_NEW*`` message ``ip`` sends for it and
renders itself as that ``ip -batch`` line (:meth:`Op.line`), which is what the
build plan shows, what errors quote and what tests compare. The messages are
checked against pyroute2's encoding of the same requests in the unit tier;
pyroute2 itself is not used here because importing it costs ~0.15 s and
opening its ``IPRoute`` ~2 ms a namespace.

Values come from the typed topology; :func:`nslab.model.render.token` checks every
name again before it is encoded, as it does for batch lines.
"""
from __future__ import annotations

import errno as errno_mod
import functools
import ipaddress
import os
import socket
import struct
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from ..errors import CommandError
from ..model.render import line, token

# <linux/netlink.h>, <linux/rtnetlink.h>, <linux/if_link.h>, <linux/if_addr.h>
NLM_F_REQUEST, NLM_F_ACK, NLM_F_EXCL, NLM_F_CREATE, NLM_F_DUMP = 0x1, 0x4, 0x200, 0x400, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_ACK_TLVS = 0x200
NLMSGERR_ATTR_MSG = 1
SOL_NETLINK, NETLINK_CAP_ACK, NETLINK_EXT_ACK = 270, 10, 11
RTM_NEWLINK, RTM_NEWADDR, RTM_NEWROUTE = 16, 20, 24
IFF_UP = 0x1
IFLA_IFNAME, IFLA_MTU, IFLA_MASTER, IFLA_LINKINFO, IFLA_AF_SPEC = 3, 4, 10, 18, 26
IFLA_INET6_ADDR_GEN_MODE, IN6_ADDR_GEN_MODE_NONE = 8, 1
IFLA_INFO_KIND, IFLA_INFO_DATA = 1, 2
IFLA_BR_FORWARD_DELAY, IFLA_BR_STP_STATE = 1, 5
IFA_ADDRESS, IFA_LOCAL = 1, 2
RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_PRIORITY, RTA_PREFSRC = 1, 4, 5, 6, 7
RT_TABLE_MAIN, RTPROT_BOOT, RTN_UNICAST = 254, 3, 1
RT_SCOPE_UNIVERSE, RT_SCOPE_LINK, RT_SCOPE_HOST = 0, 253, 254
IFNAMSIZ = 16

#: Requests sent in one ``send`` before their acknowledgements are read: few
#: enough that the acknowledgements always fit the socket's receive buffer.
WINDOW = 32


def attr(kind: int, payload: bytes) -> bytes:
    """One netlink attribute, padded to 4 bytes."""
    raw = struct.pack("=HH", 4 + len(payload), kind) + payload
    return raw + b"\0" * (-len(raw) % 4)


def attrs(buf: bytes, start: int) -> Iterator[Tuple[int, bytes]]:
    """``(type, payload)`` of the netlink attributes in ``buf`` from ``start``."""
    a = start
    while a + 4 <= len(buf):
        alen, atype = struct.unpack_from("=HH", buf, a)
        if alen < 4:
            return
        yield atype & 0x3FFF, buf[a + 4:a + alen]
        a += (alen + 3) & ~3


def _name(value: str) -> bytes:
    raw = token(value).encode()
    if len(raw) >= IFNAMSIZ or "/" in value:
        raise ValueError(f"{value!r} is not an interface name")
    return raw + b"\0"


def message(kind: int, flags: int, body: bytes, seq: int = 0) -> bytes:
    """A whole netlink message: header, then ``body``."""
    return struct.pack("=IHHII", 16 + len(body), kind, flags, seq, 0) + body


#: ``name -> ifindex`` in the namespace the request is sent in.
IndexOf = Callable[[str], int]


@dataclass(frozen=True)
class LinkUp:
    """``ip link set dev DEV up``."""

    dev: str

    def line(self) -> str:
        return line("link", "set", "dev", self.dev, "up")

    def encode(self, index_of: IndexOf) -> Tuple[int, int, bytes]:
        return RTM_NEWLINK, 0, (struct.pack("=BxHiII", 0, 0, 0, IFF_UP, IFF_UP)
                                + attr(IFLA_IFNAME, _name(self.dev)))


@dataclass(frozen=True)
class LinkDown:
    """``ip link set dev DEV down``."""

    dev: str

    def line(self) -> str:
        return line("link", "set", "dev", self.dev, "down")

    def encode(self, index_of: IndexOf) -> Tuple[int, int, bytes]:
        return RTM_NEWLINK, 0, (struct.pack("=BxHiII", 0, 0, 0, 0, IFF_UP)
                                + attr(IFLA_IFNAME, _name(self.dev)))


@dataclass(frozen=True)
class LinkMtu:
    """``ip link set dev DEV mtu N``."""

    dev: str
    mtu: int

    def line(self) -> str:
        return line("link", "set", "dev", self.dev, "mtu", self.mtu)

    def encode(self, index_of: IndexOf) -> Tuple[int, int, bytes]:
        return RTM_NEWLINK, 0, (struct.pack("=BxHiII", 0, 0, 0, 0, 0)
                                + attr(IFLA_IFNAME, _name(self.dev))
                                + attr(IFLA_MTU, struct.pack("=I", self.mtu)))


@dataclass(frozen=True)
class NoLinkLocal:
    """``ip link set dev DEV addrgenmode none``: the kernel generates no IPv6
    link-local address for it (sent before the device comes up)."""

    dev: str

    def line(self) -> str:
        return line("link", "set", "dev", self.dev, "addrgenmode", "none")

    def encode(self, index_of: IndexOf) -> Tuple[int, int, bytes]:
        inet6 = attr(IFLA_INET6_ADDR_GEN_MODE, bytes([IN6_ADDR_GEN_MODE_NONE]))
        return RTM_NEWLINK, 0, (struct.pack("=BxHiII", 0, 0, 0, 0, 0)
                                + attr(IFLA_IFNAME, _name(self.dev))
                                + attr(IFLA_AF_SPEC, attr(socket.AF_INET6, inet6)))


@dataclass(frozen=True)
class LinkMaster:
    """``ip link set dev DEV master BRIDGE``."""

    dev: str
    master: str

    def line(self) -> str:
        return line("link", "set", "dev", self.dev, "master", self.master)

    def encode(self, index_of: IndexOf) -> Tuple[int, int, bytes]:
        return RTM_NEWLINK, 0, (struct.pack("=BxHiII", 0, 0, 0, 0, 0)
                                + attr(IFLA_IFNAME, _name(self.dev))
                                + attr(IFLA_MASTER, struct.pack("=I", index_of(self.master))))


@dataclass(frozen=True)
class BridgeAdd:
    """``ip link add name NAME type bridge [stp_state 1 forward_delay CS]``."""

    name: str
    stp: bool = False
    forward_delay_cs: int = 0

    def line(self) -> str:
        return line("link", "add", "name", self.name, "type", "bridge",
                    *(["stp_state", "1", "forward_delay", str(self.forward_delay_cs)]
                      if self.stp else []))

    def encode(self, index_of: IndexOf) -> Tuple[int, int, bytes]:
        data = b""
        if self.stp:
            data = (attr(IFLA_BR_STP_STATE, struct.pack("=I", 1))
                    + attr(IFLA_BR_FORWARD_DELAY, struct.pack("=I", self.forward_delay_cs)))
        info = attr(IFLA_INFO_KIND, b"bridge") + (attr(IFLA_INFO_DATA, data) if data else b"")
        return RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, (
            struct.pack("=BxHiII", 0, 0, 0, 0, 0) + attr(IFLA_IFNAME, _name(self.name))
            + attr(IFLA_LINKINFO, info))


Interface = Union[ipaddress.IPv4Interface, ipaddress.IPv6Interface]


@dataclass(frozen=True)
class AddrAdd:
    """``ip addr add ADDR/LEN dev DEV``."""

    addr: Interface
    dev: str

    def line(self) -> str:
        return line("addr", "add", self.addr, "dev", self.dev)

    def encode(self, index_of: IndexOf) -> Tuple[int, int, bytes]:
        ip = self.addr.ip
        family = socket.AF_INET if ip.version == 4 else socket.AF_INET6
        # as ip(8): 127/8 is host scope, everything else global
        scope = RT_SCOPE_HOST if ip.version == 4 and ip.packed[0] == 127 else RT_SCOPE_UNIVERSE
        return RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, (
            struct.pack("=BBBBI", family, self.addr.network.prefixlen, 0, scope,
                        index_of(self.dev))
            + attr(IFA_LOCAL, ip.packed) + attr(IFA_ADDRESS, ip.packed))


@dataclass(frozen=True)
class RouteAdd:
    """``ip route add DST [via GW] [dev DEV] [metric N] [src ADDR]`` (a
    :class:`nslab.model.fields.Route`)."""

    route: Any

    def line(self) -> str:
        return line("route", "add", *self.route.tokens())

    def encode(self, index_of: IndexOf) -> Tuple[int, int, bytes]:
        r = self.route
        family = socket.AF_INET if r.family == 4 else socket.AF_INET6
        dst_len = 0 if r.dst == "default" else r.dst.prefixlen
        # as ip(8): a route with no gateway is on the link
        scope = RT_SCOPE_UNIVERSE if r.via is not None else RT_SCOPE_LINK
        body = struct.pack("=8BI", family, dst_len, 0, 0, RT_TABLE_MAIN, RTPROT_BOOT, scope,
                           RTN_UNICAST, 0)
        if dst_len:
            body += attr(RTA_DST, r.dst.network_address.packed)
        if r.via is not None:
            body += attr(RTA_GATEWAY, r.via.packed)
        if r.dev is not None:
            body += attr(RTA_OIF, struct.pack("=I", index_of(r.dev)))
        if r.metric is not None:
            body += attr(RTA_PRIORITY, struct.pack("=I", r.metric))
        if r.src is not None:
            body += attr(RTA_PREFSRC, r.src.packed)
        return RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, body


Op = Union[LinkUp, LinkDown, LinkMtu, NoLinkLocal, LinkMaster, BridgeAdd, AddrAdd, RouteAdd]


@dataclass(frozen=True)
class SysctlSet:
    """``sysctl -w KEY=VALUE``, written to ``/proc/sys`` from inside the
    namespace (keys and values are typed: :mod:`nslab.model.fields`)."""

    key: str
    value: str

    def path(self) -> str:
        if not self.key.startswith("net.") or "/" in self.key or ".." in self.key:
            raise ValueError(f"{self.key!r} is not a per-namespace sysctl key")
        return "/proc/sys/" + self.key.replace(".", "/")


@functools.lru_cache(maxsize=1)
def ipv6_available() -> bool:
    """False on a kernel without IPv6 (``ipv6.disable=1``), which refuses an
    ``AF_INET6`` link attribute (EAFNOSUPPORT)."""
    return os.path.isdir("/proc/sys/net/ipv6")


def parse_ack(data: bytes) -> Iterator[Tuple[int, int, str]]:
    """``(sequence, errno, kernel's message)`` of each acknowledgement in
    ``data`` (``NLMSG_ERROR`` messages; errno 0 is success)."""
    off = 0
    while off + 16 <= len(data):
        length, kind, flags, seq = struct.unpack_from("=IHHI", data, off)
        if length < 16:
            return
        if kind == NLMSG_ERROR and length >= 20:
            err = -struct.unpack_from("=i", data, off + 16)[0]
            text = ""
            if flags & NLM_F_ACK_TLVS:
                # capped: the request's header only, then the attributes
                for atype, val in attrs(data[off:off + length], 36):
                    if atype == NLMSGERR_ATTR_MSG:
                        text = val.split(b"\0", 1)[0].decode(errors="replace")
            yield seq, err, text
        off += (length + 3) & ~3


class Session:
    """A ``NETLINK_ROUTE`` socket in the calling thread's namespace (opened at
    construction) that sends operations in windows of :data:`WINDOW` and
    raises :class:`CommandError` for the first one the kernel refuses."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                                  socket.NETLINK_ROUTE)
        for opt in (NETLINK_CAP_ACK, NETLINK_EXT_ACK):
            try:
                self.sock.setsockopt(SOL_NETLINK, opt, 1)
            except OSError:
                pass  # an old kernel: plain errors
        self.seq = 0
        self.pending: Dict[int, Op] = {}
        self.out: List[bytes] = []
        self.index: Dict[str, int] = {}

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def index_of(self, dev: str) -> int:
        """The interface's index, after every request sent before (which may create it)."""
        if dev not in self.index:
            self.flush()
            try:
                self.index[dev] = socket.if_nametoindex(dev)
            except OSError:
                raise CommandError(["ip", "link", "show", dev], None,
                                   stderr=f'Device "{dev}" does not exist.', where=self.where) \
                    from None
        return self.index[dev]

    def add(self, op: Op) -> None:
        if isinstance(op, NoLinkLocal) and not ipv6_available():
            return  # a kernel booted with ipv6.disable=1 makes no link-local anyway
        kind, flags, body = op.encode(self.index_of)
        self.seq += 1
        self.pending[self.seq] = op
        self.out.append(message(kind, NLM_F_REQUEST | NLM_F_ACK | flags, body, self.seq))
        if len(self.out) >= WINDOW:
            self.flush()

    def flush(self) -> None:
        """Send what is queued and read every acknowledgement."""
        if not self.out:
            return
        self.sock.send(b"".join(self.out))
        self.out = []
        failed: Optional[Tuple[Op, int, str]] = None
        while self.pending:
            data = self.sock.recv(1 << 16)
            for seq, err, text in parse_ack(data):
                op = self.pending.pop(seq, None)
                if isinstance(op, NoLinkLocal) and err == errno_mod.EAFNOSUPPORT:
                    continue  # the device has no IPv6 at all (an MTU under 1280)
                if op is not None and err and failed is None:
                    failed = (op, err, text)
        if failed is not None:
            op, err, text = failed
            why = text or os.strerror(err)
            raise CommandError(["ip", *op.line().split()], None,
                               stderr=f"RTNETLINK answers: {why} ({errno_mod.errorcode.get(err, err)})",
                               where=self.where)


def apply(ops: Sequence[Op], where: str) -> None:
    """Apply ``ops`` in order in the calling thread's namespace; raise
    :class:`CommandError` naming the first refused one (later ones in its
    window have been sent; the lab tears the namespace down)."""
    with Session(where) as s:
        for op in ops:
            s.add(op)
        s.flush()


def write_sysctls(values: Sequence[SysctlSet], where: str) -> None:
    """Write sysctls in the calling thread's namespace (``/proc/sys/net`` is
    the namespace of the thread that opens it)."""
    for s in values:
        try:
            with open(s.path(), "w") as f:
                f.write(s.value)
        except OSError as exc:
            raise CommandError(["sysctl", "-w", f"{s.key}={s.value}"], None,
                               stderr=f"sysctl: {exc.strerror}", where=where) from None
