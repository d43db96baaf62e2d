"""Records of file studies, typed and versioned (version 1 is today's format).

``params`` are the sweep keys of the point (and ``repeat``); ``values`` the
metric values (``NAME`` or ``NAME.VALUE``, None where a value could not be
measured), ``series`` each goodput metric's bit/s per second, ``events``
what was done when, ``captures`` the packet captures the file asked for
(``raw/...pcapng``; absent in records of runs without them).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from nslab.store.records import Record, RecordSchema, Strict


class EventDone(Strict):
    do: str
    target: str
    at: float
    #: seconds into the trial when the event began to be applied (None in
    #: records made before it was kept); ``done_at`` when that returned
    begun_at: Optional[float] = None
    done_at: float
    #: a link event: whether an end of the link is a switch, whose other
    #: ports' nodes see no carrier change (None: not a link event, or a
    #: record made before it was kept)
    switch: Optional[bool] = None


class CaptureDone(Strict):
    """One packet capture of a trial: its link, its file (relative to the run
    directory; None if it was skipped), what dumpcap wrote, and why it
    stopped early or was skipped, if it did."""

    link: str
    file: Optional[str] = None
    packets: Optional[int] = None
    bytes: int = 0
    error: Optional[str] = None


class FileMeasurements(Strict):
    values: Dict[str, Optional[float]]
    series: Dict[str, List[float]] = {}
    links: Dict[str, Dict[str, int]] = {}
    events: List[EventDone] = []
    #: why a trial cannot count (e.g. a flow reported nothing); empty when valid
    invalid: List[str] = []
    captures: Dict[str, CaptureDone] = {}


class FileRecord(Record[Dict[str, Any], FileMeasurements]):
    pass


SCHEMA = RecordSchema(FileRecord, version=1)
