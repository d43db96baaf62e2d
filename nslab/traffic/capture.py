"""Packet capture on a running lab: ``nslab capture TARGET`` and study files'
``captures:``.

A capture is Wireshark's ``dumpcap`` (Debian's ``wireshark-common``) started
inside the namespace that holds the interface, tagged with the lab's run like
every lab process, so the lab's teardown and ``nslab clean`` stop it. dumpcap
rather than tcpdump: it writes pcapng itself (tcpdump 4.99 writes only pcap:
libpcap has no pcapng writer), captures several interfaces into one file with
one interface block each (a ``node`` target), and stops by packet count,
duration or file size (the study files' cap), or rotates a ring of files.

TARGET is one of:

* ``node:iface``: one interface of a node (``h1:h1-eth0``); any interface
  the node's namespace has (``s1:s1`` is a Linux bridge's own device);
* ``a-b``: the link between nodes ``a`` and ``b``, as ``nslab topo draw``
  draws it, captured at ``a``'s end (``h1-s1`` on h1's side, ``s1-h1`` on
  s1's); node names have no ``-``, so the split is unambiguous;
* ``node``: every interface of the node's links, into one file.

An interface of a switch that lives in the root namespace (an OVS switch's
port, ``<run>-pN``, found by its ``ifalias nslab:<run>:<node>:<intf>``) is
captured there. Names are checked against the running lab before anything
starts; the filter is one argv element after ``-f`` and may not start with
``-``; nothing reaches a shell.

This module is pure (targets, filters, dumpcap's command line; reports and
study checks use it without a lab); :mod:`nslab.traffic.capturerun` runs captures.
"""
from __future__ import annotations

import math
import os
import re
import shutil
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, Iterable, List, Optional, Sequence, Tuple

from ..errors import CapabilityError, InputError
from ..model.fields import IFNAME_RE, NAME_RE
from ..model.naming import state_dir_problem

if TYPE_CHECKING:  # pragma: no cover
    from ..model.topo import Topology


TOOL = "dumpcap"
#: Where dumpcap comes from (Debian, Ubuntu).
PACKAGE = "wireshark-common"
#: The longest capture filter accepted.
MAX_FILTER = 1024
#: pcapng bytes per packet besides its data (an enhanced packet block's
#: header and trailer, 32 bytes, and padding of the data to 4 bytes).
PACKET_OVERHEAD = 36
#: pcapng bytes of a file besides its packets (section header with the
#: host's and dumpcap's descriptions, interface blocks, final statistics).
FILE_OVERHEAD = 8192
#: What dumpcap prints on stderr once its interfaces are open, their filter
#: set and its file begun (``File: -``); its ``Capturing on ...`` comes
#: earlier, before an interface or a filter can have failed, and packets
#: sent then are missed.
READY = "File: "
#: Set in the environment of an ``nslab capture`` run on a node's host by the
#: controller of a lab across machines (:mod:`nslab.traffic.captureremote`): it
#: captures there or refuses, and never sends the capture on again.
HOP_ENV = "NSLAB_CAPTURE_HOP"
_PACKETS_RE = re.compile(r"^Packets captured: ([0-9]+)", re.M)
#: Bytes ``nslab capture`` keeps of each packet unless told otherwise: every
#: header of a frame (Ethernet, VLAN tags, IPv4 or IPv6, TCP with its
#: options), and those inside a VXLAN tunnel's 50 bytes too, with room to
#: spare; the studies' captures keep 128.
DEFAULT_SNAPLEN = 256
#: What ``nslab capture`` writes at most unless told otherwise: 100 MiB (a
#: "1 Gbit/s" veth carried 711 MB in 6 s of iperf, whole frames kept).
DEFAULT_MAX_BYTES = 100 * 1024 ** 2
#: The largest ``-a filesize:`` dumpcap takes (2 GiB, in its kB of 1000 bytes).
DUMPCAP_MAX_FILESIZE_KB = 2 * 1024 ** 3 // 1000


# -- targets ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    """A parsed TARGET: ``kind`` is ``intf`` (``node``, ``intf``), ``link``
    (``node``, ``peer``: captured at ``node``'s end) or ``node``."""

    kind: str
    node: str
    intf: Optional[str] = None
    peer: Optional[str] = None

    def __str__(self) -> str:
        if self.kind == "intf":
            return f"{self.node}:{self.intf}"
        if self.kind == "link":
            return f"{self.node}-{self.peer}"
        return self.node


def _printable(text: str, most: int = 60) -> str:
    shown = "".join(c if c.isprintable() else "?" for c in text[:most])
    return shown + ("..." if len(text) > most else "")


def parse_target(text: str) -> Target:
    """``node:iface``, ``a-b`` (a link, at ``a``'s end) or ``node``; one
    line naming what is wrong otherwise."""
    if not isinstance(text, str) or not text or len(text) > 64:
        raise InputError(f"capture target {_printable(str(text))!r}: use NODE:IFACE, A-B (a link) "
                         "or NODE")
    if ":" in text:
        node, _, intf = text.partition(":")
        if not NAME_RE.fullmatch(node) or not IFNAME_RE.fullmatch(intf):
            raise InputError(f"capture target {_printable(text)!r}: NODE:IFACE takes a node name "
                             "(letters, digits, _) and an interface name (letters, digits, "
                             "_ . -, not starting with -)")
        if intf.isdigit():
            raise InputError(f"capture target {_printable(text)!r}: an interface named by "
                             "digits only would be read by dumpcap as an interface number")
        return Target("intf", node, intf=intf)
    if "-" in text:
        a, _, b = text.partition("-")
        if not NAME_RE.fullmatch(a) or not NAME_RE.fullmatch(b):
            raise InputError(f"capture target {_printable(text)!r}: a link is A-B, two node names "
                             "(NODE:IFACE names an interface)")
        return Target("link", a, peer=b)
    if not NAME_RE.fullmatch(text):
        raise InputError(f"capture target {_printable(text)!r}: use NODE:IFACE, A-B (a link) or "
                         "NODE")
    return Target("node", text)


def check_filter(text: str) -> str:
    """A capture (BPF) filter as one argv element: printable, at most
    :data:`MAX_FILTER` characters, not starting with ``-`` (it can never be
    read as an option). Its syntax is dumpcap's to judge."""
    if not isinstance(text, str) or not text.strip():
        raise InputError("capture filter: empty (leave it out to capture everything)")
    if len(text) > MAX_FILTER:
        raise InputError(f"capture filter: longer than {MAX_FILTER} characters")
    if not text.isprintable():
        raise InputError(f"capture filter {_printable(text)!r}: only printable characters "
                         "(no line breaks or control characters)")
    if text.lstrip().startswith("-"):
        raise InputError(f"capture filter {_printable(text)!r}: may not start with '-' (it "
                         "would read as an option)")
    return text


# -- the lab, as capture sees it ----------------------------------------------------------
@dataclass
class LabMap:
    """Where a lab's interfaces are, for resolving targets.

    Attributes:
        run: the run id.
        nodes: every node of the topology.
        links: ``(a, ia, b, ib)`` per link, in the topology's order.
        netns: for each node built on this host, its namespace (None: the
            root namespace).
        ports: for each node built here, its links' interfaces: topology
            name to the device that is there now.
        extra: for each node, other interfaces its namespace has (``lo``, a
            bridge's own device), which ``node:iface`` may name.
        host: the host's name when this is one host's part of a lab across
            machines.
    """

    run: str
    nodes: List[str]
    links: List[Tuple[str, str, str, str]]
    netns: Dict[str, Optional[str]]
    ports: Dict[str, Dict[str, str]]
    extra: Dict[str, List[str]] = field(default_factory=dict)
    host: Optional[str] = None

    @property
    def what(self) -> str:
        """``lab nl3f2a``, or ``the topology`` for a map of a lab not built."""
        return f"lab {self.run}" if self.run else "the topology"

    @classmethod
    def of_topology(cls, topo: Topology, run: str = "") -> "LabMap":
        """The map a lab of ``topo`` would have (for checking a study file
        without building anything): every node in a namespace of its own."""
        links = [(a, ia, b, ib) for _, a, ia, b, ib in topo.interfaces()]
        ports: Dict[str, Dict[str, str]] = {n: {} for n in topo.nodes}
        for a, ia, b, ib in links:
            ports[a][ia] = ia
            ports[b][ib] = ib
        return cls(run, list(topo.nodes), links, {n: f"{run}-{n}" for n in topo.nodes}, ports)


@dataclass(frozen=True)
class Where:
    """What one capture listens on: devices of one namespace (None: root)."""

    node: str
    netns: Optional[str]
    devs: Tuple[str, ...]
    intfs: Tuple[str, ...]

    @property
    def label(self) -> str:
        """``h1:h1-eth0``, with the root-namespace port when that is where it is."""
        text = ", ".join(f"{self.node}:{i}" for i in self.intfs)
        if self.netns is None and any(d != i for d, i in zip(self.devs, self.intfs)):
            text += f" (port{'s' if len(self.devs) > 1 else ''} {', '.join(self.devs)} in the " \
                    "root namespace)"
        return text


def _names(items: Iterable[str], most: int = 12) -> str:
    items = list(items)
    shown = ", ".join(items[:most]) + (f", ... ({len(items)} in all)" if len(items) > most else "")
    return shown or "none"


def resolve(target: Target, m: LabMap) -> Where:
    """Where ``target`` is in the lab ``m``; one line if it is nowhere."""
    if target.node not in m.nodes:
        raise InputError(f"capture target {target}: no node {target.node!r} in {m.what} "
                         f"(nodes: {_names(m.nodes)})")
    if target.kind == "link" and target.peer not in m.nodes:
        guess = ""
        if str(target) in m.ports.get(target.node, {}) or any(
                str(target) == i for i in m.extra.get(target.node, [])):
            guess = f"; the interface is {target.node}:{target}"
        raise InputError(f"capture target {target}: no node {target.peer!r} in {m.what}{guess}")
    if target.node not in m.netns:
        where = (f"this host ({m.host}) has another part of the lab across machines"
                 if m.host else "the lab has no namespace or port of it here (is it going down?)")
        raise InputError(
            f"capture target {target}: {target.node} is not on this host: {where}. Run "
            f"nslab capture on the machine that controls the lab (where its `nslab topo up "
            f"--hosts` runs: it captures over the lab's SSH connection), or on "
            f"{target.node}'s host: ssh HOST nslab capture {target} -w - > {target.node}.pcapng")
    ports, netns = m.ports.get(target.node, {}), m.netns[target.node]
    if target.kind == "intf":
        assert target.intf is not None
        if target.intf in ports:
            dev = ports[target.intf]
        elif target.intf in m.extra.get(target.node, []):
            dev = target.intf
        else:
            have = list(ports) + [i for i in m.extra.get(target.node, []) if i not in ports]
            raise InputError(f"capture target {target}: {target.node} has no interface "
                             f"{target.intf!r} (it has: {_names(have)})")
        return Where(target.node, netns, (dev,), (target.intf,))
    if target.kind == "link":
        ends = [ia if a == target.node else ib for a, ia, b, ib in m.links
                if {a, b} == {target.node, target.peer} and (a != b)]
        if not ends:
            mine = sorted({b if a == target.node else a for a, _, b, _ in m.links
                           if target.node in (a, b)})
            raise InputError(f"capture target {target}: no link between {target.node} and "
                             f"{target.peer} ({target.node} is linked to: {_names(mine)})")
        if len(ends) > 1:
            raise InputError(f"capture target {target}: {len(ends)} links join {target.node} and "
                             f"{target.peer}; name one end: "
                             f"{' or '.join(f'{target.node}:{i}' for i in ends)}")
        if ends[0] not in ports:
            raise InputError(f"capture target {target}: {target.node}:{ends[0]} is not there "
                             "now (is the lab going down?)")
        return Where(target.node, netns, (ports[ends[0]],), (ends[0],))
    if not ports:
        raise InputError(f"capture target {target}: {target.node} has no link interfaces")
    return Where(target.node, netns, tuple(ports.values()), tuple(ports))


def wire_ends(where: Where, m: LabMap) -> Tuple[List[Tuple[str, Optional[str], str]], List[str]]:
    """What ``--as-wire`` turns the segmentation offloads of off: each
    captured interface and the other end of its link, if that end is on this
    host (``m`` lists the peers' ports), as ``(label, netns, device)``; and
    the labels of the other ends that are not here (a VXLAN tunnel to
    another host: what arrives through it was segmented there)."""
    ends = [(f"{where.node}:{i}", where.netns, d) for i, d in zip(where.intfs, where.devs)]
    away: List[str] = []
    for intf in where.intfs:
        for a, ia, b, ib in m.links:
            if (a, ia) == (where.node, intf):
                peer, pintf = b, ib
            elif (b, ib) == (where.node, intf):
                peer, pintf = a, ia
            else:
                continue
            dev = m.ports.get(peer, {}).get(pintf)
            if peer in m.netns and dev is not None:
                ends.append((f"{peer}:{pintf}", m.netns[peer], dev))
            else:
                away.append(f"{peer}:{pintf}")
    unique: List[Tuple[str, Optional[str], str]] = []
    for end in ends:  # a link from a node to itself lists one end twice
        if all(end[1:] != u[1:] for u in unique):
            unique.append(end)
    return unique, away


# -- how much is kept ---------------------------------------------------------------------
@dataclass(frozen=True)
class Keep:
    """How much of the traffic a capture keeps: ``snaplen`` bytes of each
    packet (None: whole frames) and ``max_bytes`` in all (None: no cap)."""

    snaplen: Optional[int] = DEFAULT_SNAPLEN
    max_bytes: Optional[int] = DEFAULT_MAX_BYTES

    def describe(self) -> str:
        """``256 bytes of each packet, at most 100.0 MiB`` (for the first line)."""
        from ..model.limits import fmt
        per = "whole packets" if self.snaplen is None else f"{self.snaplen} bytes of each packet"
        most = "no size cap" if self.max_bytes is None else \
            f"at most {fmt('capture', self.max_bytes)}"
        return f"{per}, {most}"


def keep_of(snaplen: Optional[int] = None, max_size: Optional[str] = None,
            full: bool = False, ring: bool = False) -> Keep:
    """What ``nslab capture``'s ``--snaplen N``, ``--max-size SIZE`` (``none``:
    no cap) and ``--full`` (whole packets) ask to keep; the defaults are
    :data:`DEFAULT_SNAPLEN` and :data:`DEFAULT_MAX_BYTES`. One line for a
    contradiction, a size that is not one, or one dumpcap cannot stop a
    single file at (``ring``: the size is a ring's, in several files)."""
    from ..model.limits import fmt, parse_bytes
    if full and snaplen is not None:
        raise InputError("--full keeps whole packets, --snaplen N the first N bytes: give one")
    cut = None if full else (DEFAULT_SNAPLEN if snaplen is None else int(snaplen))
    most: Optional[int] = DEFAULT_MAX_BYTES
    if max_size is not None:
        most = None if max_size.strip().lower() == "none" else \
            parse_bytes(max_size, f"--max-size {_printable(max_size)}")
    if most is not None and not ring and most // 1000 > DUMPCAP_MAX_FILESIZE_KB:
        raise InputError(f"--max-size {fmt('capture', most)}: dumpcap stops a file at "
                         f"{fmt('capture', DUMPCAP_MAX_FILESIZE_KB * 1000)} at most; use a "
                         "ring of files (-C MB -W N), or --max-size none")
    return Keep(cut, most)


# -- dumpcap ------------------------------------------------------------------------------
def bound_bytes(snaplen: int, packets: int) -> int:
    """The most a capture of ``packets`` packets of at most ``snaplen`` bytes
    takes on disk (pcapng)."""
    return FILE_OVERHEAD + packets * (PACKET_OVERHEAD + snaplen)


def dumpcap_argv(devs: Sequence[str], out: str = "-", *, count: Optional[int] = None,
                 duration: Optional[float] = None, filt: Optional[str] = None,
                 snaplen: Optional[int] = None, ring_mb: Optional[int] = None,
                 ring_files: Optional[int] = None, max_bytes: Optional[int] = None) -> List[str]:
    """dumpcap's command line: pcapng of ``devs`` to ``out`` (``-``: stdout).

    The filter and snap length come before the first ``-i``, where dumpcap
    takes them for every interface; the filter is the one element after
    ``-f``. ``ring_mb``/``ring_files`` are tcpdump's ``-C``/``-W`` (MB of
    10^6 bytes, as dumpcap's kB are 10^3). ``max_bytes`` bounds what is
    written: one file (or stdout) stops once it has that many bytes (plus
    the packet that passed it, dumpcap's ``-a filesize:``); a ring without
    ``-W`` stops after as many files as fit in it (``-a files:``), and one
    whose ``-W`` files would pass it is refused. Interfaces are not put into
    promiscuous mode (``-p``: a veth delivers every frame anyway)."""
    if not devs:
        raise InputError("a capture needs at least one interface")
    for d in devs:
        if not IFNAME_RE.fullmatch(d) or d.isdigit():
            raise InputError(f"{d!r} is not an interface name dumpcap can take")
    if out != "-" and (not out or out.startswith("-") or "\x00" in out):
        raise InputError(f"-w {_printable(out)!r}: not a file name")
    argv = [TOOL, "-q", "-n", "-p"]
    if filt is not None:
        argv += ["-f", check_filter(filt)]
    if snaplen is not None:
        argv += ["-s", str(int(snaplen))]
    for d in devs:
        argv += ["-i", d]
    if count is not None:
        argv += ["-c", str(int(count))]
    if duration is not None:
        if not (duration > 0 and math.isfinite(duration)):
            raise InputError(f"--duration {duration}: a number of seconds above 0")
        argv += ["-a", f"duration:{duration:g}"]
    if max_bytes is not None and ring_mb is None:  # (dumpcap takes 2 GiB at most)
        kb = min(DUMPCAP_MAX_FILESIZE_KB, max(1, int(max_bytes) // 1000))
        argv += ["-a", f"filesize:{kb}"]
    if ring_files is not None and ring_mb is None:
        raise InputError("-W N needs -C MB: a ring of N files of MB each")
    if ring_mb is not None:
        if out == "-":
            raise InputError("-C (a ring of files) needs -w FILE, not stdout")
        if ring_files is None and count is None and duration is None:
            raise InputError("-C alone keeps every file of the ring, without bound: give -W N "
                             "(keep the last N), -c or --duration")
        argv += ["-b", f"filesize:{int(ring_mb) * 1000}"]
        if ring_files is not None:
            argv += ["-b", f"files:{int(ring_files)}"]
        if max_bytes is not None:
            argv += _ring_cap(int(ring_mb), ring_files, int(max_bytes))
    return argv + ["-w", out]


def _ring_cap(ring_mb: int, ring_files: Optional[int], max_bytes: int) -> List[str]:
    """What keeps a ring of ``ring_mb`` MB files within ``max_bytes``: nothing
    when its last ``ring_files`` fit, else a stop after as many files as fit
    (``-a files:N``); one line when not even one file fits, or ``-W`` keeps
    more than fits."""
    from ..model.limits import fmt
    each = ring_mb * 10 ** 6
    cap = fmt("capture", max_bytes)
    if each > max_bytes:
        raise InputError(f"-C {ring_mb}: one file of the ring ({ring_mb} MB) is over --max-size "
                         f"{cap}: raise --max-size, or give a smaller -C")
    if ring_files is not None:
        if ring_files * each > max_bytes:
            raise InputError(f"-C {ring_mb} -W {ring_files}: the ring keeps up to "
                             f"{fmt('capture', ring_files * each)}, over --max-size {cap}: "
                             "raise --max-size, or keep fewer files")
        return []
    return ["-a", f"files:{max_bytes // each}"]


def packets_of(lines: Sequence[str]) -> Optional[int]:
    """The packet count dumpcap's last ``Packets captured: N`` line gives, if any."""
    found = _PACKETS_RE.findall("\n".join(lines))
    return int(found[-1]) if found else None


def require_tool() -> str:
    """dumpcap's path, or a one-line :class:`CapabilityError` saying how to get it."""
    found = shutil.which(TOOL)
    if not found:
        raise CapabilityError(f"capturing needs {TOOL}, which this machine lacks (apt install "
                              f"{PACKAGE}; `make setup` installs it)")
    return found


def ring_dir_problem(path: str) -> Optional[str]:
    """Why dumpcap may not write a ring of files beside ``path``, or None.

    dumpcap names and opens each file of a ring itself (following links), so
    their directory must be one only root can write (no one can plant a link
    there): root's own, not a link, writable by nobody else, and so is every
    directory above it (root's sticky ``/tmp`` may be above it, not it)."""
    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d):
        return f"{d} is not a directory"
    return state_dir_problem(d)
