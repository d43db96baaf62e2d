"""A counter sampler that runs inside a node and samples at given instants.

Started before the traffic, so that taking a sample costs one netlink dump of
the node's TCP sockets and one of its links (:mod:`nslab.traffic.counters`) at the very
instant asked for, not a process spawn through ``ip netns exec`` (measured in a
QEMU guest on an emulated CPU: two spawns per sample took longer than a 3 s
point, and the window missed the traffic).

    python -m nslab.traffic.sampler --port 5001 --iface eth1 --counter rx_bytes [--sender]

prints ``{"ready": true}``, then for each line of stdin (the instants of one
point: epoch seconds, space-separated) samples at each and prints one JSON
line: ``{"samples": [{"t", "t_start", "t_end", "t_counter", "counter_s",
"sockets": {"local|peer": bytes}, "counter", "cpu": [busy, total]}, ...]}``;
with ``--sender`` each
sample also has ``"limits": {"local|peer": [busy_us, rwnd_limited_us,
sndbuf_limited_us]}``. It ends at the end of its stdin: one sampler serves
every point of a run (a Python start here took 0.43-0.54 s, and a point
started two).

It samples at ``SCHED_FIFO`` (:data:`FIFO`), where it may (as root): a sample
is a few milliseconds of work at two instants a point, and no ordinary task
(a busy host's, or the point's own 254 clients) should stretch it. Each
reading has its own time, the middle of its own read: the sockets' bytes
``t`` (read from ``t_start`` to ``t_end``), the link's counter
``t_counter`` (read in ``counter_s`` seconds, after the sockets); a read's
duration bounds its time's error. (One time for both, the middle of the
two reads, put the sockets' bytes up to half the link's read late; beside a
roaming noisy neighbour an ordinary sampler's reads took 10-44 ms at N=254
where -P 254's took 7-15 ms.)
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from typing import Dict, List
from nslab.traffic import counters


#: The sampler's real-time priority: above every ordinary task, below the
#: kernel's threaded interrupts (``SCHED_FIFO`` 50).
FIFO = 10


def sample(port: int, iface: str, counter: str, sender: bool) -> Dict[str, object]:
    t0 = time.time()
    socks = counters.tcp_bytes(port, sender=sender)
    t1 = time.time()
    value = counters.link_stats([iface])[iface][counter]
    t2 = time.time()
    out: Dict[str, object] = {"t": (t0 + t1) / 2, "t_start": t0, "t_end": t1,
                              "t_counter": (t1 + t2) / 2, "counter_s": t2 - t1,
                              "sockets": {f"{k[0]}|{k[1]}": v for k, v in socks.items()},
                              "counter": value, "cpu": list(counters.cpu_total())}
    if sender:  # after the instant's own reads: how each sender was limited
        out["limits"] = {f"{k[0]}|{k[1]}": list(v) for k, v in counters.tcp_limits(port).items()}
    return out


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--iface", required=True)
    ap.add_argument("--counter", choices=["rx_bytes", "tx_bytes"], required=True)
    ap.add_argument("--sender", action="store_true")
    args = ap.parse_args(argv)
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}", args.iface):
        ap.error(f"bad interface name {args.iface!r}")
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(FIFO))
    except OSError:  # not root: an ordinary sampler, whose samples say how long they took
        pass
    sample(args.port, args.iface, args.counter, args.sender)  # imports and sockets warm
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        try:
            instants = [float(x) for x in line.split()]
        except ValueError:
            ap.error(f"bad instants {line.strip()!r}")
        out = []
        for at in instants:
            while True:
                left = at - time.time()
                if left <= 0:
                    break
                time.sleep(min(left, 0.2))
            out.append(sample(args.port, args.iface, args.counter, args.sender))
        print(json.dumps({"samples": out}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
