"""One-way UDP probes: a sender at a fixed rate with sequence numbers, and a
receiver that writes each arrival (``SEQ SECONDS``) to a file. From them, the
loss and the longest gap a flow saw (:func:`outage`): how long a failure cut
the path, as the stream of packets experienced it.

Run inside a lab node (``python -m nslab.traffic.probe send|recv ...``); the receiver
binds the address it is given, never every address.
"""
from __future__ import annotations

import argparse
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from ..safeio import write_atomic

_FMT = "!Id"  # sequence number, send time (for a human reading a capture)
_SIZE = struct.calcsize(_FMT)


def send(address: str, port: int, rate: float, duration: float, sport: int = 0
         ) -> Tuple[int, float]:
    """Send ``rate`` probes per second for ``duration`` s from source port
    ``sport`` (0: any; a fixed one keeps the probe on one ECMP path, which
    ``ip route get ... sport`` can name); return how many were sent, and
    the wall-clock time of the first probe's slot: the stream's sequence
    numbers count from it, so an outage read from them (:func:`outage`) is
    only whole if it came after."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM)
    if sport:
        sock.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", sport))
    interval = 1.0 / rate
    count = int(round(rate * duration))
    start, began = time.monotonic(), time.time()
    sent = 0
    for seq in range(count):
        due = start + seq * interval
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        try:
            sock.sendto(struct.pack(_FMT, seq, time.time()), (address, port))
        except OSError:
            pass  # no route during a failure: the probe is lost, as on a wire
        sent += 1
    return sent, began


#: ``SO_TIMESTAMPNS`` (asm-generic/socket.h; Python's socket module does not
#: name it): each datagram carries the kernel's receive time as a timespec.
SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("@qq")


def arrival_time(ancdata: Sequence[Tuple[int, int, bytes]], fallback: float) -> float:
    """The kernel's receive time of a datagram (seconds, the realtime clock)
    from ``recvmsg``'s ancillary data, or ``fallback`` without one.

    The kernel stamps a datagram as the network stack takes it in (on a veth,
    in the sender's own send call), not when this process gets round to
    reading it: a receiver that other tasks kept off the CPU reads late, and
    with its own clock it would see the last probe before a failure late and
    the outage that much shorter. With the kernel's, a late sender or a
    late daemon on the detecting side can only lengthen an outage; a late
    peer can still make a protocol timer fire sooner
    (:data:`nslab.experiments.filestudy.analysis.UNTIMED`)."""
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack(data[:_TIMESPEC.size])
            return sec + nsec / 1e9
    return fallback


def receive(address: str, port: int, duration: float, out_path: str,
            ready_path: Optional[str] = None) -> int:
    """Record every arrival for ``duration`` s into ``out_path``, each with the
    kernel's receive time (:func:`arrival_time`); return the count."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    sock.bind((address, port))
    if ready_path:
        write_atomic(ready_path, "")
    end = time.monotonic() + duration
    got: List[Tuple[int, float]] = []
    stop = []
    # SIGTERM ends the recording early (the sender is done): what arrived is kept
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    while not stop:
        left = end - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(min(left, 0.1))
        try:
            data, anc, _, _ = sock.recvmsg(64, socket.CMSG_SPACE(_TIMESPEC.size))
        except (socket.timeout, InterruptedError):
            continue
        if len(data) >= _SIZE:
            got.append((struct.unpack(_FMT, data[:_SIZE])[0], arrival_time(anc, time.time())))
    # what arrived before the stop but was not read yet (a receiver kept off
    # the CPU reads behind): the kernel stamped it on arrival, so it counts
    sock.setblocking(False)
    while True:
        try:
            data, anc, _, _ = sock.recvmsg(64, socket.CMSG_SPACE(_TIMESPEC.size))
        except (BlockingIOError, InterruptedError):
            break
        if len(data) >= _SIZE:
            got.append((struct.unpack(_FMT, data[:_SIZE])[0], arrival_time(anc, time.time())))
    write_atomic(out_path, "".join(f"{seq} {t:.6f}\n" for seq, t in got))
    return len(got)


@dataclass(frozen=True)
class Outage:
    """What a probe stream saw: probes sent and received, the longest time
    without an arrival (ms) and the loss (%)."""

    sent: int
    received: int
    gap_ms: float

    @property
    def lost(self) -> int:
        return max(0, self.sent - self.received)

    @property
    def loss_pct(self) -> float:
        return 100.0 * self.lost / self.sent if self.sent else 0.0


def parse_sent(text: str) -> Tuple[int, Optional[float]]:
    """The sender's ``sent N from T`` line: probes sent and the wall-clock
    time its stream began (None from a sender that did not say: older
    records); (0, None) without the line."""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "sent":
            began = float(parts[3]) if len(parts) >= 4 and parts[2] == "from" else None
            return int(parts[1]), began
    return 0, None


def parse_arrivals(text: str) -> List[Tuple[int, float]]:
    """``SEQ SECONDS`` lines (the receiver's file)."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            out.append((int(parts[0]), float(parts[1])))
    return out


def outage(arrivals: Sequence[Tuple[int, float]], sent: int, rate: float) -> Outage:
    """The longest gap: between two consecutive arrivals, or (from sequence
    numbers) before the first and after the last arrival; the whole stream
    when nothing arrived. Duplicates count once."""
    interval_ms = 1000.0 / rate
    seen = sorted({seq: t for seq, t in arrivals}.items(), key=lambda st: st[1])
    if not seen:
        return Outage(sent, 0, sent * interval_ms)
    gaps = [(b[1] - a[1]) * 1000.0 for a, b in zip(seen, seen[1:])]
    first = min(s for s, _ in seen)
    last = max(s for s, _ in seen)
    gaps.append((first + 1) * interval_ms if first else 0.0)
    gaps.append((sent - last) * interval_ms if last < sent - 1 else 0.0)
    return Outage(sent, len(seen), max(gaps))


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nslab.traffic.probe", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("send")
    s.add_argument("--to", required=True)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--rate", type=float, required=True)
    s.add_argument("--duration", type=float, required=True)
    s.add_argument("--sport", type=int, default=0)
    r = sub.add_parser("recv")
    r.add_argument("--bind", required=True)
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--duration", type=float, required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--ready", default=None)
    a = ap.parse_args(argv)
    if a.cmd == "send":
        n, began = send(a.to, a.port, a.rate, a.duration, a.sport)
        print(f"sent {n} from {began:.6f}")
    else:
        print(f"received {receive(a.bind, a.port, a.duration, a.out, a.ready)}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
