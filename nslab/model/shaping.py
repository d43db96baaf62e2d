"""Link shaping specs and the ``tc`` command lines that realise them.

Pure logic: parsing rates and building argv/batch lines, no root needed.
Rates use htb (default) or tbf with a burst large enough for line rate;
``overhead`` adds per-frame bytes to the shaper's rate spec so that,
e.g., ``overhead=24`` (preamble 8 + inter-frame gap 12 + FCS 4) makes the
shaper count real Ethernet wire time and 64-byte frames see real frame rates.
Delay, jitter and loss need netem; the lab refuses them where the kernel
lacks it (see :mod:`nslab.runtime.caps`).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import List, Optional, Union

from ..errors import InputError
from .render import line

#: Preamble (7) + SFD (1) + inter-frame gap (12) + FCS (4): bytes on the wire
#: that a veth's skb does not carry.
ETHERNET_OVERHEAD = 24

_UNITS = {
    "": 1, "bit": 1, "bps": 1, "b": 1,
    "k": 1e3, "kbit": 1e3, "kbps": 1e3, "kb": 1e3,
    "m": 1e6, "mbit": 1e6, "mbps": 1e6, "mb": 1e6,
    "g": 1e9, "gbit": 1e9, "gbps": 1e9, "gb": 1e9,
    "t": 1e12, "tbit": 1e12, "tbps": 1e12,
}
_RATE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)(?:/s)?\s*$")
_TIME_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(us|ms|s)?\s*$")


def parse_rate(value: Union[str, int, float], default_unit: str = "mbit") -> int:
    """Parse a link rate into bit/s.

    Accepts ``"1Gbit"``, ``"100 Mbit/s"``, ``"100M"``, ``"1g"`` and bare
    numbers (in ``default_unit``; Mininet's ``bw`` is Mbit/s).

    Raises:
        InputError: the value is not a rate (``"10 parsecs"``) or not positive.
    """
    if isinstance(value, bool):
        raise InputError(f"bad rate {value!r}")
    if isinstance(value, (int, float)):
        bps = float(value) * _UNITS[default_unit]
    else:
        m = _RATE_RE.fullmatch(str(value))
        unit = m.group(2).lower() if m else None
        if not m or unit not in _UNITS:
            raise InputError(
                f"bad rate {value!r}: use a number with a unit such as 100Mbit, 1Gbit, 500k")
        bps = float(m.group(1)) * (_UNITS[unit] if unit else _UNITS[default_unit])
    if not math.isfinite(bps):
        raise InputError(f"bad rate {value!r}: not a finite number")
    if bps <= 0:
        raise InputError(f"bad rate {value!r}: must be positive")
    if bps < 1:
        # tc would be handed `rate 0bit` (its rates are whole bits per second)
        raise InputError(f"bad rate {value!r}: below 1 bit/s")
    if bps > 1e12:
        raise InputError(f"bad rate {value!r}: above 1 Tbit/s")
    return int(bps)


def parse_time_ms(value: Union[str, int, float]) -> float:
    """Parse a delay/jitter (``"5ms"``, ``"200us"``, bare number = ms) into ms."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        ms = float(value)
    else:
        m = _TIME_RE.fullmatch(str(value))
        if not m:
            raise InputError(f"bad delay {value!r}: use e.g. 5ms or 200us")
        ms = float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3, None: 1.0}[m.group(2)]
    if ms < 0:
        raise InputError(f"bad delay {value!r}: must not be negative")
    return ms


def format_rate(bps: float) -> str:
    """Human form of a rate, e.g. ``954.2 Mbit/s``."""
    for unit, div in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= div:
            return f"{bps / div:.1f} {unit}"
    return f"{bps:.0f} bit/s"


@dataclass(frozen=True)
class Shaping:
    """How one direction of a link is shaped.

    Attributes:
        rate: bit/s, or None for unshaped.
        qdisc: ``htb`` or ``tbf``.
        burst: bytes; default scales with rate (0.5 ms at rate, at least 16 KiB)
            so TCP reaches line rate (1 Gbit/s gets 64 KiB).
        overhead: extra bytes per frame counted by the shaper (24 = Ethernet framing).
        delay_ms, jitter_ms, loss_pct: netem parameters (need netem in the kernel).
        limit: queue length in packets (netem/htb leaf), None for default.
    """

    rate: Optional[int] = None
    qdisc: str = "htb"
    burst: Optional[int] = None
    overhead: int = 0
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss_pct: float = 0.0
    limit: Optional[int] = None

    def __post_init__(self) -> None:
        if self.qdisc not in ("htb", "tbf"):
            raise InputError(f"bad shaping qdisc {self.qdisc!r}: use htb or tbf")
        if not 0 <= self.loss_pct <= 100:
            raise InputError(f"bad loss {self.loss_pct}%: must be within 0..100")
        if self.overhead < 0 or self.overhead > 255:
            raise InputError(f"bad framing overhead {self.overhead}: must be within 0..255 bytes")
        if self.jitter_ms and not self.delay_ms:
            raise InputError("jitter needs a delay")
        if self.limit is not None and self.limit <= 0:
            raise InputError(f"bad queue limit {self.limit}: must be positive")

    @property
    def needs_netem(self) -> bool:
        return bool(self.delay_ms or self.jitter_ms or self.loss_pct)

    @property
    def empty(self) -> bool:
        return self.rate is None and not self.needs_netem

    def effective_burst(self) -> int:
        if self.burst:
            return self.burst
        assert self.rate is not None
        return max(16 * 1024, int(self.rate / 8 * 0.0005))

    def tc_batch(self, dev: str) -> List[str]:
        """The ``tc -batch`` lines that apply this shaping to ``dev``'s egress."""
        out: List[str] = []
        # Per-frame overhead goes on the rate spec (htb/tbf ``overhead``), which the
        # kernel adds to every packet; a ``stab`` size table was measured here to
        # let TCP exceed the shaped rate. The lab turns GSO off on such
        # interfaces so that every packet is one frame.
        ovh = ["overhead", self.overhead] if self.overhead else []
        netem_parent = ["root", "handle", "10:"]
        if self.rate is not None:
            burst = self.effective_burst()
            if self.qdisc == "htb":
                out.append(line("qdisc", "add", "dev", dev, "root", "handle", "1:", "htb",
                                "default", "1"))
                out.append(line("class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb",
                                "rate", f"{self.rate}bit", "burst", burst, "cburst", burst, *ovh))
            else:
                out.append(line("qdisc", "add", "dev", dev, "root", "handle", "1:", "tbf", "rate",
                                f"{self.rate}bit", "burst", burst, "latency", "50ms", *ovh))
            netem_parent = ["parent", "1:1", "handle", "10:"]
        if self.needs_netem:
            opts: List[object] = []
            if self.delay_ms:
                opts += ["delay", _ms(self.delay_ms)]
                if self.jitter_ms:
                    opts.append(_ms(self.jitter_ms))
            if self.loss_pct:
                opts += ["loss", f"{_fixed(self.loss_pct)}%"]
            if self.limit:
                opts += ["limit", self.limit]
            out.append(line("qdisc", "add", "dev", dev, *netem_parent, "netem", *opts))
        elif self.limit and self.rate is not None and self.qdisc == "htb":
            out.append(line("qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", "pfifo",
                            "limit", self.limit))
        return out


def _ms(ms: float) -> str:
    """A time for tc in ms without an exponent (``0.2ms``, never ``2e-01ms``)."""
    return f"{_fixed(ms)}ms"


def _fixed(x: float) -> str:
    """A number without an exponent (tc does not read ``1e-05``)."""
    return f"{x:.6f}".rstrip("0").rstrip(".") or "0"


def frame_rate(link_bps: float, frame_size: int, overhead: int = 20) -> float:
    """Theoretical maximum frames/s of ``frame_size``-byte frames (incl. FCS) on a link.

    ``overhead`` counts preamble+SFD (8) and inter-frame gap (12) per frame.
    E.g. 64-byte frames at 100 Mbit/s: 148,810 fps.
    """
    return link_bps / ((frame_size + overhead) * 8)


def goodput_ceiling(rate_bps: float, mss: int = 1448, framing: bool = False) -> float:
    """Most TCP payload a link of ``rate_bps`` carries in full-size segments.

    Per segment: TCP header with timestamps (32) + IP (20) + Ethernet (14), plus
    24 bytes of preamble, gap and FCS when framing is modelled. E.g. 1 Gbit/s:
    956 Mbit/s, or 941 with framing (what real GbE gives TCP).
    """
    wire = mss + 32 + 20 + 14 + (24 if framing else 0)
    return rate_bps * mss / wire
