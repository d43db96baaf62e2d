"""The alias study's records, typed and versioned.

Version 1 (before per-socket windows): no ``sockets_closed_in_window``,
``sample_s`` or ``invalid``, and ``receiver_measured_at`` only in two-box
runs. Version 2 adds them; a v1 record loads with them unknown (None), which
reports show as "not checked". Version 3 adds how the senders were limited
(``sndbuf_limited_pct``, ``rwnd_limited_pct``: shares of their busy time, from
``tcp_info``) and the link's goodput ceiling; older records have them unknown.
Version 4 adds the iperf servers started again before the point
(``servers_restarted``); older records have it unknown (None).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from typing_extensions import Literal

from nslab.store.records import Record, RecordSchema, Strict


class AliasPoint(Strict):
    mode: Literal["alias", "parallel"]
    n: int
    repeat: int


class AliasMeasurements(Strict):
    receiver_bps: float
    receiver_l2_bps: float
    clients_sum_bps: float
    window_s: float
    sockets_at_window_start: int
    sockets_at_window_end: int
    sockets_closed_in_window: Optional[int]
    clients_reported: int
    clients_finished: int
    streams: int
    spawn_spread_s: float
    start_margin_s: float
    late_start: bool
    cpu_busy_pct: float
    receiver_measured_at: str
    start_time: float
    sample_s: Optional[float]
    #: why the point is not a valid measurement (empty: valid; None: not checked, v1)
    invalid: Optional[List[str]]
    #: share of the senders' busy time limited by their send buffer / the peer's
    #: receive window, over the window, percent (None: not measured, v1-v2)
    sndbuf_limited_pct: Optional[float] = None
    rwnd_limited_pct: Optional[float] = None
    #: the most TCP payload the shaped link carries (None: unshaped or v1-v2)
    link_ceiling_bps: Optional[float] = None
    #: the addresses whose iperf server had ended and was started again just
    #: before this point (:meth:`AliasRunner.mend_servers`; None: not
    #: recorded, v1-v3)
    servers_restarted: Optional[List[str]] = None


class AliasRecord(Record[AliasPoint, AliasMeasurements]):
    pass


def _v1_to_v2(rec: Dict[str, Any]) -> Dict[str, Any]:
    m = dict(rec["measurements"])
    m.setdefault("receiver_measured_at", "receiver sockets, bytes received")
    for key in ("sockets_closed_in_window", "sample_s", "invalid"):
        m.setdefault(key, None)
    rec["measurements"] = m
    return rec


def _v2_to_v3(rec: Dict[str, Any]) -> Dict[str, Any]:
    m = dict(rec["measurements"])
    for key in ("sndbuf_limited_pct", "rwnd_limited_pct", "link_ceiling_bps"):
        m.setdefault(key, None)
    rec["measurements"] = m
    return rec


def _v3_to_v4(rec: Dict[str, Any]) -> Dict[str, Any]:
    m = dict(rec["measurements"])
    m.setdefault("servers_restarted", None)
    rec["measurements"] = m
    return rec


SCHEMA = RecordSchema(AliasRecord, version=4,
                      upgrades={1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4})


def valid(rec: AliasRecord) -> bool:
    """A point the fidelity checks passed (or that predates them), not
    disturbed by other tasks on the host (:func:`nslab.store.records.disturbed`)."""
    from nslab.store.records import disturbed
    return not rec.measurements.invalid and not disturbed(rec)
