"""iperf2: argv builders, a runner that keeps raw output, and pure parsers.

The parsers are pure functions of iperf 2.1.x and 2.2.x output (text, ``-e``
enhanced and ``-y C``), tested on captured real output of 2.1.8 (Debian 12) and
2.2.1 (Debian 13) in ``tests/data/iperf/<version>/``. The output does not say
which iperf printed it, so a report carries the version the caller read from
the binary that ran (:func:`version_of`, :attr:`IperfReport.version`): some
readings differ between versions (the client's own ``-P`` SUM).
"""
from __future__ import annotations

import re
import subprocess
import time as _time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

from ..errors import InputError
from ..safeio import write_atomic
from ..errors import ReadinessError
from ..errors import CommandError

if TYPE_CHECKING:  # pragma: no cover
    from ..runtime.node import LabNode
    from ..runtime.proc import Process

DEFAULT_PORT = 5001

_BYTES = {"Bytes": 1, "KBytes": 1024, "MBytes": 1024 ** 2, "GBytes": 1024 ** 3, "TBytes": 1024 ** 4}
_BITS = {"bits/sec": 1, "Kbits/sec": 1e3, "Mbits/sec": 1e6, "Gbits/sec": 1e9, "Tbits/sec": 1e12}
# A sum is ``[SUM]``, or ``[SUM-3]`` (with the number of streams) in 2.2's -e output.
_REPORT_RE = re.compile(
    r"^\[\s*(?P<id>\d+|SUM(?:-\d+)?)\]\s+(?P<start>[\d.]+)\s*-\s*(?P<end>[\d.]+)\s+sec\s+"
    r"(?P<xfer>[\d.]+)\s+(?P<xunit>[KMGT]?Bytes)\s+(?P<bw>[\d.]+)\s+(?P<bunit>[KMGT]?bits/sec)"
    r"(?P<rest>.*)$")
_VERSION_RE = re.compile(r"iperf version (\d+\.\d+\.\d+(?:[-.\w]*)?)")
_CONNECT_RE = re.compile(
    r"^\[\s*(?P<id>\d+)\]\s+local\s+(?P<local>[^\s%]+)(?:%\S+)?\s+port\s+(?P<lport>\d+)\s+"
    r"connected\s+with\s+(?P<remote>\S+)\s+port\s+(?P<rport>\d+)")
# A UDP sum line has lost/total but no jitter.
_UDP_RE = re.compile(
    r"(?:(?P<jitter>[\d.]+)\s+ms\s+)?(?P<lost>-?\d+)/\s*(?P<total>\d+)\s+\((?P<pct>[\d.e+-]+|-?nan)%\)"
    r"(?:\s+(?P<lavg>[\d.-]+)/(?P<lmin>[\d.-]+)/(?P<lmax>[\d.-]+)/(?P<lstd>[\d.-]+)\s+ms)?")


@dataclass
class IperfStream:
    """One stream's (or the SUM's) report over an interval."""

    id: str
    start: float
    end: float
    bytes: int
    bps: float
    local: Optional[str] = None
    local_port: Optional[int] = None
    remote: Optional[str] = None
    remote_port: Optional[int] = None
    jitter_ms: Optional[float] = None
    lost: Optional[int] = None
    total: Optional[int] = None
    latency_ms: Optional[Dict[str, float]] = None

    @property
    def mbps(self) -> float:
        return self.bps / 1e6

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass
class IperfReport:
    """Parsed output of one iperf2 run: final per-stream reports, the SUM, intervals."""

    streams: List[IperfStream] = field(default_factory=list)
    sum: Optional[IperfStream] = None
    intervals: List[IperfStream] = field(default_factory=list)
    server_reports: List[IperfStream] = field(default_factory=list)
    udp: bool = False
    #: iperf's version (``2.1.8``), when the caller knew it (see :func:`version_of`);
    #: None when unknown, never guessed from the output.
    version: Optional[str] = None

    @property
    def total_bps(self) -> float:
        """The SUM if iperf printed one, else the sum of the streams' rates.

        iperf's own SUM divides the streams' bytes by the SUM's interval, which
        may end before the slowest stream's (both in 2.1.8 and 2.2.1); how much
        that overstates depends on the version (at ``-P 254`` on a 1 Gbit/s link:
        2.1.8 read 1,178-1,208 Mbit/s, 2.2.1 989-998): see :attr:`span_bps`."""
        if self.sum is not None:
            return self.sum.bps
        return sum(s.bps for s in self.streams)

    @property
    def span_bps(self) -> Optional[float]:
        """All streams' bytes over the longest stream's interval (bit/s), for one
        client run: a total that does not depend on how an iperf version times
        its SUM. None without streams."""
        span = max((s.end for s in self.streams), default=0.0)
        if span <= 0:
            return None
        return sum(s.bytes for s in self.streams) * 8 / span

    def to_dict(self) -> dict:
        return asdict(self)


def _stream_from_match(m: "re.Match[str]") -> IperfStream:
    xfer = float(m.group("xfer")) * _BYTES[m.group("xunit")]
    bw = float(m.group("bw")) * _BITS[m.group("bunit")]
    sid = "SUM" if m.group("id").startswith("SUM") else m.group("id")
    s = IperfStream(id=sid, start=float(m.group("start")), end=float(m.group("end")),
                    bytes=int(xfer), bps=bw)
    u = _UDP_RE.search(m.group("rest"))
    if u:
        s.jitter_ms = float(u.group("jitter")) if u.group("jitter") else None
        s.lost, s.total = int(u.group("lost")), int(u.group("total"))
        if u.group("lavg"):
            s.latency_ms = {k: float(u.group(g)) for k, g in
                            (("avg", "lavg"), ("min", "lmin"), ("max", "lmax"), ("stdev", "lstd"))}
    return s


def parse_text(text: str, version: Optional[str] = None) -> IperfReport:
    """Parse iperf2's human-readable output (client or server, plain or ``-e``).

    Final reports are the longest interval starting at 0 for each stream id;
    a UDP client's "Server Report" is kept separately in ``server_reports``.
    ``version``: the iperf that printed it, kept in the report.
    """
    rep = IperfReport(version=version)
    conns: Dict[str, Dict[str, object]] = {}
    finals: Dict[str, IperfStream] = {}
    in_server_report = False
    for line in text.splitlines():
        line = line.rstrip()
        if "UDP port" in line or "Sending" in line and "datagrams" in line:
            rep.udp = True
        c = _CONNECT_RE.match(line)
        if c:
            conns[c.group("id")] = {"local": c.group("local"), "local_port": int(c.group("lport")),
                                    "remote": c.group("remote"), "remote_port": int(c.group("rport"))}
            continue
        if "Server Report:" in line:
            in_server_report = True
            continue
        m = _REPORT_RE.match(line)
        if not m:
            continue
        s = _stream_from_match(m)
        if s.lost is not None:
            rep.udp = True
        info = conns.get(s.id)
        if info:
            s.local, s.local_port = info["local"], info["local_port"]  # type: ignore[assignment]
            s.remote, s.remote_port = info["remote"], info["remote_port"]  # type: ignore[assignment]
        if in_server_report:
            rep.server_reports.append(s)
            in_server_report = False
            continue
        rep.intervals.append(s)
        if s.start == 0.0:
            prev = finals.get(s.id)
            if prev is None or s.end >= prev.end:
                finals[s.id] = s
    rep.sum = finals.pop("SUM", None)
    rep.streams = sorted(finals.values(), key=lambda s: int(s.id))
    rep.intervals = [s for s in rep.intervals if s not in rep.streams and s is not rep.sum]
    return rep


def parse_csv(text: str, version: Optional[str] = None) -> IperfReport:
    """Parse ``-y C`` output (TCP: 9 fields; UDP adds jitter, lost, total, pct, ooo).

    The last line per stream id whose interval starts at 0 is its final report;
    id -1 is the sum (2.2 prints one with ``-P``; 2.1.8 does not). A jitter of
    ``-nan`` (2.2.1, a client's own line) is kept as NaN.
    """
    rep = IperfReport(version=version)
    finals: Dict[str, IperfStream] = {}
    for line in text.splitlines():
        f = line.strip().split(",")
        if len(f) < 9:
            continue
        try:
            start, end = (float(x) for x in f[6].split("-"))
            s = IperfStream(id=f[5], start=start, end=end, bytes=int(f[7]), bps=float(f[8]),
                            local=f[1], local_port=int(f[2]), remote=f[3], remote_port=int(f[4]))
        except ValueError:
            continue
        if len(f) >= 13:
            rep.udp = True
            s.jitter_ms, s.lost, s.total = float(f[9]), int(f[10]), int(f[11])
        if s.start == 0.0:
            finals[s.id] = s
        else:
            rep.intervals.append(s)
    rep.sum = finals.pop("-1", None)
    rep.streams = sorted(finals.values(), key=lambda s: int(s.id))
    return rep


def parse(text: str, version: Optional[str] = None) -> IperfReport:
    """Parse either format; ``version`` (the iperf that printed it) is kept in the report."""
    first = next((l for l in text.splitlines() if l.strip()), "")
    if re.match(r"^\d{14},", first):
        return parse_csv(text, version)
    return parse_text(text, version)


def parse_version(text: str) -> Optional[str]:
    """``2.2.1`` from ``iperf -v``'s "iperf version 2.2.1 (4 Nov 2024) pthreads"."""
    m = _VERSION_RE.search(text)
    return m.group(1) if m else None


def version_of(node: Optional["LabNode"] = None) -> Optional[str]:
    """The version of the iperf that runs in ``node`` (a host of a multi-host
    lab may have another), or on this machine; None if it is missing."""
    argv = ["iperf", "-v"]
    if node is not None:
        res = node.run(argv, check=False, timeout=10)
        return parse_version((res.stdout or "") + (res.stderr or ""))
    try:
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_version(cp.stdout + cp.stderr)


def server_argv(*, udp: bool = False, port: int = DEFAULT_PORT, bind: Optional[str] = None,
                enhanced: bool = True, fmt: Optional[str] = None,
                extra: Sequence[str] = ()) -> List[str]:
    """``iperf -s`` argv."""
    argv = ["iperf", "-s", "-p", str(port)]
    if udp:
        argv.append("-u")
    if bind:
        argv += ["-B", bind]
    if enhanced:
        argv.append("-e")
    if fmt:
        argv += ["-f", fmt]
    return argv + list(extra)


def client_argv(server: str, *, time: float = 10, parallel: int = 1, udp: bool = False,
                rate: Optional[str] = None, port: int = DEFAULT_PORT, bind: Optional[str] = None,
                mss: Optional[int] = None, nodelay: bool = False, cc: Optional[str] = None,
                length: Optional[int] = None, txstart: Optional[float] = None,
                interval: Optional[float] = None, enhanced: bool = False, csv: bool = False,
                fmt: Optional[str] = None, extra: Sequence[str] = ()) -> List[str]:
    """``iperf -c`` argv with validated options."""
    if time <= 0:
        raise InputError(f"iperf duration must be positive, got {time}")
    if parallel < 1:
        raise InputError(f"iperf parallel streams must be >= 1, got {parallel}")
    argv = ["iperf", "-c", server, "-p", str(port), "-t", f"{time:g}"]
    if parallel > 1:
        argv += ["-P", str(parallel)]
    if udp:
        argv += ["-u", "-b", rate or "1M"]
    elif rate:
        argv += ["-b", rate]
    if bind:
        argv += ["-B", bind]
    if mss:
        argv += ["-M", str(mss)]
    if nodelay:
        argv.append("-N")
    if cc:
        argv += ["-Z", cc]
    if length:
        argv += ["-l", str(length)]
    if txstart is not None:
        argv += ["--txstart-time", f"{txstart:.6f}"]
    if interval:
        argv += ["-i", f"{interval:g}"]
    if enhanced:
        argv.append("-e")
    if csv:
        argv += ["-y", "C"]
    if fmt:
        argv += ["-f", fmt]
    return argv + list(extra)


def start_server(node: "LabNode", **opts: Any) -> "Process":
    """Start an iperf2 server in ``node``; the lab stops it on teardown."""
    return node.popen(server_argv(**opts), name="iperf-server")


def run_client(node: "LabNode", server: str, raw_path: Optional[str] = None,
               timeout_extra: float = 30, **opts: Any) -> IperfReport:
    """Run an iperf2 client to completion in ``node`` and parse its output.

    The raw output is written to ``raw_path`` when given (kept with the results).
    """
    argv = client_argv(server, **opts)
    res = node.run(argv, check=False, timeout=float(opts.get("time", 10)) + timeout_extra)
    if raw_path:
        write_atomic(raw_path, res.stdout + ("\n# stderr\n" + res.stderr if res.stderr else ""))
    rep = parse(res.stdout, version_of(node))
    if res.returncode != 0 or not (rep.streams or rep.sum):
        raise CommandError(res.argv, res.returncode, res.stdout, res.stderr or "no iperf report",
                           node.name)
    return rep


def wait_listening(node: "LabNode", port: int = DEFAULT_PORT, timeout: float = 5.0,
                   udp: bool = False, count: int = 1) -> None:
    """Wait until ``count`` sockets listen on ``port`` in ``node`` (``ss``), or raise."""

    deadline = _time.monotonic() + timeout
    flag = "-uln" if udp else "-tln"
    while True:
        out = node.run(["ss", "-H", flag, f"sport = :{port}"], check=False).stdout
        if len([l for l in out.splitlines() if l.strip()]) >= count:
            return
        if _time.monotonic() > deadline:
            raise ReadinessError(f"{node.name}: nothing listening on port {port} after {timeout} s")
        _time.sleep(0.05)
