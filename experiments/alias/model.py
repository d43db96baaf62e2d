"""The alias study's pure logic: addresses, batch lines, the window's payload,
validity, the TCP ceiling, and the shape of a series. No system access."""
from __future__ import annotations

import ipaddress
import statistics
from typing import Any, Dict, List, Optional, Sequence, Tuple

from nslab.errors import InputError


def alias_addresses(template: str, n: int, prefix: int = 16) -> List[str]:
    """The addresses of aliases 1..n from a ``%d`` template; raise if any is invalid."""
    if not 1 <= prefix <= 32:
        raise InputError(f"prefix length {prefix} is out of range 1..32")
    if template.count("%d") != 1 or template.replace("%d", "").count("%"):
        raise InputError(f"address template {template!r} must contain exactly one %d "
                         "(e.g. 192.168.2.%d)")
    out = []
    for i in range(1, n + 1):
        text = template.replace("%d", str(i))
        try:
            ip = ipaddress.IPv4Address(text)
        except ValueError:
            raise InputError(f"alias {i}: {text!r} from template {template!r} is not an IPv4 "
                             f"address (N={n} is more than the template allows)") from None
        if ip.is_multicast or ip.is_loopback or str(ip).endswith(".255") or str(ip).endswith(".0"):
            raise InputError(f"alias {i}: {ip} is not a usable host address "
                             f"(N={n} is more than the subnet allows)")
        out.append(str(ip))
    return out


def alias_batch(iface: str, addresses: Sequence[str], prefix: int = 16) -> List[str]:
    """``ip -batch`` lines adding labelled aliases ``iface:N`` (N from 1)."""
    from nslab.model.render import line
    return [line("addr", "add", ipaddress.ip_interface(f"{a}/{prefix}"), "dev", iface,
                 "label", f"{iface}:{i}") for i, a in enumerate(addresses, 1)]


def window_payload(before: Dict[Tuple[str, str], int],
                   after: Dict[Tuple[str, str], int]) -> Tuple[int, int]:
    """Payload moved between two samples, socket by socket: a socket opened in
    between counts from zero; one closed in between is missing from ``after``
    (its last bytes cannot be counted: returned as the second value, so the
    point can be judged). Never negative, unlike a difference of sums."""
    moved = sum(v - before.get(k, 0) for k, v in after.items())
    closed = sum(1 for k in before if k not in after)
    return moved, closed


#: A point whose senders spent at least this share of their busy time waiting
#: for send-buffer space, while the link carried less than LINK_BOUND of its
#: goodput ceiling, measured the senders, not the link.
SNDBUF_STALL_PCT = 50.0
LINK_BOUND = 0.95


def invalid_reasons(m: Dict[str, Any], n: int, window: float) -> List[str]:
    """Why a point's receiver figure does not measure what it claims (empty: valid).

    The window must lie inside the traffic: every connection open at both ends
    of it, none closed in between, every client started on time, and each
    sample short against the window (on a slow or emulated CPU a 3 s point can
    fail all of these; a longer --duration fixes it).

    And the link must be what set the rate. Behind a shaper a sender is often
    send-buffer limited by design (its data waits in the shaper's queue), so
    that alone proves nothing; but senders stalled on their send buffers for
    most of their busy time while the link ran below its ceiling mean the
    senders' buffers (the emulation), not the aliases, set the figure.
    """
    out = []
    stalled, ceiling = m.get("sndbuf_limited_pct"), m.get("link_ceiling_bps")
    if (stalled is not None and ceiling and stalled >= SNDBUF_STALL_PCT
            and m["receiver_bps"] < LINK_BOUND * ceiling):
        out.append(f"the senders were send-buffer limited {stalled:.0f} % of their busy time "
                   f"while the link carried {100 * m['receiver_bps'] / ceiling:.0f} % of its "
                   "ceiling")
    if m["late_start"]:
        out.append(f"a client started {-m['start_margin_s']:.2f} s late")
    for when in ("start", "end"):
        if m[f"sockets_at_window_{when}"] < n:
            out.append(f"{m[f'sockets_at_window_{when}']}/{n} connections open at the window's "
                       f"{when}")
    if m["sockets_closed_in_window"]:
        out.append(f"{m['sockets_closed_in_window']} connections closed inside the window")
    if window <= 0 or m["sample_s"] > 0.1 * window:
        out.append(f"a sample took {m['sample_s']:.2f} s of a {window:.2f} s window")
    return out


def rise(series: Dict[int, float]) -> Optional[float]:
    """Relative change from the small-N plateau (N <= 16) to the largest N."""
    ns = sorted(series)
    small = [series[n] for n in ns if n <= 16]
    if not small or ns[-1] <= 16:
        return None
    base = statistics.median(small)
    return (series[ns[-1]] - base) / base if base else None
