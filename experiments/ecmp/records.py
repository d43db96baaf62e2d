"""The ECMP study's records, typed and versioned (version 1 is today's format)."""
from __future__ import annotations

from typing import Dict, List, Optional

from nslab.store.records import Record, RecordSchema, Strict


class EcmpPoint(Strict):
    policy: int
    trial: int


class Stream(Strict):
    id: str
    local_port: Optional[int]
    bps: float
    link: Optional[str]


class EcmpMeasurements(Strict):
    streams: List[Stream]
    sum_bps: float
    sum_reported_by_iperf: Optional[float]
    split: Optional[str]
    streams_per_link: Dict[str, int]
    unassigned_streams: int
    link_bytes: Dict[str, int]
    link_mbps_avg: Dict[str, float]
    policy_set_in: str


class EcmpRecord(Record[EcmpPoint, EcmpMeasurements]):
    pass


SCHEMA = RecordSchema(EcmpRecord, version=1)
