"""The ECMP study's pure logic: split labels, chance, captures to links."""
from __future__ import annotations

import itertools
import re
from collections import Counter
from typing import Dict, List

from nslab.errors import InputError

PORT = 5001


def split_label(counts: List[int]) -> str:
    """``[1, 2]`` -> ``"2+1"``; ``[3, 0]`` -> ``"3+0"``: streams per link, largest first."""
    return "+".join(str(c) for c in sorted(counts, reverse=True))


def chance(streams: int, links: int) -> Dict[str, float]:
    """Probability of each split if every stream picks a link uniformly at random.

    3 streams on 2 links: ``{"2+1": 0.75, "3+0": 0.25}``.
    """
    total = links ** streams
    if total > 2_000_000:
        raise InputError(f"{streams} streams on {links} links: too many cases to enumerate")
    dist: Counter = Counter()
    for assign in itertools.product(range(links), repeat=streams):
        dist[split_label([assign.count(l) for l in range(links)])] += 1
    return {k: v / total for k, v in sorted(dist.items(), key=lambda kv: -kv[1])}


_TCPDUMP_RE = re.compile(r"IP (?P<src>[\d.]+)\.(?P<sport>\d+) > (?P<dst>[\d.]+)\.(?P<dport>\d+):")


def parse_tcpdump_ports(text: str, dport: int = PORT) -> Counter:
    """Packets per source port in ``tcpdump -nn -q`` output, for packets to ``dport``."""
    c: Counter = Counter()
    for m in _TCPDUMP_RE.finditer(text):
        if int(m.group("dport")) == dport:
            c[int(m.group("sport"))] += 1
    return c


def assign_links(captures: Dict[str, Counter]) -> Dict[int, str]:
    """Each source port goes to the interface where most of its packets were seen."""
    ports = set().union(*[set(c) for c in captures.values()]) if captures else set()
    return {p: max(captures, key=lambda i: captures[i].get(p, 0)) for p in ports}


def trial_invalid(streams_seen: int, unassigned: int, streams: int) -> List[str]:
    """Why an ECMP trial cannot say how its streams were hashed (empty: it can):
    a stream missing from iperf's report, or one whose link the captures could
    not tell."""
    out = []
    if streams_seen < streams:
        out.append(f"{streams_seen} of {streams} streams reported")
    if unassigned:
        out.append(f"{unassigned} stream(s) on no captured link")
    return out
