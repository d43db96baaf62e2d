"""Judging one try of a check from what a tool printed: pure functions of
``ping``, ``ip -j route`` and ``ip -s -j link`` output (tested on captured
output, no root), each giving an :class:`~nslab.model.checks.Outcome`:
did it hold, what was expected and seen in a few words, and the differences.

What a check runs, and its polling, is :mod:`nslab.traffic.checkrun`; the
kinds an extension judges (FRR's ``bgp`` and ``bfd``) are judged there.
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from ..model import bounded
from ..model.checks import CannotRun, Interface, Outcome, Ping, Route, Throughput
from ..model.shaping import format_rate
from ..model.subset import differences

_SENT_RE = re.compile(r"(\d+) packets transmitted, (\d+) (?:packets )?received")
_RTT_RE = re.compile(r"= ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms")


@dataclass
class PingStats:
    """What ``ping``'s summary says: echoes sent and answered, round trips (ms)."""

    sent: int
    received: int
    rtt_min: Optional[float] = None
    rtt_avg: Optional[float] = None
    rtt_max: Optional[float] = None

    @property
    def loss_pct(self) -> float:
        return 100.0 if self.sent == 0 else 100.0 * (self.sent - min(self.received, self.sent)) \
            / self.sent


def ping_argv(check: Ping, address: str) -> List[str]:
    """iputils ``ping``: numeric, ``count`` echoes ``interval`` s apart, each
    awaited ``wait`` s, from ``source`` if given."""
    argv = ["ping", "-n", "-c", str(check.count), "-i", f"{check.interval:g}",
            "-W", str(check.wait)]
    if check.source is not None:
        argv += ["-I", str(check.source)]
    return argv + [address]


def parse_ping(text: str) -> Optional[PingStats]:
    """The summary of iputils ``ping`` output, or None if it printed none."""
    m = _SENT_RE.search(text)
    if not m:
        return None
    stats = PingStats(int(m.group(1)), int(m.group(2)))
    r = _RTT_RE.search(text)
    if r:
        stats.rtt_min, stats.rtt_avg, stats.rtt_max = (float(r.group(i)) for i in (1, 2, 3))
    return stats


def judge_ping(check: Ping, address: str, stdout: str, stderr: str = "") -> Outcome:
    """Lost at most ``loss`` %, the average round trip within ``rtt``. A ping
    that sent nothing (no route: ``connect: Network is unreachable``) lost all."""
    expected = f"loss <= {check.loss:g}%" + (f", rtt {check.rtt.text('ms')}" if check.rtt else "")
    stats = parse_ping(stdout)
    if stats is None:
        why = _first_line(stderr) or _first_line(stdout) or "no reply"
        return Outcome(False, expected, f"100% lost ({why})", [f"loss: 100% ({why})"])
    seen = f"{stats.received}/{stats.sent} answered ({stats.loss_pct:.0f}% lost)"
    if stats.rtt_avg is not None:
        seen += f", rtt {stats.rtt_avg:.3g} ms"
    diff = []
    if stats.loss_pct > check.loss:
        diff.append(f"loss: expected <= {check.loss:g}%, saw {stats.loss_pct:.0f}% "
                    f"({stats.sent - stats.received} of {stats.sent} to {address})")
    if check.rtt is not None:
        if stats.rtt_avg is None:
            diff.append("rtt: no reply to time")
        elif not check.rtt.holds(stats.rtt_avg):
            diff.append(f"rtt: expected {check.rtt.text('ms')}, saw {stats.rtt_avg:.3g} ms "
                        "(average)")
    return Outcome(not diff, expected, seen, diff)


# -- routes -----------------------------------------------------------------------------
def route_argv(check: Route) -> List[str]:
    family = "-6" if check.dst != "default" and ":" in check.dst else "-4"
    return ["ip", "-j", family, "route", "show", "table", "main"]


def _dst(route: Dict[str, Any]) -> Optional[str]:
    """A route's destination as a canonical prefix (``ip`` writes a host
    route without its ``/32``), or ``default``."""
    dst = route.get("dst")
    if not isinstance(dst, str):
        return None
    if dst == "default":
        return dst
    try:
        return str(ipaddress.ip_network(dst, strict=False))
    except ValueError:
        return None


def nexthops(route: Dict[str, Any]) -> List[Dict[str, Any]]:
    """A route's paths: its nexthop list, or itself (a route with one path)."""
    hops = route.get("nexthops")
    if isinstance(hops, list) and hops:
        return [h for h in hops if isinstance(h, dict)]
    return [route]


def _route_text(route: Dict[str, Any]) -> str:
    hops = nexthops(route)
    # by name: the kernel lists an ECMP route's paths in the order they came
    devs = sorted(str(h.get("dev")) for h in hops if h.get("dev"))
    proto = route.get("protocol")
    return (f"{len(hops)} nexthop{'' if len(hops) == 1 else 's'}"
            + (f" via {', '.join(devs)}" if devs else "")
            + (f" ({proto})" if isinstance(proto, str) else ""))


def parse_json(text: str, what: str) -> Any:
    """Bounded JSON a tool printed; :class:`CannotRun` naming ``what`` otherwise."""
    try:
        return bounded.loads(text or "null")
    except ValueError as exc:
        raise CannotRun(f"{what}: not JSON ({_first_line(str(exc))})") from None


def judge_route(check: Route, routes: Any) -> Outcome:
    """``routes``: the JSON of ``ip -j route show table main``."""
    if not isinstance(routes, list):
        raise CannotRun("ip -j route: not a list of routes")
    found = sorted((r for r in routes if isinstance(r, dict) and _dst(r) == check.dst),
                   key=lambda r: r.get("metric", 0) if isinstance(r.get("metric"), int) else 0)
    if not check.present:
        expected = "absent"
        if not found:
            return Outcome(True, expected, "absent")
        return Outcome(False, expected, _route_text(found[0]),
                       [f"{check.dst}: expected absent, saw {_route_text(found[0])}"])
    expected = "present" + (f", {check.nexthops} nexthop{'' if check.nexthops == 1 else 's'}"
                            if check.nexthops else "")
    if check.expect:
        expected += ", " + ", ".join(f"{k} {v}" for k, v in check.expect.items())
    if not found:
        return Outcome(False, expected, "absent", [f"{check.dst}: missing"])
    route = found[0]
    diff = []
    if check.nexthops is not None and len(nexthops(route)) != check.nexthops:
        diff.append(f"nexthops: expected {check.nexthops}, saw {len(nexthops(route))}")
    if check.expect:
        diff += [str(d) for d in differences(check.expect, route)]
    return Outcome(not diff, expected, _route_text(route), diff)


# -- interfaces -------------------------------------------------------------------------
def interface_argv(dev: str) -> List[str]:
    return ["ip", "-s", "-j", "link", "show", "dev", dev]


def counters_of(link: Dict[str, Any]) -> Dict[str, int]:
    """``rx_bytes``, ``tx_dropped``... of one ``ip -s -j link`` object."""
    stats = link.get("stats64") or link.get("stats") or {}
    out: Dict[str, int] = {}
    for side in ("rx", "tx"):
        part = stats.get(side) if isinstance(stats, dict) else None
        for key in ("bytes", "packets", "errors", "dropped"):
            value = part.get(key) if isinstance(part, dict) else None
            if isinstance(value, int) and not isinstance(value, bool):
                out[f"{side}_{key}"] = value
    return out


def is_up(link: Dict[str, Any]) -> bool:
    """Operationally up: ``UP``, or ``UNKNOWN`` with a carrier (``lo``)."""
    state = link.get("operstate")
    flags = link.get("flags")
    return state == "UP" or (state == "UNKNOWN" and isinstance(flags, list)
                             and "LOWER_UP" in flags)


def judge_interface(check: Interface, links: Any, stderr: str = "") -> Outcome:
    """``links``: the JSON of ``ip -s -j link show dev DEV`` (``None``: the
    device is not there)."""
    want: List[str] = []
    if check.state:
        want.append(check.state)
    if check.mtu is not None:
        want.append(f"mtu {check.mtu}")
    want += [f"{k} {b.text()}" for k, b in check.counters.items()]
    if check.expect:
        want.append("as expected")
    expected = ", ".join(want)
    link = links[0] if isinstance(links, list) and links and isinstance(links[0], dict) else None
    if link is None:
        why = _first_line(stderr) or "no such interface"
        return Outcome(False, expected, "absent", [f"{check.interface}: missing ({why})"])
    up = is_up(link)
    counters = counters_of(link)
    seen_parts = [f"{'up' if up else 'down'} ({link.get('operstate', '?')})",
                  f"mtu {link.get('mtu', '?')}"]
    seen_parts += [f"{k} {counters.get(k, '?')}" for k in check.counters]
    diff = []
    if check.state is not None and (check.state == "up") != up:
        diff.append(f"state: expected {check.state}, saw {link.get('operstate', '?')}")
    if check.mtu is not None and link.get("mtu") != check.mtu:
        diff.append(f"mtu: expected {check.mtu}, saw {link.get('mtu')}")
    for key, bound in check.counters.items():
        value = counters.get(key)
        if value is None:
            diff.append(f"{key}: missing (expected {bound.text()})")
        elif not bound.holds(value):
            diff.append(f"{key}: expected {bound.text()}, saw {value}")
    if check.expect:
        diff += [str(d) for d in differences(check.expect, link)]
    return Outcome(not diff, expected, ", ".join(seen_parts), diff)


# -- throughput -------------------------------------------------------------------------
def judge_throughput(check: Throughput, bps: Optional[float], why: str = "") -> Outcome:
    """``bps``: what iperf measured (None: no report, ``why`` says what it printed)."""
    expected = f">= {format_rate(check.at_least)}"
    if bps is None:
        seen = f"no transfer ({why or 'no report'})"
        return Outcome(False, expected, seen, [f"throughput: expected {expected}, saw {seen}"])
    seen = format_rate(bps)
    if bps < check.at_least:
        return Outcome(False, expected, seen, [f"throughput: expected {expected}, saw {seen}"])
    return Outcome(True, expected, seen)


def _first_line(text: str) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()[:200]
    return ""
